"""``torch.cpu.amp``: ``autocast`` and ``GradScaler`` for ``cpu``, torch's deprecated spellings of
``tw.amp.autocast("cpu", ...)`` and ``tw.amp.GradScaler("cpu", ...)`` (each warns with torch's FutureWarning)."""

from __future__ import annotations

import warnings

from tensorwire.amp import GradScaler as _GradScaler
from tensorwire.amp import autocast as _autocast
from tensorwire.protocol import dtypes as D

__all__ = ["GradScaler", "autocast"]


class autocast(_autocast):  # noqa: N801 - torch's name
    """``autocast("cpu", ...)``, with torch's defaults for the cpu (bfloat16). Deprecated, as torch's."""

    def __init__(self, enabled: bool = True, dtype=D.bfloat16, cache_enabled: bool = True):
        warnings.warn("`torch.cpu.amp.autocast(args...)` is deprecated. Please use `torch.amp.autocast('cpu', "
                      "args...)` instead.", FutureWarning, stacklevel=2)
        super().__init__("cpu", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(_GradScaler):
    """``GradScaler("cpu", ...)``. Deprecated, as torch's."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True) -> None:
        warnings.warn("`torch.cpu.amp.GradScaler(args...)` is deprecated. Please use `torch.amp.GradScaler('cpu', "
                      "args...)` instead.", FutureWarning, stacklevel=2)
        super().__init__("cpu", init_scale=init_scale, growth_factor=growth_factor, backoff_factor=backoff_factor,
                         growth_interval=growth_interval, enabled=enabled)
