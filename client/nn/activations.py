"""``tw.nn.functional``'s activations (``relu`` ... ``softmax``, ``dropout``): each one op of the op table, or a
short composition of them. :mod:`tensorwire.nn.functional` re-exports them."""

from __future__ import annotations

import math
import warnings

from tensorwire.creation import rand
from tensorwire.functions import where
from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DTypeError
from tensorwire.tensor import Tensor


def relu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    return input.relu_() if inplace else input.relu()


def relu6(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    out = input._rec("relu6", [input])
    return input._assign(out) if inplace else out


def gelu(input: Tensor, approximate: str = "none") -> Tensor:  # noqa: A002
    """GELU; ``approximate="tanh"`` gives the tanh approximation, as torch."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate argument must be either none or tanh, got {approximate!r}")
    return input._rec("gelu", [input], {"approximate": approximate})


def silu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    out = input._rec("silu", [input])
    return input._assign(out) if inplace else out


def mish(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """``input * tanh(softplus(input))``; ``inplace`` writes it into ``input`` (and returns it), as torch."""
    out = input * softplus(input).tanh()
    return input._assign(out) if inplace else out


def tanh(input: Tensor) -> Tensor:  # noqa: A002
    return input.tanh()


def sigmoid(input: Tensor) -> Tensor:  # noqa: A002
    return input.sigmoid()


def logsigmoid(input: Tensor) -> Tensor:  # noqa: A002
    return -softplus(-input)


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:  # noqa: A002
    out = input._rec("leaky_relu", [input], {"negative_slope": float(negative_slope)})
    return input._assign(out) if inplace else out


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:  # noqa: A002
    return input._rec("softplus", [input], {"beta": float(beta), "threshold": float(threshold)})


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:  # noqa: A002
    out = where(input > 0, input, input.expm1() * alpha)
    return input._assign(out) if inplace else out


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:  # noqa: A002
    """``input`` clamped to ``[min_val, max_val]``. An integer input keeps its dtype, the bounds truncated towards
    zero (torch's ``hardtanh(int64, -0.5, 0.5)`` is all zeros); torch refuses bool, and so do we.

    ``inplace`` with autograd: torch's ``hardtanh_`` differentiates through its result, so the input it overwrote is
    not needed; here the value is ``input`` where it lies strictly inside the bounds and the (constant) clamped value
    elsewhere, a ``where`` whose backward keeps only that mask, not the input ``clamp``'s would have saved."""
    if input.dtype is D.bool_:
        raise DTypeError("hardtanh: bool inputs are not supported (as in torch); convert first (x.long())")
    if not input.dtype.is_floating_point:
        min_val, max_val = math.trunc(min_val), math.trunc(max_val)
    if not inplace:
        return input.clamp(min_val, max_val)
    if not input.requires_grad:
        return input._assign(input.clamp(min_val, max_val))
    inside = (input > min_val) & (input < max_val)
    return input._assign(where(inside, input, input.detach().clamp(min_val, max_val)))


def glu(input: Tensor, dim: int = -1) -> Tensor:  # noqa: A002
    a, b = input.chunk(2, dim)
    return a * b.sigmoid()


def softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:  # noqa: A002
    """Softmax along ``dim``; without ``dim``, torch's deprecated implicit choice, warned of (:func:`_softmax_dim`).
    ``_stacklevel``: where the warning points, as torch's argument (3: the caller of this function)."""
    return input.softmax(_softmax_dim(input, dim, "softmax", _stacklevel), dtype=dtype)


def softmin(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:  # noqa: A002
    """``softmax(-input)`` (``dim``, ``_stacklevel`` as :func:`softmax`'s)."""
    return (-input).softmax(_softmax_dim(input, dim, "softmin", _stacklevel), dtype=dtype)


def log_softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:  # noqa: A002
    """``log(softmax(input))`` in one op (``dim``, ``_stacklevel`` as :func:`softmax`'s)."""
    return input.log_softmax(_softmax_dim(input, dim, "log_softmax", _stacklevel), dtype=dtype)


def _softmax_dim(x: Tensor, dim, name: str = "softmax", stacklevel: int = 3):
    """``dim``, or when it is None torch's legacy implicit choice (0 for 0-, 1- and 3-D inputs, else 1), with torch's
    deprecation warning at ``stacklevel`` (counted from this function, as ``warnings.warn``'s)."""
    if dim is not None:
        return dim
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call to include dim=X as an "
                  "argument.", UserWarning, stacklevel=stacklevel)
    return 0 if x.ndim in (0, 1, 3) else 1


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:  # noqa: A002
    """Zero elements with probability ``p`` and scale the rest by ``1 / (1 - p)``; the mask comes from the
    cluster's counter-based generator (``tw.manual_seed``), so it differs from torch's."""
    if p < 0 or p > 1:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0:
        return input
    if p == 1:
        out = input * 0
    else:
        keep = rand(input.shape, dtype=input.dtype, device=input._dev, session=input._s) >= p
        out = input * keep * (1.0 / (1.0 - p))
    return input._assign(out) if inplace else out

