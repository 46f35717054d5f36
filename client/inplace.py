"""torch's in-place variants (``x.atan2_(y)``, ``x.clamp_min_(0)``, ``x.eq_(y)``) of Tensor methods that exist, and
the in-place methods with no out-of-place form here (``fill_diagonal_``, ``random_``, ``bernoulli_``, ``detach_``).

Each ``x.<name>_(*args)`` is ``x.<name>(*args)`` written back into ``x`` through ``Tensor._assign``, the one path every
in-place method takes (``add_``, ``mul_``, ``x[i] = v``): views see the new value and bases get it, autograd checks
the write (a leaf that requires grad refuses it, a value saved for a backward pass is caught at that pass), and the
result is cast to ``x``'s dtype where torch allows it: a result of a higher category raises torch's ``result type
Float can't be cast to the desired output type Long`` (``int_tensor.sin_()``), a comparison's bools become ``x``'s
dtype (``x.eq_(y)``: ones and zeros). ``float_power_`` keeps torch's stricter rule: ``x`` must be float64 (its result
always is).

This module is the last of ``client/_install.py``'s :data:`MODULES`, so the methods of every module before it (``i0``,
``polygamma``, ``erfinv`` ...) are there to be varied; a name whose in-place form ``Tensor`` already has (written by
hand, or added by an earlier module) keeps it. It is the one home of these forms: ``exp_``, ``sigmoid_`` ... were made
in ``client/tensor.py`` by a loop of their own before (no arguments: ``x.nan_to_num_(0.0)`` and ``x.round_(decimals=2)``
take them now, as torch's).
"""

from __future__ import annotations

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DTypeError, ShapeError, TensorwireError

from . import _install
from . import autograd_engine as _autograd
from . import combine as _combine
from . import creation as _creation
from . import random_fills as _random
from .tensor import Tensor

#: methods whose in-place variant ``<name>_`` is ``x._assign(x.<name>(...))``
VARIED = (
    # unary math
    "exp", "log", "sqrt", "sin", "cos", "tanh", "sigmoid", "relu", "abs", "neg", "floor", "ceil", "round", "trunc",
    "reciprocal", "square", "sign", "rsqrt", "log1p", "expm1", "erf", "tan", "exp2", "log2", "nan_to_num", "frac",
    "logical_not", "acos", "asin", "atan", "acosh", "asinh", "atanh", "arccos", "arcsin", "arctan", "arccosh",
    "arcsinh", "arctanh",
    "cosh", "sinh", "erfc", "erfinv", "lgamma", "digamma", "log10", "logit", "sinc", "deg2rad", "rad2deg",
    "negative", "absolute", "fix", "sgn", "i0", "polygamma", "mvlgamma", "bitwise_not",
    # binary math
    "atan2", "arctan2", "fmod", "hypot", "xlogy", "copysign", "heaviside", "nextafter", "ldexp", "igamma", "igammac",
    "true_divide", "subtract", "multiply", "divide", "bitwise_and", "bitwise_or", "bitwise_xor",
    "bitwise_left_shift", "bitwise_right_shift", "gcd", "lcm", "logical_and", "logical_or", "logical_xor",
    "clamp_min", "clamp_max",
    # comparisons (the bools written as the tensor's dtype)
    "eq", "ne", "lt", "le", "gt", "ge", "greater", "greater_equal", "less", "less_equal", "not_equal",
    # along a dim, and triangles
    "cumsum", "cumprod", "tril", "triu", "renorm",
    # indexing writes with an out-of-place form
    "index_put", "put", "masked_scatter", "scatter_reduce", "index_reduce",
    # products added to the tensor
    "addmm", "addmv", "addr", "addbmm", "baddbmm", "conj_physical",
)


def _variant(name: str):
    def method(self: Tensor, *args, **kwargs) -> Tensor:
        return self._assign(getattr(self, name)(*args, **kwargs))

    method.__name__ = f"{name}_"
    method.__qualname__ = f"Tensor.{name}_"
    method.__doc__ = f"In-place :meth:`{name}` (the result written into this tensor, cast to its dtype)."
    return method


def float_power_(self: Tensor, exponent) -> Tensor:
    """In-place :meth:`float_power`: the result is float64, so this tensor must be too (torch's rule)."""
    if self.dtype.name != "float64":
        raise DTypeError(f"the base given to float_power_ has dtype {self.dtype.name.capitalize()} but the "
                         "operation's result requires dtype Double")
    return self._assign(self.float_power(exponent))


def fill_diagonal_(self: Tensor, fill_value, wrap: bool = False) -> Tensor:
    """Write ``fill_value`` on the main diagonal (of a 2-d tensor, or one whose dims are all equal); ``wrap``: a tall
    matrix's diagonal starts again every ``cols + 1`` rows, as torch's (and numpy's ``fill_diagonal``)."""
    shape = tuple(self.shape)
    if len(shape) < 2:
        raise ShapeError("dimensions must larger than 1")
    if len(shape) > 2 and len(set(shape)) != 1:
        raise ShapeError("all dimensions of input must be of equal length")
    mask = np.zeros(shape, bool)
    np.fill_diagonal(mask, True, wrap=wrap)
    return self._assign(_combine.where(self._operand(mask), self._operand(fill_value, self.dtype), self))


def random_(self: Tensor, *args, generator=None, **kwargs) -> Tensor:
    """Uniform integers drawn as torch's: ``random_(from, to)`` in ``[from, to - 1]``, ``random_(to)`` in ``[0, to -
    1]``, ``random_()`` in ``[0, 2**mantissa]`` for a floating dtype, from 0 to the dtype's largest value for an
    integer one, 0 or 1 for bool (``to=None``: up to those with ``from`` given)."""
    lo, hi = 0, None
    if len(args) == 1:
        hi = args[0]
    elif len(args) == 2:
        lo, hi = args
    elif len(args) > 2:
        raise TypeError(f"random_() takes at most 2 positional arguments ({len(args)} given)")
    lo, hi = kwargs.pop("from", lo), kwargs.pop("to", hi)  # (torch's keyword is ``from``, a Python keyword)
    if kwargs:
        raise TypeError(f"random_() got unexpected keyword arguments {sorted(kwargs)}")
    if hi is None:
        hi = _top(self.dtype)
    if hi <= lo:
        raise ValueError(f"random_ expects 'from' to be less than 'to', but got from={lo} >= to={hi}")
    with _autograd.no_grad():
        draw = _creation.randint(lo, hi, tuple(self.shape), generator=generator, dtype=D.int64, device=self.device)
    return self._assign(draw.to(self.dtype))


def _top(dt) -> int:
    """``random_()``'s exclusive bound: ``2**mantissa + 1`` for a floating dtype (every integer it holds exactly),
    the dtype's largest value (plus one where that fits in int64) for an integer one, 2 for bool."""
    if dt is D.bool_:
        return 2
    if dt.is_floating_point:
        return (1 << {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}[dt.name]) + 1
    return int(min(np.iinfo(dt.np).max + 1, np.iinfo(np.int64).max))


def bernoulli_(self: Tensor, p=0.5, *, generator=None) -> Tensor:
    """Ones with probability ``p`` (a float, or a tensor broadcast to this one), zeros otherwise, in this tensor's
    dtype, as torch's."""
    probs = p.to(D.float64).expand(*self.shape) if isinstance(p, Tensor) else \
        _creation.full(tuple(self.shape), float(p), dtype=D.float64, device=self.device)
    with _autograd.no_grad():
        draw = _random.bernoulli(probs, generator=generator)
    return self._assign(draw.to(self.dtype))


def detach_(self: Tensor) -> Tensor:
    """Cut this tensor from the graph that made it, in place: a leaf that does not require grad (the nodes recorded
    with it keep its value for their own backward). A view cannot, as in torch: ``detach()`` it."""
    if self._base is not None and self.requires_grad:
        raise TensorwireError("Can't detach views in-place. Use detach() instead.")
    self.requires_grad, self.grad_fn, self._ag = False, None, None
    return self


def install(cls=Tensor) -> None:
    """Add ``<name>_`` for each name of :data:`VARIED` that ``cls`` has and whose in-place form it lacks, and the
    in-place methods with no out-of-place form here."""
    methods = {f"{n}_": _variant(n) for n in VARIED if hasattr(cls, n) and not hasattr(cls, f"{n}_")}
    if hasattr(cls, "float_power"):
        methods["float_power_"] = float_power_
    for fn in (fill_diagonal_, random_, bernoulli_, detach_):
        methods[fn.__name__] = fn
    _install.install_methods(cls, methods, wrap=False)


install()
_install.loaded(__name__)
