"""Fused recurrent cells for the CPU's scans: one C function per cell and direction of the computation (the LSTM's
and the GRU's pointwise step, forward and backward), which :mod:`.recurrent` calls once per time step between its
BLAS products, where numpy makes ~25 passes over the step's gates.

The source is written here once for ``float`` and ``double`` and compiled through the CPU backend's C runtime (its
compiler, flags and on-disk kernel cache; libmvec vectorises ``exp``/``tanh`` as in generated kernels). Arguments
are addresses and element counts (one cffi call ~1 us); every matrix is rows of contiguous elements with the row
stride given. Where the CPU cannot compile (``TENSORWIRE_CPU_COMPILE=0``, no compiler), :func:`cells` is None and
the scans keep their numpy steps, as they do while the kernel cache is refused (not private: see
:mod:`~tensorwire.backends.codegen.cache`).
"""

from __future__ import annotations

import ctypes
import threading

from ..c_library import TooManyLibraries, ffi
from ..codegen.c import CRenderer
from ..codegen.cache import UnsafeKernelCache
from .compiled import runtime

_LSTM = """
void lstm_fwd_{s}(TW_U64 pre_, TW_U64 bias_, TW_U64 x_, TW_U64 cp_, long cps, TW_U64 y_, long ys, long B,
                  long H) {{
  const {T} *pre = (const {T} *)pre_, *bias = (const {T} *)bias_, *x = (const {T} *)x_, *cp = (const {T} *)cp_;
  {T} *y = ({T} *)y_;
  for (long b = 0; b < B; b++) {{
    const {T} *p = pre + b * 4 * H, *xr = x + b * 4 * H, *c0 = cp + b * cps; {T} *r = y + b * ys;
    #pragma omp simd
    for (long j = 0; j < H; j++) {{
      /* (h W_hh^T + b_hh) + gi_t, rounded in that order as the numpy steps add them */
      {T} ai = (p[j] + bias[j]) + xr[j], af = (p[H + j] + bias[H + j]) + xr[H + j];
      {T} ag = (p[2 * H + j] + bias[2 * H + j]) + xr[2 * H + j], ao = (p[3 * H + j] + bias[3 * H + j]) + xr[3 * H + j];
      {T} i = 1 / (1 + {exp}(-ai)), f = 1 / (1 + {exp}(-af)), g = {tanh}(ag);
      {T} o = 1 / (1 + {exp}(-ao));
      {T} c = f * c0[j] + i * g;
      r[j] = o * {tanh}(c); r[H + j] = c; r[2 * H + j] = i; r[3 * H + j] = f; r[4 * H + j] = g; r[5 * H + j] = o;
    }}
  }}
}}

void lstm_bwd_{s}(TW_U64 y_, long ys, TW_U64 gy_, long gs, int gates, TW_U64 cp_, long cps, TW_U64 dh_, TW_U64 dc_,
                  TW_U64 d_, long B, long H) {{
  const {T} *y = (const {T} *)y_, *gy = (const {T} *)gy_, *cp = (const {T} *)cp_, *dh = (const {T} *)dh_;
  {T} *dc = ({T} *)dc_, *d = ({T} *)d_;
  for (long b = 0; b < B; b++) {{
    const {T} *r = y + b * ys, *g_ = gy + b * gs, *c0 = cp + b * cps, *dhr = dh + b * H;
    {T} *dcr = dc + b * H, *dr = d + b * 4 * H;
    #pragma omp simd
    for (long j = 0; j < H; j++) {{
      {T} c = r[H + j], i = r[2 * H + j], f = r[3 * H + j], g = r[4 * H + j], o = r[5 * H + j];
      {T} dhv = dhr[j] + g_[j], tc = {tanh}(c);
      {T} dcv = dcr[j] + g_[H + j] + dhv * o * (1 - tc * tc);
      {T} di = dcv * g, df = dcv * c0[j], dg = dcv * i, dov = dhv * tc;
      if (gates) {{ di += g_[2 * H + j]; df += g_[3 * H + j]; dg += g_[4 * H + j]; dov += g_[5 * H + j]; }}
      dr[j] = di * (i - i * i); dr[H + j] = df * (f - f * f); dr[2 * H + j] = dg * (1 - g * g);
      dr[3 * H + j] = dov * (o - o * o);
      dcr[j] = dcv * f;
    }}
  }}
}}

void gru_fwd_{s}(TW_U64 x_, long xs, TW_U64 gh_, TW_U64 hp_, long hps, TW_U64 y_, long ys, long B, long H) {{
  const {T} *x = (const {T} *)x_, *gh = (const {T} *)gh_, *hp = (const {T} *)hp_; {T} *y = ({T} *)y_;
  for (long b = 0; b < B; b++) {{
    const {T} *xr = x + b * xs, *hr = gh + b * 3 * H, *h0 = hp + b * hps; {T} *r = y + b * ys;
    #pragma omp simd
    for (long j = 0; j < H; j++) {{
      {T} rg = 1 / (1 + {exp}(-(xr[j] + hr[j]))), z = 1 / (1 + {exp}(-(xr[H + j] + hr[H + j])));
      {T} hn = hr[2 * H + j], n = {tanh}(xr[2 * H + j] + rg * hn);
      r[j] = (h0[j] - n) * z + n; r[H + j] = rg; r[2 * H + j] = z; r[3 * H + j] = n; r[4 * H + j] = hn;
    }}
  }}
}}

void gru_bwd_{s}(TW_U64 y_, long ys, TW_U64 gy_, long gs, int gates, TW_U64 hp_, long hps, TW_U64 dh_, TW_U64 d_,
                 TW_U64 direct_, long B, long H) {{
  const {T} *y = (const {T} *)y_, *gy = (const {T} *)gy_, *hp = (const {T} *)hp_, *dh = (const {T} *)dh_;
  {T} *d = ({T} *)d_, *direct = ({T} *)direct_;
  for (long b = 0; b < B; b++) {{
    const {T} *r = y + b * ys, *g_ = gy + b * gs, *h0 = hp + b * hps, *dhr = dh + b * H;
    {T} *dr = d + b * 4 * H, *dir = direct + b * H;
    #pragma omp simd
    for (long j = 0; j < H; j++) {{
      {T} rg = r[H + j], z = r[2 * H + j], n = r[3 * H + j], hn = r[4 * H + j];
      {T} dhv = dhr[j] + g_[j];
      {T} dn = dhv * (1 - z), dz = dhv * (h0[j] - n);
      if (gates) {{ dn += g_[3 * H + j]; dz += g_[2 * H + j]; }}
      {T} dpn = dn * (1 - n * n), drg = dpn * hn, dhn = dpn * rg;
      if (gates) {{ drg += g_[H + j]; dhn += g_[4 * H + j]; }}
      dr[j] = drg * (rg - rg * rg); dr[H + j] = dz * (z - z * z); dr[2 * H + j] = dpn; dr[3 * H + j] = dhn;
      dir[j] = dhv * z;
    }}
  }}
}}
"""

_TYPES = {"float32": ("float", "f32", "expf", "tanhf"), "float64": ("double", "f64", "exp", "tanh")}
_SIGNATURES = {
    "lstm_fwd": "void (*)(unsigned long long, unsigned long long, unsigned long long, unsigned long long, long, "
                "unsigned long long, long, long, long)",
    "lstm_bwd": "void (*)(unsigned long long, long, unsigned long long, long, int, unsigned long long, long, "
                "unsigned long long, unsigned long long, unsigned long long, long, long)",
    "gru_fwd": "void (*)(unsigned long long, long, unsigned long long, unsigned long long, long, unsigned long long, "
               "long, long, long)",
    "gru_bwd": "void (*)(unsigned long long, long, unsigned long long, long, int, unsigned long long, long, "
               "unsigned long long, unsigned long long, unsigned long long, long, long)",
}


def source() -> str:
    """The C source of every cell, for float and double."""
    body = "".join(_LSTM.format(T=t, s=s, exp=e, tanh=th) for t, s, e, th in _TYPES.values())
    return CRenderer.headers + "#define TW_U64 unsigned long long\n" + body


_CELLS: dict | None = None
_WHY = ""
_LOCK = threading.Lock()


def cells() -> dict | None:
    """``{(cell, dtype name): function}`` (cell: lstm_fwd, lstm_bwd, gru_fwd, gru_bwd), compiled on first use; None
    where the CPU cannot compile."""
    global _CELLS, _WHY
    if _CELLS is not None or _WHY:
        return _CELLS
    with _LOCK:
        if _CELLS is None and not _WHY:
            rt = runtime()
            if rt is None:
                _WHY = "no C runtime"
                return None
            try:
                lib = rt.load(source(), what="the recurrent cells")
            except (UnsafeKernelCache, TooManyLibraries):  # numpy steps, and asked again next time
                return None
            table = {}
            for dt, (_, s, _, _) in _TYPES.items():
                for name, sig in _SIGNATURES.items():
                    fn = getattr(lib.cdll, f"{name}_{s}")
                    table[(name, dt)] = ffi.cast(sig, ctypes.cast(fn, ctypes.c_void_p).value)
            table["lib"] = lib  # keeps the library loaded
            _CELLS = table
    return _CELLS


def address(a) -> int:
    """The address of a numpy array's first element."""
    return a.__array_interface__["data"][0]
