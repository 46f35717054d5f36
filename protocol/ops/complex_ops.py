"""Complex primitives (issue 33): the parts of a complex tensor (``real``, ``imag``), building one (``complex``),
``conj``, and the discrete Fourier transforms ``fft_c2c``, ``fft_r2c`` and ``fft_c2r`` (ATen's ``_fft_c2c``,
``_fft_r2c`` and ``_fft_c2r``, from which ``torch.fft``'s functions are built on the client: ``client/fft.py``).

Each declares its VJP rule with PyTorch's convention for complex gradients: the gradient of a real loss ``L`` with
respect to ``z = a + ib`` is ``dL/da + i dL/db`` (the conjugate Wirtinger derivative, times two). A real input reached
by a complex gradient keeps its real part (``autograd.vjp.fit`` casts it).

A transform's ``norm`` attribute is its scale, whatever its direction: ``"none"``, ``"sqrt"`` (1/sqrt(n)) or ``"n"``
(1/n), n the product of the transformed sizes (the signal's, for ``fft_c2r``). The adjoint of a transform is the
transform the other way with the same scale, which is what the rules record.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as D
from ..errors import DTypeError, ShapeError
from ..shapes import broadcast, norm_dim
from .attrs import a_bool, a_int, a_ints, a_str
from .table import OpDef, register_op

#: a transform's scale, by what torch's ``norm=`` calls it for each direction: ``{norm: (forward, inverse)}``
NORMS = ("none", "sqrt", "n")
NORM_MODES = {None: ("none", "n"), "backward": ("none", "n"), "ortho": ("sqrt", "sqrt"), "forward": ("n", "none")}


def norm_mode(norm: str | None, forward: bool, name: str) -> str:
    """The scale (one of :data:`NORMS`) of torch's ``norm=`` for a transform in the ``forward`` direction."""
    try:
        return NORM_MODES[norm][0 if forward else 1]
    except KeyError:
        raise ValueError(f"{name}: Invalid normalization mode: {norm}") from None


def _need_complex(name: str, d: D.DType) -> None:
    if not d.is_complex:
        raise DTypeError(f"{name} expects a complex tensor, got {d.name}")


def _need_floating(name: str, d: D.DType) -> None:
    if not d.is_floating_point:
        raise DTypeError(f"{name} expects a floating point tensor, got {d.name}")


# -- parts -----------------------------------------------------------------------------------------------------------

def _part_infer(name: str):
    def infer(metas, attrs):
        (s, d), = metas
        _need_complex(name, d)
        return s, D.to_real(d)
    return infer


def _complex_infer(metas, attrs):
    (sa, da), (sb, db) = metas
    for d in (da, db):
        if d not in (D.float32, D.float64):
            raise DTypeError(f"complex: expected both inputs to be float or double tensors, got {da.name} and "
                             f"{db.name}")
    if da is not db:
        raise DTypeError(f"complex: expected object of scalar type {da.name} but got scalar type {db.name} for "
                         "second argument")
    return broadcast(sa, sb), D.to_complex(da)


def _conj_infer(metas, attrs):
    return metas[0]


def _real_vjp(c):
    return [c.g.cast(D.to_complex(c.g.dtype))]


def _imag_vjp(c):
    # L(b): dL/da = 0, dL/db = g: the gradient is i g
    return [c.scalar(0.0).op("complex", c.g)]


def _complex_vjp(c):
    return [c.g.op("real") if c.needs[0] else None, c.g.op("imag") if c.needs[1] else None]


def _conj_vjp(c):
    return [c.g.op("conj") if c.g.dtype.is_complex else c.g]


# conformance examples (backends/testing: ``extra["examples"]`` checked against ``extra["reference"]``, which reads
# the inputs in float64 or complex128)
_RNG = np.random.default_rng(33)


def _cx(*shape, dtype=np.complex64) -> np.ndarray:
    return (_RNG.standard_normal(shape) + 1j * _RNG.standard_normal(shape)).astype(dtype)


def _re(*shape, dtype=np.float32) -> np.ndarray:
    return _RNG.standard_normal(shape).astype(dtype)


def _extra(examples: list, reference) -> dict:
    return {"complex_vjp": True, "examples": examples, "reference": reference}


register_op(OpDef("real", 1, _part_infer("real"), kind="unary", vjp=_real_vjp,
                  extra=_extra([([_cx(2, 3)], {}), ([_cx(4, dtype=np.complex128)], {})], lambda xs, a: xs[0].real),
                  doc="The real part of a complex tensor (its value type)."))
register_op(OpDef("imag", 1, _part_infer("imag"), kind="unary", vjp=_imag_vjp,
                  extra=_extra([([_cx(2, 3)], {}), ([_cx(4, dtype=np.complex128)], {})], lambda xs, a: xs[0].imag),
                  doc="The imaginary part of a complex tensor (its value type)."))
register_op(OpDef("complex", 2, _complex_infer, kind="binary", vjp=_complex_vjp,
                  extra=_extra([([_re(2, 3), _re(3)], {}), ([_re(4, dtype=np.float64), _re(4, dtype=np.float64)], {})],
                               lambda xs, a: xs[0] + 1j * xs[1]),
                  doc="complex(real, imag): a complex tensor from two float32 or float64 tensors (broadcast)."))
register_op(OpDef("conj", 1, _conj_infer, kind="unary", vjp=_conj_vjp,
                  extra=_extra([([_cx(2, 3)], {}), ([_cx(5, dtype=np.complex128)], {})], lambda xs, a: np.conj(xs[0])),
                  doc="The complex conjugate (a real tensor's is itself)."))


# -- discrete Fourier transforms ---------------------------------------------------------------------------------------

def fft_dims(dims, ndim: int, name: str = "fft") -> tuple[int, ...]:
    """A transform's dims, normalised in their order (the last one is the halved one of a real transform)."""
    out = tuple(norm_dim(d, ndim) for d in dims)
    if len(set(out)) != len(out):
        raise ShapeError(f"{name}: dims must be unique, got {list(dims)}")
    return out


def _fft_dims(name: str, attrs, s) -> tuple[int, ...]:
    dims = fft_dims(a_ints(attrs, "dims"), len(s), name)
    a_str(attrs, "norm", NORMS)
    return dims


def _c2c_infer(metas, attrs):
    (s, d), = metas
    _need_complex("fft_c2c", d)
    _fft_dims("fft_c2c", attrs, s)
    a_bool(attrs, "forward")
    return s, d


def _r2c_infer(metas, attrs):
    (s, d), = metas
    _need_floating("fft_r2c", d)
    dims = _fft_dims("fft_r2c", attrs, s)
    if not dims:
        raise ShapeError("fft_r2c needs at least one dim")
    out = list(s)
    out[dims[-1]] = s[dims[-1]] // 2 + 1
    return tuple(out), D.to_complex(d)


def _c2r_infer(metas, attrs):
    (s, d), = metas
    _need_complex("fft_c2r", d)
    dims = _fft_dims("fft_c2r", attrs, s)
    n = a_int(attrs, "n")
    if not dims:
        raise ShapeError("fft_c2r needs at least one dim")
    if n < 1 or s[dims[-1]] != n // 2 + 1:
        raise ShapeError(f"fft_c2r: a signal of {n} points needs {max(n, 0) // 2 + 1} complex points along dim "
                         f"{dims[-1]}, got {s[dims[-1]]}")
    out = list(s)
    out[dims[-1]] = n
    return tuple(out), D.to_real(d)


def _c2c_vjp(c):
    # the adjoint of the transform one way is the transform the other way, with the same scale
    return [c.g.op("fft_c2c", dims=list(c.a["dims"]), norm=c.a["norm"], forward=not c.a["forward"])]


def _r2c_vjp(c):
    """The adjoint of the half spectrum: zeros for the dropped half, the inverse transform, its real part (torch's
    ``fft_r2c_backward``)."""
    x = c.x[0]
    dims = fft_dims(c.a["dims"], x.ndim)
    last = dims[-1]
    g = c.g
    pads = [0] * (2 * x.ndim)
    pads[2 * last + 1] = x.shape[last] - g.shape[last]
    full = g.pad(pads)
    return [full.op("fft_c2c", dims=list(dims), norm=c.a["norm"], forward=False).op("real")]


def _c2r_vjp(c):
    """The real transform of the gradient, its bins that stand for two (a conjugate pair) doubled (torch's
    ``fft_c2r_backward``)."""
    x = c.x[0]
    dims = fft_dims(c.a["dims"], x.ndim)
    last = dims[-1]
    g = c.g.op("fft_r2c", dims=list(dims), norm=c.a["norm"])
    m = g.shape[last]
    double = c.a["n"] - m  # the bins 1 .. double have a conjugate twin in the full spectrum
    if double <= 0:
        return [g]
    w = c.scalar(2.0, D.to_real(g.dtype)).expand([double]).pad([1, m - 1 - double], value=1.0)
    w = w.reshape([m if i == last else 1 for i in range(x.ndim)])
    return [g * w]


# numpy's ``norm=`` for a scale by direction, for the references: {scale: (forward, inverse)}
_NP_NORM = {"none": ("backward", "forward"), "sqrt": ("ortho", "ortho"), "n": ("forward", "backward")}


def _c2c_ref(xs, a):
    fn = np.fft.fftn if a["forward"] else np.fft.ifftn
    return fn(xs[0], axes=a["dims"], norm=_NP_NORM[a["norm"]][0 if a["forward"] else 1])


def _r2c_ref(xs, a):
    return np.fft.rfftn(xs[0], axes=a["dims"], norm=_NP_NORM[a["norm"]][0])


def _c2r_ref(xs, a):
    x = xs[0]
    sizes = [x.shape[d] for d in a["dims"][:-1]] + [a["n"]]
    return np.fft.irfftn(x, s=sizes, axes=a["dims"], norm=_NP_NORM[a["norm"]][1])


register_op(OpDef("fft_c2c", 1, _c2c_infer, kind="other", attrs=("dims", "norm", "forward"), vjp=_c2c_vjp,
                  extra=_extra([([_cx(3, 8)], {"dims": [1], "norm": "none", "forward": True}),
                                ([_cx(4, 3, 5, dtype=np.complex128)],
                                 {"dims": [0, 2], "norm": "sqrt", "forward": False}),
                                ([_cx(6)], {"dims": [0], "norm": "n", "forward": True})], _c2c_ref),
                  doc="The discrete Fourier transform of a complex tensor over `dims` (`forward`: e^-i, else e^+i), "
                      "scaled by `norm`."))
register_op(OpDef("fft_r2c", 1, _r2c_infer, kind="other", attrs=("dims", "norm"), vjp=_r2c_vjp,
                  extra=_extra([([_re(3, 8)], {"dims": [1], "norm": "none"}),
                                ([_re(4, 7, dtype=np.float64)], {"dims": [1, 0], "norm": "n"})], _r2c_ref),
                  doc="The forward transform of a real tensor over `dims`, the last of them halved (n // 2 + 1 "
                      "bins: the rest are their conjugates)."))
register_op(OpDef("fft_c2r", 1, _c2r_infer, kind="other", attrs=("dims", "norm", "n"), vjp=_c2r_vjp,
                  extra=_extra([([_cx(3, 5)], {"dims": [1], "norm": "none", "n": 8}),
                                ([_cx(3, 5)], {"dims": [1], "norm": "sqrt", "n": 9}),
                                ([_cx(4, 3, dtype=np.complex128)], {"dims": [0, 1], "norm": "n", "n": 4})], _c2r_ref),
                  doc="The inverse transform of a half spectrum over `dims` (Hermitian along the last): a real "
                      "signal of `n` points along the last of `dims`."))
