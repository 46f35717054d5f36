"""The OpenCL runtime: device discovery, buffers, and fragments run as fused OpenCL C kernels.

Discovery (:func:`usable_devices`) walks every OpenCL platform pyopencl sees and keeps the devices that can
run our kernels: double precision (``cl_khr_fp64``), and a platform whose compiler really builds (a trivial
kernel is built and run once per platform, and the result cached for the process; a broken install, such as a
PoCL whose LLVM does not know the host CPU, is reported with its build error instead of failing every fragment
later). GPUs are listed before accelerators and CPUs; a second platform of the same name (the same driver
installed twice) is left out. The Oclgrind simulator is listed only when ``TENSORWIRE_OPENCL_PLATFORM``
selects it; that variable (a case-insensitive part of a platform's name or version) restricts the platforms.

A fragment is lowered by :mod:`tensorwire.backends.codegen` (every op becomes a kernel: the device has no host
ops), rendered by :class:`~tensorwire.backends.codegen.opencl.OpenCLRenderer` into one program per fragment,
and built once per process; the source is kept in the kernel cache (:mod:`~tensorwire.backends.codegen.cache`)
so a compile error names the file, and the driver's own cache (PoCL's ``POCL_CACHE_DIR``) makes the next
process's builds cheap. Steps the executor runs one at a time (after a kernel raised, or in plans with
transfers) are lowered alone and cached by their structure.
"""

from __future__ import annotations

import math
import os
import threading
from collections import OrderedDict
from types import SimpleNamespace

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DeviceError, OutOfMemory
from tensorwire.protocol.ops import OPS

from ..base import Device, Step
from ..codegen.cache import KernelCache, KernelCompileError
from ..codegen.lower import Options
from ..codegen.opencl import OpenCLRenderer
from ..codegen.program import build_runner, kernel_error

PLATFORM_ENV = "TENSORWIRE_OPENCL_PLATFORM"
BUILD_OPTIONS = ("-cl-std=CL1.2",)
INSTALL_PYOPENCL = 'pip install -e ".[opencl]" (or pip install pyopencl)'
INSTALL_DRIVER = ("install an OpenCL driver: your GPU vendor's, or on a CPU Debian/Ubuntu's PoCL "
                  "(apt-get install pocl-opencl-icd)")
SIMULATORS = ("oclgrind",)

#: the numpy type a kernel scalar of each dtype is passed as (16-bit floats travel as float32)
SCALAR_TYPES = {D.bool_: np.uint8, D.uint8: np.uint8, D.int8: np.int8, D.int16: np.int16, D.int32: np.int32,
                D.int64: np.int64, D.float16: np.float32, D.bfloat16: np.float32, D.float32: np.float32,
                D.float64: np.float64}

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

class Found:
    """The result of discovery: usable ``(platform, device)`` pairs, or why there are none."""

    def __init__(self, devices: list, reason: str):
        self.devices, self.reason = devices, reason


_FOUND: Found | None = None
_FOUND_LOCK = threading.Lock()


def _import_cl():
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
        return f"a test kernel does not build on {device.name.strip()!r} ({platform.version.strip()}): {msg[-600:]}"
    return ""


def _type_rank(cl, device) -> int:
    t = device.type
    if t & cl.device_type.GPU and not t & cl.device_type.CPU:
        return 0
    if t & cl.device_type.ACCELERATOR and not t & cl.device_type.CPU:
        return 1
    return 2


def discover(refresh: bool = False) -> Found:
    """The usable OpenCL devices of this host (cached for the process)."""
    global _FOUND
    with _FOUND_LOCK:
        if _FOUND is None or refresh:
            _FOUND = _discover()
        return _FOUND


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
        return Found(found, "")
    if not platforms or (want and not reasons):
        what = f"no OpenCL platform matches {PLATFORM_ENV}={want!r}" if want else "no OpenCL platform found"
        names = ", ".join(p.name.strip() for p in platforms) or "none"
        return Found([], f"{what} (platforms: {names}); {INSTALL_DRIVER}")
    if not reasons:
        return Found([], f"no usable OpenCL platform (only simulators); {INSTALL_DRIVER}")
    return Found([], "no usable OpenCL device: " + "; ".join(reasons))


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


# -- the kernel runtime ---------------------------------------------------------------------------------------------

class CLRuntime:
    """Builds OpenCL programs (one per fragment, cached) and launches their kernels on one queue."""

    target = "opencl"

    def __init__(self, cl, platform, device, ctx, queue, stats: list):
        self.cl, self.platform, self.device, self.ctx, self.queue = cl, platform, device, ctx, queue
        self.stats = stats
        self.renderer = OpenCLRenderer()
        cid = " | ".join(str(x).strip() for x in (platform.name, platform.version, device.name, device.version,
                                                  device.driver_version, device.opencl_c_version))
        self.cache = KernelCache("opencl", f"{cid} {' '.join(BUILD_OPTIONS)}")
        self._programs: OrderedDict = OrderedDict()  # source -> {kernel name: (cl.Kernel, work-group limit)}
        self._lock = threading.Lock()
        self.max_alloc = int(device.max_mem_alloc_size)
        self.cpu = bool(device.type & cl.device_type.CPU)
        self.units = max(1, int(device.max_compute_units))
        mf = cl.mem_flags
        self._err_host = np.zeros(2, np.int64)
        self._err = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=self._err_host)
        self.builds = 0  # programs built by this runtime (for tests and benchmarks)

    # buffers ------------------------------------------------------------------------------------------
    def alloc(self, shape: tuple, dtype: D.DType, host: np.ndarray | None = None) -> CLBuffer:
        cl = self.cl
        shape = tuple(int(n) for n in shape)
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes > self.max_alloc:
            raise OutOfMemory(f"{dtype.name}{list(shape)} needs {nbytes} bytes; the largest buffer "
                              f"{self.device.name.strip()} allocates is {self.max_alloc} bytes")
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

    # programs -----------------------------------------------------------------------------------------
    def _build_source(self, source: str, kernels) -> object:
        cl = self.cl

        def build(src_path: str, out_path: str) -> None:
            try:
                prg = cl.Program(self.ctx, source).build(options=list(BUILD_OPTIONS), cache_dir=False)
            except cl.RuntimeError as e:
                raise KernelCompileError(f"the OpenCL compiler failed on {src_path}:\n{str(e)[-4000:]}") from None
            holder["prg"] = prg
            with open(out_path, "wb") as f:  # a marker: the driver keeps the binaries (PoCL: POCL_CACHE_DIR)
                f.write(b"built\n")

        holder: dict = {}
        self.cache.get_or_build(source, ".cl", ".built", build, kernels)
        prg = holder.get("prg")
        if prg is None:  # built by an earlier process: the driver's cache makes this cheap
            try:
                prg = cl.Program(self.ctx, source).build(options=list(BUILD_OPTIONS), cache_dir=False)
            except cl.RuntimeError as e:
                path = self.cache.folder() / f"{self.cache.key(source)}.cl"
                raise KernelCompileError(f"the OpenCL compiler failed on {path}:\n{str(e)[-4000:]}") from None
        self.builds += 1
        return prg

    def build(self, kernels: list) -> dict:
        """``{kernel name: launcher(buffers, scalars)}`` for ``kernels`` (one program per fragment)."""
        source = self.renderer.render(kernels)
        with self._lock:
            entry = self._programs.get(source)
            if entry is None:
                prg = self._build_source(source, kernels)
                entry = {}
                for k in kernels:
                    knl = self.cl.Kernel(prg, k.name)
                    limit = knl.get_work_group_info(self.cl.kernel_work_group_info.WORK_GROUP_SIZE, self.device)
                    entry[k.name] = (knl, int(limit))
                self._programs[source] = entry
                if len(self._programs) > 4096:
                    self._programs.popitem(last=False)
            else:
                self._programs.move_to_end(source)
        return {k.name: self._launcher(k, *entry[k.name]) for k in kernels}

    def local_size(self, grid: int, limit: int) -> int:
        if self.cpu:  # a few work-groups per core: each runs its items as a (vectorised) loop
            want = -(-grid // (self.units * 4))
            size = 1
            while size < want and size < 1024:
                size *= 2
        else:
            size = 64 if grid <= 64 * self.units * 8 else 256
        return max(1, min(size, limit))

    def _launcher(self, k, knl, limit: int):
        cl, queue = self.cl, self.queue
        n = len(k.bufs)
        types = [SCALAR_TYPES[s.dtype] for s in k.scalars]
        first_scalar = n + (1 if k.can_raise else 0)
        local = self.local_size(k.grid, limit)
        gsize = (-(-k.grid // local) * local,)
        lsize = (local,)
        err, err_host = self._err, self._err_host
        if k.can_raise:
            knl.set_arg(n, err)
        enqueue = cl.enqueue_nd_range_kernel

        def launch(bufs, scalars):
            for i, b in enumerate(bufs):
                knl.set_arg(i, b.buf)
            if k.can_raise:
                knl.set_arg(n, err)
            for j, (v, t) in enumerate(zip(scalars, types)):
                knl.set_arg(first_scalar + j, t(v))
            try:
                enqueue(queue, knl, gsize, lsize)
                if k.can_raise:
                    cl.enqueue_copy(queue, err_host, err)
            except Exception as e:
                if _is_oom(cl, e):
                    raise OutOfMemory(f"the OpenCL device ran out of memory running a kernel: {e}") from None
                raise
            if k.can_raise and err_host[0]:
                code, detail = int(err_host[0]), int(err_host[1])
                err_host[:] = 0
                cl.enqueue_copy(queue, err, err_host)
                raise kernel_error(k, code, detail)
        return launch


# -- the device ---------------------------------------------------------------------------------------------------

#: how the lowering suits a GPU-like device: every op is a kernel, long reductions split over many work items
LOWERING = Options(host_ops=frozenset(), host_views=False, acc64=False, split_min=8192, split_outputs=256,
                   chunk=1024, max_chunks=256)


class OpenCLDevice(Device):
    """One OpenCL device: buffers are :class:`CLBuffer`; fragments run as fused kernels."""

    lowering_options = LOWERING
    MAX_STEP_RUNNERS = 4096

    def __init__(self, backend, index: int, platform, device):
        cl, _ = _import_cl()
        self.backend, self.index = backend, index
        self.cl, self.platform, self.cl_device = cl, platform, device
        self.ctx = cl.Context([device])
        self.queue = cl.CommandQueue(self.ctx)
        self._stats = [0, 0]  # bytes, buffers
        self.runtime = CLRuntime(cl, platform, device, self.ctx, self.queue, self._stats)
        self._step_runners: OrderedDict = OrderedDict()

    # buffers ------------------------------------------------------------------------------------------
    def upload(self, array) -> CLBuffer:
        a = np.asarray(array)
        dt = D.from_numpy(a.dtype)
        host = a if a.flags.c_contiguous else np.array(a, order="C")
        return self.runtime.alloc(tuple(a.shape), dt, host)

    def download(self, buf: CLBuffer) -> np.ndarray:
        out = np.empty(math.prod(buf.shape), buf.dtype.np)
        if out.size:
            self.cl.enqueue_copy(self.queue, out, buf.buf)  # blocking: the queue is in order
        return out.reshape(buf.shape)

    def free(self, buf) -> None:
        """Nothing to do: the memory goes back when the last reference (kernels queued on it too) drops."""

    def nbytes(self, buf: CLBuffer) -> int:
        return buf.nbytes

    def meta(self, buf: CLBuffer):
        return buf.shape, buf.dtype

    def synchronize(self) -> None:
        self.queue.finish()

    def memory(self) -> dict:
        return {"allocated_bytes": self._stats[0], "buffers": self._stats[1],
                "total_bytes": int(self.cl_device.global_mem_size)}

    # running ------------------------------------------------------------------------------------------
    def runner(self, plan, keep):
        return build_runner(self, plan, keep)

    def host_call(self, step):
        """A callable for a host step: the worker's own ops (``const``, ``hub_tensor``)."""
        from ..executor import WORKER_OPS, _dynamic_call
        if step.op not in WORKER_OPS:
            raise DeviceError(f"the opencl backend has no kernel for {step.op!r}")
        call = _dynamic_call(self, step)
        origin = step.origin
        return lambda args, dyn, frames: call(args, dyn.get(origin) if dyn else None, frames)

    def run_step(self, step: Step, args: list, attrs: dict):
        """One step on its own (the executor's step-by-step mode): lowered alone, cached by its structure."""
        slots = list(dict.fromkeys(step.ins))
        ins = tuple(slots.index(x) for x in step.ins)
        opdef = OPS.get(step.op)
        dynamic = set(getattr(opdef, "dynamic", None) or ())
        static = sorted((k, repr(v)) for k, v in attrs.items() if k not in dynamic)
        key = (step.op, ins, tuple((tuple(m[0]), m[1].name) for m in step.in_meta), tuple(step.shape),
               step.dtype.name, tuple(static))
        run = self._step_runners.get(key)
        out = len(slots)
        if run is None:
            st = Step(step.op, ins, dict(attrs), tuple(step.shape), step.dtype, out, 0, dynamic=True,
                      in_meta=step.in_meta)
            plan = SimpleNamespace(program=SimpleNamespace(steps=[st]))
            run = build_runner(self, plan, frozenset({out}))
            self._step_runners[key] = run
            if len(self._step_runners) > self.MAX_STEP_RUNNERS:
                self._step_runners.popitem(last=False)
        else:
            self._step_runners.move_to_end(key)
        env = [args[step.ins.index(x)] for x in slots] + [None]
        run(env, {0: attrs}, [])
        return env[out]
