"""Fused recurrent cells for the CPU's scans: one C function per cell and direction of the computation (the LSTM's
and the GRU's pointwise step, forward and backward), which :mod:`.recurrent` calls once per time step between its
BLAS products, where numpy makes ~25 passes over the step's gates.

The source is written here once for ``float`` and ``double`` and compiled through the CPU backend's C runtime (its
compiler, flags and on-disk kernel cache; libmvec vectorises ``exp``/``tanh`` as in generated kernels). Arguments
are addresses and element counts (one cffi call ~1 us); every matrix is rows of contiguous elements with the row
stride given. Where the CPU cannot compile (``TENSORWIRE_CPU_COMPILE=0``, no compiler), :func:`cells` is None and
the scans keep their numpy steps, as they do while the kernel cache is refused (not private: see
:mod:`~tensorwire.backends.codegen.cache`).

The library is built only once the scans have earned it, as a large fragment's kernels are (``backends/hot.py``;
issue 37: an 8-step BiLSTM's cold run spent ~0.6-0.8 s of gcc on it, on the worker's execution thread, inside its
first scan): found in the kernel cache, it loads at once (``cached_only``); otherwise the scans run their numpy steps,
timed (the running thread's CPU, :func:`spent`), until they have taken ``TENSORWIRE_CPU_COMPILE_BUILD_TIME`` times
what the build is expected to take (``NotCached.seconds``: the kernel cache's ``expected_seconds``), kept in a
:class:`~tensorwire.backends.hot.Earning` for the worker's life; it is then built on the compile thread
(``hot.build_in_background``) and later scans use it. 0: built on first use, on the calling thread (the test suite's
setting). The C and the numpy cells agree to rounding (libmvec's ``exp``/``tanh`` against numpy's: ~45% of a scan's
elements differ, by an ulp or two a step), so a run's results change in their last bits where the scans switch.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from contextlib import nullcontext

from ..c_library import TooManyLibraries, ffi
from ..codegen.c import CRenderer
from ..codegen.cache import NotCached, UnsafeKernelCache, cached_only
from ..hot import Earning, build_in_background
from .compiled import runtime
from .compiled_policy import BUILD_TIME_ENV, build_time  # noqa: F401 - BUILD_TIME_ENV: its tests set it

log = logging.getLogger("tensorwire.kernels")
WHAT = "the recurrent cells"

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
#: the library's wait for its build while it is not in the kernel cache (the scans' numpy time against the build's
#: expected cost; see the module doc), None when not waiting; and whether its build is queued or running
_EARNING: Earning | None = None
_BUILDING = False


def cells() -> dict | None:
    """``{(cell, dtype name): function}`` (cell: lstm_fwd, lstm_bwd, gru_fwd, gru_bwd): loaded on first use if the
    kernel cache has the library, else None until the scans have earned its build (:func:`spent`; built at once where
    :func:`build_time` is 0); None for good where the CPU cannot compile."""
    global _CELLS, _WHY, _EARNING
    if _CELLS is not None or _WHY or _EARNING is not None:
        return _CELLS
    with _LOCK:
        if _CELLS is None and not _WHY and _EARNING is None:
            rt = runtime()
            if rt is None:
                _WHY = "no C runtime"
                return None
            factor = build_time()
            try:
                with cached_only() if factor > 0 else nullcontext():
                    lib = rt.load(source(), what=WHAT)
            except NotCached as e:  # the scans run their numpy steps until they have paid for the build
                earning = Earning()
                earning.cost = e.seconds * factor
                _EARNING = earning
                log.debug("%s are not in the kernel cache: built once the scans' numpy steps have taken %.3f s",
                          WHAT, earning.cost)
                return None
            except (UnsafeKernelCache, TooManyLibraries):  # numpy steps, and asked again next time
                return None
            _CELLS = _table(lib)
    return _CELLS


def waiting() -> bool:
    """Whether the library waits for the scans to earn its build (their numpy steps are to be timed: :func:`spent`)."""
    return _EARNING is not None and not _BUILDING


def spent(seconds: float) -> None:
    """Count ``seconds`` of CPU that a scan took on the numpy cells while the library waits (:func:`cells`); once the
    scans have taken what the build is expected to cost (times :func:`build_time`), start it on the compile thread."""
    global _BUILDING
    earning = _EARNING
    if earning is None or _BUILDING:
        return
    earning.spent += seconds
    if not earning.earned():
        return
    with _LOCK:
        if _BUILDING or _EARNING is not earning:
            return
        _BUILDING = True
    log.debug("building %s: the scans' numpy steps took %.3f s (its build ~%.3f s)", WHAT, earning.spent,
              earning.cost)
    if not build_in_background(_build):  # (other compiles queued: at the next scan)
        _BUILDING = False


def _build() -> None:
    """Build (or load) the library for later scans (the compile thread)."""
    global _CELLS, _WHY, _EARNING, _BUILDING
    rt = runtime()
    try:
        table = _table(rt.load(source(), what=WHAT))
    except (UnsafeKernelCache, TooManyLibraries):  # numpy steps, and tried again at the next scan
        _BUILDING = False
        return
    except Exception:
        log.warning("building %s failed; the scans keep their numpy steps", WHAT, exc_info=True)
        with _LOCK:
            _WHY, _EARNING, _BUILDING = "its build failed", None, False
        return
    with _LOCK:
        _CELLS, _EARNING, _BUILDING = table, None, False
    log.debug("%s are built: the scans use them from now on", WHAT)


def _table(lib) -> dict:
    table = {}
    for dt, (_, s, _, _) in _TYPES.items():
        for name, sig in _SIGNATURES.items():
            fn = getattr(lib.cdll, f"{name}_{s}")
            table[(name, dt)] = ffi.cast(sig, ctypes.cast(fn, ctypes.c_void_p).value)
    table["lib"] = lib  # keeps the library loaded
    return table


def address(a) -> int:
    """The address of a numpy array's first element."""
    try:  # ~0.35 us, where the array interface's dict costs ~1.1 us (a scan takes ~11 addresses)
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    except (TypeError, ValueError, BufferError):  # read-only, not contiguous, or empty
        return a.__array_interface__["data"][0]
