"""CUDA C++ for NVIDIA GPUs: one ``extern "C" __global__`` function per kernel, one thread per grid index.

The launcher rounds the grid up to whole blocks, so every kernel starts with ``if (gid >= GRID) return;``.
16-bit floats keep the shared preamble's ``unsigned short`` storage and portable conversions (no
``cuda_fp16.h``, so NVRTC needs no include path); math uses the C names (``expf`` on float, ``exp`` on
double), which CUDA's device library provides. :func:`compile_cubin` compiles with NVRTC to a CUBIN for one
``sm_XX`` architecture, with ``--fmad=false`` so that no multiply-add is contracted and results match the
C and OpenCL targets. NVRTC needs no GPU and no driver; ``cuda.bindings`` is imported only when a compile
is asked for, so this module imports without it.
"""

from __future__ import annotations

from tensorwire.protocol import dtypes as D

from . import ir
from .cache import KernelCompileError
from .render import CStyleRenderer

#: NVRTC options every compile gets (no FMA contraction; IEEE division and sqrt are NVRTC's defaults)
NVRTC_OPTIONS = ("--fmad=false",)


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

    def buf_param(self, b: ir.Buf) -> str:
        const = "" if b.out else "const "
        return f"{const}{self.storage[b.dtype]}* {self.restrict} {b.name}"

    def err_param(self) -> str:
        return f"{self.storage[D.int64]}* {self.restrict} tw_err"

    def raise_error(self, code: int, detail: str) -> str:
        # the first failing thread wins, so the code and its detail always belong together
        return (f"{{ if (atomicCAS((unsigned long long*)tw_err, 0ull, {code}ull) == 0ull) "
                f"tw_err[1] = (long long){detail}; }}")

    def global_id(self) -> str:
        return "(long long)blockIdx.x * blockDim.x + threadIdx.x"

    def local_id(self) -> str:
        return "(long long)threadIdx.x"

    def group_id(self) -> str:
        return "(long long)blockIdx.x"

    def barrier(self) -> str:
        return "__syncthreads()"

    def local_decl(self, a: ir.Local) -> str:
        return f"__shared__ {self.reg(a.dtype)} {a.name}[{a.size}];"

    def wrap(self, k: ir.Kernel, body: list[str]) -> str:
        bounds = f" __launch_bounds__({k.local})" if k.local else ""
        sig = f"{self.entry}{bounds} void {k.name}({', '.join(self.params(k))})"
        return "\n".join([sig + " {", *self.ids(k), *body, "}"])


# -- NVRTC ---------------------------------------------------------------------------------------------------------

def _nvrtc():
    try:
        from cuda.bindings import nvrtc  # noqa: PLC0415 - optional dependency, imported on first use
    except ImportError as e:
        raise KernelCompileError(f"NVRTC is not available ({e}): pip install cuda-bindings nvidia-cuda-nvrtc-cu12 "
                                 "(the cuda extra)") from None
    return nvrtc


def nvrtc_unavailable() -> str | None:
    """None when NVRTC can compile here, else why not (cuda-bindings or the NVRTC library missing)."""
    try:
        nvrtc_version()
    except KernelCompileError as e:  # no cuda-bindings
        return str(e)
    except Exception as e:  # the library failing to load (a RuntimeError from cuda.pathfinder)
        return f"NVRTC is not available ({type(e).__name__}: {e}): pip install nvidia-cuda-nvrtc-cu12"
    return None


def nvrtc_version() -> tuple[int, int]:
    """``(major, minor)`` of the NVRTC library (part of the kernel cache key)."""
    nvrtc = _nvrtc()
    err, major, minor = nvrtc.nvrtcVersion()
    _check(nvrtc, err, "nvrtcVersion")
    return int(major), int(minor)


def _check(nvrtc, err, what: str) -> None:
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, msg = nvrtc.nvrtcGetErrorString(err)
        raise KernelCompileError(f"NVRTC {what} failed: {msg.decode(errors='replace')}")


def compile_cubin(source: str, arch: str = "sm_80", options=(), name: str = "tensorwire.cu") -> bytes:
    """CUDA source -> CUBIN bytes for ``arch`` (``sm_80``, ``sm_90`` ...) with NVRTC; no GPU needed.

    Raises :class:`~.cache.KernelCompileError` with NVRTC's log when the source does not compile."""
    return _compile(source, arch, options, name, "CUBIN")


def compile_ptx(source: str, arch: str = "compute_80", options=(), name: str = "tensorwire.cu") -> bytes:
    """CUDA source -> PTX text (NUL-terminated, as ``cuModuleLoadData`` takes it) for a virtual ``compute_XX``
    architecture: the fallback for a GPU newer than this NVRTC, whose driver compiles the PTX itself."""
    return _compile(source, arch, options, name, "PTX")


def supported_archs() -> list[int]:
    """The ``XY`` of every ``sm_XY`` this NVRTC compiles for."""
    nvrtc = _nvrtc()
    err, archs = nvrtc.nvrtcGetSupportedArchs()
    _check(nvrtc, err, "nvrtcGetSupportedArchs")
    return [int(a) for a in archs]


def _compile(source: str, arch: str, options, name: str, kind: str) -> bytes:
    nvrtc = _nvrtc()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    _check(nvrtc, err, "nvrtcCreateProgram")
    try:
        opts = [f"--gpu-architecture={arch}".encode(), *(o.encode() for o in (*NVRTC_OPTIONS, *options))]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, n = nvrtc.nvrtcGetProgramLogSize(prog)
            log = b" " * n
            nvrtc.nvrtcGetProgramLog(prog, log)
            text = log.decode(errors="replace").rstrip("\x00 \n")
            raise KernelCompileError(f"NVRTC could not compile {name} for {arch} ({err.name}):\n{text[-4000:]}")
        size_fn, get_fn = ((nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN) if kind == "CUBIN" else
                           (nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX))
        err, n = size_fn(prog)
        _check(nvrtc, err, f"nvrtcGet{kind}Size")
        if n == 0:
            raise KernelCompileError(f"NVRTC made no CUBIN for {arch!r} (a real architecture such as sm_80 is "
                                     "needed, not compute_80)")
        out = b" " * n
        (err,) = get_fn(prog, out)
        _check(nvrtc, err, f"nvrtcGet{kind}")
        return out
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


__all__ = ["CUDARenderer", "NVRTC_OPTIONS", "compile_cubin", "compile_ptx", "nvrtc_unavailable", "nvrtc_version",
           "supported_archs"]
