"""An out-of-tree compiled device (``clang:0``): the C renderer's kernels compiled by clang, on host memory.

The proof of ``docs/plugins.md``'s "A compiled device": a runtime file plus a renderer subclass. Everything a
compiled device shares comes from ``tensorwire.backends.compiled_device`` (and the search for a C compiler from
``tensorwire.backends.c_library``); this file writes only discovery (a clang on ``PATH``), the allocator (numpy
arrays), the compiler (clang through the kernel cache) and the program (a shared library loaded with ctypes). Every
op is a kernel (no host steps), so the conformance suite checks the C renderer through the whole
lowering. No OpenMP: each kernel runs its grid as a loop on the calling thread.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass

import numpy as np

from tensorwire.backends import hookimpl
from tensorwire.backends.c_library import find_c_compiler
from tensorwire.backends.codegen.c import CRenderer
from tensorwire.backends.codegen.cache import KernelCache
from tensorwire.backends.codegen.compiler import run_compiler
from tensorwire.backends.codegen.lower import Options
from tensorwire.backends.codegen.program import kernel_error
from tensorwire.backends.compiled_device import CompiledDevice, CompilingBackend, Discovery, Found, KernelModules
from tensorwire.backends.gpu_runtime import SCALAR_CTYPES
from tensorwire.protocol import dtypes as D

CLANGS = ("clang", "clang-18", "clang-17", "clang-16", "clang-15", "clang-14")
#: IEEE-preserving, as the CPU's gcc flags: no contraction of ``a * b + c``, wrapping integer overflow
FLAGS = ("-O1", "-fPIC", "-shared", "-ffp-contract=off", "-fwrapv", "-fno-math-errno", "-Wno-unknown-attributes",
         "-Wno-unknown-pragmas", "-Wno-ignored-attributes")
#: every op a kernel: views too, matmul as its loop nest, no work groups (the C target has none)
LOWERING = Options(host_ops=frozenset(), host_views=False, acc64=True, acc_block=1024, row_fusion=True,
                   multi_output=True)


class HostBuffer:
    """A tensor in host memory: a C-contiguous numpy array of the dtype's storage type."""

    __slots__ = ("array", "shape", "dtype", "nbytes")

    def __init__(self, array: np.ndarray, dtype: D.DType):
        self.array, self.shape, self.dtype, self.nbytes = array, tuple(array.shape), dtype, int(array.nbytes)


@dataclass
class Clang:
    """The device discovery found: clang at ``path``."""

    path: str
    version: str
    index: int = 0
    memory_bytes: int | None = None

    @property
    def name(self) -> str:
        return f"C kernels ({self.version})"


def _discover() -> Found:
    found = find_c_compiler(CLANGS)
    return Found([Clang(*found)]) if found else Found([], "no clang found (apt-get install clang)")


discover = Discovery(_discover)


class ClangRuntime(KernelModules):
    """Host memory; kernels compiled by clang into shared libraries (cached on disk), called through ctypes."""

    def __init__(self, clang: Clang):
        super().__init__()
        self.clang = clang
        self.renderer = CRenderer()
        self.guard = threading.Lock()
        self.cache = KernelCache("clang", f"{clang.version} {' '.join(FLAGS)}")
        self._libraries: list = []  # loaded once per process: kernels found by name stay valid
        self.err = np.zeros(2, np.int64)

    # allocator ---------------------------------------------------------------------------------------
    def empty(self, shape, dtype: D.DType) -> HostBuffer:
        return HostBuffer(np.empty(tuple(int(n) for n in shape), dtype.np), dtype)

    def upload(self, host: np.ndarray) -> HostBuffer:
        return HostBuffer(host.copy(), D.from_numpy(host.dtype))  # (the caller's array may change after)

    def download(self, buf: HostBuffer) -> np.ndarray:
        return buf.array

    def synchronize(self) -> None:
        """Nothing queued: a launch returns when its kernel has run."""

    def memory(self) -> dict:
        return {}

    # compiler and program ----------------------------------------------------------------------------
    def compile(self, source: str, kernels) -> str:
        def build(src_path: str, out_path: str) -> None:
            run_compiler([self.clang.path, *FLAGS, src_path, "-o", out_path, "-lm"],
                         f"clang on {src_path}", remove=out_path, key=src_path)
        return self.cache.get_or_build(source, ".c", ".so", build, kernels)

    def load(self, path: str, source: str, group: list) -> dict:
        lib = ctypes.CDLL(path)
        self._libraries.append(lib)
        made = {}
        for key, k in group:
            fn = getattr(lib, k.name)
            fn.restype = None
            fn.argtypes = ([ctypes.c_void_p] * (len(k.bufs) + (1 if k.can_raise else 0))
                           + [SCALAR_CTYPES[self.renderer.scalar_type(s.dtype)] for s in k.scalars])
            made[key] = (fn,)
        return made

    def launcher(self, k, fn):
        err, errp = self.err, self.err.ctypes.data

        def launch(bufs, scalars):
            ptrs = [b.array.ctypes.data if b.nbytes else None for b in bufs]
            if k.can_raise:
                err[:] = 0
                fn(*ptrs, errp, *scalars)
                if err[0]:
                    raise kernel_error(k, int(err[0]), int(err[1]))
            else:
                fn(*ptrs, *scalars)
        return launch


class ClangDevice(CompiledDevice):
    """``clang:0``: host buffers, fragments as fused C kernels built by clang."""

    def __init__(self, backend, clang: Clang):
        super().__init__(backend, clang.index, ClangRuntime(clang), LOWERING)

    def download(self, buf: HostBuffer) -> np.ndarray:
        out = self.runtime.download(buf).view()
        out.flags.writeable = False  # buffers are immutable
        return out


class ClangBackend(CompilingBackend):
    """Compiled C kernels through clang (no placeholder kernels: every primitive is compiled)."""

    name = "clang"

    def discover(self) -> Found:
        return discover()

    def device(self, dev: Clang, driver) -> ClangDevice:
        return ClangDevice(self, dev)


@hookimpl
def tensorwire_backends():
    """The clang device (listed unavailable, with the reason, where no clang is installed)."""
    return [ClangBackend()]


__all__ = ["ClangBackend", "ClangDevice", "ClangRuntime", "discover"]
