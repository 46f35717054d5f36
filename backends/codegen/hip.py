"""HIP for AMD GPUs: the CUDA spelling (``extern "C" __global__``, ``blockIdx``, ``__float_as_uint`` ...), which
HIP shares; only the compilers differ (:mod:`.compiler_hip`: hipRTC, or clang).

hipRTC declares the HIP device API itself; clang needs ``#include <hip/hip_runtime.h>``, so the include is the
renderer's ``headers``, set by :meth:`HIPRenderer.for_compiler`.
"""

from __future__ import annotations

from .cuda import CUDARenderer

#: what clang needs at the top of a HIP source (hipRTC declares the device API itself)
HIP_RUNTIME_INCLUDE = "#include <hip/hip_runtime.h>\n"


class HIPRenderer(CUDARenderer):
    """CUDA's renderer; ``headers`` holds the HIP runtime include when the compiler needs it (clang)."""

    target = "hip"
    headers = ""

    def __init__(self, include_runtime: bool = False):
        self.headers = HIP_RUNTIME_INCLUDE if include_runtime else ""

    @classmethod
    def for_compiler(cls, compiler: str) -> HIPRenderer:
        """The renderer whose sources ``compiler`` ("hiprtc" or "clang", as :func:`.compiler_hip.hip_compiler`
        names it) accepts."""
        return cls(include_runtime=compiler == "clang")


__all__ = ["HIP_RUNTIME_INCLUDE", "HIPRenderer"]
