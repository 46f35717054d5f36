"""``tw.fft``: torch.fft's discrete Fourier transforms (issue 33), with torch's arguments, dtypes and normalisations.

Every transform is one of three primitives of the op table (``protocol/ops/complex_ops.py``): ``fft_c2c`` (complex
to complex), ``fft_r2c`` (a real signal's half spectrum) and ``fft_c2r`` (a half spectrum's real signal), as in
PyTorch's ATen, after the input is promoted (integers to the default float; to complex for ``fft``, ``ifft``,
``irfft``, ``hfft``) and zero-padded or cropped to the sizes asked for (``n``, ``s``). ``hfft*`` is ``irfft*`` of the
conjugate, ``ihfft*`` the conjugate of ``rfft*``, each with the other direction's scale. The CPU backend computes them
with numpy's pocketfft in double precision; autograd differentiates them with PyTorch's convention for complex
gradients. ``fftfreq``, ``rfftfreq``, ``fftshift`` and ``ifftshift`` complete the namespace; :func:`stft` is also
``tw.stft`` and ``x.stft()`` (this module is one of those that add Tensor's methods, client/_install.py).

``norm``: ``"backward"`` (default: the forward transform unscaled, the inverse scaled by 1/n), ``"ortho"`` (both by
1/sqrt(n)) or ``"forward"`` (the forward by 1/n, the inverse unscaled).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DTypeError, ShapeError
from tensorwire.protocol.ops.complex_ops import norm_mode
from tensorwire.protocol.shapes import norm_dim

from . import _install
from . import complex_ops as C
from . import creation as _creation
from .combine import write_out
from .complex_ops import conj
from .padding import pad
from .tensor import Tensor

__all__ = ["fft", "ifft", "fft2", "ifft2", "fftn", "ifftn", "rfft", "irfft", "rfft2", "irfft2", "rfftn", "irfftn",
           "hfft", "ihfft", "hfft2", "ihfft2", "hfftn", "ihfftn", "fftfreq", "rfftfreq", "fftshift", "ifftshift"]


# -- arguments -------------------------------------------------------------------------------------------------------

def _to_complex(x: Tensor) -> Tensor:
    return x if x.dtype.is_complex else x.to(D.to_complex(x.dtype))


def _to_real(name: str, x: Tensor) -> Tensor:
    if x.dtype.is_complex:
        raise DTypeError(f"{name} expects a real input tensor, but got {x.dtype.name}")
    return x if x.dtype.is_floating_point else x.to(D.get_default_dtype())


def _dims_and_sizes(name: str, x: Tensor, s, dim, default_all: bool) -> tuple[list[int], list[int | None]]:
    """torch's ``canonicalize_fft_shape_and_dim_args``: the dims transformed and the size asked for each (``None``:
    as it is)."""
    if isinstance(dim, int):
        dim = [dim]
    if s is not None and not isinstance(s, Sequence):
        raise TypeError(f"{name}: s must be a sequence of ints, got {type(s).__name__}")
    if dim is not None:
        dims = [norm_dim(d, x.ndim) for d in dim]
        if len(set(dims)) != len(dims):
            raise ShapeError(f"{name}: FFT dims must be unique")
        if s is not None and len(s) != len(dims):
            raise ShapeError(f"{name}: When given, dim and shape arguments must have the same length")
    elif s is not None:
        if len(s) > x.ndim:
            raise ShapeError(f"{name}: Got shape with {len(s)} values but input tensor only has {x.ndim} "
                             "dimensions.")
        dims = list(range(x.ndim - len(s), x.ndim))
    else:
        dims = list(range(x.ndim)) if default_all else []
    sizes: list[int | None] = [None] * len(dims) if s is None else [None if n == -1 else int(n) for n in s]
    for n in sizes:
        if n is not None and n < 1:
            raise ShapeError(f"{name}: Invalid number of data points ({n}) specified")
    return dims, sizes


def _resize(x: Tensor, dims: list[int], sizes: list[int]) -> Tensor:
    """``x`` zero-padded or cropped at the end of each of ``dims`` to ``sizes``."""
    pads = [0] * (2 * x.ndim)
    for d, n in zip(dims, sizes):
        pads[2 * d + 1] = n - x.shape[d]
    return x._rec("pad", [x], {"pads": pads, "value": 0}) if any(pads) else x


def _c2c(name: str, x: Tensor, s, dim, norm, forward: bool, default_all: bool) -> Tensor:
    x = _to_complex(x)
    dims, sizes = _dims_and_sizes(name, x, s, dim, default_all)
    x = _resize(x, dims, [x.shape[d] if n is None else n for d, n in zip(dims, sizes)])
    mode = norm_mode(norm, forward, name)
    return x._rec("fft_c2c", [x], {"dims": dims, "norm": mode, "forward": forward})


def _r2c(name: str, x: Tensor, s, dim, norm, forward: bool, default_all: bool) -> Tensor:
    """The half spectrum of a real signal; ``forward=False``: ihfft's (the conjugate, with the inverse's scale)."""
    x = _to_real(name, x)
    dims, sizes = _dims_and_sizes(name, x, s, dim, default_all)
    if not dims:
        raise ShapeError(f"{name} must transform at least one axis")
    x = _resize(x, dims, [x.shape[d] if n is None else n for d, n in zip(dims, sizes)])
    out = x._rec("fft_r2c", [x], {"dims": dims, "norm": norm_mode(norm, forward, name)})
    return out if forward else conj(out)


def _c2r(name: str, x: Tensor, s, dim, norm, forward: bool, default_all: bool) -> Tensor:
    """The real signal of a half spectrum; ``forward=True``: hfft's (of the conjugate, with the forward's scale)."""
    x = _to_complex(x)
    dims, sizes = _dims_and_sizes(name, x, s, dim, default_all)
    if not dims:
        raise ShapeError(f"{name} must transform at least one axis")
    last = dims[-1]
    n = sizes[-1] if sizes[-1] is not None else 2 * (x.shape[last] - 1)
    if n < 1:
        raise ShapeError(f"{name}: Invalid number of data points ({n}) specified")
    want = [x.shape[d] if m is None else m for d, m in zip(dims[:-1], sizes[:-1])] + [n // 2 + 1]
    x = _resize(x, dims, want)
    if forward:
        x = conj(x)
    return x._rec("fft_c2r", [x], {"dims": dims, "norm": norm_mode(norm, forward, name), "n": n})


# -- the transforms --------------------------------------------------------------------------------------------------

def fft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None, *, out=None) -> Tensor:  # noqa: A002
    """The one-dimensional discrete Fourier transform (complex; a real input's too)."""
    return write_out(out, _c2c("fft_fft", input, None if n is None else [n], [dim], norm, True, False))


def ifft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None, *, out=None) -> Tensor:  # noqa: A002
    """The one-dimensional inverse discrete Fourier transform."""
    return write_out(out, _c2c("fft_ifft", input, None if n is None else [n], [dim], norm, False, False))


def fft2(input: Tensor, s=None, dim=(-2, -1), norm: str | None = None, *, out=None) -> Tensor:  # noqa: A002
    """The two-dimensional discrete Fourier transform."""
    return write_out(out, _c2c("fft_fft2", input, s, dim, norm, True, True))


def ifft2(input: Tensor, s=None, dim=(-2, -1), norm: str | None = None, *, out=None) -> Tensor:  # noqa: A002
    """The two-dimensional inverse discrete Fourier transform."""
    return write_out(out, _c2c("fft_ifft2", input, s, dim, norm, False, True))


def fftn(input: Tensor, s=None, dim=None, norm: str | None = None, *, out=None) -> Tensor:  # noqa: A002
    """The N-dimensional discrete Fourier transform (every dim by default)."""
    return write_out(out, _c2c("fft_fftn", input, s, dim, norm, True, True))


def ifftn(input: Tensor, s=None, dim=None, norm: str | None = None, *, out=None) -> Tensor:  # noqa: A002
    """The N-dimensional inverse discrete Fourier transform."""
    return write_out(out, _c2c("fft_ifftn", input, s, dim, norm, False, True))


def rfft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None, *, out=None) -> Tensor:  # noqa: A002
    """The transform of a real signal: its n // 2 + 1 non-negative frequencies."""
    return write_out(out, _r2c("fft_rfft", input, None if n is None else [n], [dim], norm, True, False))


def irfft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None, *, out=None) -> Tensor:  # noqa: A002
    """``rfft``'s inverse: the real signal of ``n`` points (2 (m - 1) by default) of a half spectrum."""
    return write_out(out, _c2r("fft_irfft", input, None if n is None else [n], [dim], norm, False, False))


def rfft2(input: Tensor, s=None, dim=(-2, -1), norm: str | None = None, *, out=None) -> Tensor:  # noqa: A002
    """The two-dimensional transform of a real signal (the last dim halved)."""
    return write_out(out, _r2c("fft_rfft2", input, s, dim, norm, True, True))


def irfft2(input: Tensor, s=None, dim=(-2, -1), norm: str | None = None, *, out=None) -> Tensor:  # noqa: A002
    """``rfft2``'s inverse."""
    return write_out(out, _c2r("fft_irfft2", input, s, dim, norm, False, True))


def rfftn(input: Tensor, s=None, dim=None, norm: str | None = None, *, out=None) -> Tensor:  # noqa: A002
    """The N-dimensional transform of a real signal (the last transformed dim halved)."""
    return write_out(out, _r2c("fft_rfftn", input, s, dim, norm, True, True))


def irfftn(input: Tensor, s=None, dim=None, norm: str | None = None, *, out=None) -> Tensor:  # noqa: A002
    """``rfftn``'s inverse."""
    return write_out(out, _c2r("fft_irfftn", input, s, dim, norm, False, True))


def hfft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None, *, out=None) -> Tensor:  # noqa: A002
    """The transform of a Hermitian-symmetric signal given by its first half: a real spectrum of ``n`` points."""
    return write_out(out, _c2r("fft_hfft", input, None if n is None else [n], [dim], norm, True, False))


def ihfft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None, *, out=None) -> Tensor:  # noqa: A002
    """``hfft``'s inverse: the first half of the inverse transform of a real signal."""
    return write_out(out, _r2c("fft_ihfft", input, None if n is None else [n], [dim], norm, False, False))


def hfft2(input: Tensor, s=None, dim=(-2, -1), norm: str | None = None, *, out=None) -> Tensor:  # noqa: A002
    """The two-dimensional ``hfft``."""
    return write_out(out, _c2r("fft_hfft2", input, s, dim, norm, True, True))


def ihfft2(input: Tensor, s=None, dim=(-2, -1), norm: str | None = None, *, out=None) -> Tensor:  # noqa: A002
    """The two-dimensional ``ihfft``."""
    return write_out(out, _r2c("fft_ihfft2", input, s, dim, norm, False, True))


def hfftn(input: Tensor, s=None, dim=None, norm: str | None = None, *, out=None) -> Tensor:  # noqa: A002
    """The N-dimensional ``hfft``."""
    return write_out(out, _c2r("fft_hfftn", input, s, dim, norm, True, True))


def ihfftn(input: Tensor, s=None, dim=None, norm: str | None = None, *, out=None) -> Tensor:  # noqa: A002
    """The N-dimensional ``ihfft``."""
    return write_out(out, _r2c("fft_ihfftn", input, s, dim, norm, False, True))


# -- frequencies and shifts ------------------------------------------------------------------------------------------

def _freqs(values: np.ndarray, d: float, n: int, dtype, device, requires_grad: bool, out) -> Tensor:
    if out is not None and dtype is None:
        dtype = out.dtype
    dt = D.get(dtype) if dtype is not None else D.get_default_dtype()
    t = _creation.tensor(values / (d * n), dtype=dt, device=device, requires_grad=requires_grad)
    return write_out(out, t)


def fftfreq(n: int, d: float = 1.0, *, out=None, dtype=None, layout=None, device=None, requires_grad: bool = False,
            pin_memory: bool = False) -> Tensor:
    """The sample frequencies of an ``n``-point transform with spacing ``d``: [0, 1, ..., -(n // 2), ..., -1] /
    (d n); ``out=`` written as torch's (``layout`` and ``pin_memory`` accepted)."""
    k = np.concatenate([np.arange(0, (n - 1) // 2 + 1), np.arange(-(n // 2), 0)]).astype(np.float64)
    return _freqs(k, d, n, dtype, device, requires_grad, out)


def rfftfreq(n: int, d: float = 1.0, *, out=None, dtype=None, layout=None, device=None, requires_grad: bool = False,
             pin_memory: bool = False) -> Tensor:
    """The non-negative sample frequencies of ``rfft``: [0, 1, ..., n // 2] / (d n)."""
    return _freqs(np.arange(0, n // 2 + 1, dtype=np.float64), d, n, dtype, device, requires_grad, out)


def _shift(x: Tensor, dim, sign: int) -> Tensor:
    dims = list(range(x.ndim)) if dim is None else [dim] if isinstance(dim, int) else list(dim)
    if not dims:
        return x.clone()
    return x.roll([sign * (x.shape[d] // 2) for d in dims], dims)


def fftshift(input: Tensor, dim=None) -> Tensor:  # noqa: A002
    """The zero-frequency term moved to the centre of each of ``dim`` (all dims for ``None``): a roll by n // 2."""
    return _shift(input, dim, 1)


def ifftshift(input: Tensor, dim=None) -> Tensor:  # noqa: A002
    """``fftshift``'s inverse: a roll by -(n // 2)."""
    return _shift(input, dim, -1)


# -- the short-time transform (torch.stft, Tensor.stft) ----------------------------------------------------------------

def stft(input: Tensor, n_fft: int, hop_length: int | None = None, win_length: int | None = None,  # noqa: A002
         window: Tensor | None = None, center: bool = True, pad_mode: str = "reflect", normalized: bool = False,
         onesided: bool | None = None, return_complex: bool | None = None,
         align_to_window: bool | None = None) -> Tensor:
    """The short-time Fourier transform (``torch.stft``): the transform of each ``n_fft``-point frame, ``hop_length``
    apart (n_fft // 4 by default), times ``window`` (ones of ``win_length``; centred in n_fft), of ``input`` (1-D, or
    2-D with a batch dim) padded by n_fft // 2 each side with ``pad_mode`` when ``center``. The result is
    ``[batch?, frequencies, frames]``: n_fft // 2 + 1 frequencies when ``onesided`` (the default for a real input and
    window), complex, or its ``view_as_real`` when ``return_complex=False``. ``normalized``: scaled by 1/sqrt(n_fft).
    ``align_to_window=True`` (only without ``center``, as torch): frame ``t``'s window starts at ``t * hop_length``
    in ``input`` rather than its ``n_fft`` points (which differ when ``win_length < n_fft``), so there are
    ``1 + (L - win_length) // hop_length`` frames.
    """
    if center and align_to_window is not None:
        raise RuntimeError("stft align_to_window should only be set when center = false")
    real_input = not input.dtype.is_complex and (window is None or not window.dtype.is_complex)
    if return_complex is None:
        if real_input:
            raise ValueError("stft requires the return_complex parameter be given for real inputs, and will further "
                             "require that return_complex=True in a future PyTorch release.")
        return_complex = True
    if input.ndim not in (1, 2):
        raise ShapeError(f"stft: expected a 1D or 2D tensor, but got a {input.ndim}D one")
    hop = n_fft // 4 if hop_length is None else hop_length
    win = n_fft if win_length is None else win_length
    if n_fft <= 0 or hop <= 0 or not 0 < win <= n_fft:
        raise ShapeError(f"stft: expected 0 < n_fft, 0 < hop_length and 0 < win_length <= n_fft, got n_fft={n_fft}, "
                         f"hop_length={hop}, win_length={win}")
    if window is not None and (window.ndim != 1 or window.shape[0] != win):
        raise ShapeError(f"stft: expected a 1D window tensor of size equal to win_length={win}, but got window with "
                         f"size {list(window.shape)}")
    x = input if input.ndim == 2 else input.unsqueeze(0)
    if not x.dtype.is_inexact:
        x = x.to(D.get_default_dtype())
    if center:
        half = n_fft // 2
        x = pad(x.unsqueeze(1), [half, half], mode=pad_mode).squeeze(1)
    elif align_to_window and win < n_fft:  # (the window's points of frame t are input[t * hop:]: the zeros around
        left = (n_fft - win) // 2  # it in the n_fft-point frame fall outside the input at the ends)
        x = pad(x, [left, n_fft - win - left])
    if x.shape[-1] < n_fft:
        raise ShapeError(f"stft: input of {x.shape[-1]} points (after padding) is shorter than n_fft={n_fft}")
    frames = x.unfold(-1, n_fft, hop)  # [batch, frames, n_fft]
    if window is None and win < n_fft:
        window = x.new_ones((win,), dtype=D.to_real(x.dtype))
    if window is not None:
        left = (n_fft - win) // 2
        w = window._rec("pad", [window], {"pads": [left, n_fft - win - left], "value": 0}) if win < n_fft else window
        frames = frames * w
    if onesided is None:
        onesided = real_input
    norm = "ortho" if normalized else "backward"
    spec = (rfft if onesided else fft)(frames, dim=-1, norm=norm).transpose(-1, -2)
    if input.ndim == 1:
        spec = spec.squeeze(0)
    return spec if return_complex else C.view_as_real(spec)


_install.install_methods(Tensor, {"stft": stft})
_install.register({"stft": stft})
_install.loaded(__name__)
