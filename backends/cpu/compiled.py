"""The CPU's compiled mode: fragments run as fused C kernels built by the host's C compiler.

A fragment is lowered by :mod:`tensorwire.backends.codegen`, rendered as C (OpenMP across the cores,
loops the compiler vectorises), compiled once into a shared library cached on disk by the hash of its
source, the compiler's version and the flags, and called through cffi on the numpy buffers. Matmul
and the convolution/pooling/cross-entropy composites stay on the numpy/BLAS kernels (host steps).

A loaded library stays loaded while a launcher made from it lives (each holds its :class:`Library`; a plan's
runners hold the launchers): when the worker's plan cache evicts the last plan using it, the library is closed
(``dlclose``), so a worker that sees endless distinct fragments keeps a bounded number mapped (at most
:data:`MAX_LIBRARIES`: past it, :class:`TooManyLibraries`). A cache that is not private
(:class:`~..codegen.cache.UnsafeKernelCache`) or too many libraries turn compiling off: the fragments run
interpreted.

The mode is on when a C compiler is found (``$CC``, else ``cc``, ``gcc``, ``clang``) and
``TENSORWIRE_CPU_COMPILE`` is not ``0``; otherwise the backend interprets with numpy, as it always could.
"""

from __future__ import annotations

import ctypes
import gc
import hashlib
import logging
import math
import os
import shutil
import subprocess
import threading
import time
import weakref
from collections import OrderedDict

import numpy as np
from cffi import FFI

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DeviceError

from ..codegen.c import CRenderer
from ..codegen.cache import KernelCache, UnsafeKernelCache
from ..codegen.compiler import run_compiler, sweep_stale
from ..codegen.ir import bind_sizes, costly_sizes
from ..codegen.lower import Options, lower
from ..codegen.program import build_runner, host_step_call, kernel_error

#: IEEE-preserving: no -ffast-math; -fno-math-errno / -fno-trapping-math only let gcc vectorise (libmvec calls,
#: branch-free selects); -ffp-contract=off keeps a*b+c two roundings as numpy does; -z defs fails the link, not
#: the load, if this glibc lacks a vector math function
FLAGS = ("-O3", "-march=native", "-fPIC", "-shared", "-fopenmp", "-ffp-contract=off", "-fwrapv", "-fno-math-errno",
         "-fno-trapping-math", "-Wl,-z,defs")
COMPILE_ENV = "TENSORWIRE_CPU_COMPILE"
#: fragments whose steps produce fewer elements than this in all run on the numpy kernels until they are hot
#: (:data:`HOT_RUNS`): a compile costs ~60-300 ms the first time a machine sees a fragment, which a small fragment
#: run a few times never earns back (set when a ctypes launch cost ~5 us: a digits CNN step took 1.8 ms compiled
#: against 1.1 ms on numpy; through cffi the compiled step is no slower)
MIN_WORK_ENV = "TENSORWIRE_CPU_COMPILE_MIN_ELEMENTS"
MIN_WORK = 1 << 20
#: fragments of more steps than this run on the numpy kernels too: gcc's time grows with the kernels of a fragment
#: (2,100 kernels: ~25 s), and such fragments are rarely run twice. A loop that records without reading ships
#: 8,192 ops a batch, each batch a new fragment (the README's polynomial fit: five compiles, 145 s on a fresh
#: machine); the largest fragment of a MiniLM forward has 956 steps
MAX_STEPS_ENV = "TENSORWIRE_CPU_COMPILE_MAX_STEPS"
MAX_STEPS = 2048
#: a fragment too small to compile is compiled once it has run this often (``backends/hot.py``); 0: never
HOT_RUNS_ENV = "TENSORWIRE_CPU_COMPILE_HOT_RUNS"
HOT_RUNS = 100
#: a fragment large enough to compile runs on the numpy kernels this many times before it compiles in the background
#: (``backends/hot.py``), so a new fragment never waits for gcc (issue 37: a char-level transformer whose batches
#: changed shape every step compiled a new ~180 KB C file every few seconds, at ~8x the time of running interpreted;
#: a cold kernel cache made every script 1.3-4x slower); 0: compiled before its first run, as before. Two, not one:
#: by its second run a plan of a loop whose batches change shape has seen its structure planned at another shape,
#: and is not compiled (a plan run once or twice never earns its ~3-6 s of gcc back)
LARGE_RUNS_ENV = "TENSORWIRE_CPU_COMPILE_LARGE_RUNS"
LARGE_RUNS = 2

#: most kernel libraries loaded at once: each maps 5 regions, and Linux allows a process 65,530
#: (``vm.max_map_count``; ~13,000 libraries). Libraries close as the plans using them leave the plan cache; past this
#: many, new fragments run interpreted until some have (issue 34)
MAX_LIBRARIES_ENV = "TENSORWIRE_CPU_MAX_LIBRARIES"
MAX_LIBRARIES = 4096

#: structures whose first sizes the runtime remembers (to write in the sizes that do not change: specialise)
SHAPES_REMEMBERED = 1 << 16

#: composites kept on their numpy/BLAS kernels in compiled mode (im2col + gemm beats a naive loop nest)
HOST_COMPOSITES = frozenset({"conv2d", "conv2d_grad_input", "conv2d_grad_weight", "max_pool2d", "max_pool2d_grad",
                             "cross_entropy_index", "cross_entropy_index_grad", "linear", "rnn_scan",
                             "rnn_scan_grad", "batch_norm", "batch_norm_stats", "batch_norm_grad_stats",
                             "batch_norm_grad", "batch_norm_update"})


def find_compiler() -> tuple[str | None, str]:
    """``(compiler path, version)`` of the host's C compiler, or ``(None, why not)``."""
    if os.environ.get(COMPILE_ENV, "1") == "0":
        return None, f"{COMPILE_ENV}=0"
    for name in filter(None, (os.environ.get("CC"), "cc", "gcc", "clang")):
        path = shutil.which(name)
        if path:
            try:
                out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
            except (OSError, subprocess.SubprocessError):
                continue
            if out.returncode == 0:
                return path, out.stdout.splitlines()[0].strip() if out.stdout else name
    return None, "no C compiler (gcc or clang) found"


def _host_cpu() -> str:
    """What -march=native compiles for: the CPU model and its flags (kernels built on another CPU are not reused)."""
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read(65536)
    except OSError:
        import platform
        return platform.machine()
    pick = [ln for ln in info.splitlines() if ln.startswith(("model name", "flags"))][:2]
    return hashlib.sha256("\n".join(pick).encode()).hexdigest()[:16]


_FFI = FFI()
log = logging.getLogger("tensorwire.kernels")


def _dlclose(handle: int, path: str, unloaded: list) -> None:
    """Unload a kernel library nothing refers to any more (a :class:`Library`'s finalizer)."""
    try:
        import _ctypes
        _ctypes.dlclose(handle)
        unloaded[0] += 1
    except (ImportError, AttributeError, OSError):  # (no dlclose here: the library stays mapped)
        log.debug("could not unload %s", path)


class TooManyLibraries(DeviceError):
    """This process has :data:`MAX_LIBRARIES` kernel libraries loaded, each held by a live plan: the fragment runs
    interpreted (the worker's plan cache evicts plans, which closes their libraries)."""


#: OpenMP runtimes a kernel library may load (gcc's, LLVM's, Intel's): once loaded, they stay (:func:`_pin_openmp`)
OPENMP_RUNTIMES = ("libgomp.so.1", "libomp.so.5", "libomp.so", "libiomp5.so")
_PINNED: list = []


def _pin_openmp() -> None:
    """Keep the OpenMP runtime loaded for good once a kernel library brought it in. Its thread pool outlives every
    parallel region: closing the last library that needed it would unload the code those idle threads sleep in (a
    segfault). A reference of our own (and ``RTLD_NODELETE``) keeps it mapped."""
    if _PINNED:
        return
    flags = getattr(os, "RTLD_NOLOAD", 0) | getattr(os, "RTLD_NODELETE", 0)
    for name in OPENMP_RUNTIMES:
        try:
            _PINNED.append(ctypes.CDLL(name, mode=flags))  # (NOLOAD: only one that is loaded already)
        except OSError:
            continue


class Library:
    """A loaded kernel library, closed (``dlclose``) once nothing refers to it: every launcher made from it holds
    it, so no live launcher can call into a closed library. Not at exit: a daemon thread may still be in a
    kernel. The OpenMP runtime it brings in stays loaded (:func:`_pin_openmp`)."""

    def __init__(self, path: str, unloaded: list):
        self.path = path
        self.cdll = ctypes.CDLL(path)
        _pin_openmp()
        fin = weakref.finalize(self, _dlclose, self.cdll._handle, path, unloaded)
        fin.atexit = False


def signature(k, renderer: CRenderer) -> str:
    """The C function pointer type of kernel ``k`` for cffi: every buffer (and the error slot) a ``void *``, then
    its scalars as ``renderer`` declares them. cffi parses each distinct type once; a library's symbols are found by
    ctypes (a ``cdef`` of every kernel would parse ~0.15 ms a kernel each time a library loads)."""
    params = ["void *"] * (len(k.bufs) + (1 if k.can_raise else 0)) + [renderer.scalar_type(s.dtype)
                                                                        for s in k.scalars]
    return f"void (*)({', '.join(params) or 'void'})"


def _function(lib: ctypes.CDLL, k, renderer: CRenderer):
    """Kernel ``k`` of the loaded library ``lib`` as a cffi function pointer (``lib`` must stay loaded)."""
    return _FFI.cast(signature(k, renderer), ctypes.cast(getattr(lib, k.name), ctypes.c_void_p).value)


class CRuntime:
    """Compiles C sources into shared libraries (cached) and calls their kernels on numpy arrays."""

    target = "c"

    def __init__(self, compiler: str, version: str):
        # read by libgomp when the first kernel library loads: idle OpenMP threads sleep rather than spin (the
        # worker shares its cores with BLAS, the client and the dispatcher; see docs/architecture.md)
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        self.compiler, self.version = compiler, version
        self.renderer = CRenderer()
        self.cache = KernelCache("c", f"{version} {' '.join(FLAGS)} {_host_cpu()}")
        #: the libraries loaded now, by cache key (an entry goes when its last launcher does)
        self._libs: weakref.WeakValueDictionary[str, Library] = weakref.WeakValueDictionary()
        self.unloaded = [0]  # libraries closed so far (a list: the finalizers count into it)
        self.max_libraries = int(os.environ.get(MAX_LIBRARIES_ENV) or MAX_LIBRARIES)
        self._collected = -1e9  # (monotonic) when _room last collected garbage
        self._lock = threading.Lock()
        self.err = np.zeros(2, np.int64)
        #: generic source's cache key -> (its costly sizes' first values, those that changed since; see specialise)
        self._first_sizes: OrderedDict = OrderedDict()

    def _compile(self, src_path: str, out_path: str) -> None:
        """Build ``src_path`` into ``out_path`` (a temporary of the cache's), bounded in time and memory and killed
        with this process (:func:`..codegen.compiler.run_compiler`); the cache folder's stale temporaries go first."""
        sweep_stale(os.path.dirname(out_path))
        cmd = [self.compiler, *FLAGS, src_path, "-o", out_path, "-lmvec", "-lm"]
        run_compiler(cmd, f"{os.path.basename(self.compiler)} on {src_path}", remove=out_path, key=src_path)

    def load(self, source: str, kernels=None, what: str = "") -> Library:
        """The library of ``source``, loaded from the kernel cache (built there if absent or not trusted). Raises
        :class:`~..codegen.cache.UnsafeKernelCache` for a cache that is not private, :class:`TooManyLibraries` past
        :data:`MAX_LIBRARIES`. Hold the result while using its functions: it closes when nothing holds it."""
        key = self.cache.key(source)
        with self._lock:
            lib = self._libs.get(key)
            if lib is None:
                self._room()
                path = self.cache.get_or_build(source, ".c", ".so", self._compile, kernels, what)
                try:
                    lib = Library(path, self.unloaded)
                except OSError:  # evicted by another worker between its check and this load: build it again
                    path = self.cache.get_or_build(source, ".c", ".so", self._compile, kernels, what, rebuild=True)
                    lib = Library(path, self.unloaded)
                self._libs[key] = lib
        return lib

    def _room(self) -> None:
        """Raise :class:`TooManyLibraries` if no other library may be loaded (after collecting the cycles that may
        hold dead plans' libraries)."""
        if len(self._libs) < self.max_libraries:
            return
        now = time.monotonic()
        if now - self._collected > 1.0:  # (a full collection costs ~0.1 s in a large worker: at most once a second)
            self._collected = now
            gc.collect()
        if len(self._libs) >= self.max_libraries:
            raise TooManyLibraries(f"this worker has {len(self._libs)} kernel libraries loaded, all in use by its "
                                   f"cached plans ({MAX_LIBRARIES_ENV}={self.max_libraries}): the fragment runs "
                                   f"interpreted")

    def loaded(self) -> int:
        """How many kernel libraries this runtime has loaded now."""
        return len(self._libs)

    def build(self, kernels: list) -> dict:
        """``{kernel name: launcher(buffers, scalars)}`` for ``kernels`` (one library per fragment; each launcher
        keeps it loaded), built as :meth:`specialise` makes them."""
        kernels = self.specialise(kernels)
        lib = self.load(self.renderer.render(kernels), kernels)
        return {k.name: self._launcher(_function(lib.cdll, k, self.renderer), k, lib) for k in kernels}

    def specialise(self, kernels: list) -> list:
        """A fragment's kernels as this runtime builds them. They take their sizes as parameters (shape-generic);
        the sizes a C compiler gains from knowing (a loop's length, a divisor: :func:`~..codegen.ir.costly_sizes`)
        are written in as constants (:func:`~..codegen.ir.bind_sizes`) while they keep the value they had when the
        structure (its generic source) was first built; one that changed is a parameter from then on. So a fixed
        shape keeps the fastest kernels, a batch that changes under a fixed width (the grid, a bias's modulus)
        reuses the first library, and a structure compiles once more each time another of its sizes first
        changes, not once a shape (as ``torch.compile``'s automatic dynamic shapes mark the dims that changed
        dynamic). A fragment with no such sizes is generic from its first size: one library serves every size.
        Remembered for :data:`SHAPES_REMEMBERED` structures."""
        bind = self._bake(self.renderer.render(kernels), kernels)
        return kernels if bind is None else [bind_sizes(k, names) for k, names in zip(kernels, bind)]

    def _bake(self, source: str, kernels: list) -> list | None:
        """The sizes of each kernel to write in (see :meth:`specialise`), or None: keep them all parameters."""
        costly = [costly_sizes(k) for k in kernels]
        if not any(costly):
            return None
        now = {(i, n): k.sizes[n] for i, (k, names) in enumerate(zip(kernels, costly)) for n in names}
        key = self.cache.key(source)
        with self._lock:
            first, changed = self._first_sizes.setdefault(key, (now, set()))
            changed.update(x for x, v in now.items() if first.get(x) != v)
            bind = [{n for n in names if (i, n) not in changed} for i, names in enumerate(costly)]
            self._first_sizes.move_to_end(key)
            if len(self._first_sizes) > SHAPES_REMEMBERED:
                self._first_sizes.popitem(last=False)
        return bind

    def _launcher(self, f, k, lib: Library):
        """``launch(buffers, scalars)``: through cffi, whose call costs ~0.5 us and a buffer's address ~0.2 us (a
        ctypes call cost ~1 us more, and numpy's ``__array_interface__`` ~0.9 us a buffer). ``scalars`` are the
        generic kernel's: a kernel with its sizes written in drops them."""
        dtypes = [b.dtype.np for b in k.bufs]
        err = self.err
        from_buffer = _FFI.from_buffer
        errp = from_buffer(err)
        ours = getattr(k, "kept_scalars", None)  # (a kernel with its sizes written in: see bind_sizes)

        def launch(bufs, scalars):
            if ours is not None:
                scalars = [scalars[i] for i in ours]
            ptrs = []
            for j, dt in enumerate(dtypes):
                b = bufs[j]
                if type(b) is not np.ndarray or b.dtype != dt or not b.flags.c_contiguous:
                    b = bufs[j] = np.ascontiguousarray(b, dtype=dt)  # (kept alive by bufs for the call)
                ptrs.append(from_buffer(b))
            if k.can_raise:
                err[0] = 0
                f(*ptrs, errp, *scalars)
                if err[0]:
                    raise kernel_error(k, int(err[0]), int(err[1]))
            else:
                f(*ptrs, *scalars)
        launch.library = lib  # loaded while this launcher lives
        return launch

    @staticmethod
    def empty(shape, dtype: D.DType):
        return np.empty(shape, dtype.np)


_RUNTIME: CRuntime | None = None
_RUNTIME_WHY = ""


def runtime() -> CRuntime | None:
    """The process's C runtime, or None when the CPU cannot compile (:func:`why_not`)."""
    global _RUNTIME, _RUNTIME_WHY
    if _RUNTIME is None and not _RUNTIME_WHY:
        path, version = find_compiler()
        if path is None:
            _RUNTIME_WHY = version
        else:
            _RUNTIME = CRuntime(path, version)
    return _RUNTIME


def why_not() -> str:
    runtime()
    return _RUNTIME_WHY


_LAST_COMPLEX: tuple = (None, 0, False)  # (the steps has_complex answered last, their count, its answer)


def has_complex(steps) -> bool:
    """Whether any step of a fragment makes or reads a complex value (an ``expansion_counts.StepCounts``, which has
    no steps, answers False: its fragment's steps are checked when it is planned). The answer for the last steps
    asked about is kept: planning a fragment asks several times (``interpreted``, ``compiles_first``, ...)."""
    global _LAST_COMPLEX
    if not isinstance(steps, (list, tuple)):
        return False
    last = _LAST_COMPLEX
    if last[0] is steps and last[1] == len(steps):  # (a plan's steps do not change once it is made)
        return last[2]
    got = any(s.complex_dtype() is not None for s in steps)
    _LAST_COMPLEX = (steps, len(steps), got)
    return got


#: elements a float32 sum adds in float32 (vectorised) before it adds the block's sum into its float64 accumulator:
#: 128, not 1024, since a block's partial sums must stay small against its elements (a block of 1024 values of ~5e4
#: erred by 6e-6 of the sum, where numpy's and torch's float32 sums were exact)
ACC_BLOCK = 128


class CompiledMixin:
    """What a NumpyDevice adds to run fragments as compiled kernels."""

    # matmul stays on BLAS and argsort on numpy's O(n log n) sort (the generated kernel ranks in O(n^2) a row)
    lowering_options = Options(host_ops=frozenset({"matmul", "argsort"}) | HOST_COMPOSITES, host_views=True,
                               acc64=True, acc_block=ACC_BLOCK, row_fusion=True, multi_output=True, size_strides=True,
                               nest=True)

    def interpreted(self, steps, hot: bool = False) -> bool:
        """Whether a fragment runs on the numpy kernels rather than compiled: too small (numpy calls cost less than
        kernel launches there, and a compile would not pay for itself; a ``hot`` fragment runs often enough), too
        long (compiling would cost more than it saves; see :data:`MAX_STEPS`), or with complex values (the kernel
        compiler has no complex arithmetic)."""
        b = self.backend
        if len(steps) > b.max_steps or has_complex(steps):
            return True
        if hot:
            return False
        # a large fragment too: until its background compile is ready (see LARGE_RUNS)
        return b.large_runs > 0 or not self._large(steps)

    def native_for(self, steps, hot: bool = False):
        # a fragment run on the numpy kernels keeps the fused composites (an optimizer update, ...): they beat
        # their decompositions, which only a compiled kernel would fuse
        return self.backend.interpreted_native if self.interpreted(steps, hot) else None

    def native_up_front(self):
        # every fragment that is not hot runs on the numpy kernels first (see interpreted), whatever its steps
        return self.backend.interpreted_native if self.backend.large_runs > 0 else None

    def _large(self, steps) -> bool:
        """Whether a fragment produces enough elements to compile (:data:`MIN_WORK`); ``steps`` may be an
        ``expansion_counts.StepCounts``."""
        elements = getattr(steps, "elements", None)
        if elements is None:
            elements = sum(math.prod(s.shape) for s in steps)
        return elements >= self.backend.min_work

    def hot_runs(self, steps=None) -> int:
        b = self.backend
        if steps is not None and b.large_runs > 0 and self._large(steps):
            return b.large_runs
        return b.hot_runs

    def compiles_first(self, steps) -> bool:
        return len(steps) <= self.backend.max_steps and self._large(steps) and not has_complex(steps)

    def compiles_when_hot(self, steps) -> bool:
        return self.interpreted(steps) and not self.interpreted(steps, hot=True)

    def runner(self, plan, keep):
        if self.interpreted(plan.program.steps, getattr(plan, "hot", False)):
            return None
        try:
            return build_runner(self, plan, keep)
        except (UnsafeKernelCache, TooManyLibraries) as e:  # the straight-line interpreted runner instead
            _note(e)
            return None

    def hot_runner(self, plan, keep, calls):
        if has_complex(plan.program.steps):
            return None
        lowered = lower(plan.program.steps, set(keep), self.lowering_options)
        if len(lowered.items) >= calls:  # no fewer calls than the numpy kernels make: nothing to gain
            return None
        try:
            return build_runner(self, plan, keep, lowered)
        except (UnsafeKernelCache, TooManyLibraries) as e:  # the plan stays interpreted
            _note(e)
            return None

    def host_call(self, step):
        """A callable for a host step: a worker op, an empty result, or the backend's numpy kernel."""
        from ..executor import WORKER_OPS
        if step.op in WORKER_OPS or step.dynamic:
            return host_step_call(self, step)
        k = self.backend.kernels[step.op]
        attrs, shape, dtype = step.attrs, step.shape, step.dtype
        return lambda args, dyn, frames: k(args, attrs, shape, dtype)


_NOTED: set[type] = set()


def _note(e: Exception) -> None:
    """Log why a fragment runs interpreted, once a process for each reason (the cache logs its refusals itself)."""
    if type(e) not in _NOTED and not isinstance(e, UnsafeKernelCache):
        _NOTED.add(type(e))
        log.warning("%s", e)


def _check_flags_supported() -> None:  # pragma: no cover - used by tests/tools
    r = runtime()
    if r is None:
        raise RuntimeError(why_not())
