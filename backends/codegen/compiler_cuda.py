"""NVRTC, CUDA's compiler: CUDA C++ (:class:`~.cuda.CUDARenderer`'s source) to a CUBIN for one ``sm_XY``, or PTX for
a virtual ``compute_XY``.

Every compile gets ``--fmad=false``, so that no multiply-add is contracted and results match the C and OpenCL
targets. NVRTC needs no GPU and no driver; ``cuda.bindings`` is imported only when a compile is asked for, so this
module imports without it.
"""

from __future__ import annotations

from .cache import KernelCompileError

#: NVRTC options every compile gets (no FMA contraction; IEEE division and sqrt are NVRTC's defaults)
NVRTC_OPTIONS = ("--fmad=false",)


def _nvrtc():
    try:
        from cuda.bindings import nvrtc  # lazy: cuda-python, the optional [cuda] extra (~80 ms to import)
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


__all__ = ["NVRTC_OPTIONS", "compile_cubin", "compile_ptx", "nvrtc_unavailable", "nvrtc_version", "supported_archs"]
