"""A stand-in for the CUDA driver API and cuBLAS, for running the CUDA backend's host code without a GPU.

:class:`StandInDriver` answers the ``cu*`` calls the backend makes (discovery, contexts, streams, events, memory,
copies, module load, launch) with cuda-python's own result conventions and enums (``cuda.bindings.driver``'s
``CUresult`` ... are imported; no driver is loaded for that). Device memory lives in host memory: numpy byte arrays
at made-up device addresses that the host cannot dereference, so a host read of a device pointer fails instead of
working by accident. Work is executed when it is queued (one stream, in order), so ``cuStreamSynchronize`` has
nothing left to wait for.

Kernels: the backend hands NVRTC's real output (a CUBIN, or PTX) to ``cuModuleLoadData``. The stand-in checks that
every function asked for is in that image, and runs a launch as the kernel's OpenCL twin on PoCL: the same IR kernel
rendered by :class:`~tensorwire.backends.codegen.opencl.OpenCLRenderer`. It finds the IR kernel by the function's
name in a registry that :func:`install` fills by wrapping ``CUDARenderer.render`` (the CUDA runtime names kernels by
the hash of their source, so a name is one kernel). The launch's arguments are read back from ``kernelParams`` (an
array of pointers to the values, as the C ABI has it) in the order of the kernel's parameters.

:class:`StandInBlas` replaces cuBLAS's ``cublasGemmStridedBatchedEx`` (column-major, strides in elements) with
numpy: 16-bit floats are multiplied in float32 and rounded once, as cuBLAS's float32 compute type does.

The backend does not know about any of this: :func:`install` replaces ``runtime.load_driver`` and
``runtime.load_blas``, the two functions through which the backend reaches the driver and cuBLAS.
``python tests/backends/_cuda_standin.py worker --device cuda:0 --dispatcher ADDR`` runs a worker process with the
stand-ins installed (for tests on a real cluster); ``cuda:1`` gets a stand-in driver with two GPUs, and the NCCL
stand-in (``_nccl_standin.py``) lets two such workers run collectives over "NCCL" with each other.
"""

from __future__ import annotations

import bisect
import ctypes
import sys

import numpy as np
from cuda.bindings import driver as _real  # enums only; importing does not load libcuda

from tensorwire.backends.codegen.cuda import CUDARenderer
from tensorwire.protocol import dtypes as D

OK = _real.CUresult.CUDA_SUCCESS
BASE = 0x7A00_0000_0000  # device addresses start here (nothing of the host's lives there)
ALIGN = 256


class StandInDriver:
    """The driver API surface the CUDA backend calls, for ``gpus`` made-up GPUs of ``memory_bytes`` each."""

    CUresult = _real.CUresult
    CUdevice_attribute = _real.CUdevice_attribute
    CUstream_flags = _real.CUstream_flags
    CUevent_flags = _real.CUevent_flags
    CUfunction_attribute = _real.CUfunction_attribute

    def __init__(self, gpus: int = 1, name: str = "Stand-in GPU (PoCL)", capability=(8, 0),
                 memory_bytes: int = 1 << 30):
        self.gpus, self.name, self.capability, self.memory_bytes = gpus, name, capability, memory_bytes
        self.registry: dict = {}  # kernel name -> ir.Kernel (filled by install's render hook)
        self._mem: dict[int, np.ndarray] = {}  # device address -> its bytes
        self._starts: list[int] = []
        self._next = BASE
        self._host: dict[int, np.ndarray] = {}  # pinned host blocks, by address
        self._modules: dict[int, bytes] = {}
        self._functions: dict[int, object] = {}
        self._events = 0
        self.calls: dict[str, int] = {}
        self.launches = 0
        self.initialised = False
        self._cl = None

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    # -- errors, discovery, contexts, streams, events -----------------------------------------------------------
    def cuGetErrorString(self, err):
        return OK, f"stand-in: {getattr(err, 'name', err)}".encode()

    def cuInit(self, flags):
        self.initialised = True
        return (OK,)

    def cuDeviceGetCount(self):
        return OK, self.gpus

    def cuDeviceGet(self, i):
        if not 0 <= i < self.gpus:
            return _real.CUresult.CUDA_ERROR_INVALID_DEVICE, None
        return OK, i

    def cuDeviceGetName(self, length, dev):
        return OK, self.name.encode()[:length]

    def cuDeviceTotalMem(self, dev):
        return OK, self.memory_bytes

    def cuDeviceGetAttribute(self, attr, dev):
        a = self.CUdevice_attribute
        if attr == a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
            return OK, self.capability[0]
        if attr == a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
            return OK, self.capability[1]
        return _real.CUresult.CUDA_ERROR_INVALID_VALUE, 0

    def cuDevicePrimaryCtxRetain(self, dev):
        return OK, ("ctx", dev)

    def cuCtxSetCurrent(self, ctx):
        return (OK,)

    def cuStreamCreate(self, flags):
        return OK, 1

    def cuStreamSynchronize(self, stream):
        self._count("cuStreamSynchronize")
        return (OK,)

    def cuEventCreate(self, flags):
        self._events += 1
        return OK, self._events

    def cuEventRecord(self, ev, stream):
        return (OK,)

    def cuEventQuery(self, ev):
        return (OK,)

    def cuEventSynchronize(self, ev):
        return (OK,)

    def cuEventDestroy(self, ev):
        return (OK,)

    # -- memory ----------------------------------------------------------------------------------------------------
    def in_use(self) -> int:
        return sum(a.nbytes for a in self._mem.values())

    def cuMemAlloc(self, size):
        self._count("cuMemAlloc")
        if self.in_use() + size > self.memory_bytes:
            return _real.CUresult.CUDA_ERROR_OUT_OF_MEMORY, 0
        ptr = self._next
        self._next += -(-max(size, 1) // ALIGN) * ALIGN
        self._mem[ptr] = np.zeros(size, np.uint8)
        bisect.insort(self._starts, ptr)
        return OK, ptr

    def cuMemFree(self, ptr):
        self._count("cuMemFree")
        ptr = int(ptr)
        if ptr not in self._mem:
            return _real.CUresult.CUDA_ERROR_INVALID_VALUE,
        del self._mem[ptr]
        self._starts.remove(ptr)
        return (OK,)

    def cuMemGetInfo(self):
        return OK, self.memory_bytes - self.in_use(), self.memory_bytes

    def cuMemHostAlloc(self, size, flags):
        a = np.zeros(max(size, 1), np.uint8)
        self._host[a.ctypes.data] = a
        return OK, a.ctypes.data

    def cuMemFreeHost(self, ptr):
        self._host.pop(int(ptr))
        return (OK,)

    def view(self, ptr: int, nbytes: int) -> np.ndarray:
        """The bytes ``[ptr, ptr + nbytes)`` of device memory (a view); IndexError outside an allocation."""
        ptr = int(ptr)
        i = bisect.bisect_right(self._starts, ptr) - 1
        if i < 0:
            raise IndexError(f"device address {ptr:#x} is not allocated")
        start = self._starts[i]
        mem = self._mem[start]
        off = ptr - start
        if off + nbytes > mem.nbytes:
            raise IndexError(f"device range {ptr:#x}+{nbytes} overruns its allocation of {mem.nbytes} bytes")
        return mem[off:off + nbytes]

    @staticmethod
    def _host_bytes(ptr: int, n: int) -> np.ndarray:
        return np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(int(ptr))) if n else np.zeros(0, np.uint8)

    def cuMemcpyHtoDAsync(self, dst, src, n, stream):
        self._count("cuMemcpyHtoDAsync")
        self.view(dst, n)[:] = self._host_bytes(src, n)
        return (OK,)

    def cuMemcpyDtoHAsync(self, dst, src, n, stream):
        self._count("cuMemcpyDtoHAsync")
        self._host_bytes(dst, n)[:] = self.view(src, n)
        return (OK,)

    def cuMemcpyDtoDAsync(self, dst, src, n, stream):
        self.view(dst, n)[:] = self.view(src, n).copy()
        return (OK,)

    def cuMemsetD8Async(self, ptr, value, n, stream):
        self.view(ptr, n)[:] = value
        return (OK,)

    # -- modules and launches --------------------------------------------------------------------------------------
    def cuModuleLoadData(self, image):
        self._count("cuModuleLoadData")
        image = bytes(image)
        if not (image.startswith(b"\x7fELF") or b".entry" in image):
            return _real.CUresult.CUDA_ERROR_INVALID_IMAGE, None
        h = len(self._modules) + 1
        self._modules[h] = image
        return OK, h

    def cuModuleGetFunction(self, module, name: bytes):
        image = self._modules.get(module)
        k = self.registry.get(name.decode())
        if image is None or k is None or name not in image:
            return _real.CUresult.CUDA_ERROR_NOT_FOUND, None
        h = len(self._functions) + 1
        self._functions[h] = k
        return OK, h

    def cuFuncGetAttribute(self, attr, fn):
        return OK, 1024

    def opencl(self):
        """The PoCL device that runs the kernels' OpenCL twins (opened on first use)."""
        if self._cl is None:
            from tensorwire.backends.opencl import OpenCLBackend

            backend = OpenCLBackend()
            info = backend.devices()[0]
            if not info.available:
                raise RuntimeError(f"the CUDA stand-in runs kernels on OpenCL, which is not available: {info.reason}")
            self._cl = backend.open(0)
        return self._cl

    def prebuild_twins(self, kernel_lists: list) -> int:
        """Build the OpenCL twins of many kernels in a few programs (PoCL's cost is per program)."""
        return self.opencl().runtime.prebuild(kernel_lists)

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        self._count("cuLaunchKernel")
        k = self._functions[fn]
        if (gy, gz, by, bz) != (1, 1, 1, 1) or extra not in (0, None):
            return _real.CUresult.CUDA_ERROR_INVALID_VALUE,
        if k.local and bx != k.local:
            return _real.CUresult.CUDA_ERROR_INVALID_VALUE,  # a work-group kernel runs in blocks of exactly its size
        if gx * bx < k.grid:
            return _real.CUresult.CUDA_ERROR_INVALID_VALUE,  # the grid does not cover the kernel's items
        self.launches += 1
        from tensorwire.backends.codegen.opencl import OpenCLRenderer
        from tensorwire.backends.opencl.runtime import SCALAR_TYPES

        cuda_types = [ctypes.c_uint64] * (len(k.bufs) + (1 if k.can_raise else 0)) + [
            _SCALAR_CTYPES[CUDARenderer().scalar_type(s.dtype)] for s in k.scalars]
        slots = (ctypes.c_void_p * len(cuda_types)).from_address(int(params)) if cuda_types else []
        values = [t.from_address(slots[i]).value for i, t in enumerate(cuda_types)]
        dev = self.opencl()
        cl, rt = dev.cl, dev.runtime
        key = rt._key(k)
        rt._ensure([k], [key], 1)
        knl = rt._kernels[key][0]
        mf = cl.mem_flags
        copies, alive = [], []  # (an argument's memory object must outlive the launch: set_arg does not hold it)
        ptr_params = [(b.dtype.itemsize, b.out) for b in k.bufs] + ([(8, True)] if k.can_raise else [])
        nbytes_of = [int(np.prod(_buf_len(k, i))) * size for i, (size, _) in enumerate(ptr_params)]
        for i, ((_size, out), n) in enumerate(zip(ptr_params, nbytes_of)):
            host = self.view(values[i], n) if n else np.zeros(1, np.uint8)
            buf = cl.Buffer(dev.ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=np.ascontiguousarray(host))
            knl.set_arg(i, buf)
            alive.append(buf)
            if out and n:
                copies.append((host, buf))
        ocl = OpenCLRenderer()
        first = len(ptr_params)
        for j, s in enumerate(k.scalars):
            knl.set_arg(first + j, SCALAR_TYPES[ocl.scalar_type(s.dtype)](values[first + j]))
        cl.enqueue_nd_range_kernel(dev.queue, knl, (gx * bx,), (bx,))
        for host, buf in copies:
            cl.enqueue_copy(dev.queue, host, buf)
        dev.queue.finish()
        del alive
        return (OK,)


def _buf_len(k, i: int) -> int:
    """Elements parameter ``i`` of kernel ``k`` spans (the error slot has 2)."""
    return k.bufs[i].size if i < len(k.bufs) else 2


_SCALAR_CTYPES = {"unsigned char": ctypes.c_uint8, "signed char": ctypes.c_int8, "short": ctypes.c_int16,
                  "int": ctypes.c_int32, "long long": ctypes.c_int64, "float": ctypes.c_float,
                  "double": ctypes.c_double}


class StandInBlas:
    """``cublasGemmStridedBatchedEx`` (through the backend's :class:`~tensorwire.backends.cuda.cublas.Cublas`
    interface) on the stand-in's memory, with numpy."""

    def __init__(self, driver: StandInDriver, stream: int):
        self.driver, self.stream = driver, stream
        self.calls = 0

    def _matrix(self, ptr: int, rows: int, cols: int, ld: int, dt: np.dtype) -> np.ndarray:
        """The column-major ``rows x cols`` matrix at ``ptr`` with leading dimension ``ld``."""
        size = dt.itemsize
        span = ((cols - 1) * ld + rows) * size
        raw = self.driver.view(ptr, span)
        return np.ndarray((rows, cols), dt, buffer=raw, strides=(size, ld * size))

    def gemm(self, dtype, m, n, k, a, lda, stride_a, b, ldb, stride_b, c, ldc, stride_c, batch) -> None:
        self.calls += 1
        assert lda >= m and ldb >= k and ldc >= m, (lda, ldb, ldc, m, n, k)
        dt = dtype.np
        acc = np.float64 if dtype is D.float64 else np.float32
        size = dt.itemsize
        for i in range(batch):
            A = self._matrix(a + i * stride_a * size, m, k, lda, dt).astype(acc)
            B = self._matrix(b + i * stride_b * size, k, n, ldb, dt).astype(acc)
            self._matrix(c + i * stride_c * size, m, n, ldc, dt)[:] = (A @ B).astype(dt)

    def close(self) -> None:
        pass


def install(runtime, nccl_fail_count: int | None = None, **config) -> StandInDriver:
    """Make the CUDA backend's ``runtime`` module reach a new :class:`StandInDriver` (and :class:`StandInBlas`)
    instead of cuda-python's driver and cuBLAS, and its ``nccl`` module the NCCL stand-in
    (``_nccl_standin.StandInNccl``, on this driver's memory); returns the driver. Discovery is redone at the next
    call."""
    from tensorwire.backends.cuda import nccl

    if __package__:
        from ._nccl_standin import StandInNccl
    else:  # run as a script (a stand-in worker): this folder is on sys.path
        from _nccl_standin import StandInNccl

    drv = StandInDriver(**config)
    runtime.load_driver = lambda: drv
    runtime.load_blas = lambda stream: StandInBlas(drv, stream)
    drv.nccl = StandInNccl(drv, fail_count=nccl_fail_count)
    nccl.load_nccl = lambda: drv.nccl
    runtime._FOUND = None
    if not getattr(CUDARenderer.render, "_standin", False):
        real = CUDARenderer.render

        def render(self, kernels):
            for k in kernels:
                _REGISTRIES[-1][k.name] = k
            return real(self, kernels)
        render._standin = True
        CUDARenderer.render = render
    _REGISTRIES.append(drv.registry)
    return drv


_REGISTRIES: list[dict] = [{}]


def _worker(argv: list[str]) -> int:
    """A worker with the stand-ins installed: as many stand-in GPUs as ``--device cuda:N`` needs, and
    ``--standin-nccl-fail-count N`` (taken out of ``argv``) for the NCCL stand-in's injected failure."""
    from tensorwire.backends.cuda import runtime

    fail = None
    if "--standin-nccl-fail-count" in argv:
        i = argv.index("--standin-nccl-fail-count")
        fail = int(argv[i + 1])
        del argv[i:i + 2]
    device = argv[argv.index("--device") + 1] if "--device" in argv else "cuda:0"
    install(runtime, nccl_fail_count=fail, gpus=int(device.partition(":")[2] or 0) + 1)
    from tensorwire.cli import main

    return main(["worker", *argv])


if __name__ == "__main__":
    if sys.argv[1:2] != ["worker"]:
        raise SystemExit("usage: _cuda_standin.py worker --device cuda:0 --dispatcher ADDR [worker options]")
    sys.exit(_worker(sys.argv[2:]))
