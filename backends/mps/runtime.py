"""The MPS runtime on MLX: discovery, buffers (``mx.array``), and fragments run as MLX operations.

Discovery (:func:`discover`) imports MLX (never at plugin import) and finds a Metal GPU; with :data:`ON_CPU_ENV` set
it uses MLX's CPU device instead, for testing where there is no Metal (Linux: ``pip install "mlx[cpu]"``). Without
MLX or a Metal GPU, ``mps:0`` is listed unavailable with the reason.

On the Metal GPU fused chains are Metal kernels (:mod:`.metal_runtime`) and host steps MLX operations
(:mod:`.kernels`); on MLX's CPU device every step is MLX operations, the reference the Metal path is checked against.
Either way a fragment builds MLX's lazy graph, then its deferred checks (index bounds, integer division by zero) run
and one ``mx.eval`` evaluates its kept outputs and the Metal kernels' error slots, so the work, its time and its
errors belong to that fragment. When anything raises, the executor re-runs it step by step
(:meth:`MPSDevice.run_step` evaluates each step at once), which names the failing node.

Memory is unified on Apple silicon: a download is a zero-copy, read-only numpy view of the evaluated array; an
upload copies once into MLX's allocator (MLX has no API that adopts foreign memory).
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
from ..codegen.program import build_runner
from ..codegen.schedule import KNOWN_OPS
from ..compiled_device import CompiledDevice, Discovery, Found, complex_error, refuse_complex
from ..executor import _build_runner
from ..quota import physical_memory
from ..worker_ops import WORKER_OPS
from . import metal_runtime
from .optional_imports import mlx_core

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


def _discover() -> Found:
    try:
        mx = mlx_core()
    except Exception as e:  # not installed, or a build that does not load here
        return Found([], f"mlx is not installed or does not load ({type(e).__name__}: {e}); {INSTALL}")
    version = getattr(mx, "__version__", "?")
    if on_cpu_requested():
        return Found([MLXDevice(f"MLX {version} CPU ({ON_CPU_ENV}=1, for testing)", physical_memory(), True)])
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


class MPSDevice(CompiledDevice):
    """``mps:0``: buffers are ``mx.array``; fused Metal kernels and MLX operations (see the module doc), evaluated
    at the fragment's outputs. ``metal``: fragments run as Metal kernels, wherever
    :func:`.metal_runtime.load_metal_kernel` gives a factory (the GPU); ``gpu``: the device behaves as the Metal GPU
    (float64 refused), which is the same thing.

    The worker calls a device from its main thread and its pool's threads; MLX's default stream and this module's
    deferred checks and error slots are not the calling thread's own in every MLX version ``mlx>=0.25`` admits,
    so every MLX call of the device holds one re-entrant lock (MLX runs one stream per device anyway)."""

    def __init__(self, backend, index: int, found: MLXDevice):
        from . import kernels as K  # lazy: MLX, the optional [mps] extra (the MLX kernels import it)

        mx = K.mx
        self.found, self.mx, self.K = found, mx, K
        self.lock = threading.RLock()
        make_kernel = metal_runtime.load_metal_kernel(found.on_cpu)
        self.metal = self.gpu = make_kernel is not None
        mx.set_default_device(mx.cpu if found.on_cpu else mx.gpu)
        runtime = metal_runtime.MetalKernels(mx, K.MX, make_kernel) if self.metal else None
        super().__init__(backend, index, runtime, metal_runtime.LOWERING if self.metal else None)

    # buffers ------------------------------------------------------------------------------------------
    def upload(self, array) -> object:
        a = np.asarray(array)
        if a.dtype.kind == "c":
            raise complex_error(self, f"upload of {a.dtype}")
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
    def _refused(self, step: Step) -> Exception | None:
        """The error of a float64 step on the Metal GPU (as PyTorch's MPS refuses it), else None."""
        if self.gpu and (step.dtype is D.float64 or any(m[1] is D.float64 for m in step.in_meta)):
            return self.K.refuse_float64(step.op)
        return None

    def specialize(self, step: Step):
        err = self._refused(step)
        return super().specialize(step) if err is None else _refusing(err)

    def run_step(self, step: Step, args: list, attrs: dict):
        """One step, evaluated at once (its checks too): the step-by-step mode that names a failing node. On the
        Metal path a step the lowering compiles is lowered alone (cached by its structure) and launched."""
        refuse_complex(self, [step])
        err = self._refused(step)
        if err is not None:
            raise err
        # CompiledDevice's: lowered alone, cached by its structure; Device's: the step's MLX kernel
        owner = CompiledDevice if self.metal and self._compiles(step.op) else Device
        out: list = []
        self._evaluate(lambda: out.append(owner.run_step(self, step, args, attrs)), lambda: out, step.op, step)
        return out[0]

    def runner(self, plan, keep):
        """The fused Metal kernels (on the Metal path), else the straight-line runner over the MLX kernels; then
        one ``mx.eval`` of the kept outputs, checks and error slots."""
        refuse_complex(self, plan.program.steps)
        if self.metal:
            refused = next((e for e in map(self._refused, plan.program.steps) if e is not None), None)
            if refused is not None:
                return _refusing(refused)  # step by step names the node
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
        mx, K = self.mx, self.K
        with self.lock:
            errors = self.runtime.errors() if self.metal else contextlib.nullcontext([])
            with K.deferred_checks() as checks, errors as slots:
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

    def _compiles(self, op: str) -> bool:
        """Whether the Metal path's lowering makes ``op`` a kernel (else a host step: an MLX op)."""
        return op in KNOWN_OPS and op not in self.lowering_options.host_ops

    def host_call(self, step: Step):
        """A host step of the Metal path: a worker op (``const``, ``hub_tensor``), else the step's MLX kernel
        (recorded lazily, evaluated with the fragment)."""
        return super().host_call(step) if step.op in WORKER_OPS else self.kernel_call(step)


def _refusing(err: Exception):
    def run(*args):
        raise err
    return run


def open_device(backend, found: MLXDevice) -> MPSDevice:
    """``mps:0`` for a worker, its MLX kernels put in the backend's table (where no plugin kernel is)."""
    dev = MPSDevice(backend, found.index, found)
    for op, fn in dev.K.KERNELS.items():
        backend.kernels.setdefault(op, fn)
    return dev
