"""Complex tensors (issue 33): ``tw.complex``, ``tw.polar``, ``tw.view_as_real``, ``tw.view_as_complex``, the parts
(``Tensor.real``, ``Tensor.imag``), ``conj``, ``angle``, ``isreal``, and ``Tensor.cfloat()``/``cdouble()`` (``stft``:
client/fft.py).

The dtypes are ``tw.complex64`` (``tw.cfloat``) and ``tw.complex128`` (``tw.cdouble``); elementwise arithmetic,
``abs``, ``sgn`` (``z / |z|``: the op table's ``sign``), ``exp``, ``matmul``, the sums and the movement ops take them
through the op table, and autograd follows
PyTorch's convention (the gradient of a real loss with respect to ``z = a + ib`` is ``dL/da + i dL/db``).

Differences from torch: tensorwire's buffers are immutable, so what torch returns as views sharing memory
(``view_as_real``, ``view_as_complex``, ``.real``, ``.imag``) are fresh values here (writing into them does not write
into the tensor they came from), and ``conj`` is computed at once (torch sets a lazy conjugate bit:
``is_conj()`` is always False here and ``resolve_conj`` returns its input).
"""

from __future__ import annotations

import math

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DTypeError, ShapeError

from . import _install
from . import combine as _combine
from .tensor import Tensor

__all__ = ["angle", "complex", "conj", "conj_physical", "imag", "is_complex", "isreal", "polar", "real",
           "resolve_conj", "resolve_neg", "view_as_complex", "view_as_real"]


def _where(cond: Tensor, a, b) -> Tensor:
    return _combine.where(cond, a, b)


def is_complex(input: Tensor) -> bool:  # noqa: A002
    """Whether ``input``'s dtype is complex (``torch.is_complex``)."""
    return input.dtype.is_complex


def real(input: Tensor) -> Tensor:  # noqa: A002
    """The real part (a real tensor's is itself, as torch's)."""
    return input._rec("real", [input]) if input.dtype.is_complex else input


def imag(input: Tensor) -> Tensor:  # noqa: A002
    """The imaginary part of a complex tensor; a real tensor has none (``RuntimeError``, as torch)."""
    if not input.dtype.is_complex:
        raise DTypeError("imag is not implemented for tensors with non-complex dtypes.")
    return input._rec("imag", [input])


def conj(input: Tensor) -> Tensor:  # noqa: A002
    """The complex conjugate (a real tensor's is itself)."""
    return input._rec("conj", [input]) if input.dtype.is_complex else input


def conj_physical(input: Tensor) -> Tensor:  # noqa: A002
    """The complex conjugate, always a new tensor (a real tensor's is a copy)."""
    return input._rec("conj", [input]) if input.dtype.is_complex else input.clone()


def resolve_conj(input: Tensor) -> Tensor:  # noqa: A002
    """``input`` itself: tensorwire computes conjugates at once, it has no lazy conjugate bit to resolve."""
    return input


def resolve_neg(input: Tensor) -> Tensor:  # noqa: A002
    """``input`` itself: tensorwire has no lazy negative bit to resolve."""
    return input


def _is_conj(self: Tensor) -> bool:
    """Always False: conjugates are computed at once (torch's lazy conjugate bit does not exist here)."""
    return False


def angle(input: Tensor) -> Tensor:  # noqa: A002
    """The argument: ``atan2(imag, real)`` of a complex tensor (in its value type); of a real one π for negatives, 0
    otherwise (NaN stays NaN), in a float dtype."""
    if input.dtype.is_complex:
        return imag(input).atan2(real(input))
    x = input if input.dtype.is_floating_point else input.to(D.get_default_dtype())
    r = _where(x < 0, x._operand(math.pi).to(x.dtype), x._operand(0.0).to(x.dtype))
    return _where(x.isnan(), x, r)


def isreal(input: Tensor) -> Tensor:  # noqa: A002
    """Where the imaginary part is zero (everywhere for a real tensor)."""
    if input.dtype.is_complex:
        return imag(input) == 0
    return input.new_ones(input.shape, dtype=D.bool_)


def complex(real: Tensor, imag: Tensor) -> Tensor:  # noqa: A001
    """A complex tensor from its real and imaginary parts (float32 or float64, the same dtype; broadcast)."""
    if not isinstance(real, Tensor) or not isinstance(imag, Tensor):
        raise TypeError(f"complex(): arguments 'real' and 'imag' must be Tensors, not {type(real).__name__} and "
                        f"{type(imag).__name__}")
    return real._rec("complex", [real, imag])


def polar(abs: Tensor, angle: Tensor) -> Tensor:  # noqa: A002
    """The complex tensor ``abs · (cos(angle) + i sin(angle))`` (float32 or float64 inputs of one dtype)."""
    if not isinstance(abs, Tensor) or not isinstance(angle, Tensor):
        raise TypeError("polar(): arguments 'abs' and 'angle' must be Tensors")
    return complex(abs * angle.cos(), abs * angle.sin())


def view_as_real(input: Tensor) -> Tensor:  # noqa: A002
    """A complex tensor as a real one with a last dim of 2 (real, imaginary); a copy here, not a view."""
    if not input.dtype.is_complex:
        raise DTypeError(f"view_as_real is only supported for complex tensors, got {input.dtype.name}")
    return _combine.stack([real(input), imag(input)], -1)


def view_as_complex(input: Tensor) -> Tensor:  # noqa: A002
    """A real tensor whose last dim is 2 (real, imaginary) as a complex one; a copy here, not a view."""
    if input.dtype not in (D.float32, D.float64):
        raise DTypeError(f"view_as_complex is only supported for float and double tensors, but got a tensor of "
                         f"scalar type: {input.dtype.name}")
    if input.ndim == 0 or input.shape[-1] != 2:
        raise ShapeError("Tensor must have a last dimension of size 2")
    return complex(input.select(-1, 0), input.select(-1, 1))


def _cfloat(self: Tensor, memory_format=None) -> Tensor:
    """``self.to(tw.complex64)``."""
    return self.to(D.complex64)


def _cdouble(self: Tensor, memory_format=None) -> Tensor:
    """``self.to(tw.complex128)``."""
    return self.to(D.complex128)


#: ``tw.<name>`` functions
FUNCTIONS = {"complex": complex, "polar": polar, "view_as_real": view_as_real, "view_as_complex": view_as_complex,
             "real": real, "imag": imag, "conj": conj, "conj_physical": conj_physical, "resolve_conj": resolve_conj,
             "resolve_neg": resolve_neg, "angle": angle, "isreal": isreal, "is_complex": is_complex}


def install(cls=Tensor) -> None:
    """The methods and properties on ``Tensor``: ``real``/``imag`` as properties (as torch's), ``conj()``,
    ``angle()``, ``cfloat()``..."""
    _install.install_methods(cls, {name: FUNCTIONS[name] for name in ("conj", "conj_physical", "resolve_conj",
                                                                     "resolve_neg", "angle", "isreal")})
    _install.install_methods(cls, {"is_conj": _is_conj, "is_neg": _is_conj, "cfloat": _cfloat, "cdouble": _cdouble},
                             wrap=False)
    cls.real = property(real, doc="The real part (a real tensor's is itself).")
    cls.imag = property(imag, doc="The imaginary part of a complex tensor.")


install()
_install.register(FUNCTIONS)
_install.loaded(__name__)
