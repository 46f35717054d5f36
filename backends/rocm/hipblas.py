"""hipBLAS through hip-python: the one call the ROCm backend makes, ``hipblasGemmStridedBatchedEx``.

hip-python's ``hip.hipblas`` opens ``libhipblas.so`` (part of a ROCm install, not of the wheel) on first use;
:func:`unavailable` says whether it is there before a device opens. hipBLAS is column-major like cuBLAS, and
:class:`HipBlas` takes the same ``gemm`` arguments as the CUDA backend's ``Cublas``, so the shared device
(:class:`~..gpu_runtime.GPUDevice`) computes a row-major ``C = A @ B`` as the column-major ``C^T = B^T A^T`` on
either. Compute types follow PyTorch's defaults: float32 in float32, float64 in float64, float16 and bfloat16
accumulate in float32 and round the result once. The enums are those of the pinned hip-python (ROCm 7's hipBLAS:
``hipDataType`` and ``hipblasComputeType_t``).
"""

from __future__ import annotations

import ctypes

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DeviceError

#: the library hip-python's hipblas module opens
LIBRARY = "libhipblas.so"
INSTALL = "install ROCm's hipBLAS (libhipblas.so, e.g. the hipblas package of AMD's ROCm repository)"

#: hipDataType and hipblasComputeType_t member names of each dtype hipBLAS multiplies, and the ctypes type of
#: alpha/beta
TYPES = {D.float32: ("HIP_R_32F", "HIPBLAS_COMPUTE_32F", ctypes.c_float),
         D.float64: ("HIP_R_64F", "HIPBLAS_COMPUTE_64F", ctypes.c_double),
         D.float16: ("HIP_R_16F", "HIPBLAS_COMPUTE_32F", ctypes.c_float),
         D.bfloat16: ("HIP_R_16BF", "HIPBLAS_COMPUTE_32F", ctypes.c_float)}


def supports(dtype: D.DType) -> bool:
    """Whether hipBLAS multiplies ``dtype`` (integer and bool matmuls run as compiled kernels)."""
    return dtype in TYPES


def unavailable() -> str | None:
    """None when ``libhipblas.so`` loads here, else why not."""
    try:
        ctypes.CDLL(LIBRARY)
    except OSError as e:
        return f"hipBLAS is not available ({e}); {INSTALL}"
    return None


class HipBlas:
    """One hipBLAS handle bound to a stream (create it with the device current)."""

    def __init__(self, stream: int):
        why = unavailable()
        if why:
            raise DeviceError(why)
        try:
            from hip import hip, hipblas  # lazy: hip-python, the optional [rocm] extra (~300 ms to import)
        except ImportError as e:
            raise DeviceError(f"hipBLAS is not available ({e}); pip install -e \".[rocm]\"") from None
        self.lib = hipblas
        status, handle = hipblas.hipblasCreate()
        self._check(status, "hipblasCreate")
        self.handle = handle
        self._check(hipblas.hipblasSetStream(handle, int(stream))[0], "hipblasSetStream")
        self._types = {dt: (getattr(hip.hipDataType, t), getattr(hipblas.hipblasComputeType_t, c), s)
                       for dt, (t, c, s) in TYPES.items()}
        self._op_n = hipblas.hipblasOperation_t.HIPBLAS_OP_N
        self._algo = hipblas.hipblasGemmAlgo_t.HIPBLAS_GEMM_DEFAULT

    def _check(self, status, what: str) -> None:
        if status != self.lib.hipblasStatus_t.HIPBLAS_STATUS_SUCCESS:
            raise DeviceError(f"hipBLAS {what} failed with {getattr(status, 'name', status)}")

    def gemm(self, dtype: D.DType, m: int, n: int, k: int, a: int, lda: int, stride_a: int, b: int, ldb: int,
             stride_b: int, c: int, ldc: int, stride_c: int, batch: int) -> None:
        """Column-major ``C[i] = A[i] @ B[i]`` (``m x k`` times ``k x n``, strides in elements) for ``batch`` i,
        queued on the handle's stream."""
        dt, compute, scalar = self._types[dtype]
        one, zero = scalar(1.0), scalar(0.0)
        op = self._op_n
        (status,) = self.lib.hipblasGemmStridedBatchedEx(
            self.handle, op, op, m, n, k, ctypes.addressof(one), a, dt, lda, stride_a, b, dt, ldb, stride_b,
            ctypes.addressof(zero), c, dt, ldc, stride_c, batch, compute, self._algo)
        self._check(status, f"hipblasGemmStridedBatchedEx ({dtype.name} {m}x{k}x{n}, batch {batch})")

    def close(self) -> None:
        if self.handle is not None:
            self.lib.hipblasDestroy(self.handle)
            self.handle = None
