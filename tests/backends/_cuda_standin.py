"""A stand-in for the CUDA driver API and cuBLAS, for running the CUDA backend's host code without a GPU.

:class:`StandInDriver` answers the ``cu*`` calls the backend makes (discovery, contexts, streams, events, memory,
copies, module load, launch) with cuda-python's own result conventions and enums (``cuda.bindings.driver``'s
``CUresult`` ... are imported; no driver is loaded for that). It is a thin front over ``_gpu_standin.StandInGPU``,
which it shares with the HIP stand-in: device memory in host arrays at made-up addresses, and each launch run as the
kernel's OpenCL twin on PoCL (after checking the function is in the image NVRTC really made: a CUBIN or PTX, and that
its module was not unloaded: ``CUDA_ERROR_INVALID_HANDLE`` then).
cuBLAS is ``_gpu_standin.StandInBlas`` (numpy).

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

    def __init__(self, gpus: int = 1, name: str = "Stand-in GPU (PoCL)", capability=(8, 0),
                 memory_bytes: int = 1 << 30):
        super().__init__(gpus, name, memory_bytes)
        self.capability = capability
        self._thread = threading.local()  # the calling thread's current context (the driver's is per thread)

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
        self.drain()
        return (OK,)

    @_in_context(1)
    def cuEventCreate(self, flags):
        return OK, self.new_event()

    @_in_context()
    def cuEventRecord(self, ev, stream):
        self.record(ev)
        return (OK,)

    @_in_context()
    def cuEventQuery(self, ev):
        return (OK,) if self.event_ready(ev) else (_real.CUresult.CUDA_ERROR_NOT_READY,)

    @_in_context()
    def cuEventSynchronize(self, ev):
        self.event_wait(ev)
        return (OK,)

    @_in_context()
    def cuEventDestroy(self, ev):
        return (OK,)

    # -- memory ----------------------------------------------------------------------------------------------------
    @_in_context(1)
    def cuMemAlloc(self, size):
        self.count("cuMemAlloc")
        ptr = self.alloc(size)
        return (_real.CUresult.CUDA_ERROR_OUT_OF_MEMORY, 0) if ptr is None else (OK, ptr)

    @_in_context()
    def cuMemFree(self, ptr):
        self.count("cuMemFree")
        return (OK,) if self.free(ptr) else (_real.CUresult.CUDA_ERROR_INVALID_VALUE,)

    @_in_context(2)
    def cuMemGetInfo(self):
        return OK, self.memory_bytes - self.in_use(), self.memory_bytes

    @_in_context(1)
    def cuMemHostAlloc(self, size, flags):
        return OK, self.host_alloc(size)

    @_in_context()
    def cuMemFreeHost(self, ptr):
        self.host_free(ptr)
        return (OK,)

    @_in_context()
    def cuMemcpyHtoDAsync(self, dst, src, n, stream):
        self.count("cuMemcpyHtoDAsync")
        self.copy_htod(dst, src, n)
        return (OK,)

    @_in_context()
    def cuMemcpyDtoHAsync(self, dst, src, n, stream):
        self.count("cuMemcpyDtoHAsync")
        self.copy_dtoh(dst, src, n)
        return (OK,)

    @_in_context()
    def cuMemcpyDtoDAsync(self, dst, src, n, stream):
        self.copy_dtod(dst, src, n)
        return (OK,)

    @_in_context()
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
    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        self.count("cuLaunchKernel")
        if extra not in (0, None):
            return (_real.CUresult.CUDA_ERROR_INVALID_VALUE,)
        why = self.launch(fn, gx, gy, gz, bx, by, bz, params)
        if why == "handle":  # a function of an unloaded module
            return (_real.CUresult.CUDA_ERROR_INVALID_HANDLE,)
        return (OK,) if why is None else (_real.CUresult.CUDA_ERROR_INVALID_VALUE,)


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
