"""Which OpenCL devices this host offers (:func:`discover`), the OpenCL backend's discovery.

Discovery walks every OpenCL platform pyopencl sees and keeps the devices that can run our kernels: double precision
(``cl_khr_fp64``), and a platform whose compiler really builds (a small kernel is built and run once per platform;
a broken install, such as a PoCL whose LLVM does not know the host CPU, is reported with its build error instead of
failing every fragment later). GPUs come before accelerators and CPUs; a second platform of the same name (the same
driver installed twice) is left out. The Oclgrind simulator is listed only when ``TENSORWIRE_OPENCL_PLATFORM`` (a
case-insensitive part of a platform's name or version) selects it. Before the first platform query, PoCL's CPU
driver is told to pin its threads where that is safe (:func:`pin_pocl_threads`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ..compiled_device import Discovery, Found, load_binding, one_line

PLATFORM_ENV = "TENSORWIRE_OPENCL_PLATFORM"
BUILD_OPTIONS = ("-cl-std=CL1.2",)
INSTALL_PYOPENCL = 'pip install -e ".[opencl]" (or pip install pyopencl)'
INSTALL_DRIVER = ("install an OpenCL driver: your GPU vendor's, or on a CPU Debian/Ubuntu's PoCL "
                  "(apt-get install pocl-opencl-icd)")
SIMULATORS = ("oclgrind",)

_PROBE = r"""
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
__kernel void tw_probe(__global long* a, __global double* b, const long n) {
  long i = get_global_id(0);
  if (i >= n) return;
  a[i] = a[i] * 3l + 1l;
  b[i] = sqrt(b[i]) + (double)i;
}
"""


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


def import_cl():
    """pyopencl (ImportError without it), PoCL told first how to place its threads."""
    pin_pocl_threads()  # before PoCL starts its threads (on the first platform query)
    import pyopencl as cl  # lazy: pyopencl, the optional [opencl] extra (~150 ms to import)

    return cl


def _probe_build(cl, device) -> str:
    """'' when a trivial kernel builds and runs on ``device``, else why not."""
    try:
        ctx = cl.Context([device])
        q = cl.CommandQueue(ctx)
        prg = cl.Program(ctx, _PROBE).build(options=list(BUILD_OPTIONS), cache_dir=False)
        a, b = np.arange(4, dtype=np.int64), np.full(4, 4.0)
        A, B = (cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=x) for x in (a, b))
        prg.tw_probe(q, (4,), None, A, B, np.int64(4))
        cl.enqueue_copy(q, a, A)
        cl.enqueue_copy(q, b, B)
        q.finish()
        if a.tolist() != [1, 4, 7, 10] or b.tolist() != [2.0, 3.0, 4.0, 5.0]:
            return f"a test kernel computed wrong results on {device.name.strip()!r}"
    except Exception as e:  # the driver is broken here (e.g. PoCL's LLVM does not know this CPU)
        return f"a test kernel does not build on {device.name.strip()!r}: {one_line(e)[-600:]}"
    return ""


def _type_rank(cl, device) -> int:
    """0 for a GPU, 1 for an accelerator, 2 for a CPU (or a device that is also one)."""
    t, kinds = device.type, cl.device_type
    return 2 if t & kinds.CPU else 0 if t & kinds.GPU else 1 if t & kinds.ACCELERATOR else 2


def _discover() -> Found:
    cl, missing = load_binding(import_cl, "pyopencl", INSTALL_PYOPENCL)
    if missing is not None:
        return missing
    try:
        platforms = cl.get_platforms()
    except Exception as e:  # no ICD at all: clGetPlatformIDs fails with PLATFORM_NOT_FOUND_KHR
        return Found([], f"no OpenCL platform found ({one_line(e, 200)}); {INSTALL_DRIVER}")
    want = os.environ.get(PLATFORM_ENV, "").strip().lower()
    found, reasons, seen = [], [], set()
    for p in platforms:
        pname, pver = p.name.strip(), p.version.strip()
        label = f"{pname} ({pver})"
        if want and want not in pname.lower() and want not in pver.lower():
            continue
        if not want and any(s in pname.lower() for s in SIMULATORS):
            continue  # a simulator: only when asked for by name
        if pname in seen:
            reasons.append(f"{label}: left out, another {pname} platform is already used")
            continue
        try:
            devs = p.get_devices()
        except Exception as e:
            reasons.append(f"{label}: no devices ({one_line(e, 200)})")
            continue
        usable = []
        for d in devs:
            if "cl_khr_fp64" not in d.extensions and not d.double_fp_config:
                reasons.append(f"{label}: {d.name.strip()!r} has no double precision (cl_khr_fp64)")
                continue
            usable.append(d)
        if not usable:
            continue
        err = _probe_build(cl, usable[0])
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


__all__ = ["BUILD_OPTIONS", "PLATFORM_ENV", "SIMULATORS", "CLDevice", "discover", "import_cl", "pin_pocl_threads"]
