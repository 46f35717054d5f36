"""``randn`` in C: the portable Box-Muller of :mod:`tensorwire.protocol.random`, bit for bit.

:data:`RANDN_C` is preamble source shared by the C-like targets. It defines ``tw_randn(seed, offset, i)``
(element ``i``'s float64 normal; cast it to the output dtype) and its two helpers, and needs from the
preamble before it: ``tw_rng_bits`` and ``tw_u53`` (``render.PREAMBLE_RNG``), and the macros ``TW_FN``,
``TW_I64``, ``TW_U64``, ``TW_SQRT`` and ``TW_FLOOR``. No libm transcendental is called and no bit casts are
needed: everything is float64 ``+ - * /``, ``sqrt``, ``floor`` and compares, each correctly rounded, in the
exact order of ``protocol.random._log1p_neg`` / ``_cos_2pi``. That holds only when the compiler neither
contracts ``a * b + c`` into an FMA nor reassociates: C ``-ffp-contract=off`` (and no ``-ffast-math``),
OpenCL ``#pragma OPENCL FP_CONTRACT OFF`` (and no ``-cl-fast-relaxed-math`` / ``-cl-mad-enable``), CUDA
and HIP ``--fmad=false`` (or ``-ffp-contract=off``). Double division and sqrt must be the IEEE ones (the
default for double in OpenCL, CUDA and HIP). Targets without float64 (Metal) cannot run it as is.
"""

from __future__ import annotations

#: tw_randn and its helpers; the literals are ``repr`` of the constants in protocol/random.py
RANDN_C = r"""
TW_FN double tw_log1p_neg(double u) {  /* log1p(-u), u a multiple of 2**-53 in [0, 1) */
  double x = 1.0 - u, n = 0.0, t;
  t = x * 4294967296.0; if (t < 0.7071067811865476) { x = t; n = n + 32.0; }
  t = x * 65536.0; if (t < 0.7071067811865476) { x = t; n = n + 16.0; }
  t = x * 256.0; if (t < 0.7071067811865476) { x = t; n = n + 8.0; }
  t = x * 16.0; if (t < 0.7071067811865476) { x = t; n = n + 4.0; }
  t = x * 4.0; if (t < 0.7071067811865476) { x = t; n = n + 2.0; }
  t = x * 2.0; if (t < 0.7071067811865476) { x = t; n = n + 1.0; }
  if (x < 0.7071067811865476) { x = x * 2.0; n = n + 1.0; }
  double f = x - 1.0;
  double s = f / (2.0 + f);
  double z = s * s;
  double p = 0.09523809523809523;
  p = 0.10526315789473684 + z * p;
  p = 0.11764705882352941 + z * p;
  p = 0.13333333333333333 + z * p;
  p = 0.15384615384615385 + z * p;
  p = 0.18181818181818182 + z * p;
  p = 0.2222222222222222 + z * p;
  p = 0.2857142857142857 + z * p;
  p = 0.4 + z * p;
  p = 0.6666666666666666 + z * p;
  double r = z * p;
  double h = 0.5 * f * f;
  double k = -n;
  return k * 0.6931471805601177 - ((h - (s * (h + r) + k * -1.7239444525614835e-13)) - f);
}
TW_FN double tw_cos_2pi(double u) {  /* cos(2 pi u), u a multiple of 2**-53 in [0, 1) */
  double v = 4.0 * u;
  double q = TW_FLOOR(v);
  double r = v - q;
  if (r > 0.5) { r = r - 1.0; q = q + 1.0; }
  double r1 = TW_FLOOR(r * 67108864.0) * 1.4901161193847656e-08;
  double r2 = r - r1;
  double a = r1 * 1.570796325802803, b = r2 * 1.570796325802803;
  double hi = a + b;
  double lo = (b - (hi - a)) + r * 9.920935796805404e-10;
  double x = hi + lo;
  double y = lo - (x - hi);
  double z = x * x;
  double pc = 4.779477332387385e-14;
  pc = -1.1470745597729725e-11 + z * pc;
  pc = 2.08767569878681e-09 + z * pc;
  pc = -2.755731922398589e-07 + z * pc;
  pc = 2.48015873015873e-05 + z * pc;
  pc = -0.001388888888888889 + z * pc;
  pc = 0.041666666666666664 + z * pc;
  double hz = 0.5 * z;
  double w = 1.0 - hz;
  double c = w + (((1.0 - w) - hz) + (z * (z * pc) - x * y));
  double ps = 2.8114572543455206e-15;
  ps = -7.647163731819816e-13 + z * ps;
  ps = 1.6059043836821613e-10 + z * ps;
  ps = -2.505210838544172e-08 + z * ps;
  ps = 2.7557319223985893e-06 + z * ps;
  ps = -0.0001984126984126984 + z * ps;
  ps = 0.008333333333333333 + z * ps;
  double v3 = z * x;
  double sn = x - ((z * (0.5 * y - v3 * ps) - y) - v3 * -0.16666666666666666);
  double res = (q == 1.0 || q == 3.0) ? sn : c;
  return (q == 1.0 || q == 2.0) ? -res : res;
}
TW_FN double tw_randn(TW_I64 seed, TW_I64 offset, TW_I64 i) {
  TW_I64 c1 = (TW_I64)((TW_U64)offset + 2 * (TW_U64)i);  /* wraps mod 2**64, like the counters */
  double u1 = tw_u53(tw_rng_bits(seed, c1)), u2 = tw_u53(tw_rng_bits(seed, (TW_I64)((TW_U64)c1 + 1)));
  return TW_SQRT(-2.0 * tw_log1p_neg(u1)) * tw_cos_2pi(u2);
}
"""
