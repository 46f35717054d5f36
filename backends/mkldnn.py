"""``torch.backends.mkldnn`` for programs written for PyTorch: the settings are accepted and readable; tensorwire's
CPU backend does not use oneDNN (MKLDNN), so ``is_available()`` is False and the settings change nothing."""

from __future__ import annotations

from .torch_flags import flags_context

#: whether oneDNN may be used (torch's default True)
enabled: bool = True
#: whether oneDNN picks deterministic algorithms only (torch's default False)
deterministic: bool = False


def is_available() -> bool:
    """Whether oneDNN can be used: never (tensorwire's CPU kernels are its own and numpy's)."""
    return False


def flags(enabled: bool = False, deterministic: bool = False):
    """``with mkldnn.flags(...)``: these settings inside the block, the previous ones after (torch's)."""
    return flags_context(globals(), enabled=enabled, deterministic=deterministic)
