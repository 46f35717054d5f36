"""Hot plans: a fragment interpreted because it is small is compiled once it has run often.

A compiling device leaves small fragments on its interpreter (the CPU: fewer than
``TENSORWIRE_CPU_COMPILE_MIN_ELEMENTS`` elements produced): compiling costs tens to hundreds of milliseconds the
first time a machine sees a fragment, which a fragment run a few times never earns back. A fragment that keeps
coming back (a training step, eager or ``tw.compile``'d, replays the same plans every step) does earn it: after
``Device.hot_runs()`` runs (the CPU: ``TENSORWIRE_CPU_COMPILE_HOT_RUNS``, default 100) its plan is made again the
way the device plans fragments it compiles, and the runners for the kept-slot sets it has been run with are built,
on a background thread: gcc runs there while the plan goes on running interpreted. When the compiled plan is ready
the worker takes it in place of the old one (:meth:`Tier.take`, between two runs), if the compiled program makes
fewer calls than the interpreted one (the device decides: ``Device.hot_runner``); otherwise the plan stays as it is.

A fragment large enough to compile is compiled after its first run (``Device.hot_runs(steps)``), unless its
*structure* (its ops and their wiring, its inputs' dtypes and ranks) has been planned on the device at other shapes
(:class:`Structures`): a loop whose batches change shape makes a new plan each step (the same program at new sizes),
and a plan run once never earns its compile back (issue 37: a char-level transformer compiled a ~130 KB C library
every step in the background, at ~2.5x the time of running interpreted, and never ran one of them); or unless the
very same fragment was planned before (a plan the plan cache evicted, made again: compiled again, it would be
evicted again). Such a plan waits to be hot in its own right, as a small fragment does (``Device.hot_runs()`` runs;
never where that is 0). A fixed-shape loop plans each fragment once, and compiles it after its first run.

The compiled and the interpreted runs of a plan agree to rounding (a float32 sum accumulates in float64 in a C
kernel, pairwise in numpy), as a fragment above the threshold agrees with one below it.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

from tensorwire.protocol.graph import attrs_key

log = logging.getLogger("tensorwire.executor")

#: kept-slot sets a hot plan's runners are built for ahead of time (the executor keeps as many runners a plan)
MAX_KEEPS = 8
#: fragment structures (and fragments) a device remembers the plans of (least recently planned forgotten first)
STRUCTURES_REMEMBERED = 1 << 14

_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:  # one thread: compiles queue up rather than take every core at once
            _POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tensorwire-hot")
        return _POOL


def stop() -> None:
    """Drop the compiles not started yet (a worker closing: nobody will run their plans)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is not None:
            _POOL.shutdown(wait=False, cancel_futures=True)
            _POOL = None


class Budget:
    """What the background compiles may take: at most ``queued`` waiting or running at once (a program whose
    fragments keep changing would queue one per fragment; those it does not admit run interpreted and ask again at
    their next run), and at most ``share`` of the time since the first compile (after ``grace`` seconds)."""

    def __init__(self, queued: int = 2, share: float = 0.5, grace: float = 10.0):
        self.queued, self.share, self.grace = queued, share, grace
        self.pending = 0
        self.seconds = 0.0
        self.since: float | None = None
        self._lock = threading.Lock()

    def admit(self) -> bool:
        now = time.monotonic()
        with self._lock:
            if self.since is None:
                self.since = now
            elapsed = now - self.since
            if self.pending >= self.queued or (elapsed > self.grace and self.seconds > self.share * elapsed):
                return False
            self.pending += 1
            return True

    def spent(self, seconds: float) -> None:
        with self._lock:
            self.pending -= 1
            self.seconds += seconds


_BUDGET = Budget()


class Structures:
    """What one device has planned: the shapes each fragment structure was planned at, and the fragments planned
    (hashes: :func:`structure`, :func:`shapes`, :func:`fragment`; the last :data:`STRUCTURES_REMEMBERED` of each)."""

    def __init__(self):
        self._shapes: OrderedDict[int, set] = OrderedDict()
        self._fragments: OrderedDict[int, None] = OrderedDict()
        self._lock = threading.Lock()

    def settled(self, structure: int, shapes: int, fragment: int) -> bool:
        """Note a plan of ``fragment`` (of ``structure`` at ``shapes``); False when that structure was planned at
        other shapes or that fragment was planned before."""
        with self._lock:
            seen = self._shapes.pop(structure, None) or set()
            if len(seen) < 2:
                seen.add(shapes)
            self._shapes[structure] = seen
            again = self._fragments.pop(fragment, False) is None
            self._fragments[fragment] = None
            for d in (self._shapes, self._fragments):
                if len(d) > STRUCTURES_REMEMBERED:
                    d.popitem(last=False)
            return len(seen) == 1 and not again


_STRUCTURES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # device -> its Structures
_STRUCTURES_LOCK = threading.Lock()


def structures_of(device) -> Structures:
    """The :class:`Structures` of ``device`` (made on first use; it goes with the device)."""
    with _STRUCTURES_LOCK:
        got = _STRUCTURES.get(device)
        if got is None:
            got = _STRUCTURES[device] = Structures()
        return got


def structure(nodes: list, ext_metas: list) -> int:
    """A fragment's structure, hashed: its ops and their wiring, and its inputs' dtypes and ranks (not their sizes,
    nor the attributes, which carry sizes: a view's shape, a slice's bounds)."""
    return hash((tuple([(n[0], tuple(n[1])) for n in nodes]),
                 tuple([(len(m[0]), m[1].name) if isinstance(m, tuple) else None for m in ext_metas])))


def shapes(ext_metas: list, node_meta: list) -> int:
    """A plan's shapes, hashed: its inputs' and every node's (the attributes that decide them included)."""
    return hash((tuple([m[0] if isinstance(m, tuple) else None for m in ext_metas]),
                 tuple([m[0] if isinstance(m, tuple) else None for m in node_meta])))


def fragment(structure: int, shapes: int, nodes: list) -> int:
    """A fragment, hashed: its structure, its input shapes and its nodes' attributes."""
    return hash((structure, shapes, tuple([attrs_key(n[0], n[2]) for n in nodes])))


def runs_before_compiling(device, runs: int, nodes: list, ext_metas: list, node_meta: list) -> int:
    """After how many runs a new plan that the device compiles when hot is compiled: ``runs`` (its steps' count,
    ``Device.hot_runs(steps)``), or, for a structure this device has planned at other shapes or a fragment it has
    planned before, as many as a small fragment waits (``Device.hot_runs()``; 0: never) when that is more (see the
    module doc)."""
    hot_runs = device.hot_runs()
    if 0 < hot_runs <= runs or runs <= 0:
        return runs
    st, sh = structure(nodes, ext_metas), shapes(ext_metas, node_meta)
    try:
        fr = fragment(st, sh, nodes)
    except TypeError:  # (attributes that are not plain values: a fragment that will not be planned again as such)
        fr = hash((st, sh, id(nodes)))
    return runs if structures_of(device).settled(st, sh, fr) else hot_runs


class Tier:
    """What a plan needs to be compiled later: its fragment, the metas of its inputs, how often it ran and with
    which kept-slot sets, and the compiled plan once it is ready (``ready``; ``done`` is set either way)."""

    __slots__ = ("nodes", "ext_metas", "hot_runs", "runs", "keeps", "ready", "done")

    def __init__(self, nodes: list, ext_metas: list, hot_runs: int):
        self.nodes, self.ext_metas = nodes, ext_metas
        self.hot_runs = hot_runs  # the runs after which it compiles (``Device.hot_runs`` of its steps)
        self.runs = 0
        self.keeps: list[frozenset] = []
        self.ready = None
        self.done = threading.Event()

    def ran(self, device, plan, keep: frozenset) -> None:
        """Count one run of ``plan`` keeping ``keep`` (the thread running it); start compiling when it is hot."""
        self.runs += 1
        hot_runs = self.hot_runs
        if self.runs > hot_runs:  # compiling already: the kept-slot sets went with it
            return
        if keep not in self.keeps and len(self.keeps) < MAX_KEEPS:
            self.keeps.append(keep)
        if self.runs == hot_runs:
            if not _BUDGET.admit():  # compiles are queued, or took their share of the time: try at the next run
                self.runs -= 1
                return
            _pool().submit(self._compile, device, plan, list(self.keeps))

    def _compile(self, device, plan, keeps: list[frozenset]) -> None:
        from .executor import compile_plan

        t0 = time.monotonic()
        try:
            hot = compile_plan(device, self.nodes, self.ext_metas, hot=True)
            by_node = {s: hot.node_slot[j] for j, s in enumerate(plan.node_slot) if s is not None}
            built = 0
            for keep in keeps:
                hkeep = frozenset(by_node[s] for s in keep if by_node.get(s) is not None)
                run = device.hot_runner(hot, hkeep, len(plan.program.steps))
                if run is not None:
                    hot.runners[hkeep] = run
                    built += 1
            if built == len(keeps):
                self.ready = hot
        except Exception:  # the plan goes on interpreted, as it ran so far
            log.warning("compiling a hot plan failed; it stays interpreted", exc_info=True)
        finally:
            _BUDGET.spent(time.monotonic() - t0)
            self.done.set()

    def take(self, plan) -> bool:
        """Turn ``plan`` into its compiled form, if that is ready (the thread that runs the plan, between runs);
        True when it changed. The plan stops counting either way once its compile is over."""
        if not self.done.is_set():
            return False
        plan.tier = None
        hot = self.ready
        if hot is None:
            return False
        vars(plan).update(vars(hot))
        return True
