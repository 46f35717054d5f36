"""float32 erf (GELU's largest kernel), spelled twice from one set of coefficients: in numpy (:func:`erf_float32`)
and in C for the host library (:func:`c_source`, built and called by :mod:`.host_c`: ``host_c.erf_f32``).

Both compute the same thing in the same order, and neither needs scipy:

* |x| <= 1 (most of GELU's inputs over sqrt 2): erf(x) = x + x q(x^2 - 1/2), q a degree-6 weighted least-squares fit
  (to minimax) of erf(x)/x - 1 in float64, its coefficients rounded to float32 (:data:`ERF_Q`, constant term first),
  evaluated in float32 (Horner; the shift by 1/2 keeps its partial sums small). Every float32 in [-4, 4] was checked
  once against float64 (all 2.16e9 of them): within 0.98 ulp of the exact erf, 94% correctly rounded.
* 1 < |x| (NaN too): erf(x) = 1 - exp(-x^2) g(1/x) / x with |x| clipped to 4 (past 4 erf rounds to +-1 in float32),
  g(s) = x exp(x^2) erfc(x) on s in [1/4, 1], a degree-12 Chebyshev least-squares fit of it in u = (s - 5/8) / (3/8)
  put in powers of u (:data:`ERFC_TAIL`, constant term first): within 5.7e-10 of g relatively, evaluated in float64
  (x^2 of a float32 is exact there). Every float32 in (1, 4.5], both signs: within 0.5014 ulp of the exact erf,
  99.997% correctly rounded.

Until session 56 the values beyond 1 came from scipy where it was installed: a float32 model's first GELU imported
scipy.special (~0.15 s of a worker's cold run, ~7% of the char-level transformer's), and erf's bits depended on
whether scipy was there. The C spelling runs the polynomial on 16 lanes where the CPU has AVX-512 (and the fit's
exponential on libmvec's): ~2 ns an element against ~4.5 for the numpy spelling's ~45 array operations (GELU's sizes,
16K-100K elements), where a GELU model's interpreted steps spent ~15% of their time (the char-level transformer's
warm run, session 56).
``tests/unit/backends/cpu/test_erf_float32.py`` checks both against float64.
"""

from __future__ import annotations

import math

import numpy as np

from .scratch import scratch

#: q's coefficients (float32), constant term first: see the module's docstring
ERF_Q = tuple(np.float32(c) for c in (-0.03453126177191734, -0.281072199344635, 0.07940997928380966,
                                      -0.018283359706401825, 0.00348029937595129, -0.0005653963307850063,
                                      7.85369920777157e-05))
_ONE, _SHIFT = np.float32(1.0), np.float32(0.5)
#: g's coefficients (float64), in powers of u, constant term first: see the module's docstring
ERFC_TAIL = (0.4895247876041225, -0.06434461990492887, -0.00018204205746073917, 0.003802274370866844,
             -0.0015432747575895851, 0.0003677260734870608, -2.7878214072099883e-05, -2.5138923191539717e-05,
             1.7102002420817158e-05, -7.607499166740831e-06, 2.4204113127107658e-06, 2.3854319850410914e-07,
             -4.1173591877524735e-07)
#: below this many elements the numpy spelling's ~45 array operations (~25 us whatever the length) cost more than
#: ``math.erf`` element by element (:func:`_erf_short`)
POLY_MIN = 256
#: elements a block of the C spelling (:func:`c_source`)
C_BLOCK = 512
#: GELU's constants, 1/sqrt(2) and 1/sqrt(2 pi) (``kernels._gelu_grad`` rounds them to its compute dtype)
SQRT_HALF, INV_SQRT_2PI = 1 / math.sqrt(2.0), 1 / math.sqrt(2 * math.pi)


def erf_float32(x: np.ndarray) -> np.ndarray:
    """erf of a float32 array in numpy, within 1 ulp of the exact value (the module's docstring): the polynomial on
    [-1, 1], the fit beyond (:func:`erf_tail`), its temporaries the thread's scratch buffers (:mod:`.scratch`: fresh
    arrays fault their pages in call after call); an array of fewer than :data:`POLY_MIN` elements by ``math.erf``."""
    if x.size < POLY_MIN:
        return _erf_short(x)
    xc = np.clip(x, -_ONE, _ONE, out=scratch("erf_clip", x.shape, np.float32))  # (NaN stays NaN: fails xc == x)
    z = np.multiply(xc, xc, out=scratch("erf_z", x.shape, np.float32))
    z -= _SHIFT
    q = ERF_Q
    y = z * q[6]
    for c in q[5:0:-1]:
        y += c
        y *= z
    y += q[0]
    y *= xc
    y += xc
    out = np.not_equal(xc, x, out=scratch("erf_out", x.shape, np.bool_))
    if out.any():
        i = np.flatnonzero(out)
        y.put(i, erf_tail(np.ravel(x).take(i)))
    return y


def _erf_short(x: np.ndarray) -> np.ndarray:
    """erf of a short float32 array by ``math.erf`` (float64, rounded once to float32), element by element."""
    return np.array([math.erf(v) for v in x.ravel().tolist()], np.float64).reshape(x.shape).astype(np.float32)


def erf_tail(x: np.ndarray) -> np.ndarray:
    """erf of float32 values beyond [-1, 1] (NaN too), as float32, by the fit of :data:`ERFC_TAIL`."""
    t = np.abs(x, out=scratch("erf_t", x.shape, np.float64))
    np.clip(t, 1.0, 4.0, out=t)  # (NaN stays NaN)
    s = np.reciprocal(t, out=scratch("erf_s", x.shape, np.float64))
    u = np.subtract(s, 0.625, out=scratch("erf_u", x.shape, np.float64))
    u /= 0.375
    c = ERFC_TAIL
    g = np.multiply(u, c[-1], out=scratch("erf_g", x.shape, np.float64))
    for k in c[-2:0:-1]:
        g += k
        g *= u
    g += c[0]
    t *= t
    np.negative(t, out=t)
    np.exp(t, out=t)
    t *= g
    t *= s
    np.subtract(1.0, t, out=t)  # (past 4, clipped to 4: 1 - 1.5e-8, which rounds to 1 in float32)
    np.copysign(t, x, out=t)
    return t.astype(np.float32)


def c_source() -> str:
    """The C functions ``tw_erf_f32(const float *x, float *out, long long n)`` and ``tw_gelu_grad_f32(const float *g,
    const float *x, float *out, long long n)``: :func:`erf_float32`'s arithmetic in its order (the host library is
    built without FMA contraction), and ``kernels._gelu_grad``'s from it (its exponential libmvec's ``expf``, whose
    last bit may differ from numpy's). Block by block of :data:`C_BLOCK` elements: the polynomial on every lane, then
    the fit on the block's elements beyond 1 (and NaNs) gathered together, both loops vectorised (the fit's exponential
    on libmvec's); computed on every lane, the fit's two divisions made the kernel ~4 ns an element. OpenMP's threads
    share the blocks of a large call."""
    q = [f"{float(c).hex()}f" for c in ERF_Q]
    g = [float(c).hex() for c in ERFC_TAIL]
    poly = "".join(f"    y = (y + {c}) * z;\n" for c in q[5:0:-1])
    tail = "".join(f"    g = (g + {c}) * u;\n" for c in g[-2:0:-1])
    half, inv = float(np.float32(SQRT_HALF)).hex(), float(np.float32(INV_SQRT_2PI)).hex()
    return f"""
static void tw_erf_block(const float *x, float *out, int len) {{
  int at[{C_BLOCK} + 1];
  int m = 0;
  #pragma omp simd
  for (int i = 0; i < len; i++) {{
    float v = x[i];
    float xc = v > 1.0f ? 1.0f : (v < -1.0f ? -1.0f : v);  /* (NaN stays NaN, and fails xc == v) */
    float z = xc * xc;
    z = z - 0.5f;
    float y = z * {q[6]};
{poly}    y = y + {q[0]};
    y = y * xc;
    out[i] = y + xc;
  }}
  for (int i = 0; i < len; i++) {{  /* (without a branch: their order is random) */
    at[m] = i;
    m += !(x[i] >= -1.0f && x[i] <= 1.0f);
  }}
  float tv[{C_BLOCK}], tr[{C_BLOCK}];
  for (int k = 0; k < m; k++) tv[k] = x[at[k]];
  #pragma omp simd
  for (int k = 0; k < m; k++) {{
    float v = tv[k];
    double t = fabs((double)v);
    t = t < 1.0 ? 1.0 : (t > 4.0 ? 4.0 : t);  /* (NaN stays NaN) */
    double s = 1.0 / t;
    double u = (s - 0.625) / 0.375;
    double g = u * {g[-1]};
{tail}    g = g + {g[0]};
    double r = 1.0 - exp(-(t * t)) * g * s;
    tr[k] = (float)copysign(r, (double)v);
  }}
  for (int k = 0; k < m; k++) out[at[k]] = tr[k];
}}

void tw_erf_f32(const float *x, float *out, long long n) {{
  #pragma omp parallel for schedule(static) if (n >= 1048576)
  for (long long b = 0; b < n; b += {C_BLOCK})
    tw_erf_block(x + b, out + b, (int)(b + {C_BLOCK} < n ? {C_BLOCK} : n - b));
}}

void tw_gelu_grad_f32(const float *g, const float *x, float *out, long long n) {{
  #pragma omp parallel for schedule(static) if (n >= 1048576)
  for (long long b = 0; b < n; b += {C_BLOCK}) {{
    int len = (int)(b + {C_BLOCK} < n ? {C_BLOCK} : n - b);
    float xs[{C_BLOCK}], cdf[{C_BLOCK}];
    const float *xb = x + b, *gb = g + b;
    #pragma omp simd
    for (int i = 0; i < len; i++) xs[i] = xb[i] * {half}f;
    tw_erf_block(xs, cdf, len);
    #pragma omp simd
    for (int i = 0; i < len; i++) {{
      float c = (cdf[i] + 1.0f) * 0.5f;
      float p = xb[i] * xb[i];
      p = p * -0.5f;
      p = expf(p);
      p = p * {inv}f;
      p = p * xb[i];
      out[b + i] = (p + c) * gb[i];
    }}
  }}
}}
"""
