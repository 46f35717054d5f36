"""Views: tensors derived from a base by reshape/permute/slice/expand that track its in-place updates.

A view keeps its root base, the chain of :class:`ViewStep` from the base to itself, and the base's
version when it was computed. Reading a stale view recomputes it from the base (recording ops);
writing through a view (``v.add_(1)``, ``v[...] = x``) computes the base's new value with each
step's ``inverse`` and rebinds the base, as torch's shared storage would.
"""

from __future__ import annotations

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import TensorwireError
from tensorwire.protocol.shapes import numel, slice_len

from . import autocast_state as _amp
from . import autograd_hooks as _hooks
from .known_values import LIGHT, small_value
from .memos import remember, remember_again

_amp_active = _amp._active
_INT64 = D.int64
#: the view ops recorded lazily (``Session.record``'s ``lazy``: only when something reads the view)
LAZY_OPS = frozenset({"reshape", "slice", "permute", "expand"})


def _rec(t, op: str, ins, attrs, known=None):
    """``t._rec(op, ins, attrs)`` from a view step's method: the search for the user's line skips this function and
    the step's method (both the client's, see ``autograd_hooks.record``'s ``up``). ``known``: the node's attrs key
    and output meta when the step has them (``Session.record``'s ``known``: no inference, no key to build).

    A view op outside autograd (no grad to track, no autocast scope) is lazy: recorded only when a recorded op reads
    the view, its value is fetched from a device, or a compiled graph takes it (``Session._defer``). Most views
    are never read by the devices: ``x[i]`` that only gives a slice bound, ``t[i][0]`` written one element at a
    time (``client/element_writes.py``), ``p.data`` read by one update (an alias: read as its base)."""
    if op in LAZY_OPS and not _amp_active[0] and not _grad_tracked(t):
        return t._s.record(op, ins, attrs, t._dev, known, lazy=True)
    return _hooks.record(t._s, op, ins, attrs, t._dev, 3, known)


def _grad_tracked(t) -> bool:
    """Whether an op reading ``t`` is recorded with autograd (``autograd_hooks.record``'s test)."""
    return _hooks.requires_grad_of(t) and _hooks._E.is_grad_enabled()


def reshape_key(shape: tuple):
    """``attrs_key("reshape", {"shape": list(shape)})``, built directly (``shape``: a tuple of ints)."""
    return (("shape", shape),)


def _reshape(t, shape: tuple):
    """Record ``t.reshape(shape)`` (``shape`` a tuple of ints with ``t``'s element count: a step's own output shape)
    with its key and meta given, as most views record it."""
    return _rec(t, "reshape", [t], {"shape": list(shape)}, (reshape_key(shape), (shape, t.dtype)))


class ViewStep:
    """One view op: ``forward(t)`` records it, ``inverse(parent, value)`` writes ``value`` back. ``detached``: a
    view outside autograd (``t.data``), which ``autograd_hooks.requires_grad_of`` reads."""

    __slots__ = ()
    detached = False

    def forward(self, t):
        raise NotImplementedError

    def inverse(self, parent, value):
        raise NotImplementedError


class Reshape(ViewStep):
    __slots__ = ("shape",)

    def __init__(self, shape):
        self.shape = tuple(shape)

    def forward(self, t):
        if t._shape == self.shape and t._base is None:
            return _alias(t)
        if numel(t._shape) != numel(self.shape):  # (inference says what is wrong)
            return _rec(t, "reshape", [t], {"shape": list(self.shape)})
        return _reshape(t, self.shape)

    def inverse(self, parent, value):
        return _reshape(value, parent._shape)

    def on_host(self, value: np.ndarray) -> np.ndarray:
        return value.reshape(self.shape)


class Permute(ViewStep):
    __slots__ = ("dims",)

    def __init__(self, dims):
        self.dims = tuple(dims)

    def forward(self, t):
        return _rec(t, "permute", [t], {"dims": list(self.dims)})

    def on_host(self, value: np.ndarray) -> np.ndarray:
        return value.transpose(self.dims)

    def inverse(self, parent, value):
        inv = [0] * len(self.dims)
        for i, d in enumerate(self.dims):
            inv[d] = i
        return _rec(value, "permute", [value], {"dims": inv})


class Expand(ViewStep):
    __slots__ = ("shape",)

    def __init__(self, shape):
        self.shape = tuple(shape)

    def forward(self, t):
        return _rec(t, "expand", [t], {"shape": list(self.shape)})

    def on_host(self, value: np.ndarray) -> np.ndarray:
        shape = list(self.shape)  # (-1 keeps the size of the dim it aligns with, as torch's)
        lead = len(shape) - value.ndim
        for i, n in enumerate(value.shape):
            if shape[lead + i] == -1:
                shape[lead + i] = n
        return np.broadcast_to(value, shape)

    def inverse(self, parent, value):
        raise TensorwireError("unsupported operation: more than one element of the written-to tensor refers to "
                              "a single memory location. Please clone() the tensor before performing the "
                              "operation.")


class Slice(ViewStep):
    """Basic indexing: a strided slice, then a reshape that drops int dims and adds None dims. A step is never changed
    once made (``_known`` is a cache of what its fields give), so views may share one (:func:`row_view`)."""

    __slots__ = ("starts", "stops", "steps", "out_shape", "in_shape", "_known", "_pos", "_key")

    def __init__(self, starts: list, stops: list, steps: list, out_shape: tuple, in_shape: tuple | None = None):
        # (the lists are kept, not copied: the caller made them for this step, and the recorded attrs share them)
        self.starts, self.stops, self.steps = starts, stops, steps
        self.out_shape = out_shape
        #: the input shape the bounds were checked against (``indexing._basic_parts``); for an input of that shape
        #: the slice is recorded with its key and meta given (its lengths and steps: the plan's part of a slice)
        self.in_shape = in_shape
        self._known = None
        self._pos = None  # (root_position's map of flat positions, for one input shape: _pos_map)
        self._key = None  # (on_host's index, made when first used)

    def on_host(self, value: np.ndarray) -> np.ndarray:
        """The view of a host value (a value the client already has, see ``known_values``)."""
        key = self._key
        if key is None:  # (a loader's ``data[index].numpy()`` reads each index's step again every epoch)
            key = self._key = tuple(map(slice, self.starts, self.stops, self.steps))
        return value[key].reshape(self.out_shape)

    def rows(self) -> tuple[int, int] | None:
        """``(start, stop)`` when this step takes rows ``start:stop`` of its input along dim 0 and every other dim
        whole, with unit steps and no dim dropped or added (``data[i:i + 8]``, ``x[2:5]`` of a matrix); else None
        (and for a step whose input shape is not recorded)."""
        starts, stops, in_shape = self.starts, self.stops, self.in_shape
        if in_shape is None or not starts:
            return None
        a, b = starts[0], stops[0]
        if len(starts) == 1:  # (a 1-d input: ``data[i:i + 8]``)
            return (a, b) if self.steps[0] == 1 and self.out_shape == (b - a,) else None
        if self.steps.count(1) != len(starts):
            return None
        if len(starts) > 1 and (any(starts[1:]) or tuple(stops[1:]) != in_shape[1:]):
            return None
        return (a, b) if self.out_shape == (b - a, *in_shape[1:]) else None

    def _sliced(self, t):
        steps = self.steps
        if steps.count(1) == len(steps) and not any(self.starts) and self.stops == list(t._shape):  # the whole of t
            return t
        attrs = {"starts": self.starts, "stops": self.stops, "steps": steps}
        if t._shape != self.in_shape:
            return _rec(t, "slice", [t], attrs)
        return _rec(t, "slice", [t], attrs, self._key_meta(t))

    def _key_meta(self, t):
        """The slice node's attrs key and output meta for ``t`` (of shape ``in_shape``)."""
        known = self._known
        if known is None or known[1][1] is not t.dtype:
            steps = self.steps
            lens = tuple([slice_len(a, b, st) for a, b, st in zip(self.starts, self.stops, steps)])
            known = self._known = slice_known(lens, tuple(steps), t.dtype)
        return known

    def forward(self, t):
        out = self.out_shape
        if t._shape == self.in_shape and not _amp_active[0] and not _grad_tracked(t):
            known = self._key_meta(t)
            lens = known[1][0]
            if lens != t._shape:  # (the whole of t is no slice: below)
                attrs = {"starts": self.starts, "stops": self.stops, "steps": self.steps}
                if lens == out:  # a slice alone (``data[i:i + 8]``): what _sliced records here
                    return t._s.record("slice", [t], attrs, t._dev, known, lazy=True)
                # the slice and the reshape that drops its int dims (``x[i]``): one lazy node (``Session.record``)
                return t._s.record("slice", [t], attrs, t._dev, known, lazy=True,
                                   then=("reshape", {"shape": list(out)}, (reshape_key(out), (out, t.dtype))))
        s = self._sliced(t)
        if s._shape != self.out_shape or s is t:
            s = _reshape(s, self.out_shape)
        return s

    def inverse(self, parent, value):
        shape = tuple([slice_len(a, b, st) for a, b, st in zip(self.starts, self.stops, self.steps)])
        v = _reshape(value, shape) if value._shape != shape else value
        return _rec(parent, "setslice", [parent, v], {"starts": self.starts, "stops": self.stops,
                                                       "steps": self.steps})


#: the view steps with a host form (``on_host``): a view made of these only follows from its root's value
_HOST_STEPS = frozenset({Reshape, Permute, Expand, Slice})


def slice_known(lens: tuple, steps: tuple, dtype) -> tuple:
    """``Session.record``'s ``known`` for a ``slice`` node of lengths ``lens`` and steps ``steps`` (tuples of ints):
    ``(attrs_key("slice", attrs), (lens, dtype))`` (the plan's part of a slice: its lengths and steps, not where it
    starts)."""
    return (("steps", steps), ("#", (lens, steps))), (lens, dtype)


#: :func:`slice_known` of a slice with unit steps, by its lengths and dtype (a loader's slices take few lengths)
_UNIT_SLICE_KNOWN: dict[tuple, tuple] = {}


#: :func:`row_view`'s view steps, by ``(input shape, a, b)``: a loader that takes windows of one text at the same few
#: thousand offsets again and again makes each step once (emptied at :data:`MAX_ROW_STEPS`); kept from a window's
#: second sighting only (``memos.remember_again``: a loader of random offsets never takes one twice)
_ROW_STEPS: dict[tuple, Slice] = {}
_ROW_SEEN: dict[tuple, None] = {}
MAX_ROW_STEPS = 16384


def row_view(x, a: int, b: int):
    """``x[a:b]``: rows ``a:b`` of ``x`` (``0 <= a <= b <= x.shape[0]``, checked by the caller), every other dim
    whole. :func:`basic_view`'s view, with a view step shared by every view of those rows of a tensor of ``x``'s
    shape (made once, :data:`_ROW_STEPS`: a step is never changed once made). Rows of ``x``, not all of them, outside
    autograd, autocast and capture, ``x`` up to date with its root, are a light window (:func:`_light_window`), made
    here at once: a loader's ``data[i:i + 8]``."""
    shape = x._shape
    key = (shape, a, b)
    step = _ROW_STEPS.get(key)
    if step is None:
        nd = len(shape)
        step = remember_again(_ROW_STEPS, _ROW_SEEN, key, Slice([a] + [0] * (nd - 1), [b, *shape[1:]], [1] * nd,
                                                                (b - a, *shape[1:]), shape), MAX_ROW_STEPS)
    s = x._s
    root = x._base
    if 0 < b - a < shape[0] and s._capture is None and not _amp_active[0] \
            and (root is None or root._version == x._base_version) \
            and not ((x.requires_grad or root is not None and root.requires_grad) and _grad_tracked(x)):
        return _light_window(s, x, root, step, step.out_shape, x.dtype)
    out = step.out_shape
    return _basic_view(x, step, out, out)


def basic_view(x, starts: list, stops: list, steps: list, out: tuple, lens: tuple | None = None):
    """``x[key]`` for a basic key (ints, slices, ``None``) whose bounds ``indexing`` checked against ``x``'s shape:
    ``x._view(Slice(starts, stops, steps, out, x._shape))``. ``lens``: the strided slice's shape, when the caller has
    it, which it gives only for unit ``steps``. In the commonest cases (outside autocast and ``tw.compile``'s capture,
    the slice not the whole of ``x``) the view is made directly: its lazy node (``Session.defer``) when ``x`` is
    outside autograd and not a view whose base changed, else its nodes recorded with autograd
    (``autograd_engine.record_grad``, which brings a stale view up to date first); the nodes, view and known-value
    recipe :meth:`Slice.forward` and ``Tensor._view`` make (the recipe only where :func:`derive_view` keeps one),
    without their general work. Rows of ``x`` outside autograd (``data[i:i + 8]``) are a light window
    (:func:`_light_window`): no node until something other than ``stack``/``cat`` reads it."""
    return _basic_view(x, Slice(starts, stops, steps, out, x._shape), out, lens)


#: :func:`index_view`'s pieces, by ``(input shape, index, dtype)``: the view step of ``x[i]`` (its ``_known`` set), its
#: output shape and lengths, and its nodes' attrs (``_basic_view``'s ``made``); made once, as a step and the attrs of a
#: recorded node are never changed (emptied at :data:`MAX_ROW_STEPS`)
_INDEX_VIEWS: dict[tuple, tuple] = {}


def index_view(x, a: int):
    """``x[a]`` for an int ``0 <= a < x.shape[0]`` (checked by the caller): :func:`basic_view`'s view, its step,
    lengths, known meta and attrs made once per input shape, index and dtype (:data:`_INDEX_VIEWS`): a loop's
    ``line[i]``, ``t[i][0]``."""
    shape = x._shape
    dt = x.dtype
    key = (shape, a, dt)
    got = _INDEX_VIEWS.get(key)
    if got is None:
        got = remember(_INDEX_VIEWS, key, _index_parts(shape, a, dt), MAX_ROW_STEPS)
    step, out, lens, made = got
    s = x._s
    b = x._base
    if not x.requires_grad and s._capture is None and not _amp_active[0] \
            and (b is None or not b.requires_grad and b._version == x._base_version):
        # (x outside autograd, a root or a view up to date with its root: _basic_view's tests come to _made_view
        # without grad; an index in a loop, ``line[i]``, ``t[i][0]``, makes several a step)
        if dt is _INT64 and len(shape) == 1:
            arr = s._known.peek(x._id)
            if arr is not None:  # (a loader's ``int(targets[i])``: the element's value at once)
                return _int64_element(s, x, b, step, arr[a].item())
        return _made_view(s, x, b, step, lens, False, made)
    return _basic_view(x, step, out, lens, made)


def _int64_element(s, x, b, step: Slice, value: int):
    """:func:`index_view`'s ``x[a]`` of a 1-d int64 ``x`` whose value the client has, outside autograd, autocast and
    capture, up to date with its root (``targets[i]`` in a loader's ``__getitem__``), by ``step``: the view ``x[a]``
    (``x``'s root base, the chain of view steps: it sees ``x``'s later updates, recomputed from its root when read then,
    and writes through it reach ``x``) whose lazy node is the 0-d ``full`` of ``value``
    (``Session.known_int64``: no input pinned, recorded only if a recorded node reads it), as ``iter(x)`` makes its
    elements (``indexing._int64_elements``). Reading it (``int``, ``__index__``, ``.item()``) is a look-up."""
    t = s.known_int64(value, x._dev)
    if b is None:
        t._base = x
        t._vsteps = (step,)
        t._base_version = x._version
    else:
        t._base = b
        t._vsteps = (*(x._vsteps or ()), step)
        t._base_version = b._version
    return t


def _index_parts(shape: tuple, a: int, dt) -> tuple:
    """:func:`index_view`'s pieces for ``x[a]`` of an ``x`` of ``shape`` and ``dt``: ``(step, out, lens, made)``."""
    nd = len(shape)
    out = shape[1:]
    lens = (1, *out)
    step = Slice([a] + [0] * (nd - 1), [a + 1, *out], [1] * nd, out, shape)
    # (the slice's known meta kept in ``made`` too: ``Slice._key_meta`` may set the step's for another dtype, when a
    # view made by it is recomputed from a root whose dtype changed)
    known = step._known = slice_known(lens, (1,) * nd, dt)
    made = ({"starts": step.starts, "stops": step.stops, "steps": step.steps},
            ("reshape", {"shape": list(out)}, (reshape_key(out), (out, dt))), known)
    return step, out, lens, made


def _basic_view(x, step: Slice, out: tuple, lens: tuple | None, made: tuple | None = None):
    """:func:`basic_view` of ``x`` by ``step`` (whose output shape is ``out``; ``lens`` as there). ``made``:
    :func:`_made_view`'s, when the caller has them (then ``lens`` is given too, and ``lens != out``:
    :func:`index_view`)."""
    s = x._s
    b = x._base
    if s._capture is not None or _amp_active[0]:
        return x._view(step)
    # (_grad_tracked's test, read here: false at once when neither x nor its base requires grad)
    grad = (x.requires_grad or b is not None and b.requires_grad) and _grad_tracked(x)
    if not grad and b is not None and b._version != x._base_version:
        return x._view(step)
    dt = x.dtype
    if made is not None:
        return _made_view(s, x, b, step, lens, grad, made)
    if lens is not None and not grad and lens == out and out[0] and out[0] != x._shape[0] \
            and (len(out) == 1 or out[1:] == x._shape[1:]):  # (rows of x, not all of them, with unit steps)
        return _light_window(s, x, b, step, out, dt)
    starts, stops, steps = step.starts, step.stops, step.steps
    if lens is None:
        lens = tuple([slice_len(a, c, st) for a, c, st in zip(starts, stops, steps)])
        known = slice_known(lens, tuple(steps), dt)
    else:
        known = _UNIT_SLICE_KNOWN.get((lens, dt))
        if known is None:
            known = remember(_UNIT_SLICE_KNOWN, (lens, dt), slice_known(lens, (1,) * len(lens), dt))
    step._known = known
    # (Slice.forward's nodes: the slice, then the reshape of its int dims when there are any; the whole of x, ``t[i]``
    # of a dim of 1, is one reshape of x to ``out``, an alias when out is x's shape too)
    then = ("reshape", {"shape": list(out)}, (reshape_key(out), (out, dt))) if lens != out or lens == x._shape \
        else None
    return _made_view(s, x, b, step, lens, grad, ({"starts": starts, "stops": stops, "steps": steps}, then, known))


def _made_view(s, x, b, step: Slice, lens: tuple, grad: bool, made: tuple):
    """:func:`_basic_view`'s nodes and view, from ``made``: the slice node's attrs, the reshape after it
    (``Session.defer``'s ``then``: ``(op, attrs, known)``, or None when the slice needs none) and the slice's known
    meta (:func:`index_view` makes them once per shape, index and dtype)."""
    sattrs, then, known = made
    if lens == x._shape:  # (the whole of x: one reshape of x)
        if grad:
            t = _hooks._E.record_grad(s, "reshape", [x], then[1], x._dev, 3, then[2])
        else:
            t = s.defer_view("reshape", x, then[1], then[2])
    elif grad:  # (recorded with autograd: the slice, then its reshape)
        record_grad = _hooks._E.record_grad
        t = record_grad(s, "slice", [x], sattrs, x._dev, 3, known)
        if then is not None:
            if t.requires_grad:
                t = record_grad(s, "reshape", [t], then[1], x._dev, 3, then[2])
            else:  # (no grad to track: ``_rec``'s lazy view)
                t = s.record("reshape", [t], then[1], x._dev, then[2], lazy=True)
    else:
        t = s.defer_view("slice", x, sattrs, known, then)
    mark_view(t, x, step)
    derive_view(t, x, step.on_host)
    return t


#: the op of the lazy entry (``Session._lazy``) a light window's handle holds while it is light: no node, no input
#: pinned (its inputs ``()``), so its handle goes as a lazy node dropped unrecorded does (``Session._take_release``),
#: never to a device; its attrs ``(parent, the parent's handle, the root's version)`` when the window was taken. Never
#: recorded: a light window is materialized (given another handle) before anything reads its handle
LIGHT_OP = "light window"
#: a light window's entry once materialized (its parent no longer held), until its old handle goes
_LIGHT_NODE = (LIGHT_OP, (), None, None, (), None, None, None)
#: the client's ``Tensor`` class, installed by ``indexing.install`` (this module never imports ``tensor``)
Tensor: type | None = None
_new_tensor = object.__new__


def _light_window(s, x, b, step: Slice, out: tuple, dt):
    """A light window: ``x[a:b]`` of rows of ``x`` (a unit-step slice of dim 0 taking every other dim whole, not
    empty), outside autograd, autocast and capture, ``x`` up to date with its root. It is a view of ``x``'s root
    (``_base``, ``_vsteps`` as any view) that records nothing and pins nothing while only ``stack``/``cat`` read it
    (``combine._row_ranges``: the windows of one root are ONE gather of the root's rows, a batch loader's
    ``torch.stack([data[i:i + 8] for i in ix])``). Its ``_base_version`` is :data:`LIGHT`: anything else that reads it
    brings it up to date first (:func:`refresh`), and so gets, in program order, the lazy node ``basic_view`` makes
    for any other view (the same node, when neither the root nor ``x`` changed since; else the view recomputed from
    the root as it is now, what torch's shared storage shows). What that needs (``x``, its handle and the root's
    version now) is its handle's lazy entry (:data:`LIGHT_OP`): its step may be shared (:func:`row_view`)."""
    hid = next(s._ids)
    t = _new_tensor(Tensor)
    t._init(s, hid, out, dt, x._dev)
    if b is None:
        t._base = x
        t._vsteps = (step,)
        s._lazy[hid] = (LIGHT_OP, (), (x, x._id, x._version), None, (), None, None, None)
    else:
        t._base = b
        t._vsteps = x._vsteps + (step,)
        s._lazy[hid] = (LIGHT_OP, (), (x, x._id, b._version), None, (), None, None, None)
    t._base_version = LIGHT
    return t


def _materialize(view):
    """Bring light window ``view`` (:func:`_light_window`) up to date: give it the lazy node of its slice of its
    parent (``basic_view``'s, and the known-value recipe ``derive_view`` keeps) when neither its root nor the parent
    changed since it was taken, else recompute it from its root as :func:`refresh` does any view whose base changed
    (and so when its handle no longer holds its light entry: ``out=`` gave it another). Returns :func:`refresh`'s."""
    steps = view._vsteps
    step = steps[-1]
    root = view._base
    s = view._s
    lazy = s._lazy
    node = lazy.get(view._id)
    x = None
    if node is not None and node[0] is LIGHT_OP and node[2] is not None:
        lazy[view._id] = _LIGHT_NODE  # (its parent no longer held)
        x, xid, version = node[2]
        if root._version != version or x._id != xid or s._capture is not None:
            x = None
    if x is not None:
        t = s.defer_view("slice", x, {"starts": step.starts, "stops": step.stops, "steps": step.steps},
                         step._key_meta(x))
    else:
        t = root
        for st in steps:
            t = st.forward(t)
    _swap(view, t)
    view._base_version = root._version
    if x is not None:
        derive_view(view, x, step.on_host)
    return t


def derive_view(t, x, on_host) -> None:
    """The known-value recipe of view ``t`` just made of ``x`` by a step whose host form is ``on_host``
    (``KnownValues.derive``), where the root base's value would not give it. A view of a small root through steps
    that all have a host form keeps none: ``KnownValues.view_recipe`` works its value out from the root's when it is
    read (a loader's windows of a text are made every step and never read); unless ``x`` is a view whose value the
    client has (that value gives ``t``'s without the root's, which the client may not have)."""
    if on_host is None:
        return
    root = t._base
    known = t._s._known
    if root is not x:
        if known.has(x._id):
            known.derive(t._id, x, on_host)
            return
        for st in x._vsteps:  # (a loop, not all(): x is most often one slice of its root)
            if type(st) not in _HOST_STEPS:
                known.derive(t._id, x, on_host)
                return
    if not small_value(root):
        known.derive(t._id, x, on_host)


def make_view(x, step: ViewStep, op: str, attrs: dict, known: tuple):
    """``x._view(step)`` for a step whose ``forward(x)`` records one node, ``op`` of ``x`` with ``attrs``, whose attrs
    key and output meta are ``known`` (``Session.record``'s): a permute, a reshape (to another shape or ``x``'s own),
    an expand. Outside autocast and ``tw.compile``'s capture the node is made directly: lazy (``Session.defer``) when
    ``x`` is outside autograd and not a view whose base changed, else recorded with autograd
    (``autograd_engine.record_grad``, which brings a stale view up to date first), as ``_rec`` would; then the view
    and known-value recipe of ``Tensor._view`` (where :func:`derive_view` keeps one). The movement methods of
    ``Tensor`` (``permute``, ``T``, ``view``, ``unsqueeze`` ...) make their views here."""
    s = x._s
    if s._capture is not None or _amp_active[0]:
        return x._view(step)
    b = x._base
    # (_grad_tracked's test, read here: false at once when neither x nor its base requires grad)
    if (x.requires_grad or b is not None and b.requires_grad) and _grad_tracked(x):
        # (3: the search for the user's line starts above the caller of this function's caller, Tensor's method, as
        # only Tensor's methods call this function)
        t = _hooks._E.record_grad(s, op, [x], attrs, x._dev, 3, known)
    elif b is None or b._version == x._base_version:
        t = s.defer_view(op, x, attrs, known)
    else:  # (a view whose base changed: recomputed by the general path)
        return x._view(step)
    mark_view(t, x, step)
    derive_view(t, x, getattr(step, "on_host", None))
    return t


class Detached(ViewStep):
    """``t.data``: the same value outside autograd. Writes through it update the base without being recorded (and
    without torch's in-place checks on leaves), as torch's ``.data`` does."""

    __slots__ = ()
    detached = True

    def forward(self, t):
        return detached_alias(t)

    def inverse(self, parent, value):
        shape = parent._shape
        if value._shape == shape:
            return detached_alias(value)
        if numel(value._shape) != numel(shape):  # (inference says what is wrong)
            return value._s.record("reshape", [value], {"shape": list(shape)}, value._dev)
        return value._s.record("reshape", [value], {"shape": list(shape)}, value._dev,
                               (reshape_key(shape), (shape, value.dtype)), lazy=True)


#: an alias's node pieces (a reshape to its input's own shape: :func:`detached_alias`, :func:`data_view`) by
#: ``(shape, dtype)``: its attrs and ``(attrs key, meta)``, made once per shape and dtype (a recorded node's attrs are
#: never changed), where each ``p.data`` of an update would build them anew
_ALIASES: dict[tuple, tuple] = {}


def _alias_parts(shape: tuple, dt) -> tuple:
    """``(attrs, known)`` of the alias node of a tensor of ``shape`` and ``dt``, remembered in :data:`_ALIASES`."""
    return remember(_ALIASES, (shape, dt), ({"shape": list(shape)}, (reshape_key(shape), (shape, dt))))


def detached_alias(t):
    """A new tensor holding ``t``'s value outside autograd: a reshape to its own shape, lazy (outside ``tw.compile``'s
    capture an op that reads it reads ``t``'s handle, ``Session._resolve``: no node is recorded for it)."""
    shape = t._shape
    s = t._s
    attrs, known = _ALIASES.get((shape, t.dtype)) or _alias_parts(shape, t.dtype)
    b = t._base
    if s._capture is None and t.dtype.is_floating_point and (b is None or b._version == t._base_version):
        # (what ``record`` does for it, in one step: no known value to keep for a floating tensor, no view to refresh)
        return s.defer_view("reshape", t, attrs, known)
    return s.record("reshape", [t], attrs, t._dev, known, lazy=True)


#: ``t.data``'s view step (it holds nothing, so every ``.data`` shares one)
DETACHED = Detached()


def data_view(t):
    """``t.data``: :func:`detached_alias` of ``t`` made a view of ``t`` (``t._view(DETACHED)``). Of a floating root
    outside ``tw.compile``'s capture, the usual ``p.data`` of an update, the lazy alias and its view fields are made
    in one step (a detached step has no host form: no known-value recipe to keep, see :func:`derive_view`)."""
    s = t._s
    if t._base is None and s._capture is None and t.dtype.is_floating_point:
        shape = t._shape
        attrs, known = _ALIASES.get((shape, t.dtype)) or _alias_parts(shape, t.dtype)
        return mark_view(s.defer_view("reshape", t, attrs, known), t, DETACHED)
    return t._view(DETACHED)


#: the view steps that keep every element's flat position and the dtype: a chain of them that ends in its root's shape
#: is the root's whole value as it is
_ALIAS_STEPS = (Reshape, Detached)


def is_alias_of(view, t) -> bool:
    """Whether ``view`` is a view of the tensor ``t`` (a root, not a view) that holds ``t``'s whole value as it is:
    ``t.data``, ``t.view(-1).view(t.shape)``, ``t.data.data`` (its value is ``t``'s now, whatever ``t`` had when it
    was computed: a view follows its base's updates)."""
    if view._base is not t or view._shape != t._shape:
        return False
    for step in view._vsteps:
        if type(step) not in _ALIAS_STEPS:
            return False
    return True


def root_position(t, pos: int) -> int | None:
    """The flat (row-major) position in ``t``'s root base of the element at flat position ``pos`` of the view ``t``,
    when its steps are basic slices and reshapes only (each element of such a view is one element of the base); else
    None. Lets a Python value written to one element of a view (``x[i][0][j] = 1``) join the base's run of element
    writes (``client/element_writes.py``) instead of recording the write back through every step."""
    steps = t._vsteps
    k = len(steps)
    while k:  # (last step first: row-major, a reshape keeps every element's flat position, a slice maps it)
        k -= 1
        step = steps[k]
        tp = type(step)
        if tp is Reshape:
            continue
        if tp is not Slice:
            return None
        if k:  # (the step's input shape: its parent step's output, or the root's)
            prev = steps[k - 1]
            tq = type(prev)
            if tq is Reshape:
                shape = prev.shape
            elif tq is Slice:
                shape = prev.out_shape
            else:
                return None
        else:
            shape = t._base._shape
        m = step._pos
        if m is None or m[0] != shape:
            m = step._pos = _pos_map(step, shape)
        out = m[1]
        for n, mult in m[2]:
            pos, i = divmod(pos, n)
            out += i * mult
        pos = out
    return pos


def _pos_map(step: Slice, shape: tuple) -> tuple:
    """``(shape, offset, digits)``: slice ``step`` of an input of ``shape`` takes the element at flat position ``pos``
    of its (row-major) output from flat position ``offset + sum(i * mult)`` of its input, where the ``i`` are the
    digits of ``pos`` in the radices ``n`` of ``digits`` (``(n, mult)`` pairs, last dim first; dims of length 0 or 1
    have no digit: their index is 0)."""
    known = step._known
    lens = known[1][0] if known is not None else \
        [slice_len(a, b, st) for a, b, st in zip(step.starts, step.stops, step.steps)]
    offset, scale, digits = 0, 1, []
    for a, st, n, m in zip(reversed(step.starts), reversed(step.steps), reversed(lens), reversed(shape)):
        offset += a * scale
        if n > 1:
            digits.append((n, st * scale))
        scale *= m
    return shape, offset, tuple(digits)


def contiguous_strides(shape) -> tuple[int, ...]:
    """The row-major strides (in elements) of ``shape``, as torch gives a contiguous tensor: a dim of length 0 or 1
    has the stride the dims after it make."""
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= max(int(n), 1)
    return tuple(reversed(out))


def _view_strides(old_shape, old_strides, new_shape) -> list[int] | None:
    """The strides of ``new_shape`` viewing a tensor of ``old_shape`` and ``old_strides`` without a copy, or None when
    no strides can (torch's ``computeStride``: runs of dims that are contiguous with each other may be split or
    merged; dims of length 1 take any stride)."""
    if not old_shape:  # (a 0-d tensor's views: dims of length 1)
        return [1] * len(new_shape)
    if numel(old_shape) == 0:
        return list(old_strides) if list(old_shape) == list(new_shape) else list(contiguous_strides(new_shape))
    new_strides = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base_stride = old_strides[-1] if old_strides else 1
    tensor_numel, view_numel = 1, 1
    for tensor_d in range(len(old_shape) - 1, -1, -1):
        tensor_numel *= old_shape[tensor_d]
        if tensor_d == 0 or (old_shape[tensor_d - 1] != 1
                             and old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride):
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                new_strides[view_d] = view_numel * chunk_base_stride
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base_stride = old_strides[tensor_d - 1]
                tensor_numel, view_numel = 1, 1
    return None if view_d != -1 else new_strides


def viewable(t, shape: tuple) -> bool:
    """Whether torch's strides give view ``t`` (a view: ``t._base`` is set) in ``shape`` without a copy (torch's
    ``reshape`` views then, else copies). A view no strides describe is one torch would have copied already."""
    lay = layout(t)
    return lay is not None and _view_strides(t._shape, lay[0], shape) is not None


def strides(t) -> tuple[tuple[int, ...], int]:
    """``(strides, storage offset)`` of ``t`` in elements, as torch reports them (``Tensor.stride()``,
    ``storage_offset()``): :func:`layout`'s, and for a view no strides describe what the view's value is on the
    worker: contiguous, at offset 0."""
    got = layout(t)
    return got if got is not None else (contiguous_strides(t._shape), 0)


def row_major(t) -> bool:
    """Whether ``t`` lies row-major in its root base's elements, as torch's ``is_contiguous()`` (the strides of dims of
    more than one element those of a contiguous tensor): a tensor that is no view does; a view that no strides describe
    is one torch would have copied, and so does too."""
    if t._base is None:
        return True
    lay = layout(t)
    if lay is None:
        return True
    want = contiguous_strides(t._shape)
    for n, a, b in zip(t._shape, lay[0], want):
        if n > 1 and a != b:
            return False
    return True


def layout(t) -> tuple[tuple[int, ...], int] | None:
    """``(strides, storage offset)`` of ``t`` in its root base's row-major elements (a worker's tensors are
    contiguous, so those stand for the storage, as ``Tensor.as_strided`` reads it), or None for a view no strides
    describe. A tensor that is no view is contiguous; a view's strides follow its steps from its root: a slice moves
    the offset and multiplies the strides, a permute permutes them, an expand gives 0 to the dims it broadcasts, a
    reshape splits or merges them as torch's view does (None where torch would have copied), an ``as_strided``
    view's are its positions' lattice (None where they are none)."""
    base = t._base
    if base is None:
        return contiguous_strides(t._shape), 0
    shape, st, off = list(base._shape), list(contiguous_strides(base._shape)), 0
    for step in t._vsteps:
        tp = type(step)
        if tp is Detached:
            continue
        if tp is Permute:
            shape, st = [shape[d] for d in step.dims], [st[d] for d in step.dims]
        elif tp is Expand:
            new = list(step.shape)
            lead = len(new) - len(shape)
            st = [0] * lead + [0 if (shape[i] == 1 and new[lead + i] != 1) else st[i] for i in range(len(shape))]
            shape = new
        elif tp is Slice:
            lens = [slice_len(a, b, k) for a, b, k in zip(step.starts, step.stops, step.steps)]
            off += sum(a * s for a, s in zip(step.starts, st) if a)
            st = [s * k for s, k in zip(st, step.steps)]
            shape = lens
            out = list(step.out_shape)
            if out != shape:
                new_st = _view_strides(shape, st, out)
                if new_st is None:
                    break
                shape, st = out, new_st
        elif tp is Reshape:
            new_st = _view_strides(shape, st, list(step.shape))
            if new_st is None:
                break
            shape, st = list(step.shape), new_st
        else:
            positions = getattr(step, "positions", None)  # (``as_strided``'s step: its positions in the root)
            if positions is None or positions.size == 0:
                break
            lattice = _lattice(positions)
            if lattice is None:
                break
            shape, (st, off) = list(positions.shape), lattice
    else:
        if tuple(shape) == tuple(t._shape):
            return tuple(int(s) for s in st), int(off)
    return None


def _lattice(positions: np.ndarray) -> tuple[list[int], int] | None:
    """``(strides, offset)`` with ``positions == offset + sum(index_d * stride_d)``, or None when none exist."""
    off = int(positions.flat[0])
    st = []
    for d, n in enumerate(positions.shape):
        if n > 1:
            idx = [0] * positions.ndim
            idx[d] = 1
            st.append(int(positions[tuple(idx)]) - off)
        else:
            st.append(contiguous_strides(positions.shape)[d])
    grid = np.full(positions.shape, off, dtype=np.int64)
    for d, s in enumerate(st):
        shape = [1] * positions.ndim
        shape[d] = positions.shape[d]
        grid = grid + (np.arange(positions.shape[d], dtype=np.int64) * s).reshape(shape)
    return (st, off) if np.array_equal(grid, positions) else None


def is_detached(t) -> bool:
    """Whether ``t`` is (a view of) a ``.data`` view: in-place updates through it are outside autograd."""
    steps = t._vsteps
    if steps is not None:
        for s in steps:  # (a loop, not any(): most views have one step)
            if s.detached:
                return True
    return False


def _alias(t):
    return _reshape(t, t._shape)


def mark_view(out, src, step: ViewStep):
    """Make ``out`` (just computed from ``src`` by ``step``) a view of ``src``'s root base."""
    root = src._base if src._base is not None else src
    out._base = root
    out._vsteps = (src._vsteps or ()) + (step,) if src._base is not None else (step,)
    out._base_version = root._version
    return out


def refresh(view, again: bool = False):
    """Recompute a view whose base changed since it was computed (a light window: materialize it, see
    :func:`_materialize`); ``again``: recompute it from its root even when it is up to date (a light window too, not
    given its parent's lazy slice): ``autograd_engine.sync_view``, for the autograd graph of its root's value, which
    its steps record. Returns the tensor the view's old value went to (holding the new value's autograd fields: the
    caller may move them to the view), or None when it was up to date."""
    root = view._base
    if not again:
        if root._version == view._base_version:
            return None
        if view._base_version == LIGHT:
            return _materialize(view)
    t = root
    for step in view._vsteps:
        t = step.forward(t)
    _swap(view, t)
    view._base_version = root._version
    return t


def _swap(a, b) -> None:
    """Give ``a`` the value (id) of ``b``; ``b`` takes ``a``'s old id and releases it when it dies."""
    if a._s._capture is not None:
        a._s._capture.on_swap(a, b)
    a._id, b._id = b._id, a._id
    a._shape, b._shape = b._shape, a._shape
    a.dtype, b.dtype = b.dtype, a.dtype


def assign(t, new) -> None:
    """In-place update of ``t`` to the value of ``new`` (same shape and dtype)."""
    if t._base is None:
        _swap(t, new)
        t._version += 1
        if new.requires_grad or t.grad_fn is not None:  # (else no graph to move: ``after_inplace`` does nothing)
            _hooks.after_inplace(t, new)
        return
    root = t._base
    if root._version != t._base_version:
        refresh(t)
    if is_detached(t) and root._s._capture is None and is_alias_of(t, root):
        # (``p.data.add_(...)``: the whole of root's value written outside autograd. Root takes new's handle itself:
        # the other way round, as below, root would hold an alias, and every later read of it, a parameter read by
        # every step, would resolve it. t is left behind root's version, as any other view of root now is: the first
        # read of it, if any, brings it up to date (``refresh``); most such views die unread, ``p.data`` of an
        # update)
        _swap(root, new)
        root._version += 1
        return
    vals = [root]
    for step in t._vsteps[:-1]:
        vals.append(step.forward(vals[-1]))
    v = new
    for step, parent in zip(reversed(t._vsteps), reversed(vals)):
        v = step.inverse(parent, v)
    _swap(root, v)
    root._version += 1
    if not is_detached(t):
        _hooks.after_inplace(root, v)
    _swap(t, new)
    t._base_version = root._version
