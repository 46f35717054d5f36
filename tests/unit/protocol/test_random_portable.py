"""randn's portable definition: accurate, well distributed, and reproduced bit for bit by the C preamble.

``protocol.random`` computes ``log1p(-u)`` and ``cos(2 pi u)`` with correctly rounded float64 operations only;
``backends/codegen/rng_source.py`` spells the same operations in C. Compiled with gcc (``-ffp-contract=off``) the
C must give exactly numpy's bits.
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from fractions import Fraction
from math import factorial

import numpy as np
import pytest

from tensorwire.backends.codegen import render
from tensorwire.backends.codegen.rng_source import RANDN_C
from tensorwire.protocol import random as R

MASK = (1 << 64) - 1
EDGES = np.array([0, 1, 2, 3, 2**50, 2**51 - 1, 2**51, 2**51 + 1, 2**52 - 1, 2**52, 2**52 + 1, 3 * 2**51,
                  5 * 2**50, 7 * 2**50, 2**53 - 2, 2**53 - 1], dtype=np.uint64)


def _samples(n: int) -> np.ndarray:
    """``u = k * 2**-53``: the edges (0, 2**-53, 1/4, 1/2, 3/4, 1 - 2**-53, ...) and ``n`` random draws."""
    k = np.concatenate([EDGES, np.random.default_rng(0).integers(0, 2**53, n, dtype=np.uint64)])
    return k.astype(np.float64) * 2.0**-53


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in units of float64 ulps of ``want`` (``want`` a more precise float type)."""
    ulp = np.spacing(np.abs(want.astype(np.float64))).astype(want.dtype)
    return (np.abs(got.astype(want.dtype) - want) / ulp).astype(np.float64)


def _errors():
    """``u`` and the ulp errors of ``_log1p_neg(u)``, ``_cos_2pi(u)`` and ``sqrt(-2 L(u)) C(u)``, against long double
    when it has >= 64 bits, else mpmath."""
    if np.finfo(np.longdouble).nmant >= 63:
        u = _samples(200_000)
        ld = u.astype(np.longdouble)
        log_ref = np.log1p(-ld)
        v = ld * 4  # cos(2 pi u) after an exact quadrant reduction: accurate near its zeros too
        q = np.floor(v + np.longdouble(0.5))
        th = (v - q) * np.longdouble("1.570796326794896619231321691639751442")
        cos_ref = np.choose(q.astype(np.int64) % 4, [np.cos(th), -np.sin(th), -np.cos(th), np.sin(th)])
        lg, c = R._log1p_neg(u), R._cos_2pi(u)
        return (u, _ulps(lg, log_ref), _ulps(c, cos_ref),
                _ulps(np.sqrt(-2.0 * lg) * c, np.sqrt(-2 * log_ref) * cos_ref))
    mpmath = pytest.importorskip("mpmath", reason="long double is float64 here and mpmath is not installed")
    mpmath.mp.prec = 100
    u = _samples(2_000)
    lg, c = R._log1p_neg(u), R._cos_2pi(u)
    log_ref = [mpmath.log1p(-mpmath.mpf(x)) for x in u]
    cos_ref = [mpmath.cospi(2 * mpmath.mpf(x)) for x in u]
    z_ref = [mpmath.sqrt(-2 * a) * b for a, b in zip(log_ref, cos_ref)]

    def ulps(got, want):
        return np.array([0.0 if w == 0 and g == 0 else float(abs(mpmath.mpf(g) - w)) / np.spacing(abs(float(w)))
                         for g, w in zip(got, want)])

    return u, ulps(lg, log_ref), ulps(c, cos_ref), ulps(np.sqrt(-2.0 * lg) * c, z_ref)


def test_constants_are_the_documented_roundings():
    assert R.LOG_COEFFS == tuple(float(Fraction(2, 2 * k + 1)) for k in range(1, 11))
    assert R.COS_COEFFS == tuple(float(Fraction((-1) ** k, factorial(2 * k + 4))) for k in range(7))
    assert R.SIN_COEFFS == tuple(float(Fraction((-1) ** k, factorial(2 * k + 1))) for k in range(1, 9))
    assert R.PIO2_HI * 2**26 == int(R.PIO2_HI * 2**26) and R.LN2_HI * 2**40 == int(R.LN2_HI * 2**40)
    assert abs(R.PIO2_HI + R.PIO2_LO - np.pi / 2) < 1e-16 and abs(R.LN2_HI + R.LN2_LO - np.log(2)) < 1e-16
    for c in (R.SQRT_HALF, R.LN2_HI, R.LN2_LO, R.PIO2_HI, R.PIO2_LO, *R.LOG_COEFFS, *R.COS_COEFFS, *R.SIN_COEFFS):
        assert repr(c) in RANDN_C, c  # the C spells the same doubles


def test_transcendentals_are_accurate():
    u, e_log, e_cos, e_z = _errors()
    # measured with mpmath over 10**6 draws plus edges: log1p_neg <= 0.87 ulp, cos_2pi <= 0.76, the product <= 2.4
    assert e_log.max() <= 1.0, (e_log.max(), u[e_log.argmax()])
    assert e_cos.max() <= 1.0, (e_cos.max(), u[e_cos.argmax()])
    assert e_z.max() <= 3.0, (e_z.max(), u[e_z.argmax()])


def test_exact_points():
    u = np.array([0.0, 0.25, 0.5, 0.75, 0.125])
    c = R._cos_2pi(u)
    assert c[:4].tolist() == [1.0, 0.0, -1.0, 0.0] and c[4] == np.float64(np.sqrt(0.5))
    lg = R._log1p_neg(np.array([0.0, 0.5, 0.75, 1 - 2.0**-53]))
    assert lg[0] == 0.0 and lg[1] == -np.log(2.0) and lg[2] == -2 * np.log(2.0) and lg[3] == -53 * np.log(2.0)


def test_normal_distribution():
    z = R.normal(2024, 0, (1_000_000,), np.float64)
    assert np.all(np.isfinite(z)) and np.abs(z).max() < 8.58  # sqrt(-2 log 2**-53) = 8.57...
    assert abs(z.mean()) < 0.005 and abs(z.std() - 1) < 0.005
    assert abs(np.mean(z**3)) < 0.02 and abs(np.mean(z**4) - 3) < 0.03


def _c_function(src: str, name: str) -> str:
    """The definition of function ``name`` in preamble source ``src`` (from its ``TW_FN`` to its closing brace)."""
    m = re.search(r"TW_FN[^;{]*\b" + name + r"\(", src)
    assert m, f"{name} is not defined in render.PREAMBLE_RNG"
    depth, i = 0, src.index("{", m.end())
    for j in range(i, len(src)):
        depth += {"{": 1, "}": -1}.get(src[j], 0)
        if depth == 0:
            return src[m.start():j + 1] + "\n"
    raise AssertionError(name)


HARNESS = r"""
#include <math.h>
#define TW_FN static inline
#define TW_I64 long long
#define TW_U64 unsigned long long
#define TW_U64C(x) x##ull
#define TW_SQRT sqrt
#define TW_FLOOR floor
{rng}{randn}
void fill_f64(long long seed, long long offset, long long n, double* out) {{
  for (long long i = 0; i < n; i++) out[i] = tw_randn(seed, offset, i);
}}
void fill_f32(long long seed, long long offset, long long n, float* out) {{
  for (long long i = 0; i < n; i++) out[i] = (float)tw_randn(seed, offset, i);
}}
void log1p_neg(long long n, const double* u, double* out) {{
  for (long long i = 0; i < n; i++) out[i] = tw_log1p_neg(u[i]);
}}
void cos_2pi(long long n, const double* u, double* out) {{
  for (long long i = 0; i < n; i++) out[i] = tw_cos_2pi(u[i]);
}}
"""


@pytest.fixture(scope="module")
def clib(tmp_path_factory):
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (gcc or cc) on PATH")
    rng = _c_function(render.PREAMBLE_RNG, "tw_rng_bits") + _c_function(render.PREAMBLE_RNG, "tw_u53")
    d = tmp_path_factory.mktemp("randn_c")
    (d / "randn.c").write_text(HARNESS.format(rng=rng, randn=RANDN_C))
    subprocess.run([cc, "-O2", "-ffp-contract=off", "-fno-fast-math", "-shared", "-fPIC", "-o", str(d / "randn.so"),
                    str(d / "randn.c"), "-lm"], check=True, capture_output=True, text=True)
    lib = ctypes.CDLL(str(d / "randn.so"))
    i64, ptr = ctypes.c_longlong, ctypes.c_void_p
    for f in (lib.fill_f64, lib.fill_f32):
        f.argtypes, f.restype = [i64, i64, i64, ptr], None
    for f in (lib.log1p_neg, lib.cos_2pi):
        f.argtypes, f.restype = [i64, ptr, ptr], None
    return lib


def _signed(x: int) -> int:
    x &= MASK
    return x - (1 << 64) if x >> 63 else x


@pytest.mark.parametrize("seed,offset", [(0, 0), (42, 7), (2**63 + 5, 2**40 + 1), (2**64 - 1, 2**64 - 5)])
def test_c_randn_matches_numpy_bit_for_bit(clib, seed, offset):
    n = 100_000
    for dt, fill in ((np.float64, clib.fill_f64), (np.float32, clib.fill_f32)):
        out = np.empty(n, dt)
        fill(_signed(seed), _signed(offset), n, out.ctypes.data)
        want = R.normal(seed, offset, (n,), dt)
        assert out.tobytes() == want.tobytes(), (dt, int(np.sum(out.view(np.uint8) != want.view(np.uint8))))


def test_c_helpers_match_numpy_on_edges(clib):
    u = np.ascontiguousarray(_samples(20_000))
    for name, ref in (("log1p_neg", R._log1p_neg), ("cos_2pi", R._cos_2pi)):
        out = np.empty_like(u)
        getattr(clib, name)(len(u), u.ctypes.data, out.ctypes.data)
        assert out.tobytes() == ref(u).tobytes(), name
