"""The OpenCL runtime: tinygrad's three parts over pyopencl, and the device (see :mod:`..compiled_device`).

Every op becomes a kernel (the device has no host ops), rendered by
:class:`~tensorwire.backends.codegen.opencl.OpenCLRenderer`; the kernel cache keeps each program's source (a
compile error names the file) while the driver's own cache (PoCL's ``POCL_CACHE_DIR``) keeps the binaries.
Discovery is :mod:`.discovery`.
"""

from __future__ import annotations

import math
import os
import threading

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import OutOfMemory

from ..codegen.cache import KernelCache, KernelCompileError
from ..codegen.opencl import OpenCLRenderer
from ..codegen.presets import GPU as LOWERING_GPU
from ..codegen.presets import OPENCL_CPU as LOWERING
from ..compiled_device import Allocations, CompiledDevice, CountedBuffer, KernelModules, one_line
from ..kernel_errors import ErrorSlots
from .discovery import BUILD_OPTIONS, PLATFORM_ENV, SIMULATORS, import_cl

#: test hook (tests/faults/test_worker_restart.py): the first N programs this process builds fail where PoCL 3.0's
#: second program did, at ``clCreateKernel`` (asked for a name the program lacks: the driver's own INVALID_KERNEL_NAME)
FAIL_BUILDS_ENV = "TENSORWIRE_OPENCL_FAIL_BUILDS"
#: the status codes of a failed allocation
OOM_CODES = ("MEM_OBJECT_ALLOCATION_FAILURE", "OUT_OF_RESOURCES", "OUT_OF_HOST_MEMORY", "INVALID_BUFFER_SIZE")

#: the numpy type of a kernel scalar parameter, by its OpenCL C type (the renderer's ``scalar_type`` of its dtype)
SCALAR_TYPES = {"uchar": np.uint8, "char": np.int8, "short": np.int16, "ushort": np.uint16, "int": np.int32,
                "uint": np.uint32, "long": np.int64, "ulong": np.uint64, "float": np.float32, "double": np.float64}


def _is_oom(cl, e: Exception) -> bool:
    """Whether ``e`` says the device ran out of memory (pyopencl's MemoryError, or a status code of
    :data:`OOM_CODES`)."""
    code = getattr(e, "code", None)
    if code is None and e.args and hasattr(e.args[0], "code"):
        code = e.args[0].code
    return isinstance(e, cl.MemoryError) or code in {getattr(cl.status_code, n, None) for n in OOM_CODES} - {None}


_FAULTS: list[int] = []


def _injected_fault() -> bool:
    """Whether the kernels of the program just built are to fail their creation (:data:`FAIL_BUILDS_ENV`)."""
    if not _FAULTS:
        _FAULTS.append(int(os.environ.get(FAIL_BUILDS_ENV) or 0))
    _FAULTS[0] -= 1
    return _FAULTS[0] >= 0


# -- the runtime: allocator, compiler, program --------------------------------------------------------------------

class CLRuntime(KernelModules):
    """One OpenCL device's buffers (:class:`~..compiled_device.CountedBuffer` over ``cl.Buffer``) and kernels on
    one in-order queue. A ``cl.Kernel`` is shared by every fragment that uses it and a launch sets its arguments
    then enqueues it, so launches come from one thread at a time (the worker runs everything on one).

    A driver's fixed cost per build dominates small kernels (PoCL: ~0.1 s a program, much the same for one kernel
    or a hundred): :meth:`prebuild` puts up to 512 in a program. PoCL's own cache makes the next process's builds
    cheap (a 512-kernel program: 1.1 s from source, 0.04 s from its cache), so only sources are stored here."""

    target = "opencl"
    PER_MODULE = 512

    def __init__(self, cl, platform, device, ctx, queue):
        super().__init__()
        self.cl, self.platform, self.device, self.ctx, self.queue = cl, platform, device, ctx, queue
        self.cpu = bool(device.type & cl.device_type.CPU)
        self.renderer = OpenCLRenderer(own_math=self.cpu)  # CPU drivers: our float sin/exp (codegen/opencl_math.py)
        cid = " | ".join(str(x).strip() for x in (platform.name, platform.version, device.name, device.version,
                                                  device.driver_version, device.opencl_c_version))
        self.options = list(BUILD_OPTIONS)
        if any(s in platform.name.lower() for s in SIMULATORS):
            # Oclgrind checks the code as written; its uninitialised-value checker also stops at the LLVM
            # `freeze` instructions optimisation introduces
            self.options.append("-cl-opt-disable")
        self.cache = KernelCache("opencl", f"{cid} {' '.join(self.options)}")
        self.guard = threading.Lock()  # (the kernel cache's entries: identity -> (cl.Kernel, work-group size limit))
        self.max_alloc = int(device.max_mem_alloc_size)
        self.allocations = Allocations(device.name.strip(), int(device.global_mem_size), self.max_alloc)
        self.units = max(1, int(device.max_compute_units))
        self.errors = ErrorSlots(self._error_blocks)

    # allocator ----------------------------------------------------------------------------------------
    def alloc(self, shape: tuple, dtype: D.DType, host: np.ndarray | None = None) -> CountedBuffer:
        cl, flags = self.cl, self.cl.mem_flags.READ_WRITE

        def make(nbytes: int):
            try:
                if host is not None and nbytes:
                    return cl.Buffer(self.ctx, flags | cl.mem_flags.COPY_HOST_PTR, hostbuf=host)
                return cl.Buffer(self.ctx, flags, max(nbytes, 1))
            except Exception as e:
                if _is_oom(cl, e):
                    raise OutOfMemory(f"the OpenCL device could not allocate {nbytes} bytes for {dtype.name}"
                                      f"{list(shape)}: {e}") from None
                raise
        return self.allocations.allocate(shape, dtype, make)

    def empty(self, shape, dtype: D.DType) -> CountedBuffer:
        return self.alloc(tuple(shape), dtype)

    def upload(self, host: np.ndarray) -> CountedBuffer:
        """A buffer holding the C-contiguous array ``host``."""
        return self.alloc(tuple(host.shape), D.from_numpy(host.dtype), host)

    def download(self, buf: CountedBuffer) -> np.ndarray:
        out = np.empty(math.prod(buf.shape), buf.dtype.np)
        if out.size:
            self.cl.enqueue_copy(self.queue, out, buf.buf)  # blocking: the queue is in order
        return out.reshape(buf.shape)

    def synchronize(self) -> None:
        self.queue.finish()

    def memory(self) -> dict:
        return self.allocations.stats()

    # compiler and program -----------------------------------------------------------------------------
    def compile(self, source: str, kernels) -> object:
        return self.compile_in_driver(source, kernels, ".cl", self._program)

    def _program(self, source: str, path: str):
        try:
            return self.cl.Program(self.ctx, source).build(options=self.options, cache_dir=False)
        except self.cl.Error as e:  # (a build failure, or the driver's own fault: LogicError, RuntimeError)
            raise KernelCompileError(f"the OpenCL compiler failed on {path}:\n{str(e)[-4000:]}") from None

    def load(self, prg, source: str, group: list) -> dict:
        """``{identity: (cl.Kernel, work-group size limit)}`` for the kernels of a program just built. A driver that
        fails here (PoCL 3.0 answered a second program's ``clCreateKernel`` with INVALID_KERNEL_NAME) raises
        KernelCompileError naming the program, and none of the group is kept: the worker runs the fragment step by
        step instead, and a step that still does not build fails its batch with that error."""
        cl, made = self.cl, {}
        fault = "_fault" if _injected_fault() else ""
        for key, k in group:
            try:
                knl = cl.Kernel(prg, k.name + fault)
                made[key] = (knl, int(knl.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE,
                                                              self.device)))
            except cl.Error as e:
                if _is_oom(cl, e):
                    raise OutOfMemory(f"the OpenCL device ran out of memory creating a kernel: {e}") from None
                path = self.cache.folder() / f"{self.cache.key(source)}.cl"
                raise KernelCompileError(
                    f"the OpenCL driver built {path} but could not create its kernel {k.name} "
                    f"({one_line(e, 300)}): a driver fault; {PLATFORM_ENV} selects another platform") from None
        return made

    def local_size(self, grid: int, limit: int) -> int:
        if self.cpu:  # a few work-groups per core: each runs its items as a (vectorised) loop
            size, want = 1, -(-grid // (self.units * 4))
            while size < want and size < 1024:
                size *= 2
        else:
            size = 64 if grid <= 64 * self.units * 8 else 256
        return max(1, min(size, limit))

    def launcher(self, k, knl, limit: int):
        cl, queue, errors = self.cl, self.queue, self.errors
        n = len(k.bufs)
        types = [SCALAR_TYPES[self.renderer.scalar_type(s.dtype)] for s in k.scalars]
        first_scalar = n + (1 if k.can_raise else 0)
        if k.local and k.local > limit:  # (the lowering's group sizes fit every device we list)
            raise KernelCompileError(f"kernel {k.name} needs work groups of {k.local} items; "
                                     f"{self.device.name.strip()} runs at most {limit} for it")
        local = k.local or self.local_size(k.grid, limit)
        gsize, lsize = (-(-k.grid // local) * local,), (local,)

        def launch(bufs, scalars):
            for i, b in enumerate(bufs):
                knl.set_arg(i, b.buf)
            if k.can_raise:  # its own error slot, read with the others at the run's end (check_errors)
                knl.set_arg(n, errors.mine().device[errors.take(k, self.check_errors)])
            for j, (v, t) in enumerate(zip(scalars, types)):
                knl.set_arg(first_scalar + j, t(v))
            try:
                cl.enqueue_nd_range_kernel(queue, knl, gsize, lsize)
            except Exception as e:
                if _is_oom(cl, e):
                    raise OutOfMemory(f"the OpenCL device ran out of memory running a kernel: {e}") from None
                raise
        return launch

    # kernel errors (:mod:`..kernel_errors`) -----------------------------------------------------------
    def _error_blocks(self, nbytes: int) -> tuple:
        """A thread's error slots: a zeroed buffer per slot (a kernel takes a whole buffer) and the host array a
        check reads them into."""
        slots = nbytes // ErrorSlots.SLOT_BYTES
        return [self._zeros() for _ in range(slots)], np.zeros(2 * slots, np.int64)

    def _zeros(self):
        return self.cl.Buffer(self.ctx, self.cl.mem_flags.READ_WRITE | self.cl.mem_flags.COPY_HOST_PTR,
                              hostbuf=np.zeros(2, np.int64))

    def check_errors(self) -> None:
        """Raise the first error of the kernels the calling thread launched since its last check (this waits for
        the queue when there are any)."""
        def read(mine, kernels):
            # (the copies' events are kept until the queue is done: pyopencl's NannyEvent, dropped, waits for its copy
            # holding the GIL, and behind a long kernel, or PoCL generating a kernel's code at its first launch, that
            # froze every thread of the worker, its heartbeat's too, until the dispatcher declared it lost;
            # ``finish`` waits with the GIL released)
            copies = [self.cl.enqueue_copy(self.queue, mine.host[2 * i:2 * i + 2], mine.device[i], is_blocking=False)
                      for i in range(len(kernels))]
            self.queue.finish()
            del copies
            return mine.host

        def reset(mine, kernels):
            for i in range(len(kernels)):
                if mine.host[2 * i]:
                    self.cl.enqueue_copy(self.queue, mine.device[i], np.zeros(2, np.int64))
        self.errors.check(read, reset)


# -- the device ---------------------------------------------------------------------------------------------------

class OpenCLDevice(CompiledDevice):
    """One OpenCL device: fragments run as fused kernels, lowered as :mod:`~..codegen.presets` says for a CPU
    driver (:data:`LOWERING`) or a GPU (:data:`LOWERING_GPU`)."""

    def __init__(self, backend, index: int, platform, device):
        self.cl, self.platform, self.cl_device = import_cl(), platform, device
        self.ctx = self.cl.Context([device])
        self.queue = self.cl.CommandQueue(self.ctx)
        runtime = CLRuntime(self.cl, platform, device, self.ctx, self.queue)
        super().__init__(backend, index, runtime, LOWERING if runtime.cpu else LOWERING_GPU)


__all__ = ["FAIL_BUILDS_ENV", "LOWERING", "LOWERING_GPU", "SCALAR_TYPES", "CLRuntime", "OpenCLDevice"]
