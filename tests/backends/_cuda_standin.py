"""A stand-in for the CUDA driver API and cuBLAS, for running the CUDA backend's host code without a GPU.

:class:`StandInDriver` answers the ``cu*`` calls the backend makes (discovery, contexts, streams, events, memory,
copies, module load, launch) with cuda-python's own result conventions and enums (``cuda.bindings.driver``'s
``CUresult`` ... are imported; no driver is loaded for that). It is a thin front over ``_gpu_standin.StandInGPU``,
which it shares with the HIP stand-in: device memory in host arrays at made-up addresses, and each launch run as the
kernel's OpenCL twin on PoCL (after checking the function is in the image NVRTC really made: a CUBIN or PTX, and that
its module was not unloaded: ``CUDA_ERROR_INVALID_HANDLE`` then).
cuBLAS is ``_gpu_standin.StandInBlas`` (numpy).

Stream capture (graphs) follows the driver's rules (see ``_gpu_standin``): ``cuStreamSynchronize`` of the captured
stream fails with ``CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED``, as do ``cuMemAlloc``/``cuMemFree``/pinned allocations
by a thread whose capture mode is not relaxed, and either invalidates the capture (further queued work then fails
with ``CUDA_ERROR_STREAM_CAPTURE_INVALIDATED``, and so does ``cuStreamEndCapture``); a wait on an event recorded
during the capture fails with ``CUDA_ERROR_CAPTURED_EVENT``.

As the driver does, it keeps the current context per thread (``cuCtxSetCurrent`` binds it to the calling thread
only): a call that needs a context, made from a thread that has none, fails with ``CUDA_ERROR_INVALID_CONTEXT``
(and the cuBLAS stand-in refuses such a thread too).

The backend does not know about any of this: :func:`install` replaces ``runtime.load_driver`` and
``runtime.load_blas``, the two functions through which the backend reaches the driver and cuBLAS.
``python tests/backends/_cuda_standin.py worker --device cuda:0 --dispatcher ADDR`` runs a worker process with the
stand-ins installed (for tests on a real cluster); ``cuda:1`` gets a stand-in driver with two GPUs, and the NCCL
stand-in (``_nccl_standin.py``) lets two such workers run collectives over "NCCL" with each other.
"""

from __future__ import annotations

import functools
import os
import sys
import threading

from cuda.bindings import driver as _real  # enums only; importing does not load libcuda

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from tests.backends._gpu_standin import StandInBlas, StandInGPU, hook_renderer  # noqa: E402

OK = _real.CUresult.CUDA_SUCCESS
NO_CONTEXT = _real.CUresult.CUDA_ERROR_INVALID_CONTEXT
UNSUPPORTED = _real.CUresult.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
INVALIDATED = _real.CUresult.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED


def _stream_op(fn):
    """A call that queues work on the stream: refused once a refused call invalidated the stream's capture (until
    the capture ends), as the driver refuses every further capture of such a stream."""
    @functools.wraps(fn)
    def call(self, *args):
        if self.capture is not None and self.capture.invalid:
            self.count("invalidated capture")
            return (INVALIDATED,)
        return fn(self, *args)
    return call


def _unsafe(values: int = 0):
    """A call the driver refuses during a capture (an allocation or a free), unless the calling thread's capture
    mode is relaxed (:meth:`~tests.backends._gpu_standin.StandInGPU.unsafe_refused`)."""
    def wrap(fn):
        @functools.wraps(fn)
        def call(self, *args):
            if self.unsafe_refused():
                self.count(f"{fn.__name__} refused during a capture")
                return (UNSUPPORTED, *([None] * values))
            return fn(self, *args)
        return call
    return wrap


def _in_context(values: int = 0):
    """A driver call that needs a current context on the calling thread (``values``: what its result holds after
    the error), as every memory, stream, event, module and launch call of the driver API does."""
    def wrap(fn):
        @functools.wraps(fn)
        def call(self, *args):
            if getattr(self._thread, "ctx", None) is None:
                self.count("no context")
                return (NO_CONTEXT, *([None] * values))
            return fn(self, *args)
        return call
    return wrap


class StandInDriver(StandInGPU):
    """The driver API surface the CUDA backend calls, for ``gpus`` made-up GPUs of ``memory_bytes`` each."""

    CUresult = _real.CUresult
    CUdevice_attribute = _real.CUdevice_attribute
    CUstream_flags = _real.CUstream_flags
    CUevent_flags = _real.CUevent_flags
    CUfunction_attribute = _real.CUfunction_attribute
    CUstreamCaptureMode = _real.CUstreamCaptureMode
    CUstreamCaptureStatus = _real.CUstreamCaptureStatus

    def __init__(self, gpus: int = 1, name: str = "Stand-in GPU (PoCL)", capability=(8, 0),
                 memory_bytes: int = 1 << 30):
        super().__init__(gpus, name, memory_bytes)
        self.capability = capability
        self._thread = threading.local()  # the calling thread's current context (the driver's is per thread)
        self._captured_events: set = set()  # events last recorded while the stream was captured

    def thread_ok(self) -> bool:
        return getattr(self._thread, "ctx", None) is not None

    # -- errors, discovery, contexts, streams, events -----------------------------------------------------------
    def cuGetErrorString(self, err):
        return OK, f"stand-in: {getattr(err, 'name', err)}".encode()

    def cuInit(self, flags):
        self.initialised = True
        return (OK,)

    def cuDeviceGetCount(self):
        return OK, self.gpus

    def cuDeviceGet(self, i):
        if not 0 <= i < self.gpus:
            return _real.CUresult.CUDA_ERROR_INVALID_DEVICE, None
        return OK, i

    def cuDeviceGetName(self, length, dev):
        return OK, self.name.encode()[:length]

    def cuDeviceTotalMem(self, dev):
        return OK, self.memory_bytes

    def cuDeviceGetAttribute(self, attr, dev):
        a = self.CUdevice_attribute
        if attr == a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
            return OK, self.capability[0]
        if attr == a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
            return OK, self.capability[1]
        return _real.CUresult.CUDA_ERROR_INVALID_VALUE, 0

    def cuDevicePrimaryCtxRetain(self, dev):
        return OK, ("ctx", dev)

    def cuCtxSetCurrent(self, ctx):
        self._thread.ctx = ctx
        return (OK,)

    @_in_context(1)
    def cuStreamCreate(self, flags):
        return OK, 1

    @_in_context()
    def cuStreamSynchronize(self, stream):
        self.count("cuStreamSynchronize")
        if self.refuse_in_capture():  # a captured stream has nothing to wait for yet: refused, capture invalidated
            return (UNSUPPORTED,)
        self.drain()
        return (OK,)

    @_in_context(1)
    def cuEventCreate(self, flags):
        return OK, self.new_event()

    @_in_context()
    @_stream_op
    def cuEventRecord(self, ev, stream):
        if self.capture is not None:  # a node of the graph: nothing a host may wait for
            self._captured_events.add(ev)
            return (OK,)
        self._captured_events.discard(ev)
        self.record(ev)
        return (OK,)

    @_in_context()
    def cuEventQuery(self, ev):
        if ev in self._captured_events:
            return (_real.CUresult.CUDA_ERROR_CAPTURED_EVENT,)
        return (OK,) if self.event_ready(ev) else (_real.CUresult.CUDA_ERROR_NOT_READY,)

    @_in_context()
    def cuEventSynchronize(self, ev):
        if ev in self._captured_events:
            return (_real.CUresult.CUDA_ERROR_CAPTURED_EVENT,)
        self.event_wait(ev)
        return (OK,)

    @_in_context()
    def cuEventDestroy(self, ev):
        return (OK,)

    # -- memory ----------------------------------------------------------------------------------------------------
    @_in_context(1)
    @_unsafe(1)
    def cuMemAlloc(self, size):
        self.count("cuMemAlloc")
        ptr = self.alloc(size)
        return (_real.CUresult.CUDA_ERROR_OUT_OF_MEMORY, 0) if ptr is None else (OK, ptr)

    @_in_context()
    @_unsafe()
    def cuMemFree(self, ptr):
        self.count("cuMemFree")
        return (OK,) if self.free(ptr) else (_real.CUresult.CUDA_ERROR_INVALID_VALUE,)

    @_in_context(2)
    def cuMemGetInfo(self):
        return OK, self.memory_bytes - self.in_use(), self.memory_bytes

    @_in_context(1)
    @_unsafe(1)
    def cuMemHostAlloc(self, size, flags):
        return OK, self.host_alloc(size)

    @_in_context()
    @_unsafe()
    def cuMemFreeHost(self, ptr):
        self.host_free(ptr)
        return (OK,)

    @_in_context()
    @_stream_op
    def cuMemcpyHtoDAsync(self, dst, src, n, stream):
        self.count("cuMemcpyHtoDAsync")
        self.copy_htod(dst, src, n)
        return (OK,)

    @_in_context()
    @_stream_op
    def cuMemcpyDtoHAsync(self, dst, src, n, stream):
        self.count("cuMemcpyDtoHAsync")
        self.copy_dtoh(dst, src, n)
        return (OK,)

    @_in_context()
    @_stream_op
    def cuMemcpyDtoDAsync(self, dst, src, n, stream):
        self.copy_dtod(dst, src, n)
        return (OK,)

    @_in_context()
    @_stream_op
    def cuMemsetD8Async(self, ptr, value, n, stream):
        self.memset(ptr, value, n)
        return (OK,)

    # -- modules and launches --------------------------------------------------------------------------------------
    @_in_context(1)
    def cuModuleLoadData(self, image):
        self.count("cuModuleLoadData")
        image = bytes(image)
        if not (image.startswith(b"\x7fELF") or b".entry" in image):
            return _real.CUresult.CUDA_ERROR_INVALID_IMAGE, None
        return OK, self.load_module(image)

    @_in_context()
    def cuModuleUnload(self, hmod):
        self.count("cuModuleUnload")
        return (OK,) if self.unload_module(hmod) else (_real.CUresult.CUDA_ERROR_INVALID_VALUE,)

    @_in_context(1)
    def cuModuleGetFunction(self, module, name: bytes):
        h = self.function(module, name)
        return (_real.CUresult.CUDA_ERROR_NOT_FOUND, None) if h is None else (OK, h)

    @_in_context(1)
    def cuFuncGetAttribute(self, attr, fn):
        return OK, 1024

    @_in_context()
    @_stream_op
    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        self.count("cuLaunchKernel")
        if extra not in (0, None):
            return (_real.CUresult.CUDA_ERROR_INVALID_VALUE,)
        why = self.launch(fn, gx, gy, gz, bx, by, bz, params)
        if why == "handle":  # a function of an unloaded module
            return (_real.CUresult.CUDA_ERROR_INVALID_HANDLE,)
        return (OK,) if why is None else (_real.CUresult.CUDA_ERROR_INVALID_VALUE,)

    # -- graphs ------------------------------------------------------------------------------------------------------
    @_in_context()
    def cuStreamBeginCapture(self, stream, mode):
        self.count("cuStreamBeginCapture")
        if not self.begin_capture(int(mode)):
            return (_real.CUresult.CUDA_ERROR_ILLEGAL_STATE,)
        return (OK,)

    @_in_context(1)
    def cuStreamEndCapture(self, stream):
        self.count("cuStreamEndCapture")
        why, graph = self.end_capture()
        if why == "none":
            return _real.CUresult.CUDA_ERROR_ILLEGAL_STATE, None
        if why == "thread":
            return _real.CUresult.CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, None
        if why == "invalidated":
            return INVALIDATED, None
        return OK, graph

    @_in_context(1)
    def cuStreamIsCapturing(self, stream):
        st = self.CUstreamCaptureStatus
        if self.capture is None:
            return OK, st.CU_STREAM_CAPTURE_STATUS_NONE
        if self.capture.invalid:
            return OK, st.CU_STREAM_CAPTURE_STATUS_INVALIDATED
        return OK, st.CU_STREAM_CAPTURE_STATUS_ACTIVE

    def cuThreadExchangeStreamCaptureMode(self, mode):
        return OK, self.CUstreamCaptureMode(self.exchange_mode(int(mode)))

    @_in_context(1)
    def cuGraphInstantiate(self, graph, flags):
        self.count("cuGraphInstantiate")
        exe = self.instantiate(graph)
        return (_real.CUresult.CUDA_ERROR_INVALID_VALUE, None) if exe is None else (OK, exe)

    @_in_context()
    @_stream_op
    def cuGraphLaunch(self, exe, stream):
        self.count("cuGraphLaunch")
        why = self.launch_graph(exe)
        if why == "handle":  # a kernel node of a module unloaded since
            return (_real.CUresult.CUDA_ERROR_INVALID_HANDLE,)
        return (OK,) if why is None else (_real.CUresult.CUDA_ERROR_INVALID_VALUE,)

    @_in_context()
    def cuGraphExecDestroy(self, exe):
        self.count("cuGraphExecDestroy")
        return (OK,) if self.destroy_exec(exe) else (_real.CUresult.CUDA_ERROR_INVALID_VALUE,)

    @_in_context()
    def cuGraphDestroy(self, graph):
        self.count("cuGraphDestroy")
        return (OK,) if self.destroy_graph(graph) else (_real.CUresult.CUDA_ERROR_INVALID_VALUE,)


def install(runtime, nccl_fail_count: int | None = None, **config) -> StandInDriver:
    """Make the CUDA backend's ``runtime`` module reach a new :class:`StandInDriver` (and a
    :class:`~tests.backends._gpu_standin.StandInBlas`) instead of cuda-python's driver and cuBLAS, and its ``nccl``
    module the NCCL stand-in (``_nccl_standin.StandInNccl``, on this driver's memory); returns the driver. Discovery
    is redone at the next call."""
    from tensorwire.backends.cuda import nccl

    if __package__:
        from ._nccl_standin import StandInNccl
    else:  # run as a script (a stand-in worker): this folder is on sys.path
        from _nccl_standin import StandInNccl

    drv = StandInDriver(**config)
    runtime.load_driver = lambda: drv
    runtime.load_blas = lambda stream: StandInBlas(drv, stream)
    drv.nccl = StandInNccl(drv, fail_count=nccl_fail_count)
    nccl.load_nccl = lambda: drv.nccl
    runtime.discover.found = None
    hook_renderer(drv)
    return drv


def _worker(argv: list[str]) -> int:
    """A worker with the stand-ins installed: as many stand-in GPUs as ``--device cuda:N`` needs, and
    ``--standin-nccl-fail-count N`` (taken out of ``argv``) for the NCCL stand-in's injected failure."""
    from tensorwire.backends.cuda import runtime

    fail = None
    if "--standin-nccl-fail-count" in argv:
        i = argv.index("--standin-nccl-fail-count")
        fail = int(argv[i + 1])
        del argv[i:i + 2]
    device = argv[argv.index("--device") + 1] if "--device" in argv else "cuda:0"
    install(runtime, nccl_fail_count=fail, gpus=int(device.partition(":")[2] or 0) + 1)
    from tensorwire.cli import main

    return main(["worker", *argv])


if __name__ == "__main__":
    if sys.argv[1:2] != ["worker"]:
        raise SystemExit("usage: _cuda_standin.py worker --device cuda:0 --dispatcher ADDR [worker options]")
    sys.exit(_worker(sys.argv[2:]))
