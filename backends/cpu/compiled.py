"""The CPU's compiled mode: fragments run as fused C kernels built by the host's C compiler.

A fragment is lowered by :mod:`tensorwire.backends.codegen`, rendered as C (OpenMP across the cores,
loops the compiler vectorises), compiled once into a shared library cached on disk by the hash of its
source, the compiler's version and the flags, and called through cffi on the numpy buffers. Matmul
and the convolution/pooling/cross-entropy composites stay on the numpy/BLAS kernels (host steps).

What any device of C kernels in shared libraries shares (loading and closing libraries, at most
:data:`MAX_LIBRARIES` at once, size specialisation, the cffi launcher) is :mod:`..c_library`; this file says what
the CPU does differently: its compiler and flags (:class:`CRuntime`), and when a fragment compiles at all
(:class:`CompiledMixin`: small, long or complex fragments run on the numpy kernels, hot ones compile). A cache that
is not private (:class:`~..codegen.cache.UnsafeKernelCache`) or too many libraries
(:class:`~..c_library.TooManyLibraries`) turn compiling off: the fragments run interpreted.

The mode is on when a C compiler is found (``$CC``, else ``cc``, ``gcc``, ``clang``) and
``TENSORWIRE_CPU_COMPILE`` is not ``0``; otherwise the backend interprets with numpy, as it always could.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import platform

from ..c_library import MAX_LIBRARIES, LibraryRuntime, TooManyLibraries, find_c_compiler
from ..codegen.c import CRenderer
from ..codegen.cache import KernelCache, UnsafeKernelCache
from ..codegen.compiler import run_compiler, sweep_stale
from ..codegen.lower import Options, lower
from ..codegen.program import build_runner, host_step_call
from ..compiled_device import has_complex
from ..worker_ops import WORKER_OPS

# the policy's knobs, read as compiled.<NAME> (backends/cpu/__init__.py, tests)
from .compiled_policy import (  # noqa: F401
    BUILD_RUNS,
    BUILD_RUNS_ENV,
    BUILD_TIME,
    BUILD_TIME_ENV,
    HOT_RUNS,
    HOT_RUNS_ENV,
    LARGE_RUNS,
    LARGE_RUNS_ENV,
    MAX_STEPS,
    MAX_STEPS_ENV,
    MIN_WORK,
    MIN_WORK_ENV,
    build_time,
)
from .compiler_tuning import UNKNOWN_CPU_TUNE, tuning

#: IEEE-preserving: no -ffast-math; -fno-math-errno / -fno-trapping-math only let gcc vectorise (libmvec calls,
#: branch-free selects); -ffp-contract=off keeps a*b+c two roundings as numpy does; -z defs fails the link, not
#: the load, if this glibc lacks a vector math function
FLAGS = ("-O3", "-march=native", "-fPIC", "-shared", "-fopenmp", "-ffp-contract=off", "-fwrapv", "-fno-math-errno",
         "-fno-trapping-math", "-Wl,-z,defs")
COMPILE_ENV = "TENSORWIRE_CPU_COMPILE"

#: sets the most kernel libraries a worker keeps loaded (default :data:`~..c_library.MAX_LIBRARIES`; issue 34)
MAX_LIBRARIES_ENV = "TENSORWIRE_CPU_MAX_LIBRARIES"

#: composites kept on their numpy/BLAS kernels in compiled mode (im2col + gemm beats a naive loop nest)
HOST_COMPOSITES = frozenset({"conv2d", "conv2d_grad_input", "conv2d_grad_weight", "max_pool2d", "max_pool2d_grad",
                             "cross_entropy_index", "cross_entropy_index_grad", "linear", "rnn_scan",
                             "rnn_scan_grad", "batch_norm", "batch_norm_stats", "batch_norm_grad_stats",
                             "batch_norm_grad", "batch_norm_update", "log_softmax", "log_softmax_grad"})


def find_compiler() -> tuple[str | None, str]:
    """``(compiler path, version)`` of the host's C compiler, or ``(None, why not)``."""
    if os.environ.get(COMPILE_ENV, "1") == "0":
        return None, f"{COMPILE_ENV}=0"
    found = find_c_compiler((os.environ.get("CC"), "cc", "gcc", "clang"))
    return found if found is not None else (None, "no C compiler (gcc or clang) found")


def _host_cpu() -> str:
    """What -march=native compiles for: the CPU model and its flags (kernels built on another CPU are not reused)."""
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read(65536)
    except OSError:
        return platform.machine()
    pick = [ln for ln in info.splitlines() if ln.startswith(("model name", "flags"))][:2]
    return hashlib.sha256("\n".join(pick).encode()).hexdigest()[:16]


log = logging.getLogger("tensorwire.kernels")


class CRuntime(LibraryRuntime):
    """The host's C compiler building each fragment's kernels into a shared library (:data:`FLAGS`, cached on disk
    by the compiler's version, the flags and the CPU), called on numpy arrays (:class:`~..c_library.LibraryRuntime`).
    """

    def __init__(self, compiler: str, version: str):
        # read by libgomp when the first kernel library loads: idle OpenMP threads sleep rather than spin (the
        # worker shares its cores with BLAS, the client and the dispatcher; see docs/architecture.md)
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        self.compiler, self.version = compiler, version
        self._flags: tuple[str, ...] | None = None  # (the tuning follows from the version and the CPU in the key)
        super().__init__(CRenderer(), KernelCache("c", f"{version} {' '.join(FLAGS)} unknown-cpu:"
                                                       f"{' '.join(UNKNOWN_CPU_TUNE)} {_host_cpu()}"),
                         int(os.environ.get(MAX_LIBRARIES_ENV) or MAX_LIBRARIES), MAX_LIBRARIES_ENV)

    @property
    def flags(self) -> tuple[str, ...]:
        """The compiler's flags: :data:`FLAGS` and :func:`tuning`'s (asked once, at the first build)."""
        self._flags = self._flags or FLAGS + tuning(self.compiler)
        return self._flags

    def compile_library(self, src_path: str, out_path: str, flags: tuple[str, ...] = ()) -> None:
        """Build ``src_path`` into ``out_path`` (a temporary of the cache's; ``flags`` after :attr:`flags`), bounded
        in time and memory and killed with this process (:func:`..codegen.compiler.run_compiler`)."""
        sweep_stale(os.path.dirname(out_path))
        cmd = [self.compiler, *self.flags, *flags, src_path, "-o", out_path, "-lmvec", "-lm"]
        run_compiler(cmd, f"{os.path.basename(self.compiler)} on {src_path}", remove=out_path, key=src_path)


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

    def hot_build_runs(self) -> int:
        return int(os.environ.get(BUILD_RUNS_ENV, BUILD_RUNS))

    def hot_build_time(self) -> float:
        return build_time()

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
        """A callable for a host step: a worker op, an empty result, or the backend's numpy kernel, specialized as
        the interpreter's straight-line runner calls it (``specialize``: a 2-D matmul is ``np.matmul`` itself, an
        outer product ``np.multiply``, a view its numpy view; the generic kernel's values). The generic kernel took
        ~2-4x the specialized call's time, which made a char-RNN step's compiled plan lose its trial to the numpy
        kernels (issue 37). A matmul of a batch of rows by a matrix keeps the generic kernel: it makes one gemm of
        all the rows, where ``np.matmul`` makes one a batch (its values rounded as the compiled plans have them)."""
        if step.op in WORKER_OPS or step.dynamic:
            return host_step_call(self, step)
        k = self.backend.kernels[step.op]
        if getattr(step, "kernel", None) is k and not (step.op == "matmul" and len(step.in_meta[0][0]) > 2):
            f = self.specialize(step)
            return lambda args, dyn, frames: f(*args)
        attrs, shape, dtype = step.attrs, step.shape, step.dtype
        return lambda args, dyn, frames: k(args, attrs, shape, dtype)


_NOTED: set[type] = set()


def _note(e: Exception) -> None:
    """Log why a fragment runs interpreted, once a process for each reason (the cache logs its refusals itself)."""
    if type(e) not in _NOTED and not isinstance(e, UnsafeKernelCache):
        _NOTED.add(type(e))
        log.warning("%s", e)
