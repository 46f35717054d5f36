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
from ..compiled_device import Discovery, Found
from ..gpu_runtime import (
    CUDA_SPELLING,
    ENUM_SPELLINGS,
    LOWERING_BLAS,
    SPELLINGS,
    STAGING_CHUNK,
    STAGING_LIMIT,
    DriverApi,
    DriverError,
    GPUBuffer,
    GPUDevice,
    GPURuntime,
    c_text,
    spelled,
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
    return CUDAApi.discover(load_driver, "cuda-python", INSTALL)


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

    CALLS = spelled(SPELLINGS, CUDA_SPELLING)
    ENUMS = spelled(ENUM_SPELLINGS, CUDA_SPELLING)
    RUNTIME = "the CUDA driver"
    LAUNCH_EXTRA = 0
    GRAPHS = True

    def gpu(self, index: int) -> GPU:
        drv, attr = self.mod, self.mod.CUdevice_attribute
        dev = self.check("cuDeviceGet", drv.cuDeviceGet(index))
        name = c_text(self.check("cuDeviceGetName", drv.cuDeviceGetName(256, dev)))
        mem = self.check("cuDeviceTotalMem", drv.cuDeviceTotalMem(dev))
        major, minor = (self.check("cuDeviceGetAttribute", drv.cuDeviceGetAttribute(a, dev))
                        for a in (attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                  attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))
        return GPU(index, dev, name, int(mem), (int(major), int(minor)))

    def make_current(self, gpu):
        ctx = self.check("cuDevicePrimaryCtxRetain", self.mod.cuDevicePrimaryCtxRetain(gpu.handle))
        self.bind(gpu, ctx)
        return ctx

    def bind(self, gpu, ctx) -> None:
        self.check("cuCtxSetCurrent", self.mod.cuCtxSetCurrent(ctx))


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
