"""The core of the GPU API stand-ins (``_cuda_standin.py``, ``_hip_standin.py``): device memory, modules and
launches without a GPU, for running the CUDA and ROCm backends' host code.

:class:`StandInGPU` keeps what CUDA's driver API and HIP share; each stand-in is a thin front that spells its API's
calls (``cuMemAlloc``/``hipMalloc`` ...) with its bindings' result conventions and enums and calls these methods.

* Memory: device memory lives in host memory, numpy byte arrays at made-up device addresses that the host cannot
  dereference, so a host read of a device pointer fails instead of working by accident. Work is executed when it is
  queued (one stream, in order), so synchronising has nothing left to wait for.
* Kernels: the backend hands its compiler's real output (a CUBIN, PTX, or an AMDGPU code object) to the module
  loader. The stand-in checks that every function asked for is in that image; a module unloaded takes its functions
  with it (a launch of one fails as the driver's invalid-handle error, and a queued launch that would run after its
  module went fails the test). It runs a launch as the kernel's
  OpenCL twin on PoCL: the same IR kernel rendered by :class:`~tensorwire.backends.codegen.opencl.OpenCLRenderer`.
  It finds the IR kernel by the function's name in a registry that :func:`hook_renderer` fills by wrapping
  ``CUDARenderer.render`` (which the HIP renderer inherits; the runtimes name kernels by the hash of their source,
  so a name is one kernel). The launch's arguments are read back from ``kernelParams`` (an array of pointers to the
  values, as the C ABI has it) in the order of the kernel's parameters.
* Graphs (stream capture), as CUDA's driver has them: while a stream is captured, the work queued on it is recorded,
  not run, with its arguments as they were when queued (a launch's parameters by value); a replay of the
  instantiated graph queues the recorded work again. What the driver refuses during a capture fails here too, and
  invalidates the capture (its end then fails): a synchronisation of the captured stream, a wait on an event recorded
  in it, and, unless the calling thread relaxed its capture mode, an allocation or a free by the capturing thread (any
  thread's, for a capture in global mode). A graph whose kernel's module was unloaded fails to launch with the
  invalid-handle error.
* :class:`StandInBlas` replaces cuBLAS's and hipBLAS's ``gemm`` (the backends' shared interface: column-major,
  strides in elements) with numpy: 16-bit floats are multiplied in float32 and rounded once, as both libraries'
  float32 compute type does.
"""

from __future__ import annotations

import bisect
import ctypes
import threading

import numpy as np

from tensorwire.backends.codegen.cuda import CUDARenderer
from tensorwire.backends.gpu_runtime import SCALAR_CTYPES
from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DeviceError

from ._pocl import OpenCLTwins, record_renders

BASE = 0x7A00_0000_0000  # device addresses start here (nothing of the host's lives there)
ALIGN = 256
#: capture modes, as CUDA numbers them (``CUstreamCaptureMode``)
GLOBAL, THREAD_LOCAL, RELAXED = 0, 1, 2


class Capture:
    """A stream capture in progress: its mode, the thread that began it, the work recorded so far, and whether a
    refused call invalidated it."""

    def __init__(self, mode: int):
        self.mode, self.thread, self.nodes, self.invalid = mode, threading.get_ident(), [], False


class StandInGPU(OpenCLTwins):
    """Memory, modules and launches of ``gpus`` made-up GPUs of ``memory_bytes`` each (one address space).

    As on a GPU, the stream's work runs later than it is queued: copies, memsets, launches and BLAS calls are queued
    (their arguments read when queued, as the driver copies a launch's arguments) and run, in order, at the next
    synchronisation: a stream synchronisation, an event's (up to the event), an event query (which answers "not
    ready" for work it then lets run), or a free. So host memory read after a queued device-to-host copy without a
    synchronisation holds stale bytes, and a pinned staging block reused before its copy ran corrupts the copy,
    as they would on a GPU."""

    standin = "GPU stand-in"

    def __init__(self, gpus: int = 1, name: str = "Stand-in GPU (PoCL)", memory_bytes: int = 1 << 30):
        self.gpus, self.name, self.memory_bytes = gpus, name, memory_bytes
        self.registry: dict = {}  # kernel name -> ir.Kernel (filled by hook_renderer's render hook)
        self._mem: dict[int, np.ndarray] = {}  # device address -> its bytes
        self._starts: list[int] = []
        self._next = BASE
        self._host: dict[int, np.ndarray] = {}  # pinned host blocks, by address
        self._modules: dict[int, bytes] = {}  # loaded module -> its image
        self._functions: dict[int, tuple] = {}  # function -> (ir.Kernel, its module)
        self._handles = 0  # the last module or function handle made (handles are never reused)
        self.modules_loaded = self.modules_unloaded = 0
        self._events = 0
        self._queue: list = []  # the stream's work not run yet, in order
        self._queued = self._ran = 0  # how many items were ever queued / have run
        self._event_at: dict[int, int] = {}  # event -> the queue position it was recorded at
        self.calls: dict[str, int] = {}
        self.launches = 0
        self.initialised = False
        self.capture: Capture | None = None  # the stream's capture in progress
        self._graphs: dict[int, list] = {}  # graph -> its recorded work [(fn, kernel function or None)]
        self._execs: dict[int, list] = {}  # instantiated graph -> the same
        self._mode = threading.local()  # the calling thread's capture mode (the driver's is per thread)
        self.graph_launches = 0

    def thread_ok(self) -> bool:
        """Whether the calling thread has this GPU current (the CUDA and HIP stand-ins keep that per thread)."""
        return True

    def count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def new_event(self) -> int:
        self._events += 1
        return self._events

    # -- the stream: work runs later than it is queued -------------------------------------------------------------
    def enqueue(self, fn, function=None) -> None:
        """Queue ``fn`` on the stream (``function``: the kernel it launches), or record it in the capture."""
        if self.capture is not None:
            self.capture.nodes.append((fn, function))
            return
        self._queue.append(fn)
        self._queued += 1

    # -- graphs ------------------------------------------------------------------------------------------------------
    def thread_mode(self) -> int:
        """The calling thread's capture mode (global, 0, until it exchanges it)."""
        return getattr(self._mode, "mode", GLOBAL)

    def exchange_mode(self, mode: int) -> int:
        old = self.thread_mode()
        self._mode.mode = int(mode)
        return old

    def capturing_stream(self) -> bool:
        """Whether the stream is being captured (its synchronisation is refused)."""
        return self.capture is not None

    def unsafe_refused(self) -> bool:
        """Whether a call that is unsafe during a capture (an allocation, a free) is refused for the calling thread:
        its mode is not relaxed and the capture is global, or thread-local and its own. Refusing invalidates it."""
        cap = self.capture
        if cap is None or self.thread_mode() == RELAXED:
            return False
        if cap.mode == GLOBAL or (cap.mode == THREAD_LOCAL and cap.thread == threading.get_ident()):
            cap.invalid = True
            return True
        return False

    def refuse_in_capture(self) -> bool:
        """A synchronisation of the captured stream: refused, and the capture invalidated."""
        if self.capture is None:
            return False
        self.capture.invalid = True
        return True

    def begin_capture(self, mode: int) -> bool:
        if self.capture is not None:
            return False
        self.capture = Capture(int(mode))
        return True

    def end_capture(self) -> tuple[str, int | None]:
        """``("ok", graph)``, or ``(why, None)``: ``"none"`` (no capture), ``"thread"`` (a thread-local or global
        capture ended by another thread), ``"invalidated"`` (the capture ends, with no graph)."""
        cap = self.capture
        if cap is None:
            return "none", None
        if cap.mode != RELAXED and cap.thread != threading.get_ident():
            return "thread", None
        self.capture = None
        if cap.invalid:
            return "invalidated", None
        self._handles += 1
        self._graphs[self._handles] = list(cap.nodes)
        return "ok", self._handles

    def instantiate(self, graph) -> int | None:
        nodes = self._graphs.get(graph)
        if nodes is None:
            return None
        self._handles += 1
        self._execs[self._handles] = list(nodes)
        return self._handles

    def launch_graph(self, exe) -> str | None:
        """Queue the recorded work of ``exe`` again; None, or why the driver refuses: ``"value"`` (no such graph),
        ``"handle"`` (a kernel whose module was unloaded)."""
        nodes = self._execs.get(exe)
        if nodes is None:
            return "value"
        if any(f is not None and not self.function_ok(f) for _, f in nodes):
            return "handle"
        self.graph_launches += 1
        for fn, f in nodes:
            self.enqueue(fn, f)
        return None

    def destroy_graph(self, graph) -> bool:
        return self._graphs.pop(graph, None) is not None

    def destroy_exec(self, exe) -> bool:
        return self._execs.pop(exe, None) is not None

    def drain(self, upto: int | None = None) -> None:
        """Run the queued work (up to queue position ``upto``) in order."""
        end = self._queued if upto is None else upto
        while self._ran < end and self._queue:
            fn = self._queue.pop(0)
            self._ran += 1
            fn()

    def record(self, ev) -> None:
        self._event_at[ev] = self._queued

    def event_ready(self, ev) -> bool:
        """Whether the work before ``ev`` has run; when not, it runs now (the GPU was busy with it), but this
        query still answers False."""
        upto = self._event_at.get(ev, 0)
        if self._ran >= upto:
            return True
        self.drain(upto)
        return False

    def event_wait(self, ev) -> None:
        self.drain(self._event_at.get(ev, 0))

    # -- memory ----------------------------------------------------------------------------------------------------
    def in_use(self) -> int:
        return sum(a.nbytes for a in self._mem.values())

    def alloc(self, size: int) -> int | None:
        """A device block's address, or None when the made-up GPU's memory is full."""
        if self.in_use() + size > self.memory_bytes:
            return None
        ptr = self._next
        self._next += -(-max(size, 1) // ALIGN) * ALIGN
        self._mem[ptr] = np.zeros(size, np.uint8)
        bisect.insort(self._starts, ptr)
        return ptr

    def free(self, ptr) -> bool:
        self.drain()  # (freeing device memory waits for the device, as cuMemFree and hipFree do)
        ptr = int(ptr)
        if ptr not in self._mem:
            return False
        del self._mem[ptr]
        self._starts.remove(ptr)
        return True

    def host_alloc(self, size: int) -> int:
        a = np.zeros(max(size, 1), np.uint8)
        self._host[a.ctypes.data] = a
        return a.ctypes.data

    def host_free(self, ptr) -> None:
        self.drain()
        self._host.pop(int(ptr))

    def view(self, ptr: int, nbytes: int) -> np.ndarray:
        """The bytes ``[ptr, ptr + nbytes)`` of device memory (a view); IndexError outside an allocation."""
        ptr = int(ptr)
        i = bisect.bisect_right(self._starts, ptr) - 1
        if i < 0:
            raise IndexError(f"device address {ptr:#x} is not allocated")
        start = self._starts[i]
        mem = self._mem[start]
        off = ptr - start
        if off + nbytes > mem.nbytes:
            raise IndexError(f"device range {ptr:#x}+{nbytes} overruns its allocation of {mem.nbytes} bytes")
        return mem[off:off + nbytes]

    def extent(self, ptr: int, others=()) -> int:
        """Bytes from ``ptr`` to the end of its allocation, or to the nearest of the addresses ``others`` past it in
        the same allocation (a launch's other arguments: the arguments of one kernel do not overlap)."""
        i = bisect.bisect_right(self._starts, ptr) - 1
        if i < 0:
            raise IndexError(f"device address {ptr:#x} is not allocated")
        start = self._starts[i]
        end = start + self._mem[start].nbytes
        if ptr >= end:
            raise IndexError(f"device address {ptr:#x} is not allocated")
        return min((o for o in others if ptr < o < end), default=end) - ptr

    @staticmethod
    def host_bytes(ptr: int, n: int) -> np.ndarray:
        return np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(int(ptr))) if n else np.zeros(0, np.uint8)

    def copy_htod(self, dst, src, n) -> None:
        self.view(dst, n)  # (a bad address fails the call itself)
        self.enqueue(lambda: self.view(dst, n).__setitem__(slice(None), self.host_bytes(src, n)))

    def copy_dtoh(self, dst, src, n) -> None:
        self.view(src, n)
        self.enqueue(lambda: self.host_bytes(dst, n).__setitem__(slice(None), self.view(src, n)))

    def copy_dtod(self, dst, src, n) -> None:
        self.view(dst, n), self.view(src, n)
        self.enqueue(lambda: self.view(dst, n).__setitem__(slice(None), self.view(src, n).copy()))

    def memset(self, ptr, value, n) -> None:
        self.view(ptr, n)
        self.enqueue(lambda: self.view(ptr, n).__setitem__(slice(None), value))

    # -- modules and launches --------------------------------------------------------------------------------------
    def load_module(self, image) -> int:
        self._handles += 1
        self._modules[self._handles] = bytes(image)
        self.modules_loaded += 1
        return self._handles

    def unload_module(self, module) -> bool:
        """Unload ``module``: its functions' handles are invalid from now on (False: no such module loaded)."""
        if self._modules.pop(module, None) is None:
            return False
        self.modules_unloaded += 1
        return True

    def function(self, module, name: bytes) -> int | None:
        """A handle for kernel ``name`` of ``module``, or None when the image does not hold it."""
        image = self._modules.get(module)
        k = self.registry.get(name.decode())
        if image is None or k is None or name not in image:
            return None
        self._handles += 1
        self._functions[self._handles] = (k, module)
        return self._handles

    def function_ok(self, fn) -> bool:
        """Whether ``fn`` is a function of a module still loaded (the driver answers an invalid handle otherwise)."""
        entry = self._functions.get(fn)
        return entry is not None and entry[1] in self._modules

    def launch(self, fn, gx, gy, gz, bx, by, bz, params) -> str | None:
        """Run function ``fn``'s OpenCL twin over ``gx`` blocks of ``bx`` threads with the arguments at ``params``;
        None when queued, else why the real API refuses the launch: ``"handle"`` for a function whose module was
        unloaded (or never was), ``"value"`` for a 2-D or 3-D launch, a work-group kernel's block not of its size, or
        a grid that does not cover the kernel's items."""
        if not self.function_ok(fn):
            return "handle"
        k, module = self._functions[fn]
        if (gy, gz, by, bz) != (1, 1, 1, 1):
            return "value"
        if k.local and bx != k.local:
            return "value"  # a work-group kernel runs in blocks of exactly its size
        c_types = [ctypes.c_uint64] * (len(k.bufs) + (1 if k.can_raise else 0)) + [
            SCALAR_CTYPES[CUDARenderer().scalar_type(s.dtype)] for s in k.scalars]
        slots = (ctypes.c_void_p * len(c_types)).from_address(int(params)) if c_types else []
        values = [t.from_address(slots[i]).value for i, t in enumerate(c_types)]  # read now, as the driver does
        if gx * bx < _items(k, values):
            return "value"  # the grid does not cover the kernel's items
        self.launches += 1
        self.enqueue(lambda: self._run(k, module, gx, bx, values), fn)
        return None

    def _run(self, k, module, gx: int, bx: int, values: list) -> None:
        """A queued launch, running (its module must still be loaded: the runtime waits for the stream before it
        unloads one)."""
        from tensorwire.backends.codegen.opencl import OpenCLRenderer
        from tensorwire.backends.opencl.runtime import SCALAR_TYPES

        if module not in self._modules:
            raise RuntimeError(f"kernel {k.name} ran after its module {module} was unloaded (stand-in): the stream "
                               "still held its launch when the module went")

        dev = self.opencl()
        cl, rt = dev.cl, dev.runtime
        key = rt._key(k)
        rt._ensure([k], [key], 1)
        knl = rt._kernels[key][0]
        mf = cl.mem_flags
        copies, alive = [], []  # (an argument's memory object must outlive the launch: set_arg does not hold it)
        outs = [b.out for b in k.bufs] + ([True] if k.can_raise else [])
        ptrs = [int(v) for v in values[:len(outs)]]
        for i, out in enumerate(outs):
            # the memory the kernel may touch through this pointer: up to the next argument's or its allocation's end
            # (the driver knows no sizes: a kernel built for one shape runs on others, shape-generic kernels)
            n = self.extent(ptrs[i], ptrs) if ptrs[i] else 0
            host = self.view(ptrs[i], n) if n else np.zeros(1, np.uint8)
            buf = cl.Buffer(dev.ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=np.ascontiguousarray(host))
            knl.set_arg(i, buf)
            alive.append(buf)
            if out and n:
                copies.append((host, buf))
        ocl = OpenCLRenderer()
        first = len(outs)
        for j, s in enumerate(k.scalars):
            knl.set_arg(first + j, SCALAR_TYPES[ocl.scalar_type(s.dtype)](values[first + j]))
        cl.enqueue_nd_range_kernel(dev.queue, knl, (gx * bx,), (bx,))
        for host, buf in copies:
            cl.enqueue_copy(dev.queue, host, buf)
        dev.queue.finish()
        del alive


def _items(k, values: list) -> int:
    """The items a launch of ``k`` with arguments ``values`` covers: its grid, or for a shape-generic kernel (one whose
    ``grid_var`` names the scalar bounding its items) that scalar's value."""
    name = getattr(k, "grid_var", None)
    names = [s.name for s in k.scalars]
    if name and name in names:
        return int(values[len(values) - len(names) + names.index(name)])
    return k.grid


class StandInBlas:
    """The backends' BLAS ``gemm`` (:class:`~tensorwire.backends.cuda.cublas.Cublas`,
    :class:`~tensorwire.backends.rocm.hipblas.HipBlas`) on a stand-in's memory, with numpy."""

    def __init__(self, gpu: StandInGPU, stream: int):
        self.gpu, self.stream = gpu, stream
        self.calls = 0
        self.workspace: tuple[int, int] | None = None

    def set_workspace(self, ptr: int, nbytes: int) -> None:
        """``cublasSetWorkspace``: the library's workspace is the caller's memory from now on."""
        self.gpu.view(ptr, nbytes)
        self.workspace = (ptr, nbytes)

    def _matrix(self, ptr: int, rows: int, cols: int, ld: int, dt: np.dtype) -> np.ndarray:
        """The column-major ``rows x cols`` matrix at ``ptr`` with leading dimension ``ld``."""
        size = dt.itemsize
        span = ((cols - 1) * ld + rows) * size
        raw = self.gpu.view(ptr, span)
        return np.ndarray((rows, cols), dt, buffer=raw, strides=(size, ld * size))

    def gemm(self, dtype, m, n, k, a, lda, stride_a, b, ldb, stride_b, c, ldc, stride_c, batch) -> None:
        if not self.gpu.thread_ok():  # the handle's GPU is not the calling thread's: the library fails the call
            raise DeviceError("BLAS gemm failed: the handle's GPU is not current on the calling thread (stand-in)")
        if self.gpu.capture is not None and self.workspace is None:
            # without a workspace of the caller's the library allocates one: refused during a capture
            self.gpu.capture.invalid = True
            raise DeviceError("BLAS gemm failed: it allocates its workspace during a stream capture; set one with "
                              "cublasSetWorkspace first (stand-in)")
        self.calls += 1
        assert lda >= m and ldb >= k and ldc >= m, (lda, ldb, ldc, m, n, k)
        self.gpu.enqueue(lambda: self._gemm(dtype, m, n, k, a, lda, stride_a, b, ldb, stride_b, c, ldc, stride_c,
                                            batch))  # (queued on the stream, as the library does)

    def _gemm(self, dtype, m, n, k, a, lda, stride_a, b, ldb, stride_b, c, ldc, stride_c, batch) -> None:
        dt = dtype.np
        acc = np.float64 if dtype is D.float64 else np.float32
        size = dt.itemsize
        for i in range(batch):
            A = self._matrix(a + i * stride_a * size, m, k, lda, dt).astype(acc)
            B = self._matrix(b + i * stride_b * size, k, n, ldb, dt).astype(acc)
            self._matrix(c + i * stride_c * size, m, n, ldc, dt)[:] = (A @ B).astype(dt)

    def close(self) -> None:
        pass


_REGISTRIES: list[dict] = [{}]


def hook_renderer(gpu: StandInGPU) -> None:
    """Make every kernel the CUDA (or HIP) renderer renders from now on findable by name in ``gpu.registry``."""
    record_renders(CUDARenderer, _REGISTRIES)
    _REGISTRIES.append(gpu.registry)
