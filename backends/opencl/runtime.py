"""The OpenCL runtime: device discovery, buffers, and fragments run as fused OpenCL C kernels.

Discovery (:func:`discover`) walks every OpenCL platform pyopencl sees and keeps the devices that can run our
kernels: double precision (``cl_khr_fp64``), and a platform whose compiler really builds (a small kernel is built
and run once per platform, and the result cached for the process; a broken install, such as a PoCL whose LLVM
does not know the host CPU, is reported with its build error instead of failing every fragment later). GPUs are
listed before accelerators and CPUs; a second platform of the same name (the same driver installed twice) is left
out. The Oclgrind simulator is listed only when ``TENSORWIRE_OPENCL_PLATFORM`` selects it; that variable (a
case-insensitive part of a platform's name or version) restricts the platforms.

A fragment is lowered by :mod:`tensorwire.backends.codegen` (every op becomes a kernel: the device has no host
ops) and rendered by :class:`~tensorwire.backends.codegen.opencl.OpenCLRenderer`. Each distinct kernel is built
once per process, whatever fragments it appears in; a fragment's new kernels are built together in one program,
whose source goes to the kernel cache (:mod:`~tensorwire.backends.codegen.cache`) so a compile error names the
file, while the driver's own cache (PoCL's ``POCL_CACHE_DIR``) makes the next process's builds cheap. Steps the
executor runs one at a time (after a kernel raised, or in plans with transfers) are lowered alone and cached by
their structure.
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import OutOfMemory

from ..codegen.cache import KernelCache, KernelCompileError
from ..codegen.opencl import OpenCLRenderer
from ..codegen.presets import GPU as LOWERING_GPU
from ..codegen.presets import OPENCL_CPU as LOWERING
from ..compiled_device import CompiledDevice, Discovery, Found, KernelModules
from ..kernel_errors import ErrorSlots

PLATFORM_ENV = "TENSORWIRE_OPENCL_PLATFORM"
#: test hook (tests/faults/test_worker_restart.py): the first N programs this process builds fail where PoCL 3.0's
#: second program did, at ``clCreateKernel`` (asked for a name the program lacks: the driver's own INVALID_KERNEL_NAME)
FAIL_BUILDS_ENV = "TENSORWIRE_OPENCL_FAIL_BUILDS"
BUILD_OPTIONS = ("-cl-std=CL1.2",)
INSTALL_PYOPENCL = 'pip install -e ".[opencl]" (or pip install pyopencl)'
INSTALL_DRIVER = ("install an OpenCL driver: your GPU vendor's, or on a CPU Debian/Ubuntu's PoCL "
                  "(apt-get install pocl-opencl-icd)")
SIMULATORS = ("oclgrind",)

#: the numpy type of a kernel scalar parameter, by its OpenCL C type (the renderer's ``scalar_type`` of its dtype)
SCALAR_TYPES = {"uchar": np.uint8, "char": np.int8, "short": np.int16, "ushort": np.uint16, "int": np.int32,
                "uint": np.uint32, "long": np.int64, "ulong": np.uint64, "float": np.float32, "double": np.float64}

_PROBE = r"""
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
__kernel void tw_probe(__global long* a, __global double* b, const long n) {
  long i = get_global_id(0);
  if (i >= n) return;
  a[i] = a[i] * 3l + 1l;
  b[i] = sqrt(b[i]) + (double)i;
}
"""


# -- discovery ----------------------------------------------------------------------------------------------------

@dataclass
class CLDevice:
    """One usable OpenCL device as discovery found it: a pyopencl platform and device."""

    index: int
    platform: object
    device: object

    @property
    def name(self) -> str:
        return self.device.name.strip()

    @property
    def memory_bytes(self) -> int:
        return int(self.device.global_mem_size)


#: PoCL's CPU driver reads this when it starts its worker threads: ``1`` pins its thread i to CPU i
POCL_AFFINITY_ENV = "POCL_AFFINITY"
#: PoCL variables that set how many worker threads it starts (threads beyond the CPUs could not be pinned)
POCL_THREAD_ENVS = ("POCL_MAX_PTHREAD_COUNT", "POCL_CPU_MAX_CU_COUNT")


def pin_pocl_threads(environ=os.environ) -> bool:
    """Turn PoCL's thread pinning on (``POCL_AFFINITY=1``) unless the user set it, where it is safe: this process
    may run on every CPU, and PoCL is not told to start more threads than there are CPUs. Returns whether it did.

    Why: unpinned, PoCL's two worker threads ran 3-8 kernels of 60 at the speed of one core on this 2-core
    host (the 8-op chain's kernel: 7.4 ms instead of 3.8 ms), whose scheduler puts a woken thread on its waker's
    CPU; pinned, none did (see docs/architecture.md). Safe only where every CPU is allowed: PoCL pins thread i to CPU
    i, and newer PoCL aborts the process when that fails (a cpuset or ``taskset`` that leaves CPU i out)."""
    if POCL_AFFINITY_ENV in environ:
        return False
    try:
        allowed = os.sched_getaffinity(0)
    except (AttributeError, OSError):  # not Linux
        return False
    n = os.cpu_count() or 0
    if not n or allowed != set(range(n)):
        return False
    for var in POCL_THREAD_ENVS:
        v = environ.get(var, "").strip()
        if v and (not v.isdigit() or int(v) > n):
            return False
    environ[POCL_AFFINITY_ENV] = "1"
    return True


def _import_cl():
    pin_pocl_threads()  # before PoCL starts its threads (on the first platform query)
    try:
        import pyopencl as cl
    except ImportError as e:
        return None, f"pyopencl is not installed ({e}); {INSTALL_PYOPENCL}"
    return cl, ""


def _probe_build(cl, platform, device) -> str:
    """'' when a trivial kernel builds and runs on ``device``, else why not."""
    try:
        ctx = cl.Context([device])
        q = cl.CommandQueue(ctx)
        prg = cl.Program(ctx, _PROBE).build(options=list(BUILD_OPTIONS), cache_dir=False)
        a = np.arange(4, dtype=np.int64)
        b = np.full(4, 4.0)
        mf = cl.mem_flags
        A = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=a)
        B = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=b)
        prg.tw_probe(q, (4,), None, A, B, np.int64(4))
        cl.enqueue_copy(q, a, A)
        cl.enqueue_copy(q, b, B)
        q.finish()
        if a.tolist() != [1, 4, 7, 10] or b.tolist() != [2.0, 3.0, 4.0, 5.0]:
            return f"a test kernel computed wrong results on {device.name.strip()!r}"
    except Exception as e:  # the driver is broken here (e.g. PoCL's LLVM does not know this CPU)
        msg = " ".join(str(e).split())
        return f"a test kernel does not build on {device.name.strip()!r}: {msg[-600:]}"
    return ""


def _type_rank(cl, device) -> int:
    t = device.type
    if t & cl.device_type.GPU and not t & cl.device_type.CPU:
        return 0
    if t & cl.device_type.ACCELERATOR and not t & cl.device_type.CPU:
        return 1
    return 2


def _discover() -> Found:
    cl, why = _import_cl()
    if cl is None:
        return Found([], why)
    try:
        platforms = cl.get_platforms()
    except Exception as e:  # no ICD at all: clGetPlatformIDs fails with PLATFORM_NOT_FOUND_KHR
        return Found([], f"no OpenCL platform found ({' '.join(str(e).split())[:200]}); {INSTALL_DRIVER}")
    want = os.environ.get(PLATFORM_ENV, "").strip().lower()
    found, reasons, seen = [], [], set()
    for p in platforms:
        pname, pver = p.name.strip(), p.version.strip()
        label = f"{pname} ({pver})"
        if want:
            if want not in pname.lower() and want not in pver.lower():
                continue
        elif any(s in pname.lower() for s in SIMULATORS):
            continue  # a simulator: only when asked for by name
        if pname in seen:
            reasons.append(f"{label}: left out, another {pname} platform is already used")
            continue
        try:
            devs = p.get_devices()
        except Exception as e:
            reasons.append(f"{label}: no devices ({' '.join(str(e).split())[:200]})")
            continue
        usable = []
        for d in devs:
            if "cl_khr_fp64" not in d.extensions and not d.double_fp_config:
                reasons.append(f"{label}: {d.name.strip()!r} has no double precision (cl_khr_fp64)")
                continue
            usable.append(d)
        if not usable:
            continue
        err = _probe_build(cl, p, usable[0])
        if err:
            reasons.append(f"{label}: {err}")
            continue
        seen.add(pname)
        found += [(p, d) for d in usable]
    found.sort(key=lambda pd: _type_rank(cl, pd[1]))
    if found:
        return Found([CLDevice(i, p, d) for i, (p, d) in enumerate(found)], "")
    if not platforms or (want and not reasons):
        what = f"no OpenCL platform matches {PLATFORM_ENV}={want!r}" if want else "no OpenCL platform found"
        names = ", ".join(p.name.strip() for p in platforms) or "none"
        return Found([], f"{what} (platforms: {names}); {INSTALL_DRIVER}")
    if not reasons:
        return Found([], f"no usable OpenCL platform (only simulators); {INSTALL_DRIVER}")
    return Found([], "no usable OpenCL device: " + "; ".join(reasons))


#: ``discover(refresh=False)``: the usable OpenCL devices of this host (cached for the process)
discover = Discovery(_discover)


# -- buffers ------------------------------------------------------------------------------------------------------

class CLBuffer:
    """A device buffer: a ``cl.Buffer`` (at least 1 byte) with the tensor's shape and dtype."""

    __slots__ = ("buf", "shape", "dtype", "nbytes", "_stats", "__weakref__")

    def __init__(self, buf, shape: tuple, dtype: D.DType, stats: list):
        self.buf, self.shape, self.dtype = buf, shape, dtype
        self.nbytes = math.prod(shape) * dtype.itemsize
        self._stats = stats
        stats[0] += self.nbytes
        stats[1] += 1

    def __del__(self):
        s = self._stats
        s[0] -= self.nbytes
        s[1] -= 1

    def __repr__(self) -> str:
        return f"CLBuffer({self.dtype.name}{list(self.shape)})"


def _oom_codes(cl) -> set:
    st = cl.status_code
    return {getattr(st, n) for n in ("MEM_OBJECT_ALLOCATION_FAILURE", "OUT_OF_RESOURCES", "OUT_OF_HOST_MEMORY",
                                     "INVALID_BUFFER_SIZE") if hasattr(st, n)}


def _is_oom(cl, e: Exception) -> bool:
    if isinstance(e, cl.MemoryError):
        return True
    code = getattr(e, "code", None)
    if code is None and e.args and hasattr(e.args[0], "code"):
        code = e.args[0].code
    return code in _oom_codes(cl)


_FAULTS: list[int] = []


def _injected_fault() -> bool:
    """Whether the kernels of the program just built are to fail their creation (:data:`FAIL_BUILDS_ENV`)."""
    if not _FAULTS:
        _FAULTS.append(int(os.environ.get(FAIL_BUILDS_ENV) or 0))
    if _FAULTS[0] > 0:
        _FAULTS[0] -= 1
        return True
    return False


# -- the kernel runtime ---------------------------------------------------------------------------------------------

class CLRuntime(KernelModules):
    """Builds kernels (each once per process, whatever fragments it appears in) and launches them on one queue.

    A ``cl.Kernel`` is shared by every fragment that uses it and a launch sets its arguments then enqueues it,
    so launches must come from one thread at a time (the worker runs everything on one).

    The driver keeps compiled programs on disk (PoCL: ``POCL_CACHE_DIR``, by default ``~/.cache/pocl``), so we
    keep only the sources. Measured on PoCL 3.1 with a 512-kernel program: from source 1.1 s to build and then
    ~40 ms per kernel at its first launch (PoCL makes the work-group code then); the next process, with PoCL's
    cache, 0.04 s and 0.2 s in all. Loading ``program.binaries`` saved at build time into a process without
    PoCL's cache took 0.65 s and still paid the first launches, so storing binaries too would only duplicate
    PoCL's cache.

    A driver's fixed cost per build dominates small kernels (PoCL: ~0.1 s a program, much the same for one kernel or
    a hundred): :meth:`prebuild` puts up to 512 in a program."""

    target = "opencl"
    PER_MODULE = 512

    def __init__(self, cl, platform, device, ctx, queue, stats: list):
        super().__init__()
        self.cl, self.platform, self.device, self.ctx, self.queue = cl, platform, device, ctx, queue
        self.stats = stats
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
        self.total = int(device.global_mem_size)
        self.units = max(1, int(device.max_compute_units))
        self.errors = ErrorSlots(self._error_blocks)

    # buffers ------------------------------------------------------------------------------------------
    def alloc(self, shape: tuple, dtype: D.DType, host: np.ndarray | None = None) -> CLBuffer:
        cl = self.cl
        shape = tuple(int(n) for n in shape)
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes > self.max_alloc:
            raise OutOfMemory(f"{dtype.name}{list(shape)} needs {nbytes} bytes; the largest buffer "
                              f"{self.device.name.strip()} allocates is {self.max_alloc} bytes")
        if self.stats[0] + nbytes > self.total:  # (a CPU driver would take it from the host's RAM regardless)
            raise OutOfMemory(f"{dtype.name}{list(shape)} needs {nbytes} bytes; {self.stats[0]} of the "
                              f"{self.total} bytes of {self.device.name.strip()} are in use")
        mf = cl.mem_flags
        try:
            if host is not None and nbytes:
                buf = cl.Buffer(self.ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=host)
            else:
                buf = cl.Buffer(self.ctx, mf.READ_WRITE, max(nbytes, 1))
        except Exception as e:
            if _is_oom(cl, e):
                raise OutOfMemory(f"the OpenCL device could not allocate {nbytes} bytes for {dtype.name}"
                                  f"{list(shape)}: {e}") from None
            raise
        return CLBuffer(buf, shape, dtype, self.stats)

    def empty(self, shape, dtype: D.DType) -> CLBuffer:
        return self.alloc(tuple(shape), dtype)

    def upload(self, host: np.ndarray) -> CLBuffer:
        """A buffer holding the C-contiguous array ``host``."""
        return self.alloc(tuple(host.shape), D.from_numpy(host.dtype), host)

    def download(self, buf: CLBuffer) -> np.ndarray:
        out = np.empty(math.prod(buf.shape), buf.dtype.np)
        if out.size:
            self.cl.enqueue_copy(self.queue, out, buf.buf)  # blocking: the queue is in order
        return out.reshape(buf.shape)

    def synchronize(self) -> None:
        self.queue.finish()

    def memory(self) -> dict:
        return {"allocated_bytes": self.stats[0], "buffers": self.stats[1],
                "total_bytes": int(self.device.global_mem_size)}

    # programs -----------------------------------------------------------------------------------------
    def compile(self, source: str, kernels) -> object:
        cl = self.cl

        def build(src_path: str, out_path: str) -> None:
            try:
                prg = cl.Program(self.ctx, source).build(options=self.options, cache_dir=False)
            except cl.Error as e:  # (a build failure, or the driver's own fault: LogicError, RuntimeError)
                raise KernelCompileError(f"the OpenCL compiler failed on {src_path}:\n{str(e)[-4000:]}") from None
            holder["prg"] = prg
            with open(out_path, "wb") as f:  # a marker: the driver keeps the binaries (PoCL: POCL_CACHE_DIR)
                f.write(b"built\n")

        holder: dict = {}
        self.cache.get_or_build(source, ".cl", ".built", build, kernels)
        prg = holder.get("prg")
        if prg is None:  # built by an earlier process: the driver's cache makes this cheap
            try:
                prg = cl.Program(self.ctx, source).build(options=self.options, cache_dir=False)
            except cl.Error as e:
                path = self.cache.folder() / f"{self.cache.key(source)}.cl"
                raise KernelCompileError(f"the OpenCL compiler failed on {path}:\n{str(e)[-4000:]}") from None
        return prg

    def load(self, prg, source: str, group: list) -> dict:
        """``{identity: (cl.Kernel, work-group size limit)}`` for the kernels of a program just built. A driver that
        fails here (PoCL 3.0 answered a second program's ``clCreateKernel`` with INVALID_KERNEL_NAME) raises
        KernelCompileError naming the program, and none of the group is kept: the worker runs the fragment step by
        step instead, and a step that still does not build fails its batch with that error."""
        cl = self.cl
        fault = "_fault" if _injected_fault() else ""
        made = {}
        for key, k in group:
            try:
                knl = cl.Kernel(prg, k.name + fault)
                limit = knl.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, self.device)
            except cl.Error as e:
                if _is_oom(cl, e):
                    raise OutOfMemory(f"the OpenCL device ran out of memory creating a kernel: {e}") from None
                path = self.cache.folder() / f"{self.cache.key(source)}.cl"
                raise KernelCompileError(
                    f"the OpenCL driver built {path} but could not create its kernel {k.name} "
                    f"({' '.join(str(e).split())[:300]}): a driver fault; {PLATFORM_ENV} selects another platform"
                ) from None
            made[key] = (knl, int(limit))
        return made

    def local_size(self, grid: int, limit: int) -> int:
        if self.cpu:  # a few work-groups per core: each runs its items as a (vectorised) loop
            want = -(-grid // (self.units * 4))
            size = 1
            while size < want and size < 1024:
                size *= 2
        else:
            size = 64 if grid <= 64 * self.units * 8 else 256
        return max(1, min(size, limit))

    def launcher(self, k, knl, limit: int):
        cl, queue = self.cl, self.queue
        n = len(k.bufs)
        types = [SCALAR_TYPES[self.renderer.scalar_type(s.dtype)] for s in k.scalars]
        first_scalar = n + (1 if k.can_raise else 0)
        if k.local and k.local > limit:  # (the lowering's group sizes fit every device we list)
            raise KernelCompileError(f"kernel {k.name} needs work groups of {k.local} items; "
                                     f"{self.device.name.strip()} runs at most {limit} for it")
        local = k.local or self.local_size(k.grid, limit)
        gsize = (-(-k.grid // local) * local,)
        lsize = (local,)
        errors, per_thread = self.errors, ErrorSlots.PER_THREAD
        enqueue = cl.enqueue_nd_range_kernel

        def launch(bufs, scalars):
            for i, b in enumerate(bufs):
                knl.set_arg(i, b.buf)
            if k.can_raise:  # its own error slot, read with the others at the run's end (check_errors)
                mine = errors.mine()
                if len(mine.kernels) == per_thread:
                    self.check_errors()
                knl.set_arg(n, mine.device[len(mine.kernels)])
                mine.kernels.append(k)
            for j, (v, t) in enumerate(zip(scalars, types)):
                knl.set_arg(first_scalar + j, t(v))
            try:
                enqueue(queue, knl, gsize, lsize)
            except Exception as e:
                if _is_oom(cl, e):
                    raise OutOfMemory(f"the OpenCL device ran out of memory running a kernel: {e}") from None
                raise
        return launch

    def _error_blocks(self, nbytes: int) -> tuple:
        """A thread's error slots: a zeroed buffer per slot (a kernel takes a whole buffer) and the host array a
        check reads them into."""
        cl, mf = self.cl, self.cl.mem_flags
        zero = np.zeros(2, np.int64)
        slots = nbytes // ErrorSlots.SLOT_BYTES
        return ([cl.Buffer(self.ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=zero) for _ in range(slots)],
                np.zeros(2 * slots, np.int64))

    def check_errors(self) -> None:
        """Raise the first error of the kernels the calling thread launched since its last check (see
        :mod:`..kernel_errors`); this waits for the queue when there are any."""
        if not self.errors.pending():
            return
        cl, queue, mine = self.cl, self.queue, self.errors.mine()
        kernels, mine.kernels = mine.kernels, []
        for i in range(len(kernels)):
            cl.enqueue_copy(queue, mine.host[2 * i:2 * i + 2], mine.device[i], is_blocking=False)
        queue.finish()
        failed = ErrorSlots.first_error(kernels, mine.host)
        if failed is not None:
            zero = np.zeros(2, np.int64)
            for i in range(len(kernels)):
                if mine.host[2 * i]:
                    cl.enqueue_copy(queue, mine.device[i], zero)
            raise failed[1]


# -- the device ---------------------------------------------------------------------------------------------------

class OpenCLDevice(CompiledDevice):
    """One OpenCL device: buffers are :class:`CLBuffer`; fragments run as fused kernels, lowered as
    :mod:`~..codegen.presets` says for a CPU driver (:data:`LOWERING`) or a GPU (:data:`LOWERING_GPU`)."""

    def __init__(self, backend, index: int, platform, device):
        cl, _ = _import_cl()
        self.cl, self.platform, self.cl_device = cl, platform, device
        self.ctx = cl.Context([device])
        self.queue = cl.CommandQueue(self.ctx)
        runtime = CLRuntime(cl, platform, device, self.ctx, self.queue, [0, 0])  # (stats: bytes, buffers)
        super().__init__(backend, index, runtime, LOWERING if runtime.cpu else LOWERING_GPU)
