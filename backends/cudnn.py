"""``torch.backends.cudnn`` for programs written for PyTorch (``import torch.backends.cudnn as cudnn``).

The settings are accepted and readable (``cudnn.benchmark = True``, ``cudnn.deterministic = True``): tensorwire's
CUDA backend runs its own kernels and cuBLAS, never cuDNN, so there is nothing for them to tune, and its results are
deterministic and TF32-free whatever they say (``tensorwire.backends.torch_flags``). ``is_available()`` is False.
"""

from __future__ import annotations

from .torch_flags import flags_context

#: whether cuDNN may be used (torch's default True; tensorwire never uses it)
enabled: bool = True
#: whether cuDNN benchmarks convolution algorithms (torch's default False)
benchmark: bool = False
#: how many algorithms a benchmark tries (torch's default 10)
benchmark_limit: int = 10
#: whether cuDNN picks deterministic algorithms only (torch's default False; tensorwire's kernels always are)
deterministic: bool = False
#: whether cuDNN convolutions may use TF32 (torch's default True; tensorwire's never do)
allow_tf32: bool = True


def is_available() -> bool:
    """Whether cuDNN can be used: never (tensorwire's CUDA backend does not use cuDNN)."""
    return False


def version() -> int | None:
    """cuDNN's version: None, as torch answers where cuDNN is not available."""
    return None


def is_acceptable(tensor) -> bool:
    """Whether cuDNN would take ``tensor``: never (see :func:`is_available`)."""
    return False


def flags(enabled: bool = False, benchmark: bool = False, benchmark_limit: int = 10, deterministic: bool = False,
          allow_tf32: bool = True):
    """``with cudnn.flags(...)``: these settings inside the block, the previous ones after (torch's)."""
    return flags_context(globals(), enabled=enabled, benchmark=benchmark, benchmark_limit=benchmark_limit,
                         deterministic=deterministic, allow_tf32=allow_tf32)
