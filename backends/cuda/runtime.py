"""The CUDA runtime: discovery through the driver API, device memory, NVRTC kernels on a stream, cuBLAS matmul.

Everything goes through cuda-python's driver API (``cuda.bindings.driver``, returned by :func:`load_driver`) and
the cuBLAS wrapper :func:`load_blas` returns; nothing is imported or loaded until discovery or a device needs it, so
the plugin imports on a host without cuda-python or a driver.

* **Discovery** (:func:`discover`): ``cuInit`` and the device queries; without cuda-python, a driver (``libcuda``)
  or a GPU, the reason is the error the bindings or the driver gave.
* **Memory**: device blocks from :class:`~.allocator.CachingAllocator`; a :class:`CUDABuffer` returns its block when
  the last reference drops. Uploads and downloads go through pinned staging blocks (``cuMemHostAlloc``, reused) and
  are queued on the device's stream; an upload returns as soon as its bytes are in pinned memory.
* **Kernels**: the kernel compiler lowers each fragment (:data:`LOWERING`: a GPU's work groups and tiles, matmul to
  cuBLAS); the CUDA C renderer's source is compiled by NVRTC to a CUBIN for the device's own ``sm_XY`` (PTX for the
  newest ``compute_XY`` NVRTC knows when it does not know the GPU: the driver compiles that), cached on disk by
  :class:`~..codegen.cache.KernelCache` under (source, architecture, NVRTC version, options). Each distinct kernel is
  loaded once per process (``cuModuleLoadData``/``cuModuleGetFunction``) and launched with ``cuLaunchKernel`` on the
  stream. A kernel that can raise (an index out of range, an integer division by zero) has its error slot read back
  after its launch, which waits for the stream there.
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import logging
import math
import threading
from collections import OrderedDict
from types import SimpleNamespace

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DeviceError

from ..base import Device, Step
from ..codegen.cache import KernelCache, KernelCompileError
from ..codegen.cuda import NVRTC_OPTIONS, CUDARenderer, compile_cubin, compile_ptx, nvrtc_version, supported_archs
from ..codegen.program import StepRunners, build_runner, host_step_call, kernel_error
from ..opencl.runtime import LOWERING_GPU
from . import cublas
from .allocator import CachingAllocator, DriverOutOfMemory, size_class

log = logging.getLogger("tensorwire.cuda")

INSTALL = 'pip install -e ".[cuda]" (cuda-python, NVRTC and cuBLAS wheels)'

#: how the kernel compiler lowers for a CUDA GPU: work-group reductions of 256 threads, 16 x 16 tiles, and matmul
#: (batched, and so conv's im2col + matmul) as a host step that calls cuBLAS
LOWERING = dataclasses.replace(LOWERING_GPU, host_ops=frozenset({"matmul"}))
#: the same with matmul as a compiled kernel (integer and bool matmuls, or no cuBLAS)
LOWERING_KERNELS = LOWERING_GPU

#: threads per block for kernels that do not fix their work-group size
BLOCK = 256
#: the largest piece an upload or download stages through pinned memory at once
STAGING_CHUNK = 16 << 20
#: pinned staging memory kept for reuse, at most
STAGING_LIMIT = 256 << 20

#: the ctypes type of a kernel scalar parameter, by its CUDA C type (the renderer's ``scalar_type``)
SCALAR_CTYPES = {"unsigned char": ctypes.c_uint8, "signed char": ctypes.c_int8, "short": ctypes.c_int16,
                 "int": ctypes.c_int32, "long long": ctypes.c_int64, "float": ctypes.c_float,
                 "double": ctypes.c_double}


# -- the APIs the backend calls (tests substitute both) -----------------------------------------------------------

def load_driver():
    """cuda-python's driver API module (``cuda.bindings.driver``); raises ImportError without cuda-python."""
    from cuda.bindings import driver  # noqa: PLC0415 - optional dependency

    return driver


def load_blas(stream: int):
    """A cuBLAS handle on ``stream`` (raises :class:`DeviceError` when cuBLAS is not installed)."""
    return cublas.Cublas(stream)


class DriverError(DeviceError):
    """A CUDA driver call failed (the message names the call and the driver's error)."""


def _error_text(drv, err) -> str:
    try:
        e2, s = drv.cuGetErrorString(err)
        text = s.decode(errors="replace") if isinstance(s, bytes) and e2 == drv.CUresult.CUDA_SUCCESS else ""
    except Exception:  # noqa: BLE001 - only for the message
        text = ""
    name = getattr(err, "name", str(err))
    return f"{name}: {text}" if text else name


def _call(drv, what: str, result):
    """The values of a driver call's result tuple ``(CUresult, *values)``, or :class:`DriverError`."""
    err = result[0]
    if err != drv.CUresult.CUDA_SUCCESS:
        raise DriverError(f"{what} failed ({_error_text(drv, err)})")
    return result[1] if len(result) == 2 else result[1:]


# -- discovery ----------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class GPU:
    """One CUDA device as discovery found it."""

    index: int
    handle: object
    name: str
    memory_bytes: int
    capability: tuple[int, int]


class Found:
    """The result of discovery: the GPUs, or why there are none."""

    def __init__(self, gpus: list, reason: str, driver=None):
        self.gpus, self.reason, self.driver = gpus, reason, driver


_FOUND: Found | None = None
_FOUND_LOCK = threading.Lock()


def discover(refresh: bool = False) -> Found:
    """The CUDA devices of this host (cached for the process)."""
    global _FOUND
    with _FOUND_LOCK:
        if _FOUND is None or refresh:
            _FOUND = _discover()
        return _FOUND


def _discover() -> Found:
    try:
        drv = load_driver()
    except ImportError as e:
        return Found([], f"cuda-python is not installed ({e}); {INSTALL}")
    try:
        (err,) = drv.cuInit(0)
    except Exception as e:  # noqa: BLE001 - no libcuda: cuda.pathfinder's DynamicLibNotFoundError and the like
        return Found([], f"the CUDA driver is not available ({type(e).__name__}: {' '.join(str(e).split())})")
    if err != drv.CUresult.CUDA_SUCCESS:
        return Found([], f"cuInit failed ({_error_text(drv, err)})")
    try:
        n = _call(drv, "cuDeviceGetCount", drv.cuDeviceGetCount())
        if n == 0:
            return Found([], "the CUDA driver reports no GPU (cuDeviceGetCount = 0)")
        gpus = []
        attr = drv.CUdevice_attribute
        for i in range(int(n)):
            dev = _call(drv, "cuDeviceGet", drv.cuDeviceGet(i))
            name = _call(drv, "cuDeviceGetName", drv.cuDeviceGetName(256, dev))
            name = name.split(b"\0", 1)[0].decode(errors="replace").strip() if isinstance(name, bytes) else str(name)
            mem = _call(drv, "cuDeviceTotalMem", drv.cuDeviceTotalMem(dev))
            major = _call(drv, "cuDeviceGetAttribute", drv.cuDeviceGetAttribute(
                attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
            minor = _call(drv, "cuDeviceGetAttribute", drv.cuDeviceGetAttribute(
                attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
            gpus.append(GPU(i, dev, name, int(mem), (int(major), int(minor))))
    except DriverError as e:
        return Found([], str(e))
    return Found(gpus, "", drv)


def compile_target(capability: tuple[int, int], archs: list[int]) -> tuple[str, str]:
    """``(arch, kind)``: ``sm_XY`` CUBIN for the GPU's own capability when NVRTC knows it, else PTX for the newest
    ``compute_XY`` NVRTC knows that the GPU runs (the driver compiles PTX for newer GPUs)."""
    cc = capability[0] * 10 + capability[1]
    if cc in archs:
        return f"sm_{cc}", "cubin"
    older = [a for a in archs if a <= cc]
    if not older:
        raise KernelCompileError(f"NVRTC compiles for {', '.join(f'sm_{a}' for a in archs)}; this GPU is "
                                 f"sm_{cc}, older than all of them")
    return f"compute_{max(older)}", "ptx"


# -- buffers ------------------------------------------------------------------------------------------------------

class CUDABuffer:
    """A device buffer: an allocator block (``ptr``, ``size``) holding a tensor of ``shape`` and ``dtype``."""

    __slots__ = ("ptr", "size", "shape", "dtype", "nbytes", "_pool", "__weakref__")

    def __init__(self, ptr: int, size: int, shape: tuple, dtype: D.DType, nbytes: int, pool):
        self.ptr, self.size, self.shape, self.dtype, self.nbytes, self._pool = ptr, size, shape, dtype, nbytes, pool

    def __del__(self):
        if self._pool is not None:
            self._pool.free(self.ptr, self.size, self.nbytes)

    def __repr__(self) -> str:
        return f"CUDABuffer({self.dtype.name}{list(self.shape)} at {self.ptr:#x})"


# -- the runtime --------------------------------------------------------------------------------------------------

class CUDARuntime:
    """One GPU's context, stream, memory, kernels and cuBLAS handle. Calls come from one thread (the worker's)."""

    target = "cuda"
    MAX_KERNELS = 1 << 15

    def __init__(self, drv, gpu: GPU):
        self.drv, self.gpu = drv, gpu
        self.ctx = _call(drv, "cuDevicePrimaryCtxRetain", drv.cuDevicePrimaryCtxRetain(gpu.handle))
        _call(drv, "cuCtxSetCurrent", drv.cuCtxSetCurrent(self.ctx))
        self.stream = _call(drv, "cuStreamCreate", drv.cuStreamCreate(
            int(drv.CUstream_flags.CU_STREAM_NON_BLOCKING)))
        self.pool = CachingAllocator(self._driver_alloc, self._driver_free, self.synchronize,
                                     f"cuda:{gpu.index} ({gpu.name})")
        self.renderer = CUDARenderer()
        self.arch, self.kind = compile_target(gpu.capability, supported_archs())
        major, minor = nvrtc_version()
        self.cache = KernelCache("cuda", f"{self.arch} {self.kind} nvrtc {major}.{minor} {' '.join(NVRTC_OPTIONS)}")
        self._kernels: OrderedDict = OrderedDict()  # kernel identity -> (CUfunction, max threads per block)
        self._modules: list = []
        self.builds = 0  # modules built or loaded by this runtime (for tests and benchmarks)
        self._staging_free: dict[int, list[int]] = {}
        self._staging_busy: list = []  # (event, host pointer, size) of copies still in flight
        self._staging_bytes = 0
        self._err = self.empty((2,), D.int64)
        _call(drv, "cuMemsetD8Async", drv.cuMemsetD8Async(self._err.ptr, 0, 16, self.stream))
        self._err_host = self._pinned(16)
        self.blas = None
        try:
            self.blas = load_blas(int(self.stream))
        except DeviceError as e:
            log.warning("cuda:%d: matmul runs as compiled kernels: %s", gpu.index, e)

    # memory -------------------------------------------------------------------------------------------
    def _driver_alloc(self, size: int) -> int:
        drv = self.drv
        err, ptr = drv.cuMemAlloc(size)
        if err == drv.CUresult.CUDA_ERROR_OUT_OF_MEMORY:
            raise DriverOutOfMemory(_error_text(drv, err))
        if err != drv.CUresult.CUDA_SUCCESS:
            raise DriverError(f"cuMemAlloc({size}) failed ({_error_text(drv, err)})")
        return int(ptr)

    def _driver_free(self, ptr: int) -> None:
        _call(self.drv, "cuMemFree", self.drv.cuMemFree(ptr))

    def empty(self, shape, dtype: D.DType) -> CUDABuffer:
        shape = tuple(int(n) for n in shape)
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes == 0:
            return CUDABuffer(0, 0, shape, dtype, 0, None)
        ptr, size = self.pool.malloc(nbytes)
        return CUDABuffer(ptr, size, shape, dtype, nbytes, self.pool)

    def _pinned(self, size: int) -> int:
        return int(_call(self.drv, "cuMemHostAlloc", self.drv.cuMemHostAlloc(size, 0)))

    def _staging(self, nbytes: int) -> tuple[int, int]:
        """A pinned block of at least ``nbytes`` (at most :data:`STAGING_CHUNK`) no queued copy still uses."""
        size = size_class(nbytes)
        self._reclaim(wait=False)
        free = self._staging_free.get(size)
        if not free and self._staging_bytes + size > STAGING_LIMIT and self._staging_busy:
            self._reclaim(wait=True)
            free = self._staging_free.get(size)
        if free:
            return free.pop(), size
        if self._staging_bytes + size > STAGING_LIMIT:  # blocks of other sizes: give them back
            for s, ptrs in self._staging_free.items():
                for p in ptrs:
                    _call(self.drv, "cuMemFreeHost", self.drv.cuMemFreeHost(p))
                    self._staging_bytes -= s
            self._staging_free.clear()
        self._staging_bytes += size
        return self._pinned(size), size

    def _reclaim(self, wait: bool) -> None:
        drv, keep = self.drv, []
        for ev, ptr, size in self._staging_busy:
            done = wait or drv.cuEventQuery(ev)[0] == drv.CUresult.CUDA_SUCCESS
            if done:
                if wait:
                    _call(drv, "cuEventSynchronize", drv.cuEventSynchronize(ev))
                _call(drv, "cuEventDestroy", drv.cuEventDestroy(ev))
                self._staging_free.setdefault(size, []).append(ptr)
            else:
                keep.append((ev, ptr, size))
        self._staging_busy = keep

    def upload(self, host: np.ndarray) -> CUDABuffer:
        """A buffer holding the C-contiguous array ``host``; the copy is queued (the host array may change after)."""
        drv = self.drv
        buf = self.empty(host.shape, D.from_numpy(host.dtype))
        src = host.ctypes.data
        for start in range(0, buf.nbytes, STAGING_CHUNK):
            n = min(STAGING_CHUNK, buf.nbytes - start)
            ptr, size = self._staging(n)
            ctypes.memmove(ptr, src + start, n)
            _call(drv, "cuMemcpyHtoDAsync", drv.cuMemcpyHtoDAsync(buf.ptr + start, ptr, n, self.stream))
            ev = _call(drv, "cuEventCreate", drv.cuEventCreate(int(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING)))
            _call(drv, "cuEventRecord", drv.cuEventRecord(ev, self.stream))
            self._staging_busy.append((ev, ptr, size))
        return buf

    def download(self, buf: CUDABuffer) -> np.ndarray:
        """The buffer's contents (waits for the work queued before)."""
        drv = self.drv
        out = np.empty(buf.shape, buf.dtype.np)
        dst = out.ctypes.data
        for start in range(0, buf.nbytes, STAGING_CHUNK):
            n = min(STAGING_CHUNK, buf.nbytes - start)
            ptr, size = self._staging(n)
            try:
                _call(drv, "cuMemcpyDtoHAsync", drv.cuMemcpyDtoHAsync(ptr, buf.ptr + start, n, self.stream))
                self.synchronize()
                ctypes.memmove(dst + start, ptr, n)
            finally:
                self._staging_free.setdefault(size, []).append(ptr)
        return out

    def zero(self, buf: CUDABuffer) -> None:
        if buf.nbytes:
            _call(self.drv, "cuMemsetD8Async", self.drv.cuMemsetD8Async(buf.ptr, 0, buf.nbytes, self.stream))

    def synchronize(self) -> None:
        _call(self.drv, "cuStreamSynchronize", self.drv.cuStreamSynchronize(self.stream))

    def memory(self) -> dict:
        out = self.pool.stats()
        out["total_bytes"] = self.gpu.memory_bytes
        out["pinned_staging_bytes"] = self._staging_bytes
        return out

    # kernels ------------------------------------------------------------------------------------------
    def _key(self, k) -> str:
        """A kernel's identity: its source (preamble included) under a neutral name."""
        return self.renderer.render([dataclasses.replace(k, name="tw_kernel")])

    def _compile(self, source: str, kernels) -> bytes:
        def build(src_path: str) -> bytes:
            if self.kind == "cubin":
                return compile_cubin(source, self.arch, name=src_path)
            return compile_ptx(source, self.arch, name=src_path)
        return self.cache.get_or_build_bytes(source, ".cu", f".{self.kind}", build, kernels)

    def _ensure(self, kernels: list, keys: list, per_module: int) -> int:
        """Compile and load the kernels not loaded yet (by identity), ``per_module`` to a module; returns the
        modules built. Kernels are named by the hash of their identity, so a module's source depends only on
        what it holds (and the disk cache finds it again)."""
        drv = self.drv
        missing: dict = {}
        for k, key in zip(kernels, keys):
            if key not in self._kernels and key not in missing:
                missing[key] = dataclasses.replace(k, name="k" + hashlib.sha256(key.encode()).hexdigest()[:20])
        items = list(missing.items())
        for start in range(0, len(items), per_module):
            group = items[start:start + per_module]
            image = self._compile(self.renderer.render([k for _, k in group]), [k for _, k in group])
            module = _call(drv, "cuModuleLoadData", drv.cuModuleLoadData(image))
            self._modules.append(module)
            self.builds += 1
            for key, k in group:
                fn = _call(drv, "cuModuleGetFunction", drv.cuModuleGetFunction(module, k.name.encode()))
                limit = _call(drv, "cuFuncGetAttribute", drv.cuFuncGetAttribute(
                    drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn))
                self._kernels[key] = (fn, int(limit))
        while len(self._kernels) > self.MAX_KERNELS:
            self._kernels.popitem(last=False)
        return -(-len(items) // per_module)

    def build(self, kernels: list) -> dict:
        """``{kernel name: launcher(buffers, scalars)}``; kernels loaded for an earlier fragment are reused, the
        rest are compiled together in one module."""
        keys = [self._key(k) for k in kernels]
        self._ensure(kernels, keys, max(1, len(kernels)))
        found = []
        for key in keys:
            self._kernels.move_to_end(key)
            found.append(self._kernels[key])
        return {k.name: self._launcher(k, *entry) for k, entry in zip(kernels, found)}

    def prebuild(self, kernel_lists: list, per_module: int = 256) -> int:
        """Compile and load the kernels of many fragments in a few modules (NVRTC's fixed cost per program dominates
        small kernels), so that later :meth:`build` calls find them; returns the modules built."""
        flat = [k for ks in kernel_lists for k in ks]
        return self._ensure(flat, [self._key(k) for k in flat], per_module)

    def _launcher(self, k, fn, limit: int):
        drv, stream = self.drv, self.stream
        if k.local and k.local > limit:
            raise KernelCompileError(f"kernel {k.name} needs blocks of {k.local} threads; {self.gpu.name} runs at "
                                     f"most {limit} for it")
        block = k.local or min(BLOCK, limit)
        blocks = -(-k.grid // block)
        nbuf = len(k.bufs)
        params = [ctypes.c_uint64(0) for _ in range(nbuf)]
        if k.can_raise:
            params.append(ctypes.c_uint64(self._err.ptr))
        scalars = [SCALAR_CTYPES[self.renderer.scalar_type(s.dtype)]() for s in k.scalars]
        params += scalars
        argv = (ctypes.c_void_p * max(1, len(params)))(*[ctypes.addressof(p) for p in params])
        argv_ptr = ctypes.addressof(argv)
        err_host = self._err_host

        def launch(bufs, values):
            for p, b in zip(params, bufs):
                p.value = b.ptr
            for p, v in zip(scalars, values):
                p.value = v
            if blocks == 0:
                return
            _call(drv, "cuLaunchKernel", drv.cuLaunchKernel(fn, blocks, 1, 1, block, 1, 1, 0, stream, argv_ptr, 0))
            if k.can_raise:
                self._check_kernel_error(k, err_host)
        launch.keep = (params, argv)  # the argument storage lives as long as the launcher
        return launch

    def _check_kernel_error(self, k, err_host: int) -> None:
        drv = self.drv
        _call(drv, "cuMemcpyDtoHAsync", drv.cuMemcpyDtoHAsync(err_host, self._err.ptr, 16, self.stream))
        self.synchronize()
        code, detail = (int(x) for x in (ctypes.c_int64 * 2).from_address(err_host))
        if code:
            _call(drv, "cuMemsetD8Async", drv.cuMemsetD8Async(self._err.ptr, 0, 16, self.stream))
            raise kernel_error(k, code, detail)


# -- the device ---------------------------------------------------------------------------------------------------

class CUDADevice(Device):
    """One CUDA GPU: buffers are :class:`CUDABuffer`; fragments run as fused kernels, matmuls on cuBLAS."""

    MAX_STEP_RUNNERS = 4096

    def __init__(self, backend, gpu: GPU, drv):
        self.backend, self.index, self.gpu = backend, gpu.index, gpu
        self.runtime = CUDARuntime(drv, gpu)
        self.lowering_options = LOWERING if self.runtime.blas is not None else LOWERING_KERNELS
        self._kernels_only = SimpleNamespace(runtime=self.runtime, lowering_options=LOWERING_KERNELS,
                                             host_call=self.host_call)
        self._step_runners = StepRunners(self, self.MAX_STEP_RUNNERS)

    # buffers ------------------------------------------------------------------------------------------
    def upload(self, array) -> CUDABuffer:
        a = np.asarray(array)
        return self.runtime.upload(a if a.flags.c_contiguous else np.ascontiguousarray(a))

    def download(self, buf: CUDABuffer) -> np.ndarray:
        return self.runtime.download(buf)

    def free(self, buf) -> None:
        """Nothing to do: the block returns to the pool when the last reference drops."""

    def nbytes(self, buf: CUDABuffer) -> int:
        return buf.nbytes

    def meta(self, buf: CUDABuffer):
        return buf.shape, buf.dtype

    def synchronize(self) -> None:
        self.runtime.synchronize()

    def memory(self) -> dict:
        return self.runtime.memory()

    def empty_cache(self) -> None:
        """Give cached blocks back to the driver (``torch.cuda.empty_cache``)."""
        self.runtime.pool.empty_cache()

    def collective_transport(self):
        """NCCL for collectives among CUDA devices (:mod:`.nccl`), or None when NCCL does not load."""
        from .nccl import transport_for

        return transport_for(self)

    # running ------------------------------------------------------------------------------------------
    def runner(self, plan, keep):
        return build_runner(self, plan, keep)

    def host_call(self, step: Step):
        """A callable for a host step: matmul on cuBLAS (a compiled kernel for dtypes cuBLAS lacks), or the
        worker's own ops (``const``, ``hub_tensor``)."""
        if step.op == "matmul":
            if self.runtime.blas is not None and cublas.supports(step.dtype) and all(
                    m[1] == step.dtype for m in step.in_meta):
                return lambda args, dyn, frames: self._matmul(args[0], args[1], step.shape)
            return self._single_step(step, self._kernels_only)
        from ..executor import WORKER_OPS
        if step.op not in WORKER_OPS:
            raise DeviceError(f"the cuda backend has no host kernel for {step.op!r}")
        return host_step_call(self, step)

    def _single_step(self, step: Step, device):
        """``call(args, dyn, frames)`` running one step through ``device``'s lowering."""
        slots = list(dict.fromkeys(step.ins))
        st = Step(step.op, tuple(slots.index(x) for x in step.ins), dict(step.attrs), tuple(step.shape), step.dtype,
                  len(slots), 0, in_meta=step.in_meta)
        run = build_runner(device, SimpleNamespace(program=SimpleNamespace(steps=[st])), frozenset({len(slots)}))

        def call(args, dyn, frames):
            env = [args[step.ins.index(x)] for x in slots] + [None]
            run(env, None, frames)
            return env[-1]
        return call

    def _matmul(self, a: CUDABuffer, b: CUDABuffer, shape) -> CUDABuffer:
        """``a @ b`` with numpy's broadcasting (1-D operands as torch) on cuBLAS: one strided-batched gemm when
        the broadcast batch offsets of both operands are arithmetic progressions, else one gemm per batch."""
        rt = self.runtime
        out = rt.empty(shape, a.dtype)
        sa = a.shape if len(a.shape) >= 2 else (1, *a.shape)
        sb = b.shape if len(b.shape) >= 2 else (*b.shape, 1)
        m, k, n = sa[-2], sa[-1], sb[-1]
        if out.nbytes == 0:
            return out
        if k == 0:
            rt.zero(out)
            return out
        batch = np.broadcast_shapes(sa[:-2], sb[:-2])
        nb = math.prod(batch)
        ia = np.broadcast_to(np.arange(math.prod(sa[:-2])).reshape(sa[:-2]), batch).reshape(-1)
        ib = np.broadcast_to(np.arange(math.prod(sb[:-2])).reshape(sb[:-2]), batch).reshape(-1)
        size = a.dtype.itemsize
        # row-major C = A @ B is column-major C^T = B^T @ A^T: cuBLAS's (m, n, k) = (n, m, k), operands swapped
        steps_a, steps_b = np.diff(ia), np.diff(ib)
        if nb == 1 or ((steps_a == steps_a[0]).all() and (steps_b == steps_b[0]).all()):
            da = int(steps_a[0]) if nb > 1 else 0
            db = int(steps_b[0]) if nb > 1 else 0
            rt.blas.gemm(a.dtype, n, m, k, b.ptr + int(ib[0]) * k * n * size, n, db * k * n,
                         a.ptr + int(ia[0]) * m * k * size, k, da * m * k, out.ptr, n, m * n, nb)
        else:
            for i in range(nb):
                rt.blas.gemm(a.dtype, n, m, k, b.ptr + int(ib[i]) * k * n * size, n, 0,
                             a.ptr + int(ia[i]) * m * k * size, k, 0, out.ptr + i * m * n * size, n, 0, 1)
        return out

    def run_step(self, step: Step, args: list, attrs: dict):
        """One step on its own (the executor's step-by-step mode): lowered alone, cached by its structure."""
        return self._step_runners.run(step, args, attrs)
