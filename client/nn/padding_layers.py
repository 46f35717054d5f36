"""torch's padding modules (``ConstantPad{1,2,3}d``, ``ZeroPad{1,2,3}d``, ``ReflectionPad{1,2,3}d``,
``ReplicationPad{1,2,3}d``, ``CircularPad{1,2,3}d``): ``F.pad`` with a fixed ``padding`` (torch's tuples: an int
repeated for each side, a tuple kept as given) and mode."""

from __future__ import annotations

from . import functional as F
from .module import Module
from .tuples import _ntuple

__all__ = ["ConstantPad1d", "ConstantPad2d", "ConstantPad3d", "ZeroPad1d", "ZeroPad2d", "ZeroPad3d",
           "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d",
           "ReplicationPad3d", "CircularPad1d", "CircularPad2d", "CircularPad3d"]


class _PadNd(Module):
    """``F.pad(input, self.padding, <mode>)``: ``_n`` padded dims, so ``2 * _n`` padding sizes."""

    _n = 1
    _mode = "constant"

    def __init__(self, padding):
        super().__init__()
        self.padding = _ntuple(2 * self._n)(padding)

    def _check_input_dim(self, input) -> None:  # noqa: A002
        pass

    def forward(self, input):  # noqa: A002
        self._check_input_dim(input)
        return F.pad(input, self.padding, self._mode)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class _ConstantPadNd(_PadNd):
    def __init__(self, padding, value: float):
        super().__init__(padding)
        self.value = value

    def forward(self, input):  # noqa: A002
        return F.pad(input, self.padding, "constant", self.value)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"


class ConstantPad1d(_ConstantPadNd):
    """Pads the last dim with ``value``."""

    _n = 1


class ConstantPad2d(_ConstantPadNd):
    """Pads the last two dims with ``value``."""

    _n = 2


class ConstantPad3d(_ConstantPadNd):
    """Pads the last three dims with ``value``."""

    _n = 3


class ZeroPad1d(ConstantPad1d):
    """Pads the last dim with zeros."""

    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ZeroPad2d(ConstantPad2d):
    """Pads the last two dims with zeros."""

    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ZeroPad3d(ConstantPad3d):
    """Pads the last three dims with zeros."""

    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ReflectionPad1d(_PadNd):
    """Pads the last dim with its reflection (the edge value not repeated)."""

    _n, _mode = 1, "reflect"


class ReflectionPad2d(_PadNd):
    """Pads the last two dims with their reflection."""

    _n, _mode = 2, "reflect"


class ReflectionPad3d(_PadNd):
    """Pads the last three dims with their reflection."""

    _n, _mode = 3, "reflect"


class ReplicationPad1d(_PadNd):
    """Pads the last dim with copies of its edge values."""

    _n, _mode = 1, "replicate"


class ReplicationPad2d(_PadNd):
    """Pads the last two dims with copies of their edge values."""

    _n, _mode = 2, "replicate"


class ReplicationPad3d(_PadNd):
    """Pads the last three dims with copies of their edge values."""

    _n, _mode = 3, "replicate"


class _CircularPadNd(_PadNd):
    _mode = "circular"

    def _check_input_dim(self, input) -> None:  # noqa: A002
        n = self._n
        if input.ndim not in (n + 1, n + 2):
            raise ValueError(f"expected {n + 1}D or {n + 2}D input (got {input.ndim}D input)")


class CircularPad1d(_CircularPadNd):
    """Pads the last dim by wrapping it around (``[N, C, L]`` or ``[C, L]``)."""

    _n = 1


class CircularPad2d(_CircularPadNd):
    """Pads the last two dims by wrapping them around (``[N, C, H, W]`` or ``[C, H, W]``)."""

    _n = 2


class CircularPad3d(_CircularPadNd):
    """Pads the last three dims by wrapping them around (``[N, C, D, H, W]`` or ``[C, D, H, W]``)."""

    _n = 3
