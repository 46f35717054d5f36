"""The client side of autograd: grad mode, the recorded graph, and ``backward``/``grad``.

Recording (``autograd_hooks.record``) gives every floating output of a differentiable op whose
inputs require grad a :class:`Node`: the op, its attributes, and for each input the tensor object,
the value id it had, its version and its *edge* (the input's ``grad_fn``, the leaf tensor itself, or
``None``). Nodes hold their inputs, so every intermediate value a backward pass may read stays alive
on the devices until the graph is freed (after ``backward`` without ``retain_graph``).

``backward``/``grad`` walk the graph from the outputs, number the nodes in recording order and send
the autograd service the forward subgraph in the graph IR (structure and metadata only, never values).
The service answers with the backward graph, which is recorded here like any other ops (with grad
tracking when ``create_graph=True``), so gradients are computed on the devices by the next batch and
never travel. Answers are cached by the subgraph's structure (op structure, input metas, devices,
which values get seeds and which gradients are wanted): a training loop asks the service once.

User-defined :class:`Function` s run their Python ``backward`` here: the service computes gradients
down to a custom node's outputs, the client runs ``backward`` on those (lazy) tensors, and the walk
continues from the custom node's inputs.
"""

from __future__ import annotations

import functools
import itertools
import operator
import sys
import threading
import warnings
import weakref
from collections.abc import Mapping

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import ShapeError, TensorwireError
from tensorwire.protocol.graph import attrs_key, freeze
from tensorwire.protocol.ops import OPS, infer

from . import _factories
from . import anomaly_mode as _anomaly
from . import autograd_hooks as _hooks
from . import views as V
from ._factories import TensorBase as _Tensor
from ._frames import _user_frame
from .known_values import HOST_OPS
from .memos import remember


class AutogradError(TensorwireError, RuntimeError):
    """Misuse of autograd, with torch's message (in-place on a leaf, backward twice, ...)."""

    code = "AutogradError"


# ----------------------------------------------------------------------------------------------
# grad mode (per thread, as torch)

class _Mode(threading.local):
    """The grad mode of each thread: on unless set (a class attribute, so a thread that never set it reads ``True``
    without the failed lookup ``getattr(local, name, default)`` costs: this is read for every op recorded with an
    input that requires grad)."""

    on = True


_mode = _Mode()


def is_grad_enabled() -> bool:
    return _mode.on


def _set(on: bool) -> None:
    _mode.on = bool(on)


class _GradMode:
    on = True

    def __enter__(self):
        self.prev = is_grad_enabled()
        _set(self.on)
        return self

    def __exit__(self, *exc):
        _set(self.prev)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__():
                return fn(*args, **kwargs)
        return wrapper


class no_grad(_GradMode):  # noqa: N801 - torch's name
    """Context manager / decorator: ops record no graph (``with tw.no_grad(): p -= lr * p.grad``)."""

    on = False


class enable_grad(_GradMode):  # noqa: N801
    """Context manager / decorator: grad tracking on (inside ``no_grad``)."""

    on = True


class set_grad_enabled(_GradMode):  # noqa: N801
    """``tw.set_grad_enabled(False)`` switches tracking off now; also usable as a context manager."""

    def __init__(self, mode: bool):
        self.prev = is_grad_enabled()
        self.on = bool(mode)
        _set(self.on)

    def __enter__(self):
        return self

    def __call__(self, fn):
        on = self.on
        _set(self.prev)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            prev = is_grad_enabled()
            _set(on)
            try:
                return fn(*args, **kwargs)
            finally:
                _set(prev)
        return wrapper


class _Inference(threading.local):
    """Whether an ``inference_mode`` scope is open, per thread (off unless set, as :class:`_Mode`)."""

    on = False


_inference = _Inference()


def is_inference_mode_enabled() -> bool:
    """Whether an ``inference_mode()`` scope (or decorated call) is open in this thread, as torch's."""
    return _inference.on


class inference_mode(no_grad):  # noqa: N801 - torch's name
    """Context manager / decorator: no graph is recorded inside (as :class:`no_grad`), and
    :func:`is_inference_mode_enabled` is True; ``inference_mode(False)`` does neither (grad mode on, the flag off), as
    torch's. Tensors made inside are ordinary tensors (``Tensor.is_inference()`` stays False): only the flag is
    torch's."""

    def __init__(self, mode: bool = True):
        self.mode = bool(mode)
        self.on = not self.mode
        self._prev_inference: list[bool] = []

    def __enter__(self):
        self._prev_inference.append(_inference.on)
        _inference.on = self.mode
        return super().__enter__()

    def __exit__(self, *exc):
        _inference.on = self._prev_inference.pop()
        return super().__exit__(*exc)

    def __call__(self, fn):
        mode = self.mode

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with inference_mode(mode):
                return fn(*args, **kwargs)

        return wrapper

    def clone(self) -> inference_mode:
        """A new switch of the same mode (torch's ``clone``)."""
        return self.__class__(self.mode)


# ----------------------------------------------------------------------------------------------
# the recorded graph

_seq = itertools.count()
_by_seq = operator.attrgetter("seq")
_FREED = ("Trying to backward through the graph a second time (or directly access saved tensors after they have "
          "already been freed). Saved intermediate values of the graph are freed when you call .backward() or "
          "autograd.grad(). Specify retain_graph=True if you need to backward through the graph a second time or "
          "if you need to access saved tensors after calling backward.")


def _camel(op: str) -> str:
    return "".join(p.capitalize() for p in op.split("_"))


class Node:
    """One recorded differentiable op (a ``grad_fn``). ``entries``: per input
    ``(tensor, value id, version, edge, shape, dtype)``."""

    __slots__ = ("op", "attrs", "entries", "dev", "seq", "shape", "dtype", "freed", "retained", "hooks", "holder",
                 "_key", "__weakref__")

    def _init(self, op, attrs, entries, dev, shape, dtype) -> None:
        self.op = op
        self.attrs = attrs
        self.entries = entries
        self.dev = dev
        self.seq = next(_seq)
        self.shape = shape
        self.dtype = dtype
        self.freed = False
        self.retained = None
        self.hooks = None  # {key: hook} of its output's ``register_hook`` (a boundary of the passes: _run_hooked)
        self.holder = None  # ... and a weak reference to that output, whose value the pass below may read
        self._key = None if attrs else op  # (:meth:`key`'s, without its call, for a node without attributes)

    # (``record_grad`` makes its nodes as ``_new_node(Node)`` then ``_init``, as the session makes tensors: calling the
    # class runs ``type.__call__``'s generic path to a Python ``__init__``, a good part of a node's cost)
    __init__ = _init

    def name(self) -> str:
        return f"{_camel(self.op)}Backward0"

    def key(self):
        """The node's op and attributes, hashable (a backward graph's cache key is made of them): the op alone when it
        has no attributes."""
        k = self._key
        if k is None:
            a = self.attrs
            k = self._key = (self.op, freeze(a)) if a else self.op
        return k

    @property
    def next_functions(self):
        return tuple((_edge_fn(e[3]), 0) for e in self.entries)

    def __repr__(self) -> str:
        return f"<{self.name()}>"


class _AccumulateGrad:
    """What ``next_functions`` shows for a leaf (torch's AccumulateGrad)."""

    def __init__(self, t):
        self.variable = t

    def name(self) -> str:
        return "AccumulateGrad"

    def __repr__(self) -> str:
        return "<AccumulateGrad>"


def _edge_fn(e):
    if e is None:
        return None
    if isinstance(e, _Tensor):
        return _AccumulateGrad(e)
    return e


class CustomNode:
    """A :class:`Function` application: its Python ``backward`` runs on the client."""

    __slots__ = ("fn", "ctx", "entries", "seq", "outs", "freed", "retained", "arg_pos", "nargs", "__weakref__")

    def __init__(self, fn, ctx, entries, arg_pos, nargs):
        self.fn = fn
        self.ctx = ctx
        self.entries = entries
        self.seq = next(_seq)
        self.outs: list = []  # (shape, dtype, device, session) per tensor output, None otherwise
        self.freed = False
        self.retained = None
        self.arg_pos = arg_pos  # the position in forward's arguments of each entry
        self.nargs = nargs

    def name(self) -> str:
        return f"{self.fn.__name__}Backward"


class FunctionOutput:
    """The ``grad_fn`` of output ``index`` of a :class:`Function` application."""

    __slots__ = ("node", "index", "shape", "dtype", "dev", "retained", "__weakref__")

    def __init__(self, node, index, t):
        self.node, self.index = node, index
        self.shape, self.dtype, self.dev = t._shape, t.dtype, t._dev
        self.retained = None

    def name(self) -> str:
        return self.node.name()

    @property
    def next_functions(self):
        return tuple((_edge_fn(e[3]), 0) for e in self.node.entries)

    def __repr__(self) -> str:
        return f"<{self.name()}>"


def _edge(t):
    if not t.requires_grad:
        return None
    g = t.grad_fn
    return t if g is None else g


# ----------------------------------------------------------------------------------------------
# recording hooks (called from autograd_hooks)

#: the dtypes whose values can require gradients (``DType.is_inexact``), as a set: read for every op recorded with
#: grad, where the property's call would cost more than the test
_INEXACT = frozenset(d for d in D.ALL if d.is_inexact)
_new_node = object.__new__


def record_grad(session, op: str, ins, attrs, device: str, up: int = 1, known=None):
    """Record ``op`` and attach a :class:`Node` to its output when it needs one (``up`` and ``known``:
    ``Session.record``'s; ``known`` is the node's attrs key and output meta, which grad tracking does not change)."""
    for t in ins:
        if t._base is not None:
            sync_view(t)
    out = session.record(op, ins, attrs, device, known, None, None, up + 1)  # (where, hid, up: positional, cheaper)
    if out.dtype not in _INEXACT or not OPS[op].differentiable:
        return out
    entries = []
    edged = False
    for t in ins:  # (_edge, inline: this runs for every op recorded with grad)
        if t.requires_grad:
            g = t.grad_fn
            e = t if g is None else g
            edged = True
        else:
            e = None
        entries.append((t, t._id, t._version, e, t._shape, t.dtype))
    if not edged:
        return out
    node = _new_node(Node)
    node._init(op, attrs, tuple(entries), device, out._shape, out.dtype)
    out.requires_grad = True
    out.grad_fn = node
    out._ag = out._id
    return out


def sync_view(t) -> None:
    """Bring a view up to date with its base, with the autograd graph of its current value: ``views.refresh`` (a light
    window as any view whose base changed), and again from its root when the root requires grad and the view's value
    has no graph of it yet (made outside autograd). The view of a root that requires grad takes the recomputed value's
    autograd fields (its graph is its root's); any other keeps its own (a leaf view: ``x[5:15].requires_grad_()``)."""
    root = t._base
    # (a detached view, ``p.data`` or a leaf's ``detach()``, has no graph of its root: it keeps its own fields, a leaf
    # of its own when the user asks it to require grad, ``p.detach().requires_grad_()``)
    detached = V.is_detached(t)
    graph = root.requires_grad and t._ag != t._id and _mode.on and not detached
    if root._version == t._base_version and not graph:
        return
    v = V.refresh(t, graph)
    if root.requires_grad and not detached:
        t.requires_grad, t.grad_fn, t._ag = v.requires_grad, v.grad_fn, t._id
        v.requires_grad, v.grad_fn, v._ag = False, None, None


def check_inplace(t, new) -> None:
    """Reject in-place updates autograd cannot represent (torch's errors: in-place on a leaf ...)."""
    if not _mode.on or V.is_detached(t):
        return
    if t._base is None:
        if t.requires_grad and t.grad_fn is None:
            raise AutogradError("a leaf Variable that requires grad is being used in an in-place operation.")
    else:
        b = t._base
        if b.requires_grad and b.grad_fn is None:
            raise AutogradError("a view of a leaf Variable that requires grad is being used in an in-place "
                                "operation.")


def after_inplace(t, new) -> None:
    """``t`` now holds ``new``'s value and ``new`` the old one: move the graph metadata with them."""
    if not _mode.on:
        return
    old = (t.requires_grad, t.grad_fn, t._ag)
    if new.requires_grad:
        t.requires_grad, t.grad_fn, t._ag = True, new.grad_fn, t._id
    elif t.grad_fn is not None:  # overwritten by a value without history
        t.requires_grad, t.grad_fn, t._ag = False, None, None
    else:
        return
    new.requires_grad, new.grad_fn, new._ag = old


def detach(t):
    """A tensor with ``t``'s value and no history (a zero-copy alias on the device)."""
    if t._base is not None:
        t._refresh()
    out = t._s.record("reshape", [t], {"shape": list(t._shape)}, t._dev)
    return out


# ----------------------------------------------------------------------------------------------
# backward / grad

class _Stats:
    requests = 0  # backward-graph requests this process sent to the autograd service
    hits = 0  # backward graphs answered from the client cache


stats = _Stats()
_CACHE: dict = {}
MAX_CACHE = 1024


def _as_tuple(x):
    if x is None:
        return ()
    if isinstance(x, _Tensor):
        return (x,)
    return tuple(x)


def _seed(root, g):
    if g is None:
        if root.numel() != 1:
            raise AutogradError("grad can be implicitly created only for scalar outputs")
        s = root._s.scalar(1.0, root.dtype, root._dev)
        return s if not root._shape else s.reshape(root._shape)
    if not isinstance(g, _Tensor):
        g = root._operand(g, root.dtype)
    if g._shape != root._shape:
        raise ShapeError(f"Mismatch in shape: grad_output has a shape of {list(g._shape)} and output has a shape "
                         f"of {list(root._shape)}")
    if g.dtype is not root.dtype:
        g = g.to(root.dtype)
    return g


def _inputs_tuple(inputs, fn: str) -> tuple:
    """``inputs`` of ``backward``/``grad`` as a tuple: a tensor, a sequence of them, or a ``dict`` of them (its values;
    torch's: any other mapping is a TypeError)."""
    if isinstance(inputs, _Tensor):
        return (inputs,)
    if type(inputs) is dict:
        return tuple(inputs.values())
    if isinstance(inputs, Mapping):
        raise TypeError(f"`inputs` argument to `{fn}()` must be a dict, not {type(inputs).__name__}. Other Mapping "
                        "types are not supported.")
    return tuple(inputs)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph: bool = False, grad_variables=None,
             inputs=None) -> None:
    """Accumulate the gradients of ``tensors`` into the ``.grad`` of the leaves (torch.autograd.backward).
    ``grad_variables``: ``grad_tensors``' deprecated name, taken as torch takes it (with its ``FutureWarning``)."""
    if grad_variables is not None:
        warnings.warn("`grad_variables` is deprecated. Use `grad_tensors` instead.", FutureWarning, stacklevel=2)
        if grad_tensors is not None:
            raise RuntimeError("`grad_tensors` and `grad_variables` (deprecated) arguments both passed to "
                               "`backward()`. Please only use `grad_tensors`.")
        grad_tensors = grad_variables
    roots = _as_tuple(tensors)
    seeds = _as_tuple(grad_tensors) if grad_tensors is not None else (None,) * len(roots)
    if len(seeds) != len(roots):
        raise ValueError(f"grad_tensors has {len(seeds)} tensors, expected {len(roots)}")
    if inputs is not None:
        ins = tuple(_holder(t) for t in _inputs_tuple(inputs, "backward"))
        if not ins:
            raise RuntimeError("`inputs` argument to `backward()` cannot be empty.")
        got = _run(roots, seeds, [_input_edge(t) for t in ins], retain_graph, create_graph)
        for t, g in zip(ins, got):
            if g is not None:
                _accumulate(t, g, create_graph)
        return
    _run(roots, seeds, None, retain_graph, create_graph)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph: bool = False, only_inputs: bool = True,
         allow_unused: bool | None = None, is_grads_batched: bool = False, materialize_grads: bool = False):
    """Gradients of ``outputs`` with respect to ``inputs`` (torch.autograd.grad); nothing is accumulated. ``inputs``
    may be a ``dict`` of tensors: the gradients come back as a dict with its keys. ``only_inputs`` is deprecated and
    ignored, as in torch (``False`` warns); ``is_grads_batched=True`` (a batch of cotangents through ``vmap``) is not
    supported: ``NotImplementedError``."""
    if materialize_grads and allow_unused is False:
        raise ValueError("Expected allow_unused to be True or not passed when materialize_grads=True, but got: "
                         "allow_unused=False.")
    if not only_inputs:
        warnings.warn("only_inputs argument is deprecated and is ignored now (defaults to True). To accumulate "
                      "gradient for other parts of the graph, please use torch.autograd.backward.", FutureWarning,
                      stacklevel=2)
    if is_grads_batched:
        raise NotImplementedError("autograd.grad(is_grads_batched=True) is not supported by tensorwire: call grad "
                                  "once for each cotangent of the batch")
    outs = _as_tuple(outputs)
    ins = _inputs_tuple(inputs, "grad")
    if not ins:
        raise RuntimeError("`inputs` argument to `grad()` cannot be empty.")
    seeds = _as_tuple(grad_outputs) if grad_outputs is not None else (None,) * len(outs)
    if len(seeds) != len(outs):
        raise ValueError(f"grad_outputs has {len(seeds)} tensors, expected {len(outs)}")
    got = _run(outs, seeds, [_input_edge(_holder(t)) for t in ins], retain_graph, create_graph)
    res = []
    for i, (t, g) in enumerate(zip(ins, got)):
        if g is not None and getattr(t, "_sparse", False):
            g = t._grad_of_values(g)
        if g is None:
            if materialize_grads:
                g = _factories.full(t._s, tuple(t.shape), 0, t.dtype, t._dev)
            elif not allow_unused:
                raise AutogradError(f"One of the differentiated Tensors (input {i}) appears to not have been used "
                                    "in the graph. Set allow_unused=True if this is the desired behavior.")
        res.append(g)
    if type(inputs) is dict:
        return dict(zip(inputs.keys(), res))
    return tuple(res)


def _holder(t):
    """The tensor whose gradient stands for ``t``: ``t``, or a sparse tensor's values (client/sparse.py)."""
    return t._val if getattr(t, "_sparse", False) else t


def _input_edge(t):
    if not isinstance(t, _Tensor):
        raise TypeError(f"inputs must be tensors, got {type(t).__name__}")
    if t._base is not None:
        sync_view(t)
    if not t.requires_grad:
        raise AutogradError("One of the differentiated Tensors does not require grad")
    return _edge(t)


def _accumulate(t, g, create_graph: bool, where=None) -> None:
    """Add gradient ``g`` to leaf ``t``'s ``.grad`` (in place, outside autograd, unless ``create_graph``), then run
    its post-accumulate hooks. ``where``: the user's line the backward pass came from, when the caller has it."""
    if g._shape != t._shape:
        g = g.expand(*t._shape) if g._shape != t._shape else g
    grad = t._grad  # (the slot: a gradient the pass made needs none of the checks of a user's ``t.grad = g``)
    if grad is None:
        t._grad = g
    elif create_graph:
        t._grad = grad + g
    elif _mode.on:  # (``no_grad``'s switch, made here without its object, unless the caller made it: ``_run`` does)
        _mode.on = False
        try:
            grad._assign(_sum_into(grad, g, where))
        finally:
            _mode.on = True
    else:
        grad._assign(_sum_into(grad, g, where))
    entry = _POST_ACCUMULATE_HOOKS.get(id(t))
    if entry is not None and entry[0]() is t and entry[1]:
        with no_grad():
            for h in list(entry[1].values()):
                h(t)


#: ``(shape, dtype)`` -> the ``known`` (attrs key, output meta) of ``add`` of two tensors of that shape and dtype: the
#: inference every accumulation into an existing ``.grad`` would redo (a few entries: one per parameter shape)
_ADD_KNOWN: dict = {}


def _sum_into(grad, g, where):
    """``grad + g`` outside grad mode, as ``Tensor.__add__`` records it: the same node, from the same user's line
    (``where``, found once per backward pass), with the output meta inferred once per shape and dtype. A pair of
    another shape, dtype or device, or under autocast (which may cast the inputs), takes ``+`` itself."""
    if where is None or grad._shape != g._shape or grad.dtype is not g.dtype or _hooks._amp_active[0]:
        return grad + g
    key = (grad._shape, grad.dtype)
    known = _ADD_KNOWN.get(key)
    if known is None:
        known = remember(_ADD_KNOWN, key, (None, infer("add", [key, key], None, None)))
    return grad._s.record("add", [grad, g], None, grad._dev, known, where)


# id(tensor) -> (weakref to it, {key: hook}); keyed by id because Tensor.__eq__ is elementwise
_POST_ACCUMULATE_HOOKS: dict[int, tuple] = {}
_hook_ids = itertools.count()


class _HookHandle:
    def __init__(self, t, key):
        self._t = weakref.ref(t)
        self._key = key

    def remove(self) -> None:
        t = self._t()
        entry = _POST_ACCUMULATE_HOOKS.get(id(t)) if t is not None else None
        if entry is not None and entry[0]() is t:
            entry[1].pop(self._key, None)


def register_post_accumulate_grad_hook(t, hook):
    """Call ``hook(t)`` after a backward pass accumulated into leaf ``t``'s ``.grad`` (as torch).

    The hook runs while the backward pass is being recorded (under ``no_grad``): ops it records are
    submitted with the gradients, so a data-parallel wrapper can all-reduce buckets of gradients as
    soon as they exist. Returns a handle with ``remove()``.
    """
    if t.grad_fn is not None:
        raise AutogradError("post accumulate grad hooks cannot be registered on non-leaf tensors")
    key = next(_hook_ids)
    entry = _POST_ACCUMULATE_HOOKS.get(id(t))
    if entry is None or entry[0]() is not t:
        tid = id(t)
        hooks = _POST_ACCUMULATE_HOOKS
        entry = hooks[tid] = (weakref.ref(t, lambda _r: hooks.pop(tid, None)), {})
    entry[1][key] = hook
    return _HookHandle(t, key)


def _run(roots, seeds, targets, retain_graph, create_graph):
    """The engine. ``targets``: edges whose gradients to return (``None``: accumulate into leaves)."""
    if retain_graph is None:
        retain_graph = create_graph
    root_edges = []
    for i, (r, s) in enumerate(zip(roots, seeds)):
        if not isinstance(r, _Tensor):
            raise TypeError("outputs must be tensors")
        if r._base is not None:
            sync_view(r)
        if not r.requires_grad:
            raise AutogradError(f"element {i} of tensors does not require grad and does not have a grad_fn")
        root_edges.append((_edge(r), r, _seed(r, s)))
    session = roots[0]._s if roots else None
    want = None if targets is None else {id(e): k for k, e in enumerate(targets)}
    results: dict[int, list] = {}  # id(edge) -> [edge, grad]
    pending: dict[int, list] = {}  # id(custom or hooked node) -> [node, [grad per output]]
    visited: list = []
    phase = root_edges
    if _HOOKED[0]:  # (a root whose output has hooks: its seed goes through them, in its turn)
        phase = []
        for e, holder, seed in root_edges:
            if type(e) is Node and e.hooks is not None:
                _deliver(e, seed, want, results, pending)
            else:
                phase.append((e, holder, seed))
    prev = _mode.on  # (``enable_grad``/``no_grad``'s switch, without their objects: a thread-local, read and set once)
    _mode.on = bool(create_graph)
    try:
        while True:
            _phase(session, phase, want, results, pending, visited, create_graph)
            if not pending:
                break
            cn, gouts = pending.pop(max(pending, key=lambda k: pending[k][0].seq))
            if type(cn) is Node:
                phase = _run_hooked(cn, gouts[0], want, results)
            else:
                phase = _run_custom(cn, gouts, create_graph)
        if _LEAF_HOOKS:
            _run_leaf_hooks(results)
        if not retain_graph:
            _free_all(visited)
        if targets is None and not create_graph:  # (in place into the leaves' .grad: outside grad mode, as here)
            _accumulate_all(results, False)
    finally:
        _mode.on = prev
    if targets is None:
        if create_graph:  # (with the graph of the sum: in the caller's grad mode)
            _accumulate_all(results, True)
        return None
    out = [None] * len(targets)
    for k, e in enumerate(targets):
        got = results.get(id(e))
        out[k] = got[1] if got is not None else None
    return out


def _accumulate_all(results: dict, create_graph: bool) -> None:
    """:func:`_accumulate` of each gradient of a backward pass (``_run``'s ``results``) into its leaf, or retained
    non-leaf, in the order they came."""
    where = None if create_graph or not results else _user_frame()
    for e, g in results.values():
        if isinstance(e, _Tensor):
            _accumulate(e, g, create_graph, where)
        else:
            t = e.retained() if e.retained is not None else None
            if t is not None:
                _accumulate(t, g, create_graph, where)


def _free_all(nodes) -> None:
    """Free the graph of ``nodes`` (a pass's visited nodes): each entry's tensor dropped (what the node keeps alive on
    the devices), the rest kept for the messages of a later use (``_FREED``, ``next_functions``)."""
    for n in nodes:
        if not n.freed:
            n.freed = True
            ents = []  # (a loop here, not a comprehension: one a node would make a function and its frame, each time)
            for e in n.entries:
                ents.append((None, e[1], e[2], e[3], e[4], e[5]))
            n.entries = tuple(ents)
            if isinstance(n, CustomNode):
                n.ctx._saved = None


def _add_result(results, e, g):
    got = results.get(id(e))
    if got is None:
        results[id(e)] = [e, g]
    else:
        got[1] = got[1] + g


def _walk(roots) -> tuple[list, list]:
    """The nodes reachable from ``roots`` (edge, holder, seed), in recording order, and the roots whose edge is no
    node (leaves, retained values, custom outputs) as ``(edge, seed)``."""
    seen: set = set()  # (of nodes themselves: a Node hashes and compares by identity)
    stack = []
    direct = []
    for e, _holder, seed in roots:
        if type(e) is Node:
            if e not in seen:
                seen.add(e)
                stack.append(e)
        else:
            direct.append((e, seed))
    nodes: list = []
    while stack:
        n = stack.pop()
        nodes.append(n)
        for ent in n.entries:
            e = ent[3]
            if type(e) is Node and e not in seen and e.hooks is None:  # (a hooked node: a boundary, _run_hooked)
                seen.add(e)
                stack.append(e)
    nodes.sort(key=_by_seq)
    return nodes, direct


class _Structure:
    """A pass's subgraph as :func:`_phase` keys and replays it. ``key``: its structure, flat (per node: its
    :meth:`Node.key`, device index, input count and input refs, ``j >= 0`` node ``j``, ``-(k + 1)`` external ``k``);
    ``ext``: flat too, ``(shape, dtype name, device index, has an edge)`` per external (an input that is no node of
    the subgraph: leaf, constant, custom output), in first-use order; ``ext_src``: ``(entry, node)`` per external,
    where its value comes from; ``ext_edge``: its grad edge (None for a constant); ``holders``: node index -> a
    tensor holding its output value."""

    __slots__ = ("index", "devs", "key", "ext", "ext_src", "ext_edge", "holders")

    def __init__(self, nodes: list):
        self.index = index = {n: j for j, n in enumerate(nodes)}
        self.devs = devs = []
        dev_index: dict = {}
        key: list = []
        ext: list = []
        self.ext_src = ext_src = []
        self.ext_edge = ext_edge = []
        ext_index: dict = {}
        self.holders = holders = {}
        dev = d = None
        for n in nodes:
            if n.dev != dev:  # (a graph's nodes are on one device, most often)
                dev = n.dev
                d = dev_index.get(dev)
                if d is None:
                    d = dev_index[dev] = len(devs)
                    devs.append(dev)
            nk = n._key
            if nk is None:
                nk = n.key()
            ents = n.entries
            key += (nk, d, len(ents))
            for ent in ents:
                obj, vid, _, e, shape, dtype = ent
                r = index.get(e) if type(e) is Node else None
                if r is not None:
                    if r not in holders and obj is not None and obj._id == vid:
                        holders[r] = obj
                else:
                    k = vid if e is None else (id(e), vid)  # (a constant by its value id alone: an int, no tuple)
                    r = ext_index.get(k)
                    if r is None:
                        r = ext_index[k] = -(len(ext_src) + 1)
                        edev = obj._dev if obj is not None else dev
                        dd = dev_index.get(edev)
                        if dd is None:
                            dd = dev_index[edev] = len(devs)
                            devs.append(edev)
                        ext += (shape, dtype.name, dd, e is not None)
                        ext_src.append((ent, n))
                        ext_edge.append(e)
                key.append(r)
        self.key = key
        self.ext = ext

    def request(self, nodes: list, root_refs: list, target_refs: list) -> dict:
        """The autograd service's request for this subgraph (its structure alone, never values)."""
        key = self.key
        wire_nodes = []
        i = 0
        for n in nodes:
            d, c = key[i + 1], key[i + 2]
            wire_nodes.append([n.op, list(key[i + 3:i + 3 + c]), n.attrs, d])
            i += 3 + c
        x = self.ext
        ext = [[list(x[i]), x[i + 1], x[i + 2]] for i in range(0, len(x), 4)]
        return {"devs": self.devs, "ext": ext, "nodes": wire_nodes, "roots": root_refs, "targets": target_refs}


def _phase(session, roots, want, results, pending, visited, create_graph) -> None:
    """One request: gradients from ``roots`` (edge, holder, seed) down to leaves, targets and custom nodes."""
    nodes, direct = _walk(roots)
    for e, seed in direct:  # roots that are leaves, retained values or custom outputs themselves
        _deliver(e, seed.clone(), want, results, pending)
    if not nodes:
        return
    visited.extend(nodes)
    st = _Structure(nodes)
    index, holders, ext_src, ext_edge, devs = st.index, st.holders, st.ext_src, st.ext_edge, st.devs

    # roots, targets
    root_refs = []
    seeds = []
    for e, holder, seed in roots:
        if isinstance(e, Node):
            j = index[e]
            root_refs.append(j)
            seeds.append(seed)
            if holder is not None:
                holders[j] = holder
    target_refs = []
    target_edges = []
    for k, e in enumerate(ext_edge):
        if e is None:
            continue
        if want is None or id(e) in want or not isinstance(e, _Tensor):
            # leaves (backward), wanted inputs (grad), custom outputs (continue past them)
            target_refs.append(-(k + 1))
            target_edges.append(e)
    for j, n in enumerate(nodes):
        if n.hooks is not None:  # (a hooked node is a root here: _run_hooked delivered its gradient)
            continue
        if (want is not None and id(n) in want) or (want is None and n.retained is not None
                                                    and n.retained() is not None):
            target_refs.append(j)
            target_edges.append(n)
    if not target_refs:
        return
    # anomaly mode: every op's output gradient is asked for too, and checked for NaN after the phase (anomaly_mode)
    delivered = _anomaly.watch(nodes, target_refs) if _anomaly.checking() else None

    # (with create_graph the service keeps each gradient connected to the inputs it is a function of, where
    # torch's is with a zero derivative: ``graph`` in the request, ``vjp.Ctx.higher``)
    skey = (tuple(st.key), tuple(st.ext), tuple(devs), tuple(root_refs), tuple(target_refs), create_graph)
    bw = _CACHE.get(skey)
    if bw is None:
        stats.requests += 1
        g = st.request(nodes, root_refs, target_refs)
        if create_graph:
            g["graph"] = True
        h, _ = session.service_request("autograd", {"op": "backward", "g": g})
        bw = h["bw"]
        if len(_CACHE) >= MAX_CACHE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[skey] = bw
    else:
        stats.hits += 1

    # the values the backward graph reads: check they are intact, then replay it
    vals = []
    for kind, i in bw["ext"]:
        if kind == "s":
            vals.append(seeds[i])
        elif kind == "x":
            ent, n = ext_src[i]
            obj = ent[0]  # (intact and no view, the common case, checked here; ``_value`` checks the others)
            vals.append(obj if obj is not None and obj._id == ent[1] and obj._base is None else _value(ent, n))
        else:
            h = holders.get(i)
            if h is None or (h._base is not None and _stale_view(h)):
                vals.append(_missing_output(nodes[i], nodes))
            else:
                vals.append(h)
    grads = bw["grads"]
    if create_graph:
        out = []
        for op, refs, attrs, d in bw["nodes"]:
            out.append(_hooks.record(session, op, [out[r] if r >= 0 else vals[-r - 1] for r in refs], attrs,
                                     devs[d]))
    else:
        # replay: every node's attrs key and output meta are known (the service's inference, ``metas``, which the
        # cache key makes valid for every replay: it fixes the shapes and dtypes of everything the graph reads), and
        # all of them come from the user's line that called backward; so the graph is recorded whole
        # (``Session.record_graph``), with tensors for the gradients and the nodes whose values may be the client's
        # (``host_nodes``) only. (A reply without ``metas``, from an older service: its first replay infers them.)
        where = _user_frame()
        keep = bw.get("keep")
        if keep is None and bw.get("metas") is not None:
            keep = _known_from_metas(bw, grads)
        if keep is not None:
            plan = bw.get("plan")  # (record_graph's per-node work that the graph fixes: kept with it, made once)
            if plan is None:
                plan = bw["plan"] = session.graph_plan(bw["nodes"], devs, bw["known"], keep, bw["host"])
            out = session.record_graph(bw["nodes"], vals, devs, bw["known"], keep, bw["host"], where, plan)
        else:
            known = bw.get("known")
            first = known is None
            if first:
                known = []
            rec = session.record
            out = []
            for k, (op, refs, attrs, d) in enumerate(bw["nodes"]):
                ins = [out[r] if r >= 0 else vals[-r - 1] for r in refs]
                if first:
                    t = rec(op, ins, attrs, devs[d], where=where)
                    known.append((attrs_key(op, attrs), (t._shape, t.dtype)))
                else:
                    t = rec(op, ins, attrs, devs[d], known[k], where)
                out.append(t)
            if first:
                _set_known(bw, known, grads)
    for e, r in zip(target_edges, grads):
        if r is not None:
            _deliver(e, out[r], want, results, pending)
    if delivered is not None:
        _anomaly.check(sys.modules[__name__], session, nodes, roots, target_refs, target_edges, grads, out)


def host_nodes(nodes, known) -> frozenset:
    """The nodes of a graph (``Session.record_graph``'s ``nodes`` and ``known``) whose results ``record`` may keep on
    the client (``known_values``): :data:`~tensorwire.known_values.HOST_OPS` ops of a non-floating result."""
    return frozenset(j for j, (n, k) in enumerate(zip(nodes, known))
                     if n[0] in HOST_OPS and not k[1][1].is_floating_point)


def _set_known(bw: dict, known: list, grads: list) -> frozenset:
    """Keep a backward graph's per-node ``(attrs key, (shape, dtype))``, the nodes whose values may be the client's
    and the nodes a replay keeps tensors for (the gradients, those host nodes and their inputs) in its cache entry;
    returns the last."""
    bw["known"] = known
    host = bw["host"] = host_nodes(bw["nodes"], known)
    keep = bw["keep"] = frozenset([r for r in grads if r is not None] + list(host)
                                  + [r for j in host for r in bw["nodes"][j][1] if r >= 0])
    return keep


def _known_from_metas(bw: dict, grads: list) -> frozenset:
    """:func:`_set_known` from the service's ``metas`` (``[shape, dtype name]`` per node)."""
    by_name = D.BY_NAME
    known = [(attrs_key(op, attrs), (tuple(m[0]), by_name[m[1]]))
             for (op, _, attrs, _), m in zip(bw["nodes"], bw["metas"])]
    return _set_known(bw, known, grads)


def _deliver(e, g, want, results, pending) -> None:
    """A gradient reached edge ``e``: keep it if wanted, queue it for a custom node's backward or a hooked node's
    hooks (summed with what else reaches it, until every later node has run: ``_run`` takes them by ``seq``)."""
    if type(e) is Node and e.hooks is not None:
        slot = pending.get(id(e))
        if slot is None:
            pending[id(e)] = [e, [g]]
        else:
            slot[1][0] = slot[1][0] + g
        return
    if want is None:
        if isinstance(e, _Tensor) or e.retained is not None:
            _add_result(results, e, g)
    elif id(e) in want:
        _add_result(results, e, g)
    if isinstance(e, FunctionOutput):
        slot = pending.get(id(e.node))
        if slot is None:
            slot = pending[id(e.node)] = [e.node, [None] * len(e.node.outs)]
        gs = slot[1]
        gs[e.index] = g if gs[e.index] is None else gs[e.index] + g


def _value(ent, n):
    obj, vid, ver, _, shape, dtype = ent
    if obj is None:
        raise AutogradError(_FREED)
    if obj._id != vid or _stale_view(obj):
        raise AutogradError(
            f"one of the variables needed for gradient computation has been modified by an inplace operation: "
            f"[tensorwire.{dtype.name} {list(shape)}], which is an input of {n.name()}, is at version "
            f"{obj._version}; expected version {ver} instead. Hint: the operation that failed to compute its "
            f"gradient is {n.name()}; clone() the tensor before modifying it in place.")
    return obj


def _stale_view(t) -> bool:
    b = t._base
    return b is not None and b._version != t._base_version


def _missing_output(n, nodes):
    # the output of n is needed: it is gone because it was modified in place or the graph was freed
    for m in nodes:
        for ent in m.entries:
            if ent[3] is n:
                if ent[0] is None or n.freed:
                    raise AutogradError(_FREED)
                raise AutogradError(
                    f"one of the variables needed for gradient computation has been modified by an inplace "
                    f"operation: [tensorwire.{n.dtype.name} {list(n.shape)}], which is output 0 of {n.name()}, "
                    f"is at version {ent[0]._version}; expected version {ent[2]} instead. Hint: clone() the "
                    f"tensor before modifying it in place.")
    raise AutogradError(_FREED)


# ----------------------------------------------------------------------------------------------
# custom functions

class FunctionCtx:
    """The ``ctx`` of a :class:`Function`: ``save_for_backward``, ``saved_tensors``, ``needs_input_grad``."""

    def __init__(self):
        self._saved = ()
        self.needs_input_grad = ()
        self._non_diff: set = set()
        self.materialize_grads = True

    def save_for_backward(self, *tensors) -> None:
        self._saved = tuple(None if t is None else (t, t._id, t._version) for t in tensors)

    @property
    def saved_tensors(self) -> tuple:
        if self._saved is None:
            raise AutogradError(_FREED)
        out = []
        for s in self._saved:
            if s is None:
                out.append(None)
                continue
            t, vid, ver = s
            if t._id != vid:
                raise AutogradError(
                    f"one of the variables needed for gradient computation has been modified by an inplace "
                    f"operation: [tensorwire.{t.dtype.name} {list(t._shape)}] is at version {t._version}; "
                    f"expected version {ver} instead.")
            out.append(t)
        return tuple(out)

    def mark_non_differentiable(self, *tensors) -> None:
        self._non_diff.update(id(t) for t in tensors)

    def mark_dirty(self, *tensors) -> None:
        pass

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = bool(value)


class _FunctionMeta(type):
    def __init__(cls, name, bases, ns):
        super().__init__(name, bases, ns)


class Function(metaclass=_FunctionMeta):
    """A differentiable op written by the user: subclass with static ``forward(ctx, *args)`` and
    ``backward(ctx, *grad_outputs)`` written with tw ops, call ``MyFn.apply(*args)``.

    ``forward`` runs without grad tracking; ``backward`` runs on the client when a backward pass
    reaches the op, on lazy tensors (so it adds no round trip), with grad tracking only under
    ``create_graph=True``.
    """

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("subclasses of tw.autograd.Function implement forward(ctx, ...)")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("subclasses of tw.autograd.Function implement backward(ctx, ...)")

    @classmethod
    def apply(cls, *args, **kwargs):
        ctx = FunctionCtx()
        for a in args:
            if isinstance(a, _Tensor) and a._base is not None:
                sync_view(a)
        ctx.needs_input_grad = tuple(isinstance(a, _Tensor) and a.requires_grad for a in args)
        with no_grad():
            outs = cls.forward(ctx, *args, **kwargs)
        if not (is_grad_enabled() and any(ctx.needs_input_grad)):
            return outs
        single = isinstance(outs, _Tensor)
        seq = [outs] if single else list(outs)
        pos = [i for i, a in enumerate(args) if isinstance(a, _Tensor)]
        entries = tuple((args[i], args[i]._id, args[i]._version, _edge(args[i]), args[i]._shape, args[i].dtype)
                        for i in pos)
        node = CustomNode(cls, ctx, entries, pos, len(args))
        ins = {id(args[i]) for i in pos}
        for i, o in enumerate(seq):
            if not isinstance(o, _Tensor):
                node.outs.append(None)
                continue
            if id(o) in ins:  # an input returned as is: give the output its own identity
                o = seq[i] = detach(o)
            node.outs.append((o._shape, o.dtype, o._dev, o._s))
            if o.dtype.is_inexact and id(o) not in ctx._non_diff:
                o.requires_grad = True
                o.grad_fn = FunctionOutput(node, i, o)
                o._ag = o._id
        return seq[0] if single else type(outs)(seq) if isinstance(outs, tuple) else seq


# ----------------------------------------------------------------------------------------------
# tensor hooks (Tensor.register_hook)

#: leaf tensor id -> (weak reference to it, {key: hook}); a non-leaf's hooks are its grad_fn's (``Node.hooks``)
_LEAF_HOOKS: dict[int, tuple] = {}
#: whether any non-leaf has ever had a hook (``_run`` looks at its roots only then)
_HOOKED = [False]


class RemovableHandle:
    """What ``register_hook`` returns: ``remove()`` takes the hook off (a context manager too, as torch's)."""

    def __init__(self, hooks: dict, key):
        self._hooks, self._key = hooks, key

    def remove(self) -> None:
        self._hooks.pop(self._key, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def register_hook(t, hook):
    """Call ``hook(grad)`` each time the gradient with respect to ``t`` is computed (torch's ``register_hook``): its
    result, unless None, takes the gradient's place, for ``t``'s ``.grad`` (a leaf, or a non-leaf that retains it)
    and, for a non-leaf, for everything the backward pass computes below it. Hooks run in the order they were
    registered, on the client, with the gradient as a tensor of the pass (its ops are recorded with the pass's).
    A hooked non-leaf is a boundary of the backward pass: the pass stops at it, as at a custom ``Function``, until
    every later node has sent its part of the gradient, then goes on from it with what the hooks returned."""
    if not callable(hook):
        raise TypeError(f"register_hook expects a callable, got {type(hook).__name__}")
    if not t.requires_grad:
        raise AutogradError("cannot register a hook on a tensor that doesn't require gradient")
    if t._base is not None:
        sync_view(t)
    e = _edge(t)
    if isinstance(e, _Tensor):
        tid = id(t)
        entry = _LEAF_HOOKS.get(tid)
        if entry is None or entry[0]() is not t:
            hooks = _LEAF_HOOKS
            entry = hooks[tid] = (weakref.ref(t, lambda _r: hooks.pop(tid, None)), {})
        hooks = entry[1]
    elif type(e) is Node:
        if e.hooks is None:
            e.hooks = {}
            e.holder = weakref.ref(t)
            _HOOKED[0] = True
        hooks = e.hooks
    else:
        raise NotImplementedError("register_hook on an output of a custom autograd.Function is not supported: "
                                  "register it on a tensor computed from that output (x * 1), or in the "
                                  "Function's backward")
    key = next(_hook_ids)
    hooks[key] = hook
    return RemovableHandle(hooks, key)


def _call_hooks(hooks: dict, g):
    """``g`` through each hook in turn (one returning None leaves it as it was)."""
    for h in list(hooks.values()):
        r = h(g)
        if r is None:
            continue
        if not isinstance(r, _Tensor):
            raise TypeError(f"a gradient hook returned {type(r).__name__}: it must return a tensor or None")
        if r._shape != g._shape:
            raise ShapeError(f"hook '{getattr(h, '__name__', 'hook')}' has changed the size of value: expected "
                             f"{list(g._shape)}, got {list(r._shape)}")
        g = r if r.dtype is g.dtype else r.to(g.dtype)
    return g


def _run_hooked(n: Node, g, want, results) -> list:
    """A hooked node's turn (every later node has run): its gradient through its hooks, kept where it is wanted
    (retained, or a target of ``grad``: after the hooks, as torch's), then the next phase's root."""
    if n.freed:
        raise AutogradError(_FREED)
    g = _call_hooks(n.hooks, g) if n.hooks else g
    if (want is None and n.retained is not None and n.retained() is not None) or (want is not None and id(n) in want):
        _add_result(results, n, g)
    holder = n.holder() if n.holder is not None else None
    if holder is not None and holder.grad_fn is not n:  # (written in place since: its value is another's)
        holder = None
    return [(n, holder, g)]


def _run_leaf_hooks(results: dict) -> None:
    """The gradients of hooked leaves (each whole: the pass is over) through their hooks, before they are kept."""
    for got in results.values():
        e = got[0]
        if isinstance(e, _Tensor):
            entry = _LEAF_HOOKS.get(id(e))
            if entry is not None and entry[0]() is e and entry[1]:
                got[1] = _call_hooks(entry[1], got[1])


def _run_custom(cn: CustomNode, gouts, create_graph):
    """Run a custom node's Python backward; returns the next phase's roots."""
    if cn.freed:
        raise AutogradError(_FREED)
    gs = []
    for meta, g in zip(cn.outs, gouts):
        if g is None and meta is not None and cn.ctx.materialize_grads:
            shape, dtype, dev, s = meta
            g = _factories.full(s, tuple(shape), 0, dtype, dev)
        gs.append(g)
    res = cn.fn.backward(cn.ctx, *gs)
    if isinstance(res, _Tensor) or res is None:
        res = (res,)
    res = tuple(res)
    if len(res) != cn.nargs:
        raise AutogradError(f"function {cn.name()} returned an incorrect number of gradients (expected "
                            f"{cn.nargs}, got {len(res)})")
    out = []
    for pos, ent in zip(cn.arg_pos, cn.entries):
        g = res[pos]
        if g is None or ent[3] is None:
            continue
        if not isinstance(g, _Tensor):
            raise TypeError(f"function {cn.name()} returned a gradient that is not a tensor")
        if g._shape != ent[4]:
            raise ShapeError(f"Function {cn.name()} returned an invalid gradient at index {pos} - got "
                             f"{list(g._shape)} but expected shape compatible with {list(ent[4])}")
        if g.dtype is not ent[5]:
            g = g.to(ent[5])
        obj = ent[0]
        out.append((ent[3], obj if obj is not None and obj._id == ent[1] else None, g))
    return out


# ----------------------------------------------------------------------------------------------
# gradcheck

def _fn_outputs(fn, inputs):
    out = fn(*inputs)
    return (out,) if isinstance(out, _Tensor) else tuple(out)


def gradcheck_terms(fn, inputs, *, eps: float = 1e-6, directions: int = 2, seed: int = 0):
    """Record (nothing runs yet) the terms of a directional gradient check of ``fn`` at ``inputs``.

    For random unit directions ``u`` (over the float inputs that require grad) and random output
    weights ``v``: the analytical term is ``sum(grad(fn . v) * u)``, the numerical one the central
    difference ``(v . fn(x + eps u) - v . fn(x - eps u)) / (2 eps)``. Returns two lists of 0-d
    tensors; fetching them all at once checks many functions in one round trip. Complex values: ``u`` and ``v``
    are complex, ``v . y`` is ``Re(sum(y conj(v)))`` (a real loss) and the analytical term ``Re(sum(conj(grad) u))``
    (PyTorch's convention: the gradient of a complex ``a + ib`` is ``dL/da + i dL/db``).
    """
    inputs = tuple(inputs)
    rng = np.random.default_rng(seed)
    diff = [i for i, t in enumerate(inputs) if isinstance(t, _Tensor) and t.requires_grad]
    outs = [o for o in _fn_outputs(fn, inputs) if o.dtype.is_inexact and o.requires_grad]
    analytic, numeric = [], []
    if not outs or not diff:
        return analytic, numeric

    def draw(t):
        r = rng.standard_normal(t.shape)
        if t.dtype.is_complex:
            r = r + 1j * rng.standard_normal(t.shape)
        return _factories.from_data(t._s, r, t.dtype, t._dev)

    def dot(x, w):  # Re(sum(x conj(w))): sum(x w) for real values
        return (x * w.conj()).real.sum() if x.dtype.is_complex or w.dtype.is_complex else (x * w).sum()

    for _ in range(directions):
        vs = [draw(o) for o in outs]
        us = [draw(inputs[i]) for i in diff]
        gs = grad(outs, [inputs[i] for i in diff], grad_outputs=vs, retain_graph=True, allow_unused=True)
        with no_grad():
            a = None
            for g, u in zip(gs, us):
                if g is not None:
                    term = dot(u, g)
                    a = term if a is None else a + term
            if a is None:
                a = _factories.from_data(outs[0]._s, 0.0, D.to_real(outs[0].dtype), outs[0]._dev)

            def shifted(sign, us=us, vs=vs):
                xs = list(inputs)
                for i, u in zip(diff, us):
                    xs[i] = inputs[i] + u * (sign * eps)
                s = None
                for o, v in zip(_fn_outputs(fn, xs), vs):
                    if not o.dtype.is_inexact:
                        continue
                    term = dot(o, v)
                    s = term if s is None else s + term
                return s

            n = (shifted(1.0) - shifted(-1.0)) / (2 * eps)
        analytic.append(a)
        numeric.append(n)
    return analytic, numeric


def gradcheck(func, inputs, *, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3,
              raise_exception: bool = True, fast_mode: bool = False, directions: int = 3, **_ignored) -> bool:
    """Check ``func``'s gradients against central finite differences (use float64 inputs).

    The full check compares the whole Jacobian (one backward per output element, two forward passes
    per input element, all recorded lazily and fetched in one round trip); ``fast_mode=True`` compares
    ``directions`` random projections ``v^T J u`` instead (torch's fast mode).
    """
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    diff = [i for i, t in enumerate(inputs) if isinstance(t, _Tensor) and t.requires_grad]
    for i in diff:
        if inputs[i].dtype.name != "float64":
            warnings.warn(f"Input #{i} requires gradient and is not a double precision floating point. This "
                          "check will likely fail if all the inputs are not of double precision floating point. ",
                          stacklevel=2)
    if fast_mode:
        a, n = gradcheck_terms(func, inputs, eps=eps, directions=directions)
        s = inputs[diff[0]]._s if diff else None
        vals = s.flush(fetch=[t._id for t in a + n]) if a else {}
        pairs = [(float(vals[x._id]), float(vals[y._id])) for x, y in zip(a, n)]
        bad = [(x, y) for x, y in pairs if not abs(x - y) <= atol + rtol * abs(y)]
        if bad and raise_exception:
            raise AutogradError(f"Jacobian mismatch (fast mode): analytical {bad[0][0]!r} vs numerical "
                                f"{bad[0][1]!r}")
        return not bad
    outs = [o for o in _fn_outputs(func, inputs) if o.dtype.is_floating_point]
    s = outs[0]._s if outs else None
    rows = []  # analytical: one grad() per output element
    for o in outs:
        flat_n = o.numel()
        for k in range(flat_n):
            e = np.zeros(o.shape, dtype=o.dtype.np)
            e.reshape(-1)[k] = 1
            if not o.requires_grad:
                rows.append([None] * len(diff))
                continue
            gs = grad([o], [inputs[i] for i in diff], grad_outputs=[_factories.from_data(o._s, e, o.dtype,
                                                                                        o._dev)],
                      retain_graph=True, allow_unused=True)
            rows.append(list(gs))
    numeric = []  # per diff input, per element: (f(x+e) - f(x-e)) / 2eps, flattened over outputs
    with no_grad():
        for i in diff:
            x = inputs[i]
            base = x._numpy().astype(x.dtype.np)
            cols = []
            for k in range(x.numel()):
                outs_pm = []
                for sign in (1.0, -1.0):
                    arr = np.array(base, copy=True)
                    arr.reshape(-1)[k] += sign * eps
                    xs = list(inputs)
                    xs[i] = _factories.from_data(x._s, arr, x.dtype, x._dev)
                    outs_pm.append([o for o in _fn_outputs(func, xs) if o.dtype.is_floating_point])
                cols.append([(p - m) / (2 * eps) for p, m in zip(*outs_pm)])
            numeric.append(cols)
    fetch = [g._id for r in rows for g in r if g is not None] + \
        [c._id for col in numeric for cs in col for c in cs]
    vals = s.flush(fetch=fetch) if fetch else {}
    for di, i in enumerate(diff):
        x = inputs[i]
        n_in = x.numel()
        num = np.zeros((sum(o.numel() for o in outs), n_in))
        ana = np.zeros_like(num)
        for k in range(n_in):
            num[:, k] = np.concatenate([np.asarray(vals[c._id], dtype=np.float64).reshape(-1)
                                        for c in numeric[di][k]]) if outs else []
        for r, gs in enumerate(rows):
            g = gs[di]
            if g is not None:
                ana[r, :] = np.asarray(vals[g._id], dtype=np.float64).reshape(-1)
        if not np.allclose(ana, num, rtol=rtol, atol=atol):
            if raise_exception:
                raise AutogradError(f"Jacobian mismatch for output 0 with respect to input {i},\n"
                                    f"numerical:{num}\nanalytical:{ana}\n")
            return False
    return True


def retain_grad(t) -> None:
    if not t.requires_grad:
        raise AutogradError("can't retain_grad on Tensor that has requires_grad=False")
    if t.grad_fn is None:
        return
    t._retains_grad = True
    t.grad_fn.retained = weakref.ref(t)


def clear_cache() -> None:
    """Forget the client's cached backward graphs (the next backward asks the service again)."""
    _CACHE.clear()


_hooks.install(sys.modules[__name__])
