"""What the CUDA and ROCm backends share: device memory, pinned staging, kernels on a stream, BLAS matmul.

CUDA's driver API and HIP are the same API spelled twice (``cuMemAlloc``/``hipMalloc``,
``cuModuleLoadData``/``hipModuleLoadData``, ``cuLaunchKernel``/``hipModuleLaunchKernel`` ...), and their Python
bindings (cuda-python, hip-python) share one convention: every call returns a tuple ``(error, *values)`` whose error
is an enum member that is 0 on success. So the logic lives here once, over a small :class:`DriverApi` that each
backend fills with its own column of :data:`SPELLINGS` and :data:`ENUM_SPELLINGS` (the two APIs' names side by
side); the backends keep only what differs (how a GPU is described and made current, the compiler and its target,
the BLAS library):

* :class:`DriverApi`: the calls, by role, of one binding module (:meth:`DriverApi.check` turns a result tuple into
  its values or a :class:`DriverError`), and discovery over them (:meth:`DriverApi.discover`: init, count, each
  GPU; the reason when there is none).
* :class:`GPUBuffer`: a block of :class:`~.gpu_allocator.CachingAllocator` holding one tensor; it returns its block
  when the last reference drops.
* :class:`GPURuntime`: one GPU's stream, memory (caching allocator; uploads and downloads through reused pinned
  staging blocks, queued on the stream), kernels (compiled by the subclass's :meth:`GPURuntime.compile`, loaded
  once per process by :class:`~.compiled_device.KernelModules` and unloaded once neither its cache nor a launcher
  holds them, launched on the stream) and the kernel error slot.
* :class:`GPUDevice`: the :class:`~.compiled_device.CompiledDevice` over a runtime, with matmul on the runtime's
  BLAS (a strided-batched gemm with the same arguments in cuBLAS and hipBLAS) or a compiled kernel; where the driver
  captures graphs (:attr:`DriverApi.GRAPHS`), a plan's runner replays as graphs once warm (:mod:`.gpu_graphs`).
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import math
import os
import threading
from types import SimpleNamespace

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import ConfigurationError, DeviceError

from .base import Step
from .codegen.cache import KernelCompileError
from .codegen.lower import lower
from .codegen.presets import CUDA_GPU, CUDA_GPU_BLAS
from .codegen.program import build_runner
from .compiled_device import CompiledDevice, Found, KernelModules, load_binding, refuse_complex
from .gpu_allocator import CachingAllocator, DriverOutOfMemory, GPUBuffer, size_class
from .gpu_graphs import BLAS_WORKSPACE, GraphedRunner, GraphStats
from .gpu_graphs import enabled as graphs_enabled
from .kernel_errors import ErrorSlots

log = logging.getLogger("tensorwire.gpu")

#: the bytes of its output an elementwise GPU thread computes, with vector loads and stores where its inputs allow
#: (:mod:`.codegen.lanes`); ``TENSORWIRE_GPU_LANE_BYTES`` sets it: ``0`` for one element a thread, as before
LANE_ENV = "TENSORWIRE_GPU_LANE_BYTES"


def _lane_bytes() -> int:
    raw = os.environ.get(LANE_ENV, "").strip()
    if not raw:
        return CUDA_GPU.lane_bytes
    if not raw.isdigit() or int(raw) not in (0, 4, 8, 16, 32):
        raise ConfigurationError(f"{LANE_ENV}={raw!r}: expected 0 (one element a thread) or 4, 8, 16 or 32 bytes")
    return int(raw)


LANE_BYTES = _lane_bytes()

#: how the kernel compiler lowers for a GPU with a BLAS (matmul a host step that calls it; see
#: :mod:`.codegen.presets`)
LOWERING_BLAS = dataclasses.replace(CUDA_GPU_BLAS, lane_bytes=LANE_BYTES)
#: the same with matmul as a compiled kernel (integer and bool matmuls, or no BLAS)
LOWERING_KERNELS = dataclasses.replace(CUDA_GPU, lane_bytes=LANE_BYTES)

#: threads per block for kernels that do not fix their work-group size
BLOCK = 256
#: the largest piece an upload or download stages through pinned memory at once
STAGING_CHUNK = 16 << 20
#: pinned staging memory kept for reuse, at most
STAGING_LIMIT = 256 << 20

#: the ctypes type of a kernel scalar parameter, by its C type (CUDA's and HIP's renderers' ``scalar_type``)
SCALAR_CTYPES = {"unsigned char": ctypes.c_uint8, "signed char": ctypes.c_int8, "short": ctypes.c_int16,
                 "int": ctypes.c_int32, "long long": ctypes.c_int64, "float": ctypes.c_float,
                 "double": ctypes.c_double}


class DriverError(DeviceError):
    """A driver call failed (the message names the call and the driver's error)."""


# -- the driver interface -------------------------------------------------------------------------------------------

def check_result(what: str, result, ok, error_text):
    """The values of a driver call's result tuple ``(error, *values)`` (one value alone, else a tuple), or
    :class:`DriverError` naming ``what`` when ``error`` is not ``ok`` (``error_text(error)`` describes it)."""
    err = result[0]
    if err != ok:
        raise DriverError(f"{what} failed ({error_text(err)})")
    return result[1] if len(result) == 2 else result[1:]


def c_text(value) -> str:
    """A C string from a binding (``bytes``, hip-python's ``CStr``, or ``str``) as ``str``, up to its first NUL."""
    if hasattr(value, "decode"):
        try:
            value = value.decode(errors="replace")
        except TypeError:  # CStr.decode takes no keyword
            value = value.decode()
    return str(value).split("\0", 1)[0].strip()


#: each driver role's function in CUDA's driver API and in HIP, the same API spelled twice (the same arguments in
#: both; None where the HIP runtime does not use the role): ``init``, ``device_count`` and ``error_string`` serve
#: discovery and messages, the rest the runtime and (CUDA only, so far) graph capture (:mod:`.gpu_graphs`)
SPELLINGS = {
    "init": ("cuInit", "hipInit"), "device_count": ("cuDeviceGetCount", "hipGetDeviceCount"),
    "error_string": ("cuGetErrorString", "hipGetErrorString"),
    "stream_create": ("cuStreamCreate", "hipStreamCreateWithFlags"),
    "stream_synchronize": ("cuStreamSynchronize", "hipStreamSynchronize"), "alloc": ("cuMemAlloc", "hipMalloc"),
    "free": ("cuMemFree", "hipFree"), "host_alloc": ("cuMemHostAlloc", "hipHostMalloc"),
    "host_free": ("cuMemFreeHost", "hipHostFree"), "copy_htod_async": ("cuMemcpyHtoDAsync", "hipMemcpyHtoDAsync"),
    "copy_dtoh_async": ("cuMemcpyDtoHAsync", "hipMemcpyDtoHAsync"), "copy_dtod_async": ("cuMemcpyDtoDAsync", None),
    "memset_async": ("cuMemsetD8Async", "hipMemsetD8Async"),
    "event_create": ("cuEventCreate", "hipEventCreateWithFlags"), "event_record": ("cuEventRecord", "hipEventRecord"),
    "event_query": ("cuEventQuery", "hipEventQuery"),
    "event_synchronize": ("cuEventSynchronize", "hipEventSynchronize"),
    "event_destroy": ("cuEventDestroy", "hipEventDestroy"), "module_load": ("cuModuleLoadData", "hipModuleLoadData"),
    "module_unload": ("cuModuleUnload", "hipModuleUnload"),
    "module_function": ("cuModuleGetFunction", "hipModuleGetFunction"),
    "function_attribute": ("cuFuncGetAttribute", "hipFuncGetAttribute"),
    "launch": ("cuLaunchKernel", "hipModuleLaunchKernel"), "begin_capture": ("cuStreamBeginCapture", None),
    "end_capture": ("cuStreamEndCapture", None), "graph_instantiate": ("cuGraphInstantiate", None),
    "graph_launch": ("cuGraphLaunch", None), "graph_exec_destroy": ("cuGraphExecDestroy", None),
    "graph_destroy": ("cuGraphDestroy", None), "exchange_capture_mode": ("cuThreadExchangeStreamCaptureMode", None),
}
#: the enum members the calls need, by role, in the same two spellings (dotted paths in the binding module)
ENUM_SPELLINGS = {
    "success": ("CUresult.CUDA_SUCCESS", "hipError_t.hipSuccess"),
    "out_of_memory": ("CUresult.CUDA_ERROR_OUT_OF_MEMORY", "hipError_t.hipErrorOutOfMemory"),
    "stream_flags": ("CUstream_flags.CU_STREAM_NON_BLOCKING", "hipStreamNonBlocking"),
    "event_flags": ("CUevent_flags.CU_EVENT_DISABLE_TIMING", "hipEventDisableTiming"),
    "max_threads": ("CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK",
                    "hipFunction_attribute.HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK"),
    "capture_thread_local": ("CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL", None),
    "capture_relaxed": ("CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED", None),
}
#: the column of :data:`SPELLINGS` and :data:`ENUM_SPELLINGS` each API reads
CUDA_SPELLING, HIP_SPELLING = 0, 1


def spelled(table: dict[str, tuple], column: int) -> dict[str, str]:
    """``{role: name}`` of one API's column of a spelling table (the roles it has)."""
    return {role: names[column] for role, names in table.items() if names[column] is not None}


class DriverApi:
    """The driver calls :class:`GPURuntime` and discovery make, by role, bound to one binding module (``mod``).

    The logic is written once here; a subclass gives only what its API spells differently: each role's function in
    :attr:`CALLS` (same arguments in CUDA and HIP), the enum members the calls need in :attr:`ENUMS`, the runtime's
    name in discovery's reasons (:attr:`RUNTIME`), how a GPU is described (:meth:`gpu`), made current
    (:meth:`make_current`) and bound to a thread (:meth:`bind`), and the ``extra`` argument of a launch.
    """

    #: role -> the binding's function name (the API's column of :data:`SPELLINGS`)
    CALLS: dict[str, str] = {}
    #: role -> the binding's enum member, a dotted path in the module (the API's column of :data:`ENUM_SPELLINGS`)
    ENUMS: dict[str, str] = {}
    #: the runtime as discovery's reasons name it ("the CUDA driver")
    RUNTIME = ""
    #: what a launch passes as ``extra`` (no packed arguments)
    LAUNCH_EXTRA: object = None
    #: whether plans are captured as graphs (:mod:`.gpu_graphs`): the roles ``begin_capture``, ``end_capture``,
    #: ``graph_instantiate``, ``graph_launch``, ``graph_exec_destroy``, ``graph_destroy``,
    #: ``exchange_capture_mode`` and ``copy_dtod_async``, and :meth:`capture_mode_thread_local` /
    #: :meth:`capture_mode_relaxed`
    GRAPHS = False

    def __init__(self, mod):
        self.mod = mod
        for role, name in self.CALLS.items():
            setattr(self, role, getattr(mod, name))
        self.ok = self.success()
        self.oom = self.out_of_memory()

    def enum(self, role: str):
        """The binding's enum member :attr:`ENUMS` names for ``role``."""
        value = self.mod
        for name in self.ENUMS[role].split("."):
            value = getattr(value, name)
        return value

    def success(self):
        return self.enum("success")

    def out_of_memory(self):
        return self.enum("out_of_memory")

    def stream_flags(self) -> int:
        return int(self.enum("stream_flags"))

    def event_flags(self) -> int:
        return int(self.enum("event_flags"))

    def max_threads_attribute(self):
        return self.enum("max_threads")

    def capture_mode_thread_local(self):
        """The capture mode in which the capturing thread may make no call that is unsafe during a capture."""
        return self.enum("capture_thread_local")

    def capture_mode_relaxed(self):
        """The capture mode in which such calls (an allocation) are allowed."""
        return self.enum("capture_relaxed")

    def error_text(self, err) -> str:
        """``NAME: description`` of an error enum member (the name alone where the driver describes it no
        better)."""
        name = getattr(err, "name", str(err))
        try:
            e2, text = self.error_string(err)
            text = c_text(text) if e2 == self.ok else ""
        except Exception:  # noqa: BLE001 - only for the message
            text = ""
        return f"{name}: {text}" if text and text != name else name

    def make_current(self, gpu) -> object:
        """Open ``gpu``'s context and make it the calling thread's; returns what keeps the context (or None)."""
        raise NotImplementedError

    def bind(self, gpu, ctx) -> None:
        """Make ``gpu`` (its context ``ctx``, from :meth:`make_current`) current on the calling thread. The driver
        keeps the current context (CUDA) or device (HIP) per thread, so every thread that calls the driver for this
        GPU does this first (see :class:`ThreadBinding`)."""
        raise NotImplementedError

    def check(self, what: str, result):
        """The values of a call's result tuple ``(error, *values)``, or :class:`DriverError` naming ``what``."""
        return check_result(what, result, self.ok, self.error_text)

    def call(self, role: str, *args):
        """Call ``role`` and :meth:`check` its result."""
        return self.check(self.CALLS[role], getattr(self, role)(*args))

    # discovery --------------------------------------------------------------------------------------------------
    def init_failed(self, err) -> str:
        """The reason there are no GPUs when the ``init`` call returned the error ``err``."""
        return f"{self.CALLS['init']} failed ({self.error_text(err)})"

    def gpus(self) -> list:
        """The GPUs the driver lists, each as :meth:`gpu` describes it (raises :class:`DriverError`)."""
        return [self.gpu(i) for i in range(int(self.call("device_count")))]

    def gpu(self, index: int):
        """GPU ``index`` as discovery records it (``index``, ``name``, ``memory_bytes`` and what the runtime needs)."""
        raise NotImplementedError

    @classmethod
    def discover(cls, load, binding: str, install: str) -> Found:
        """This host's GPUs through the binding ``load()`` imports (``binding``, installed as ``install`` says):
        the ``init`` call, then :meth:`gpus`; without the binding, the driver or a GPU, the reason is the error the
        binding or the driver gave."""
        mod, missing = load_binding(load, binding, install)
        if missing is not None:
            return missing
        try:
            (err,) = getattr(mod, cls.CALLS["init"])(0)
        except Exception as e:  # noqa: BLE001 - no driver library: the loader's error, whatever its type
            return Found.failed(f"{cls.RUNTIME} is not available", e)
        api = cls(mod)
        if err != api.ok:
            return Found([], api.init_failed(err))
        try:
            gpus = api.gpus()
        except DriverError as e:
            return Found([], str(e))
        if not gpus:
            return Found([], f"{cls.RUNTIME} reports no GPU ({cls.CALLS['device_count']} = 0)")
        return Found(gpus, "", mod)


class ThreadBinding:
    """``with rt.bound:``: the runtime's lock, held, and its GPU current on the calling thread.

    The worker calls a runtime from its main thread and from its pool's threads (a large batch runs on the pool,
    see :mod:`.jobs`), and from wherever the last reference to a buffer drops. The driver keeps the current context
    (``cuCtxSetCurrent``) or device (``hipSetDevice``) per thread, so a thread's first call binds it (once per
    thread); and the runtime's state (the allocator's free lists, the launchers' argument storage, the kernel error
    slot, the staging blocks) is one per GPU, so the calls hold one re-entrant lock. A kernel launch and the read of
    its error slot happen under one hold, so a thread never reads another's error."""

    __slots__ = ("lock", "_local", "_bind")

    def __init__(self, bind):
        self.lock = threading.RLock()
        self._local = threading.local()
        self._bind = bind

    def mark_bound(self) -> None:
        """The calling thread has the GPU current already (the thread that opened it)."""
        self._local.bound = True

    def __enter__(self):
        self.lock.acquire()
        if not getattr(self._local, "bound", False):
            try:
                self._bind()
            except BaseException:
                self.lock.release()
                raise
            self._local.bound = True
        return self

    def __exit__(self, *exc) -> bool:
        self.lock.release()
        return False


# -- the runtime ----------------------------------------------------------------------------------------------------

class GPURuntime(KernelModules):
    """One GPU's stream, memory, kernels and BLAS handle. Calls may come from any thread: each public method (and
    each launcher, and the allocator) holds :attr:`bound`, a :class:`ThreadBinding` that makes the GPU current on
    the calling thread and keeps the calls of different threads apart.

    A subclass sets ``target``, ``renderer`` and ``cache`` (a :class:`~.codegen.cache.KernelCache`) before calling
    ``__init__``, and implements :meth:`compile`. ``gpu`` needs ``index``, ``name`` and ``memory_bytes``;
    ``blas_loader(stream)`` returns the BLAS (raising :class:`DeviceError` when it is not installed) and
    ``blas_supports(dtype)`` says which dtypes it multiplies."""

    target = ""
    #: the source file extension the kernel cache stores
    source_suffix = ".cu"
    image_suffix = ".bin"
    #: modules are unloaded once no kernel of theirs is cached or held by a launcher (``cuModuleUnload``)
    UNLOADS = True
    #: NVRTC and hipRTC (or clang) compile a prebuild's modules on several threads at once
    PARALLEL_COMPILE = True

    def __init__(self, api: DriverApi, gpu, blas_loader, blas_supports):
        super().__init__()
        self.api, self.gpu = api, gpu
        self.label = f"{self.target}:{gpu.index}"
        self.ctx = api.make_current(gpu)
        self.bound = ThreadBinding(lambda: api.bind(gpu, self.ctx))
        self.bound.mark_bound()
        self.guard = self.bound
        self.stream = api.call("stream_create", api.stream_flags())
        self.pool = CachingAllocator(self._driver_alloc, self._driver_free, self.synchronize,
                                     f"{self.label} ({gpu.name})", guard=self.bound)
        self._staging_free: dict[int, list[int]] = {}
        self._staging_busy: list = []  # (event, host pointer, size) of copies still in flight
        self._staging_bytes = 0
        self.errors = ErrorSlots(self._error_blocks)
        #: the graph capture in progress on the stream (:class:`~.gpu_graphs.Capture`), None when there is none
        self.capturing = None
        self.graph_stats = GraphStats()
        self._blas_workspace: GPUBuffer | None = None
        self.blas, self.blas_supports = None, blas_supports
        self.blas_why = ""
        try:
            self.blas = blas_loader(int(self.stream))
        except DeviceError as e:
            self.blas_why = str(e)
            log.warning("%s: matmul runs as compiled kernels: %s", self.label, e)

    # memory -------------------------------------------------------------------------------------------
    def _driver_alloc(self, size: int) -> int:
        api = self.api
        if self.my_capture() is not None:  # (as PyTorch's allocator: allowed while the thread captures, relaxed)
            old = api.call("exchange_capture_mode", api.capture_mode_relaxed())
            try:
                result = api.alloc(size)
            finally:
                api.call("exchange_capture_mode", old)
        else:
            result = api.alloc(size)
        if result[0] == api.oom:
            raise DriverOutOfMemory(api.error_text(result[0]))
        return int(api.check(f"{api.CALLS['alloc']}({size})", result))

    def _driver_free(self, ptr: int) -> None:
        self.api.call("free", ptr)

    def empty(self, shape, dtype: D.DType) -> GPUBuffer:
        shape = tuple(int(n) for n in shape)
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes == 0:
            return GPUBuffer(0, 0, shape, dtype, 0, None)
        ptr, size = self.pool.malloc(nbytes)
        buf = GPUBuffer(ptr, size, shape, dtype, nbytes, self.pool)
        cap = self.my_capture()
        if cap is not None:  # the graph being captured addresses it: the graph holds it
            cap.buffers.append(buf)
        return buf

    def _pinned(self, size: int) -> int:
        return int(self.api.call("host_alloc", size, 0))

    def _staging(self, nbytes: int) -> tuple[int, int]:
        """A pinned block of at least ``nbytes`` (at most :data:`STAGING_CHUNK`) no queued copy still uses."""
        size = size_class(nbytes)
        self._reclaim(wait=False)
        free = self._staging_free.get(size)
        if not free and self._staging_bytes + size > STAGING_LIMIT and self._staging_busy:
            self._reclaim(wait=True)
            free = self._staging_free.get(size)
        if free:
            return free.pop(), size
        if self._staging_bytes + size > STAGING_LIMIT:  # blocks of other sizes: give them back
            for s, ptrs in self._staging_free.items():
                for p in ptrs:
                    self.api.call("host_free", p)
                    self._staging_bytes -= s
            self._staging_free.clear()
        self._staging_bytes += size
        return self._pinned(size), size

    def _reclaim(self, wait: bool) -> None:
        api, keep = self.api, []
        for ev, ptr, size in self._staging_busy:
            done = wait or api.event_query(ev)[0] == api.ok
            if done:
                if wait:
                    api.call("event_synchronize", ev)
                api.call("event_destroy", ev)
                self._staging_free.setdefault(size, []).append(ptr)
            else:
                keep.append((ev, ptr, size))
        self._staging_busy = keep

    def upload(self, host: np.ndarray) -> GPUBuffer:
        """A buffer holding the C-contiguous array ``host``; the copy is queued (the host array may change after)."""
        api = self.api
        with self.bound:
            buf = self.empty(host.shape, D.from_numpy(host.dtype))
            src = host.ctypes.data
            for start in range(0, buf.nbytes, STAGING_CHUNK):
                n = min(STAGING_CHUNK, buf.nbytes - start)
                ptr, size = self._staging(n)
                ctypes.memmove(ptr, src + start, n)
                api.call("copy_htod_async", buf.ptr + start, ptr, n, self.stream)
                ev = api.call("event_create", api.event_flags())
                api.call("event_record", ev, self.stream)
                self._staging_busy.append((ev, ptr, size))
        return buf

    def download(self, buf: GPUBuffer) -> np.ndarray:
        """The buffer's contents (waits for the work queued before)."""
        out = np.empty(buf.shape, buf.dtype.np)
        dst = out.ctypes.data
        with self.bound:
            for start in range(0, buf.nbytes, STAGING_CHUNK):
                n = min(STAGING_CHUNK, buf.nbytes - start)
                ptr, size = self._staging(n)
                try:
                    self.api.call("copy_dtoh_async", ptr, buf.ptr + start, n, self.stream)
                    self.synchronize()
                    ctypes.memmove(dst + start, ptr, n)
                finally:
                    self._staging_free.setdefault(size, []).append(ptr)
        return out

    def zero(self, buf: GPUBuffer) -> None:
        if buf.nbytes:
            with self.bound:
                self.api.call("memset_async", buf.ptr, 0, buf.nbytes, self.stream)
                self.captured_work()

    def my_capture(self):
        """The graph capture the calling thread has in progress on the stream (:class:`~.gpu_graphs.Capture`), or
        None."""
        cap = self.capturing
        return cap if cap is not None and cap.mine() else None

    def captured_work(self) -> None:
        """Note that the calling thread queued work a graph capture in progress holds (a segment is not empty)."""
        cap = self.my_capture()
        if cap is not None:
            cap.work = True

    def prepare_graphs(self) -> None:
        """What a graph capture needs first: cuBLAS's workspace of its own (so it allocates nothing during a
        capture; ``cublasSetWorkspace``, kept for the runtime's life)."""
        if self.blas is not None and self._blas_workspace is None:
            with self.bound:
                ws = self.empty((BLAS_WORKSPACE,), D.uint8)
                self.blas.set_workspace(ws.ptr, ws.nbytes)
                self._blas_workspace = ws

    def synchronize(self) -> None:
        with self.bound:
            self.api.call("stream_synchronize", self.stream)

    def memory(self) -> dict:
        with self.bound:
            out = self.pool.stats()
            out["total_bytes"] = self.gpu.memory_bytes
            out["pinned_staging_bytes"] = self._staging_bytes
        if self.api.GRAPHS:
            out["graphs"] = self.graph_stats.as_dict()
        return out

    # kernels ------------------------------------------------------------------------------------------
    def compile(self, source: str, kernels) -> bytes:
        """The code object (CUBIN, PTX, AMDGPU ELF ...) of ``source`` that the module loader takes, through the
        disk cache."""
        raise NotImplementedError

    def load_module(self, image: bytes, source: str, group: list) -> tuple:
        """``((module, image), {identity: (function, max threads per block)})``: the module loaded from ``image``
        (kept alive with it) and its kernels."""
        api = self.api
        with self.bound:
            module = api.call("module_load", image)
            attr = api.max_threads_attribute()
            made = {}
            for key, k in group:
                fn = api.call("module_function", module, k.name.encode())
                made[key] = (fn, int(api.call("function_attribute", attr, fn)))
        return (module, image), made

    def unload(self, handles: list) -> None:
        """Unload modules none of whose kernels is cached or held by a launcher (see
        :class:`~.compiled_device.KernelModules`), after the queued work that may still run their kernels."""
        with self.bound:
            self.synchronize()
            for module, _image in handles:
                self.api.call("module_unload", module)

    def launcher(self, k, fn, limit: int):
        api, stream = self.api, self.stream
        if k.local and k.local > limit:
            raise KernelCompileError(f"kernel {k.name} needs blocks of {k.local} threads; {self.gpu.name} runs at "
                                     f"most {limit} for it")
        block = k.local or min(BLOCK, limit)
        blocks = -(-k.grid // block)
        nbuf = len(k.bufs)
        params = [ctypes.c_uint64(0) for _ in range(nbuf)]
        err = ctypes.c_uint64(0)
        if k.can_raise:
            params.append(err)
        scalars = [SCALAR_CTYPES[self.renderer.scalar_type(s.dtype)]() for s in k.scalars]
        params += scalars
        argv = (ctypes.c_void_p * max(1, len(params)))(*[ctypes.addressof(p) for p in params])
        argv_ptr = ctypes.addressof(argv)
        bound, errors, slot_bytes = self.bound, self.errors, ErrorSlots.SLOT_BYTES
        launch_fn, ok, extra, what = api.launch, api.ok, api.LAUNCH_EXTRA, api.CALLS["launch"]

        def launch(bufs, values):
            if blocks == 0:
                return
            cap = self.my_capture()
            if cap is not None:  # captured, or made between two segments (gpu_graphs.Capture)
                cap.launch(go, k, bufs, values)
                return
            go(bufs, values)

        def go(bufs, values):
            with bound:  # the argument storage is the launcher's, the error slot the GPU's: one thread at a time
                for p, b in zip(params, bufs):
                    p.value = b.ptr
                for p, v in zip(scalars, values):
                    p.value = v
                if k.can_raise:  # its own error slot, read with the others at the run's end (check_errors)
                    err.value = errors.mine().device.ptr + slot_bytes * errors.take(k, self.check_errors)
                result = launch_fn(fn, blocks, 1, 1, block, 1, 1, 0, stream, argv_ptr, extra)
                if result[0] != ok:
                    api.check(what, result)
        launch.keep = go.keep = (params, argv)  # the argument storage lives as long as the launcher
        return launch

    def _error_blocks(self, nbytes: int) -> tuple:
        """A thread's error slots: a zeroed device block and the pinned block a check reads them into."""
        with self.bound:
            dev = self.empty((nbytes // 8,), D.int64)
            self.api.call("memset_async", dev.ptr, 0, nbytes, self.stream)
            return dev, self._pinned(nbytes)

    def check_errors(self) -> None:
        """Raise the first error of the kernels the calling thread launched since its last check (see
        :mod:`.kernel_errors`); this waits for the GPU when there are any."""
        errors = self.errors
        if not errors.pending():
            return
        if self.my_capture() is not None and len(errors.mine().kernels) < ErrorSlots.PER_THREAD:
            return  # the end of a captured run: each replay reads the graph's slots (a full set is read now, and
            # the driver refuses the wait during the capture: the plan then runs without a graph)
        with self.bound:
            errors.check(self._read_slots, self._zero_slots)

    def read_errors(self, slots, kernels: list):
        """``(slot, error)`` of the first of ``kernels`` (in launch order) whose error slot in ``slots`` (a
        :class:`~.kernel_errors.ThreadSlots`) holds an error, else None: copies the slots back and waits for the
        GPU."""
        return ErrorSlots.first_error(kernels, self._read_slots(slots, kernels))

    def _read_slots(self, slots, kernels: list):
        """The words of the error slots of ``kernels`` in ``slots``, copied back (waits for the GPU)."""
        self.api.call("copy_dtoh_async", slots.host, slots.device.ptr, ErrorSlots.SLOT_BYTES * len(kernels),
                      self.stream)
        self.synchronize()
        return (ctypes.c_int64 * (2 * len(kernels))).from_address(slots.host)

    def _zero_slots(self, slots, kernels: list) -> None:
        self.api.call("memset_async", slots.device.ptr, 0, ErrorSlots.SLOT_BYTES * len(kernels), self.stream)


# -- the device -----------------------------------------------------------------------------------------------------

class GPUDevice(CompiledDevice):
    """One GPU: buffers are :class:`GPUBuffer`; fragments run as fused kernels, matmuls on the runtime's BLAS.

    ``lowering`` lowers with matmul as a host step (BLAS), ``lowering_kernels`` with matmul as a compiled kernel
    (dtypes the BLAS lacks, or no BLAS)."""

    def __init__(self, backend, gpu, runtime: GPURuntime, lowering=LOWERING_BLAS, lowering_kernels=LOWERING_KERNELS):
        super().__init__(backend, gpu.index, runtime, lowering if runtime.blas is not None else lowering_kernels)
        self.gpu = gpu
        self._kernels_only = SimpleNamespace(runtime=runtime, lowering_options=lowering_kernels,
                                             host_call=self.host_call)

    def empty_cache(self) -> None:
        """Give cached blocks back to the driver (``torch.cuda.empty_cache``)."""
        self.runtime.pool.empty_cache()

    def runner(self, plan, keep):
        """The plan's fused runner (:func:`~.codegen.program.build_runner`), replayed as a graph once it has run a
        few times where the driver captures graphs (:mod:`.gpu_graphs`; not for plans with worker ops, whose
        ``const`` uploads each batch's own bytes, or transfers)."""
        refuse_complex(self, plan.program.steps)
        rt = self.runtime
        if (not rt.api.GRAPHS or not graphs_enabled() or getattr(plan, "worker_ops", False)
                or getattr(plan, "has_transfers", False)):
            return build_runner(self, plan, keep)
        lowered = lower(plan.program.steps, set(keep), self.lowering_options)
        return GraphedRunner(rt, build_runner(self, plan, keep, lowered), lowered)

    # running ------------------------------------------------------------------------------------------
    def host_call(self, step: Step):
        """A callable for a host step: matmul on the BLAS (a compiled kernel for dtypes it lacks), or the
        worker's own ops (``const``, ``hub_tensor``)."""
        rt = self.runtime
        if step.op == "matmul":
            if rt.blas is not None and rt.blas_supports(step.dtype) and all(m[1] == step.dtype for m in step.in_meta):
                return lambda args, dyn, frames: self._matmul(args[0], args[1], step.shape)
            return self._single_step(step, self._kernels_only)
        return super().host_call(step)

    def _single_step(self, step: Step, device):
        """``call(args, dyn, frames)`` running one step through ``device``'s lowering."""
        slots = list(dict.fromkeys(step.ins))
        st = Step(step.op, tuple(slots.index(x) for x in step.ins), dict(step.attrs), tuple(step.shape), step.dtype,
                  len(slots), 0, in_meta=step.in_meta)
        run = build_runner(device, SimpleNamespace(program=SimpleNamespace(steps=[st])), frozenset({len(slots)}))

        rt = self.runtime

        def call(args, dyn, frames):
            env = [args[step.ins.index(x)] for x in slots] + [None]
            cap = rt.my_capture()
            if cap is not None:  # its launches are not the plan's own: captured as they come
                cap.nested += 1
                try:
                    run(env, None, frames)
                finally:
                    cap.nested -= 1
            else:
                run(env, None, frames)
            return env[-1]
        return call

    def _matmul(self, a: GPUBuffer, b: GPUBuffer, shape) -> GPUBuffer:
        """``a @ b`` with numpy's broadcasting (1-D operands as torch) on the BLAS: one strided-batched gemm when
        the broadcast batch offsets of both operands are arithmetic progressions, else one gemm per batch."""
        rt = self.runtime
        with rt.bound:  # (cuBLAS queues on the stream of the calling thread's current context)
            rt.captured_work()
            return self._gemm(rt, a, b, shape)

    @staticmethod
    def _gemm(rt: GPURuntime, a: GPUBuffer, b: GPUBuffer, shape) -> GPUBuffer:
        out = rt.empty(shape, a.dtype)
        sa = a.shape if len(a.shape) >= 2 else (1, *a.shape)
        sb = b.shape if len(b.shape) >= 2 else (*b.shape, 1)
        m, k, n = sa[-2], sa[-1], sb[-1]
        if out.nbytes == 0:
            return out
        if k == 0:
            rt.zero(out)
            return out
        batch = np.broadcast_shapes(sa[:-2], sb[:-2])
        nb = math.prod(batch)
        ia = np.broadcast_to(np.arange(math.prod(sa[:-2])).reshape(sa[:-2]), batch).reshape(-1)
        ib = np.broadcast_to(np.arange(math.prod(sb[:-2])).reshape(sb[:-2]), batch).reshape(-1)
        size = a.dtype.itemsize
        # row-major C = A @ B is column-major C^T = B^T @ A^T: the BLAS's (m, n, k) = (n, m, k), operands swapped
        steps_a, steps_b = np.diff(ia), np.diff(ib)
        if nb == 1 or ((steps_a == steps_a[0]).all() and (steps_b == steps_b[0]).all()):
            da = int(steps_a[0]) if nb > 1 else 0
            db = int(steps_b[0]) if nb > 1 else 0
            rt.blas.gemm(a.dtype, n, m, k, b.ptr + int(ib[0]) * k * n * size, n, db * k * n,
                         a.ptr + int(ia[0]) * m * k * size, k, da * m * k, out.ptr, n, m * n, nb)
        else:
            for i in range(nb):
                rt.blas.gemm(a.dtype, n, m, k, b.ptr + int(ib[i]) * k * n * size, n, 0,
                             a.ptr + int(ia[i]) * m * k * size, k, 0, out.ptr + i * m * n * size, n, 0, 1)
        return out


__all__ = ["BLOCK", "CUDA_SPELLING", "ENUM_SPELLINGS", "HIP_SPELLING", "LOWERING_BLAS", "LOWERING_KERNELS",
           "SPELLINGS", "STAGING_CHUNK", "STAGING_LIMIT", "DriverApi", "DriverError", "GPUBuffer", "GPUDevice",
           "GPURuntime", "ThreadBinding", "c_text", "check_result", "spelled"]
