"""The ROCm backend (``rocm:N``): fragments run as fused HIP kernels (hipRTC, or clang) on AMD GPUs, matmuls on
hipBLAS.

Needs hip-python (``pip install -e ".[rocm]"``) and a ROCm install (``libamdhip64``; hipRTC or clang with the ROCm
device libraries to compile; ``libhipblas`` for matmul). Without them the plugin still loads: ``rocm:0`` is listed as
not available, with the reason hip-python or the runtime gave, and a worker asked for it exits at once with that
reason. Memory, transfers and launches are the CUDA backend's code (:mod:`..gpu_runtime`) over HIP's names; see
:mod:`.runtime` for discovery and kernels.
"""

from __future__ import annotations

from tensorwire.backends.compiled_device import CompilingBackend
from tensorwire.backends.hookspecs import hookimpl


class ROCmBackend(CompilingBackend):
    """AMD GPUs through HIP; every primitive op runs through the kernel compiler."""

    name = "rocm"

    def describe(self, gpu) -> str:
        rt = self.runtime_module()
        return f"{gpu.name} ({gpu.arch}; kernels by {rt.load_compiler()}, {rt.matmul_path()})"

    def device(self, gpu, driver):
        return self.runtime_module().ROCmDevice(self, gpu, driver)


@hookimpl
def tensorwire_backends():
    """The ROCm backend (its devices say whether hip-python, the ROCm runtime and an AMD GPU are there)."""
    return [ROCmBackend()]
