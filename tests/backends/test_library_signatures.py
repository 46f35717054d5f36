"""Every call the GPU backends make into a library, checked against the installed library itself, and every
stand-in against the library it stands for (issue 31: a stand-in written to our beliefs hid what a real GPU found).

The calls are read from the backends' source, so a new call is checked without editing this file:

* cuda-bindings' driver (``drv.cuX``, ``self.mod.cuX``, ``CUDAApi.CALLS``) and NVRTC (``nvrtc.nvrtcX``): the
  function exists, and the driver stand-in has each role's call and its method takes as many arguments as the
  binding's Cython signature;
  every enum member the backend or the stand-in names exists;
* cuBLAS and NCCL through ctypes (``lib.cublasX``, ``lib.ncclX``): the symbol is in the wheel's library, each
  ``argtypes`` list is as long as the C prototype in the wheel's header (``cublas_api.h``, ``nccl.h``), and the enum
  values the modules hard-code (data types, compute types, reduction ops, result codes) are the header's;
* hip-python (``hip.hipX``, ``self.mod.hipX``, ``HIPApi.CALLS``), its hipBLAS names, and hipRTC's symbols: they
  exist, and the HIP stand-in has each role's call with the binding's argument count;
* MLX (``mx.X``): every name exists in ``mlx.core``.

A library that is not installed skips its part with the reason. The last test checks the checker: a wrong argument
count is reported.
"""

from __future__ import annotations

import inspect
import os
import re

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def _source(*paths: str) -> str:
    text = []
    for p in paths:
        with open(os.path.join(ROOT, p)) as f:
            text.append(f.read())
    return "\n".join(text)


def _names(pattern: str, *paths: str) -> set[str]:
    return set(re.findall(pattern, _source(*paths)))


def _arity(fn) -> int:
    """Positional parameters of a function or a bound method (``self`` not counted)."""
    params = inspect.signature(fn).parameters.values()
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


def arity_mismatches(real_module, stand_in, names) -> list[str]:
    """What differs between ``real_module``'s functions ``names`` and ``stand_in``'s methods of those names: a name the
    library lacks, or a different argument count (a stand-in that lacks a name is not checked here: the backend's
    tests on the stand-in fail on it)."""
    out = []
    for name in sorted(names):
        real = getattr(real_module, name, None)
        if real is None:
            out.append(f"{name}: not in {real_module.__name__}")
            continue
        mine = getattr(stand_in, name, None) if stand_in is not None else None
        if isinstance(real, type):  # a struct or enum type the backend constructs: its existence is the check
            continue
        if mine is not None and _arity(mine) != _arity(real):
            out.append(f"{name}: the stand-in takes {_arity(mine)} arguments, {real_module.__name__} "
                       f"{_arity(real)} {inspect.signature(real)}")
    return out


def _prototypes(header: str) -> dict[str, int]:
    """``{function: parameter count}`` of the C prototypes in ``header``."""
    with open(header) as f:
        text = re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S)
    out = {}
    for m in re.finditer(r"\b(\w+)\s*\(([^;{}()]*)\)\s*;", text):
        params = m.group(2).strip()
        out.setdefault(m.group(1), 0 if params in ("", "void") else params.count(",") + 1)
    return out


def _enum(header: str, name: str) -> int:
    with open(header) as f:
        m = re.search(rf"\b{name}\s*=\s*(-?\w+)", f.read())
    assert m, f"{name} is not in {header}"
    return int(m.group(1), 0)


# -- CUDA --------------------------------------------------------------------------------------------------------------

CUDA_SOURCES = ("backends/cuda/runtime.py", "backends/gpu_runtime.py")


def _driver():
    return pytest.importorskip("cuda.bindings.driver", reason="cuda-python is not installed (the cuda extra)")


def test_driver_calls_exist_and_the_standin_takes_their_arguments():
    drv = _driver()
    from tensorwire.backends.cuda.runtime import CUDAApi
    from tests.backends._cuda_standin import StandInDriver

    calls = _names(r"(?:drv|self\.mod)\.(cu[A-Z]\w+)\(", *CUDA_SOURCES) | set(CUDAApi.CALLS.values())
    assert {"cuInit", "cuLaunchKernel", "cuCtxSetCurrent", "cuModuleUnload"} <= calls, calls
    assert {"cuStreamBeginCapture", "cuStreamEndCapture", "cuGraphInstantiate", "cuGraphLaunch",
            "cuThreadExchangeStreamCaptureMode"} <= calls, calls  # (graphs, backends/gpu_graphs.py)
    assert arity_mismatches(drv, StandInDriver(), calls) == []
    assert [n for n in sorted(CUDAApi.CALLS.values()) if not hasattr(StandInDriver, n)] == []  # the stand-in has them
    standin_only = {n for n in dir(StandInDriver) if re.fullmatch(r"cu[A-Z]\w+", n)}
    assert arity_mismatches(drv, StandInDriver(), standin_only) == []


def test_driver_enum_members_exist():
    drv = _driver()
    used = re.findall(r"\b(CU\w+)\.(CU\w+)", _source(*CUDA_SOURCES, "tests/backends/_cuda_standin.py"))
    assert len(used) >= 8, used
    missing = [f"{e}.{m}" for e, m in set(used) if not hasattr(getattr(drv, e, None), m)]
    assert missing == []
    from tensorwire.backends.cuda.runtime import CUDAApi

    assert _unresolved(drv, CUDAApi.ENUMS.values()) == []  # the enums the shared runtime reads, by role


def _unresolved(module, paths) -> list[str]:
    """The dotted enum paths (``CUresult.CUDA_SUCCESS``) that ``module`` does not have."""
    out = []
    for path in paths:
        value = module
        for name in path.split("."):
            value = getattr(value, name, None)
        if value is None:
            out.append(path)
    return out


def test_nvrtc_calls_exist():
    nvrtc = pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is not installed (the cuda extra)")
    calls = _names(r"nvrtc\.(nvrtc\w+)", "backends/codegen/compiler_cuda.py")
    assert {"nvrtcCreateProgram", "nvrtcCompileProgram", "nvrtcGetCUBIN"} <= calls, calls
    assert arity_mismatches(nvrtc, None, calls) == []
    results = _names(r"nvrtcResult\.(\w+)", "backends/codegen/compiler_cuda.py")
    assert all(hasattr(nvrtc.nvrtcResult, m) for m in results)


def _nvidia_include(package: str, header: str) -> str:
    try:
        mod = __import__(f"nvidia.{package}", fromlist=["_"])
    except ImportError:
        pytest.skip(f"the nvidia-{package} wheel is not installed (the cuda extra)")
    for base in mod.__path__:
        path = os.path.join(base, "include", header)
        if os.path.isfile(path):
            return path
    pytest.skip(f"nvidia-{package} ships no {header}")


def _ctypes_lib(name: str):
    import ctypes

    pathfinder = pytest.importorskip("cuda.pathfinder", reason="cuda-python is not installed (the cuda extra)")
    try:
        return ctypes.CDLL(pathfinder.load_nvidia_dynamic_lib(name).abs_path)
    except Exception as e:  # noqa: BLE001 - the library missing
        pytest.skip(f"{name} does not load here: {e}")


def test_cublas_symbols_prototypes_and_enums():
    from tensorwire.backends.cuda import cublas as C
    from tensorwire.protocol import dtypes as D

    header = _nvidia_include("cublas", "cublas_api.h")
    lib = _ctypes_lib("cublas")
    protos = _prototypes(header)
    calls = _names(r"lib\.(cublas\w+)", "backends/cuda/cublas.py")
    assert "cublasGemmStridedBatchedEx" in calls
    for name in calls:
        assert hasattr(lib, name), f"{name} is not in libcublas"
        assert name in protos, f"{name} has no prototype in cublas_api.h"
    assert len(C.Cublas.GEMM_ARGTYPES) == protos["cublasGemmStridedBatchedEx"]
    assert "cublasSetWorkspace_v2" in calls  # (before a graph capture)
    assert len(C.Cublas.WORKSPACE_ARGTYPES) == protos["cublasSetWorkspace_v2"]
    types = _nvidia_include("cuda_runtime", "library_types.h")
    for dt, name in ((D.float32, "CUDA_R_32F"), (D.float64, "CUDA_R_64F"), (D.float16, "CUDA_R_16F"),
                     (D.bfloat16, "CUDA_R_16BF")):
        assert C.TYPES[dt][0] == _enum(types, name), name
    assert C.TYPES[D.float32][1] == _enum(header, "CUBLAS_COMPUTE_32F")
    assert C.TYPES[D.float64][1] == _enum(header, "CUBLAS_COMPUTE_64F")
    assert C.OP_N == _enum(header, "CUBLAS_OP_N") and C.GEMM_DEFAULT == _enum(header, "CUBLAS_GEMM_DEFAULT")


def test_nccl_symbols_prototypes_and_enums():
    from tensorwire.backends.cuda import nccl as N
    from tensorwire.protocol import dtypes as D

    header = _nvidia_include("nccl", "nccl.h")
    protos = _prototypes(header)
    lib = _ctypes_lib("nccl")
    calls = _names(r"lib\.(nccl\w+)", "backends/cuda/nccl.py")
    assert {"ncclAllReduce", "ncclCommInitRank"} <= calls
    binding = N.Nccl(lib._name)
    for name in calls:
        assert name in protos, f"{name} has no prototype in nccl.h"
        argtypes = getattr(binding.lib, name).argtypes
        assert argtypes is not None and len(argtypes) == protos[name], (name, argtypes, protos[name])
    for dt, name in ((D.int8, "ncclInt8"), (D.uint8, "ncclUint8"), (D.int32, "ncclInt32"), (D.int64, "ncclInt64"),
                     (D.float16, "ncclFloat16"), (D.float32, "ncclFloat32"), (D.float64, "ncclFloat64"),
                     (D.bfloat16, "ncclBfloat16")):
        assert N.DATATYPES[dt] == _enum(header, name), name
    for op, name in (("sum", "ncclSum"), ("prod", "ncclProd"), ("max", "ncclMax"), ("min", "ncclMin"),
                     ("mean", "ncclAvg")):
        assert N.REDOPS[op] == _enum(header, name), name
    for code, name in N.RESULT_NAMES.items():
        assert code == _enum(header, name), name


# -- ROCm --------------------------------------------------------------------------------------------------------------

ROCM_SOURCES = ("backends/rocm/runtime.py", "backends/rocm/hipblas.py", "backends/gpu_runtime.py")


def test_hip_calls_exist_and_the_standin_takes_their_arguments():
    hip = pytest.importorskip("hip.hip", reason="hip-python is not installed (the rocm extra)")
    from tensorwire.backends.rocm.runtime import HIPApi
    from tests.backends._hip_standin import StandInHip

    calls = _names(r"\b(?:hip|mod)\.(hip[A-Z]\w+)\(", *ROCM_SOURCES) | set(HIPApi.CALLS.values())
    assert {"hipInit", "hipModuleLaunchKernel", "hipSetDevice", "hipModuleUnload"} <= calls, calls
    assert arity_mismatches(hip, StandInHip(), calls) == []
    assert [n for n in sorted(HIPApi.CALLS.values()) if not hasattr(StandInHip, n)] == []  # the stand-in has them
    standin_only = {n for n in dir(StandInHip) if re.fullmatch(r"hip[A-Z]\w+", n)
                    and callable(getattr(hip, n, None)) and not isinstance(getattr(hip, n), type)}
    assert arity_mismatches(hip, StandInHip(), standin_only) == []
    enums = re.findall(r"\b(?:hip|mod)\.(hip\w+?_t|hipStreamNonBlocking|hipEventDisableTiming)\b",
                       _source(*ROCM_SOURCES))
    assert all(hasattr(hip, e) for e in enums), enums
    assert _unresolved(hip, HIPApi.ENUMS.values()) == []  # the enums the shared runtime reads, by role


def test_hipblas_names_exist():
    hipblas = pytest.importorskip("hip.hipblas", reason="hip-python is not installed (the rocm extra)")
    names = _names(r"\b(?:hipblas|lib)\.(hipblas\w+)", "backends/rocm/hipblas.py")
    assert "hipblasGemmStridedBatchedEx" in names
    assert [n for n in names if not hasattr(hipblas, n)] == []


def test_hiprtc_symbols_exist_in_the_library_the_backend_loads():
    from tensorwire.backends.codegen import compiler_hip as H

    lib = H._hiprtc_lib()
    if lib is None:
        pytest.skip(H._LIB_WHY)
    names = _names(r"lib\.(hiprtc\w+)", "backends/codegen/compiler_hip.py")
    assert {"hiprtcCreateProgram", "hiprtcGetCode"} <= names
    assert [n for n in names if not hasattr(lib, n)] == []


# -- MLX ---------------------------------------------------------------------------------------------------------------

def test_mlx_names_exist():
    mx = pytest.importorskip("mlx.core", reason="mlx is not installed (the mps extra)")
    names = _names(r"\bmx\.([a-zA-Z_]\w*)", "backends/mps/runtime.py", "backends/mps/kernels.py",
                   "backends/mps/metal_runtime.py", "backends/mps/metal.py")
    assert len(names) > 40
    assert [n for n in sorted(names) if not hasattr(mx, n)] == []


# -- the checker itself ------------------------------------------------------------------------------------------------

def test_a_wrong_argument_count_is_reported():
    drv = _driver()

    class Wrong:
        def cuMemAlloc(self, size, flags):  # the driver's takes one argument
            return 0, 0

        def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
            return (0,)

    found = arity_mismatches(drv, Wrong(), {"cuMemAlloc", "cuLaunchKernel", "cuNoSuchCall"})
    assert len(found) == 2 and found[0].startswith("cuMemAlloc: the stand-in takes 2 arguments"), found
    assert found[1] == "cuNoSuchCall: not in cuda.bindings.driver", found
    assert _prototypes_of("int f(void); int g(int a, void *b); int h(long x);") == {"f": 0, "g": 2, "h": 1}


def _prototypes_of(text: str) -> dict[str, int]:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".h", delete=False) as f:
        f.write(text)
    try:
        return _prototypes(f.name)
    finally:
        os.unlink(f.name)
