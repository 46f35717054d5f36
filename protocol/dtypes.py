"""The dtypes tensorwire knows, their numpy equivalents, and PyTorch's type promotion.

bfloat16 maps to ``ml_dtypes.bfloat16`` on the numpy side. Promotion follows PyTorch:
bool < integers < floating point < complex as categories; within a category the wider type wins
(uint8 with int8 gives int16; float16 with bfloat16 gives float32); Python scalars and
0-d tensors only raise the category (``int32_tensor + 2.5`` is float32, ``int8_tensor + 1000``
stays int8), see :func:`result_type`. Complex with floating point keeps the wider value type
(``complex64 + float64`` is complex128), as torch's.

The complex dtypes (``complex64``, ``complex128``) are neither floating point nor integer
(``is_floating_point`` is False, as torch's); ``to_real`` and ``to_complex`` map between a complex
dtype and its value type.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .errors import DTypeError


@dataclass(frozen=True, eq=False)
class DType:
    """A tensor element type, printed as ``tensorwire.float32``."""

    name: str
    code: int
    np: np.dtype
    itemsize: int
    is_floating_point: bool
    is_signed: bool
    category: int  # 0 bool, 1 integer, 2 floating, 3 complex

    def __repr__(self) -> str:
        return f"tensorwire.{self.name}"

    def __reduce__(self):  # dtypes are singletons
        return (get, (self.name,))

    @property
    def is_complex(self) -> bool:
        """Whether this is a complex dtype (``complex64``, ``complex128``)."""
        return self.category == 3

    @property
    def is_inexact(self) -> bool:
        """Floating point or complex: the dtypes that can require gradients."""
        return self.category >= 2


def _mk(name: str, code: int, npdt, floating: bool, signed: bool, category: int) -> DType:
    npdt = np.dtype(npdt)
    return DType(name, code, npdt, npdt.itemsize, floating, signed, category)


bool_ = _mk("bool", 0, np.bool_, False, False, 0)
uint8 = _mk("uint8", 1, np.uint8, False, False, 1)
int8 = _mk("int8", 2, np.int8, False, True, 1)
int16 = _mk("int16", 3, np.int16, False, True, 1)
int32 = _mk("int32", 4, np.int32, False, True, 1)
int64 = _mk("int64", 5, np.int64, False, True, 1)
float16 = _mk("float16", 6, np.float16, True, True, 2)
bfloat16 = _mk("bfloat16", 7, ml_dtypes.bfloat16, True, True, 2)
float32 = _mk("float32", 8, np.float32, True, True, 2)
float64 = _mk("float64", 9, np.float64, True, True, 2)
complex64 = _mk("complex64", 10, np.complex64, False, True, 3)
complex128 = _mk("complex128", 11, np.complex128, False, True, 3)

ALL: tuple[DType, ...] = (bool_, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64, complex64,
                          complex128)
BY_NAME: dict[str, DType] = {d.name: d for d in ALL}
BY_CODE: dict[int, DType] = {d.code: d for d in ALL}
BY_NP: dict[np.dtype, DType] = {d.np: d for d in ALL}
ALIASES = {"half": float16, "float": float32, "double": float64, "long": int64, "int": int32,
           "short": int16, "bool_": bool_, "bf16": bfloat16, "f32": float32, "f64": float64,
           "cfloat": complex64, "cdouble": complex128, "c64": complex64, "c128": complex128}
INTEGER = tuple(d for d in ALL if d.category == 1)
FLOATING = tuple(d for d in ALL if d.category == 2)
COMPLEX = (complex64, complex128)
#: a complex dtype's value type, and back (float16 and bfloat16 have no complex type here: torch's complex32 is not
#: supported; their complex type is complex64, what torch computes them in on the CPU)
_REAL_OF = {complex64: float32, complex128: float64}
_COMPLEX_OF = {float16: complex64, bfloat16: complex64, float32: complex64, float64: complex128}
#: the 16-bit floats: stored in 16 bits, computed in float32
HALF = (float16, bfloat16)


def get(x) -> DType:
    """Resolve a dtype from a DType, a name ('float32', 'half'), a numpy dtype or a torch dtype."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        key = x.removeprefix("torch.").removeprefix("tensorwire.")
        if key in BY_NAME:
            return BY_NAME[key]
        if key in ALIASES:
            return ALIASES[key]
        raise DTypeError(f"unknown dtype {x!r}; known: {', '.join(BY_NAME)}")
    if x is bool:
        return bool_
    if x is int:
        return int64
    if x is float:
        return float32
    if x is complex:
        return complex64
    mod = type(x).__module__
    if mod.startswith("torch"):
        return get(str(x))
    try:
        npdt = np.dtype(x)
    except TypeError:
        raise DTypeError(f"unknown dtype {x!r}") from None
    if npdt in BY_NP:
        return BY_NP[npdt]
    raise DTypeError(f"dtype {npdt} is not supported; supported: {', '.join(BY_NAME)}")


def from_numpy(npdt: np.dtype) -> DType:
    """The tensorwire dtype of a numpy dtype (float64 stays float64, as torch.from_numpy)."""
    try:
        return BY_NP[np.dtype(npdt)]
    except KeyError:
        raise DTypeError(f"numpy dtype {npdt} is not supported; supported: {', '.join(BY_NAME)}") from None


_INT_ORDER = {uint8: 0, int8: 1, int16: 2, int32: 3, int64: 4}


def can_cast(from_: DType, to: DType) -> bool:
    """Whether torch's casting rules let a value of dtype ``from_`` be written to one of dtype ``to`` (an in-place op's
    result, ``out=``): never to a lower category, complex to real, floating to integer, anything else to bool (c10's
    ``canCast``)."""
    return from_.category <= to.category


def check_cast(from_: DType, to: DType) -> None:
    """:func:`can_cast`, or torch's ``DTypeError`` for a result that cannot be written to an output of ``to``."""
    if from_.category > to.category:
        raise DTypeError(f"result type {from_.name.capitalize()} can't be cast to the desired output type "
                         f"{to.name.capitalize()}")


def promote_types(a: DType, b: DType) -> DType:
    """PyTorch's ``torch.promote_types`` for two dtypes."""
    if a is b:
        return a
    if a.category == 3 or b.category == 3:
        # complex with anything: complex, of the wider value type (complex64 with float64 is complex128)
        ra = _REAL_OF.get(a, a)
        rb = _REAL_OF.get(b, b)
        value = promote_types(ra, rb) if ra.category == rb.category == 2 else (ra if ra.category == 2 else rb)
        return _COMPLEX_OF[value]
    if a.category != b.category:
        return a if a.category > b.category else b
    if a.category == 0:
        return a
    if a.category == 2:
        if {a, b} == {float16, bfloat16}:
            return float32
        return a if a.itemsize > b.itemsize else b
    # integers
    if uint8 in (a, b):
        other = b if a is uint8 else a
        return int16 if other is int8 else other
    return a if _INT_ORDER[a] > _INT_ORDER[b] else b


_default_float = float32


def get_default_dtype() -> DType:
    """The dtype of floating-point tensors made without ``dtype=`` (float32 unless changed)."""
    return _default_float


def set_default_dtype(d) -> None:
    """Set the default floating-point dtype (as ``torch.set_default_dtype``; floating types only)."""
    global _default_float
    d = get(d)
    if not d.is_floating_point:
        raise DTypeError(f"set_default_dtype only accepts floating point dtypes, got {d}")
    _default_float = d


def scalar_dtype(v) -> DType:
    """The dtype a Python scalar gets on its own: bool, int64, or the default float dtype."""
    if isinstance(v, (bool, np.bool_)):
        return bool_
    if isinstance(v, (int, np.integer)):
        return int64
    if isinstance(v, (float, np.floating)):
        return _default_float
    if isinstance(v, (complex, np.complexfloating)):
        return get_default_complex_dtype()
    raise DTypeError(f"expected a number, got {type(v).__name__}")


def _combine(higher: DType | None, lower: DType | None) -> DType | None:
    # c10's combine_categories
    if higher is None:
        return lower
    if lower is None:
        return higher
    if higher.category == 3:
        return higher
    if lower.category == 3:  # a complex scalar or 0-d tensor with floats keeps the floats' value type
        return to_complex(higher) if higher.category == 2 else lower
    if higher.category == 2:
        return higher
    if higher is bool_ or lower.category == 2:
        return promote_types(higher, lower)
    return higher


def result_type(*operands) -> DType:
    """PyTorch's ``torch.result_type`` over operands.

    Each operand is ``(dtype, ndim)`` for a tensor or a Python scalar. Dimensioned tensors take
    priority over 0-d tensors, which take priority over Python scalars, except that a higher
    category (bool < int < float) always wins.
    """
    dim_r = zero_r = wrapped = None
    for op in operands:
        if isinstance(op, tuple):
            dt, ndim = op
            if ndim > 0:
                dim_r = dt if dim_r is None else promote_types(dim_r, dt)
            else:
                zero_r = dt if zero_r is None else promote_types(zero_r, dt)
        else:
            dt = scalar_dtype(op)
            wrapped = dt if wrapped is None else promote_types(wrapped, dt)
    out = _combine(dim_r, _combine(zero_r, wrapped))
    if out is None:
        raise DTypeError("result_type needs at least one operand")
    return out


def float_of(d: DType) -> DType:
    """The dtype a floating-only op (exp, true division, mean...) produces from input ``d`` (complex stays
    complex)."""
    return d if d.category >= 2 else _default_float


def to_real(d: DType) -> DType:
    """A complex dtype's value type (``complex64`` -> ``float32``); any other dtype as it is."""
    return _REAL_OF.get(d, d)


def to_complex(d: DType) -> DType:
    """The complex dtype of a floating or complex dtype (``float64`` -> ``complex128``); integers and bools take the
    default float's (torch's default complex dtype)."""
    if d.category == 3:
        return d
    return _COMPLEX_OF[d if d.category == 2 else _default_float]


def get_default_complex_dtype() -> DType:
    """The complex dtype of Python complex numbers: the default float's (``complex64`` for ``float32``)."""
    return _COMPLEX_OF[_default_float]


def finfo_max(d: DType) -> float:
    d = to_real(d)
    return float(ml_dtypes.finfo(d.np).max) if d.is_floating_point else float(np.iinfo(d.np).max)
