"""Hand-written C for some of the CPU's numpy kernels, built once by the host's C compiler (the kernel cache keeps the
library across processes): ``randn``'s fill, ``max_pool2d``'s gradient, and ``log_softmax`` and its gradient along
the last axis. Each numpy spelling stays, for a CPU
that cannot compile (no compiler, a kernel cache refused, ``TENSORWIRE_CPU_COMPILE=0``) and for dtypes the C does
not take; the functions here return None then.

* ``randn``: the portable Box-Muller of :mod:`tensorwire.protocol.random` is ~60 float64 array operations an element
  in numpy (~70 ns an element in cache-sized blocks): a model's initialisation by ``normal_``/``kaiming_normal_``
  draws every weight that way (a ResNet-18's 11M: 0.8 s; torch's ~0.06). The C spelling
  (``codegen/rng_source.RANDN_C``, which the compiled kernels of every C-like target share) does the same correctly
  rounded operations in the same order under the CPU compiler's flags (no FMA contraction, no fast-math:
  ``compiled.FLAGS``): the same bits.
* ``max_pool2d_grad``: numpy's spelling makes nine passes over spatial-first copies of the input and the gradient
  (15.7 ms for ResNet's stem at batch 64, torch's ~1.1); the C one visits each window once, in torch's order: its
  gradient goes to the window's first maximum (the first NaN where there is one), windows adding up where they
  overlap, output by output as torch's CPU kernel adds them.
* ``log_softmax`` and ``log_softmax_grad`` along the last axis: numpy makes five passes over temporaries as large as
  the input (a word-level language model's [700, 7115] decoder output: 15-18 ms, torch's ~4 on one thread); the C
  makes three over each row, its exponentials vectorised by glibc's libmvec (``codegen/c.py``'s declarations), its
  rows shared by OpenMP's threads in a large call. The sums run in another order than numpy's pairwise ones: the
  values differ by rounding, not more.
* batch norm (``bn_moments``, ``bn_grad_sums``, ``bn_apply``, ``bn_grad_input``): numpy's spellings make 3-5 passes
  over temporaries as large as the input per kernel; a ResNet's [100, 64, 8, 8] took ~3.8 ms for the statistics,
  the normalisation, the gradient's sums and the input gradient, ~1.0 ms in C (this host, under load). The
  statistics and sums are float64 in another order (rounding); the normalisation and the input gradient are
  numpy's float operations in numpy's order, so its bits.
* ``conv2d_direct``: float32 stride-1 convs of up to 64 channels (``conv._direct_fits`` decides), forward and, with
  the weights flipped, the input gradient: im2col copies kh*kw times the input and its gemms are skinny ([rows, 144]
  @ [144, 16] at 16 channels ran at ~28 GFLOP/s here); the kernel keeps a block of output channels x 2 vectors of
  positions in registers instead (4 x 2 x 8 lanes, or 8 x 2 x 16 where the CPU has AVX-512, outputs at most 8 wide
  then in vectors of two rows of 8).
  ``conv2d_grad_weight_direct``, the weight gradient of the same convs, keeps 4 output channels x 3 kernel columns
  of 8-lane sums in registers over a chunk of images (at [100, 16, 32, 32] 3.9 ms against the gemms' 11.8). The
  phase split and merge of strided convs (``conv_phases.py``) are here too, and make the kernels' zero-padded
  copies (one pass, where numpy's fill and copy made two). These conv kernels contract multiply-adds into FMAs (one
  rounding), as the BLAS gemms they stand in for do.

The library is built on a background thread from the first time a large call wants it while the kernel cache lacks it
(:data:`BUILD_ELEMENTS`), numpy's spellings serving the calls until it is there: no call waits for the compiler, and a
program of small calls (a DCGAN's inits) never starts it; from the cache, or once built, it serves every call of
:data:`MIN_ELEMENTS` and more. It is built in four parts, four libraries (:data:`PARTS`), each used as soon as it is
there: randn's fill (~0.16 s of gcc here), the conv kernels (~0.7 s, :data:`PART_FLAGS`), the row kernels (~0.45 s),
float32 erf and GELU's gradient (~0.1 s), the part a call wants first (the fill and erf are built for their own calls
only: :data:`OWN_CALLS_ONLY`). So a large model's first convolutions wait for the one part (a cold CIFAR ResNet run, 3
steps: 2.59 -> 2.49 s, median of 8, with the conv and row kernels split; built at once in parallel, 2.49 s too, on 2
cores shared with the run), and a large model's initialisation draws most of its weights in C, its fill built from a
middling draw (:data:`RANDOM_BUILD_ELEMENTS`) in ~0.2 s.
``tests/unit/backends/cpu/test_host_c.py`` checks each against its numpy spelling.
"""

from __future__ import annotations

import ctypes
import logging
import threading

import numpy as np

from ..codegen.c import CRenderer
from ..codegen.cache import NotCached, cached_only
from ..codegen.render import PREAMBLE_RNG
from . import compiled, erf
from .compiler_tuning import usable
from .scratch import scratch

log = logging.getLogger("tensorwire.kernels")

_PRELUDE = CRenderer.headers + "#include <stdlib.h>\n" + CRenderer.macros + "\n"
#: the library's C in four parts (erf's: :mod:`.erf`), each a library of its own in the kernel cache (:data:`PARTS`; the
#: module's docstring lists the functions). randn's fill: element i of out is tw_randn(seed, offset, i), cast to float32
#: where out is (rounded to nearest, as numpy's astype); OpenMP threads share large calls
RANDOM_SOURCE = _PRELUDE + PREAMBLE_RNG + r"""
void tw_randn_fill(unsigned long long seed, unsigned long long offset, long long n, void *out, int f64) {
  if (f64) {
    double *o = (double *)out;
    #pragma omp parallel for schedule(static) if (n >= 65536)
    for (long long i = 0; i < n; i++) o[i] = tw_randn((TW_I64)seed, (TW_I64)offset, i);
  } else {
    float *o = (float *)out;
    #pragma omp parallel for schedule(static) if (n >= 65536)
    for (long long i = 0; i < n; i++) o[i] = (float)tw_randn((TW_I64)seed, (TW_I64)offset, i);
  }
}
"""
#: ... the row kernels' templates: tw_max_pool2d_grad (gx must be zeros), log_softmax and batch norm, each with its
#: comment; OpenMP threads share large calls. Made for float32 and float64 in two parts (:data:`PARTS`)
_ROW_TEMPLATES = _PRELUDE + r"""
#define TW_MAX_POOL_GRAD(NAME, T) \
void NAME(const T *x, const T *gy, T *gx, long long planes, long long h, long long w, long long oh, long long ow, \
          long long kh, long long kw, long long sh, long long sw, long long ph, long long pw, long long dh, \
          long long dw) { \
  _Pragma("omp parallel for schedule(static) if (planes * oh * ow >= 65536)") \
  for (long long p = 0; p < planes; p++) { \
    const T *xp = x + p * h * w; const T *gp = gy + p * oh * ow; T *op = gx + p * h * w; \
    for (long long oy = 0; oy < oh; oy++) for (long long ox = 0; ox < ow; ox++) { \
      T best = 0; long long at = -1; int first = 1; \
      for (long long i = 0; i < kh; i++) { \
        long long y = oy * sh - ph + i * dh; \
        for (long long j = 0; j < kw; j++) { \
          long long xx = ox * sw - pw + j * dw; \
          int inside = y >= 0 && y < h && xx >= 0 && xx < w; \
          T v = inside ? xp[y * w + xx] : (T)-INFINITY; \
          if (first || v != v || v > best) { best = v; at = inside ? y * w + xx : -1; first = 0; } \
          if (v != v) goto found; \
        } \
      } \
      found: \
      if (at >= 0) op[at] += gp[oy * ow + ox]; \
    } \
  } \
}
#define TW_LOG_SOFTMAX(NAME, T, EXP, LOG) \
void NAME(const T *x, T *out, long long rows, long long n) { \
  _Pragma("omp parallel for schedule(static) if (rows * n >= 1048576)") \
  for (long long r = 0; r < rows; r++) { \
    const T *xr = x + r * n; T *o = out + r * n; \
    T m = xr[0], s = 0; \
    _Pragma("omp simd reduction(max:m)") \
    for (long long j = 1; j < n; j++) m = xr[j] > m ? xr[j] : m; \
    if (isinf(m)) m = 0; \
    _Pragma("omp simd reduction(+:s)") \
    for (long long j = 0; j < n; j++) s += EXP(xr[j] - m); \
    T lse = LOG(s) + m; \
    _Pragma("omp simd") \
    for (long long j = 0; j < n; j++) o[j] = xr[j] - lse; \
  } \
}
#define TW_LOG_SOFTMAX_GRAD(NAME, T, EXP) \
void NAME(const T *g, const T *y, T *out, long long rows, long long n) { \
  _Pragma("omp parallel for schedule(static) if (rows * n >= 1048576)") \
  for (long long r = 0; r < rows; r++) { \
    const T *gr = g + r * n, *yr = y + r * n; T *o = out + r * n; \
    T s = 0; \
    _Pragma("omp simd reduction(+:s)") \
    for (long long j = 0; j < n; j++) s += gr[j]; \
    _Pragma("omp simd") \
    for (long long j = 0; j < n; j++) o[j] = gr[j] - EXP(yr[j]) * s; \
  } \
}
#define TW_BN_MOMENTS(NAME, T) \
void NAME(const T *x, double *out, long long n, long long c, long long l) { \
  double cnt = n * l > 0 ? (double)(n * l) : 1.0; \
  _Pragma("omp parallel for schedule(static) if (n * c * l >= 1048576)") \
  for (long long ch = 0; ch < c; ch++) { \
    double s = 0, q = 0; \
    for (long long b = 0; b < n; b++) { \
      const T *r = x + (b * c + ch) * l; \
      _Pragma("omp simd reduction(+:s)") \
      for (long long j = 0; j < l; j++) s += (double)r[j]; \
    } \
    double m = s / cnt; \
    for (long long b = 0; b < n; b++) { \
      const T *r = x + (b * c + ch) * l; \
      _Pragma("omp simd reduction(+:q)") \
      for (long long j = 0; j < l; j++) { double d = (double)r[j] - m; q += d * d; } \
    } \
    out[ch] = m; out[c + ch] = q / cnt; \
  } \
}
#define TW_BN_GRAD_SUMS(NAME, T) \
void NAME(const T *g, const T *x, const double *mean, double *out, long long n, long long c, long long l) { \
  _Pragma("omp parallel for schedule(static) if (n * c * l >= 1048576)") \
  for (long long ch = 0; ch < c; ch++) { \
    double sg = 0, sgx = 0, m = mean[ch]; \
    for (long long b = 0; b < n; b++) { \
      const T *gr = g + (b * c + ch) * l, *xr = x + (b * c + ch) * l; \
      _Pragma("omp simd reduction(+:sg,sgx)") \
      for (long long j = 0; j < l; j++) { double v = (double)gr[j]; sg += v; sgx += ((double)xr[j] - m) * v; } \
    } \
    out[ch] = sg; out[c + ch] = sgx; \
  } \
}
#define TW_BN_APPLY(NAME, T) \
void NAME(const T *x, const T *g, const T *k, const T *m, const T *f, const T *t, T *out, long long n, \
          long long c, long long l) { \
  _Pragma("omp parallel for schedule(static) if (n * c * l >= 1048576)") \
  for (long long bc = 0; bc < n * c; bc++) { \
    long long ch = bc % c; const T *xr = x + bc * l; T *o = out + bc * l; T kc = k[ch], tc = t[ch]; \
    if (g) { \
      const T *gr = g + bc * l; T mc = m[ch], fc = f[ch]; \
      _Pragma("omp simd") \
      for (long long j = 0; j < l; j++) { T v = gr[j] * kc; T d = xr[j] - mc; d = d * fc; v = v + d; o[j] = v - tc; } \
    } else { \
      _Pragma("omp simd") \
      for (long long j = 0; j < l; j++) { T v = xr[j] * kc; o[j] = v + tc; } \
    } \
  } \
}
"""


def _row_kernels(t: str, ctype: str, exp: str, log: str) -> str:
    """The row kernels made for one dtype: ``t`` the functions' suffix, ``ctype`` its C type, ``exp`` and ``log`` its
    libm functions."""
    return (f"{_ROW_TEMPLATES}TW_MAX_POOL_GRAD(tw_max_pool2d_grad_{t}, {ctype})\n"
            f"TW_LOG_SOFTMAX(tw_log_softmax_{t}, {ctype}, {exp}, {log})\n"
            f"TW_LOG_SOFTMAX_GRAD(tw_log_softmax_grad_{t}, {ctype}, {exp})\n"
            f"TW_BN_APPLY(tw_bn_apply_{t}, {ctype})\nTW_BN_MOMENTS(tw_bn_moments_{t}, {ctype})\n"
            f"TW_BN_GRAD_SUMS(tw_bn_grad_sums_{t}, {ctype})\n")


ROWS_SOURCE = _row_kernels("f32", "float", "expf", "logf")
ROWS64_SOURCE = _row_kernels("f64", "double", "exp", "log")
#: ... and the conv kernels (direct forward and weight gradient, a strided conv's phases)
CONV_SOURCE = _PRELUDE + r"""
typedef float tw_v8f __attribute__((vector_size(32)));
static inline tw_v8f tw_load8(const float *p) { tw_v8f v; memcpy(&v, p, sizeof v); return v; }
/* The conv kernels below contract a*b+c into fused multiply-adds (one rounding), as the BLAS gemms they stand in for
   do; everything else in this library keeps numpy's two roundings (the flags' -ffp-contract=off). */
#pragma GCC push_options
#pragma GCC optimize("fp-contract=fast")
#ifdef __AVX512F__
typedef float tw_v16f __attribute__((vector_size(64)));
#define TW_CONV_LANES 16
#else
#define TW_CONV_LANES 8
#endif
/* The lanes of the direct conv kernel's widest vectors on this CPU (16 where it has AVX-512): its blocks' extent. */
long long tw_conv_lanes(void) { return TW_CONV_LANES; }
/* Images [b0, b1) of x [n, c, h, wd] into xb, image b0 first, each [c, hp, wp] with x's rows at row ph and column
   pw: the inside of a zero-padded copy whose padding the caller zeroed once (the direct kernels' per-thread
   buffers, padded an image or a chunk of images at a time). */
static inline void tw_pad_images(const float *x, float *xb, long long b0, long long b1, long long c, long long h,
                                 long long wd, long long ph, long long pw, long long hp, long long wp) {
  for (long long b = b0; b < b1; b++)
    for (long long ci = 0; ci < c; ci++)
      for (long long r = 0; r < h; r++)
        memcpy(xb + (((b - b0) * c + ci) * hp + r + ph) * wp + pw, x + ((b * c + ci) * h + r) * wd,
               wd * sizeof(float));
}
/* conv2d at stride 1, dilation 1, one group, float32: y [n, o, oh, ow] from the zero-padded input xp [n, c, hp, wp]
   and w [o, c, kh, kw]. Each task keeps OB output channels x 2 vectors of L output positions in registers over every
   (c, i, j): one load of x feeds OB multiply-adds; channels past o read the last one's weights and are not stored.
   OB is 4 with 8 lanes (16 vector registers: AVX2) and 8 with 16 (32: AVX-512; a [32, 64, 32, 32] 64-channel
   forward took 11.9 ms against 17.6 with 4).
   The 2L positions are 2L columns of a row, or for outputs at most L wide L columns of two rows (hp >= oh + kh then:
   a last odd row's partner reads zeros and is not stored); wp covers the columns the blocks load (whole blocks from
   column 0, plus kw - 1: host_c.direct_extent).
   Outputs wider than 8 take the CPU's widest lanes (tw_conv_lanes); at most 8 wide, 8 lanes, or under AVX-512
   tw_conv_rows16 below. With add, y += the conv (a strided conv's phases summed, conv_phases.py). */
#define TW_CONV_DIRECT(NAME, V, L, OB) \
static inline __attribute__((always_inline)) void NAME##_any(const float *xb, long long plane, const float *w, \
    float *yb, long long c, long long wp, long long o, long long q, long long kh, long long kw, long long oh, \
    long long ow, long long add) { \
  long long o0 = q * OB; \
  int tall = ow <= L; \
  long long second = tall ? wp : L, ystep = tall ? 2 : 1, xstep = tall ? L : 2 * L; \
  const float *wr[OB]; \
  for (int r = 0; r < OB; r++) wr[r] = w + (o0 + r < o ? o0 + r : o - 1) * c * kh * kw; \
  for (long long oy = 0; oy < oh; oy += ystep) \
  for (long long x0 = 0; x0 < ow; x0 += xstep) { \
    V a[OB][2]; \
    memset(a, 0, sizeof a); \
    for (long long ci = 0; ci < c; ci++) { \
      const float *xc = xb + ci * plane + oy * wp + x0; \
      for (long long i = 0; i < kh; i++) \
      for (long long j = 0; j < kw; j++) { \
        V v0, v1; \
        memcpy(&v0, xc + i * wp + j, sizeof v0); \
        memcpy(&v1, xc + i * wp + j + second, sizeof v1); \
        long long k = (ci * kh + i) * kw + j; \
        for (int r = 0; r < OB; r++) { float wv = wr[r][k]; a[r][0] += wv * v0; a[r][1] += wv * v1; } \
      } \
    } \
    long long m = ow - x0 < xstep ? ow - x0 : xstep; \
    for (int r = 0; r < OB && o0 + r < o; r++) { \
      float t[2 * L]; \
      memcpy(t, &a[r][0], sizeof a[r][0]); \
      memcpy(t + L, &a[r][1], sizeof a[r][1]); \
      for (int h2 = 0; h2 < (tall ? 2 : 1) && oy + h2 < oh; h2++) { \
        float *yr = yb + ((o0 + r) * oh + oy + h2) * ow + x0; \
        const float *tr = t + L * h2; \
        if (add) \
          for (long long e = 0; e < m; e++) yr[e] += tr[e]; \
        else \
          memcpy(yr, tr, m * sizeof(float)); \
      } \
    } \
  } \
} \
TW_CONV_3X3(NAME) \
TW_CONV_DRIVERS(NAME, OB)
/* NAME##_block: NAME##_any, with a 3x3 kernel's loops over (i, j) of constant trips (unrolled: its loop over j
   had run 3 times between two rounds of the loops' bookkeeping, a third of the block's time on one thread). Not
   inlined into its two drivers: one copy of the block's two bodies, not four (a call a task of ~c * 9 * OB * 2
   vector multiply-adds costs nothing measurable; gcc's time for the library, one then, 1.6-1.7 -> 1.3-1.4 s) */
#define TW_CONV_3X3(NAME) \
static __attribute__((noinline)) void NAME##_block(const float *xb, long long plane, const float *w, \
    float *yb, long long c, long long wp, long long o, long long q, long long kh, long long kw, long long oh, \
    long long ow, long long add) { \
  if (kh == 3 && kw == 3) \
    NAME##_any(xb, plane, w, yb, c, wp, o, q, 3, 3, oh, ow, add); \
  else \
    NAME##_any(xb, plane, w, yb, c, wp, o, q, kh, kw, oh, ow, add); \
}
/* The two drivers of a direct conv's block function NAME##_block (OB output channels a task): NAME on an input
   padded already, NAME##_pad padding it an image at a time. */
#define TW_CONV_DRIVERS(NAME, OB) \
static void NAME(const float *xp, const float *w, float *y, long long n, long long c, long long hp, long long wp, \
                 long long o, long long kh, long long kw, long long oh, long long ow, long long add) { \
  long long ob = (o + OB - 1) / OB; \
  _Pragma("omp parallel for schedule(static) collapse(2) if (n * o * oh * ow * c * kh * kw >= 4194304)") \
  for (long long b = 0; b < n; b++) \
  for (long long q = 0; q < ob; q++) \
    NAME##_block(xp + b * c * hp * wp, hp * wp, w, y + b * o * oh * ow, c, wp, o, q, kh, kw, oh, ow, add); \
} \
static void NAME##_pad(const float *x, const float *w, float *y, long long n, long long c, long long h, \
                       long long wd, long long ph, long long pw, long long hp, long long wp, long long o, \
                       long long kh, long long kw, long long oh, long long ow) { \
  long long ob = (o + OB - 1) / OB, plane = hp * wp; \
  _Pragma("omp parallel if (n * o * oh * ow * c * kh * kw >= 4194304)") \
  { \
    float *xb = (float *)calloc(c * plane, sizeof(float)); /* (its padding stays zero: only the inside is copied) */ \
    long long held = -1; \
    _Pragma("omp for schedule(static) collapse(2)") \
    for (long long b = 0; b < n; b++) \
    for (long long q = 0; q < ob; q++) { \
      if (b != held) { /* (a thread's tasks are a run of (b, q): it pads each of its images once) */ \
        tw_pad_images(x, xb, b, b + 1, c, h, wd, ph, pw, hp, wp); \
        held = b; \
      } \
      NAME##_block(xb, plane, w, y + b * o * oh * ow, c, wp, o, q, kh, kw, oh, ow, 0); \
    } \
    free(xb); \
  } \
}

TW_CONV_DIRECT(tw_conv_direct8, tw_v8f, 8, 4)
#ifdef __AVX512F__
TW_CONV_DIRECT(tw_conv_direct16, tw_v16f, 16, 8)
/* Outputs at most 8 wide where the CPU has AVX-512: a block is 8 output channels x 2 vectors of 16 lanes, each vector
   the 8 columns of two output rows (4 rows a block: hp >= the rows rounded up to 4, + kh - 1; the rows past oh read
   zeros and are not stored), made of two 8-lane loads. The 8-lane kernel's blocks (4 channels x 2 rows) did half the
   multiply-adds an instruction. */
static inline __attribute__((always_inline)) void tw_conv_rows16_any(const float *xb, long long plane,
    const float *w, float *yb, long long c, long long wp, long long o, long long q, long long kh, long long kw,
    long long oh, long long ow, long long add) {
  long long o0 = q * 8;
  const float *wr[8];
  for (int r = 0; r < 8; r++) wr[r] = w + (o0 + r < o ? o0 + r : o - 1) * c * kh * kw;
  for (long long oy = 0; oy < oh; oy += 4) {
    tw_v16f a[8][2];
    memset(a, 0, sizeof a);
    for (long long ci = 0; ci < c; ci++) {
      const float *xc = xb + ci * plane + oy * wp;
      for (long long i = 0; i < kh; i++)
      for (long long j = 0; j < kw; j++) {
        const float *xi = xc + i * wp + j;
        tw_v8f r0 = tw_load8(xi), r1 = tw_load8(xi + wp), r2 = tw_load8(xi + 2 * wp), r3 = tw_load8(xi + 3 * wp);
        tw_v16f v0 = __builtin_shufflevector(r0, r1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        tw_v16f v1 = __builtin_shufflevector(r2, r3, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        long long k = (ci * kh + i) * kw + j;
        for (int r = 0; r < 8; r++) { float wv = wr[r][k]; a[r][0] += wv * v0; a[r][1] += wv * v1; }
      }
    }
    for (int r = 0; r < 8 && o0 + r < o; r++) {
      float t[32];
      memcpy(t, &a[r][0], sizeof a[r][0]);
      memcpy(t + 16, &a[r][1], sizeof a[r][1]);
      for (int h = 0; h < 4 && oy + h < oh; h++) {
        float *yr = yb + ((o0 + r) * oh + oy + h) * ow;
        if (add)
          for (long long e = 0; e < ow; e++) yr[e] += t[8 * h + e];
        else
          memcpy(yr, t + 8 * h, ow * sizeof(float));
      }
    }
  }
}
TW_CONV_3X3(tw_conv_rows16)
TW_CONV_DRIVERS(tw_conv_rows16, 8)
#endif
void tw_conv2d_direct_f32(const float *xp, const float *w, float *y, long long n, long long c, long long hp,
                          long long wp, long long o, long long kh, long long kw, long long oh, long long ow,
                          long long add) {
#ifdef __AVX512F__
  if (ow > 8)
    tw_conv_direct16(xp, w, y, n, c, hp, wp, o, kh, kw, oh, ow, add);
  else
    tw_conv_rows16(xp, w, y, n, c, hp, wp, o, kh, kw, oh, ow, add);
#else
  tw_conv_direct8(xp, w, y, n, c, hp, wp, o, kh, kw, oh, ow, add);
#endif
}
/* conv2d_direct_f32's conv of the unpadded input x [n, c, h, wd], padded by (ph, pw) to [hp, wp] (as xp there) an
   image at a time in a buffer of each thread's, which the kernel then reads from its cache: no padded copy of the
   whole input is written to memory and read back (a [100, 16, 32, 32] forward on one thread 6.4-6.9 -> 4.6 ms). */
void tw_conv2d_direct_pad_f32(const float *x, const float *w, float *y, long long n, long long c, long long h,
                              long long wd, long long ph, long long pw, long long hp, long long wp, long long o,
                              long long kh, long long kw, long long oh, long long ow) {
#ifdef __AVX512F__
  if (ow > 8)
    tw_conv_direct16_pad(x, w, y, n, c, h, wd, ph, pw, hp, wp, o, kh, kw, oh, ow);
  else
    tw_conv_rows16_pad(x, w, y, n, c, h, wd, ph, pw, hp, wp, o, kh, kw, oh, ow);
#else
  tw_conv_direct8_pad(x, w, y, n, c, h, wd, ph, pw, hp, wp, o, kh, kw, oh, ow);
#endif
}
typedef int tw_v8i __attribute__((vector_size(32)));
static inline __attribute__((always_inline)) void tw_wgrad_block(const float *xk, const float *gy, double *acc,
    long long b0, long long b1, long long c, long long ci, long long hp, long long wp, long long o, long long o0,
    long long kh, long long kw, long long oh, long long ow, long long gs, long long i, long long j0, const int jn) {
  /* (xk: image b0's padded planes) */
  tw_v8f a[4][3];
  memset(a, 0, sizeof a);
  long long full = ow / 8 * 8;
  tw_v8i keep;  /* (the lanes of the row's last, partial vector that are inside the row) */
  for (int l = 0; l < 8; l++) keep[l] = full + l < ow ? -1 : 0;
  for (long long b = b0; b < b1; b++) {
    const float *g[4];  /* (channels past o read the last one's gradient; their sums are not kept) */
    for (int r = 0; r < 4; r++) g[r] = gy + (b * o + (o0 + r < o ? o0 + r : o - 1)) * oh * gs;
    for (long long oy = 0; oy < oh; oy++) {
      const float *xr = xk + (((b - b0) * c + ci) * hp + oy + i) * wp + j0;
      long long go = oy * gs;
      for (long long x0 = 0; x0 < full; x0 += 8) {
        tw_v8f gv[4], xv[3];
        for (int r = 0; r < 4; r++) gv[r] = tw_load8(g[r] + go + x0);
        for (int j = 0; j < jn; j++) xv[j] = tw_load8(xr + x0 + j);
        for (int r = 0; r < 4; r++)
          for (int j = 0; j < jn; j++) a[r][j] += gv[r] * xv[j];
      }
      if (full < ow) {  /* gy's lanes past the row are zeros; x's are masked (an inf there times 0 is no NaN) */
        tw_v8f gv[4], xv[3];
        for (int r = 0; r < 4; r++) gv[r] = tw_load8(g[r] + go + full);
        for (int j = 0; j < jn; j++) xv[j] = (tw_v8f)((tw_v8i)tw_load8(xr + full + j) & keep);
        for (int r = 0; r < 4; r++)
          for (int j = 0; j < jn; j++) a[r][j] += gv[r] * xv[j];
      }
    }
  }
  for (int r = 0; r < 4 && o0 + r < o; r++)
    for (int j = 0; j < jn; j++) {
      float t[8];
      memcpy(t, &a[r][j], sizeof t);
      double sum = 0;
      for (int l = 0; l < 8; l++) sum += t[l];
      acc[(((o0 + r) * c + ci) * kh + i) * kw + j0 + j] += sum;
    }
}
/* One task of the weight gradient below: images [b0, b1) (xk: image b0's zero-padded planes), output channels
   [4q, 4q + 4), every (c, i, 3 kernel columns). */
static void tw_wgrad_task(const float *xk, const float *gy, double *acc, long long b0, long long b1, long long c,
                          long long hp, long long wp, long long o, long long q, long long kh, long long kw,
                          long long oh, long long ow, long long gs) {
  for (long long ci = 0; ci < c; ci++)
  for (long long i = 0; i < kh; i++)
  for (long long j0 = 0; j0 < kw; j0 += 3) {
    if (kw - j0 >= 3)
      tw_wgrad_block(xk, gy, acc, b0, b1, c, ci, hp, wp, o, q * 4, kh, kw, oh, ow, gs, i, j0, 3);
    else if (kw - j0 == 2)
      tw_wgrad_block(xk, gy, acc, b0, b1, c, ci, hp, wp, o, q * 4, kh, kw, oh, ow, gs, i, j0, 2);
    else
      tw_wgrad_block(xk, gy, acc, b0, b1, c, ci, hp, wp, o, q * 4, kh, kw, oh, ow, gs, i, j0, 1);
  }
}
/* conv2d's weight gradient at stride 1, dilation 1, one group, float32: gw [o, c, kh, kw] (float64, zeroed by the
   caller; each thread's sums are added in at its end) of the input and the output gradient gy [n, o, oh, gs], its
   rows of ow values padded with zeros to gs, a multiple of 8 at least ow. The input is x [n, c, h, wd] zero-padded
   by (ph, pw) to [hp, wp] (wp >= gs + kw - 1) a chunk of images at a time in a buffer of each thread's, or with
   padded, x is that zero-padded input [n, c, hp, wp] already (a strided conv's phase, conv_phases.py). A task is a
   chunk of `chunk` images and 4 output channels; for each (c, i, 3 kernel columns) it keeps 4 x 3 vectors of 8
   partial sums in registers over every output position of its images (4 loads of gy and 3 of x feed 12
   multiply-adds), then adds their lanes into its thread's float64 sums. A thread's tasks are a run of (chunk,
   channels): it pads each of its chunks once. (16 lanes under AVX-512, tried in sessions 47 and 48, were no faster,
   with x's loads aligned too: this kernel is not bound by its multiply-adds or its loads of x.) */
void tw_conv2d_grad_weight_direct_f32(const float *x, const float *gy, double *gw, long long n, long long c,
                                      long long h, long long wd, long long ph, long long pw, long long padded,
                                      long long hp, long long wp, long long o, long long kh, long long kw,
                                      long long oh, long long ow, long long gs, long long chunk) {
  long long ob = (o + 3) / 4, nc = (n + chunk - 1) / chunk, size = o * c * kh * kw, image = c * hp * wp;
  _Pragma("omp parallel if (n * o * oh * ow * c * kh * kw >= 4194304)")
  {
    double *acc = (double *)calloc(size, sizeof(double));
    /* (the buffer's padding stays zero: only the inside is copied) */
    float *xb = padded ? NULL : (float *)calloc((n < chunk ? n : chunk) * image, sizeof(float));
    long long held = -1;
    _Pragma("omp for schedule(static) collapse(2)")
    for (long long k = 0; k < nc; k++)
    for (long long q = 0; q < ob; q++) {
      long long b0 = k * chunk, b1 = b0 + chunk < n ? b0 + chunk : n;
      if (!padded && k != held) {  /* (a thread's tasks are a run of (chunk, channels): it pads each chunk once) */
        tw_pad_images(x, xb, b0, b1, c, h, wd, ph, pw, hp, wp);
        held = k;
      }
      tw_wgrad_task(padded ? x + b0 * image : xb, gy, acc, b0, b1, c, hp, wp, o, q, kh, kw, oh, ow, gs);
    }
    _Pragma("omp critical")
    for (long long e = 0; e < size; e++) gw[e] += acc[e];
    free(acc);
    free(xb);
  }
}
/* A strided conv's phases (conv_phases.py). Split: out [sh * sw, planes, rows, width], phase (rh, rw)'s element
   (u, v) the zero-padded input's (sh * u + rh, sw * v + rw), i.e. x [planes, h, w]'s (sh * u + rh - ph,
   sw * v + rw - pw), zero outside x. Merge, the inverse for an input gradient: out [planes, h, w]'s (y, x) is phase
   (Y % sh, X % sw)'s element (Y / sh, X / sw), Y = y + ph and X = x + pw; phase p holds the rows and columns from
   (shape[4p + 2], shape[4p + 3]) on of that grid, parts[p] [planes, shape[4p], shape[4p + 1]]; zero outside them,
   or where parts[p] is NULL (a phase without taps). */
static inline long long tw_ceil_div(long long a, long long b) { return a > 0 ? (a + b - 1) / b : 0; }
void tw_phase_split_f32(const float *x, float *out, long long planes, long long h, long long w, long long sh,
                        long long sw, long long ph, long long pw, long long rows, long long width) {
  _Pragma("omp parallel for collapse(2) schedule(static) if (planes * h * w >= 1048576)")
  for (long long p = 0; p < sh * sw; p++)
  for (long long pl = 0; pl < planes; pl++) {
    long long rh = p / sw, rw = p % sw;
    long long v0 = tw_ceil_div(pw - rw, sw), v1 = tw_ceil_div(w + pw - rw, sw);  /* (x's columns: [v0, v1)) */
    if (v1 > width) v1 = width;
    if (v0 > v1) v0 = v1;
    const float *xs = x + pl * h * w;
    for (long long u = 0; u < rows; u++) {
      float *o = out + ((p * planes + pl) * rows + u) * width;
      long long y = sh * u + rh - ph;
      if (y < 0 || y >= h) {
        memset(o, 0, width * sizeof(float));
        continue;
      }
      const float *xr = xs + y * w;
      long long off = rw - pw;
      for (long long v = 0; v < v0; v++) o[v] = 0;
      if (sw == 1)  /* (a stride-1 conv's zero-padded copy: conv2d_direct's) */
        memcpy(o + v0, xr + v0 + off, (v1 - v0) * sizeof(float));
      else if (sw == 2)
        for (long long v = v0; v < v1; v++) o[v] = xr[2 * v + off];
      else
        for (long long v = v0; v < v1; v++) o[v] = xr[sw * v + off];
      for (long long v = v1; v < width; v++) o[v] = 0;
    }
  }
}
void tw_phase_merge_f32(const float *const *parts, const long long *shape, float *out, long long planes, long long h,
                        long long w, long long sh, long long sw, long long ph, long long pw) {
  _Pragma("omp parallel for collapse(2) schedule(static) if (planes * h * w >= 1048576)")
  for (long long pl = 0; pl < planes; pl++)
  for (long long y = 0; y < h; y++) {
    long long rh = (y + ph) % sh, m = (y + ph) / sh;
    float *o = out + (pl * h + y) * w;
    for (long long rw = 0; rw < sw; rw++) {
      long long p = rh * sw + rw, off = rw - pw;
      const long long *ps = shape + 4 * p;  /* (rows, columns, first row, first column) */
      long long v0 = tw_ceil_div(pw - rw, sw), v1 = tw_ceil_div(w + pw - rw, sw), lo = v1, hi = v1;
      const float *src = 0;
      if (parts[p] && m >= ps[2] && m < ps[2] + ps[0]) {
        src = parts[p] + (pl * ps[0] + m - ps[2]) * ps[1] - ps[3];  /* (src[v]: column v of the phase) */
        lo = ps[3] > v0 ? ps[3] : v0;
        hi = ps[3] + ps[1] < v1 ? ps[3] + ps[1] : v1;
        if (lo > hi) lo = hi;
      }
      for (long long v = v0; v < lo; v++) o[sw * v + off] = 0;
      if (sw == 2)
        for (long long v = lo; v < hi; v++) o[2 * v + off] = src[v];
      else
        for (long long v = lo; v < hi; v++) o[sw * v + off] = src[v];
      for (long long v = hi; v < v1; v++) o[sw * v + off] = 0;
    }
  }
}
#pragma GCC pop_options
"""

#: calls smaller than this (elements made or read) stay on numpy (a call into the library costs more than they save)
MIN_ELEMENTS = 4096
#: the smallest call that starts the library's build (in the background: :func:`_functions`) when the kernel cache
#: lacks it: a build costs ~1 s of one core once a machine (then the cache has it), so a program of small calls (a
#: DCGAN's init) never starts gcc, and one with a large model pays it back
BUILD_ELEMENTS = 1 << 20
#: the smallest draw that starts the build of randn's fill alone (a large call builds every part): the part costs
#: ~0.16 s of gcc once a machine, and a draw this large ~9 ms in numpy (a 128x128x3x3 conv's weights); a ResNet-18's
#: initialisation draws 2.9M of its 11M weights before its first draw of BUILD_ELEMENTS, and it took 0.83-1.0 s on an
#: empty kernel cache against 0.13 s with the fill there
RANDOM_BUILD_ELEMENTS = 1 << 17

#: the smallest erf that starts the build of its part alone when the kernel cache lacks it: ~0.1 s of gcc once a
#: machine, against ~150 us a call of this size in numpy (a GELU model's interpreted steps make hundreds a run)
ERF_BUILD_ELEMENTS = 1 << 15

_DTYPES = {np.dtype(np.float64): 1, np.dtype(np.float32): 0}
_LL = ctypes.c_longlong
_POOL_ARGS = [ctypes.c_void_p] * 3 + [_LL] * 13
#: the library's functions and their argument types (none returns a value)
_ROWS_ARGS = [ctypes.c_void_p] * 2 + [_LL] * 2
_GRAD_ARGS = [ctypes.c_void_p] * 3 + [_LL] * 2
_BN_ARGS = [ctypes.c_void_p] * 2 + [_LL] * 3
_BN_GRAD_ARGS = [ctypes.c_void_p] * 4 + [_LL] * 3
_BN_APPLY_ARGS = [ctypes.c_void_p] * 7 + [_LL] * 3
_CONV_ARGS = [ctypes.c_void_p] * 3 + [_LL] * 9
_SIGNATURES = {"tw_randn_fill": [ctypes.c_uint64, ctypes.c_uint64, _LL, ctypes.c_void_p, ctypes.c_int],
               "tw_max_pool2d_grad_f32": _POOL_ARGS, "tw_max_pool2d_grad_f64": _POOL_ARGS,
               "tw_log_softmax_f32": _ROWS_ARGS, "tw_log_softmax_f64": _ROWS_ARGS,
               "tw_log_softmax_grad_f32": _GRAD_ARGS, "tw_log_softmax_grad_f64": _GRAD_ARGS,
               "tw_bn_moments_f32": _BN_ARGS, "tw_bn_moments_f64": _BN_ARGS,
               "tw_bn_grad_sums_f32": _BN_GRAD_ARGS, "tw_bn_grad_sums_f64": _BN_GRAD_ARGS,
               "tw_bn_apply_f32": _BN_APPLY_ARGS, "tw_bn_apply_f64": _BN_APPLY_ARGS,
               "tw_conv2d_direct_f32": _CONV_ARGS + [_LL],
               "tw_conv2d_direct_pad_f32": [ctypes.c_void_p] * 3 + [_LL] * 13,
               "tw_conv2d_grad_weight_direct_f32": [ctypes.c_void_p] * 3 + [_LL] * 16,
               "tw_phase_split_f32": [ctypes.c_void_p] * 2 + [_LL] * 9, "tw_conv_lanes": [],
               "tw_phase_merge_f32": [ctypes.c_void_p] * 3 + [_LL] * 7,
               "tw_erf_f32": [ctypes.c_void_p] * 2 + [_LL], "tw_gelu_grad_f32": [ctypes.c_void_p] * 3 + [_LL]}
#: the functions that return a value, and its type (the others return none)
_RESTYPES = {"tw_conv_lanes": _LL}
#: the library's parts, each with the names of its functions in :data:`_SIGNATURES`, in the order a build makes them
#: after the one the call that started it wants (:func:`_want`): randn's fill (~0.16 s of gcc here: a
#: large model's initialisation draws while it builds), the conv kernels (~0.7 s: what a large model's first steps
#: wait for), the float32 row kernels (~0.27 s), the float64 ones (~0.24 s: until session 57 one part with the
#: float32 ones, ~0.5 s that a float32 model's first steps waited for), float32 erf and GELU's gradient (:mod:`.erf`;
#: ~0.1 s)
_OWN_PARTS = {"random": frozenset({"tw_randn_fill"}),
              "rows64": frozenset(n for n in _SIGNATURES if n.endswith("_f64")),
              "math": frozenset({"tw_erf_f32", "tw_gelu_grad_f32"})}
_CONV_NAMES = frozenset(n for n in _SIGNATURES if "conv" in n or "phase" in n)
PARTS = (("random", RANDOM_SOURCE, _OWN_PARTS["random"]),
         ("conv", CONV_SOURCE, _CONV_NAMES),
         ("rows", ROWS_SOURCE, frozenset(_SIGNATURES).difference(_CONV_NAMES, *_OWN_PARTS.values())),
         ("rows64", ROWS64_SOURCE, _OWN_PARTS["rows64"]),
         ("math", _PRELUDE + erf.c_source(), _OWN_PARTS["math"]))
#: compiler flags a part is built with after the C runtime's (those its compiler takes: ``compiler_tuning.usable``).
#: gcc's interprocedural constant propagation clones the conv part's block functions for the constants they are
#: called with and optimises each clone again at -O3: ~20% of the part's build (0.82-0.88 -> 0.67-0.70 s of gcc here),
#: for kernels as fast without the clones, bit for bit the same (forward, weight gradient, phase split and merge at a
#: CIFAR ResNet's shapes, 35.3 against 35.4 ms): the part a large model's first steps wait for
PART_FLAGS = {"conv": ("-fno-ipa-cp-clone",)}
#: the part of each function (the part a call wants built first)
PART_OF = {n: name for name, _, names in PARTS for n in names}
_lock = threading.Lock()
#: by part: None: not looked for yet; "absent": not in the kernel cache (built at the first large call); False: the CPU
#: cannot build it; else its loaded functions by name (the Library under "lib", which keeps it loaded)
_parts: dict = dict.fromkeys(name for name, _, _ in PARTS)
#: the functions of the parts loaded so far, by name, or None while there are none (replaced as a part loads, never
#: changed in place: read without the lock; each part's Library stays loaded under "lib" in :data:`_parts`)
_lib: dict | None = None
_why = ""
_building: threading.Thread | None = None  # the background build while one runs
_queue: list[str] = []  # the parts it is to build, in order (the one it builds first)
_settled = False  # every part looked for, and each loaded, impossible or queued: nothing left to start


def _load(part: str, source: str, names, build: bool):
    """The functions ``names`` of the library of part ``part``'s ``source`` from the kernel cache (built there with
    ``build``), "absent" where it lacks them and ``build`` is false, or False where they cannot be made (``_why``
    says why)."""
    global _why
    rt = compiled.runtime()
    if rt is None:
        _why = compiled.why_not()
        return False
    try:
        flags = usable(rt.compiler, PART_FLAGS.get(part, ()))
        if build:
            lib = rt.load(source, what="host C functions", flags=flags)
        else:
            with cached_only():
                lib = rt.load(source, what="host C functions", flags=flags)
        got = {"lib": lib}
        for name in names:
            f = getattr(lib.cdll, name)
            f.argtypes, f.restype = _SIGNATURES[name], _RESTYPES.get(name)
            got[name] = f
        return got
    except NotCached:
        return "absent"
    except Exception as e:  # noqa: BLE001 - a cache refused, a compiler that failed: numpy's spellings
        _why = f"{type(e).__name__}: {e}"
        log.info("the CPU's host C functions are not there (numpy's spellings run): %s", _why)
        return False


def _loaded(name: str, got, built: bool = False) -> None:
    """Record part ``name``'s load (``_load``'s answer; "absent" after a build, ``built``: False); under
    :data:`_lock`."""
    global _lib
    _parts[name] = False if built and got == "absent" else got
    if isinstance(got, dict):
        _lib = {**(_lib or {}), **{k: f for k, f in got.items() if k != "lib"}}


def _build_in_background() -> None:
    """Build the parts of :data:`_queue` one after the other, each usable once built, until none is left."""
    global _building
    sources = {name: (source, names) for name, source, names in PARTS}
    while True:
        with _lock:
            if not _queue:
                _building = None
                return
            name = _queue[0]
        got = _load(name, *sources[name], build=True)
        with _lock:
            _loaded(name, got, built=True)
            _queue.remove(name)


#: parts built for their own calls only, not with the others for a large call of another kind (a CIFAR ResNet draws
#: no large weights: building the fill beside its conv and row kernels made its cold run ~0.25 s slower; a CNN has no
#: erf; a float32 model no float64 row), and a call of theirs builds its part alone
OWN_CALLS_ONLY = frozenset(_OWN_PARTS)


def _want(first: str, alone: bool) -> None:
    """Queue part ``first`` for the background build (where the kernel cache lacks it), and with ``alone`` false every
    other part it lacks but :data:`OWN_CALLS_ONLY`'s after it in :data:`PARTS`' order; start the build where none
    runs. Under :data:`_lock`."""
    global _building
    for name in [first] + ([] if alone else [name for name, _, _ in PARTS if name not in OWN_CALLS_ONLY]):
        if _parts.get(name) == "absent" and name not in _queue:
            _queue.append(name)
    if _queue and _building is None:
        _building = threading.Thread(target=_build_in_background, name="tw-host-c-build", daemon=True)
        _building.start()


def _functions(build: str | None, alone: bool = False) -> dict | None:
    """The functions of the library's parts loaded from the kernel cache; None while there are none. With ``build``
    (the name of the function a large call wants; ``""``: none in particular), a cache that lacks a part has the
    parts built on a background thread (:data:`_building`; that function's part first; with ``alone``, that part
    only), and the calls until then get None or lack their functions: numpy's spellings run meanwhile, as a new batch
    runs on the numpy kernels while the compiled ones build (a cold ResNet run waited ~0.9 s for gcc at its first
    convolution; with the library in one piece its first steps waited ~1.5 s for every function, in two ~0.9 s for
    its convolutions'; a ResNet-18's initialisation drew ~7M of its 11M weights in numpy, ~0.5 s, while the conv
    kernels built before randn's fill)."""
    global _building, _settled
    if _settled or _lib is not None and build is None:  # (the common case, without the lock)
        return _lib
    with _lock:
        for name, source, names in PARTS:
            if _parts[name] is None:
                _loaded(name, _load(name, source, names, build=False))
        if build is not None:
            _want(PART_OF.get(build, ""), alone)
        _settled = all(state != "absent" or name in _queue for name, state in _parts.items())
    return _lib


def build_now() -> bool:
    """Load or build every part of the library at once (waiting for a build under way); whether they are all there.
    For tests and tools that need the C functions now rather than numpy's spellings."""
    _functions(build="")
    thread = _building
    if thread is not None:
        thread.join()
    with _lock:
        for name, source, names in PARTS:
            if _parts[name] in (None, "absent"):
                _loaded(name, _load(name, source, names, build=True), built=True)
    return all(isinstance(v, dict) for v in _parts.values())


def normal(seed: int, offset: int, shape, npdtype) -> np.ndarray | None:
    """``protocol.random.normal``'s numbers from the C fill, or None where it does not apply (a half dtype, a small
    draw, no C compiler; a draw while the kernel cache lacks the fill: from :data:`RANDOM_BUILD_ELEMENTS` on it has
    the fill built, from :data:`BUILD_ELEMENTS` on every part)."""
    code = _DTYPES.get(np.dtype(npdtype))
    n = int(np.prod(shape, dtype=np.int64))
    if code is None or n < MIN_ELEMENTS:
        return None
    large = n >= BUILD_ELEMENTS  # (every part wanted: a large model's; else randn's fill alone, from a smaller draw)
    fns = _functions(build="tw_randn_fill" if large or n >= RANDOM_BUILD_ELEMENTS else None, alone=not large)
    fill = None if fns is None else fns.get("tw_randn_fill")
    if fill is None:
        return None
    out = np.empty(shape, npdtype)
    fill(seed % (1 << 64), offset % (1 << 64), n, out.ctypes.data, code)
    return out


def erf_f32(x: np.ndarray) -> np.ndarray | None:
    """erf of a float32 array by the C spelling of :func:`.erf.erf_float32` (any length: its numpy spelling costs
    ~25 us a call whatever the length), or None where it does not apply (another dtype, no C compiler; while the
    kernel cache lacks it: from :data:`ERF_BUILD_ELEMENTS` on a call has it built, alone)."""
    f = _math_function("tw_erf_f32", x.size) if x.dtype == np.float32 else None
    if f is None:
        return None
    xs = np.ascontiguousarray(x)
    out = np.empty(x.shape, np.float32)
    f(xs.ctypes.data, out.ctypes.data, x.size)
    return out


def _math_function(name: str, n: int):
    """The math part's function ``name`` for a call of ``n`` elements, or None while the part is not loaded (a call
    of :data:`ERF_BUILD_ELEMENTS` or more has it built alone) or where it cannot be."""
    fns = _functions(build=name if n >= ERF_BUILD_ELEMENTS else None, alone=True)
    return None if fns is None else fns.get(name)


def gelu_grad_f32(g: np.ndarray, x: np.ndarray) -> np.ndarray | None:
    """Exact GELU's input gradient ``g * (Phi(x) + x phi(x))`` of float32 arrays of one shape, by the C spelling of
    ``kernels._gelu_grad`` (:mod:`.erf`), or None where it does not apply (as :func:`erf_f32`; the part is built by
    the same calls)."""
    same = g.dtype == x.dtype == np.float32 and g.shape == x.shape
    f = _math_function("tw_gelu_grad_f32", x.size) if same else None
    if f is None:
        return None
    gs, xs = np.ascontiguousarray(g), np.ascontiguousarray(x)
    out = np.empty(x.shape, np.float32)
    f(gs.ctypes.data, xs.ctypes.data, out.ctypes.data, x.size)
    return out


def max_pool2d_grad(x: np.ndarray, gy: np.ndarray, geom) -> np.ndarray | None:
    """The input gradient of ``max_pool2d`` (``geom``: ``protocol.ops.conv._window_geometry``'s) from the C kernel,
    or None where it does not apply (a dtype other than float32/float64, a small call, no C compiler)."""
    f = _typed("tw_max_pool2d_grad", x) if x.dtype == gy.dtype else None
    if f is None:
        return None
    (kh, kw), (sh, sw), (ph, pw), (dh, dw), (oh, ow) = geom
    n, c, h, w = x.shape
    x, gy = np.ascontiguousarray(x), np.ascontiguousarray(gy)
    gx = np.zeros(x.shape, x.dtype)
    f(x.ctypes.data, gy.ctypes.data, gx.ctypes.data, n * c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw)
    return gx


def log_softmax(x: np.ndarray) -> np.ndarray | None:
    """``log_softmax`` of ``x`` along its last axis (float32 or float64, not empty) from the C kernel: each row's
    maximum (an infinite one read as 0, as the decomposition reads it), ``x - (log(sum(exp(x - max))) + max)``, the
    exponentials vectorised (libmvec) and rows shared by OpenMP's threads in a large call; None where it does not
    apply (another dtype, a small call, no C compiler)."""
    return _by_rows("tw_log_softmax", x)


def log_softmax_grad(g: np.ndarray, y: np.ndarray) -> np.ndarray | None:
    """The input gradient of ``y = log_softmax(x)`` along the last axis, ``g - exp(y) * sum(g)`` (the op's
    decomposition, in its order, without its temporaries), from the C kernel; None where it does not apply (``g``
    and ``y`` of different dtypes or shapes, another dtype, a small call, no C compiler)."""
    return _by_rows("tw_log_softmax_grad", g, y) if g.dtype == y.dtype and g.shape == y.shape else None


def bn_moments(x3: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Per-channel mean and biased variance (float64) of a [N, C, L] float32/float64 array from the C kernel: two
    passes a channel (the mean, then the squared deviations from it), each summed in float64, channels shared by
    OpenMP's threads in a large call; None where it does not apply (another dtype, a small call, no C compiler).
    numpy's spelling (``kernels._bn_moments``) makes four passes over temporaries as large as the input."""
    f = _typed("tw_bn_moments", x3)
    if f is None:
        return None
    x3 = np.ascontiguousarray(x3)
    n, c, ln = x3.shape
    out = np.empty(2 * c, np.float64)
    f(x3.ctypes.data, out.ctypes.data, n, c, ln)
    return out[:c], out[c:]


def bn_grad_sums(g3: np.ndarray, x3: np.ndarray, mean: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Per-channel ``sum(g)`` and ``sum((x - mean) * g)`` (float64) of [N, C, L] arrays ``g3`` and ``x3`` of one
    dtype (float32/float64), ``mean`` [C], from the C kernel in one pass; None where it does not apply."""
    f = _typed("tw_bn_grad_sums", x3) if g3.dtype == x3.dtype and g3.shape == x3.shape else None
    if f is None:
        return None
    g3, x3 = np.ascontiguousarray(g3), np.ascontiguousarray(x3)
    m = np.ascontiguousarray(mean, np.float64)
    n, c, ln = x3.shape
    out = np.empty(2 * c, np.float64)
    f(g3.ctypes.data, x3.ctypes.data, m.ctypes.data, out.ctypes.data, n, c, ln)
    return out[:c], out[c:]


def bn_apply(x3: np.ndarray, scale: np.ndarray, shift: np.ndarray) -> np.ndarray | None:
    """``x * scale + shift`` per channel of a [N, C, L] float32/float64 array (``scale``, ``shift`` [C] in its dtype),
    from the C kernel: numpy's two float operations in its order, so its bits; None where it does not apply."""
    return _bn_call(x3, None, scale, None, None, shift)


def bn_grad_input(g3: np.ndarray, x3: np.ndarray, k: np.ndarray, mean: np.ndarray, f: np.ndarray,
                  c: np.ndarray) -> np.ndarray | None:
    """Training batch norm's input gradient ``g * k + (x - mean) * f - c`` per channel ([C] vectors in the arrays'
    dtype) from the C kernel in one pass: numpy's float operations in its order (``kernels._batch_norm_grad``), so
    its bits; None where it does not apply."""
    if g3.dtype != x3.dtype or g3.shape != x3.shape:
        return None
    return _bn_call(x3, g3, k, mean, f, c)


def _bn_call(x3, g3, k, m, f, t) -> np.ndarray | None:
    fn = _typed("tw_bn_apply", x3)
    if fn is None:
        return None
    x3 = np.ascontiguousarray(x3)
    g3 = None if g3 is None else np.ascontiguousarray(g3)
    vec = [np.ascontiguousarray(v, x3.dtype) if v is not None else None for v in (k, m, f, t)]
    out = np.empty(x3.shape, x3.dtype)
    n, c, ln = x3.shape
    fn(x3.ctypes.data, None if g3 is None else g3.ctypes.data,
       *(None if v is None else v.ctypes.data for v in vec), out.ctypes.data, n, c, ln)
    return out


def placed(x: np.ndarray, ph: int, pw: int, rows: int, width: int, slot: str = "pad") -> np.ndarray:
    """``x`` [N, C, H, W] (float32) at row ``ph`` and column ``pw`` of a zeroed [N, C, rows, width] in the kernels'
    scratch ``slot`` (rows >= ph + H, width >= pw + W): :func:`phase_split` at stride 1, one pass where numpy's zero
    fill and copy made two (the fill alone took ~7% of a ResNet's step). The caller has checked :func:`direct_ready`."""
    assert rows >= ph + x.shape[2] and width >= pw + x.shape[3], (x.shape, ph, pw, rows, width)
    return phase_split(x, 1, 1, ph, pw, rows, width, slot)[0]


def _planes(xp: np.ndarray) -> tuple[int, int, int]:
    """(address, rows, row length) of the planes a view ``xp`` [N, C, r, c] of a C-contiguous float32 buffer
    [N, C, rows, row length] lies in (its first row and column may be inside the buffer's: a kernel reads from the
    view's first element with the buffer's strides)."""
    sn, sc, sr, s1 = xp.strides
    assert s1 == 4 and sc % sr == 0 and sn == xp.shape[1] * sc, xp.strides
    return xp.ctypes.data, sc // sr, sr // 4


def direct_ready(x: np.ndarray) -> bool:
    """Whether the direct conv kernels take a call on ``x`` (float32, large enough, the library at hand)."""
    return x.dtype == np.float32 and _typed("tw_conv2d_direct", x) is not None


def conv2d_direct(x: np.ndarray, w: np.ndarray, ph: int, pw: int) -> np.ndarray | None:
    """``conv2d`` of a float32 ``x`` [N, C, H, W] with ``w`` [O, C, kh, kw] at stride 1, dilation 1, one group, zero
    padding ``(ph, pw)``, from the register-blocked C kernel (a block of output channels x 2 vectors of positions a
    task); None where it does not apply (another dtype, a small call, no C compiler). The sums run in another order
    than a gemm's: the values differ by rounding."""
    if w.dtype != np.float32 or not direct_ready(x):
        return None
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh, ow = h + 2 * ph - kh + 1, wd + 2 * pw - kw + 1
    if oh <= 0 or ow <= 0:
        return None
    rows, width = direct_extent(oh, ow, kh, kw)
    x, w = np.ascontiguousarray(x), np.ascontiguousarray(w)
    y = np.empty((n, o, oh, ow), np.float32)
    _lib["tw_conv2d_direct_pad_f32"](x.ctypes.data, w.ctypes.data, y.ctypes.data, n, c, h, wd, ph, pw, rows, width,
                                     o, kh, kw, oh, ow)
    return y


def direct_extent(oh: int, ow: int, kh: int, kw: int) -> tuple[int, int]:
    """(rows, columns) of the zero-padded input :func:`direct_on` reads from its view's start for an output
    ``oh`` x ``ow`` and a kernel ``kh`` x ``kw``: the windows' ``oh + kh - 1`` rows, one more where its blocks are two
    rows (outputs at most as wide as a vector), the rows rounded up to 4 where they are four (outputs at most 8 wide
    under AVX-512: ``tw_conv_rows16``), and the columns its blocks load: whole blocks of one vector (outputs at most a
    vector wide) or two (vectors of 8 lanes for outputs at most 8 wide, else the CPU's widest: ``tw_conv_lanes``)
    from column 0, plus the kernel's ``kw - 1``. (No more: the copy that pads the input, and the
    kernel's reads, grow with it; ``ow + kw + 2 * lanes - 2``, the bound once used, padded a 32-wide output's rows
    to 65 columns and an 8-wide one's to 25.)"""
    widest = _lib["tw_conv_lanes"]()
    if ow <= 8 and widest == 16:  # (tw_conv_rows16: blocks of 4 rows of 8 columns)
        return -(-oh // 4) * 4 + kh - 1, 8 + kw - 1
    lanes = 8 if ow <= 8 else widest
    tall = ow <= lanes
    block = lanes if tall else 2 * lanes
    return oh + kh - 1 + tall, -(-ow // block) * block + kw - 1


def direct_on(xp: np.ndarray, w: np.ndarray, oh: int, ow: int, out: np.ndarray | None = None,
              add: bool = False) -> np.ndarray:
    """The stride-1 conv [N, O, oh, ow] of an already zero-padded float32 input ``xp`` (a view, see :func:`_planes`,
    whose planes hold :func:`direct_extent` from its start) with float32 ``w`` [O, C, kh, kw]: written to ``out``
    (C-contiguous, returned) when given, or added to it with ``add``. The caller has checked
    :func:`direct_ready`."""
    n, c = xp.shape[:2]
    o, _, kh, kw = w.shape
    addr, hp, wp = _planes(xp)
    w = np.ascontiguousarray(w)
    y = np.empty((n, o, oh, ow), np.float32) if out is None else out
    _lib["tw_conv2d_direct_f32"](addr, w.ctypes.data, y.ctypes.data, n, c, hp, wp, o, kh, kw, oh, ow, add)
    return y


def conv2d_grad_weight_direct(x: np.ndarray, gy: np.ndarray, kh: int, kw: int, ph: int, pw: int
                              ) -> np.ndarray | None:
    """``conv2d``'s weight gradient [O, C, kh, kw] of a float32 input ``x`` [N, C, H, W] and output gradient ``gy``
    [N, O, oh, ow] at stride 1, dilation 1, one group, zero padding ``(ph, pw)``, from the register-blocked C kernel
    (4 output channels x 3 kernel columns a block, float32 partial sums over a chunk of images, float64 across
    chunks); None where it does not apply (another dtype, a small call, no C compiler)."""
    if gy.dtype != np.float32 or not direct_ready(x):
        return None
    n, c, h, wd = x.shape
    oh, ow = gy.shape[2], gy.shape[3]
    if oh <= 0 or ow <= 0 or (oh, ow) != (h + 2 * ph - kh + 1, wd + 2 * pw - kw + 1):
        return None
    x, gy8 = np.ascontiguousarray(x), rows8(gy)
    o = gy.shape[1]
    gw = np.zeros((o, c, kh, kw), np.float64)
    _lib["tw_conv2d_grad_weight_direct_f32"](x.ctypes.data, gy8.ctypes.data, gw.ctypes.data, n, c, h, wd, ph, pw, 0,
                                             h + 2 * ph, wgrad_row(ow) + kw - 1, o, kh, kw, oh, ow, gy8.shape[3],
                                             _wgrad_chunk(oh, ow))
    return gw.astype(np.float32)


def wgrad_row(ow: int) -> int:
    """The length :func:`grad_weight_on` takes the output gradient's rows of ``ow`` values padded to: whole vectors
    of 8."""
    return -(-ow // 8) * 8


def rows8(gy: np.ndarray) -> np.ndarray:
    """``gy`` [N, O, oh, ow] C-contiguous with its rows padded with zeros to :func:`wgrad_row` values (as
    :func:`grad_weight_on` takes it), in the kernels' gradient slot where it is copied."""
    ow, ow8 = gy.shape[3], wgrad_row(gy.shape[3])
    return np.ascontiguousarray(gy) if ow8 == ow else placed(gy, 0, 0, gy.shape[2], ow8, "grad")


def grad_weight_on(xp: np.ndarray, gy8: np.ndarray, kh: int, kw: int, ow: int,
                   into: np.ndarray | None = None) -> np.ndarray:
    """The stride-1 weight gradient [O, C, kh, kw] of an already zero-padded float32 input ``xp`` (a view, see
    :func:`_planes`, whose planes hold ``oh + kh - 1`` rows and ``wgrad_row(ow) + kw - 1`` columns from its start)
    and the output gradient ``gy8`` from :func:`rows8` (rows of ``ow`` values), as float64 sums:
    added to ``into`` (C-contiguous float64, returned) when given. The caller has checked :func:`direct_ready`."""
    n, c = xp.shape[:2]
    o, oh, ow8 = gy8.shape[1:]
    addr, hp, wp = _planes(xp)
    gw = np.zeros((o, c, kh, kw), np.float64) if into is None else into
    _lib["tw_conv2d_grad_weight_direct_f32"](addr, gy8.ctypes.data, gw.ctypes.data, n, c, 0, 0, 0, 0, 1, hp, wp, o,
                                             kh, kw, oh, ow, ow8, _wgrad_chunk(oh, ow))
    return gw


def _wgrad_chunk(oh: int, ow: int) -> int:
    """The images a weight-gradient task sums over (:data:`WGRAD_POSITIONS` output positions, at least one image)."""
    return max(1, -(-WGRAD_POSITIONS // (oh * wgrad_row(ow))))


def phase_split(x: np.ndarray, sh: int, sw: int, ph: int, pw: int, rows: int, width: int,
                slot: str = "phases") -> np.ndarray:
    """The phases [sh * sw, N, C, rows, width] of float32 ``x`` [N, C, H, W] zero-padded by ``(ph, pw)``: phase
    ``(rh, rw)``'s element (u, v) the padded input's (sh*u + rh, sw*v + rw) (``conv_phases.py``), in the kernels'
    scratch ``slot``. The caller has checked :func:`direct_ready`."""
    n, c, h, wd = x.shape
    x = np.ascontiguousarray(x)
    out = scratch(slot, (sh * sw, n, c, rows, width), np.float32)
    _lib["tw_phase_split_f32"](x.ctypes.data, out.ctypes.data, n * c, h, wd, sh, sw, ph, pw, rows, width)
    return out


def phase_merge(parts: list, shape: tuple, sh: int, sw: int, ph: int, pw: int) -> np.ndarray:
    """The float32 array ``shape`` [N, C, H, W] whose zero-padded positions (sh*m + rh, sw*v + rw) hold element
    (m - m0, v - v0) of phase ``rh * sw + rw``'s part, ``parts[p]`` a pair ``(m0, v0)`` and C-contiguous [N, C, rows,
    cols] array, or None; zero outside the parts: :func:`phase_split`'s inverse. The caller has checked
    :func:`direct_ready`."""
    n, c, h, wd = shape
    out = np.empty(shape, np.float32)
    ptrs = (ctypes.c_void_p * len(parts))(*[None if q is None else q[1].ctypes.data for q in parts])
    dims = np.array([(0, 0, 0, 0) if q is None else (*q[1].shape[2:], *q[0]) for q in parts], np.int64)
    _lib["tw_phase_merge_f32"](ptrs, dims.ctypes.data, out.ctypes.data, n * c, h, wd, sh, sw, ph, pw)
    return out


#: the output positions a weight-gradient block sums in registers before it adds them to its float64 sums (whole
#: images: one at 32x32, four at 16x16, sixteen at 8x8), so that the lanes' adding is small beside the block's work
WGRAD_POSITIONS = 1024


def _typed(name: str, x: np.ndarray):
    """The library's function ``name`` for ``x``'s dtype (``name_f32`` or ``name_f64``), for a call on ``x`` (its
    other arrays of ``x``'s dtype); None where it does not apply: another dtype, fewer than :data:`MIN_ELEMENTS`
    elements, no library (built for a call of :data:`BUILD_ELEMENTS` and more while the kernel cache lacks it)."""
    if x.dtype not in _DTYPES or x.size < MIN_ELEMENTS:
        return None
    typed = f"{name}_f64" if x.dtype == np.float64 else f"{name}_f32"
    fns = _functions(build=typed if x.size >= BUILD_ELEMENTS else None, alone=PART_OF[typed] in OWN_CALLS_ONLY)
    return None if fns is None else fns.get(typed)


def _by_rows(name: str, x: np.ndarray, *more: np.ndarray) -> np.ndarray | None:
    """``name(x, *more, out, rows, n)`` of the library over the rows of ``x``'s last axis (``more`` of its shape
    and dtype), into a new array; None where :func:`_typed` says it does not apply, or for an empty last axis."""
    f = _typed(name, x) if x.ndim and x.shape[-1] else None
    if f is None:
        return None
    args = [np.ascontiguousarray(a) for a in (x, *more)]
    out = np.empty(x.shape, x.dtype)
    n = x.shape[-1]
    f(*(a.ctypes.data for a in args), out.ctypes.data, x.size // n, n)
    return out
