"""The counter-based random number generator every backend implements bit for bit.

Element ``i`` of a random op with attributes ``seed`` and ``offset`` takes the 64-bit word
``bits(seed, offset + i)``, where ``bits`` is SplitMix64's finaliser applied to
``(seed + 1) * 0x9E3779B97F4A7C15 + counter`` (mod 2**64): SplitMix64's first state after ``seed``, so that no
common seed starts on the word 0, which the finaliser keeps (until session 59 the word was ``seed * GOLDEN +
counter``: ``tw.manual_seed(0)``'s first ``rand`` was exactly 0.0, its ``log`` -inf, its first ``bernoulli(1e-6)``
1). Then:

* ``rand``: the top ``p`` bits of ``w`` times ``2**-p``, where ``p`` is the dtype's significand width
  (float64 53, float32 24, float16 11, bfloat16 8): ``(w >> (64 - p)) * 2**-p``, exact in the dtype and
  always below 1 (with more bits than the dtype holds, rounding would give 1.0).
* ``randn``: Box-Muller on the words of counters ``offset + 2i`` and ``offset + 2i + 1`` in float64,
  with ``u = (w >> 11) * 2**-53``: ``sqrt(-2 * L(u1)) * C(u2)``, then cast (it consumes 2 counters per
  element). ``L(u) ~ log1p(-u)`` and ``C(u) ~ cos(2 pi u)`` (both within 1 ulp) are defined by a fixed
  sequence of IEEE float64 ``+ - * /``, ``sqrt``, ``floor`` and compares, every one correctly rounded (no
  FMA contraction, no reassociation, no libm), so any backend reproduces them bit for bit.
  :func:`_log1p_neg` and :func:`_cos_2pi` below are the normative definition (``backends/codegen/
  rng_source.py`` spells them in C); in outline:

  - ``L``: ``x = 1 - u`` (exact). Scale ``x`` by exact powers of two to ``m = x * 2**n`` in
    ``[SQRT_HALF, 2 * SQRT_HALF)``: for ``b`` in 32, 16, 8, 4, 2, 1, if ``x * 2**b < SQRT_HALF`` then
    ``x *= 2**b, n += b``; then if ``x < SQRT_HALF``: ``x *= 2, n += 1``. With ``f = m - 1`` (exact),
    ``s = f / (2 + f)``, ``z = s * s``, ``R = z * P(z)`` (``P``: Horner over the doubles nearest
    ``2/3, 2/5, ..., 2/21``), ``h = 0.5 * f * f`` and ``k = -n``:
    ``L = k * LN2_HI - ((h - (s * (h + R) + k * LN2_LO)) - f)``.
  - ``C``: ``v = 4u``, ``q = floor(v)``, ``r = v - q``; if ``r > 0.5``: ``r -= 1, q += 1`` (all exact).
    ``theta = r * pi/2`` as a normalised double-double ``x + y`` (split ``r = r1 + r2`` with
    ``r1 = floor(r * 2**26) * 2**-26``, both products with the 27-bit ``PIO2_HI`` exact), then the
    Taylor kernels cos (to ``x**16``) and sin (to ``x**17``) on ``[-pi/4, pi/4]`` with tail ``y``;
    ``C`` is ``cos, -sin, -cos, sin, cos`` for ``q = 0, 1, 2, 3, 4``.
* ``randint``: ``low + floor(u53 * (high - low))`` with ``u53 = (w >> 11) * 2**-53``.

The client advances its generator's offset by the counters each op consumes, so the same
``tw.manual_seed`` gives the same numbers on every device and every backend. A GPU backend
implements the same arithmetic on uint64 in its kernels.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .shapes import numel

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
M1 = np.uint64(0xBF58476D1CE4E5B9)
M2 = np.uint64(0x94D049BB133111EB)


# -- randn's portable transcendentals -------------------------------------------------------------------------------
# Only correctly rounded float64 operations (+ - * / sqrt floor compare), in a fixed order: the C spelling in
# backends/codegen/rng_source.py (RANDN_C) performs the very same operations, so every backend gets the same bits.
# Changing a constant or the order of an operation here changes the stream: change RANDN_C with it.

SQRT_HALF = 0.7071067811865476                 # the double nearest sqrt(1/2): where log's reduction splits
LN2_HI = 0.6931471805601177                    # ln 2 rounded to a multiple of 2**-40: n * LN2_HI is exact (n <= 54)
LN2_LO = -1.7239444525614835e-13               # the double nearest ln 2 - LN2_HI
#: the doubles nearest 2/(2k+1), k = 1..10: 2 atanh(s) = 2s + s * sum_k c_k s**(2k)
LOG_COEFFS = (0.6666666666666666, 0.4, 0.2857142857142857, 0.2222222222222222, 0.18181818181818182,
              0.15384615384615385, 0.13333333333333333, 0.11764705882352941, 0.10526315789473684,
              0.09523809523809523)
PIO2_HI = 1.570796325802803                    # pi/2 rounded to 27 significant bits (a multiple of 2**-26)
PIO2_LO = 9.920935796805404e-10                # the double nearest pi/2 - PIO2_HI
#: the doubles nearest (-1)**k / (2k+4)!, k = 0..6: cos x = 1 - x**2/2 + x**4 * sum_k c_k x**(2k)
COS_COEFFS = (0.041666666666666664, -0.001388888888888889, 2.48015873015873e-05, -2.755731922398589e-07,
              2.08767569878681e-09, -1.1470745597729725e-11, 4.779477332387385e-14)
#: the doubles nearest (-1)**k / (2k+1)!, k = 1..8: sin x = x + x**3 * sum_k c_k x**(2k-2)
SIN_COEFFS = (-0.16666666666666666, 0.008333333333333333, -0.0001984126984126984, 2.7557319223985893e-06,
              -2.505210838544172e-08, 1.6059043836821613e-10, -7.647163731819816e-13, 2.8114572543455206e-15)


def _horner(coeffs, z):
    """``c0 + z * (c1 + z * (... + z * cN))``, innermost first."""
    p = np.full_like(z, coeffs[-1])
    for c in coeffs[-2::-1]:
        p = c + z * p
    return p


def _log1p_neg(u: np.ndarray) -> np.ndarray:
    """``log1p(-u)`` for float64 ``u`` in ``[0, 1)`` that are multiples of ``2**-53`` (within 1 ulp)."""
    x = 1.0 - u                                 # exact: u = k * 2**-53 with k < 2**53
    n = np.zeros_like(x)
    for b in (32, 16, 8, 4, 2, 1):              # exact scaling by powers of two: x * 2**n in [SQRT_HALF, 2 SQRT_HALF)
        t = x * float(1 << b)
        c = t < SQRT_HALF
        x = np.where(c, t, x)
        n = np.where(c, n + float(b), n)
    c = x < SQRT_HALF
    x = np.where(c, x * 2.0, x)
    n = np.where(c, n + 1.0, n)
    f = x - 1.0                                 # exact (Sterbenz)
    s = f / (2.0 + f)
    z = s * s
    r = z * _horner(LOG_COEFFS, z)
    h = 0.5 * f * f
    k = -n
    return k * LN2_HI - ((h - (s * (h + r) + k * LN2_LO)) - f)


def _cos_2pi(u: np.ndarray) -> np.ndarray:
    """``cos(2 pi u)`` for float64 ``u`` in ``[0, 1)`` that are multiples of ``2**-53`` (within 1 ulp)."""
    v = 4.0 * u
    q = np.floor(v)
    r = v - q                                   # exact, in [0, 1)
    up = r > 0.5
    r = np.where(up, r - 1.0, r)                # exact, in [-1/2, 1/2]: theta = r * pi/2 in [-pi/4, pi/4]
    q = np.where(up, q + 1.0, q)
    r1 = np.floor(r * 67108864.0) * 1.4901161193847656e-08   # r = r1 + r2, r1 a multiple of 2**-26, 0 <= r2 < 2**-26
    r2 = r - r1
    a = r1 * PIO2_HI                            # both products exact (25 or 26 bits times 27 bits)
    b = r2 * PIO2_HI
    hi = a + b
    lo = (b - (hi - a)) + r * PIO2_LO
    x = hi + lo                                 # theta = x + y, |y| <= ulp(x) / 2
    y = lo - (x - hi)
    z = x * x
    hz = 0.5 * z
    w = 1.0 - hz
    cos = w + (((1.0 - w) - hz) + (z * (z * _horner(COS_COEFFS, z)) - x * y))
    v3 = z * x
    sin = x - ((z * (0.5 * y - v3 * _horner(SIN_COEFFS[1:], z)) - y) - v3 * SIN_COEFFS[0])
    res = np.where((q == 1.0) | (q == 3.0), sin, cos)
    return np.where((q == 1.0) | (q == 2.0), -res, res)


def counters_used(op: str, n: int) -> int:
    """How many counters an op with ``n`` elements consumes."""
    return 2 * n if op == "randn" else n


def bits(seed: int, offset: int, n: int, stride: int = 1, start: int = 0) -> np.ndarray:
    """The 64-bit words for counters ``offset + start + stride * i``, ``i < n``: SplitMix64's finaliser of
    ``(seed + 1) * GOLDEN + counter``, worked in place on one array (a loader draws 32 indices a step: each numpy call
    on so few elements costs what its arithmetic does many times over)."""
    z = np.arange(n, dtype=np.uint64)
    if stride != 1:
        z *= np.uint64(stride)
    # ((seed + 1) * GOLDEN + offset + start, the counters' common part, in Python ints mod 2**64: one add a word)
    z += np.uint64((((seed % _WRAP) + 1) * _GOLDEN + offset + start) % _WRAP)
    t = z >> _S30
    z ^= t
    z *= M1
    np.right_shift(z, _S27, out=t)
    z ^= t
    z *= M2
    np.right_shift(z, _S31, out=t)
    z ^= t
    return z


def _u53(w: np.ndarray) -> np.ndarray:
    u = (w >> _S11).astype(np.float64)
    u *= 1.0 / (1 << 53)
    return u


_WRAP = 1 << 64
_GOLDEN = int(GOLDEN)
_S11, _S27, _S30, _S31 = np.uint64(11), np.uint64(27), np.uint64(30), np.uint64(31)


#: significand bits of each float dtype: ``rand`` draws exactly that many, so no value rounds up to 1
SIGNIFICAND_BITS = {np.dtype(np.float64): 53, np.dtype(np.float32): 24, np.dtype(np.float16): 11,
                    np.dtype(ml_dtypes.bfloat16): 8}


def uniform(seed: int, offset: int, shape, npdtype) -> np.ndarray:
    n = int(numel(shape))
    w = bits(seed, offset, n)
    p = SIGNIFICAND_BITS.get(np.dtype(npdtype), 24)
    if p == 53:
        u = _u53(w)
    else:
        u = (w >> np.uint64(64 - p)).astype(np.float32) * np.float32(1.0 / (1 << p))
    return u.astype(npdtype, copy=False).reshape(shape)


#: elements :func:`normal` computes at a time: its ~60 float64 temporaries a block then stay in cache (a whole 2.4M
#: element draw, a ResNet's 512x512x3x3 kaiming_normal_, took 876 ms at once, 168 ms in blocks of this size)
NORMAL_BLOCK = 1 << 14


def normal(seed: int, offset: int, shape, npdtype) -> np.ndarray:
    n = int(numel(shape))
    if n <= NORMAL_BLOCK:
        return _normal(seed, offset, n, npdtype).reshape(shape)
    out = np.empty(n, npdtype)
    for s in range(0, n, NORMAL_BLOCK):  # (each block from the counter its first element takes)
        e = min(n, s + NORMAL_BLOCK)
        out[s:e] = _normal(seed, offset + counters_used("randn", s), e - s, npdtype)
    return out.reshape(shape)


def _normal(seed: int, offset: int, n: int, npdtype) -> np.ndarray:
    u1 = _u53(bits(seed, offset, n, stride=2))
    u2 = _u53(bits(seed, offset, n, stride=2, start=1))
    z = np.sqrt(-2.0 * _log1p_neg(u1)) * _cos_2pi(u2)
    return z.astype(npdtype, copy=False)


def randint(seed: int, offset: int, shape, npdtype, low: int, high: int) -> np.ndarray:
    u = _u53(bits(seed, offset, int(numel(shape))))
    u *= float(high - low)
    v = np.floor(u, out=u).astype(np.int64)
    v += low
    np.minimum(v, high - 1, out=v)
    return v.astype(npdtype, copy=False).reshape(shape)
