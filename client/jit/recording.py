"""Recording one call of a compiled function: every node it records, and what it reads and writes.

While a :class:`Trace` is a session's ``_capture``, the session hands it every recorded node
(:meth:`Trace.on_record`), every rebinding of a tensor object to another value (:meth:`Trace.on_swap`, from
``nn._tensors.rebind`` and ``views._swap``), every value read (:meth:`Trace.on_read`), and library code adds what a
replay must redo on the client (:meth:`Trace.provide` for dynamic attributes drawn from Python state, such as random
offsets, :meth:`Trace.effect` for Python state changes, such as an optimizer's step count).

:meth:`Trace.finish` then works out the graph's interface in terms of Python objects, which is what a replay binds:

- every external input is a *slot*: a tensor argument (by position), the ``.grad`` of a leaf tensor, or a tensor
  object that existed before the call (a parameter, an optimizer state tensor, a cached scalar);
- every object that existed before the call and holds a value made by the call afterwards is a *write-back*
  (an optimizer step rebinding a parameter, an in-place op on an argument);
- every leaf tensor's ``.grad`` at the end (a new gradient, ``None`` after ``zero_grad``);
- the returned structure, with each tensor naming the node whose value it holds.

Anything outside this model (a value read, a tensor read that no object held before the call, a returned tensor
whose autograd graph backward still needs) raises :class:`NotCompilable`, and the function runs eagerly.
"""

from __future__ import annotations

import hashlib
import weakref

import numpy as np

from tensorwire import jit_state as _state
from tensorwire.session import _user_frame, encode_batch, user_line
from tensorwire.tensor import Tensor

from .pytree import flatten

ARG, GRAD, OBJ = 0, 1, 2  # slot kinds: a tensor argument, a leaf's .grad, an object that existed before the call


class NotCompilable(Exception):
    """The call cannot be replayed: ``reason`` and the user's ``where`` (file, line), when known."""

    def __init__(self, reason: str, where=None):
        self.reason = reason
        self.where = user_line(where)
        super().__init__(reason)


class Trace:
    """The recording of one call (see the module docstring). ``prev``: the trace of the previous call with the same
    signature, whose leaf tensors' ``.grad`` this one snapshots at its start."""

    def __init__(self, session, arg_tensors: list[Tensor], prev: Summary | None):
        self.s = session
        self.entries: list = []  # the session's pending entries, in recording order
        self.produced: dict[int, int] = {}  # value id -> node index
        self.created: dict[int, tuple] = {}  # id(object) -> (weakref, node index): tensors this call made
        self.pre: dict[int, list] = {}  # id(object) -> [object, id at entry, version at entry]: tensors from before
        self.host: list = []  # ("effect", fn) | ("provide", [node index], fn), in recording order
        self.modules: dict[int, tuple] = {}  # id(module) -> (module, training)
        self.read_at = None  # where a value was read (data-dependent Python)
        self.problem: NotCompilable | None = None
        self.arg_pos: dict[int, int] = {}  # id(argument tensor) -> position among the tensor arguments
        for i, t in enumerate(arg_tensors):
            self.arg_pos.setdefault(id(t), i)
            self._note_pre(t)
        self.entry_grad: dict[int, tuple] | None = None  # id(leaf) -> (leaf, its .grad at entry)
        self.grad_owner: dict[int, Tensor] = {}  # id(.grad object at entry) -> its leaf
        if prev is not None:
            self.entry_grad = {}
            for p in prev.leaves:
                g = p.grad
                self.entry_grad[id(p)] = (p, g)
                if g is not None:
                    self.grad_owner[id(g)] = p

    # ------------------------------------------------------------------ hooks (called while recording)
    def _note_pre(self, t: Tensor) -> None:
        k = id(t)
        if k in self.pre:
            return
        c = self.created.get(k)
        if c is not None and c[0]() is t:
            return
        self.pre[k] = [t, t._id, t._version]

    def on_record(self, entry: tuple, t: Tensor, inputs) -> None:
        j = len(self.entries)
        self.entries.append(entry)
        self.produced[entry[0]] = j
        self.created[id(t)] = (weakref.ref(t), j)
        pre, produced = self.pre, self.produced
        for x in inputs:
            if id(x) not in pre and x._id not in produced:
                self._note_pre(x)

    def on_swap(self, a: Tensor, b: Tensor) -> None:
        """``a`` and ``b`` are about to exchange values (before the exchange)."""
        self._note_pre(a)
        self._note_pre(b)

    def on_read(self, where) -> None:
        if self.read_at is None:
            self.read_at = where

    def provide(self, tensors, fn) -> None:
        """The dynamic attributes of the nodes that made ``tensors`` come from ``fn()`` on every replay."""
        self.host.append(("provide", [self.produced[t._id] for t in tensors], fn))

    def effect(self, fn) -> None:
        """Run ``fn()`` on every replay (a Python state change the call made, in recording order)."""
        self.host.append(("effect", fn))

    def note_module(self, module) -> None:
        self.modules.setdefault(id(module), (module, module.training))

    def unsupported(self, reason: str) -> None:
        """Something the call did cannot be replayed: the function runs eagerly."""
        if self.problem is None:
            self.problem = NotCompilable(reason, _user_frame())

    def start(self) -> None:
        self.s._capture = self
        _state.push(self)

    def stop(self) -> None:
        self.s._capture = None
        _state.pop(self)

    # ------------------------------------------------------------------ analysis
    def finish(self, result) -> Summary:
        """The call returned ``result``: its graph's interface, or :class:`NotCompilable`."""
        if self.read_at is not None:
            raise NotCompilable(
                "reads a tensor's value (`.item()`, `.numpy()`, `print`, `bool()` or a Python branch on a tensor)",
                self.read_at,
            )
        if self.problem is not None:
            raise self.problem
        return Summary(self, result)


def _slot(trace: Trace, obj: Tensor) -> tuple:
    """The slot an object that existed before the call stands for."""
    k = id(obj)
    if k in trace.arg_pos:
        return (ARG, trace.arg_pos[k])
    owner = trace.grad_owner.get(k)
    if owner is not None:
        return (GRAD, owner)
    return (OBJ, obj)


def _slot_key(slot: tuple) -> tuple:
    kind, ref = slot
    return (kind, ref if kind == ARG else id(ref))


def _freed(gf) -> bool:
    node = getattr(gf, "node", gf)  # (a custom Function's output names its node)
    return bool(getattr(node, "freed", False))


def _frame_key(arr) -> object:
    a = np.ascontiguousarray(arr)
    if a.nbytes <= 4096:
        return (a.dtype.str, a.shape, a.tobytes())
    return (a.dtype.str, a.shape, hashlib.sha256(memoryview(a).cast("B")).hexdigest())


class Summary:
    """A finished trace's interface (see the module docstring) and ``key``, which two calls that recorded the same
    graph share: the graph is compiled once two consecutive calls agree."""

    def __init__(self, trace: Trace, result):
        self.trace = trace
        entries = trace.entries
        self.entries = entries
        self.batch = b = encode_batch(entries)
        self.where = [e[5] for e in entries]
        by_entry = {v[1]: v[0] for v in trace.pre.values()}
        # external inputs: which object held each before the call
        self.ext_slots = []
        for k, i in enumerate(b.ext):
            obj = by_entry.get(i)
            if obj is None:
                first = next(j for j, e in enumerate(entries) if i in e[2])
                raise NotCompilable(
                    "reads a tensor that no argument or object held when the call began", entries[first][5]
                )
            shape, dtype = b.ext_meta[k]
            self.ext_slots.append((_slot(trace, obj), shape, dtype, obj._dev))
        produced = trace.produced
        # objects from before the call that now hold a value made by it
        self.writes = []
        for obj, entry_id, version in trace.pre.values():
            if obj._id == entry_id:
                continue
            j = produced.get(obj._id)
            if j is None:
                raise NotCompilable("rebinds a tensor to a value it did not compute")
            self.writes.append((_slot(trace, obj), j, obj._shape, obj.dtype, obj._dev, obj._version - version))
        # gradients
        self.leaves = [o for o, _, _ in trace.pre.values() if o.requires_grad and o.grad_fn is None]
        self.grads = None  # unknown without a previous trace: such a trace is never compiled
        self.grad_guards = None
        if trace.entry_grad is not None:
            self.grads, self.grad_guards = [], []
            seen = set()
            for p in self.leaves + [p for p, _ in trace.entry_grad.values()]:
                if id(p) in seen:
                    continue
                seen.add(id(p))
                got = trace.entry_grad.get(id(p))
                if got is None:
                    raise NotCompilable("uses a tensor the previous call did not use")
                g0 = got[1]
                self.grad_guards.append((p, g0 is None))
                g = p.grad
                if g is None:
                    if g0 is not None:
                        self.grads.append((p, None))
                elif g is not g0:
                    j = produced.get(g._id)
                    if j is None or id(g) in trace.pre:
                        raise NotCompilable("sets a .grad to a tensor it did not compute")
                    self.grads.append((p, (j, g._shape, g.dtype, g._dev, g.requires_grad)))
        # the result
        leaves: list = []
        self.out_spec = flatten(result, leaves)
        self.outs = []
        for x in leaves:
            if not isinstance(x, Tensor):
                self.outs.append(("const", x))
                continue
            if trace.pre.get(id(x)) is not None:
                self.outs.append(("slot", _slot(trace, x)))
                continue
            j = produced.get(x._id)
            if j is None:
                raise NotCompilable("returns a tensor it did not compute")
            gf = x.grad_fn
            if gf is not None and not _freed(gf):
                raise NotCompilable(
                    "returns a tensor whose autograd graph is still needed (call backward inside the "
                    "compiled function, or return a detached tensor)"
                )
            self.outs.append(("node", j, x._shape, x.dtype, x._dev, x.requires_grad, gf))
        # what a replay redoes on the client
        provided = set()
        for act in trace.host:
            if act[0] == "provide":
                provided.update(act[1])
        self.host = trace.host
        self.static_dyn = [d for d in b.dyn if d[0] not in provided]
        self.modules = list(trace.modules.values())
        self.key = self._key(provided)

    def _key(self, provided: set) -> tuple:
        b = self.batch
        dyn = []
        for j, attrs in self.static_dyn:
            if "frame" in attrs:  # an upload made inside the call: its bytes are part of the graph
                dyn.append((j, _frame_key(self.entries[j][3]["frame"])))
            else:
                dyn.append((j, tuple(sorted((k, repr(v)) for k, v in attrs.items()))))
        out_key = []
        for o in self.outs:
            if o[0] == "const":
                try:
                    hash(o[1])
                    out_key.append(("const", type(o[1]), o[1]))
                except TypeError:
                    out_key.append(("const", id(o[1])))
            elif o[0] == "slot":
                out_key.append(("slot", _slot_key(o[1])))
            else:
                out_key.append(o[:6])
        grads = None if self.grads is None else tuple((id(p), None if g is None else g[0]) for p, g in self.grads)
        return (
            b.skey,
            tuple((_slot_key(s), sh, dt.name, dev) for s, sh, dt, dev in self.ext_slots),
            tuple((_slot_key(s), j, dv) for s, j, _, _, _, dv in self.writes),
            grads,
            self.out_spec,
            tuple(out_key),
            tuple(sorted(provided)),
            tuple(a[0] for a in self.host),
            tuple(dyn),
            tuple((id(m), tr) for m, tr in self.modules),
        )

    def first_difference(self, other: Summary):
        """The user's line of the first node where two traces differ (for the warning), if any differs."""
        a, b = self.batch.skey, other.batch.skey
        if a is None or b is None:
            return None
        for j, (x, y) in enumerate(zip(a[0], b[0])):
            if x != y:
                return user_line(other.where[j])
        if len(a[0]) != len(b[0]):
            k = min(len(a[0]), len(b[0]))
            return user_line(other.where[k]) if k < len(other.where) else None
        return None
