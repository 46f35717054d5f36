"""CUDA C++ for NVIDIA GPUs: one ``extern "C" __global__`` function per kernel, one thread per grid index.

An elementwise thread computes several neighbouring elements where the lowering asks (``Options.lane_bytes``,
:mod:`.lanes`): its contiguous loads and its stores are 128-bit (or narrower) accesses of aligned structs.

The launcher rounds the grid up to whole blocks, so every kernel starts with ``if (gid >= GRID) return;``.
16-bit floats keep the shared preamble's ``unsigned short`` storage and portable conversions (no
``cuda_fp16.h``, so NVRTC needs no include path); math uses the C names (``expf`` on float, ``exp`` on
double), which CUDA's device library provides. The compiler is NVRTC (:mod:`.compiler_cuda`).
"""

from __future__ import annotations

from tensorwire.protocol import dtypes as D

from . import ir
from .render import CStyleRenderer


class CUDARenderer(CStyleRenderer):
    target = "cuda"
    headers = ""
    macros = r"""#define TW_FN __device__ static inline
#define TW_I64 long long
#define TW_U64 unsigned long long
#define TW_U64C(x) x##ull
#define TW_AS_UINT(x) __float_as_uint(x)
#define TW_AS_FLOAT(x) __uint_as_float(x)
#define TW_AS_U64(x) ((unsigned long long)__double_as_longlong(x))
#define TW_AS_F64(x) __longlong_as_double((long long)(x))
#define TW_SQRT sqrt
#define TW_FLOOR floor
"""
    restrict = "__restrict__"
    #: the qualifiers that make a kernel entry point
    entry = 'extern "C" __global__'
    GLOBAL_ID = "(long long)blockIdx.x * blockDim.x + threadIdx.x"
    LOCAL_ID = "(long long)threadIdx.x"
    GROUP_ID = "(long long)blockIdx.x"
    BARRIER = "__syncthreads()"
    GROUP_MEMORY = "__shared__"

    def buf_param(self, b: ir.Buf) -> str:
        const = "" if b.out else "const "
        return f"{const}{self.storage[b.dtype]}* {self.restrict} {b.name}"

    def err_param(self) -> str:
        return f"{self.storage[D.int64]}* {self.restrict} tw_err"

    def raise_error(self, code: int, detail: str) -> str:
        # the first failing thread wins, so the code and its detail always belong together
        return (f"{{ if (atomicCAS((unsigned long long*)tw_err, 0ull, {code}ull) == 0ull) "
                f"tw_err[1] = (long long){detail}; }}")

    # memory vectors (GPU lanes, :mod:`.lanes`): a struct of the storage type, aligned to its size, so that NVCC and
    # clang read and write it with one 64- or 128-bit access (ld.global.v4.f32 ...); any dtype, any width
    def memory_vector_type(self, dt: D.DType, width: int) -> str:
        t = self.storage[dt]
        name = f"tw_{t.replace(' ', '')}x{width}"
        if name not in self._own:
            size = width * dt.itemsize
            self._own[name] = f"struct __attribute__((aligned({size}))) {name} {{ {t} v[{width}]; }};"
        return name

    def vload(self, buf: str, idx: str, width: int) -> str:
        t = self.memory_vector_type(self._buf_dtype[buf], width)
        return f"(*(const {t}*)({buf} + {idx}))"

    def vstore(self, buf: str, idx: str, v: str, width: int) -> str:
        t = self.memory_vector_type(self._buf_dtype[buf], width)
        return f"*({t}*)({buf} + {idx}) = {v}"

    def lane(self, a: str, i: int) -> str:
        return f"{a}.v[{i}]"

    def pack(self, vtype: str, lanes: list[str]) -> str:
        return f"{{{{{', '.join(lanes)}}}}}"  # (the initialiser of the local that holds it)

    def qualifiers(self, k: ir.Kernel) -> str:
        return f"{self.entry} __launch_bounds__({k.local})" if k.local else self.entry


__all__ = ["CUDARenderer"]
