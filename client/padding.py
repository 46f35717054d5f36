"""torch's ``F.pad`` (``tw.nn.functional.pad``, which re-exports it), below :mod:`tensorwire.tensor`: the modules that
add Tensor's methods (``diag_embed``, ``block_diag``, ``scatter_reduce``, ``constant_pad_nd``: client/array_extras.py)
and ``tw.stft`` pad with it without importing the nn package."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ._factories import from_data

if TYPE_CHECKING:
    from .tensor import Tensor

__all__ = ["pad"]


def pad(input: Tensor, pad, mode: str = "constant", value: float | None = None) -> Tensor:  # noqa: A002
    """torch's ``F.pad``: ``pad`` lists (left, right) pairs starting from the last dim; modes
    ``constant``, ``reflect``, ``replicate`` and ``circular``."""
    pad = [int(p) for p in pad]
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise ValueError("Padding length must be divisible by 2 and at most twice the number of dimensions")
    pads = [0] * (2 * input.ndim)
    for i in range(len(pad) // 2):
        d = input.ndim - 1 - i
        pads[2 * d], pads[2 * d + 1] = pad[2 * i], pad[2 * i + 1]
    if mode == "constant":
        return input._rec("pad", [input], {"pads": pads, "value": 0 if value is None else value})
    if mode not in ("reflect", "replicate", "circular"):
        raise NotImplementedError(f"pad mode {mode!r} is not supported")
    out = input
    for d in range(input.ndim):
        lo, hi = pads[2 * d], pads[2 * d + 1]
        if not lo and not hi:
            continue
        n = out.shape[d]
        j = np.arange(-lo, n + hi)
        if mode == "reflect":
            if lo >= n or hi >= n:
                raise ValueError("reflect padding must be smaller than the input size")
            j = np.abs(j)
            j = np.where(j >= n, 2 * (n - 1) - j, j)
        elif mode == "replicate":
            j = np.clip(j, 0, n - 1)
        else:  # torch crops the negative pads first, then wraps the positive ones around what is left
            start, stop = max(-lo, 0), n - max(-hi, 0)
            if stop <= start:
                raise ValueError(f"circular padding {[lo, hi]} leaves nothing of dim {d} (size {n}) to wrap")
            j = start + np.arange(-max(lo, 0), stop - start + max(hi, 0)) % (stop - start)
        out = out.index_select(d, from_data(out._s, j.astype(np.int64), None, out._dev))
    return out
