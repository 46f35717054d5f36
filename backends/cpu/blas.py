"""The threads OpenBLAS runs each of the CPU worker's products on: all the worker's for a large product, one for a
small one.

OpenBLAS splits a product over its threads when ``M * N * K`` passes 2^18 (its build's threshold), which pays where
the worker has the host's cores to itself. A worker shares its host with the client that feeds it (every
``LocalCluster``), and a training loop's client records the next step while the worker runs this one, so the
helper thread a split wakes waits for the core the client holds, and the worker's main thread waits for it
(OpenBLAS's master spins in ``exec_blas`` until its helpers are done); between products the helper spins ~1.5 ms
(``OPENBLAS_THREAD_TIMEOUT``, client/cluster.py) on that core as well. Measured on a 2-core host: makemore's
transformer as written (its products ``[512, 64] @ [64, 192]`` and smaller: ~130 us on one thread, ~75 us on two
when the other core is free) ran 1.2x slower on a 2-thread worker than on a 1-thread one, about half of it these
splits (the rest OpenMP's regions, codegen/c.py ``PARALLEL_WORK``); nanoGPT's products (``[768, 128] @ [128,
384]``, ~760 us alone) gain from the split (BENCHMARKS.md, session 41). So a product of fewer than
:data:`PARALLEL_MNK` multiply-adds (~0.3 ms on one core) runs on one thread, a larger one on all the worker's
(``--threads``).

One count is process-wide (OpenBLAS's thread server), and the worker runs several sessions' batches at once on its
pool threads: a product may then run on another's count. That changes its time, and on some of OpenBLAS's kernels
its last bits: OpenBLAS splits a product's rows and columns between threads, never a sum, but the blocks at a
split's edges may take another micro-kernel, which adds in another order (measured on an AMD EPYC with OpenBLAS
0.3.31's Haswell kernel: ``[768, 128] @ [128, 1536]`` on two threads differs from one thread in 3% of its
elements, each within float32's rounding of the float64 product, as one thread's is; on the Intel hosts of earlier
sessions the two were bit-equal). On either count a product gives the same bits run to run, and a session alone on
its worker has each product on the count its size decides, so its results repeat; torch's own products differ
with its thread count the same way. The products OpenBLAS may split along their sum (a matrix by a vector, a dot
product: one row or one column) always run on one thread.

Where numpy's BLAS is not OpenBLAS (an MKL or Accelerate build), products run as that library decides.
"""

from __future__ import annotations

import logging
import math
import os

import numpy as np
from threadpoolctl import ThreadpoolController

log = logging.getLogger(__name__)

#: products of fewer multiply-adds (``M * N * K`` of one matrix product) run on one BLAS thread
PARALLEL_MNK = 1 << 24
#: the same for a recurrent scan's products, which follow each other back to back inside one op: the helper a split
#: wakes for the first stays awake for the rest (it spins ~1.5 ms between products) and the client, which waits for
#: the scan, leaves its core free; OpenBLAS's own bound (2^18). A 2-layer bidirectional LSTM (products ``[100, 128]
#: @ [128, 512]``) ran ~1.1x slower on a 2-thread worker with its scans' products on one thread (session 41)
SCAN_MNK = 1 << 18


class _Threads:
    """OpenBLAS's thread count, set only when it changes (a call ~0.4 us)."""

    __slots__ = ("set", "full", "now")

    def __init__(self):
        self.set = None  # openblas_set_num_threads, once found (False: there is none to set)
        self.full = 1  # the worker's count (OpenBLAS's at the first product)
        self.now = 1

    def find(self) -> None:
        """Find numpy's OpenBLAS and its count (threadpoolctl's scan of the loaded libraries: once, at the first
        product). numpy's own where another (scipy's) is loaded too."""
        self.set = False
        lib = _numpy_openblas()
        if lib is None:
            return
        narrower = _narrower(lib)
        if narrower:
            log.warning("numpy's %s; matrix products may take up to twice as long", narrower)
        get, put = _symbol(lib, "openblas_get_num_threads"), _symbol(lib, "openblas_set_num_threads")
        if get is not None and put is not None:
            self.full = self.now = int(get())
            self.set = put if self.full > 1 else False

    def use(self, n: int) -> None:
        if self.set is None:
            self.find()
        if self.set and n != self.now:
            self.now = n
            self.set(n)


def _numpy_openblas():
    """threadpoolctl's controller of numpy's OpenBLAS (another's where numpy's is not found: scipy's), or None."""
    libs = ThreadpoolController().select(internal_api="openblas").lib_controllers
    return next((lib for lib in libs if "numpy" in lib.filepath), libs[0] if libs else None)


#: OpenBLAS's x86 kernels (its ``openblas_get_corename``, lowercased) that use AVX-512
AVX512_CORES = frozenset({"skylakex", "cooperlake", "sapphirerapids"})
#: the CPU features (Linux's /proc/cpuinfo names) OpenBLAS's AVX-512 kernels need
AVX512_FLAGS = frozenset({"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"})


def cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
    """The first CPU's feature flags as Linux lists them (empty where there is no such file: another OS)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def _narrower(lib, flags: frozenset[str] | None = None) -> str:
    """Where OpenBLAS runs AVX2-width kernels on a CPU with AVX-512, what does (``""`` where it does not).

    The cause is mostly ``OPENBLAS_CORETYPE``, which some hosts set for older OpenBLAS builds that misbehave on newer
    processors; a current numpy then runs products at half the width it could (measured on a Zen 5 EPYC, one
    thread: ``[2800, 256] @ [256, 512]`` 6.8 ms on the Haswell kernels, 3.5 ms on its own choice, SkylakeX). The
    variable is the user's to change, not this code's: the worker says so in its log, and :func:`describe` in a
    benchmark's header."""
    core = (lib.architecture or "").lower()
    if not core or core in AVX512_CORES or not AVX512_FLAGS <= (cpu_flags() if flags is None else flags):
        return ""
    forced = os.environ.get("OPENBLAS_CORETYPE")
    why = f"OPENBLAS_CORETYPE={forced} picks them" if forced else "its detection picked them"
    return f"OpenBLAS {lib.version} runs {lib.architecture} (AVX2) kernels on a CPU with AVX-512: {why}"


def describe() -> str:
    """numpy's BLAS and the kernels it runs, in words (``OpenBLAS 0.3.31, SkylakeX kernels``), and where they are
    narrower than this CPU could run, why (:func:`_narrower`)."""
    lib = _numpy_openblas()
    if lib is None:
        info = ThreadpoolController().select(user_api="blas").info()
        return f"numpy's BLAS: {info[0]['internal_api']} {info[0]['version']}" if info else "numpy's BLAS: unknown"
    return _narrower(lib) or f"OpenBLAS {lib.version}, {lib.architecture} kernels"


def _symbol(lib, name: str):
    """OpenBLAS's C function ``name`` in threadpoolctl's controller ``lib``, called directly: threadpoolctl's own
    ``set_num_threads`` lets one Python thread alone set OpenBLAS's count, and the worker's batches run on several."""
    get = getattr(lib, "_get_symbol", None)  # (its names' prefix and suffix: scipy_openblas_..._64_)
    return get(name) if get is not None else getattr(lib.dynlib, name, None)


_THREADS = _Threads()


def _one_thread(m: int, n: int, k: int, bound: int) -> bool:
    """Whether a product ``[m, k] @ [k, n]`` runs on one thread: under ``bound`` multiply-adds, or by a vector."""
    return m * n * k < bound or m == 1 or n == 1


def threads_for(m: int, n: int, k: int, bound: int = PARALLEL_MNK) -> None:
    """Set OpenBLAS's threads for a product ``[m, k] @ [k, n]`` (one matrix of a batch): one below ``bound``
    multiply-adds (:data:`PARALLEL_MNK`; a scan's: :data:`SCAN_MNK`) or for a vector (``m`` or ``n`` 1), else the
    worker's all."""
    _THREADS.use(1 if _one_thread(m, n, k, bound) else _THREADS.full)


def _mnk(x_shape: tuple, y_shape: tuple) -> tuple[int, int, int, bool]:
    """``(M, N, K, rows)`` of the product :func:`matmul` makes of operands so shaped (a 1-D operand is one row or
    column): one of ``np.matmul``'s, or, for ``[..., M, K] @ [K, N]`` (``rows``), ONE product of all ``x``'s rows
    (``M`` their count, :func:`_rows_product`)."""
    k = x_shape[-1] if x_shape else 1
    n = y_shape[-1] if len(y_shape) >= 2 else 1
    if len(x_shape) > 2 and len(y_shape) == 2 and all(x_shape):
        return math.prod(x_shape[:-1]), n, k, True
    return (x_shape[-2] if len(x_shape) >= 2 else 1), n, k, False


def matmul(x: np.ndarray, y: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``np.matmul(x, y, out=out)`` on the threads its size warrants (:func:`threads_for`); ``[..., M, K] @ [K, N]``
    as one product of all the rows (:func:`_rows_product`)."""
    if out is not None:  # (np.matmul's own products, one a leading index of ``x``)
        threads_for(*_mnk(x.shape[-2:], y.shape)[:3])
        return np.matmul(x, y, out=out)
    m, n, k, rows = _mnk(x.shape, y.shape)
    threads_for(m, n, k)
    return _rows_product(x, y) if rows else np.matmul(x, y)


def _rows_product(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``x @ y`` for ``x`` of ``[..., M, K]`` and ``y`` of ``[K, N]`` as ONE product of all ``x``'s rows, reshaped
    back: numpy makes one gemm per leading index, ~3x slower (a language model's decoder gradient, ``[35, 20, 7115] @
    [7115, 200]``: 21.5 ms against 7.3), and torch folds the leading dims as this does."""
    return np.matmul(x.reshape(-1, x.shape[-1]), y).reshape(*x.shape[:-1], y.shape[1])


def matmul_for(x_shape: tuple, y_shape: tuple):
    """A callable ``f(x, y)``: :func:`matmul` of operands so shaped (without ``out``), its threads decided here, once
    (a plan's specialized call)."""
    m, n, k, rows = _mnk(x_shape, y_shape)
    small = _one_thread(m, n, k, PARALLEL_MNK)
    use, mm = _THREADS.use, _rows_product if rows else np.matmul

    def product(x, y):
        use(1 if small else _THREADS.full)
        return mm(x, y)

    return product
