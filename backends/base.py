"""What a backend is: device discovery, buffers, and running graph fragments.

A backend owns one device type. The worker calls :meth:`Backend.open` for its device and then
talks to the returned :class:`Device`. :meth:`Device.compile` gets a fragment's primitive steps
(composites already expanded, except those in :attr:`Backend.native`) and returns a :class:`Program`,
which the default *interprets* node by node with the backend's ``kernels``. A compiling backend
overrides :meth:`Device.runner` instead, to run the whole plan as kernels of its own that fuse chains
of elementwise and reduction nodes (built by :mod:`tensorwire.backends.codegen` and cached by the
fragment's structure); the steps it leaves to the host, and the fragments it does not compile, run on
the backend's ``kernels``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.ops import OPS, primitives

#: runs each way a hot plan's compiled runner is measured against its interpreted one (:meth:`Device.hot_trials`;
#: ``backends/hot.py``'s :class:`~tensorwire.backends.hot.Trial`)
TRIAL_RUNS = 5



@dataclass
class DeviceInfo:
    """One device a backend can drive; an unavailable one says why."""

    type: str
    index: int
    available: bool = True
    reason: str = ""
    name: str = ""
    memory_bytes: int | None = None

    def to_wire(self) -> dict:
        return {"device": f"{self.type}:{self.index}", "available": self.available, "reason": self.reason,
                "name": self.name, "memory_bytes": self.memory_bytes}


@dataclass(slots=True)
class Step:
    """One primitive op of a compiled fragment: read ``ins`` slots, write slot ``out``.

    ``origin`` is the index of the fragment node it came from (a composite expands into several
    steps with one origin); errors name that node.
    """

    op: str
    ins: tuple[int, ...]
    attrs: dict
    shape: tuple[int, ...]
    dtype: D.DType
    out: int
    origin: int
    kernel: object = None
    dynamic: bool = False
    frees: tuple[int, ...] = field(default_factory=tuple)
    in_meta: tuple = ()  # (shape, dtype) of each input, for backends that specialise kernels

    def complex_dtype(self) -> D.DType | None:
        """The complex dtype this step makes or reads, else None (a step that makes no value, a transfer's send,
        has no dtype; a failed input's meta, an ``executor.Fail``, reads none: the step passes the failure on)."""
        return complex_of(self.dtype, self.in_meta)


def complex_of(dtype, in_meta) -> D.DType | None:
    """:meth:`Step.complex_dtype` of a step making ``dtype`` from inputs of ``in_meta`` (an ``executor._Expansion``
    holds its steps as tuples of these)."""
    if dtype is not None and dtype.is_complex:
        return dtype
    return next((m[1] for m in in_meta if type(m) is tuple and m[1].is_complex), None)


class Backend:
    """Base class of backends. Subclasses set ``name`` and implement :meth:`devices` / :meth:`open`."""

    name: str = ""
    #: every primitive runs without a kernel in ``kernels``: the device compiles it (or loads its own kernels when it
    #: opens); ``kernels`` then holds only what plugins add
    compiles_primitives: bool = False

    def __init__(self):
        self.kernels: dict[str, object] = {}

    def devices(self) -> list[DeviceInfo]:
        """The devices of this type on this host, available or not (with the reason)."""
        raise NotImplementedError

    def open(self, index: int) -> Device:
        """Open device ``index`` for a worker; raise DeviceError if it is not available."""
        raise NotImplementedError

    def add_kernels(self, kernels: dict) -> None:
        """Add or replace kernels (plugins extending this backend use it through a hook)."""
        self.kernels.update(kernels)

    @property
    def native(self) -> frozenset[str]:
        """Composite ops this backend runs with a kernel of its own instead of the decomposition."""
        return frozenset(k for k in self.kernels if k in OPS and not OPS[k].primitive)

    def missing_primitives(self) -> list[str]:
        """Primitive ops with no kernel (a conforming backend has none; a compiling one never has)."""
        if self.compiles_primitives:
            return []
        return [n for n in primitives() if n not in self.kernels]


class Device:
    """One opened device: buffers and programs. Buffers are immutable once written."""

    backend: Backend
    #: whether the device computes with complex values (the CPU's numpy kernels do; a device without complex kernels
    #: refuses them with ``NotImplementedError`` naming the op and the device, and the conformance suite skips them)
    complex_values: bool = False

    def upload(self, array) -> object:
        """Make a device buffer from a host numpy array (which the device may keep; never mutate it)."""
        raise NotImplementedError

    def download(self, buf):
        """A C-contiguous host numpy array with the buffer's contents (synchronising if asynchronous)."""
        raise NotImplementedError

    def free(self, buf) -> None:
        """Release a buffer (the worker drops its reference too)."""

    def nbytes(self, buf) -> int:
        raise NotImplementedError

    def storage(self, buf) -> tuple[object, int]:
        """The allocation ``buf`` lives in: a key equal for every buffer (view) sharing it, and its size in bytes.
        Session quotas count each allocation once. The default treats every buffer as its own allocation."""
        return id(buf), self.nbytes(buf)

    def meta(self, buf) -> tuple[tuple[int, ...], D.DType]:
        """Shape and dtype of a buffer."""
        raise NotImplementedError

    def compile(self, steps: list[Step]) -> Program:
        """Turn primitive steps into a program; the default interprets with the backend's kernels."""
        for s in steps:
            s.kernel = self.backend.kernels.get(s.op)
        return Program(steps)

    def run_step(self, step: Step, args: list, attrs: dict):
        """Run one step (the interpreter's inner call)."""
        return step.kernel(args, attrs, step.shape, step.dtype)

    def specialize(self, step: Step):
        """A callable ``f(*input_buffers)`` for a non-dynamic step, used by the straight-line runner.

        Backends may return a tighter function than the generic kernel call (numpy: the ufunc itself
        when no cast is needed). The default wraps ``step.kernel``.
        """
        k, attrs, shape, dtype = step.kernel, step.attrs, step.shape, step.dtype
        return lambda *a: k(list(a), attrs, shape, dtype)

    def native_up_front(self) -> frozenset[str] | None:
        """The composite ops to run whole in every fragment that is not hot, decided before its steps are known
        (what :meth:`native_for` would answer for any of them), or None (the default: ask :meth:`native_for`).
        A device that answers is asked its policy (:meth:`hot_runs`, :meth:`compiles_when_hot`) with an
        ``expansion_counts.StepCounts`` in place of the steps of the ``backend.native`` expansion."""
        return None

    def native_for(self, steps: list[Step], hot: bool = False) -> frozenset[str] | None:
        """The composite ops to run whole in a fragment that expands to ``steps`` with ``backend.native``, where
        that set is not the best for it (recompiled once, when the plan is made), or None (the default: keep
        it). ``hot``: the fragment has run often (see :mod:`tensorwire.backends.hot`)."""
        return None

    def hot_runs(self, steps: list[Step] | None = None) -> int:
        """After how many runs a plan (of ``steps``, when given) that :meth:`compiles_when_hot` is compiled; 0 (the
        default): never."""
        return 0

    def compiles_first(self, steps: list[Step]) -> bool:
        """Whether a fragment of ``steps`` that cannot be compiled in the background (its plan moves values between
        devices, or a node failed at planning) is compiled before its first run instead of running interpreted."""
        return False

    def compiles_when_hot(self, steps: list[Step]) -> bool:
        """Whether a fragment that expands to ``steps`` (with ``backend.native``) runs interpreted only until it
        is hot: then :mod:`tensorwire.backends.hot` plans it again with ``hot=True`` and asks :meth:`hot_runner`."""
        return False

    def hot_runner(self, plan, keep: frozenset, calls: int):
        """The compiled runner of a hot plan for the kept slots ``keep``, or None where it would not make fewer
        than ``calls`` calls a run (the interpreted plan's steps). Runs on a background thread. The plan takes it
        only if it measures no slower than the interpreted runner on the plan's next runs (:meth:`hot_trials`)."""
        return None

    def hot_build_runs(self) -> int:
        """After how many runs a plan that became hot after :meth:`hot_runs` runs (the default, a small fragment's)
        is compiled when its kernels must be built (not in the kernel cache yet: the compiler runs, which costs far
        more than loading them); until then it stays interpreted (see :mod:`tensorwire.backends.hot`). So does a
        later plan of a fragment whose compiled plan the device measured before, when its kernels have left the
        cache. 0 (the default): as soon as it is hot."""
        return 0

    def hot_build_time(self) -> float:
        """How many times the expected CPU time of building its kernels (the kernel cache's
        ``expected_seconds``) a large fragment's interpreted runs must have taken before they are built, when they
        are not in the kernel cache: one compiled after ``hot_runs(steps)`` runs, fewer than a small fragment's (see
        :mod:`tensorwire.backends.hot`). 0 (the default): built when it is hot."""
        return 0.0

    def hot_trials(self) -> int:
        """How many runs each way a hot plan's compiled runners are measured against its interpreted ones before
        the plan takes them (:class:`tensorwire.backends.hot.Trial`; the runs are the device's, counted by fragment
        across plans and sessions); 0: taken unmeasured."""
        return TRIAL_RUNS

    def runner(self, plan, keep: frozenset):
        """A callable ``run(env, dyn, frames)`` that runs a whole plan for the kept slots ``keep``, or None.

        A runner may also take ``after=(item, fn)`` and say which item writes each kept slot (``run.producers``):
        it then calls ``fn(slots)`` once that item ran, and the worker answers a fetch while the rest runs
        (:func:`tensorwire.backends.executor.run_plan`). One without ``producers`` answers at the end.

        A compiling device returns its fused kernels here (see :func:`tensorwire.backends.codegen.program.
        build_runner`); None (the default) runs the steps one by one through :meth:`specialize`."""
        return None

    def synchronize(self) -> None:
        """Wait for queued work (asynchronous backends)."""

    def collective_transport(self):
        """What moves collectives between this device's buffers and its peers' directly (``name``, ``supports`` and
        ``run`` as :class:`tensorwire.backends.cuda.nccl.NcclTransport`), or None: the worker stages its part in
        host shared memory for the collectives service's MPI (the default, and the path of mixed groups)."""
        return None

    def memory(self) -> dict:
        return {}


class Program:
    """A compiled fragment: the steps in order (a compiling backend may hold fused kernels)."""

    def __init__(self, steps: list[Step]):
        self.steps = steps
