"""Compiling a fragment into a plan of primitive steps, and running it.

The worker hands :func:`compile_plan` a fragment (``[op, refs, attrs]`` nodes, see
:mod:`tensorwire.protocol.graph`) and the metas of its external inputs. Composite ops the backend
has no native kernel for are expanded through their decomposition from the op table; a node that
fails inference becomes a failing step, and every node that depends on it fails with it.
The plan is cached by the worker and replayed with fresh ids.

:func:`execute` is a generator: it yields ``("recv", k)`` when it needs the buffer of incoming
transfer ``k`` (and is resumed with it), and ``("send", k, value)`` to hand a buffer to transfer
``k``. That lets the worker park a session waiting for another device without blocking others.
"""

from __future__ import annotations

import logging
import marshal
import threading
import time
from collections import OrderedDict

import numpy as np

from tensorwire.protocol.errors import DependencyFailed, ProtocolError, error_to_wire
from tensorwire.protocol.graph import RECV, SEND, ExpandingBuilder, Value, attrs_key, freeze
from tensorwire.protocol.ops import OPS, a_dtype, a_int, get_op, infer
from tensorwire.protocol.shapes import check_shape

from .base import Device, Program, Step, complex_of
from .compiled_device import remember_complex
from .expansion_counts import counts_as
from .hot import UNKEYED, Tier, tier_for
from .jobs import plan_work, step_work
from .quota import peak_bytes
from .worker_ops import WORKER_OPS, dynamic_call

log = logging.getLogger("tensorwire.executor")

FAIL = "__fail__"
COLL = "collective"
MAX_FRAGMENT_NODES = 1 << 20
#: dynamic attribute values a plan remembers as checked (:meth:`Plan.check_dynamic`)
MAX_DYN_CHECKED = 1024
#: whole dynamic-attribute maps (a batch's ``dyn``) a plan remembers as checked (:meth:`Plan.check_dynamic`)
MAX_DYN_SEEN = 64


class Fail:
    """A failed value: stored in place of a buffer so dependents fail with it."""

    __slots__ = ("err",)

    def __init__(self, err: dict):
        self.err = err

    def dependent(self, node: int | None) -> Fail:
        origin = self.err.get("origin", self.err.get("node"))
        msg = self.err.get("message", "")
        if self.err.get("code") == DependencyFailed.code:
            text = msg
        else:
            text = f"an op it depends on failed ({self.err.get('code')}: {msg})"
        e = {"code": DependencyFailed.code, "message": text, "origin": origin}
        if node is not None:
            e["node"] = node
        return Fail(e)


def _ints_key(j: int, d) -> tuple | None:
    """``(j, (name, value), ...)`` for dynamic attributes ``d`` of node ``j`` whose values are all ints or lists of
    ints (lists as tuples), else None (a value that ``==`` would not tell apart by type)."""
    if type(d) is not dict:
        return None
    key: list = [j]
    for k, v in d.items():
        t = type(v)
        if t is list:
            for x in v:
                if type(x) is not int:
                    return None
            v = tuple(v)
        elif t is not int:
            return None
        key.append((k, v))
    return tuple(key)


class _PlanBuilder(ExpandingBuilder):
    def __init__(self, native, first_slot: int):
        super().__init__(native)
        self.steps: list[Step] = []
        self.next_slot = first_slot
        self.met: set | None = None  # the composites the node being planned met (when asked: see compile_plan)
        self.memos: dict[int, list] = {}  # step index -> its remembered expansion's holder (see Plan.step_memos)
        self.frozen = UNKEYED  # the attributes of the node :func:`_expand` expanded last, frozen (its key's)
        #: facts of ``steps[:counted]`` the plan asks of every step: their work (``jobs.plan_work``) and whether one
        #: makes or reads a complex value (``compiled_device.has_complex``), summed per remembered expansion
        self.counted = 0
        self.work = 0
        self.complex = False

    def count(self, expansion: _Expansion) -> None:
        """Add the facts of ``expansion``'s steps, just appended."""
        self.work += expansion.work
        self.complex = self.complex or expansion.complex
        self.counted = len(self.steps)

    def count_rest(self) -> None:
        """Add the facts of the steps appended since the last count, one by one (steps not from an expansion)."""
        for st in self.steps[self.counted:]:
            self.work += step_work(st.op, st.shape, st.in_meta)
            self.complex = self.complex or st.complex_dtype() is not None
        self.counted = len(self.steps)

    def op(self, name: str, /, *inputs: Value, **attrs) -> Value:
        if self.met is not None and get_op(name).decompose is not None:
            self.met.add(name)
        return super().op(name, *inputs, **attrs)

    def _emit(self, name, inputs, attrs, shape, dtype) -> int:
        slot = self.next_slot
        self.next_slot += 1
        st = Step(name, tuple(v.ref for v in inputs), attrs, shape, dtype, slot, self.origin)
        st.in_meta = tuple((v.shape, v.dtype) for v in inputs)
        self.steps.append(st)
        return slot


class Plan:
    """A compiled fragment: steps over slots (external inputs first), and where each node's output lives."""

    def __init__(self, program: Program, node_slot: list[int | None], ext_metas: list, nslots: int,
                 node_meta: list, work: int | None = None):
        self.program = program
        self.node_slot = node_slot
        self.ext_metas = ext_metas
        self.nslots = nslots
        self.node_meta = node_meta
        self.failed_nodes = [j for j, m in enumerate(node_meta) if type(m) is Fail]
        self.runners: dict[frozenset, object] = {}  # kept-slot set -> straight-line function
        steps = program.steps
        special = {st.op for st in steps}.intersection(_SPECIAL_OPS)  # (one pass over the steps; usually empty)
        self.has_transfers = bool(special & _TRANSFER_OPS)
        self.send_keys = frozenset(st.attrs["xfer"] for st in steps if st.op == SEND) if SEND in special else _NONE
        self.recv_keys = frozenset(st.attrs["xfer"] for st in steps if st.op == RECV) if RECV in special else _NONE
        # elements touched: decides where the worker runs it (``work``: the planner's sum of it)
        self.work = plan_work(steps) if work is None else work
        self.worker_ops = bool(special & WORKER_OPS.keys())  # reads frames or the hub
        self.reads_hub = "hub_tensor" in special  # (a download: not the replay fast path's)
        #: (released-outputs mask, kept nodes) -> what replays keeping those outputs share (:meth:`kept`), and
        #: kept-slot set -> the same :class:`Kept` (one a set, however many masks give it): a replay asks every time
        #: (issue 37)
        self._keeps: dict[tuple, Kept] = {}
        self._kepts: dict[frozenset, Kept] = {}
        self.hot = False  # planned as the device plans fragments it compiles, however small (see hot.py)
        self.tier: Tier | None = None  # interpreted because small: how it gets compiled once hot (see hot.py)
        self.interpreted = True  # runs on the step-by-step kernels, not kernels compiled for it (see compile_plan)
        self._slot_steps: dict[int, int] | None = None
        #: node -> (op, its attrs, input metas, output meta) for the nodes whose dynamic attrs shape their result
        #: (a slice's bounds): a replay's values are checked against them (:meth:`check_dynamic`)
        self.dyn_checks: dict[int, tuple] = {}
        #: step index -> ``[None | (device, kernel, callable)]``, shared by every step that one remembered expansion
        #: (:func:`_expand`) emitted: the straight-line runner specializes such a step once, not once a plan
        self.step_memos: dict[int, list] = {}
        self._dyn_ok: set = set()  # (node, its dynamic attrs' items) checked already (see check_dynamic)
        self._dyn_seen: set = set()  # whole ``dyn`` maps checked already, marshalled (see check_dynamic)
        #: each node's attributes as :func:`.hot.fragment` keys them, while the plan is being made (then None)
        self.attrs_keys: list | None = None

    def check_dynamic(self, dyn: dict) -> None:
        """Raise ProtocolError unless every node's replayed dynamic attrs give it the result this plan was made for
        (a slice's new bounds in range and of the planned lengths): kernels built for the plan address memory by
        them. Values checked once are not inferred again: a loop replays a plan with a few values each (the
        letters of a name, the rows of a batch), and a check costs an inference, several times the kernel's time
        for the small ones (issue 37); only attributes that are ints or lists of ints are remembered (type-exact:
        ``True`` is not ``1``), at most :data:`MAX_DYN_CHECKED` a plan. A whole ``dyn`` that passed before passes
        at once (its marshalled bytes: types and values; a step's replay repeats its plan's last values), at most
        :data:`MAX_DYN_SEEN` a plan."""
        seen = self._dyn_seen
        try:  # (the whole batch's values, types included: True and 1.0 are not 1; a replay repeats them, issue 37)
            whole = marshal.dumps(dyn, 2)  # (version 2: no back-references, so equal values marshal alike)
        except ValueError:  # (a value marshal does not take: checked entry by entry)
            whole = None
        if whole in seen:
            return
        checks = self.dyn_checks
        ok = self._dyn_ok
        for j, d in dyn.items():
            c = checks.get(j)
            if c is None:
                continue
            key = _ints_key(j, d)
            if key is not None and key in ok:
                continue
            op, attrs, metas, out = c
            try:
                got = op.infer(metas, {**attrs, **d})
            except Exception as e:  # noqa: BLE001 - any inference failure is a malformed replay
                raise ProtocolError(f"node {j} ({op.name}) replayed with bad attributes: {e}") from None
            if got != out:
                raise ProtocolError(f"node {j} ({op.name}) replayed with attributes that make {list(got[0])} "
                                    f"{got[1].name}, the plan holds {list(out[0])} {out[1].name}")
            if key is not None and len(ok) < MAX_DYN_CHECKED:
                ok.add(key)
        if whole is not None and len(seen) < MAX_DYN_SEEN:
            seen.add(whole)

    def kept(self, outs, kept, release) -> Kept:
        """What a batch replaying this plan keeps (:class:`Kept`): the slots of its outputs (``outs``, each node's id;
        all of them, or the nodes ``kept``) that the client did not release in the same batch (``release``, ids).
        Made once by which outputs are released and which nodes are kept: a loop replays a plan releasing the same
        temporaries each time, and the answer otherwise costs a pass over every node in Python (at most
        :data:`MAX_KEEPS_PER_PLAN` answers a plan)."""
        if release:
            gone = release if type(release) is set else set(release)
            mask = bytes(map(gone.__contains__, outs))  # (1 where the node's output is released; a pass in C)
        else:
            mask = b""
        key = (mask, None if kept is None else tuple(kept))
        got = self._keeps.get(key)
        if got is None:
            slots = self.node_slot
            n = len(slots)
            nodes = range(len(outs)) if kept is None else kept
            if mask:
                keep = {slots[j] for j in nodes if j < n and not mask[j]}
            else:
                keep = {slots[j] for j in nodes if j < n}
            keep.discard(None)
            got = self.kept_set(frozenset(keep))
            if len(self._keeps) >= MAX_KEEPS_PER_PLAN:
                self._keeps.pop(next(iter(self._keeps)))
            self._keeps[key] = got
        return got

    def kept_slots(self, outs, kept, release) -> frozenset:
        """The slots a batch replaying this plan keeps (:meth:`kept`'s ``keep``)."""
        return self.kept(outs, kept, release).keep

    def kept_set(self, keep: frozenset) -> Kept:
        """The :class:`Kept` of runs keeping the slots ``keep`` (made once, at most :data:`MAX_RUNNERS_PER_PLAN` a
        plan)."""
        got = self._kepts.get(keep)
        if got is None:
            if len(self._kepts) >= MAX_RUNNERS_PER_PLAN:
                self._kepts.pop(next(iter(self._kepts)))
            got = self._kepts[keep] = Kept(self, keep)
        return got

    def kept_pairs(self, keep: frozenset) -> tuple:
        """``(node, slot)`` for each node whose value a run keeping ``keep`` hands back (:attr:`Kept.pairs`)."""
        return self.kept_set(keep).pairs

    def slot_steps(self) -> dict[int, int]:
        """Each slot a step writes -> the index of that step (cached)."""
        made = self._slot_steps
        if made is None:
            made = self._slot_steps = {st.out: k for k, st in enumerate(self.program.steps) if st.out >= 0}
        return made

    def peak(self, keep: frozenset) -> int:
        """Estimated peak bytes a run keeping ``keep`` allocates (:meth:`Kept.peak`)."""
        return self.kept_set(keep).peak(self)


class Kept:
    """What every replay of a plan that keeps the same slots shares, made at the first such replay
    (:meth:`Plan.kept`) and read by the next ones instead of worked out again (issue 37: a loop replays each of its
    plans the same way every step): the kept-slot set ``keep``, the ``(node, slot)`` pairs a run hands back
    (``pairs``: each node whose slot is kept, in node order), the same as node -> slot (``slot_of``: which fetched
    outputs a run can answer early, ``Executor._early_slots``), and the run's estimated peak bytes (:meth:`peak`, made
    when a quota first asks)."""

    __slots__ = ("keep", "pairs", "slot_of", "_peak")

    def __init__(self, plan: Plan, keep: frozenset):
        self.keep = keep
        self.pairs = tuple((j, slot) for j, slot in enumerate(plan.node_slot) if slot is not None and slot in keep)
        self.slot_of = dict(self.pairs)
        self._peak: int | None = None

    def peak(self, plan: Plan) -> int:
        """Estimated peak bytes a run of ``plan`` keeping :attr:`keep` allocates (:func:`.quota.peak_bytes`)."""
        n = self._peak
        if n is None:
            n = self._peak = peak_bytes(plan.program.steps, self.keep)
        return n


_TRANSFER_OPS = frozenset({SEND, RECV, COLL})
_NONE: frozenset = frozenset()


#: a fragment whose interpreted run would allocate more than this at its peak is compiled before its first run
INTERPRET_PEAK = 256 << 20


def _interpreting_is_big(steps) -> bool:
    """Whether a run on the numpy kernels could allocate more than :data:`INTERPRET_PEAK`: the steps' outputs at
    their peak, or one step's operand or result, views included (a kernel may make a contiguous or wider copy)."""
    largest = 0
    for s in steps:
        for meta in ((s.shape, s.dtype), *s.in_meta):
            largest = max(largest, _size_bytes(meta))
    return largest > INTERPRET_PEAK or peak_bytes(steps, frozenset()) > INTERPRET_PEAK


def compile_plan(device: Device, nodes: list, ext_metas: list, hot: bool = False) -> Plan:
    """Compile fragment ``nodes`` whose external inputs have ``ext_metas`` (``(shape, dtype)`` or a Fail). The
    composites the backend runs whole are ``backend.native``, or what :meth:`Device.native_for` picks once the
    fragment's steps are known (a compiling CPU keeps small fragments on its numpy kernels, composites included).
    ``hot``: the fragment has run often (see :mod:`.hot`), plan it as one the device compiles, however small."""
    if not isinstance(nodes, list) or len(nodes) > MAX_FRAGMENT_NODES:
        raise ProtocolError("a fragment must be a list of at most 2**20 nodes")
    native = device.backend.native
    first = None if hot else device.native_up_front()
    if first is not None and first != native:
        plan = _plan_once(device, nodes, ext_metas, native, first)
        if plan is not None:
            return plan
    plan, composites = _compile(device, nodes, ext_metas, native)
    steps = plan.program.steps
    other = device.native_for(steps, hot=True) if hot else device.native_for(steps)
    tierable = not plan.has_transfers and not plan.failed_nodes
    if not hot and device.compiles_first(steps) and (not tierable or _interpreting_is_big(steps)):
        # no background compile for this plan, or its interpreted run could allocate what the fused kernels do not
        # (``ones(1).expand(2**32).sum()`` is one loop compiled; interpreted, a sum over 16 GB)
        return compile_plan(device, nodes, ext_metas, hot=True)
    hot_runs = device.hot_runs(steps) if not hot and tierable else 0
    tier = hot_runs > 0 and device.compiles_when_hot(steps)
    if other is not None and composites & (native ^ other):  # (else the plan would come out the same)
        plan, _ = _compile(device, nodes, ext_metas, other)
    plan.hot = hot
    if tier:
        plan.tier = tier_for(compile_plan, device, hot_runs, nodes, ext_metas, plan.node_meta, plan.attrs_keys)
    plan.attrs_keys = None
    plan.interpreted = _interprets(device, plan)
    return plan


def _interprets(device: Device, plan: Plan) -> bool:
    """Whether ``plan`` runs on the device's step-by-step kernels (the straight-line runner) rather than kernels
    compiled for it, as :func:`builds_runner` tells (what the plan cache's estimate of its memory goes by)."""
    if plan.has_transfers or type(device).runner is Device.runner:
        return True
    interpreted = getattr(device, "interpreted", None)
    return interpreted is not None and interpreted(plan.program.steps, plan.hot)


def _plan_once(device: Device, nodes: list, ext_metas: list, native: frozenset, first: frozenset) -> Plan | None:
    """The plan of a fragment that is not hot on a device that plans such fragments with ``first`` whatever their
    steps (``Device.native_up_front``), made once: the policy's sizes of the ``native`` expansion come from
    :func:`~.expansion_counts.counts_as`, not from a second expansion. None where that cannot decide as
    :func:`compile_plan` would (transfers, a failed node, a node not counted, or a fragment whose interpreted run
    might pass :data:`INTERPRET_PEAK`): then plan it the long way."""
    met: list = []
    plan, _ = _compile(device, nodes, ext_metas, first, met)
    if plan.has_transfers or plan.failed_nodes:
        return None
    counts = counts_as(native, first, plan, nodes, ext_metas, met)
    if counts is None:
        return None
    ext_bytes = max((_size_bytes(m) for m in ext_metas), default=0)
    if counts.nbytes + ext_bytes > INTERPRET_PEAK:  # (under it, no step's operand and no peak can pass it)
        return None
    hot_runs = device.hot_runs(counts)
    if hot_runs > 0 and device.compiles_when_hot(counts):
        plan.tier = tier_for(compile_plan, device, hot_runs, nodes, ext_metas, plan.node_meta, plan.attrs_keys)
    plan.attrs_keys = None
    plan.interpreted = _interprets(device, plan)
    return plan


def _size_bytes(meta) -> int:
    """The bytes of a ``(shape, dtype)`` meta; 0 for anything else (a Fail, a step without a dtype)."""
    if not isinstance(meta, tuple) or len(meta) != 2 or not hasattr(meta[1], "itemsize"):
        return 0
    n = meta[1].itemsize
    for d in meta[0]:
        n *= d
    return n


def _compile(device: Device, nodes: list, ext_metas: list, native: frozenset,
             met: list | None = None) -> tuple[Plan, set[str]]:
    """The plan of ``nodes`` with the composites in ``native`` run whole, and the composite ops the fragment met;
    with ``met``, the composites each node met are appended to it (a set a node).

    A node is planned from its inputs' metas (``(shape, dtype)``) and slots; an op the fragment has met before with
    the same attributes and input metas is emitted from its remembered expansion (:func:`_expand`), with no
    inference and no Value per input (a loop whose batches change shape plans every batch: issue 37)."""
    n_ext = len(ext_metas)
    b = _PlanBuilder(native, n_ext)
    native_id = _native_id(native)
    node_slot: list[int | None] = []
    node_meta: list = []
    dyn_checks: dict[int, tuple] = {}
    steps = b.steps
    want_met = met is not None

    attrs_keys: list = []  # each node's attributes as hot.fragment keys them (UNKEYED: not a plain value)
    for j, node in enumerate(nodes):
        b.origin = j
        node_met = _NO_COMPOSITES
        akey = UNKEYED
        try:
            if not isinstance(node, list) or len(node) < 3:
                raise ProtocolError(f"bad node {node!r}")
            op, refs, attrs = node[0], node[1], node[2] or {}
            if not isinstance(refs, list) or not isinstance(attrs, dict):
                raise ProtocolError("node refs must be a list and attrs a map")
            metas = []
            slots = []
            failed = None
            for ref in refs:
                if ref < 0:
                    slot = -ref - 1
                    if slot >= n_ext:
                        raise ProtocolError(f"reference to external input {slot}, fragment has {n_ext}")
                    m = ext_metas[slot]
                else:
                    if ref >= len(node_slot):
                        raise ProtocolError(f"node refers to node {ref} which comes later")
                    m = node_meta[ref]
                    slot = node_slot[ref]
                if type(m) is Fail and failed is None:
                    failed = m
                metas.append(m)
                slots.append(slot)
            if op == SEND:  # a failed value travels too: the destination gets its error instead of waiting
                a_int(attrs, "xfer")
                if failed is None:
                    m = metas[0]
                    steps.append(Step(SEND, (slots[0],), attrs, m[0], m[1], -1, j))
                    node_meta.append((m[0], m[1]))
                else:
                    ref = refs[0]
                    ins_ = (-ref - 1,) if ref < 0 else ()  # a failed external input is a Fail in its slot
                    steps.append(Step(SEND, ins_, {**attrs, "failed_node": ref}, (), None, -1, j))
                    node_meta.append(failed.dependent(None))
                node_slot.append(None)
            elif failed is not None:
                node_meta.append(failed.dependent(None))
                node_slot.append(None)
            elif op == RECV:
                a_int(attrs, "xfer")
                shape, dt = check_shape(attrs.get("shape", ())), a_dtype(attrs)
                node_slot.append(b._emit(RECV, (), attrs, shape, dt))
                node_meta.append((shape, dt))
            elif op == COLL or op in WORKER_OPS:
                ins = [Value(m[0], m[1], s) for m, s in zip(metas, slots)]
                v = b.op(op, *ins, **attrs) if op == COLL else b.op(op, **attrs)
                steps[-1].dynamic = True
                node_meta.append((v.shape, v.dtype))
                node_slot.append(v.ref)
            else:
                opdef = get_op(op)
                n_before = len(steps)
                meta, slot, node_met = _expand(b, native_id, op, metas, slots, attrs, want_met)
                if not opdef.dynamic:  # (else attrs_key leaves the dynamic attributes out)
                    akey = b.frozen
                if opdef.dynamic and len(steps) == n_before + 1:
                    steps[-1].dynamic = True
                if opdef.dynamic_key is not None:
                    dyn_checks[j] = (opdef, attrs, [(m[0], m[1]) for m in metas], meta)
                node_meta.append(meta)
                node_slot.append(slot)
        except Exception as e:  # inference failed: the node fails, its dependents with it
            node_meta.append(Fail(error_to_wire(e)))
            node_slot.append(None)
        if want_met:
            met.append(node_met)
        if akey is UNKEYED and type(node) is list and len(node) >= 3 and type(node[0]) is str:
            try:
                akey = attrs_key(node[0], node[2])
            except Exception:  # noqa: BLE001 - (an unknown op, an attribute that is not a plain value)
                pass
        attrs_keys.append(akey)
        if b.counted < len(steps):  # (steps not from a remembered expansion: a transfer, a failed node's none)
            b.count_rest()
    # last uses, so temporaries are freed as soon as they are consumed
    last: dict[int, int] = {}
    for i, s in enumerate(steps):
        for x in s.ins:
            last[x] = i
    frees: dict[int, list[int]] = {}
    for slot, i in last.items():
        frees.setdefault(i, []).append(slot)
    for i, f in frees.items():
        steps[i].frees = tuple(f)
    program = device.compile(steps)
    remember_complex(steps, b.complex)
    plan = Plan(program, node_slot, list(ext_metas), b.next_slot, node_meta, b.work)
    plan.dyn_checks = dyn_checks
    plan.step_memos = b.memos
    plan.attrs_keys = attrs_keys
    return plan, b.composites


#: node expansions remembered (:func:`_expand`); a loop whose batches change shape meets each node at every batch
#: shape it draws (a char-level transformer's 240 fragments: ~11,700 distinct expansions, which 8192 made thrash)
EXPANSIONS_REMEMBERED = 1 << 15  # (a primitive node ~0.3 KB; an expanded composite a few KB)
_EXPANSIONS: OrderedDict = OrderedDict()
_EXPANSIONS_LOCK = threading.Lock()
_NO_COMPOSITES: frozenset = frozenset()


class _Expansion:
    """The steps one node expanded to, with its inputs' slots and its own steps' outputs as placeholders: ``steps``
    of ``(op, ins, attrs, shape, dtype, in_meta, memo)``, an input ``k`` as ``-(k + 1)`` and the output of the node's
    own step ``m`` as ``m``, ``memo`` the holder of the step's specialized callable (``Plan.step_memos``); ``out``
    the node's value so written, ``meta`` its ``(shape, dtype)`` when a step of its own writes it (else None: it is
    input ``-out - 1``); ``composites`` the composite ops it met."""

    __slots__ = ("steps", "out", "meta", "composites", "work", "complex", "primitive")

    def __init__(self, steps: tuple, out: int, composites: frozenset, primitive: bool = False):
        self.steps, self.out, self.composites = steps, out, composites
        self.meta = (steps[out][3], steps[out][4]) if out >= 0 else None
        #: what a plan asks of each of these steps, summed once here (``_PlanBuilder.count``)
        self.work = sum([step_work(st[0], st[3], st[5]) for st in steps])
        self.complex = any(complex_of(st[4], st[5]) is not None for st in steps)
        #: one step reading the node's inputs in their order (:func:`_primitive`'s): its slots are the node's own
        #: (the key's alias pattern makes ``slots[alias[k]] == slots[k]``), so a plan emits it without a mapping
        self.primitive = primitive


_NATIVE_IDS: dict = {}  # a native set -> its number in the keys of _EXPANSIONS (equal sets are often not one object)


def _native_id(native: frozenset) -> int:
    with _EXPANSIONS_LOCK:
        return _NATIVE_IDS.setdefault(native, len(_NATIVE_IDS))


def _expand(b: _PlanBuilder, native: int, op: str, metas: list, slots: list, attrs: dict,
            want_met: bool) -> tuple[tuple, int, frozenset | set]:
    """``b.op(op, *inputs, **attrs)`` for inputs of ``metas`` in ``slots``: ``((shape, dtype), slot, composites
    met)`` of the node's value; from a remembered expansion where this node (its op, attributes, inputs' metas
    and which of them are the same value, with the composites run whole numbered ``native``: :func:`_native_id`)
    has been expanded before: a loop whose batch changes shape makes a new plan each step, and most of its nodes (an
    optimizer's updates, a gradient's norm, the layers whose shapes do not depend on the batch) expand as they did
    in an earlier one. Expanding a node depends on nothing else (the op table's inference and decompositions).
    ``want_met``: the composites met are asked for (a set; else the empty set when the node was not remembered)."""
    n = len(slots)
    if n == 1:
        alias = (0,)
    elif n == 2:
        alias = (0, 0) if slots[0] == slots[1] else (0, 1)
    else:
        alias = tuple([slots.index(r) for r in slots])
    try:
        frozen = freeze(attrs) if attrs else None
        key = (op, frozen, native, tuple(metas), alias)
        with _EXPANSIONS_LOCK:  # (the key is hashed once, here: a TypeError if it cannot be)
            got = _EXPANSIONS.get(key)
            if got is not None:
                _EXPANSIONS.move_to_end(key)
        b.frozen = frozen
    except TypeError:  # (an attribute that is not a plain value: expand it as it comes)
        key = got = None
        b.frozen = UNKEYED
    if got is None:
        if key is not None and get_op(op).decompose is None:  # a primitive: one step, planned here (see _primitive)
            return _primitive(b, key, op, metas, slots, alias, attrs, want_met)
        ins = [Value(m[0], m[1], s) for m, s in zip(metas, slots)]
        b.met = set() if want_met else None
        try:
            v = b.op(op, *ins, **attrs) if key is None else _remember(b, key, op, ins, attrs)
            return (v.shape, v.dtype), v.ref, b.met if want_met else _NO_COMPOSITES
        finally:
            b.met = None
    composites = got.composites
    if composites:
        b.composites |= composites
    base = b.next_slot
    origin = b.origin
    steps = b.steps
    memos = b.memos
    primitive = got.primitive
    m = 0
    for name, sins, sattrs, shape, dtype, in_meta, memo in got.steps:
        memos[len(steps)] = memo
        ins = tuple(slots) if primitive else tuple([slots[-x - 1] if x < 0 else base + x for x in sins])
        steps.append(Step(name, ins, sattrs, shape, dtype, base + m, origin, None, False, (), in_meta))  # (positional)
        m += 1
    b.next_slot = base + m
    b.count(got)
    out = got.out
    if out < 0:
        return metas[-out - 1], slots[-out - 1], composites
    return got.meta, base + out, composites


def _primitive(b: _PlanBuilder, key: tuple, op: str, metas: list, slots: list, alias: tuple, attrs: dict,
               want_met: bool) -> tuple[tuple, int, frozenset | set]:
    """:func:`_expand` of a primitive node met for the first time: what ``b.op`` and :func:`_remember` make of it
    (the op table's inference, one step into a fresh slot, remembered), without a Value per input and the builder's
    layers (a loop whose batches change shape plans ~60 new primitive nodes a batch: issue 37)."""
    attrs = {**attrs}  # (as ``b.op(op, **attrs)`` hands the step a dict of its own)
    in_meta = tuple([(m[0], m[1]) for m in metas])
    shape, dtype = infer(op, list(in_meta), attrs)
    slot = b.next_slot
    b.next_slot = slot + 1
    st = Step(op, tuple(slots), attrs, shape, dtype, slot, b.origin)
    st.in_meta = in_meta
    memo: list = [None]  # (the step's specialized callable, shared with the plans that meet the node again)
    b.memos[len(b.steps)] = memo
    b.steps.append(st)
    got = _Expansion(((op, tuple([-a - 1 for a in alias]), attrs, shape, dtype, in_meta, memo),), 0, _NO_COMPOSITES,
                     True)
    b.count(got)
    with _EXPANSIONS_LOCK:
        _EXPANSIONS[key] = got
        if len(_EXPANSIONS) > EXPANSIONS_REMEMBERED:
            _EXPANSIONS.popitem(last=False)
    return got.meta, slot, set() if want_met else _NO_COMPOSITES


def _remember(b: _PlanBuilder, key: tuple, op: str, ins: list, attrs: dict) -> Value:
    """Expand the node (``b.op``) and remember how (:func:`_expand`)."""
    first, slot0 = len(b.steps), b.next_slot
    composites, b.composites = b.composites, set()
    try:
        v = b.op(op, *ins, **attrs)
    finally:
        met, b.composites = b.composites, composites | b.composites
    new = b.steps[first:]
    where = {v.ref: -(k + 1) for k, v in reversed(list(enumerate(ins)))}
    where.update((st.out, m) for m, st in enumerate(new))
    if any(st.out != slot0 + m for m, st in enumerate(new)) or v.ref not in where or any(
            x not in where for st in new for x in st.ins):
        return v  # (not a plain expansion into fresh slots: not remembered)
    steps = tuple((st.op, tuple(where[x] for x in st.ins), st.attrs, st.shape, st.dtype, st.in_meta, [None])
                  for st in new)
    got = _Expansion(steps, where[v.ref], frozenset(met))
    b.count(got)
    with _EXPANSIONS_LOCK:
        _EXPANSIONS[key] = got
        if len(_EXPANSIONS) > EXPANSIONS_REMEMBERED:
            _EXPANSIONS.popitem(last=False)
    return v


def run_plan(device: Device, plan: Plan, ext: list, outs: list[int], dyn: dict, frames: list, keep: set,
             spans: list | None = None, answer=None) -> dict:
    """Run a plan without transfers to completion (the common case: no generator involved). ``spans``: a list to
    append one ``(op, "kernel", start_ns, duration_ns, args)`` per step to (the profiler is on for this batch).
    ``answer``: ``(slots, fn)``, call ``fn(env)`` as soon as those kept slots hold their values and the run has gone
    well so far (see :func:`_run_fast`), so that a fetch is answered while the rest of the plan runs."""
    if Fail not in map(type, ext):  # (a pass in C: Fail has no subclasses)
        env: list = [None] * plan.nslots
        env[:len(ext)] = ext
        if spans is None:
            result = _run_fast(device, plan, env, outs, dyn, frames, keep, answer)
        else:
            result = _run_timed(device, plan, env, outs, dyn, frames, keep, spans)
        if result is not None:
            return result
    gen = execute(device, plan, ext, outs, dyn, frames, keep, spans)
    try:
        next(gen)
    except StopIteration as stop:
        return stop.value
    raise ProtocolError("a plan without transfers asked for one")


def execute(device: Device, plan: Plan, ext: list, outs: list[int], dyn: dict, frames: list, keep: set,
            spans: list | None = None, answer_after: int | None = None):
    """Interpret ``plan`` step by step (a generator, see the module doc); returns ``{out_id: buffer | Fail}``
    for kept outputs. Plans without transfers go through :func:`run_plan`, which tries the prepared runner
    first and comes here only when a step fails.

    ``ext`` holds the external input buffers (or Fails), ``outs`` the handle id of every node,
    ``dyn`` maps node index to its dynamic attributes, ``keep`` is the set of slots that must
    survive the run (outputs the client still holds); everything else is freed after its last use. ``spans``: as
    for :func:`run_plan`. ``answer_after``: yield ``("answer", env)`` once step ``answer_after`` ran (-1: before the
    first), unless a step failed by then (the answer then waits for the end, with every error of the batch).
    """
    env: list = [None] * plan.nslots
    env[:len(ext)] = ext
    steps = plan.program.steps
    node_slot = plan.node_slot
    failed = any(isinstance(b, Fail) for b in ext)
    if answer_after == -1 and not failed:
        yield ("answer", env)
    with np.errstate(all="ignore"):
        for k, s in enumerate(steps):
            args = [env[i] for i in s.ins]
            bad = next((a for a in args if isinstance(a, Fail)), None)
            origin_id = outs[s.origin] if s.origin < len(outs) else None
            if s.op == SEND:  # sent even when it failed: the receiving device gets the error
                yield ("send", s.attrs["xfer"], args[0] if args else _failed_node(plan, s.attrs["failed_node"], outs))
                res = None
            elif s.op == COLL:  # even with a failed input: the collective's other parts must hear of it
                attrs = {**s.attrs, **dyn[s.origin]} if s.origin in dyn else s.attrs
                res = yield ("coll", attrs, args[0], s)
            elif bad is not None:
                res = bad.dependent(origin_id)
            elif s.op == RECV:
                res = yield ("recv", s.attrs["xfer"])
            else:
                attrs = s.attrs
                if s.dynamic and s.origin in dyn:
                    attrs = {**attrs, **dyn[s.origin]}
                t0 = time.monotonic_ns() if spans is not None else 0
                try:
                    if s.op in WORKER_OPS:
                        res = WORKER_OPS[s.op](device, attrs, frames, s)
                    else:
                        res = device.run_step(s, args, attrs)
                except Exception as e:
                    res = Fail(error_to_wire(e, origin_id))
                if spans is not None:
                    spans.append(_kernel_span(s, t0, origin_id))
            if s.out >= 0:
                env[s.out] = res
                if answer_after is not None and isinstance(res, Fail):
                    failed = True
            for f in s.frees:
                if f not in keep:
                    env[f] = None
            if k == answer_after and not failed:
                yield ("answer", env)
    result = {outs[j]: env[slot] for j, slot in enumerate(node_slot) if slot is not None and slot in keep}
    result.update(_failed_results(plan, outs))
    return result


MAX_RUNNERS_PER_PLAN = 8
#: kept-slot sets a plan remembers by the outputs a batch released (:meth:`Plan.kept_slots`)
MAX_KEEPS_PER_PLAN = 16


def _run_fast(device: Device, plan: Plan, env: list, outs: list, dyn: dict, frames: list, keep: set,
              answer=None):
    """Run a plan with its prepared runner (cached per set of kept slots).

    Returns None when a step raised: the caller then interprets the plan step by step, which
    attributes the error to its node and carries on with independent work.

    ``answer``: ``(slots, fn)``; a runner that says which of its items produces each slot (``run.producers``) calls
    ``fn(env)`` right after the last of them, while the rest of the plan still has to run. Another runner runs
    through first: nothing calls ``fn`` then, and the caller answers at the end. A plan with nodes that failed
    when it was compiled answers at the end too, with their errors."""
    key = frozenset(keep)
    run = _runner(device, plan, key)
    if plan.tier is not None:
        plan.tier.ran(device, plan, key)
    after = None
    if answer is not None and not plan.failed_nodes:
        producers = getattr(run, "producers", None)
        if producers is not None:
            after = (max((producers.get(slot, -1) for slot in answer[0]), default=-1), answer[1])
    try:
        if after is None:
            _quietly(run, env, dyn, frames)
        else:
            if after[0] < 0:  # everything fetched was there before the plan ran
                _quietly(after[1], env)
            _quietly(run, env, dyn, frames, after)
    except Exception:
        return None
    return _kept(plan, env, outs, key)


def _call(fn, *args):
    return fn(*args)


if np.lib.NumpyVersion(np.__version__) >= "2.0.0":  # (numpy 2 keeps its errstate in a context variable)
    #: ``fn(*args)`` with numpy's floating-point warnings off, as every run of a plan (an overflow or a division by
    #: zero makes an inf or a nan, as in torch): ``np.errstate``'s decorator form, so that a replay's run costs one
    #: call through it, not an ``errstate`` made, entered and left (issue 37)
    _quietly = np.errstate(all="ignore")(_call)
else:  # (numpy 1's decorator keeps the state it restores on its one instance, which threads would share)
    def _quietly(fn, *args):
        with np.errstate(all="ignore"):
            return fn(*args)


def _kept(plan: Plan, env: list, outs: list, keep: frozenset) -> dict:
    """The kept nodes' values after a run: ``{node id: value}`` (and the errors of nodes that failed when the plan
    was compiled)."""
    result = {outs[j]: env[slot] for j, slot in plan.kept_pairs(keep)}
    if plan.failed_nodes:
        result.update(_failed_results(plan, outs))
    return result


def _kernel_span(step: Step, t0: int, node) -> tuple:
    """A profiler span for one step that started at ``t0`` (monotonic ns) and ends now."""
    return (step.op, "kernel", t0, time.monotonic_ns() - t0, {"node": node, "shape": list(step.shape)})


def _run_timed(device: Device, plan: Plan, env: list, outs: list, dyn: dict, frames: list, keep: set,
               spans: list):
    """:func:`_run_fast` with a span per step (the profiler is on). A fused runner (a compiling device) is timed as
    one span: its kernels are not the plan's steps. Host time: an asynchronous device's kernels may still run."""
    key = frozenset(keep)
    run = _runner(device, plan, key)
    prog = getattr(run, "prog", None)
    steps = plan.program.steps
    n0 = len(spans)
    try:
        with np.errstate(all="ignore"):
            if prog is None:
                t0 = time.monotonic_ns()
                run(env, dyn, frames)
                spans.append(("fused kernels", "kernel", t0, time.monotonic_ns() - t0, {"steps": len(steps)}))
            else:
                get = env.__getitem__
                for (fn, ins, out, frees, dyn_node), st in zip(prog, run.steps):
                    t0 = time.monotonic_ns()
                    if dyn_node is None:
                        env[out] = fn(*map(get, ins))
                    else:
                        env[out] = fn([env[i] for i in ins], dyn.get(dyn_node), frames)
                    for f in frees:
                        env[f] = None
                    spans.append(_kernel_span(st, t0, outs[st.origin] if st.origin < len(outs) else None))
    except Exception:  # the interpreter runs it again, step by step, with spans of its own
        del spans[n0:]
        return None
    return _kept(plan, env, outs, key)


def _runner(device: Device, plan: Plan, key: frozenset):
    """The plan's prepared runner for kept-slot set ``key`` (built once, cached on the plan)."""
    run = plan.runners.get(key)
    if run is None:
        if len(plan.runners) >= MAX_RUNNERS_PER_PLAN:
            plan.runners.pop(next(iter(plan.runners)))
        try:  # a compiling device's fused runner, else the straight-line one
            run = device.runner(plan, key) or _build_runner(device, plan, key)
        except Exception as e:  # a kernel that does not build: step by step names the node (and the error)
            log.exception("building the fused runner failed; running the fragment step by step")
            run = _raiser(e)
        plan.runners[key] = run
    return run


def builds_runner(device: Device, plan: Plan, keep: frozenset) -> bool:
    """Whether a run of ``plan`` keeping ``keep`` starts by building a runner from kernels the device compiles (a C
    compiler or a GPU's runtime compiler may take seconds, so the worker runs that batch off its main thread). A
    runner built already, a plan with transfers (interpreted) and a device without runners of its own (the
    straight-line runner) build nothing to speak of; a compiling CPU runs some plans on its numpy kernels
    (``interpreted``)."""
    if keep in plan.runners or plan.has_transfers or type(device).runner is Device.runner:
        return False
    interpreted = getattr(device, "interpreted", None)
    return interpreted is None or not interpreted(plan.program.steps, plan.hot)


def _raiser(exc: Exception):
    def run(env, dyn, frames):
        raise exc
    return run


def _failed_node(plan: Plan, j: int, outs: list) -> Fail:
    """The failure of node ``j``, which failed when the plan was compiled, named by its handle id."""
    err = dict(plan.node_meta[j].err)
    if j < len(outs) and outs[j] is not None:
        err.setdefault("node", outs[j])
    return Fail(err)


def _failed_results(plan: Plan, outs: list) -> dict:
    """Nodes that failed at compile time (bad attributes, shapes...) and their dependents."""
    out = {}
    for j in plan.failed_nodes:
        if j < len(outs) and outs[j] is not None:
            err = dict(plan.node_meta[j].err)
            err["node"] = outs[j]
            out[outs[j]] = Fail(err)
    return out


#: the kinds of op (``OpDef.kind``) whose steps depend on more than their inputs and attributes (a random op's
#: stream, the worker's frames, the hub or the other devices): run whether their values are needed or not
_RUN_ALWAYS_KINDS = frozenset({"random", "worker"})


def _skippable(s: Step) -> bool:
    """Whether step ``s`` may be left out of a run that needs nothing it makes: a plain op, not dynamic, that
    reads only its inputs. What such a step makes, or the error it raises, is seen only through a slot the run keeps
    (a run hands back its kept slots; the step-by-step run reports the failures of those only, :func:`execute`), so
    leaving it out changes nothing a client sees (issue 37: a char-RNN's forward makes an output a letter and its
    loss reads the last one)."""
    op = OPS.get(s.op)
    return op is not None and op.kind not in _RUN_ALWAYS_KINDS and not s.dynamic and s.op not in WORKER_OPS


def _needed_steps(steps, keep: frozenset) -> list[bool]:
    """Which of ``steps`` a run keeping the slots ``keep`` runs: all but the skippable ones (:func:`_skippable`)
    whose output neither ``keep`` nor a later needed step reads (one backward pass over the slots' liveness: the
    steps the run needs are made once, with its runner, not looked for at each run)."""
    live = set(keep)
    need = [True] * len(steps)
    for k in range(len(steps) - 1, -1, -1):
        s = steps[k]
        if s.out not in live and s.out >= 0 and _skippable(s):
            need[k] = False
            continue
        live.discard(s.out)  # (written here: the slot's earlier value is not what later steps read)
        live.update(s.ins)
    return need


def _build_runner(device: Device, plan: Plan, keep: frozenset):
    """A tight loop over prepared (callable, input slots, output slot, slots to free) tuples; after
    :data:`GENERATE_AFTER` runs, the same steps as generated Python statements (:func:`_generated`). Steps whose
    values the run does not need are left out (:func:`_needed_steps`); what they freed goes after the next step."""
    prog = []
    ran = []  # the steps of ``prog``, in order
    memos = plan.step_memos
    steps = plan.program.steps
    need = _needed_steps(steps, keep)
    carried: tuple = ()  # slots the steps left out would have freed
    for k, s in enumerate(steps):
        frees = tuple(f for f in s.frees if f not in keep) if s.frees else ()
        if not need[k]:
            carried += frees
            continue
        if carried:  # (not the slot this step writes: that value is new)
            frees = tuple(f for f in carried if f != s.out) + frees
            carried = ()
        ran.append(s)
        if s.dynamic or s.op in WORKER_OPS:
            prog.append((dynamic_call(device, s), s.ins, s.out, frees, s.origin))
            continue
        memo = memos.get(k)
        if memo is None:
            fn = device.specialize(s)
        else:  # (a step of a remembered expansion: specialized once for every plan it is in)
            got = memo[0]
            if got is not None and got[0] is device and got[1] is s.kernel:
                fn = got[2]
            else:
                fn = device.specialize(s)
                memo[0] = (device, s.kernel, fn)
        prog.append((fn, s.ins, s.out, frees, None))
    prog = tuple(prog)
    looped = _looped(prog)
    if len(prog) > MAX_GENERATED_STEPS:
        run = looped
    else:
        state: list = [0, None]  # runs so far, the generated runner once made

        def run(env, dyn, frames, after=None):
            made = state[1]
            if made is None:
                state[0] += 1
                if state[0] <= GENERATE_AFTER:
                    return looped(env, dyn, frames, after)
                made = state[1] = _generated(prog)
            return made(env, dyn, frames, after)

    run.prog = prog  # what the profiler's timed run walks step by step ...
    run.steps = tuple(ran)  # ... with the step of each item
    run.producers = {s.out: k for k, s in enumerate(ran) if s.out >= 0}  # slot -> item making it
    return run


def _looped(prog: tuple):
    """The straight-line runner of ``prog`` as a loop over its steps."""

    def run(env, dyn, frames, after=None):
        get = env.__getitem__
        stop, answer = after or (-1, None)
        for k, (fn, ins, out, frees, dyn_node) in enumerate(prog):
            if dyn_node is None:
                env[out] = fn(*map(get, ins))
            else:
                env[out] = fn([env[i] for i in ins], dyn.get(dyn_node), frames)
            for f in frees:
                env[f] = None
            if k == stop:
                answer(env)

    return run


#: runs of a straight-line runner (one plan, one kept-slot set) before its steps become generated Python statements
#: (:func:`_generated`): the loop's unpacking and argument building cost ~0.5 us a step a run, compiling the
#: statements ~30 us a step once, so a plan run once or twice (a loop whose batches change shape) never pays for it
GENERATE_AFTER = 3
#: a plan with more steps keeps the loop (its statements would take long to compile, and their code ~0.3 KB a step)
MAX_GENERATED_STEPS = 1024
#: generated runners' makers remembered by the plan's structure (its steps' slots), shared by the plans of one
#: structure at different shapes (at most ~40 MB of code, ~0.3 KB a step)
GENERATED_REMEMBERED = 128
_GENERATED: OrderedDict = OrderedDict()
_GENERATED_LOCK = threading.Lock()


def _generated(prog: tuple):
    """The straight-line runner of ``prog`` as one Python statement a step (``env[7] = f3(env[2], env[5])``, its
    frees and a check for the early answer after it), the steps' callables bound as closure variables: what
    :func:`_looped` does, without the per-step unpacking, ``map`` and ``*args`` (issue 37). The code depends only
    on the steps' slots, so it is made once for every plan of that structure."""
    key = tuple((ins, out, frees, dyn_node) for _, ins, out, frees, dyn_node in prog)
    with _GENERATED_LOCK:
        make = _GENERATED.get(key)
        if make is not None:
            _GENERATED.move_to_end(key)
    if make is None:
        lines = ["def make(fns):"]
        if prog:
            lines.append("    " + ", ".join(f"f{k}" for k in range(len(prog))) + ", = fns")
        lines += ["    def run(env, dyn, frames, after=None):", "        stop, answer = after or (-1, None)"]
        for k, (ins, out, frees, dyn_node) in enumerate(key):
            args = ", ".join(f"env[{int(i)}]" for i in ins)
            if dyn_node is None:
                lines.append(f"        env[{int(out)}] = f{k}({args})")
            else:
                lines.append(f"        env[{int(out)}] = f{k}([{args}], dyn.get({int(dyn_node)}), frames)")
            lines += [f"        env[{int(f)}] = None" for f in frees]
            lines.append(f"        if stop == {k}: answer(env)")
        lines += ["    return run"]
        space: dict = {}
        exec(compile("\n".join(lines), "<straight-line runner>", "exec"), space)  # noqa: S102 - our own statements
        make = space["make"]
        with _GENERATED_LOCK:
            _GENERATED[key] = make
            if len(_GENERATED) > GENERATED_REMEMBERED:
                _GENERATED.popitem(last=False)
    return make(tuple(p[0] for p in prog))


#: the steps' ops a Plan looks for when it is made (transfers, collectives, the worker's own ops)
_SPECIAL_OPS = _TRANSFER_OPS | WORKER_OPS.keys()


def meta_of(device: Device, buf) -> tuple | Fail:
    if isinstance(buf, Fail):
        return buf
    return device.meta(buf)


__all__ = ["Fail", "Kept", "Plan", "builds_runner", "compile_plan", "execute", "meta_of", "run_plan"]
