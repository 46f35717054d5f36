"""The MPS runtime on MLX: discovery, buffers (``mx.array``), and fragments run as MLX operations.

Discovery (:func:`discover`) imports MLX (never at plugin import) and finds a Metal GPU (``mx.metal.is_available``);
with :data:`ON_CPU_ENV` set it uses MLX's CPU device instead, a switch for testing the backend where there is no
Metal (Linux with ``pip install "mlx[cpu]"``). Without MLX or a Metal GPU, ``mps:0`` is listed unavailable with the
reason and a worker asked for it exits with that reason.

Two ways to run a fragment, both building MLX's lazy graph and evaluating it once at the fragment's end:

* **On the Metal GPU** the kernel compiler fuses the fragment's chains into kernels that run through
  ``mx.fast.metal_kernel`` (:mod:`.metal_runtime`); what the lowering leaves as host steps (matmul, the in-place
  scatters, worker ops) runs as MLX operations (:mod:`.kernels`).
* **On MLX's CPU device** (the test switch; MLX's custom kernels need Metal) every step is MLX operations. This
  path is also the reference the Metal path is checked against.

The runner then evaluates the MLX kernels' deferred checks (index bounds, integer division by zero), then the
fragment's kept outputs and the Metal kernels' error slots in one ``mx.eval``, so the work, its time and its errors
belong to that fragment (batch). When anything raises, the executor re-runs the fragment step by step
(:meth:`MPSDevice.run_step` evaluates each step at once), which names the failing node.

Memory is unified on Apple silicon: a download is a zero-copy numpy view of the evaluated array (read-only: buffers
are immutable); an upload copies once into MLX's allocator (MLX has no API that adopts foreign memory).
"""

from __future__ import annotations

import contextlib
import os
import platform
import threading
from dataclasses import dataclass

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import OutOfMemory

from ..base import Device, Step
from ..codegen.program import StepRunners, build_runner, host_step_call
from ..codegen.schedule import KNOWN_OPS
from ..compiled_device import Discovery, Found
from ..executor import WORKER_OPS, _build_runner
from . import metal_runtime

#: the test-only switch: run the backend on MLX's CPU device (for hosts without Metal)
ON_CPU_ENV = "TENSORWIRE_MPS_ON_CPU"
INSTALL = 'pip install -e ".[mps]" (or pip install mlx; on Linux, to test on the CPU, pip install "mlx[cpu]")'


@dataclass(frozen=True)
class MLXDevice:
    """``mps:0`` as discovery found it: on which MLX device it runs (``on_cpu``: the test switch), its name and
    memory."""

    name: str
    memory_bytes: int | None
    on_cpu: bool = False
    index: int = 0


def on_cpu_requested() -> bool:
    return os.environ.get(ON_CPU_ENV, "") not in ("", "0")


def _host_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return None


def _discover() -> Found:
    try:
        import mlx.core as mx  # lazy: MLX, the optional [mps] extra, may be absent
    except Exception as e:  # not installed, or a build that does not load here
        return Found([], f"mlx is not installed or does not load ({type(e).__name__}: {e}); {INSTALL}")
    version = getattr(mx, "__version__", "?")
    if on_cpu_requested():
        return Found([MLXDevice(f"MLX {version} CPU ({ON_CPU_ENV}=1, for testing)", _host_memory(), True)])
    try:
        metal = bool(mx.metal.is_available())
    except Exception as e:  # pragma: no cover - an MLX without the metal module
        return Found([], f"MLX {version} cannot query Metal ({e})")
    if not metal:
        return Found([], f"no Metal GPU: MLX {version} on {platform.system()} {platform.machine()} has no Metal "
                            f"device (mps needs Apple silicon and macOS; {ON_CPU_ENV}=1 runs the backend on MLX's "
                            "CPU device, for testing)")
    info = _metal_info(mx)
    return Found([MLXDevice(str(info.get("device_name", "Apple GPU")),
                            int(info["memory_size"]) if "memory_size" in info else None)])


#: ``discover(refresh=False)``: whether this host can run ``mps:0`` (cached for the process)
discover = Discovery(_discover)


def _metal_info(mx) -> dict:
    for get in (getattr(mx, "device_info", None), getattr(mx.metal, "device_info", None)):
        if get is not None:
            try:
                return dict(get())
            except Exception:  # pragma: no cover - depends on the MLX version
                continue
    return {}


def _memory_counter(mx, name: str) -> int:
    """MLX's allocator counters (``mx.get_active_memory``; ``mx.metal.get_active_memory`` before MLX 0.24)."""
    fn = getattr(mx, name, None) or getattr(mx.metal, name, None)
    return int(fn()) if fn is not None else 0


def _is_oom(e: Exception) -> bool:
    msg = str(e).lower()
    return "malloc" in msg or "out of memory" in msg or "attempting to allocate" in msg


class MPSDevice(Device):
    """``mps:0``: buffers are ``mx.array``; fused Metal kernels and MLX operations (see the module doc), evaluated
    at the fragment's outputs.

    ``metal``: fragments run as Metal kernels, wherever :func:`.metal_runtime.load_metal_kernel` gives a factory
    (the GPU); ``gpu``: the device behaves as the Metal GPU (float64 refused), which is the same thing.

    The worker calls a device from its main thread and its pool's threads; MLX's default stream and this module's
    deferred checks and error slots are not the calling thread's own in every MLX version ``mlx>=0.25`` admits,
    so every MLX call of the device holds one re-entrant lock (MLX runs one stream per device anyway)."""

    MAX_STEP_RUNNERS = 4096

    def __init__(self, backend, index: int, found: MLXDevice):
        # lazy: MLX, the optional [mps] extra (kernels imports it too)
        import mlx.core as mx

        from . import kernels as K

        self.backend, self.index, self.found = backend, index, found
        self.mx, self.K = mx, K
        self.lock = threading.RLock()
        make_kernel = metal_runtime.load_metal_kernel(found.on_cpu)
        self.metal = make_kernel is not None
        self.gpu = self.metal
        mx.set_default_device(mx.cpu if found.on_cpu else mx.gpu)
        if self.metal:
            self.runtime = metal_runtime.MetalKernels(mx, make_kernel)
            self.lowering_options = metal_runtime.LOWERING
            self._step_runners = StepRunners(self, self.MAX_STEP_RUNNERS)

    # buffers ------------------------------------------------------------------------------------------
    def upload(self, array) -> object:
        a = np.asarray(array)
        if self.gpu and a.dtype == np.float64:
            raise self.K.refuse_float64("upload")
        with self.lock:
            return self.K.upload_numpy(a)

    def download(self, buf) -> np.ndarray:
        mx = self.mx
        with self.lock:
            if buf.dtype == mx.bfloat16:
                out = np.asarray(buf.view(mx.uint16)).view(D.bfloat16.np)
            else:
                out = np.asarray(buf)  # evaluates; a view of MLX's (unified) memory, no copy
        if not out.flags.c_contiguous:
            out = np.array(out, order="C")
        out.flags.writeable = False  # the buffer is immutable
        return out

    def nbytes(self, buf) -> int:
        return int(buf.nbytes)

    def meta(self, buf):
        return tuple(buf.shape), self.K.dtype_of(buf)

    def synchronize(self) -> None:
        with self.lock:
            self.mx.synchronize()

    def memory(self) -> dict:
        """MLX's allocator: bytes held by live arrays, in its cache for reuse, and the peak."""
        mx = self.mx
        active = _memory_counter(mx, "get_active_memory")
        return {"allocated_bytes": active, "active_bytes": active,
                "cache_bytes": _memory_counter(mx, "get_cache_memory"),
                "peak_bytes": _memory_counter(mx, "get_peak_memory"), "total_bytes": self.found.memory_bytes}

    # running ------------------------------------------------------------------------------------------
    def _refuse(self, step: Step) -> None:
        if self.gpu and (step.dtype is D.float64 or any(m[1] is D.float64 for m in step.in_meta)):
            raise self.K.refuse_float64(step.op)

    def specialize(self, step: Step):
        if self.gpu and (step.dtype is D.float64 or any(m[1] is D.float64 for m in step.in_meta)):
            err = self.K.refuse_float64(step.op)

            def refuse(*args):
                raise err
            return refuse
        return super().specialize(step)

    def run_step(self, step: Step, args: list, attrs: dict):
        """One step, evaluated at once (its checks too): the step-by-step mode that names a failing node. On the
        Metal path a step the lowering compiles is lowered alone (cached by its structure) and launched."""
        self._refuse(step)
        if self.metal and self._compiles(step.op):
            out: list = []
            self._evaluate(lambda: out.append(self._step_runners.run(step, args, attrs)), lambda: out,
                           step.op, step)
            return out[0]
        out = []
        self._evaluate(lambda: out.append(step.kernel(args, attrs, step.shape, step.dtype)), lambda: out,
                       step.op, step)
        return out[0]

    def runner(self, plan, keep):
        """The fused Metal kernels (on the Metal path), else the straight-line runner over the MLX kernels; then
        one ``mx.eval`` of the kept outputs, checks and error slots."""
        if self.metal:
            for s in plan.program.steps:
                if s.dtype is D.float64 or any(m[1] is D.float64 for m in s.in_meta):
                    return _refusing(self.K.refuse_float64(s.op))  # step by step names the node
            inner = build_runner(self, plan, keep)
        else:
            inner = _build_runner(self, plan, keep)
        kept = tuple(keep)

        def run(env, dyn, frames):
            self._evaluate(lambda: inner(env, dyn, frames), lambda: (env[s] for s in kept))

        return run

    def _evaluate(self, record, outputs, op: str = "", step: Step | None = None) -> None:
        """``record()`` (which builds MLX's lazy graph), then its deferred checks, then one ``mx.eval`` of
        ``outputs()`` and the Metal kernels' error slots, whose first recorded error is raised."""
        with self.lock:
            self._evaluate_held(record, outputs, op, step)

    def _evaluate_held(self, record, outputs, op: str, step: Step | None) -> None:
        mx, K = self.mx, self.K
        with K.deferred_checks() as checks, self._error_slots() as slots:
            record()
        try:
            K.raise_failed(checks)  # first: an op guarded by a check must not run with bad indices
            mx.eval(*(x for x in outputs() if isinstance(x, mx.array)), *(s for _, s in slots))
        except RuntimeError as e:
            if _is_oom(e):
                what = f"{op}: MLX could not allocate {step.dtype.name}{list(step.shape)}" if step else \
                    "MLX could not allocate the fragment's arrays"
                raise OutOfMemory(f"{what}: {e}") from None
            raise
        if slots:
            self.runtime.raise_errors(slots)

    def _error_slots(self):
        return self.runtime.errors() if self.metal else contextlib.nullcontext([])

    def _compiles(self, op: str) -> bool:
        """Whether the Metal path's lowering makes ``op`` a kernel (else a host step: an MLX op)."""
        return op in KNOWN_OPS and op not in self.lowering_options.host_ops

    def host_call(self, step: Step):
        """A host step of the Metal path: a worker op (``const``, ``hub_tensor``), else the step's MLX kernel
        (recorded lazily, evaluated with the fragment)."""
        if step.op in WORKER_OPS:
            return host_step_call(self, step)
        kernel = step.kernel or self.backend.kernels[step.op]
        attrs, shape, dtype, origin = step.attrs, tuple(step.shape), step.dtype, step.origin

        def call(args, dyn, frames):
            d = dyn.get(origin) if dyn and step.dynamic else None
            return kernel(args, {**attrs, **d} if d else attrs, shape, dtype)
        return call


def _refusing(err: Exception):
    def run(env, dyn, frames):
        raise err
    return run


def open_device(backend, found: MLXDevice) -> MPSDevice:
    """``mps:0`` for a worker, its MLX kernels put in the backend's table (where no plugin kernel is)."""
    from .kernels import KERNELS  # lazy: MLX (kernels imports it)

    for op, fn in KERNELS.items():
        backend.kernels.setdefault(op, fn)
    return MPSDevice(backend, found.index, found)
