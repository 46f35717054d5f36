"""The counter-based random number generator every backend implements bit for bit.

Element ``i`` of a random op with attributes ``seed`` and ``offset`` takes the 64-bit word
``bits(seed, offset + i)``, where ``bits`` is SplitMix64's finaliser applied to
``seed * 0x9E3779B97F4A7C15 + counter`` (mod 2**64). Then:

* ``rand``: the top ``p`` bits of ``w`` times ``2**-p``, where ``p`` is the dtype's significand width
  (float64 53, float32 24, float16 11, bfloat16 8): ``(w >> (64 - p)) * 2**-p``, exact in the dtype and
  always below 1 (with more bits than the dtype holds, rounding would give 1.0).
* ``randn``: Box-Muller on the words of counters ``offset + 2i`` and ``offset + 2i + 1`` in float64,
  with ``u = (w >> 11) * 2**-53``: ``sqrt(-2 * log1p(-u1)) * cos(2 pi u2)``, then cast. (It consumes 2
  counters per element.)
* ``randint``: ``low + floor(u53 * (high - low))`` with ``u53 = (w >> 11) * 2**-53``.

The client advances its generator's offset by the counters each op consumes, so the same
``tw.manual_seed`` gives the same numbers on every device and every backend. A GPU backend
implements the same arithmetic on uint64 in its kernels.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
M1 = np.uint64(0xBF58476D1CE4E5B9)
M2 = np.uint64(0x94D049BB133111EB)


def counters_used(op: str, n: int) -> int:
    """How many counters an op with ``n`` elements consumes."""
    return 2 * n if op == "randn" else n


def bits(seed: int, offset: int, n: int, stride: int = 1, start: int = 0) -> np.ndarray:
    """The 64-bit words for counters ``offset + start + stride * i``, ``i < n``."""
    with np.errstate(over="ignore"):
        c = np.arange(n, dtype=np.uint64) * np.uint64(stride) + np.uint64((offset + start) % (1 << 64))
        z = np.uint64(seed % (1 << 64)) * GOLDEN + c
        z = (z ^ (z >> np.uint64(30))) * M1
        z = (z ^ (z >> np.uint64(27))) * M2
        return z ^ (z >> np.uint64(31))


def _u53(w: np.ndarray) -> np.ndarray:
    return (w >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


#: significand bits of each float dtype: ``rand`` draws exactly that many, so no value rounds up to 1
SIGNIFICAND_BITS = {np.dtype(np.float64): 53, np.dtype(np.float32): 24, np.dtype(np.float16): 11,
                    np.dtype(ml_dtypes.bfloat16): 8}


def uniform(seed: int, offset: int, shape, npdtype) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64))
    w = bits(seed, offset, n)
    p = SIGNIFICAND_BITS.get(np.dtype(npdtype), 24)
    if p == 53:
        u = _u53(w)
    else:
        u = (w >> np.uint64(64 - p)).astype(np.float32) * np.float32(1.0 / (1 << p))
    return u.astype(npdtype, copy=False).reshape(shape)


def normal(seed: int, offset: int, shape, npdtype) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64))
    u1 = _u53(bits(seed, offset, n, stride=2))
    u2 = _u53(bits(seed, offset, n, stride=2, start=1))
    z = np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * np.pi * u2)
    return z.astype(npdtype, copy=False).reshape(shape)


def randint(seed: int, offset: int, shape, npdtype, low: int, high: int) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64))
    u = _u53(bits(seed, offset, n))
    v = np.floor(u * float(high - low)).astype(np.int64) + low
    return np.minimum(v, high - 1).astype(npdtype, copy=False).reshape(shape)
