"""The CPU backend: zero-copy numpy buffers; fragments run as fused C kernels where the host has a C compiler
(:mod:`.compiled`), else through the numpy kernels. Registered through the ``tensorwire`` entry point."""

from __future__ import annotations

import os
from operator import attrgetter

import numpy as np

from tensorwire.backends.base import TRIAL_RUNS, Backend, Device, DeviceInfo
from tensorwire.backends.hookspecs import hookimpl
from tensorwire.backends.quota import host_memory
from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DeviceError

from . import compiled, complex_kernels, conv, pooling, recurrent  # noqa: F401  (they register their kernels)
from .kernels import KERNELS, specialize

_BY_NP = D.BY_NP
_shape, _dtype = attrgetter("shape"), attrgetter("dtype")

#: how many ``cpu:N`` devices a host offers (they share the host's memory and cores)
CPU_DEVICES = int(os.environ.get("TENSORWIRE_CPU_DEVICES", "8"))
#: runs each way a hot plan's compiled kernels are measured against the numpy kernels before the plan takes them
#: (``backends/hot.py``, :class:`~tensorwire.backends.hot.Trial`; default ``base.TRIAL_RUNS``); 0: taken unmeasured
TRIAL_RUNS_ENV = "TENSORWIRE_CPU_COMPILE_TRIAL_RUNS"


class NumpyDevice(Device):
    """A CPU device: buffers are numpy arrays (read-only views of received frames where possible)."""

    complex_values = True  # (numpy's kernels; the compiled CPU runs fragments with complex values on them)

    def __init__(self, backend: Backend, index: int):
        self.backend = backend
        self.index = index

    def upload(self, array: np.ndarray) -> np.ndarray:
        return array

    def download(self, buf: np.ndarray) -> np.ndarray:
        if not isinstance(buf, np.ndarray):  # a numpy scalar from a full reduction
            return np.asarray(buf)
        return buf if buf.flags.c_contiguous else np.array(buf, order="C")  # (ascontiguousarray makes 0-d 1-d)

    def nbytes(self, buf: np.ndarray) -> int:
        return int(buf.nbytes)

    def storage(self, buf: np.ndarray):
        """Views (reshape, expand, slices, frames received from the wire) count as the array that owns the memory."""
        a = buf
        if getattr(a, "base", 0) is None:  # (most buffers: an array a kernel made)
            return id(a), a.nbytes
        for _ in range(64):  # bounded: base chains are short
            b = getattr(a, "base", None)
            if isinstance(b, np.ndarray):
                a = b
            elif b is not None and isinstance(getattr(b, "base", None), np.ndarray):  # as_strided's DummyArray
                a = b.base
            else:
                break
        return id(a), int(a.nbytes)

    def storages(self, bufs) -> list:
        """:meth:`storage` of each of ``bufs`` (the quota ledger's batch call): an array a kernel made, most of them,
        without a method call each."""
        storage = self.storage
        if type(self).storage is not NumpyDevice.storage:  # (a subclass's own accounting)
            return list(map(storage, bufs))
        # (numpy points a view of a view at the array that owns the memory: a view of an array a kernel made, the
        # next commonest, is answered here too; longer chains and views of other objects go through storage)
        ndarray = np.ndarray
        return [(id(b), b.nbytes) if (a := getattr(b, "base", 0)) is None
                else (id(a), a.nbytes) if type(a) is ndarray and a.base is None else storage(b) for b in bufs]

    def meta(self, buf: np.ndarray):
        dt = _BY_NP.get(buf.dtype)
        return buf.shape, dt if dt is not None else D.from_numpy(buf.dtype)

    def metas(self, bufs: list) -> list:
        """:meth:`meta` of each of ``bufs`` (a replay's inputs, checked against its plan's), in passes in C when
        each is an array of a dtype the wire names."""
        if type(self).meta is NumpyDevice.meta:
            try:
                return list(zip(map(_shape, bufs), map(_BY_NP.__getitem__, map(_dtype, bufs))))
            except (AttributeError, KeyError):  # (not an array, or a dtype meta names the long way)
                pass
        return list(map(self.meta, bufs))

    def specialize(self, step):
        if step.kernel is KERNELS.get(step.op):  # not replaced by a plugin kernel
            f = specialize(step)
            if f is not None:
                return f
        return super().specialize(step)


class NumpyBackend(Backend):
    """Interprets fragments with numpy. Subclass it to build a numpy-based plugin backend."""

    name = "cpu"

    def __init__(self):
        super().__init__()
        self.kernels.update(KERNELS)

    def devices(self) -> list[DeviceInfo]:
        return [DeviceInfo(self.name, i, True, "", f"numpy {np.__version__}", host_memory())
                for i in range(CPU_DEVICES)]

    def open(self, index: int) -> NumpyDevice:
        if not 0 <= index < CPU_DEVICES:
            raise DeviceError(f"{self.name}:{index} does not exist; this host offers {self.name}:0 .. "
                              f"{self.name}:{CPU_DEVICES - 1} (TENSORWIRE_CPU_DEVICES)")
        return NumpyDevice(self, index)


class CompiledDevice(compiled.CompiledMixin, NumpyDevice):
    """A CPU device whose fragments run as fused C kernels (numpy buffers, the numpy kernels as host steps)."""

    def __init__(self, backend: Backend, index: int, runtime):
        super().__init__(backend, index)
        self.runtime = runtime

    def hot_trials(self) -> int:
        return self.backend.trial_runs


class CompiledBackend(NumpyBackend):
    """The CPU backend in compiled mode: composites run through their decompositions (and fuse), except the
    few whose numpy/BLAS kernels beat a fused loop nest (:data:`compiled.HOST_COMPOSITES`)."""

    def __init__(self, runtime=None, min_work: int | None = None, max_steps: int | None = None,
                 hot_runs: int | None = None, large_runs: int | None = None, trial_runs: int | None = None):
        super().__init__()
        if min_work is None:
            min_work = int(os.environ.get(compiled.MIN_WORK_ENV, compiled.MIN_WORK))
        if max_steps is None:
            max_steps = int(os.environ.get(compiled.MAX_STEPS_ENV, compiled.MAX_STEPS))
        if hot_runs is None:
            hot_runs = int(os.environ.get(compiled.HOT_RUNS_ENV, compiled.HOT_RUNS))
        if large_runs is None:
            large_runs = int(os.environ.get(compiled.LARGE_RUNS_ENV, compiled.LARGE_RUNS))
        if trial_runs is None:
            trial_runs = int(os.environ.get(TRIAL_RUNS_ENV, TRIAL_RUNS))
        self.min_work = min_work  # fragments producing fewer elements in all run on the numpy kernels...
        self.max_steps = max_steps  # ...and so do fragments of more steps than this
        self.hot_runs = hot_runs  # ...until they have run this often (0: always)
        self.large_runs = large_runs  # larger ones run interpreted this often while they compile (0: compiled first)
        self.trial_runs = trial_runs  # runs each way a compiled plan is measured before it is taken (0: unmeasured)
        self.runtime = runtime or compiled.runtime()
        if self.runtime is None:
            raise DeviceError(f"the CPU cannot compile kernels: {compiled.why_not()}")

    @property
    def native(self) -> frozenset[str]:
        plugin = {k for k, f in self.kernels.items() if KERNELS.get(k) is not f}
        return frozenset(k for k in super().native if k in compiled.HOST_COMPOSITES or k in plugin)

    @property
    def interpreted_native(self) -> frozenset[str]:
        """The composites run whole in fragments too small to compile (every one the numpy kernels have)."""
        return super().native

    def devices(self) -> list[DeviceInfo]:
        rt = self.runtime
        name = f"C kernels ({os.path.basename(rt.compiler)} {rt.version.split()[-1]})"  # e.g. "C kernels (cc 12.2.0)"
        return [DeviceInfo(self.name, i, True, "", name, host_memory()) for i in range(CPU_DEVICES)]

    def open(self, index: int) -> CompiledDevice:
        super().open(index)  # checks the index
        return CompiledDevice(self, index, self.runtime)


def make_backend() -> NumpyBackend:
    """The CPU backend this host runs: compiled where it has a C compiler (and TENSORWIRE_CPU_COMPILE is not 0)."""
    rt = compiled.runtime()
    return CompiledBackend(rt) if rt is not None else NumpyBackend()


@hookimpl
def tensorwire_backends():
    """The built-in CPU backend."""
    return [make_backend()]
