"""The CUDA runtime: discovery through the driver API, device memory, NVRTC kernels on a stream, cuBLAS matmul.

Everything goes through cuda-python's driver API (``cuda.bindings.driver``, returned by :func:`load_driver`) and
the cuBLAS wrapper :func:`load_blas` returns; nothing is imported or loaded until discovery or a device needs it, so
the plugin imports on a host without cuda-python or a driver.

* **Discovery** (:func:`discover`): ``cuInit`` and the device queries; without cuda-python, a driver (``libcuda``)
  or a GPU, the reason is the error the bindings or the driver gave.
* **Memory, transfers, launches**: the logic shared with the ROCm backend, :mod:`..gpu_runtime`, over
  :class:`CUDAApi` (the ``cu*`` names of its roles): device blocks from a caching allocator; uploads and downloads
  through reused pinned staging blocks (``cuMemHostAlloc``), queued on the device's stream.
* **Kernels**: the kernel compiler lowers each fragment (:data:`LOWERING`: a GPU's work groups and tiles, matmul to
  cuBLAS); the CUDA C renderer's source is compiled by NVRTC to a CUBIN for the device's own ``sm_XY`` (PTX for the
  newest ``compute_XY`` NVRTC knows when it does not know the GPU: the driver compiles that), cached on disk by
  :class:`~..codegen.cache.KernelCache` under (source, architecture, NVRTC version, options). Each distinct kernel is
  loaded once per process (``cuModuleLoadData``/``cuModuleGetFunction``) and launched with ``cuLaunchKernel`` on the
  stream; a module is unloaded (``cuModuleUnload``) once none of its kernels is cached or held by a launcher. A
  kernel that can raise (an index out of range, an integer division by zero) takes an error slot, read back once at
  the end of the run (:mod:`..kernel_errors`).
* **Graphs**: a plan that keeps being replayed is captured as CUDA graphs after a few runs
  (``cuStreamBeginCapture`` ... ``cuGraphInstantiate``) and replayed with ``cuGraphLaunch`` (:mod:`..gpu_graphs`;
  on by default since it ran on an H200; ``TENSORWIRE_CUDA_GRAPHS=0`` turns it off).
"""

from __future__ import annotations

import dataclasses
import logging

from ..codegen.cache import KernelCache, KernelCompileError
from ..codegen.compiler_cuda import NVRTC_OPTIONS, compile_cubin, compile_ptx, nvrtc_version, supported_archs
from ..codegen.cuda import CUDARenderer
from ..compiled_device import Discovery, Found, load_binding
from ..gpu_runtime import (
    LOWERING_BLAS,
    STAGING_CHUNK,
    STAGING_LIMIT,
    DriverApi,
    DriverError,
    GPUBuffer,
    GPUDevice,
    GPURuntime,
    check_result,
)
from ..gpu_runtime import LOWERING_KERNELS as GPU_LOWERING_KERNELS
from . import cublas
from .nccl import transport_for

log = logging.getLogger("tensorwire.cuda")

INSTALL = 'pip install -e ".[cuda]" (cuda-python, NVRTC and cuBLAS wheels)'

#: how the kernel compiler lowers for a CUDA GPU (matmul on cuBLAS), and without cuBLAS (see :mod:`..gpu_runtime`)
LOWERING, LOWERING_KERNELS = LOWERING_BLAS, GPU_LOWERING_KERNELS

#: the buffers of this backend (the shared runtime's)
CUDABuffer = GPUBuffer


# -- the APIs the backend calls (tests substitute both) -----------------------------------------------------------

def load_driver():
    """cuda-python's driver API module (``cuda.bindings.driver``); raises ImportError without cuda-python."""
    from cuda.bindings import driver  # lazy: cuda-python, the optional [cuda] extra (~160 ms to import)

    return driver


def load_blas(stream: int):
    """A cuBLAS handle on ``stream`` (raises :class:`DeviceError` when cuBLAS is not installed)."""
    return cublas.Cublas(stream)


def _error_text(drv, err) -> str:
    try:
        e2, s = drv.cuGetErrorString(err)
        text = s.decode(errors="replace") if isinstance(s, bytes) and e2 == drv.CUresult.CUDA_SUCCESS else ""
    except Exception:  # noqa: BLE001 - only for the message
        text = ""
    name = getattr(err, "name", str(err))
    return f"{name}: {text}" if text else name


def _call(drv, what: str, result):
    """The values of a driver call's result tuple ``(CUresult, *values)``, or :class:`DriverError`."""
    return check_result(what, result, drv.CUresult.CUDA_SUCCESS, lambda err: _error_text(drv, err))


# -- discovery ----------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class GPU:
    """One CUDA device as discovery found it."""

    index: int
    handle: object
    name: str
    memory_bytes: int
    capability: tuple[int, int]


def _discover() -> Found:
    drv, missing = load_binding(load_driver, "cuda-python", INSTALL)
    if missing is not None:
        return missing
    try:
        (err,) = drv.cuInit(0)
    except Exception as e:  # noqa: BLE001 - no libcuda: cuda.pathfinder's DynamicLibNotFoundError and the like
        return Found.failed("the CUDA driver is not available", e)
    if err != drv.CUresult.CUDA_SUCCESS:
        return Found([], f"cuInit failed ({_error_text(drv, err)})")
    try:
        n = _call(drv, "cuDeviceGetCount", drv.cuDeviceGetCount())
        if n == 0:
            return Found([], "the CUDA driver reports no GPU (cuDeviceGetCount = 0)")
        gpus = []
        attr = drv.CUdevice_attribute
        for i in range(int(n)):
            dev = _call(drv, "cuDeviceGet", drv.cuDeviceGet(i))
            name = _call(drv, "cuDeviceGetName", drv.cuDeviceGetName(256, dev))
            name = name.split(b"\0", 1)[0].decode(errors="replace").strip() if isinstance(name, bytes) else str(name)
            mem = _call(drv, "cuDeviceTotalMem", drv.cuDeviceTotalMem(dev))
            major = _call(drv, "cuDeviceGetAttribute", drv.cuDeviceGetAttribute(
                attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
            minor = _call(drv, "cuDeviceGetAttribute", drv.cuDeviceGetAttribute(
                attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
            gpus.append(GPU(i, dev, name, int(mem), (int(major), int(minor))))
    except DriverError as e:
        return Found([], str(e))
    return Found(gpus, "", drv)


#: ``discover(refresh=False)``: the CUDA devices of this host (cached for the process)
discover = Discovery(_discover)


def compile_target(capability: tuple[int, int], archs: list[int]) -> tuple[str, str]:
    """``(arch, kind)``: ``sm_XY`` CUBIN for the GPU's own capability when NVRTC knows it, else PTX for the newest
    ``compute_XY`` NVRTC knows that the GPU runs (the driver compiles PTX for newer GPUs)."""
    cc = capability[0] * 10 + capability[1]
    if cc in archs:
        return f"sm_{cc}", "cubin"
    older = [a for a in archs if a <= cc]
    if not older:
        raise KernelCompileError(f"NVRTC compiles for {', '.join(f'sm_{a}' for a in archs)}; this GPU is "
                                 f"sm_{cc}, older than all of them")
    return f"compute_{max(older)}", "ptx"


# -- the runtime --------------------------------------------------------------------------------------------------

class CUDAApi(DriverApi):
    """cuda-python's driver API in :class:`~..gpu_runtime.DriverApi`'s roles."""

    CALLS = {"stream_create": "cuStreamCreate", "stream_synchronize": "cuStreamSynchronize",
             "alloc": "cuMemAlloc", "free": "cuMemFree", "host_alloc": "cuMemHostAlloc", "host_free": "cuMemFreeHost",
             "copy_htod_async": "cuMemcpyHtoDAsync", "copy_dtoh_async": "cuMemcpyDtoHAsync",
             "memset_async": "cuMemsetD8Async", "event_create": "cuEventCreate", "event_record": "cuEventRecord",
             "event_query": "cuEventQuery", "event_synchronize": "cuEventSynchronize",
             "event_destroy": "cuEventDestroy", "module_load": "cuModuleLoadData", "module_unload": "cuModuleUnload",
             "module_function": "cuModuleGetFunction", "function_attribute": "cuFuncGetAttribute",
             "launch": "cuLaunchKernel", "copy_dtod_async": "cuMemcpyDtoDAsync",
             "begin_capture": "cuStreamBeginCapture", "end_capture": "cuStreamEndCapture",
             "graph_instantiate": "cuGraphInstantiate", "graph_launch": "cuGraphLaunch",
             "graph_exec_destroy": "cuGraphExecDestroy", "graph_destroy": "cuGraphDestroy",
             "exchange_capture_mode": "cuThreadExchangeStreamCaptureMode"}
    LAUNCH_EXTRA = 0
    GRAPHS = True

    def success(self):
        return self.mod.CUresult.CUDA_SUCCESS

    def out_of_memory(self):
        return self.mod.CUresult.CUDA_ERROR_OUT_OF_MEMORY

    def error_text(self, err) -> str:
        return _error_text(self.mod, err)

    def make_current(self, gpu):
        drv = self.mod
        ctx = _call(drv, "cuDevicePrimaryCtxRetain", drv.cuDevicePrimaryCtxRetain(gpu.handle))
        self.bind(gpu, ctx)
        return ctx

    def bind(self, gpu, ctx) -> None:
        _call(self.mod, "cuCtxSetCurrent", self.mod.cuCtxSetCurrent(ctx))

    def stream_flags(self) -> int:
        return int(self.mod.CUstream_flags.CU_STREAM_NON_BLOCKING)

    def event_flags(self) -> int:
        return int(self.mod.CUevent_flags.CU_EVENT_DISABLE_TIMING)

    def max_threads_attribute(self):
        return self.mod.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK

    def capture_mode_thread_local(self):
        return self.mod.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL

    def capture_mode_relaxed(self):
        return self.mod.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED


class CUDARuntime(GPURuntime):
    """One GPU's context, stream, memory, kernels (NVRTC) and cuBLAS handle (see :class:`~..gpu_runtime.GPURuntime`)."""

    target = "cuda"
    image_suffix = ".cubin"

    def __init__(self, drv, gpu: GPU):
        self.drv = drv
        self.renderer = CUDARenderer()
        self.arch, self.kind = compile_target(gpu.capability, supported_archs())
        self.image_suffix = f".{self.kind}"
        major, minor = nvrtc_version()
        self.cache = KernelCache("cuda", f"{self.arch} {self.kind} nvrtc {major}.{minor} {' '.join(NVRTC_OPTIONS)}")
        super().__init__(CUDAApi(drv), gpu, load_blas, cublas.supports)

    def compile(self, source: str, kernels) -> bytes:
        def build(src_path: str) -> bytes:
            if self.kind == "cubin":
                return compile_cubin(source, self.arch, name=src_path)
            return compile_ptx(source, self.arch, name=src_path)
        return self.cache.get_or_build_bytes(source, self.source_suffix, self.image_suffix, build, kernels)


# -- the device -----------------------------------------------------------------------------------------------------

class CUDADevice(GPUDevice):
    """One CUDA GPU: buffers are :class:`~..gpu_runtime.GPUBuffer`; fragments run as fused kernels, matmuls on
    cuBLAS."""

    def __init__(self, backend, gpu: GPU, drv):
        super().__init__(backend, gpu, CUDARuntime(drv, gpu), LOWERING, LOWERING_KERNELS)

    def collective_transport(self):
        """NCCL for collectives among CUDA devices (:mod:`.nccl`), or None when NCCL does not load."""
        return transport_for(self)


__all__ = ["LOWERING", "LOWERING_KERNELS", "STAGING_CHUNK", "STAGING_LIMIT", "CUDAApi", "CUDABuffer", "CUDADevice",
           "CUDARuntime", "DriverError", "compile_target", "discover", "load_blas", "load_driver"]
