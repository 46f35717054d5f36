"""``tw.fft`` (issue 33): ``fftshift`` and ``ifftshift`` (rolls, any dtype). The transforms themselves have complex
inputs or results, and tensorwire has no complex dtypes yet: each raises ``NotImplementedError`` saying so."""

from __future__ import annotations

from .tensor import Tensor

__all__ = ["fftshift", "ifftshift"]


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


def _complex_transform(name: str):
    def transform(*args, **kwargs):
        raise NotImplementedError(f"fft.{name}: its input or result is complex, and tensorwire has no complex dtypes "
                                  "yet (numpy.fft on the values fetched with .numpy() computes it on the host)")

    transform.__name__ = transform.__qualname__ = name
    transform.__doc__ = f"``torch.fft.{name}``: not available yet (complex dtypes)."
    return transform


for _name in ("fft", "ifft", "fft2", "ifft2", "fftn", "ifftn", "rfft", "irfft", "rfft2", "irfft2", "rfftn", "irfftn",
              "hfft", "ihfft", "hfft2", "ihfft2", "hfftn", "ihfftn"):
    globals()[_name] = _complex_transform(_name)
