"""CUDA graphs for replayed plans: a plan's launches captured once and replayed with one ``cuGraphLaunch``.

A cached plan's fused runner (:func:`~.codegen.program.build_runner`) makes one driver call per kernel and per BLAS
call, each from Python: for a small training step the launches, not the GPU, set the pace. So, as PyTorch's
``torch.cuda.CUDAGraph`` and ``torch.compile(mode="reduce-overhead")`` do, :class:`GraphedRunner` wraps such a
runner: after :data:`WARMUP` ordinary runs (the kernels are loaded, the allocator's cache and cuBLAS's handle and
workspace exist) its next run is *captured* (``cuStreamBeginCapture`` in thread-local mode ... ``cuStreamEndCapture``,
``cuGraphInstantiate``), and later runs *replay* the graph.

* **Stable memory.** A graph addresses the memory it was captured with, so it owns that memory: its inputs are
  static buffers that a replay copies the run's inputs into (``cuMemcpyDtoDAsync``, skipped when the run passes
  the static buffer itself), and every buffer the captured run allocated (temporaries and outputs) is held by the
  runner, never returned to the allocator while the graph lives. A replay hands out fresh buffers copied from the
  graph's outputs (a kept output is the caller's to keep; the next replay overwrites the graph's own). An allocation
  that misses the allocator's cache during the capture goes to the driver in relaxed capture mode
  (``cuThreadExchangeStreamCaptureMode``), as PyTorch's allocator does; cuBLAS gets a workspace of its own
  (``cublasSetWorkspace``) so it allocates nothing during a capture.
* **Dynamic scalars** (a replayed ``full``'s value such as Adam's bias corrections, RNG seeds and offsets) are kernel
  parameters that a graph would freeze at their captured values. The launches that take them are not captured: the
  capture is cut around each (the plan becomes several graphs, *segments*, with those launches made directly between
  them, their scalars taken from the run's dynamic attributes as the plain runner takes them).
* **What cannot be captured** fails the capture as the driver fails it: a stream synchronisation or an event wait on
  the capturing stream (a kernel error check that must read back mid-plan, an allocator that waits for the stream to
  free memory), a driver allocation in strict mode, a cuBLAS call that would allocate. The capture is abandoned and
  the plan keeps its plain runner for good, with the reason counted (:class:`GraphStats`). Plans with worker ops
  (``const`` uploads the batch's own bytes) or transfers are never captured.
* **Kernel errors** (:mod:`.kernel_errors`): the graph's kernels that can raise write to an error block of the
  graph's own, zeroed by the graph's first node and read back once per replay (one wait, as the plain runner's end
  of run check), in launch order with the directly made launches'.
* **Lifetime.** The graph's executable and graph are destroyed when the runner is garbage (its plan evicted from the
  worker's cache); the runner holds the plain runner and so its launchers, which keep their modules loaded
  (:class:`~.compiled_device.KernelModules`): no module is unloaded under a live graph.

**On by default** since it ran on a real GPU (an NVIDIA H200, session 29: every selftest row with graphs, the
conformance sample, gradchecks, training and two sessions included; the MLP step's row 1.75x -> 0.80x PyTorch
eager; the ``gpu``-marked suite ran there with graphs off). ``TENSORWIRE_CUDA_GRAPHS=0`` turns graphs off;
``TENSORWIRE_CUDA_GRAPH_WARMUP`` sets the ordinary runs before a capture. A plan whose replay would copy more than
:data:`COPY_BYTES_PER_CALL` a device call saved runs without a graph (a graph saves host time, not GPU time). The
counts are in the device's ``memory()`` (the worker's stats): ``graphs``.
"""

from __future__ import annotations

import os
import threading
import weakref

from tensorwire.protocol.errors import ConfigurationError, DeviceError

from .codegen.lower import Launch
from .codegen.program import scalar_value
from .gpu_allocator import GPUBuffer
from .kernel_errors import ErrorSlots, ThreadSlots

ENV = "TENSORWIRE_CUDA_GRAPHS"
WARMUP_ENV = "TENSORWIRE_CUDA_GRAPH_WARMUP"
#: ordinary runs of a plan before its launches are captured
WARMUP = 2
#: memory a graph may hold (its static inputs, temporaries and outputs); a plan that needs more runs without one
MAX_GRAPH_BYTES = 1 << 30
#: bytes of cuBLAS's own workspace (NVIDIA's advice for Hopper; enough for every GPU before it)
BLAS_WORKSPACE = 32 << 20
#: consecutive replays with inputs of other shapes after which a plan stops trying
MAX_MISMATCHES = 3
#: bytes a replay may copy (static inputs in, the graph's outputs out) per device call the graph saves: a graph
#: saves the host's cost of each launch and BLAS call (~10-40 us from Python), and a copy of 16 MiB costs ~8 us on an
#: H200 (~4.3 TB/s counting bytes read and written); a plan that would copy more runs without a graph (an 8-op chain
#: on 64M float32 elements, one launch and 512 MB of copies, ran 0.8 -> 1.4 ms with one on an H200)
COPY_BYTES_PER_CALL = 16 << 20


def enabled() -> bool:
    """Whether plans are captured as graphs (``TENSORWIRE_CUDA_GRAPHS``: on unless ``0``/``off``/``false``/``no``)."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "off", "false", "no")


def warmup_runs() -> int:
    """Ordinary runs of a plan before its capture (``TENSORWIRE_CUDA_GRAPH_WARMUP``, default :data:`WARMUP`);
    ConfigurationError, saying what to set, when it is not a whole number of at least 1."""
    raw = os.environ.get(WARMUP_ENV, "").strip()
    if not raw:
        return WARMUP
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigurationError(f"{WARMUP_ENV}={raw!r}: expected a whole number of ordinary runs before a plan "
                                 f"is captured, at least 1 (default {WARMUP})")
    return int(raw)


warmup_runs()  # a bad value stops the worker at start-up, with the message above, not at its first plan


class GraphUnsupported(DeviceError):
    """A plan whose launches cannot be captured as a graph (the message says why); it runs without one."""


class GraphStats:
    """What one GPU's graphs did: ``captured`` (plans captured), ``segments`` (graphs instantiated), ``replays``,
    and ``fallbacks`` by reason (a plan that gave up graphs, or one run that could not replay)."""

    def __init__(self):
        self.captured = self.segments = self.replays = self.destroyed = 0
        self.fallbacks: dict[str, int] = {}
        self._lock = threading.Lock()

    def fell_back(self, reason: str) -> None:
        with self._lock:
            self.fallbacks[reason] = self.fallbacks.get(reason, 0) + 1

    def as_dict(self) -> dict:
        with self._lock:
            return {"captured": self.captured, "segments": self.segments, "replays": self.replays,
                    "destroyed": self.destroyed, "fallbacks": dict(self.fallbacks)}


def _reason(e: BaseException) -> str:
    """A fallback's reason for the counts: ``call: ERROR_NAME`` for a driver call that failed, else the message's
    start."""
    text = str(e)
    words = text.replace("(", " ").replace(")", " ").replace(":", " ").split()
    for word in words:
        if word.startswith(("CUDA_ERROR_", "hipError")):
            return f"{words[0]}: {word}" if words[0].startswith(("cu", "hip")) else word
    return text.split(";")[0][:80] or type(e).__name__


class Capture:
    """A capture in progress on ``rt``'s stream by one thread: the segments made so far and the launches between
    them (:attr:`program`), the buffers the captured run allocated (:attr:`buffers`, held by the graph) and the
    graph's error slots (:attr:`slots`). ``dynamic``: launch ordinal -> (static scalars, dynamic specs) of the plan's
    launches that take dynamic attributes; ``names``: the plan's launched kernels' names, in order."""

    def __init__(self, rt, slots: ThreadSlots, dynamic: dict, names: list):
        self.rt, self.slots, self.dynamic, self.names = rt, slots, dynamic, names
        self.thread = threading.get_ident()
        self.program: list = []  # ("graph", exec) | ("launch", go, bufs, static, specs, slot position)
        self.handles: list = []  # (graph, exec) of each segment
        self.buffers: list = []  # every buffer allocated by the capturing thread during the capture
        self.ordinal = 0  # the plan's launches seen so far
        self.nested = 0  # > 0 while a host step runs kernels of its own (they are captured as they come)
        self.work = False  # anything captured since the segment began
        self.active = False

    def mine(self) -> bool:
        return threading.get_ident() == self.thread

    def begin(self) -> None:
        rt = self.rt
        rt.api.call("begin_capture", rt.stream, rt.api.capture_mode_thread_local())
        self.active, self.work = True, False

    def cut(self) -> None:
        """End the current segment: instantiate it (an empty one is dropped)."""
        api, rt = self.rt.api, self.rt
        self.active = False
        graph = api.call("end_capture", rt.stream)
        if not self.work:
            api.call("graph_destroy", graph)
            return
        try:
            exe = api.call("graph_instantiate", graph, 0)
        except BaseException:
            api.call("graph_destroy", graph)
            raise
        self.handles.append((graph, exe))
        self.program.append(("graph", exe))
        rt.graph_stats.segments += 1

    def abort(self) -> None:
        """Give up: end a capture still open (its error is the capture's failure, already raised) and destroy the
        segments made."""
        api, rt = self.rt.api, self.rt
        if self.active:
            self.active = False
            result = api.end_capture(rt.stream)
            if result[0] == api.ok and result[1] is not None:
                api.graph_destroy(result[1])
        destroy(api, self.handles)
        self.handles = []

    def launch(self, go, k, bufs, values) -> None:
        """A launch of the captured run (the launcher's ``go(bufs, values)``): captured into the current segment, or,
        for a launch that takes dynamic scalars, made part of the program between two segments (not run now: the
        captured run computes nothing, the first replay runs it)."""
        if self.nested:
            self.work = True
            go(bufs, values)
            return
        i = self.ordinal
        self.ordinal += 1
        if i >= len(self.names) or k.name != self.names[i]:
            raise GraphUnsupported("the runner's launches differ from its plan's")
        dyn = self.dynamic.get(i)
        if dyn is None:
            self.work = True
            go(bufs, values)
            return
        self.cut()
        pos = len(self.slots.kernels)
        if k.can_raise:
            if pos >= ErrorSlots.PER_THREAD:
                raise GraphUnsupported(f"more than {ErrorSlots.PER_THREAD} launches that can raise")
            self.slots.kernels.append(k)  # its slot, taken as the launcher will take it at each replay
        self.program.append(("launch", go, list(bufs), dyn[0], dyn[1], pos))
        self.begin()


def destroy(api, handles: list, stats: GraphStats | None = None) -> None:
    """Destroy captured segments ``[(graph, exec), ...]`` (an executable still running is freed when it ends)."""
    for graph, exe in handles:
        api.call("graph_exec_destroy", exe)
        api.call("graph_destroy", graph)
        if stats is not None:
            stats.destroyed += 1


def _destroy_later(rt_ref, handles: list) -> None:
    """A dead runner's segments, destroyed from whichever thread collected it."""
    rt = rt_ref()
    if rt is None or not handles:
        return
    try:
        with rt.bound:
            destroy(rt.api, handles, rt.graph_stats)
    except Exception:  # noqa: BLE001 - a context torn down already (the process ending)
        pass


def plan_launches(lowered) -> tuple[list, dict, bool]:
    """``(names, dynamic, raises)`` of a lowered plan: the names of the kernels its runner launches (in order;
    kernels of no items launch nothing), by launch ordinal ``(static scalars, [(index, spec, attribute name)])`` of
    those that take dynamic attributes (as :func:`~.codegen.program.build_runner` prepares them), and whether any
    kernel can raise (its runner or its host steps' kernels)."""
    names, dynamic = [], {}
    raises = any(isinstance(it, Launch) and it.kernel.can_raise for it in lowered.items)
    for it in lowered.items:
        if not isinstance(it, Launch) or it.kernel.grid <= 0:
            continue
        specs = [(j, s, s[1][0] if type(s[1]) is tuple else s[1]) for j, s in enumerate(it.scalars) if s[0] is not None]
        if specs:
            dynamic[len(names)] = ([scalar_value(s, None) for s in it.scalars], specs)
        names.append(it.kernel.name)
    return names, dynamic, raises


class GraphedRunner:
    """A plan's runner (``run(env, dyn, frames, after=None)``, see :func:`~.codegen.program.build_runner`) that
    runs ``run`` for :data:`WARMUP` runs, then captures it and replays the graph (see the module doc)."""

    def __init__(self, rt, run, lowered, warmup: int | None = None):
        self.rt, self.run = rt, run
        self.producers = getattr(run, "producers", None)
        self.names, self.dynamic, self.raises = plan_launches(lowered)
        #: the device calls a replay saves: kernel launches and host steps (cuBLAS calls)
        self.calls = max(1, sum(1 for it in lowered.items if not isinstance(it, Launch) or it.kernel.grid > 0))
        self.warmup = warmup_runs() if warmup is None else warmup
        self.runs = 0
        self.off: str | None = None  # why this plan runs without a graph, for good
        self.mismatches = 0
        self.program: list = []
        self.handles: list = []
        self.inputs: list = []  # (slot, static buffer)
        self.outputs: list = []  # (slot, "in", input slot) | (slot, "own", graph's buffer)
        self.held: list = []
        self.slots: ThreadSlots | None = None
        self.kernels: list = []  # the kernels that take error slots, in launch order
        self.nslots = 0
        self._finalizer = None

    @property
    def captured(self) -> bool:
        return bool(self.program)

    def __call__(self, env, dyn, frames, after=None):
        if self.off is not None:
            return self.run(env, dyn, frames, after)
        if not self.program:
            self.runs += 1
            if self.runs <= self.warmup:
                return self.run(env, dyn, frames, after)
            if not self._capture(env, dyn, frames):
                return self.run(env, dyn, frames, after)
        if not self._inputs_fit(env):
            return self.run(env, dyn, frames, after)
        self._replay(env, dyn)
        if after is not None and after[0] >= 0:
            after[1](env)

    def _give_up(self, reason: str) -> bool:
        self.off = reason
        self.rt.graph_stats.fell_back(reason)
        self.release()
        return False

    def _inputs_fit(self, env) -> bool:
        """Whether this run's inputs have the captured ones' shapes and dtypes (a plan's always do; a runner asked
        otherwise runs without the graph, and gives it up after :data:`MAX_MISMATCHES` such runs in a row)."""
        for i, s in self.inputs:
            b = env[i]
            if b is None or b.shape != s.shape or b.dtype is not s.dtype:
                self.rt.graph_stats.fell_back("inputs of other shapes")
                self.mismatches += 1
                if self.mismatches >= MAX_MISMATCHES:
                    self._give_up("inputs keep changing shape")
                return False
        self.mismatches = 0
        return True

    # capture ----------------------------------------------------------------------------------------------------
    def _capture(self, env, dyn, frames) -> bool:
        """Capture a run of the plain runner on static copies of ``env``'s inputs; False (the plan given up) when
        that fails."""
        rt = self.rt
        api = rt.api
        with rt.bound:
            try:
                rt.prepare_graphs()
            except DeviceError as e:
                return self._give_up(f"no BLAS workspace: {_reason(e)}")
            budget = self.calls * COPY_BYTES_PER_CALL
            if sum(b.nbytes for b in env if isinstance(b, GPUBuffer)) > budget:
                return self._give_up("copies outweigh the calls saved")
            env2 = list(env)
            inputs = []
            for i, b in enumerate(env):
                if b is None:
                    continue
                if not isinstance(b, GPUBuffer):
                    return self._give_up("an input is not a device buffer")
                s = rt.empty(b.shape, b.dtype)
                if b.nbytes:
                    api.call("copy_dtod_async", s.ptr, b.ptr, b.nbytes, rt.stream)
                env2[i] = s
                inputs.append((i, s))
            dev, host = rt._error_blocks(ErrorSlots.PER_THREAD * ErrorSlots.SLOT_BYTES)
            slots = ThreadSlots(dev, host)
            cap = Capture(rt, slots, self.dynamic, self.names)
            own = rt.errors.mine()
            rt.errors._local.slots = slots  # the captured launches take the graph's slots
            rt.capturing = cap
            try:
                cap.begin()
                if self.raises:  # (each replay starts with clean slots)
                    api.call("memset_async", dev.ptr, 0, dev.nbytes, rt.stream)
                    cap.work = True
                self.run(env2, dyn, frames)
                cap.cut()
                if slots.kernels and not self.raises:
                    raise GraphUnsupported("a host step's kernels can raise")
            except BaseException as e:  # whatever failed the capture, the plan runs without a graph
                cap.abort()  # (the stream must not stay captured: an interrupted batch ends the capture too)
                if not isinstance(e, Exception):
                    raise
                return self._give_up(_reason(e))
            finally:
                rt.capturing = None
                rt.errors._local.slots = own
            outputs, by_id = [], {id(s): j for j, s in inputs}
            owned = {id(b) for b in cap.buffers}
            for i, b in enumerate(env2):
                if b is None:
                    continue
                if id(b) in by_id:
                    outputs.append((i, "in", by_id[id(b)]))
                elif id(b) in owned or not b.nbytes:  # (an empty buffer addresses nothing)
                    outputs.append((i, "own", b))
                else:
                    self.handles = cap.handles
                    return self._give_up("an output the graph does not own")
            held = [s for _, s in inputs] + cap.buffers + [dev]
            self.handles, self.program, self.inputs, self.outputs = cap.handles, cap.program, inputs, outputs
            self.held, self.slots, self.kernels, self.nslots = held, slots, list(slots.kernels), len(env)
            self.rt.graph_stats.captured += 1
            self._finalizer = weakref.finalize(self, _destroy_later, weakref.ref(rt), self.handles)
            self._finalizer.atexit = False
            if sum(b.nbytes for b in held) > MAX_GRAPH_BYTES:
                return self._give_up("the graph would hold more than MAX_GRAPH_BYTES")
            own_bytes = {id(b): b.nbytes for _, kind, b in outputs if kind == "own"}
            copied = sum(s.nbytes for _, s in inputs) + sum(own_bytes.values())
            if copied > budget:
                return self._give_up("copies outweigh the calls saved")
            return True

    def release(self) -> None:
        """Destroy the graph and let its memory go (the plan runs without it from now on)."""
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        elif self.handles:
            _destroy_later(weakref.ref(self.rt), self.handles)
        self.handles, self.program, self.held, self.outputs, self.inputs = [], [], [], [], []

    # replay -----------------------------------------------------------------------------------------------------
    def _replay(self, env, dyn) -> None:
        rt = self.rt
        api, stream, errors = rt.api, rt.stream, rt.errors
        copy = api.copy_dtod_async
        ok = api.ok
        slots, kernels = self.slots, self.kernels
        with rt.bound:
            for i, s in self.inputs:
                b = env[i]
                if b.ptr != s.ptr and s.nbytes:
                    r = copy(s.ptr, b.ptr, s.nbytes, stream)
                    if r[0] != ok:
                        api.check(api.CALLS["copy_dtod_async"], r)
            own = errors.mine()
            errors._local.slots = slots
            try:
                for entry in self.program:
                    if entry[0] == "graph":
                        r = api.graph_launch(entry[1], stream)
                        if r[0] != ok:
                            api.check(api.CALLS["graph_launch"], r)
                    else:
                        _, go, bufs, static, specs, pos = entry
                        scalars = static
                        if dyn:
                            scalars = list(static)
                            for j, s, name in specs:
                                if name in dyn.get(s[0], ()):
                                    scalars[j] = scalar_value(s, dyn)
                        slots.kernels[:] = kernels[:pos]  # (the launcher takes slot ``pos``, as when captured)
                        go(bufs, scalars)
                slots.kernels[:] = kernels
            finally:
                errors._local.slots = own
            out = [None] * len(env)
            made = {}
            for i, kind, ref in self.outputs:
                if kind == "in":
                    out[i] = env[ref]
                    continue
                b = made.get(id(ref))
                if b is None:
                    b = made[id(ref)] = rt.empty(ref.shape, ref.dtype)
                    if ref.nbytes:
                        r = copy(b.ptr, ref.ptr, ref.nbytes, stream)
                        if r[0] != ok:
                            api.check(api.CALLS["copy_dtod_async"], r)
                out[i] = b
            rt.graph_stats.replays += 1
            if self.kernels:
                self._check()
        env[:] = out

    def _check(self) -> None:
        """Raise the first error the replay's kernels recorded (waits for the GPU; the graph's first node clears
        the slots for the next replay)."""
        failed = self.rt.read_errors(self.slots, self.kernels)
        if failed is not None:
            raise failed[1]


__all__ = ["BLAS_WORKSPACE", "COPY_BYTES_PER_CALL", "ENV", "MAX_GRAPH_BYTES", "WARMUP", "WARMUP_ENV", "Capture",
           "GraphStats", "GraphUnsupported", "GraphedRunner", "destroy", "enabled", "plan_launches", "warmup_runs"]
