"""torch's pooling modules beyond :mod:`.layers`' 1-D/2-D max and average pools: 3-D pooling, adaptive max pooling,
power-average (LP) pooling, unpooling and fractional max pooling. Each is a thin module over its
``tw.nn.functional`` form (:mod:`.pooling_nd`, :mod:`.functional`), with torch's arguments, attributes and reprs."""

from __future__ import annotations

from . import functional as F
from .layers import AvgPool2d, _Pool
from .module import Module
from .tuples import _ntuple

__all__ = ["MaxPool3d", "AvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d",
           "AdaptiveAvgPool3d", "LPPool1d", "LPPool2d", "LPPool3d", "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d",
           "FractionalMaxPool2d", "FractionalMaxPool3d"]


class MaxPool3d(_Pool):
    """3-D max pooling over ``[N, C, D, H, W]`` (or ``[C, D, H, W]``); ``return_indices`` also gives the flat index
    of each maximum in its input volume (``F.max_pool3d``)."""

    def forward(self, input):  # noqa: A002
        return F.max_pool3d(input, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                            self.return_indices)


class AvgPool3d(AvgPool2d):
    """3-D average pooling (``F.avg_pool3d``: torch's divisors, ``count_include_pad`` and ``divisor_override``)."""

    def forward(self, input):  # noqa: A002
        return F.avg_pool3d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)


class _AdaptiveMaxPoolNd(Module):
    _fn = ""

    def __init__(self, output_size, return_indices: bool = False):
        super().__init__()
        self.output_size = output_size
        self.return_indices = return_indices

    def forward(self, input):  # noqa: A002
        return getattr(F, self._fn)(input, self.output_size, self.return_indices)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveMaxPool1d(_AdaptiveMaxPoolNd):
    """Max over torch's adaptive windows of ``[N, C, L]`` (``F.adaptive_max_pool1d``)."""

    _fn = "adaptive_max_pool1d"


class AdaptiveMaxPool2d(_AdaptiveMaxPoolNd):
    """Max over torch's adaptive windows of ``[N, C, H, W]``; ``None`` in ``output_size`` keeps that size."""

    _fn = "adaptive_max_pool2d"


class AdaptiveMaxPool3d(_AdaptiveMaxPoolNd):
    """Max over torch's adaptive windows of ``[N, C, D, H, W]``."""

    _fn = "adaptive_max_pool3d"


class AdaptiveAvgPool3d(Module):
    """Mean over torch's adaptive windows of ``[N, C, D, H, W]`` (``F.adaptive_avg_pool3d``)."""

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, input):  # noqa: A002
        return F.adaptive_avg_pool3d(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class _LPPoolNd(Module):
    _fn = ""

    def __init__(self, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False):
        super().__init__()
        self.norm_type = norm_type
        self.kernel_size = kernel_size
        self.stride = stride
        self.ceil_mode = ceil_mode

    def forward(self, input):  # noqa: A002
        return getattr(F, self._fn)(input, float(self.norm_type), self.kernel_size, self.stride, self.ceil_mode)

    def extra_repr(self) -> str:
        return (f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"ceil_mode={self.ceil_mode}")


class LPPool1d(_LPPoolNd):
    """``(sum over each window of x ** p) ** (1 / p)`` over ``[N, C, L]`` (``F.lp_pool1d``)."""

    _fn = "lp_pool1d"


class LPPool2d(_LPPoolNd):
    """``(sum over each window of x ** p) ** (1 / p)`` over ``[N, C, H, W]`` (``F.lp_pool2d``)."""

    _fn = "lp_pool2d"


class LPPool3d(_LPPoolNd):
    """``(sum over each window of x ** p) ** (1 / p)`` over ``[N, C, D, H, W]`` (``F.lp_pool3d``)."""

    _fn = "lp_pool3d"


class _MaxUnpoolNd(Module):
    _n = 2
    _fn = ""

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        tup = _ntuple(self._n)
        self.kernel_size = tup(kernel_size)
        self.stride = tup(stride if stride is not None else kernel_size)
        self.padding = tup(padding)

    def forward(self, input, indices, output_size=None):  # noqa: A002
        return getattr(F, self._fn)(input, indices, self.kernel_size, self.stride, self.padding, output_size)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpoolNd):
    """The partial inverse of :class:`MaxPool1d`: each value put back at its index, zeros elsewhere."""

    _n = 1
    _fn = "max_unpool1d"


class MaxUnpool2d(_MaxUnpoolNd):
    """The partial inverse of :class:`MaxPool2d`: each value put back at its index, zeros elsewhere."""

    _n = 2
    _fn = "max_unpool2d"


class MaxUnpool3d(_MaxUnpoolNd):
    """The partial inverse of :class:`MaxPool3d`: each value put back at its index, zeros elsewhere."""

    _n = 3
    _fn = "max_unpool3d"


class _FractionalMaxPoolNd(Module):
    _n = 2
    _fn = ""

    def __init__(self, kernel_size, output_size=None, output_ratio=None, return_indices: bool = False,
                 _random_samples=None):
        super().__init__()
        tup, name = _ntuple(self._n), type(self).__name__
        self.kernel_size = tup(kernel_size)
        self.return_indices = return_indices
        self.register_buffer("_random_samples", _random_samples)
        self.output_size = tup(output_size) if output_size is not None else None
        self.output_ratio = tup(output_ratio) if output_ratio is not None else None
        if output_size is None and output_ratio is None:
            raise ValueError(f"{name} requires specifying either an output size, or a pooling ratio")
        if output_size is not None and output_ratio is not None:
            raise ValueError("only one of output_size and output_ratio may be specified")
        if self.output_ratio is not None and not all(0 < r < 1 for r in self.output_ratio):
            raise ValueError(f"output_ratio must be between 0 and 1 (got {output_ratio})")

    def forward(self, input):  # noqa: A002
        return getattr(F, self._fn)(input, self.kernel_size, self.output_size, self.output_ratio,
                                    self.return_indices, _random_samples=self._random_samples)


class FractionalMaxPool2d(_FractionalMaxPoolNd):
    """Max pooling over pseudo-random windows (torch's intervals; the draws come from the cluster's generator unless
    ``_random_samples`` is given: ``F.fractional_max_pool2d``)."""

    _n = 2
    _fn = "fractional_max_pool2d"


class FractionalMaxPool3d(_FractionalMaxPoolNd):
    """3-D max pooling over pseudo-random windows (``F.fractional_max_pool3d``)."""

    _n = 3
    _fn = "fractional_max_pool3d"
