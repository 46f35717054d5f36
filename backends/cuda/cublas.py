"""cuBLAS through ctypes: the one call the CUDA backend makes, ``cublasGemmStridedBatchedEx`` (and
``cublasSetWorkspace`` before a graph capture: a workspace of the backend's own, so cuBLAS allocates nothing while a
stream is captured).

The library comes from the ``nvidia-cublas-cu12`` wheel (the ``cuda`` extra), found by ``cuda.pathfinder`` like
NVRTC; nothing is loaded until a CUDA device opens. cuBLAS is column-major: the device computes a row-major
``C = A @ B`` as the column-major ``C^T = B^T A^T`` (see ``CUDADevice._gemm``). Compute types follow PyTorch's
defaults: float32 in float32 (no TF32), float64 in float64, float16 and bfloat16 accumulate in float32 and round
the result once, which is what the kernel compiler's 16-bit arithmetic does.
"""

from __future__ import annotations

import ctypes

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DeviceError

from .wheels import library_path

INSTALL = 'pip install -e ".[cuda]" (or pip install nvidia-cublas-cu12)'

OP_N = 0
GEMM_DEFAULT = -1
#: cudaDataType and cublasComputeType_t of each dtype cuBLAS multiplies, and the ctypes type of alpha/beta
TYPES = {D.float32: (0, 68, ctypes.c_float), D.float64: (1, 70, ctypes.c_double),
         D.float16: (2, 68, ctypes.c_float), D.bfloat16: (14, 68, ctypes.c_float)}


def supports(dtype: D.DType) -> bool:
    """Whether cuBLAS multiplies ``dtype`` (integer and bool matmuls run as compiled kernels)."""
    return dtype in TYPES


_i, _ll, _p = ctypes.c_int, ctypes.c_longlong, ctypes.c_void_p


class Cublas:
    """One cuBLAS handle bound to a stream (create it with the device's context current)."""

    #: ``cublasGemmStridedBatchedEx``'s C prototype (cublas_api.h): handle, transa, transb, m, n, k, alpha, A, Atype,
    #: lda, strideA, B, Btype, ldb, strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType, algo
    GEMM_ARGTYPES = [_p, _i, _i, _i, _i, _i, _p, _p, _i, _i, _ll, _p, _i, _i, _ll, _p, _p, _i, _i, _ll, _i, _i, _i]
    #: ``cublasSetWorkspace_v2``'s: handle, workspace, workspaceSizeInBytes
    WORKSPACE_ARGTYPES = [_p, _p, ctypes.c_size_t]

    def __init__(self, stream: int):
        try:
            lib = ctypes.CDLL(library_path("cublas"))
        except Exception as e:  # ImportError, or the library missing (cuda.pathfinder's DynamicLibNotFoundError)
            raise DeviceError(f"cuBLAS is not available ({type(e).__name__}: {e}); {INSTALL}") from None
        self.lib = lib
        handle = ctypes.c_void_p()
        self._check(lib.cublasCreate_v2(ctypes.byref(handle)), "cublasCreate")
        self.handle = handle
        self._check(lib.cublasSetStream_v2(handle, ctypes.c_void_p(int(stream))), "cublasSetStream")
        f = lib.cublasGemmStridedBatchedEx
        f.argtypes = self.GEMM_ARGTYPES
        f.restype = _i
        self._gemm = f

    @staticmethod
    def _check(status: int, what: str) -> None:
        if status != 0:
            raise DeviceError(f"cuBLAS {what} failed with status {status}")

    def gemm(self, dtype: D.DType, m: int, n: int, k: int, a: int, lda: int, stride_a: int, b: int, ldb: int,
             stride_b: int, c: int, ldc: int, stride_c: int, batch: int) -> None:
        """Column-major ``C[i] = A[i] @ B[i]`` (``m x k`` times ``k x n``, strides in elements) for ``batch`` i,
        queued on the handle's stream."""
        dt, compute, scalar = TYPES[dtype]
        one, zero = scalar(1.0), scalar(0.0)
        self._check(self._gemm(self.handle, OP_N, OP_N, m, n, k, ctypes.byref(one), a, dt, lda, stride_a, b, dt, ldb,
                               stride_b, ctypes.byref(zero), c, dt, ldc, stride_c, batch, compute, GEMM_DEFAULT),
                    f"cublasGemmStridedBatchedEx ({dtype.name} {m}x{k}x{n}, batch {batch})")

    def set_workspace(self, ptr: int, nbytes: int) -> None:
        """Make the ``nbytes`` of device memory at ``ptr`` cuBLAS's workspace (it then allocates none of its own, which
        a graph capture would refuse). ``cublasSetStream`` resets it: the handle's stream is set once, before."""
        f = self.lib.cublasSetWorkspace_v2
        f.argtypes = self.WORKSPACE_ARGTYPES
        f.restype = _i
        self._check(f(self.handle, ptr, nbytes), f"cublasSetWorkspace ({nbytes} bytes)")

    def close(self) -> None:
        if self.handle:
            self.lib.cublasDestroy_v2(self.handle)
            self.handle = None
