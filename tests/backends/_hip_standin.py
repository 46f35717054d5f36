"""A stand-in for HIP and hipBLAS, for running the ROCm backend's host code without an AMD GPU.

:class:`StandInHip` answers the ``hip*`` calls the backend makes (discovery, device selection, streams, events,
memory, copies, module load, launch) with hip-python's own result conventions (a tuple ``(hipError_t, *values)``)
and enums (``hip.hip``'s ``hipError_t`` ... are imported; no ROCm runtime is loaded for that). It is a thin front over
``_gpu_standin.StandInGPU``, which it shares with the CUDA stand-in: device memory in host arrays at made-up
addresses, and each launch run as the kernel's OpenCL twin on PoCL, after checking that the image the backend loads
is an AMDGPU code object (ELF, ``e_machine`` 224) that holds the function. hipBLAS is ``_gpu_standin.StandInBlas``.

The backend does not know about any of this: :func:`install` replaces ``runtime.load_hip``, ``runtime.load_blas`` and
``runtime.blas_unavailable``, through which the backend reaches HIP and hipBLAS, and ``runtime.load_compiler``:
kernels are compiled by clang's HIP offload (a subprocess) because hipRTC's LLVM and PoCL's must not share a process
(docs/architecture.md). ``python tests/backends/_hip_standin.py worker --device rocm:0 --dispatcher ADDR`` runs a
worker process with the stand-in installed (for tests on a real cluster).

As the HIP runtime does, it keeps the current device per thread, device 0 on a thread that has not set one: a
stream, an allocation or a launch for the GPU the backend opened, made from a thread whose current device is
another, fails the test (the real runtime would quietly work on the other GPU).
"""

from __future__ import annotations

import os
import struct
import sys
import threading

from hip import hip as _real  # enums only; calling nothing loads no ROCm runtime

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from tests.backends._gpu_standin import StandInBlas, StandInGPU, hook_renderer  # noqa: E402

E = _real.hipError_t
OK = E.hipSuccess
EM_AMDGPU = 224


class hipDeviceProp_t:  # noqa: N801 - hip-python's name
    """The fields of ``hipDeviceProp_t`` the backend reads."""

    def __init__(self):
        self.name, self.gcnArchName, self.totalGlobalMem = b"", b"", 0


class StandInHip(StandInGPU):
    """The HIP API surface the ROCm backend calls, for ``gpus`` made-up GPUs of ``memory_bytes`` each."""

    hipError_t = E
    hipFunction_attribute = _real.hipFunction_attribute
    hipStreamNonBlocking = _real.hipStreamNonBlocking
    hipEventDisableTiming = _real.hipEventDisableTiming
    hipDeviceProp_t = hipDeviceProp_t

    def __init__(self, gpus: int = 1, name: str = "Stand-in AMD GPU (PoCL)", arch: str = "gfx90a:sramecc+:xnack-",
                 memory_bytes: int = 1 << 30):
        super().__init__(gpus, name, memory_bytes)
        self.arch = arch
        self._thread = threading.local()  # the calling thread's current device (the runtime's is per thread)
        self.opened = None  # the device the backend made its stream on

    @property
    def current(self) -> int:
        """The calling thread's current device (0 until it sets one, as in the HIP runtime)."""
        return getattr(self._thread, "device", 0)

    def thread_ok(self) -> bool:
        return self.opened is None or self.current == self.opened

    # -- errors, discovery, devices, streams, events ------------------------------------------------------------
    def hipGetErrorString(self, err):
        return OK, f"stand-in: {getattr(err, 'name', err)}"

    def hipInit(self, flags):
        self.initialised = True
        return (OK,)

    def hipGetDeviceCount(self):
        return OK, self.gpus

    def hipGetDeviceProperties(self, prop, i):
        if not 0 <= i < self.gpus:
            return (E.hipErrorInvalidDevice,)
        prop.name, prop.gcnArchName, prop.totalGlobalMem = self.name.encode(), self.arch.encode(), self.memory_bytes
        return (OK,)

    def hipSetDevice(self, i):
        if not 0 <= i < self.gpus:
            return (E.hipErrorInvalidDevice,)
        self._thread.device = i
        return (OK,)

    def _on_a_device(self):
        """A call for the GPU the backend opened: the calling thread must have it current (the real runtime would
        use the thread's own current device, 0 unless it set one)."""
        assert self.thread_ok(), (f"a HIP call for GPU {self.opened} from a thread whose current device is "
                                  f"{self.current} (hipSetDevice is per thread)")

    def hipStreamCreateWithFlags(self, flags):
        self.opened = self.current
        return OK, 1

    def hipStreamSynchronize(self, stream):
        self.count("hipStreamSynchronize")
        self.drain()
        return (OK,)

    def hipEventCreateWithFlags(self, flags):
        return OK, self.new_event()

    def hipEventRecord(self, ev, stream):
        self.record(ev)
        return (OK,)

    def hipEventQuery(self, ev):
        return (OK,) if self.event_ready(ev) else (E.hipErrorNotReady,)

    def hipEventSynchronize(self, ev):
        self.event_wait(ev)
        return (OK,)

    def hipEventDestroy(self, ev):
        return (OK,)

    # -- memory ----------------------------------------------------------------------------------------------------
    def hipMalloc(self, size):
        self.count("hipMalloc")
        self._on_a_device()
        ptr = self.alloc(size)
        return (E.hipErrorOutOfMemory, None) if ptr is None else (OK, ptr)

    def hipFree(self, ptr):
        self.count("hipFree")
        return (OK,) if self.free(ptr) else (E.hipErrorInvalidValue,)

    def hipHostMalloc(self, size, flags):
        return OK, self.host_alloc(size)

    def hipHostFree(self, ptr):
        self.host_free(ptr)
        return (OK,)

    def hipMemcpyHtoDAsync(self, dst, src, n, stream):
        self.count("hipMemcpyHtoDAsync")
        self._on_a_device()
        self.copy_htod(dst, src, n)
        return (OK,)

    def hipMemcpyDtoHAsync(self, dst, src, n, stream):
        self.count("hipMemcpyDtoHAsync")
        self.copy_dtoh(dst, src, n)
        return (OK,)

    def hipMemsetD8Async(self, ptr, value, n, stream):
        self.memset(ptr, value, n)
        return (OK,)

    # -- modules and launches --------------------------------------------------------------------------------------
    def hipModuleLoadData(self, image):
        self.count("hipModuleLoadData")
        self._on_a_device()
        image = bytes(image)
        if not image.startswith(b"\x7fELF") or struct.unpack_from("<H", image, 18)[0] != EM_AMDGPU:
            return E.hipErrorInvalidImage, None  # not an AMDGPU code object
        return OK, self.load_module(image)

    def hipModuleUnload(self, module):
        self.count("hipModuleUnload")
        self._on_a_device()
        return (OK,) if self.unload_module(module) else (E.hipErrorInvalidResourceHandle,)

    def hipModuleGetFunction(self, module, name: bytes):
        h = self.function(module, name)
        return (E.hipErrorNotFound, None) if h is None else (OK, h)

    def hipFuncGetAttribute(self, attr, fn):
        return OK, 1024

    def hipModuleLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        self.count("hipModuleLaunchKernel")
        self._on_a_device()
        if extra is not None:
            return (E.hipErrorInvalidValue,)
        why = self.launch(fn, gx, gy, gz, bx, by, bz, params)
        if why == "handle":  # a function of an unloaded module
            return (E.hipErrorInvalidResourceHandle,)
        return (OK,) if why is None else (E.hipErrorInvalidValue,)


def install(runtime, **config) -> StandInHip:
    """Make the ROCm backend's ``runtime`` module reach a new :class:`StandInHip` (and a
    :class:`~tests.backends._gpu_standin.StandInBlas`) instead of hip-python's HIP and hipBLAS, compiling with clang;
    returns the stand-in. Discovery is redone at the next call."""
    hip = StandInHip(**config)
    runtime.load_hip = lambda: hip
    runtime.load_blas = lambda stream: StandInBlas(hip, stream)
    runtime.blas_unavailable = lambda: None
    runtime.load_compiler = lambda: "clang"
    runtime.discover.found = None
    hook_renderer(hip)
    return hip


def _worker(argv: list[str]) -> int:
    """A worker with the stand-in installed: as many stand-in GPUs as ``--device rocm:N`` needs."""
    from tensorwire.backends.rocm import runtime

    device = argv[argv.index("--device") + 1] if "--device" in argv else "rocm:0"
    install(runtime, gpus=int(device.partition(":")[2] or 0) + 1)
    from tensorwire.cli import main

    return main(["worker", *argv])


if __name__ == "__main__":
    if sys.argv[1:2] != ["worker"]:
        raise SystemExit("usage: _hip_standin.py worker --device rocm:0 --dispatcher ADDR [worker options]")
    sys.exit(_worker(sys.argv[2:]))
