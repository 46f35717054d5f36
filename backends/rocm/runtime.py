"""The ROCm runtime: discovery through HIP, kernels compiled for the GPU's ``gfx`` architecture, hipBLAS matmul.

Everything goes through hip-python's HIP module (``hip.hip``, returned by :func:`load_hip`), the hipBLAS wrapper
:func:`load_blas` returns and the HIP compiler :func:`load_compiler` names; nothing is imported or loaded until
discovery or a device needs it, so the plugin imports on a host without hip-python or ROCm.

* **Discovery** (:func:`discover`): ``hipInit`` and ``hipGetDeviceProperties`` (name, memory, ``gcnArchName``);
  without hip-python, the ROCm runtime (``libamdhip64.so``), an AMD GPU or a HIP compiler, the reason is the error
  hip-python, the runtime or the compiler lookup gave.
* **Memory, transfers, launches**: the logic shared with the CUDA backend, :mod:`..gpu_runtime`, over
  :class:`HIPApi` (the ``hip*`` names of its roles): device blocks from the caching allocator, uploads and downloads
  through reused pinned staging blocks (``hipHostMalloc``) on the device's stream, kernels loaded with
  ``hipModuleLoadData`` and launched with ``hipModuleLaunchKernel``.
* **Kernels**: the HIP renderer's source (CUDA's spelling, which HIP shares) compiled for the GPU's own ``gfx``
  target (the ``gcnArchName`` before its feature flags: ``gfx90a`` of ``gfx90a:sramecc+:xnack-``, which runs with
  either setting) by hipRTC, or by clang's HIP offload (``clang++ -x hip --cuda-device-only``) where the ROCm install
  has no hipRTC; cached on disk by :class:`~..codegen.cache.KernelCache` under (source, architecture, compiler and its
  version, options).
* **matmul** on hipBLAS (:mod:`.hipblas`) where the install has ``libhipblas.so``, else the compiler's tiled kernel.
"""

from __future__ import annotations

import dataclasses
import logging
import os

from ..codegen.cache import KernelCache, KernelCompileError
from ..codegen.compiler_hip import HIP_OPTIONS, compile_hip, compiler_id, hip_compiler
from ..codegen.hip import HIPRenderer
from ..compiled_device import Discovery, Found
from ..gpu_runtime import (
    ENUM_SPELLINGS,
    HIP_SPELLING,
    LOWERING_BLAS,
    LOWERING_KERNELS,
    SPELLINGS,
    DriverApi,
    DriverError,
    GPUDevice,
    GPURuntime,
    c_text,
    spelled,
)
from . import hipblas

log = logging.getLogger("tensorwire.rocm")

INSTALL = 'pip install -e ".[rocm]" (hip-python; the ROCm runtime comes from the ROCm install)'

#: how the kernel compiler lowers for an AMD GPU (matmul on hipBLAS), and without hipBLAS (see :mod:`..gpu_runtime`)
LOWERING = LOWERING_BLAS


# -- the APIs the backend calls (tests substitute them) ------------------------------------------------------------

def load_hip():
    """hip-python's HIP module (``hip.hip``); raises ImportError without hip-python."""
    from hip import hip  # lazy: hip-python, the optional [rocm] extra (~300 ms to import)

    return hip


def load_blas(stream: int):
    """A hipBLAS handle on ``stream`` (raises :class:`DeviceError` when hipBLAS is not installed)."""
    return hipblas.HipBlas(stream)


def blas_unavailable() -> str | None:
    """None when hipBLAS can be loaded here, else why not."""
    return hipblas.unavailable()


def load_compiler() -> str:
    """The HIP compiler kernels are built with: "hiprtc", else "clang"; raises :class:`KernelCompileError` naming
    why neither is there."""
    which, why = hip_compiler()
    if which is None:
        raise KernelCompileError(f"no HIP compiler: {why}")
    return which


# -- discovery ----------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class GPU:
    """One AMD GPU as discovery found it."""

    index: int
    name: str
    memory_bytes: int
    arch: str  # the compile target, e.g. gfx90a
    target_id: str  # the runtime's full gcnArchName, e.g. gfx90a:sramecc+:xnack-


def _discover() -> Found:
    found = HIPApi.discover(load_hip, "hip-python", INSTALL)
    if not found.available:
        return found
    try:
        load_compiler()
    except KernelCompileError as e:
        return Found([], f"AMD GPUs found ({', '.join(g.name for g in found.devices)}) but kernels cannot be "
                         f"compiled: {e}")
    return found


#: ``discover(refresh=False)``: the AMD GPUs of this host (cached for the process)
discover = Discovery(_discover)


def matmul_path() -> str:
    """How matmul runs on this host's AMD GPUs, as ``tensorwire status`` shows it."""
    why = blas_unavailable()
    return "matmul on hipBLAS" if why is None else f"matmul as compiled kernels ({why})"


# -- the runtime --------------------------------------------------------------------------------------------------

class HIPApi(DriverApi):
    """hip-python's HIP module in :class:`~..gpu_runtime.DriverApi`'s roles."""

    CALLS = spelled(SPELLINGS, HIP_SPELLING)
    ENUMS = spelled(ENUM_SPELLINGS, HIP_SPELLING)
    RUNTIME = "the ROCm runtime"
    LAUNCH_EXTRA = None

    def init_failed(self, err) -> str:
        codes = self.mod.hipError_t
        if err in (codes.hipErrorNoDevice, codes.hipErrorInvalidDevice):
            return (f"the ROCm runtime finds no AMD GPU (hipInit: {self.error_text(err)}; is /dev/kfd there and "
                    "readable by this user?)")
        return super().init_failed(err)

    def gpus(self) -> list:
        try:
            return super().gpus()
        except DriverError:
            raise
        except Exception as e:  # noqa: BLE001 - a runtime older than the bindings (a missing symbol) and the like
            raise DriverError(Found.failed("the ROCm runtime cannot list its GPUs", e).reason) from e

    def gpu(self, index: int) -> GPU:
        props = self.mod.hipDeviceProp_t()
        self.check("hipGetDeviceProperties", self.mod.hipGetDeviceProperties(props, index))
        target_id = c_text(props.gcnArchName)
        return GPU(index, c_text(props.name), int(props.totalGlobalMem), target_id.split(":", 1)[0], target_id)

    def make_current(self, gpu):
        self.bind(gpu, None)  # (HIP has no context object: the device is the thread's)
        return None

    def bind(self, gpu, ctx) -> None:
        self.check("hipSetDevice", self.mod.hipSetDevice(gpu.index))


class ROCmRuntime(GPURuntime):
    """One AMD GPU's stream, memory, kernels (hipRTC or clang, for its ``gfx`` target) and hipBLAS handle (see
    :class:`~..gpu_runtime.GPURuntime`)."""

    target = "rocm"
    source_suffix = ".hip"
    image_suffix = ".co"

    def __init__(self, hip, gpu: GPU):
        self.hip = hip
        self.compiler = load_compiler()
        self.renderer = HIPRenderer.for_compiler(self.compiler)
        self.arch = gpu.arch
        self.cache = KernelCache("rocm", f"{self.arch} {compiler_id(self.compiler)} {' '.join(HIP_OPTIONS)}")
        super().__init__(HIPApi(hip), gpu, load_blas, hipblas.supports)

    def compile(self, source: str, kernels) -> bytes:
        def build(src_path: str) -> bytes:
            return compile_hip(source, self.arch, compiler=self.compiler, name=os.path.basename(src_path))
        return self.cache.get_or_build_bytes(source, self.source_suffix, self.image_suffix, build, kernels)


# -- the device ---------------------------------------------------------------------------------------------------

class ROCmDevice(GPUDevice):
    """One AMD GPU: buffers are :class:`~..gpu_runtime.GPUBuffer`; fragments run as fused HIP kernels, matmuls on
    hipBLAS."""

    def __init__(self, backend, gpu: GPU, hip):
        super().__init__(backend, gpu, ROCmRuntime(hip, gpu), LOWERING, LOWERING_KERNELS)


__all__ = ["INSTALL", "LOWERING", "LOWERING_KERNELS", "GPU", "HIPApi", "ROCmDevice", "ROCmRuntime", "blas_unavailable",
           "discover", "load_blas", "load_compiler", "load_hip", "matmul_path"]
