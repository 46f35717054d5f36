"""``tw.finfo`` and ``tw.iinfo``: the numerical limits of a dtype, with torch's attributes and values.

The values come from ``ml_dtypes.finfo`` and ``numpy.iinfo`` (``ml_dtypes`` is what tensorwire's bfloat16 is on the
numpy side), so bfloat16 and float16 carry torch's numbers (``eps``, ``max``, ``tiny`` ...), and ``resolution`` is
torch's ``10 ** -digits10`` (0.01 for bfloat16, 0.001 for float16), not numpy's ``10 ** -precision`` rounded to the
dtype. ``dtype`` is a string, as torch's (``'float32'``); the finfo of a complex dtype is its value type's, as in
torch. Host values only: nothing is sent to a cluster.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DTypeError


def _dtype(value, fn: str) -> D.DType:
    """A tensorwire dtype from ``value`` (a tensorwire, torch or numpy dtype); TypeError for anything else, as torch's
    ``finfo('float32')``."""
    if isinstance(value, D.DType):
        return value
    if isinstance(value, str) or value is None:
        raise TypeError(f"{fn}(): argument 'type' (position 1) must be tensorwire.dtype, not {type(value).__name__}")
    try:
        return D.get(value)
    except DTypeError as e:
        raise TypeError(f"{fn}(): argument 'type' (position 1) must be tensorwire.dtype, not "
                        f"{type(value).__name__} ({e})") from None


class _Info:
    """Read-only attributes, compared by dtype (unhashable, as torch's)."""

    __slots__ = ()
    _FIELDS: tuple[str, ...] = ()

    def __setattr__(self, name, value):
        raise AttributeError(f"attribute {name!r} of {type(self).__name__!r} objects is not writable")

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return self.dtype == other.dtype

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={getattr(self, k):g}" for k in self._FIELDS)
        return f"{type(self).__name__}({fields}, dtype={self.dtype})"

    __str__ = __repr__


class finfo(_Info):  # noqa: N801
    """``tw.finfo(dtype=None)``: a floating-point dtype's limits (torch.finfo); the default dtype's without one.

    Attributes: ``bits``, ``eps`` (the gap between 1.0 and the next value), ``max``, ``min`` (``-max``), ``tiny`` and
    ``smallest_normal`` (the smallest positive normal number), ``resolution`` (``10 ** -digits10``) and ``dtype``
    (its name, ``'float32'``). A complex dtype gives its value type's; an integer or bool dtype is a TypeError, as in
    torch."""

    __slots__ = ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution", "dtype")
    _FIELDS = ("resolution", "min", "max", "eps", "smallest_normal", "tiny")

    def __init__(self, type=None):  # noqa: A002 - torch's parameter name
        d = D.get_default_dtype() if type is None else _dtype(type, "finfo")
        d = D.to_real(d)
        if not d.is_floating_point:
            raise TypeError(f"finfo() requires a floating point input type. Use iinfo to handle {d!r}")
        info = ml_dtypes.finfo(d.np)
        eps = float(info.eps)
        values = {"bits": int(info.bits), "eps": eps, "max": float(info.max), "min": float(info.min),
                  "tiny": float(info.smallest_normal), "smallest_normal": float(info.smallest_normal),
                  "resolution": 10.0 ** -math.floor(-math.log10(eps)), "dtype": d.name}
        for k, v in values.items():
            object.__setattr__(self, k, v)


class iinfo(_Info):  # noqa: N801
    """``tw.iinfo(dtype)``: an integer dtype's limits (torch.iinfo): ``bits``, ``max``, ``min`` (Python ints) and
    ``dtype`` (its name, ``'int64'``). A floating-point, complex or bool dtype is a TypeError, as in torch."""

    __slots__ = ("bits", "max", "min", "dtype")
    _FIELDS = ("min", "max")

    def __init__(self, type):  # noqa: A002 - torch's parameter name
        d = _dtype(type, "iinfo")
        if d is D.bool_:
            raise TypeError(f"{d!r} is not supported by iinfo")
        if d.category != 1:
            raise TypeError(f"iinfo() requires an integer input type. Use finfo to handle {d!r}")
        info = np.iinfo(d.np)
        for k, v in {"bits": int(info.bits), "max": int(info.max), "min": int(info.min), "dtype": d.name}.items():
            object.__setattr__(self, k, v)

    def __repr__(self) -> str:
        # torch prints the limits as floats with %g (int64's as -9.22337e+18)
        return f"iinfo(min={float(self.min):g}, max={float(self.max):g}, dtype={self.dtype})"

    __str__ = __repr__


def can_cast(from_, to) -> bool:
    """Whether torch's casting rules let a value of dtype ``from_`` be written to one of dtype ``to`` (an in-place op's
    output, ``out=``): ``protocol.dtypes.can_cast``, the rule ``Tensor._assign`` and ``out=`` apply."""
    for name, d in (("from_", from_), ("to", to)):
        if not isinstance(d, D.DType):
            raise TypeError(f"can_cast(): argument '{name}' must be tensorwire.dtype, not {type(d).__name__}")
    return D.can_cast(from_, to)
