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
from ..compiled_device import Discovery, Found, load_binding
from ..gpu_runtime import LOWERING_BLAS, LOWERING_KERNELS, DriverApi, DriverError, GPUDevice, GPURuntime, check_result
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


def _error_text(hip, err) -> str:
    name = getattr(err, "name", str(err))
    try:
        e2, text = hip.hipGetErrorString(err)
        text = _text(text) if e2 == hip.hipError_t.hipSuccess else ""
    except Exception:  # noqa: BLE001 - only for the message
        text = ""
    return f"{name}: {text}" if text and text != name else name


def _text(value) -> str:
    """A C string from hip-python (``bytes``, its ``CStr``, or ``str``) as ``str``, up to its first NUL."""
    if hasattr(value, "decode"):
        try:
            value = value.decode(errors="replace")
        except TypeError:  # CStr.decode takes no keyword
            value = value.decode()
    return str(value).split("\0", 1)[0].strip()


def _call(hip, what: str, result):
    """The values of a HIP call's result tuple ``(hipError_t, *values)``, or :class:`DriverError`."""
    return check_result(what, result, hip.hipError_t.hipSuccess, lambda err: _error_text(hip, err))


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
    hip, missing = load_binding(load_hip, "hip-python", INSTALL)
    if missing is not None:
        return missing
    try:
        (err,) = hip.hipInit(0)
    except Exception as e:  # noqa: BLE001 - no libamdhip64: hip-python's RuntimeError from dlopen
        return Found.failed("the ROCm runtime is not available", e)
    codes = hip.hipError_t
    if err in (codes.hipErrorNoDevice, codes.hipErrorInvalidDevice):
        return Found([], f"the ROCm runtime finds no AMD GPU (hipInit: {_error_text(hip, err)}; is /dev/kfd there "
                         "and readable by this user?)")
    if err != codes.hipSuccess:
        return Found([], f"hipInit failed ({_error_text(hip, err)})")
    try:
        n = _call(hip, "hipGetDeviceCount", hip.hipGetDeviceCount())
        if n == 0:
            return Found([], "the ROCm runtime reports no GPU (hipGetDeviceCount = 0)")
        gpus = []
        for i in range(int(n)):
            props = hip.hipDeviceProp_t()
            _call(hip, "hipGetDeviceProperties", hip.hipGetDeviceProperties(props, i))
            target_id = _text(props.gcnArchName)
            gpus.append(GPU(i, _text(props.name), int(props.totalGlobalMem), target_id.split(":", 1)[0], target_id))
    except DriverError as e:
        return Found([], str(e))
    except Exception as e:  # noqa: BLE001 - a runtime older than the bindings (a missing symbol) and the like
        return Found.failed("the ROCm runtime cannot list its GPUs", e)
    try:
        load_compiler()
    except KernelCompileError as e:
        return Found([], f"AMD GPUs found ({', '.join(g.name for g in gpus)}) but kernels cannot be compiled: {e}")
    return Found(gpus, "", hip)


#: ``discover(refresh=False)``: the AMD GPUs of this host (cached for the process)
discover = Discovery(_discover)


def matmul_path() -> str:
    """How matmul runs on this host's AMD GPUs, as ``tensorwire status`` shows it."""
    why = blas_unavailable()
    return "matmul on hipBLAS" if why is None else f"matmul as compiled kernels ({why})"


# -- the runtime --------------------------------------------------------------------------------------------------

class HIPApi(DriverApi):
    """hip-python's HIP module in :class:`~..gpu_runtime.DriverApi`'s roles."""

    CALLS = {"stream_create": "hipStreamCreateWithFlags", "stream_synchronize": "hipStreamSynchronize",
             "alloc": "hipMalloc", "free": "hipFree", "host_alloc": "hipHostMalloc", "host_free": "hipHostFree",
             "copy_htod_async": "hipMemcpyHtoDAsync", "copy_dtoh_async": "hipMemcpyDtoHAsync",
             "memset_async": "hipMemsetD8Async", "event_create": "hipEventCreateWithFlags",
             "event_record": "hipEventRecord", "event_query": "hipEventQuery",
             "event_synchronize": "hipEventSynchronize", "event_destroy": "hipEventDestroy",
             "module_load": "hipModuleLoadData", "module_unload": "hipModuleUnload",
             "module_function": "hipModuleGetFunction", "function_attribute": "hipFuncGetAttribute",
             "launch": "hipModuleLaunchKernel"}
    LAUNCH_EXTRA = None

    def success(self):
        return self.mod.hipError_t.hipSuccess

    def out_of_memory(self):
        return self.mod.hipError_t.hipErrorOutOfMemory

    def error_text(self, err) -> str:
        return _error_text(self.mod, err)

    def make_current(self, gpu):
        self.bind(gpu, None)  # (HIP has no context object: the device is the thread's)
        return None

    def bind(self, gpu, ctx) -> None:
        _call(self.mod, "hipSetDevice", self.mod.hipSetDevice(gpu.index))

    def stream_flags(self) -> int:
        return int(self.mod.hipStreamNonBlocking)

    def event_flags(self) -> int:
        return int(self.mod.hipEventDisableTiming)

    def max_threads_attribute(self):
        return self.mod.hipFunction_attribute.HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK


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
