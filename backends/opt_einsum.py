"""``torch.backends.opt_einsum`` for programs written for PyTorch: ``tw.einsum`` contracts in the order it is
written and does not use the ``opt_einsum`` package, so ``is_available()`` is False and ``enabled`` is False."""

from __future__ import annotations

from .torch_flags import flags_context

#: whether einsum asks opt_einsum for a contraction order (False: tensorwire does not)
enabled: bool = False
#: opt_einsum's strategy ("auto", "greedy", "optimal" in torch), accepted and unused
strategy: str | None = None


def is_available() -> bool:
    """Whether einsum uses the opt_einsum package: never."""
    return False


def get_opt_einsum():
    """The opt_einsum package torch would use: None (tensorwire does not use it)."""
    return None


def flags(enabled: bool | None = None, strategy: str | None = None):
    """``with opt_einsum.flags(...)``: these settings inside the block, the previous ones after (torch's)."""
    settings = globals()
    return flags_context(settings, enabled=settings["enabled"] if enabled is None else enabled, strategy=strategy)
