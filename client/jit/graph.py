"""A compiled graph: a recorded call replayed as one batch message, with the client's tensors updated after it.

The graph is the trace's nodes encoded once as a batch (``session.encode_batch``), so it is one of the session's
plans like any batch (``Session.plan_number``): the first replay sends its nodes, later ones only the plan number, the
input ids, the fresh output ids and the dynamic attributes (``Session.replay``). Nothing of the function's Python
runs on a replay: the inputs are read from their slots, the host actions (random offsets, optimizer step counts)
run, and the outputs are bound to Python objects as the recorded call bound them.

A value of the replay read right after it (``step(x).item()``) rides with the replay, and the worker answers it as
soon as the fetched values are made, then runs the rest of the graph (``Executor._early_slots``): a training step's
loss comes back after the forward pass while the device runs the backward pass and the optimizer, and the step
stays one message and one plan (hot-compiled as a whole).
"""

from __future__ import annotations

from tensorwire.protocol.batch_ids import temp_ranges
from tensorwire.tensor import Tensor

from .pytree import unflatten
from .recording import ARG, GRAD, Summary

_new_tensor = object.__new__
RETRACE = object()  # a replay's guards failed: record the call again


def _new(s, hid: int, shape, dtype, dev) -> Tensor:
    t = _new_tensor(Tensor)
    t._init(s, hid, shape, dtype, dev)
    return t


class Part:
    """One plan a replay sends: its batch, encoded once, and the plan number it went under last time (kept by
    ``Session._replay_header``)."""

    __slots__ = ("batch", "plan", "route")

    def __init__(self, batch):
        self.batch = batch
        self.plan: int | None = None
        self.route = None  # (temporaries, which path and the kept nodes' devices), see session._replay_route


class CompiledGraph:
    """The replayable form of a :class:`~tensorwire.jit.recording.Summary`."""

    def __init__(self, summary: Summary):
        self.s = summary.trace.s
        self.batch = summary.batch
        for k, f in enumerate(self.batch.frames):  # an upload inside the call: its bytes become part of the graph
            self.batch.frames[k] = bytes(f)
        self.n = len(self.batch.nodes)
        self.where = summary.where
        self.ext_slots = summary.ext_slots
        self.writes = summary.writes
        self.grads = summary.grads or []
        self.grad_guards = summary.grad_guards or []
        self.modules = summary.modules
        self.outs = summary.outs
        self.out_spec = summary.out_spec
        self.static_dyn = summary.static_dyn
        self.host = summary.host
        kept = {j for _, j, *_ in self.writes}
        kept.update(g[0] for _, g in self.grads if g is not None)
        kept.update(o[1] for o in self.outs if o[0] == "node")
        self.temp_nodes = [j for j in range(self.n) if j not in kept]  # values only the graph reads
        self.temps = temp_ranges(self.temp_nodes)  # as a replay names them (see protocol.batch_ids)
        self.whole = Part(self.batch)

    def replay(self, tensors: list[Tensor]):
        """Run the graph on the call's tensor arguments; returns the result, or :data:`RETRACE` when the state the
        graph was recorded against changed (nothing was sent or changed then)."""
        s = self.s
        for p, was_none in self.grad_guards:
            if (p.grad is None) is not was_none:
                return RETRACE
        for m, training in self.modules:
            if m.training is not training:
                return RETRACE
        ext = []
        for (kind, ref), shape, dtype, dev in self.ext_slots:
            t = tensors[ref] if kind == ARG else ref.grad if kind == GRAD else ref
            if t is None or t._s is not s or t._shape != shape or t.dtype is not dtype or t._dev != dev:
                return RETRACE
            if t._base is not None:
                t._refresh()
            ext.append(t._id)
        dyn = list(self.static_dyn)
        for act in self.host:
            if act[0] == "effect":
                act[1]()
            else:
                vals = act[2]()
                for j in act[1]:
                    dyn.append([j, vals])
        first = s.take_ids(self.n)
        s.replay((self.whole, ext, first, dyn, self.temps, self.batch.frames), first, self.where)
        # bind the outputs to the objects the recorded call bound them to
        for (kind, ref), j, shape, dtype, dev, dv in self.writes:
            t = tensors[ref] if kind == ARG else ref.grad if kind == GRAD else ref
            s._release.append(t._id)
            t._id, t._shape, t.dtype, t._dev = first + j, shape, dtype, dev
            t._version += dv
        made: dict[int, Tensor] = {}  # node -> the one tensor holding its value (a grad may also be returned)
        for p, g in self.grads:
            if g is None:
                p.grad = None
            else:
                j, shape, dtype, dev, rg = g
                t = made[j] = _new(s, first + j, shape, dtype, dev)
                t.requires_grad = rg
                p.grad = t
        leaves = []
        for o in self.outs:
            kind = o[0]
            if kind == "node":
                t = made.get(o[1])
                if t is None:
                    t = made[o[1]] = _new(s, first + o[1], o[2], o[3], o[4])
                    t.requires_grad, t.grad_fn = o[5], o[6]
                leaves.append(t)
            elif kind == "slot":
                k, ref = o[1]
                leaves.append(tensors[ref] if k == ARG else ref.grad if k == GRAD else ref)
            else:
                leaves.append(o[1])
        return unflatten(self.out_spec, iter(leaves))
