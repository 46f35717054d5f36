"""``randn`` on the CPU in C: the portable Box-Muller of :mod:`tensorwire.protocol.random`, bit for bit, as one
fill function built once by the host's C compiler (the kernel cache keeps it across processes).

The numpy spelling of that Box-Muller is ~60 float64 array operations an element (~70 ns an element in cache-sized
blocks): a model's initialisation by ``normal_``/``kaiming_normal_`` draws every weight that way (a ResNet-18's 11M:
0.8 s; torch's ~0.06). The C spelling (``codegen/rng_source.RANDN_C``, which the compiled kernels of every C-like
target share) does the same correctly rounded operations in the same order under the CPU compiler's flags (no FMA
contraction, no fast-math: ``compiled.FLAGS``), so its numbers are the numpy spelling's, which
``tests/unit/backends/cpu/test_random_fill.py`` checks. Where the CPU cannot compile (no compiler, a kernel cache
refused, ``TENSORWIRE_CPU_COMPILE=0``), :func:`normal` returns None and the numpy spelling runs.
"""

from __future__ import annotations

import ctypes
import logging
import threading

import numpy as np

from ..codegen.c import CRenderer
from ..codegen.cache import NotCached, cached_only
from ..codegen.render import PREAMBLE_RNG
from . import compiled

log = logging.getLogger("tensorwire.kernels")

#: the fill function: element i of out is tw_randn(seed, offset, i), cast to float32 where out is (rounded to
#: nearest, as numpy's astype); OpenMP threads share a large fill (each element is independent of the others)
SOURCE = CRenderer.headers + "\n" + CRenderer.macros + "\n" + PREAMBLE_RNG + r"""
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

#: draws smaller than this stay on numpy (a call into the library costs more than their numpy spelling saves)
MIN_ELEMENTS = 4096
#: the smallest draw for which the fill is compiled when the kernel cache lacks it: a build costs ~0.4 s once a
#: machine (then the cache has it), numpy's spelling ~70 ms a million elements, so a program of small draws (a DCGAN's
#: init) never waits for the compiler, and one with a large model's init pays it back at once
BUILD_ELEMENTS = 1 << 20

_DTYPES = {np.dtype(np.float64): 1, np.dtype(np.float32): 0}
_lock = threading.Lock()
#: None: not looked for yet; "absent": not in the kernel cache (built at the first large draw); False: the CPU cannot
#: build it; else (the Library, its function)
_fill = None
_why = ""


def _function(build: bool):
    """The fill function, loaded from the kernel cache, or built there when ``build``; None when it is not there (and
    not ``build``) or cannot be made."""
    global _fill, _why
    with _lock:
        if _fill is None or (_fill == "absent" and build):
            rt = compiled.runtime()
            if rt is None:
                _fill, _why = False, compiled.why_not()
            else:
                try:
                    if build:
                        lib = rt.load(SOURCE, what="randn fill")
                    else:
                        with cached_only():
                            lib = rt.load(SOURCE, what="randn fill")
                    f = lib.cdll.tw_randn_fill
                    f.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int]
                    f.restype = None
                    _fill = (lib, f)
                except NotCached:
                    _fill = "absent"
                except Exception as e:  # noqa: BLE001 - a cache refused, a compiler that failed: numpy's spelling
                    _fill, _why = False, f"{type(e).__name__}: {e}"
                    log.info("randn runs on numpy: %s", _why)
    return _fill[1] if isinstance(_fill, tuple) else None


def normal(seed: int, offset: int, shape, npdtype) -> np.ndarray | None:
    """``protocol.random.normal``'s numbers from the C fill, or None where it does not apply (a half dtype, a small
    draw, no C compiler; a draw under :data:`BUILD_ELEMENTS` while the kernel cache lacks the fill)."""
    code = _DTYPES.get(np.dtype(npdtype))
    n = int(np.prod(shape, dtype=np.int64))
    if code is None or n < MIN_ELEMENTS:
        return None
    f = _function(build=n >= BUILD_ELEMENTS)
    if f is None:
        return None
    out = np.empty(shape, npdtype)
    f(seed % (1 << 64), offset % (1 << 64), n, out.ctypes.data, code)
    return out
