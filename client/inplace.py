"""torch's in-place variants (``x.atan2_(y)``, ``x.clamp_min_(0)``, ``x.eq_(y)``) of Tensor methods that exist.

Each ``x.<name>_(*args)`` is ``x.<name>(*args)`` written back into ``x`` through ``Tensor._assign``, the one path every
in-place method takes (``add_``, ``mul_``, ``x[i] = v``): views see the new value and bases get it, autograd checks
the write (a leaf that requires grad refuses it, a value saved for a backward pass is caught at that pass), and the
result is cast to ``x``'s dtype where torch allows it: a result of a higher category raises torch's ``result type
Float can't be cast to the desired output type Long`` (``int_tensor.sin_()``), a comparison's bools become ``x``'s
dtype (``x.eq_(y)``: ones and zeros). ``float_power_`` keeps torch's stricter rule: ``x`` must be float64 (its result
always is).

This module is the last of ``client/_install.py``'s :data:`MODULES`, so the methods of every module before it (``i0``,
``polygamma``, ``erfinv`` ...) are there to be varied; a name whose in-place form ``Tensor`` already has (written by
hand, or added by an earlier module) keeps it.
"""

from __future__ import annotations

from tensorwire.protocol.errors import DTypeError

from . import _install
from .tensor import Tensor

#: methods whose in-place variant ``<name>_`` is ``x._assign(x.<name>(...))``
VARIED = (
    # unary math
    "acos", "asin", "atan", "acosh", "asinh", "atanh", "arccos", "arcsin", "arctan", "arccosh", "arcsinh", "arctanh",
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
    "index_put", "put", "masked_scatter", "scatter_reduce",
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


def install(cls=Tensor) -> None:
    """Add ``<name>_`` for each name of :data:`VARIED` that ``cls`` has and whose in-place form it lacks."""
    methods = {f"{n}_": _variant(n) for n in VARIED if hasattr(cls, n) and not hasattr(cls, f"{n}_")}
    if hasattr(cls, "float_power"):
        methods["float_power_"] = float_power_
    _install.install_methods(cls, methods, wrap=False)


install()
_install.loaded(__name__)
