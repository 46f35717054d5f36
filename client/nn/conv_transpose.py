"""``ConvTranspose1d`` / ``ConvTranspose2d`` / ``ConvTranspose3d`` with torch's arguments, parameter layout and
initialisation.

The forward pass is ``F.conv_transpose2d``: one ``conv2d_grad_input`` op (the gradient of a convolution with
respect to its input is the transposed convolution), so every backend runs it and autograd differentiates it;
``F.conv_transpose3d`` is one ``conv_transpose2d`` per kernel depth (``nn/pooling_nd.py``).
"""

from __future__ import annotations

import math

from . import functional as F
from . import init
from .layers import _param
from .module import Module

__all__ = ["ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"]


class _ConvTransposeNd(Module):
    """A transposed convolution over ``_n`` spatial dims: ``weight`` ``[in_channels, out_channels / groups, *k]``,
    ``bias`` ``[out_channels]``, both drawn as torch draws them (Kaiming-uniform with ``a=sqrt(5)``, fan-in from the
    weight's second dim)."""

    _n = 2

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        output_padding=0,
        groups: int = 1,
        bias: bool = True,
        dilation=1,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ):
        super().__init__()
        n = self._n
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups:
            raise ValueError("out_channels must be divisible by groups")
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {type(self).__name__}')
        if isinstance(padding, str):
            raise ValueError(f"{type(self).__name__} does not take a string padding ({padding!r})")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = tuple(F._pair(kernel_size, n))
        self.stride = tuple(F._pair(stride, n))
        self.padding = tuple(F._pair(padding, n))
        self.dilation = tuple(F._pair(dilation, n))
        self.output_padding = tuple(F._pair(output_padding, n))
        self.transposed = True
        self.groups = groups
        self.padding_mode = padding_mode
        self.weight = _param(in_channels, out_channels // groups, *self.kernel_size, device=device, dtype=dtype)
        if bias:
            self.bias = _param(out_channels, device=device, dtype=dtype)
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            if fan_in:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def _output_padding(self, input, output_size) -> tuple[int, ...]:  # noqa: A002
        """The ``output_padding`` that gives ``output_size`` (torch's rule), or the module's own."""
        if output_size is None:
            return self.output_padding
        n = self._n
        lead = 2 if input.ndim == n + 2 else 1
        size = [int(v) for v in output_size]
        if len(size) == lead + n:
            size = size[lead:]
        if len(size) != n:
            raise ValueError(
                f"ConvTranspose{n}D: for {input.ndim}D input, output_size must have {n} or {lead + n} elements "
                f"(got {len(output_size)})"
            )
        lo = [
            (input.shape[lead + d] - 1) * self.stride[d]
            - 2 * self.padding[d]
            + self.dilation[d] * (self.kernel_size[d] - 1)
            + 1
            for d in range(n)
        ]
        hi = [m + s - 1 for m, s in zip(lo, self.stride)]
        if any(not a <= v <= b for v, a, b in zip(size, lo, hi)):
            raise ValueError(
                f"requested an output size of {size}, but valid sizes range from {lo} to {hi} (for an input of "
                f"{list(input.shape[input.ndim - n :])})"
            )
        return tuple(v - m for v, m in zip(size, lo))

    def extra_repr(self) -> str:
        n = self._n
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * n:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * n:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * n:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s


class ConvTranspose2d(_ConvTransposeNd):
    """torch's ``nn.ConvTranspose2d`` over ``[N, C, H, W]`` (or ``[C, H, W]``); ``forward(input, output_size=None)``
    picks the ``output_padding`` that gives ``output_size``."""

    _n = 2

    def forward(self, input, output_size=None):  # noqa: A002
        op = self._output_padding(input, output_size)
        return F.conv_transpose2d(
            input, self.weight, self.bias, self.stride, self.padding, op, self.groups, self.dilation
        )


class ConvTranspose1d(_ConvTransposeNd):
    """torch's ``nn.ConvTranspose1d`` over ``[N, C, L]`` (or ``[C, L]``)."""

    _n = 1

    def forward(self, input, output_size=None):  # noqa: A002
        op = self._output_padding(input, output_size)
        return F.conv_transpose1d(
            input, self.weight, self.bias, self.stride, self.padding, op, self.groups, self.dilation
        )


class ConvTranspose3d(_ConvTransposeNd):
    """torch's ``nn.ConvTranspose3d`` over ``[N, C, D, H, W]`` (or ``[C, D, H, W]``)."""

    _n = 3

    def forward(self, input, output_size=None):  # noqa: A002
        op = self._output_padding(input, output_size)
        return F.conv_transpose3d(
            input, self.weight, self.bias, self.stride, self.padding, op, self.groups, self.dilation
        )
