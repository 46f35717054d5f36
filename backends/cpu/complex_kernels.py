"""numpy kernels of the complex primitives (``protocol/ops/complex_ops.py``): the parts of a complex tensor,
building one, the conjugate, and the discrete Fourier transforms (numpy's pocketfft, in double precision, rounded
once to the result's dtype). The elementwise kernels of ``kernels.py`` take complex arrays as they are."""

from __future__ import annotations

import numpy as np

from .kernels import KERNELS, _out, kernel

KERNELS["real"] = lambda ins, a, s, dt: np.ascontiguousarray(ins[0].real)
KERNELS["imag"] = lambda ins, a, s, dt: np.ascontiguousarray(ins[0].imag)
KERNELS["conj"] = lambda ins, a, s, dt: np.conj(ins[0]) if ins[0].dtype.kind == "c" else ins[0]


@kernel("complex")
def _complex(ins, a, shape, dt):
    out = np.empty(shape, dt.np)
    out.real, out.imag = ins
    return out


#: a transform's scale (the op's ``norm``) by direction, in numpy's ``norm=`` terms: {scale: (forward, inverse)}
_NP_NORM = {"none": ("backward", "forward"), "sqrt": ("ortho", "ortho"), "n": ("forward", "backward")}


def _fft_axes(a, ndim) -> list:
    return [d % ndim for d in a["dims"]]


@kernel("fft_c2c")
def _fft_c2c(ins, a, shape, dt):
    axes = _fft_axes(a, ins[0].ndim)
    x = ins[0].astype(np.complex128)
    if not axes or x.size == 0:
        return _out(x, dt)
    forward = a["forward"]
    fn = np.fft.fftn if forward else np.fft.ifftn
    return _out(fn(x, axes=axes, norm=_NP_NORM[a["norm"]][0 if forward else 1]), dt)


@kernel("fft_r2c")
def _fft_r2c(ins, a, shape, dt):
    axes = _fft_axes(a, ins[0].ndim)
    x = ins[0].astype(np.float64)
    if x.size == 0:
        return np.zeros(shape, dt.np)
    return _out(np.fft.rfftn(x, axes=axes, norm=_NP_NORM[a["norm"]][0]), dt)


@kernel("fft_c2r")
def _fft_c2r(ins, a, shape, dt):
    x = ins[0].astype(np.complex128)
    axes = _fft_axes(a, x.ndim)
    if x.size == 0 or any(s == 0 for s in shape):
        return np.zeros(shape, dt.np)
    sizes = [x.shape[d] for d in axes[:-1]] + [a["n"]]
    return _out(np.fft.irfftn(x, s=sizes, axes=axes, norm=_NP_NORM[a["norm"]][1]), dt)
