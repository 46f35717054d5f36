"""MLX (the optional ``[mps]`` extra), imported where it is first needed and in this one place.

Importing the plugin never imports MLX (``tensorwire.backends`` loads this package for torch.backends.mps's names,
without the extra): discovery (:mod:`.runtime`) and the Metal kernels' factory (:mod:`.metal_runtime`) ask for it
when they run. :mod:`.kernels`, which only a device with MLX imports, imports it at module level.
"""

from __future__ import annotations

from types import ModuleType


def mlx_core() -> ModuleType:
    """``mlx.core``; raises what importing it raises where MLX is absent or does not load (ImportError, or a build's
    own error)."""
    import mlx.core as mx  # lazy: MLX, the optional [mps] extra, may be absent (importing the plugin never loads it)

    return mx
