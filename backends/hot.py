"""Hot plans: a fragment interpreted because it is small is compiled once it has run often.

A compiling device leaves small fragments on its interpreter (the CPU: fewer than
``TENSORWIRE_CPU_COMPILE_MIN_ELEMENTS`` elements produced): compiling costs tens to hundreds of milliseconds the
first time a machine sees a fragment, which a fragment run a few times never earns back. A fragment that keeps
coming back (a training step, eager or ``tw.compile``'d, replays the same plans every step) does earn it: after
``Device.hot_runs()`` runs (the CPU: ``TENSORWIRE_CPU_COMPILE_HOT_RUNS``, default 100) its plan is made again the
way the device plans fragments it compiles, and the runners for the kept-slot sets it has been run with are built,
on a background thread, at a lower priority (:data:`HOT_NICE`): gcc runs there while the plan goes on running
interpreted. A compiled program that would not make fewer calls than the interpreted one is not built (the device
decides: ``Device.hot_runner``); the plan stays as it is. What it costs depends on the kernel cache: kernels a run
before built load in milliseconds, while building them runs the compiler (the CPU: ~0.1-0.3 s of gcc a fragment,
against a fraction of a millisecond a run that the compiled plan saves at best). So a hot plan compiles then only if
its kernels are all in the cache (``codegen.cache.cached_only``: nothing is built; a cache that holds nothing,
``codegen.cache.holds_nothing``, is not asked); otherwise it goes on interpreted until it has run
``Device.hot_build_runs()`` times (the CPU: ``TENSORWIRE_CPU_COMPILE_BUILD_RUNS``, default 1000), and compiles then,
building them (issue 37: a cold char-RNN run of 800 steps built five libraries, ~1 s of gcc beside a client and a
worker that keep two cores busy, for ~65 ms its compiled plans saved).

A compiled plan is taken only if it is measured no slower (:class:`Trial`; issue 37: the DCGAN and the char-level
transformer took 1.04-1.19x the worker's CPU with the compiler on). Once it is ready, the plan's next runs alternate
between its interpreted runner and the compiled one (a first compiled run to warm it, then ``Device.hot_trials()``
runs each; the CPU: ``TENSORWIRE_CPU_COMPILE_TRIAL_RUNS``, default 5), each timed with the running thread's CPU time
(``time.thread_time``: the machine is shared, wall time is not the plan's), and every one of them is a real run
whose results the batch gets. The worker then takes the compiled plan in place of the old one (:meth:`Tier.take`,
between two runs) if its fastest run is at most :data:`TRIAL_MARGIN` above the interpreted one's fastest (what
others running on the machine do to a run, cache misses and a shared core's cycles, only ever adds to its time:
medians of 3 runs took a char-RNN step's plan compiled at ~1.5x its interpreted time, issue 37); otherwise the plan
stays interpreted for good. A compiled run that takes at most :data:`TRIAL_DECISIVE` (half) of the interpreted
fastest so far ends the trial at once, compiled: no load doubles a run's CPU time, and the slow way's remaining runs
would only cost (session 37: an 8-op chain on 8M floats ran 50 ms a run interpreted against 7 compiled, for five
runs). ``hot_trials() == 0`` takes a compiled plan unmeasured.

The trial's times and its verdict are the device's, kept by fragment (:class:`Measured`, :meth:`Structures.measure`:
the hash of :func:`fragment`; the last :data:`STRUCTURES_REMEMBERED` fragments used), not the plan's: plans are a
session's, and a script run again is a new session whose plans are new (issue 37: the BiLSTM's large fragments, 8
steps a run, compile after 2 runs, and their trial could not end within a run: it was lost with the session, and the
next run's plans of them, of fragments planned before, waited ``Device.hot_runs()`` runs to begin one again). A plan
made later of a fragment measured before (another session's, or one the plan cache evicted) compiles after its first
run, from the kernel cache (``codegen.cache.cached_only``; its kernels were built for the trial; a miss waits
``Device.hot_build_runs()`` runs, as a small fragment's): one whose compiled plan was taken is taken unmeasured; one
whose trial is not over installs a trial that goes on from the runs measured so far (a warm-up of its own compiled
runner, then each run the way measured fewer times), adding runs, not starting over; one measured slower is never
compiled. Nothing else passes between sessions: the times are CPU seconds, no buffer or value of a session's. The
worker's ``stats`` count the verdicts applied to the session's plans (``hot_plans``: plans compiled, after a trial
or on an earlier trial's verdict; ``hot_slower``: trials that ended in the session measuring the compiled plan slower,
which leaves the plan interpreted; a plan of a fragment known slower is not counted: it is never compiled), and each
trial's verdict is logged at debug level.

A fragment large enough to compile is compiled after its first runs (``Device.hot_runs(steps)``), unless its
*structure* (its ops and their wiring, its inputs' dtypes and ranks) has been planned on the device at other shapes
(:class:`Structures`): a loop whose batches change shape makes a new plan each step (the same program at new sizes),
and a plan run once never earns its compile back (issue 37: a char-level transformer compiled a ~130 KB C library
every step in the background, at ~2.5x the time of running interpreted, and never ran one of them); or unless the
very same fragment was planned before (a plan the plan cache evicted, made again: compiled again, it would be
evicted again). Such a plan waits to be hot in its own right, as a small fragment does (``Device.hot_runs()`` runs;
never where that is 0). So does the first plan of a structure that has been planned at other shapes by the time it
would start compiling (:meth:`Tier.ran`), or after which the device planned any structure at a new shape, or made
more than :data:`CHURN` other plans: the first batch of a loop whose batches change shape cannot tell it from a
fixed-shape loop's, its second batch can (a warm run of the char-level transformer compiled a new structure's first
shape, ~3-6 s of gcc for a plan run once or twice; its forward is a structure per batch size, whose first shape may
come again before its structure changes shape, while its backward changes shape every step). A fixed-shape loop
plans each fragment once, and compiles it after its first runs.

A large fragment's compile runs the compiler only once it has earned it too (issue 37: an 8-step BiLSTM's cold run
spent ~1.5 s of gcc on kernels it never ran): after its first runs it compiles if its kernels are all in the kernel
cache (``cached_only``, as above; a load); otherwise its runs on the interpreter are timed (the running thread's CPU
time, as a trial's) and it compiles, building them, once they have taken ``Device.hot_build_time()`` times what the
build is expected to take (the CPU: ``TENSORWIRE_CPU_COMPILE_BUILD_TIME``, default 1; ``NotCached.seconds``, the
kernel cache's ``expected_seconds``: its source at the rate this worker's builds have taken, CPU seconds of the
compiler's processes). A compile a fragment's runs have not paid for is seldom paid back within them; one they have
paid for costs at most as much again. The time spent is the device's, kept by fragment (:class:`Earning`,
:meth:`Structures.earning`), like a trial's: a later plan of the fragment (the script run again) asks the kernel
cache after its first run, and goes on from the time spent so far.

The compiled and the interpreted runs of a plan agree to rounding (a float32 sum accumulates in float64 in a C
kernel, pairwise in numpy), as a fragment above the threshold agrees with one below it.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext

from tensorwire.protocol.graph import attrs_key

from .codegen.cache import NotCached, cached_only, holds_nothing
from .jobs import uninterrupted

log = logging.getLogger("tensorwire.executor")

#: kept-slot sets a hot plan's runners are built for ahead of time (the executor keeps as many runners a plan)
MAX_KEEPS = 8
#: fragment structures (and fragments) a device remembers the plans of (least recently planned forgotten first)
STRUCTURES_REMEMBERED = 1 << 14
#: a Tier's ``hot_runs`` when its plan is never to be compiled (its runs are counted all the same)
NEVER = 1 << 62
#: plans a device may make between a new plan and its early compile for it to count as a fixed loop's (see
#: :meth:`Structures.unsettled`; the char-level transformer's warm runs replayed each round's plans, ~175 new ones
#: between two runs of a plan, and compiled the few whose structures came once a round). Generous: a fixed-shape
#: loop whose step is many fragments makes them all before it runs the first one again
CHURN = 64
#: a trial not over after this many times its own runs (a warm-up and ``Device.hot_trials()`` each way) of its plan
#: (they kept other slots, or the plan's runners were replaced) ends: the plan stays interpreted, unmeasured (not
#: remembered as slower)
TRIAL_PATIENCE = 8
#: how much slower (a fraction of the interpreted fastest CPU time a run) a compiled plan may measure in its trial and
#: still be taken: the two agree to rounding, and a compiled plan holds fewer temporaries
TRIAL_MARGIN = 0.03
#: a compiled run at most this fraction of the interpreted fastest run so far settles the trial at once: compiled. The
#: times are the running thread's CPU time, which others' load only inflates by cache misses and a shared core's
#: cycles, never twice over; the interpreted way's further runs would cost what a slow plan costs for nothing (an
#: 8-op chain on 8M floats: 50 ms a run interpreted, 7 compiled, five runs each way)
TRIAL_DECISIVE = 0.5


class _Unkeyed:
    """The type of :data:`UNKEYED`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNKEYED"


#: a node's attributes that have no key (not plain values): its fragment is keyed by the object (see fragment)
UNKEYED = _Unkeyed()

#: the nice value the background compiles run at (the compile thread's, which the compiler processes it starts
#: inherit): a hot plan's compile is work the run can do without, and on a machine with few cores it took the cores
#: the run's own processes wanted (issue 37: the char-RNN's first run spent ~0.7 s of gcc CPU beside a client and a
#: worker that keep two cores busy); at a lower priority it takes what they leave idle. 0: the run's priority
HOT_NICE = 5

_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _lower_priority() -> None:
    """Lower the calling thread's priority by :data:`HOT_NICE` (Linux: a thread's nice value is its own, and a
    process it starts inherits it); where that cannot be done the compiles run at the run's priority."""
    if HOT_NICE <= 0 or not hasattr(os, "setpriority") or not sys.platform.startswith("linux"):
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(os.getpriority(os.PRIO_PROCESS, tid) + HOT_NICE, 19))
    except OSError:
        pass


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:  # one thread: compiles queue up rather than take every core at once
            _POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tensorwire-hot", initializer=_lower_priority)
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


def build_in_background(build) -> bool:
    """Run ``build()`` on the compile thread, as a hot plan's compile (lower priority, one at a time, within the
    compiles' :class:`Budget`): False when the budget does not admit it now (ask again later). For kernels other
    than a plan's whose build has been earned as a large fragment's is (:class:`Earning`; the CPU's recurrent cells:
    ``backends/cpu/rnn_cells.py``); ``build`` handles its own errors."""
    if not _BUDGET.admit():
        return False

    def run() -> None:
        t0 = time.monotonic()
        try:
            build()
        finally:
            _BUDGET.spent(time.monotonic() - t0)

    _pool().submit(run)
    return True


class Measured:
    """A fragment's trial on a device (:class:`Trial`), kept by the device (:meth:`Structures.measure`) beyond the
    plan and the session that ran it: the CPU seconds of each run of its interpreted and its compiled runners
    (``times``: the trials of later plans of the fragment add theirs), and the verdict once there is one
    (``compiled``: True, the compiled plan was taken; False, it measured slower; None, not over yet). Plain numbers:
    no plan, buffer or value of a session's."""

    __slots__ = ("times", "compiled")

    def __init__(self):
        self.times: tuple[list[float], list[float]] = ([], [])  # interpreted, compiled: CPU seconds a run
        self.compiled: bool | None = None


class Earning:
    """A large fragment's wait for its kernels' build (see the module doc), kept by the device by fragment
    (:meth:`Structures.earning`) beyond the plan and the session that ran it: the CPU seconds its interpreted runs
    have taken (``spent``) and what building its kernels is expected to cost, times the device's
    ``hot_build_time()`` (``cost``; None until its compile found them not in the kernel cache)."""

    __slots__ = ("spent", "cost")

    def __init__(self):
        self.spent = 0.0
        self.cost: float | None = None

    def earned(self) -> bool:
        return self.cost is not None and self.spent >= self.cost


class Structures:
    """What one device has planned: the shapes each fragment structure was planned at, and the fragments planned
    (hashes: :func:`structure`, :func:`shapes`, :func:`fragment`; the last :data:`STRUCTURES_REMEMBERED` of each)."""

    def __init__(self):
        self._shapes: OrderedDict[int, set] = OrderedDict()
        self._fragments: OrderedDict[int, None] = OrderedDict()
        #: fragments whose compiled plan this device has measured: their trials, over or not (see :class:`Measured`)
        self._measured: OrderedDict[int, Measured] = OrderedDict()
        #: large fragments whose kernels wait to be built: the time their runs have spent (see :class:`Earning`)
        self._earning: OrderedDict[int, Earning] = OrderedDict()
        self._lock = threading.Lock()
        self.planned = 0  # plans noted so far (see :meth:`unsettled`)
        #: plans noted of a structure planned before at other shapes (see :meth:`unsettled`)
        self.reshaped = 0
        #: verdicts applied to plans so far: compiled plans taken (after a trial, unmeasured, or on an earlier trial's
        #: verdict), and compiled plans measured slower by a trial (kept interpreted)
        self.verdicts = {"compiled": 0, "interpreted": 0}

    def note_verdict(self, compiled: bool) -> None:
        """Count a verdict applied to a plan (:meth:`Tier.take`; a compiled plan taken unmeasured counts as
        compiled). The verdict itself is the fragment's :class:`Measured`'s, which its trial sets."""
        with self._lock:
            self.verdicts["compiled" if compiled else "interpreted"] += 1

    def measured(self, fragment: int) -> Measured | None:
        """``fragment``'s trial on this device (:class:`Measured`: over or not), or None where it has had none
        (or has been forgotten: the last :data:`STRUCTURES_REMEMBERED` fragments used are remembered)."""
        with self._lock:
            got = self._measured.get(fragment)
            if got is not None:
                self._measured.move_to_end(fragment)
            return got

    def measure(self, fragment: int) -> Measured:
        """``fragment``'s trial on this device, made if it has none (see :meth:`measured`)."""
        with self._lock:
            got = self._measured.pop(fragment, None) or Measured()
            self._measured[fragment] = got
            if len(self._measured) > STRUCTURES_REMEMBERED:
                self._measured.popitem(last=False)
            return got

    def earning(self, fragment: int) -> Earning | None:
        """``fragment``'s wait for its kernels' build (:class:`Earning`), or None where it has none."""
        with self._lock:
            got = self._earning.get(fragment)
            if got is not None:
                self._earning.move_to_end(fragment)
            return got

    def keep_earning(self, fragment: int, earning: Earning) -> None:
        """Remember ``earning`` as ``fragment``'s (a later plan of it goes on from the time spent so far)."""
        with self._lock:
            self._earning[fragment] = earning
            self._earning.move_to_end(fragment)
            if len(self._earning) > STRUCTURES_REMEMBERED:
                self._earning.popitem(last=False)

    def earned(self, fragment: int) -> None:
        """Forget ``fragment``'s wait: its compile has begun building its kernels (or found them cached)."""
        with self._lock:
            self._earning.pop(fragment, None)

    def slower(self, fragment: int) -> bool:
        """Whether ``fragment``'s compiled plan measured slower than its interpreted one (see :class:`Trial`)."""
        got = self._measured.get(fragment)
        return got is not None and got.compiled is False

    @property
    def any_measured(self) -> bool:
        """Whether any fragment's compiled plan has been measured, or waits to earn its build (else
        :func:`tier_for` need not hash a plan)."""
        return bool(self._measured) or bool(self._earning)

    def settled(self, structure: int, shapes: int, fragment: int) -> bool:
        """Note a plan of ``fragment`` (of ``structure`` at ``shapes``); False when that structure was planned at
        other shapes or that fragment was planned before."""
        with self._lock:
            self.planned += 1
            seen = self._shapes.pop(structure, None) or set()
            if seen and shapes not in seen:
                self.reshaped += 1
            if len(seen) < 2:
                seen.add(shapes)
            self._shapes[structure] = seen
            again = self._fragments.pop(fragment, False) is None
            self._fragments[fragment] = None
            for d in (self._shapes, self._fragments):
                if len(d) > STRUCTURES_REMEMBERED:
                    d.popitem(last=False)
            return len(seen) == 1 and not again

    def unsettled(self, structure: int, since: tuple[int, int]) -> bool:
        """Whether a plan of ``structure`` made when :attr:`planned` and :attr:`reshaped` were ``since`` is no fixed
        loop's after all: its structure has been planned at other shapes since, or any structure has (a loop whose
        batches change shape: one of its fragments may keep its structure's first shape for a few steps, and come
        again before its structure changes shape; issue 37: the char-level transformer, whose forward's structure
        is one per batch size, compiled ~1 s of gcc each for two such plans in its first run, run twice each), or the
        device has made more than :data:`CHURN` other plans (a loop that replays a fixed set of plans makes none;
        one whose fragments keep changing makes one or more a step, and runs each of them seldom)."""
        planned, reshaped = since
        with self._lock:
            return (len(self._shapes.get(structure, ())) > 1 or self.reshaped > reshaped
                    or self.planned - planned > CHURN)


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


def fragment(structure: int, shapes: int, nodes: list, attrs_keys: list | None = None) -> int:
    """A fragment, hashed: its structure, its input shapes and its nodes' attributes (``attrs_keys``: each node's
    :func:`~tensorwire.protocol.graph.attrs_key`, as planning froze them already; :data:`UNKEYED` in it, or an
    attribute that is not a plain value: TypeError)."""
    if attrs_keys is None:
        attrs_keys = [attrs_key(n[0], n[2]) for n in nodes]
    elif UNKEYED in attrs_keys:
        raise TypeError("a node's attributes are not plain values")
    return hash((structure, shapes, tuple(attrs_keys)))


def tier_for(planner: Callable, device, runs: int, nodes: list, ext_metas: list, node_meta: list,
             attrs_keys: list | None = None) -> Tier | None:
    """The :class:`Tier` of a new plan that the device compiles when hot, compiled after ``runs`` runs (its steps'
    count, ``Device.hot_runs(steps)``), or, for a structure this device has planned at other shapes or a fragment it
    has planned before, after as many as a small fragment waits (``Device.hot_runs()``) when that is more; after its
    first run, for a fragment whose compiled plan the device measured before and took, or has not finished measuring
    (:meth:`Structures.measured`); None: it is never compiled (a fragment whose compiled plan measured slower; see
    the module doc). ``attrs_keys``: as :func:`fragment` takes them. ``planner``: how the plan is made again once it
    is hot (the executor's ``compile_plan``, which plans with these tiers: it is handed down, not imported back)."""
    hot_runs = device.hot_runs()
    known = structures_of(device)
    keys = None  # (the plan's structure, shapes and fragment, hashed once)
    if known.any_measured and runs > 0:
        keys = _keys(nodes, ext_metas, node_meta, attrs_keys)
        measured = known.measured(keys[2]) if keys[2] is not None else None
        if measured is not None:  # a plan of it was compiled before (see Trial): its verdict, or the rest of its trial
            if measured.compiled is False:
                return None  # its compiled plan measured slower
            return Tier(planner, nodes, ext_metas, 1, attrs_keys=attrs_keys, measured=measured, fragment=keys[2])
        earning = known.earning(keys[2]) if keys[2] is not None else None
        if earning is not None:  # a plan of it waited to earn its kernels' build: this one goes on from there
            return Tier(planner, nodes, ext_metas, 1, attrs_keys=attrs_keys, fragment=keys[2], earning=earning)
    if 0 < hot_runs <= runs or runs <= 0:
        return Tier(planner, nodes, ext_metas, runs, attrs_keys=attrs_keys) if runs > 0 else None
    st, sh, keyed = keys or _keys(nodes, ext_metas, node_meta, attrs_keys)
    # (attributes that are not plain values: a fragment that will not be planned again as such)
    fr = keyed if keyed is not None else hash((st, sh, id(nodes)))
    if known.settled(st, sh, fr):  # (early: unless it proves unsettled meanwhile; built once it has earned it)
        return Tier(planner, nodes, ext_metas, runs, (st, (known.planned, known.reshaped)), attrs_keys=attrs_keys,
                    fragment=keyed, earning=Earning() if device.hot_build_time() > 0 else None)
    return Tier(planner, nodes, ext_metas, hot_runs, attrs_keys=attrs_keys) if hot_runs > 0 else None


def _keys(nodes: list, ext_metas: list, node_meta: list, attrs_keys: list | None) -> tuple:
    """``(structure, shapes, fragment)`` of a plan's fragment, hashed (:func:`structure`, :func:`shapes`,
    :func:`fragment`); the fragment None where its attributes are not plain values."""
    st, sh = structure(nodes, ext_metas), shapes(ext_metas, node_meta)
    try:
        return st, sh, fragment(st, sh, nodes, attrs_keys)
    except TypeError:
        return st, sh, None


class Tier:
    """What a plan needs to be compiled later: its fragment, the metas of its inputs, how often it ran and with
    which kept-slot sets, the compiled plan once it is ready (``ready``; ``done`` is set either way), and its
    :class:`Trial` against the interpreted plan (``trial``), whose verdict :meth:`take` applies. ``measured``: the
    device's trial of the fragment (``fragment``: its hash) when a plan of it was compiled before: the plan compiles
    from the kernel cache after its first run, and is taken unmeasured (its compiled plan was taken before) or goes
    on with that trial, adding its runs."""

    __slots__ = ("planner", "nodes", "ext_metas", "hot_runs", "runs", "keeps", "ready", "done", "early", "attrs_keys",
                 "trial", "known", "verdict", "measured", "fragment", "earning", "_timed")

    def __init__(self, planner: Callable, nodes: list, ext_metas: list, hot_runs: int, early: tuple | None = None,
                 attrs_keys: list | None = None, measured: Measured | None = None, fragment: int | None = None,
                 earning: Earning | None = None):
        self.planner = planner  # (``compile_plan``'s signature: see :func:`tier_for`)
        self.nodes, self.ext_metas = nodes, ext_metas
        self.hot_runs = hot_runs  # the runs after which it compiles (``Device.hot_runs`` of its steps)
        #: ``(structure, (Structures.planned, Structures.reshaped) when it was made)`` of a plan that compiles early
        #: (its structure's first shape): it waits as long as a small fragment after all if it proves unsettled by
        #: then (see :meth:`ran`)
        self.early = early
        self.attrs_keys = attrs_keys  # (as :func:`fragment` takes them: to key its trial on the device)
        self.measured = measured
        self.fragment = fragment  # (:func:`fragment`'s hash, once known; None where not keyed)
        #: a large fragment's: its kernels are built only once its interpreted runs have earned it (see
        #: :class:`Earning`; the runs are timed until then: ``_timed``, kept-slot set -> the runner timed)
        self.earning = earning
        self._timed: dict = {}
        self.runs = 0
        self.keeps: list[frozenset] = []
        self.ready = None
        self.done = threading.Event()
        self.trial: Trial | None = None  # made with the compiled plan; installed by :meth:`take`
        self.known: Structures | None = None  # the device's (set when the compile starts)
        #: None until the plan is settled; then "compiled" (taken), "slower" (the compiled plan measured slower: the
        #: plan stays interpreted) or "not compiled" (no compiled plan was made: it would not make fewer calls, or
        #: its compile failed; or its trial could not measure it)
        self.verdict: str | None = None

    def ran(self, device, plan, keep: frozenset) -> None:
        """Count one run of ``plan`` keeping ``keep`` (the thread running it); start compiling when it is hot."""
        self.runs += 1
        hot_runs = self.hot_runs
        if self.runs > hot_runs:  # compiling already: the kept-slot sets went with it
            return
        if keep not in self.keeps and len(self.keeps) < MAX_KEEPS:
            self.keeps.append(keep)
        earning = self.earning
        if earning is not None:
            self._time(plan, keep)
            if earning.earned():  # its runs have taken what building its kernels is expected to: build them now
                hot_runs = self.hot_runs = self.runs
        if self.runs == hot_runs:
            early, self.early = self.early, None
            if early is not None and structures_of(device).unsettled(*early):  # compiled when hot, if ever
                self.hot_runs = max(device.hot_runs(), hot_runs) if device.hot_runs() > 0 else NEVER
                self.earning = None  # (as a small fragment's: see build_runs below)
                self._untime(plan)
                return
            # the compiler runs only for a plan that has earned it; until then a plan compiles only if its kernels
            # are all in the kernel cache (see _compile): a large fragment's until its runs have taken the time its
            # build is expected to take (earning; NEVER: no count of runs), a small fragment's plan (hot after the
            # device's hot_runs) until it has run hot_build_runs times; so does a plan of a fragment compiled before
            # (its kernels were built then)
            if earning is not None:
                build_runs = 0 if earning.earned() else NEVER
            else:
                build_runs = (device.hot_build_runs() if self.measured is not None
                              or (early is None and hot_runs >= device.hot_runs()) else 0)
            if build_runs > self.runs and earning is None and holds_nothing():
                self._wait_for_build(plan, build_runs)
                return
            if not _BUDGET.admit():  # compiles are queued, or took their share of the time: try at the next run
                self.runs -= 1
                return
            self.known = structures_of(device)
            if build_runs <= self.runs:
                self._untime(plan)
            log.debug("hot plan of %d steps (%d nodes) compiles after %d runs%s%s", len(plan.program.steps),
                      len(self.nodes), self.runs, " (its structure's first shape)" if early is not None else
                      " if its kernels are in the cache" if build_runs > self.runs else
                      f" (its runs took {earning.spent:.3f} s, its build ~{earning.cost:.3f} s)"
                      if earning is not None else "",
                      "" if self.measured is None else " (taken before)" if self.measured.compiled else
                      " (its trial goes on)")
            with uninterrupted():  # (the compile thread may start now: jobs.uninterrupted says why)
                _pool().submit(self._compile, device, plan, list(self.keeps),
                               build_runs if build_runs > self.runs else 0)

    def _wait_for_build(self, plan, build_runs: int) -> None:
        """Go on interpreted until the plan has run ``build_runs`` times, as a compile that found its kernels not in
        the kernel cache does (:meth:`_compile`), without that compile: the cache holds nothing
        (:func:`~.codegen.cache.holds_nothing`), so it would plan, lower and render the fragment on the compile
        thread only to find out (issue 37: a cold char-RNN run spent ~240M instructions there, beside its runs)."""
        log.debug("hot plan of %d steps: the kernel cache is empty; it compiles after %d runs",
                  len(plan.program.steps), build_runs)
        self.hot_runs = build_runs

    def _time(self, plan, keep: frozenset) -> None:
        """Have ``plan``'s runner for ``keep`` add the CPU time of each run to :attr:`earning` (from the next run:
        this one's runner was fetched already)."""
        run = plan.runners.get(keep)
        earning = self.earning
        if run is None or getattr(run, "earning", None) is earning:
            return
        clock = time.thread_time

        def timed(*args):
            t0 = clock()
            try:
                return run(*args)
            finally:
                earning.spent += clock() - t0

        timed.earning = earning
        producers = getattr(run, "producers", None)
        if producers is not None:  # (it answers as early as the runner it times)
            timed.producers = producers
        self._timed[keep] = run
        plan.runners[keep] = timed

    def _untime(self, plan) -> None:
        """Give ``plan`` back the runners :meth:`_time` timed."""
        for keep, run in self._timed.items():
            if getattr(plan.runners.get(keep), "earning", None) is not None:
                plan.runners[keep] = run
        self._timed.clear()

    def _compile(self, device, plan, keeps: list[frozenset], build_runs: int = 0) -> None:
        """Compile the plan for the kept-slot sets ``keeps`` (the compile thread). ``build_runs`` > 0: only if its
        kernels are all in the kernel cache; otherwise nothing is built, and the plan goes on interpreted until it
        has run ``build_runs`` times, when :meth:`ran` starts its compile again (building them)."""
        t0 = time.monotonic()
        waits = False
        try:
            if self.measured is not None and self.measured.compiled is False:  # (measured slower meanwhile)
                return
            with cached_only() if build_runs else nullcontext():
                hot = self.planner(device, self.nodes, self.ext_metas, hot=True)
                by_node = {s: hot.node_slot[j] for j, s in enumerate(plan.node_slot) if s is not None}
                built = 0
                missing: NotCached | None = None
                for keep in keeps:
                    hkeep = frozenset(by_node[s] for s in keep if by_node.get(s) is not None)
                    try:
                        run = device.hot_runner(hot, hkeep, len(plan.program.steps))
                    except NotCached as e:  # (a large fragment's other kept-slot sets are priced too: its build
                        if self.earning is None:  # would make them all)
                            raise
                        missing = e if missing is None else NotCached(str(missing), missing.seconds + e.seconds)
                        continue
                    if run is not None:
                        hot.runners[hkeep] = run
                        built += 1
                if missing is not None:
                    raise missing
            if built == len(keeps):
                trials = device.hot_trials()
                measured = self.measured
                if trials > 0 and (measured is None or measured.compiled is None):
                    if measured is None:  # the device keeps the trial (a later plan of the fragment goes on with it)
                        if self.fragment is None:
                            self.fragment = _keys(self.nodes, self.ext_metas, plan.node_meta, self.attrs_keys)[2]
                        measured = Measured() if self.fragment is None else self.known.measure(self.fragment)
                    self.trial = Trial(plan, hot, by_node, keeps, trials, measured)
                self.ready = hot
        except NotCached as e:  # the compiler would run: not before the plan has earned it
            waits = True
            earning = self.earning
            if earning is not None:  # its runs must take the time building its kernels is expected to take
                earning.cost = e.seconds * device.hot_build_time()
                if self.fragment is not None:  # (a later plan of the fragment goes on from the time spent)
                    self.known.keep_earning(self.fragment, earning)
                log.debug("hot plan of %d steps: its kernels are not in the kernel cache; it compiles once its runs "
                          "have taken %.3f s (%.3f s so far)", len(plan.program.steps), earning.cost, earning.spent)
            else:
                log.debug("hot plan of %d steps: its kernels are not in the kernel cache; it compiles after %d runs",
                          len(plan.program.steps), max(build_runs, self.runs + 1))
            self.hot_runs = max(build_runs, self.runs + 1)
        except Exception:  # the plan goes on interpreted, as it ran so far
            log.warning("compiling a hot plan failed; it stays interpreted", exc_info=True)
        finally:
            _BUDGET.spent(time.monotonic() - t0)
            if not waits:
                if self.earning is not None and self.fragment is not None:  # (built, or found cached: no more waits)
                    self.known.earned(self.fragment)
                self.done.set()

    def take(self, plan) -> bool:
        """Turn ``plan`` into its compiled form, if that is ready and its trial found it no slower (the thread that
        runs the plan, between runs: it installs the trial's runners on the plan first, and applies the verdict
        once the trial has one); True when it changed. The plan stops counting once its compile is over, and is
        settled (``verdict``) when this returns True, or False with ``plan.tier`` None."""
        if not self.done.is_set():
            return False
        if self._timed:  # (its kernels were in the cache after all)
            self._untime(plan)
        hot, trial = self.ready, self.trial
        if hot is None:
            plan.tier = None
            self.verdict = "not compiled"
            return False
        if trial is not None:
            if trial.installed is None:
                trial.install(plan, self.runs)
                return False
            if trial.verdict is None and self.runs - trial.installed <= TRIAL_PATIENCE * (2 * trial.runs + 1):
                return False
            trial.uninstall(plan)
            self.trial = None
            if trial.verdict is None or trial.unmeasured:  # its runs kept other slots, or its runners went
                plan.tier = None
                self.ready = None
                self.verdict = "not compiled"
                return False
            compiled = trial.verdict
            log.debug("hot plan of %d steps: interpreted %.1f us, compiled %.1f us a run (fastest of %d): %s",
                      len(plan.program.steps), trial.best(0) * 1e6, trial.best(1) * 1e6, trial.runs,
                      "compiled" if compiled else "stays interpreted")
            if self.known is not None:
                self.known.note_verdict(compiled)
            if not compiled:
                plan.tier = None
                self.ready = None
                self.verdict = "slower"
                return False
        elif self.known is not None:
            self.known.note_verdict(True)
        plan.tier = None
        self.verdict = "compiled"
        vars(plan).update(vars(hot))
        return True


class Trial:
    """A hot plan's interpreted and compiled runners, measured against each other on the plan's own runs (see the
    module doc). :meth:`install` puts a measuring runner on the interpreted plan for each kept-slot set the compiled
    plan was built for: a first run warms the compiled runner, then each run goes the way measured fewer times so far
    (interpreted first: a new trial alternates), until each way has ``runs`` times (the running thread's CPU time
    around the runner alone); ``verdict`` is then True (take the compiled plan: its fastest run is at most
    :data:`TRIAL_MARGIN` above the interpreted one's, or False), or True as soon as a compiled run took at most
    :data:`TRIAL_DECISIVE` of the interpreted fastest; later runs are interpreted until :meth:`Tier.take` applies it.
    A compiled run that raises settles it: False. One that cannot measure (none of the kept-slot sets the plan ran
    with, see :data:`TRIAL_PATIENCE`) leaves the plan interpreted, not remembered as slower.

    The times and the verdict are the device's (``measured``, :class:`Measured`, kept by fragment): a trial that a
    plan's session did not see to its end goes on with the next plan of the fragment, from the runs measured so far;
    one that others' runs ended is decided at its first run.

    The compiled runner runs on the interpreted plan's slots: the inputs are copied into a list laid out as the
    compiled plan's (the same external inputs first), and the kept values copied back, so the batch gets the
    values and the plan cache the layout it expects whichever way ran."""

    def __init__(self, plan, hot, by_node: dict, keeps: list[frozenset], runs: int, measured: Measured | None = None):
        self.runs = runs
        self.measured = measured if measured is not None else Measured()
        self.times = self.measured.times  # interpreted, compiled: CPU seconds a run (this plan's and earlier ones')
        self.turn = 0  # runs so far (0: the compiled warm-up is next)
        self.verdict: bool | None = None
        self.unmeasured = False  # no kept-slot set of the plan's could be measured: the plan stays interpreted
        self.installed: int | None = None  # the plan's runs when the trial was installed
        self._hot = hot
        self._n_ext = len(plan.ext_metas)
        self._by_node = by_node
        self._keeps = keeps
        self._saved: dict[frozenset, object] = {}  # kept-slot set -> the interpreted runner it replaced

    def best(self, which: int) -> float:
        """The fastest run's CPU seconds, interpreted (``which`` 0) or compiled (1); nan before any."""
        t = self.times[which]
        return min(t) if t else float("nan")

    def _settle(self, compiled: bool) -> None:
        self.verdict = self.measured.compiled = compiled

    def _decided(self) -> bool:
        """Settle the trial once each way has its runs (here or in earlier plans of the fragment), or as soon as a
        compiled run took at most :data:`TRIAL_DECISIVE` of the interpreted fastest; whether it is settled."""
        if self.verdict is None:
            interp, comp = self.times
            if interp and comp and min(comp) <= min(interp) * TRIAL_DECISIVE:
                self._settle(True)
            elif len(interp) >= self.runs and len(comp) >= self.runs:
                self._settle(self.best(1) <= self.best(0) * (1 + TRIAL_MARGIN))
        return self.verdict is not None

    def install(self, plan, runs: int) -> None:
        """Put the measuring runners on ``plan`` (the interpreted plan, run ``runs`` times so far; the thread that
        runs it, between runs)."""
        self.installed = runs
        for keep in self._keeps:
            interp = plan.runners.get(keep)
            back = [(s, self._by_node.get(s)) for s in keep]
            if interp is None or any(hs is None for _, hs in back):  # (not measured: runs interpreted)
                continue
            hkeep = frozenset(hs for _, hs in back)
            self._saved[keep] = interp
            plan.runners[keep] = self._runner(interp, self._hot.runners[hkeep], back)
        if not self._saved:
            self.verdict, self.unmeasured = False, True

    def uninstall(self, plan) -> None:
        """Give ``plan`` its interpreted runners back."""
        for keep, interp in self._saved.items():
            if keep in plan.runners:
                plan.runners[keep] = interp
        self._saved.clear()

    def _runner(self, interp, compiled, back: list):
        nslots, n_ext, times = self._hot.nslots, self._n_ext, self.times
        clock = time.thread_time

        def run_compiled(env, dyn, frames) -> float:
            henv = [None] * nslots
            henv[:n_ext] = env[:n_ext]
            t0 = clock()
            compiled(henv, dyn, frames)
            took = clock() - t0
            for s, hs in back:
                env[s] = henv[hs]
            return took

        def run(env, dyn, frames):
            if self.verdict is not None or self._decided():
                return interp(env, dyn, frames)
            turn = self.turn
            self.turn = turn + 1
            if turn == 0:  # warm-up: the compiled runner's first call (its library's pages, its buffers)
                try:
                    run_compiled(env, dyn, frames)
                except Exception:
                    self._settle(False)
                    raise
                return None
            if len(times[0]) <= len(times[1]):
                t0 = clock()
                interp(env, dyn, frames)
                times[0].append(clock() - t0)
            else:
                try:
                    times[1].append(run_compiled(env, dyn, frames))
                except Exception:
                    self._settle(False)
                    raise
            self._decided()
            return None

        return run
