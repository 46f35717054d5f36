"""Small values the client already has: read again without a round trip.

A handle's value never changes: an in-place update gives the tensor a new handle (``views._swap``), so a value
seen once under a handle is that handle's value for good. The session keeps, by handle:

* values it fetched of at most :data:`SMALL_BYTES`, and values it made itself (``tw.tensor(...)`` of Python data or a
  numpy array, a host computation such as ``randperm``'s) of at most :data:`MADE_BYTES`;
* for a view made by indexing with ints and slices or by a reshape (``ix[i]``, and so iterating ``for i in ix``),
  how to compute its value from its parent's (the view step's ``on_host``): the first element read fetches the
  parent once (when it is small), and every other element comes from that value. ``data[i:i + 8] for i in ix``
  costs one round trip for ``ix``, not one per element. A view's value is computed when it is first read, not when
  the view is made (of a known parent, from the parent's value then). A view of a small root through steps that
  all have a host form keeps no recipe at all (``views.derive_view``): its value is worked out from the root's and
  its chain of steps when read (:meth:`KnownValues.view_recipe`), so the windows a loader makes every step and
  never reads cost nothing here.

* the integer and bool results of elementwise ops (and ``full``) on such values, computed on the client too by the
  CPU worker's own numpy kernels (``backends/cpu/kernels.py``, the one definition of each op's semantics): so
  ``data[i:i + 8]`` needs no round trip for ``i + 8`` either. Floating results are left to the devices (a fused
  kernel may round differently from one op at a time).

So ``__index__``, ``int()``, ``float()``, ``.item()``, ``.tolist()`` and ``.numpy()`` of such tensors answer from
the client. Entries go when their handle is released, and the oldest go past :data:`LIMIT_BYTES`. Inside
``tw.compile``'s capture nothing is read or kept here (a replay's values are new each time).
"""

from __future__ import annotations

import operator
from collections import deque

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.graph import attrs_key
from tensorwire.protocol.ops import OPS
from tensorwire.protocol.shapes import numel

from . import autocast_state as _amp

_amp_active = _amp._active

#: values of at most this many bytes are kept
SMALL_BYTES = 64 << 10
#: values the client made itself (an upload of its own array, a host computation) are kept up to this size: they cost
#: no fetch, and a dataset that reads one element at a time of a permutation of 10,000 indices (minGPT's adder:
#: ``self.ixes[idx].item()`` in ``__getitem__``, 76 KB of int64) made a round trip per element where torch reads memory
MADE_BYTES = 1 << 20
#: ``tw.tensor`` of a list or tuple of at most this many Python numbers (``Normalize``'s ``as_tensor(mean)``) is made
#: once a session and aliased after, and so are views of it of at most as many elements (``Session.small_data``)
SMALL_DATA_NUMBERS = 64
#: the most bytes kept for a session (the least recently used go first): room for a few datasets bought whole (below)
LIMIT_BYTES = 256 << 20
#: a larger root whose elements are read one view at a time (torchvision's MNIST: ``self.data[index]`` then
#: ``.numpy()``, and ``int(self.targets[index])``, in every ``__getitem__``) is fetched whole once the round trips
#: spent on its views would have fetched it (rent or buy: each read a round trip, :data:`RENT_BYTES` of its bytes,
#: until they add up to the root's size; then one fetch of the root, and its views follow from it), up to this size
BUY_BYTES = 128 << 20
#: the bytes one round trip's time would fetch (a read of a view ~150-200 us here, a download ~1.3 GB/s)
RENT_BYTES = 256 << 10
#: the most roots whose rented reads are counted (the oldest counts go first)
MAX_RENTED = 1024
#: ops whose integer or bool results the client computes from known inputs (at most HOST_ELEMENTS of them)
#: (and ``randint``: the counter-based generator's integers are the same bits on every device, ``protocol/random.py``,
#: so ``ix = torch.randint(n, (batch,))`` iterated as slice bounds, nanoGPT's ``get_batch``, reads no value back)
HOST_OPS = frozenset({"full", "add", "sub", "mul", "neg", "abs", "floor_divide", "remainder", "maximum", "minimum",
                      "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "logical_not",
                      "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "where", "cast", "randint"})
HOST_ELEMENTS = 4096
#: ops whose result is a constant or a copy of input elements (the movement ops, a clone or a move included), bit for
#: bit the same on every device, so the client computes one of any real dtype, floating too, when it holds every
#: input's value (:meth:`KnownValues.held`, ``Session.holds``): a dataset's ``__getitem__`` that fills a ``zeros`` row
#: from a ``tensor`` of ids, and the ``stack`` that batches such rows, make a value the client holds whole
#: (``Session.record`` keeps a written or joined one as a lazy upload). Not arithmetic, even the ops IEEE rounds
#: correctly (add, sub, mul, div, a cast: the same bits on every device): tried in session 43 for torchvision's
#: ``ToTensor`` and ``Normalize`` of each image, a sample cost the client about as much worked out here as recorded
#: (119 us held against 138 recorded; the MNIST loader script 2.92 s held against 2.76), and every small
#: ``tw.ones(n) * k`` would have stopped reaching a device
HELD_OPS = frozenset({"full", "setslice", "index_put"}
                     | {name for name, o in OPS.items() if o.kind == "movement"})
#: the ``_base_version`` of a light window (``views.basic_view``): no root's version (those count up from 0), so every
#: reader that brings a view whose base changed up to date (``Tensor._refresh``: ``Session.record``, ``_numpy``,
#: ``assign``, a compiled graph's arguments ...) materializes a light window first (``views.refresh``)
LIGHT = -1
#: the longest chain of recipes kept (a value further from a known or fetched one is the device's to give)
MAX_DEPTH = 16
#: the most values brought before they were asked for (:meth:`KnownValues.brought`) followed until they are read
MAX_BROUGHT = 4096


#: ``Session.record``'s ``known`` for a 0-d int64 ``full`` (its ``value`` is a dynamic attribute: not in the key)
_FULL_INT64_0D = (attrs_key("full", {"shape": [], "dtype": "int64", "value": 0}), ((), D.int64))


#: a recipe's last entry (:meth:`KnownValues.recipe`): its function takes the list of its inputs' values ...
_OF_ALL = object()
#: ... or the value of its one input (a view step's ``on_host``); any other entry is the value it is applied to
_OF_INPUT = object()


class KnownValues:
    """Handle -> value (read-only numpy arrays), and handle -> recipe: the input tensors, their handles then, how
    the value follows from theirs, ``fetch_inputs`` when an input may be fetched to follow it (a view's small
    parent: one round trip that serves all its elements), the depth, and what the function takes
    (:data:`_OF_ALL`, :data:`_OF_INPUT`, or a value kept when the recipe was made)."""

    def __init__(self, limit: int = LIMIT_BYTES):
        # (a plain dict whose order is the reads' recency, least recent first: a read moves its entry to the end. Not
        # an OrderedDict: a loader keeps and forgets a few hundred slice bounds a step, and a dict's store and pop
        # cost about half an OrderedDict's)
        self._values: dict[int, np.ndarray] = {}
        self._recipes: dict[int, tuple] = {}
        self.bytes = 0
        self.limit = limit
        self.hits = 0  # reads answered here (tests and stats)
        # (:meth:`bring`'s policy: values brought before they were asked for, not read yet: handle -> the number of the
        # round trip that brought them; the values of the two latest such round trips that died unread since one was
        # last read; how many the latest brought, and its number; the newest handle a round trip passed over)
        self._brought: dict[int, int] = {}
        self._wasted = 0
        self._round = 0
        self._rounds = 0
        self._passed = 0
        self._rents: dict[int, int] = {}  # root handle -> views of it read by a round trip (see rent)
        #: ``peek(hid)``: handle ``hid``'s value if kept, not counted as a read and its age unchanged (the dict's own
        #: ``get``, called directly: a slice bound's read, ``indexing._int``, and ``known_int_op`` make it a few hundred
        #: times a step)
        self.peek = self._values.get

    def get(self, hid: int) -> np.ndarray | None:
        """Handle ``hid``'s value if kept, counted as a read (it becomes the most recently read)."""
        values = self._values
        v = values.pop(hid, None)
        if v is not None:
            values[hid] = v
            self.hits += 1
            if hid in self._brought:  # (bringing values pays: see bring)
                del self._brought[hid]
                self._wasted = 0
        return v

    def has(self, hid: int) -> bool:
        """Whether handle ``hid``'s value is kept (not counted as a read)."""
        return hid in self._values

    def follows(self, hid: int) -> bool:
        """Whether handle ``hid``'s value is kept or has a recipe (the client can give it, as a rule: a recipe whose
        inputs changed since falls back to the device)."""
        return hid in self._values or hid in self._recipes

    def put(self, hid: int, value: np.ndarray, limit: int = SMALL_BYTES) -> None:
        """Keep ``value`` (made read-only) as handle ``hid``'s, when it is at most ``limit`` bytes (:data:`MADE_BYTES`
        for a value the client made itself)."""
        values = self._values
        n = value.nbytes
        if n > limit or hid in values:
            return
        if value.flags.writeable:
            value = value.view()
            value.setflags(write=False)  # (as ``flags.writeable = False``, for half its cost)
        recipes = self._recipes
        if hid in recipes:
            del recipes[hid]
        values[hid] = value
        self.bytes += n
        if self.bytes > self.limit:
            self._evict()

    def bring(self, hids: list) -> bool:
        """Whether a round trip should bring the values of ``hids``, not asked for (``Session._take_along``: a fetch
        takes the 0-d results not read yet along, so reading a list of losses after a loop is one round trip). Not
        while the values brought keep dying unread (each costs the client ~16k instructions, and the worker work, for
        nothing): once the values of the two latest round trips that brought some died with none read since, a round
        trip that could bring as many as the latest did brings none (the same pattern of values), until a value
        brought is read again or :meth:`missed` says a read came that bringing would have saved. Any other count is
        another pattern (the burst of a list of losses read after a loop) and is brought: a wrong "no" costs a round
        trip (hundreds of microseconds), a wrong "yes" tens."""
        if len(hids) != self._round or self._wasted < 2 * self._round:
            return True
        self._passed = max(self._passed, max(hids))
        return False

    def brought(self, hids: list) -> None:
        """The values of handles ``hids`` were brought (and kept) before anyone asked for them: :meth:`get` and
        :meth:`forget` follow what becomes of them (:meth:`bring`)."""
        if not hids:
            return
        b = self._brought
        self._rounds += 1
        b.update(dict.fromkeys(hids, self._rounds))
        self._round = len(hids)
        while len(b) > MAX_BROUGHT:  # (the oldest, unread and alive for long: no longer followed)
            del b[next(iter(b))]

    def missed(self, hid: int) -> None:
        """Handle ``hid``'s value, a 0-d result not read yet, is fetched on its own: when a round trip before passed
        it over (:meth:`bring` said no), that read is one bringing would have saved, and bringing values pays again."""
        if hid <= self._passed:
            self._wasted = 0

    def put_int64(self, hid: int, value: int, device: str) -> tuple:
        """Keep ``value`` (an int in int64's range) as the value of handle ``hid``, just made (nothing kept or
        followed for it yet), a 0-d int64 on ``device``; returns the lazy node that gives it (:func:`int64_node`'s,
        shared by the handles of that value: ``Session.known_int64`` keeps it as the handle's lazy node). One call for
        the node and the value: the client makes a few hundred of these a step (a loader's slice bounds)."""
        e = _INT64_NODES.get(value)
        if e is None or e[0][3] != device:
            e = int64_node(value, device)
        self._values[hid] = e[1]
        self.bytes += 8
        if self.bytes > self.limit:
            self._evict()
        return e[0]

    def _evict(self) -> None:
        """Drop the least recently used values until at most :attr:`limit` bytes are kept."""
        values = self._values
        while self.bytes > self.limit and values:
            old = values.pop(next(iter(values)))  # (the first entry: the least recently read)
            self.bytes -= old.nbytes

    def derive(self, hid: int, parent, on_host) -> None:
        """Handle ``hid``'s value is ``on_host(the parent's current value)`` (a view step's host form). The recipe
        keeps ``on_host`` itself (its calling function is made by :meth:`recipe`, when read: most views of a known
        value are never read, ``data[i:i + 8]`` of a loader)."""
        pid = parent._id
        if on_host is None or hid == pid:
            return
        recipes = self._recipes
        value = self._values.get(pid)
        if value is not None:  # (a kept value is small: depth 0)
            recipes[hid] = ((), (), on_host, False, 1, value)
            return
        depth = self._depth(pid)
        if depth < MAX_DEPTH and small_value(parent):
            recipes[hid] = ((parent,), (pid,), on_host, True, 1 + depth, _OF_INPUT)

    def compute(self, hid: int, op: str, inputs, attrs, shape: tuple, dtype) -> bool:
        """Know handle ``hid``, ``op`` of ``inputs``, when its result is integer or bool and small (:data:`HOST_OPS`):
        now when every input's value is known, else once they are (a recipe); or, for :data:`HELD_OPS` of any real
        dtype, now when the client holds every input's value (:meth:`held`). Returns :meth:`follows` of ``hid``
        (after)."""
        if dtype.is_complex:
            return self.follows(hid)
        n = 1
        for d in shape:
            n *= d
        if op not in HOST_OPS or dtype.is_floating_point or n > HOST_ELEMENTS:
            # (past HOST_ELEMENTS, only a join or a rearrangement of held values, up to MADE_BYTES: one upload of what
            # the client holds already, a corpus joined from a tensor a line; not a fill or an expand, which would
            # make bytes to upload where a device makes them)
            if op not in HELD_OPS or n > HOST_ELEMENTS and (n * dtype.itemsize > MADE_BYTES or op == "full"
                                                             or n > sum(map(_held_elements, inputs))):
                return self.follows(hid)
            values = []
            for t in inputs:
                v = self.held(t)
                if v is None:
                    return self.follows(hid)
                values.append(v)
            out = host_op(op, values, attrs, shape, dtype)
            if out is not None:
                self.put(hid, out, MADE_BYTES)  # (the client made it: a corpus joined from its lines, held)
            return hid in self._values
        known = self._values
        values = []
        missing = False
        for t in inputs:
            v = known.get(t._id)
            if v is None:
                missing = True
            values.append(v)
        if missing:
            if all(v is not None or t._id in self._recipes or t._base is not None and self.view_recipe(t) is not None
                   for v, t in zip(values, inputs)):
                depth = 1 + max(self._depth(t._id) or (len(t._vsteps) if t._base is not None else 0) for t in inputs)
                if depth <= MAX_DEPTH:
                    self._recipes[hid] = (tuple(inputs), tuple(t._id for t in inputs),
                                          lambda vs: host_op(op, vs, attrs, shape, dtype), False, depth, _OF_ALL)
            return hid in known or hid in self._recipes
        out = host_op(op, values, attrs, shape, dtype)
        if out is not None:
            self.put(hid, out)
        return hid in known or hid in self._recipes

    def recipe(self, hid: int):
        """``(inputs, fn)`` when handle ``hid``'s value can be followed from its inputs' here: each input still holds
        the value it had then, and is known, has such a recipe (or, a view, :meth:`view_recipe`'s), or may be
        fetched; else None."""
        r = self._recipes.get(hid)
        if r is None:
            return None
        inputs, ids, fn, fetch_inputs, _, arg = r
        for t, i in zip(inputs, ids):
            if t._id != i or not (i in self._values or fetch_inputs or self.recipe(i) is not None
                                  or self.view_recipe(t) is not None):
                return None
        if arg is _OF_ALL:
            return inputs, fn
        if arg is _OF_INPUT:
            return inputs, lambda vs: fn(vs[0])
        return inputs, lambda vs: fn(arg)  # (a view of a value kept when the view was made)

    def view_recipe(self, t):
        """``(inputs, fn)`` for a view ``t`` (``t._base`` its root) whose value follows from its root's by each view
        step's ``on_host``, while the root holds the value it had when ``t`` was computed (the same version), is small
        (kept, followed, or fetched: one round trip that serves all its views) and each step has a host form; else
        None. A view of a small root keeps no recipe of its own (``views.basic_view``: a loader's windows of a text,
        made every step and never read): this works its value out when it is read."""
        root = t._base
        if root is None or not (small_value(root) or root._id in self._values):
            return None
        fns = self._view_steps(t)
        if fns is None:
            return None

        def fn(vs):
            v = vs[0]
            for f in fns:
                v = f(v)
            return v
        return (root,), fn

    def _view_steps(self, t) -> list | None:
        """The host forms of view ``t``'s steps from its root, while the root holds the value it had when ``t`` was
        computed and the chain is short enough to follow; else None."""
        root = t._base
        if root._version != t._base_version and t._base_version != LIGHT:  # (a light window is the root's as it is
            return None  # now: views.basic_view)
        steps = t._vsteps
        if len(steps) + self._depth(root._id) > MAX_DEPTH:
            return None
        fns = []
        for step in steps:
            f = getattr(step, "on_host", None)
            if f is None:
                return None
            fns.append(f)
        return fns

    def rent(self, t) -> bool:
        """View ``t``'s value, one the client cannot follow from its root's (the root is larger than
        :data:`SMALL_BYTES` and not kept), is about to be read by a round trip: whether to buy the root instead, that
        is fetch it whole (:meth:`put` with ``limit=BUY_BYTES``) so that this view and the later ones follow from it.
        Yes once the reads of its views by round trips, :data:`RENT_BYTES` each, add up to the root's size (at most
        :data:`BUY_BYTES`): the classic rent-or-buy rule, which never spends more than twice what the better choice
        in hindsight would have; a root of 47 MB (MNIST's images) is bought at its 180th read, a 480 KB one (its
        labels) at its second."""
        root = t._base
        n = numel(root._shape) * root.dtype.itemsize
        if n > BUY_BYTES or self._view_steps(t) is None:
            return False
        rents, rid = self._rents, root._id
        count = rents.pop(rid, 0) + 1
        if count * RENT_BYTES >= n:
            return True
        rents[rid] = count
        if len(rents) > MAX_RENTED:
            del rents[next(iter(rents))]
        return False

    def held(self, t) -> np.ndarray | None:
        """Tensor ``t``'s value when the client holds it, or works it out with no round trip from a value it holds
        by the view steps that made ``t`` (kept then); else None (a value the client would have to fetch)."""
        v = self._values.get(t._id)
        if v is not None or t._base is None:
            return v
        r = self.view_recipe(t)
        if r is None:
            return None
        (root,), fn = r
        rv = self._values.get(root._id)
        if rv is None:
            return None
        try:
            v = fn([rv])
        except (IndexError, ValueError):  # (not what the worker would make: its error is the one to report)
            return None
        return v if v.shape == t._shape else None

    def gives(self, t) -> bool:
        """Whether the client can give tensor ``t``'s value, as a rule (:meth:`follows` of its handle, or a view whose
        value follows from its root's: :meth:`view_recipe`)."""
        hid = t._id
        return hid in self._values or hid in self._recipes or \
            (t._base is not None and self.view_recipe(t) is not None)

    def _depth(self, hid: int) -> int:
        r = self._recipes.get(hid)
        return 0 if r is None else r[4]

    def forget(self, hids) -> None:
        """Released handles (any iterable; a set is best: see below)."""
        values, recipes, brought, rents = self._values, self._recipes, self._brought, self._rents
        if brought:
            dead = brought.keys() & hids
            if dead:  # (values brought that died unread: see bring; those of older round trips, kept long, not counted)
                recent = self._rounds - 1
                self._wasted += sum(brought.pop(hid) >= recent for hid in dead)
        # (the handles kept among them, at C speed: a set of handles and a table meet by walking the smaller of the two
        # (a flush's set of a few hundred releases, a table of a few entries), a list of handles by walking the list;
        # a handle given twice goes once)
        if values:
            kept = values.keys() & hids
            if kept:
                self.bytes -= sum(map(_nbytes, map(values.pop, kept)))
        if recipes:
            kept = recipes.keys() & hids
            if kept:
                deque(map(recipes.pop, kept), 0)
        if rents:
            kept = rents.keys() & hids
            if kept:
                deque(map(rents.pop, kept), 0)


_I64 = np.dtype(np.int64)
_nbytes = operator.attrgetter("nbytes")
_WRAP = 1 << 64
_HALF_WRAP = 1 << 63
_MIN64, _MAX64 = -_HALF_WRAP, _HALF_WRAP - 1
#: int64 arithmetic on two 0-d int64 values, in Python ints wrapped to 64 bits as numpy's kernels wrap them (the
#: commonest host op, ``i + 8`` of a slice bound: numpy's dispatch for one element costs several times the sum)
_SCALAR_INT = {"add": operator.add, "sub": operator.sub, "mul": operator.mul}


def rsub(a: int, b: int) -> int:
    """``b - a``: ``other - t`` (``Tensor.__rsub__``) as :func:`known_int_op`'s ``fn(t's value, other)``."""
    return b - a


def known_int_op(t, fn, other: int):
    """``fn(t's value, other)`` for a 0-d int64 tensor ``t`` whose value the client keeps and a Python int ``other``
    in int64's range (``i + 8`` of a slice bound: ``Tensor.__add__`` and its kin call this first), computed here on
    Python ints and wrapped to int64 as torch's (and numpy's) int64 arithmetic wraps; the result is torch's dtype for
    an int64 tensor with a Python int, int64. Its tensor is ``Session.known_int64``'s: ONE lazy 0-d int64 ``full`` of
    the value (the node ``Session.scalar`` makes for a Python int), recorded only if a recorded node reads it, not the
    ``add`` of ``t`` and a scalar operand that the general path records (two nodes, ``t`` pinned). None where this
    is not that case: the value not kept, ``other`` past int64's range (the general path's), in
    ``tw.compile``'s capture (a replay's values are new each time) or autocast, ``t`` a view whose base changed
    since (recomputed by the general path first) or tracked by autograd (an integer tensor never is, as in torch);
    the caller then records the op as any op."""
    s = t._s
    va = s._known.peek(t._id)  # (first: the one test most calls fail)
    if va is None:
        return None
    b = t._base
    if s._capture is not None or _amp_active[0] or t.requires_grad or not _MIN64 <= other <= _MAX64 \
            or (b is not None and (b._version != t._base_version or b.requires_grad)):  # (a stale view: record's)
        return None
    r = fn(va.item(), other)
    return s.known_int64(r if _MIN64 <= r <= _MAX64 else _wrap64(r), t._dev)


#: read-only 0-d int64 arrays by value, shared by the handles that hold that value (a loader's slice bounds, ``i + 8``,
#: take few values, again and again); each is a view of a read-only array, so no holder can make it writeable
_INT64_VALUES: dict[int, np.ndarray] = {}
_MAX_INT64_VALUES = 4096
#: :func:`int64_node`'s, by value
_INT64_NODES: dict[int, tuple] = {}


def int64_value(x: int) -> np.ndarray:
    """``np.array(x, dtype=int64)``, read-only, from :data:`_INT64_VALUES` (made once a value)."""
    v = _INT64_VALUES.get(x)
    if v is None:
        owner = np.array(x, dtype=_I64)
        owner.setflags(write=False)
        v = owner.view()
        if len(_INT64_VALUES) >= _MAX_INT64_VALUES:
            _INT64_VALUES.clear()
        _INT64_VALUES[x] = v
    return v


def int64_node(value: int, device: str) -> tuple:
    """``(lazy node, value)`` of a 0-d int64 tensor of ``value`` on ``device`` whose value the client knows
    (:meth:`Session.known_int64 <tensorwire.session.Session.known_int64>`): the lazy ``full`` node that gives
    ``value`` (``Session._defer``'s entry: the node ``Session.scalar`` makes for a Python int), and the read-only
    array :func:`int64_value`; made once a value and device, and shared by the handles that hold that value (the
    node is read only: recorded as it is, or dropped)."""
    e = _INT64_NODES.get(value)
    if e is None or e[0][3] != device:
        node = ("full", (), {"shape": [], "dtype": "int64", "value": value}, device, (), _FULL_INT64_0D[0], None, None)
        if len(_INT64_NODES) >= _MAX_INT64_VALUES:
            _INT64_NODES.clear()
        e = _INT64_NODES[value] = (node, int64_value(value))
    return e


def _held_elements(t) -> int:
    """How many elements the client holds for tensor ``t``: its root's (a view's own count may be an expansion)."""
    b = t._base
    return numel((t if b is None else b)._shape)


def small_value(t) -> bool:
    """Whether tensor ``t``'s value is at most :data:`SMALL_BYTES` (one the client may keep)."""
    n = t.dtype.itemsize
    for d in t._shape:
        n *= d
    return n <= SMALL_BYTES


def _wrap64(r: int) -> int:
    """A Python int wrapped to int64, as numpy's kernels wrap an int64 result."""
    if not -_HALF_WRAP <= r < _HALF_WRAP:
        r = (r + _HALF_WRAP) % _WRAP - _HALF_WRAP
    return r


def _scalar_int(fn, a: int, b: int) -> np.ndarray:
    """``fn(a, b)`` of two int64 values, wrapped to 64 bits as numpy's kernels wrap it, as the shared read-only 0-d
    array of :func:`int64_value`."""
    return int64_value(_wrap64(fn(a, b)))


_KERNELS: dict | None = None  # the CPU worker's numpy kernels, once :func:`_cpu_kernels` has imported them


def _cpu_kernels() -> dict:
    """The CPU worker's numpy kernels (``backends.cpu.kernels.KERNELS``, the registry itself), imported at the first
    host op (an import statement a call cost ~0.8 us of a held write's ~5)."""
    global _KERNELS
    from tensorwire.backends.cpu.kernels import KERNELS  # lazy: runs backends.cpu's package (~50 ms), for a host op

    _KERNELS = KERNELS
    return KERNELS


def host_op(op: str, values, attrs, shape: tuple, dtype) -> np.ndarray | None:
    """``op`` of numpy ``values`` by the CPU worker's numpy kernel, or None when it raises (the device's error is
    the one to report) or makes another shape."""
    fn = _SCALAR_INT.get(op)
    if fn is not None and not attrs and not shape and dtype.np == _I64 and len(values) == 2:
        a, b = values
        if a.dtype == _I64 and b.dtype == _I64 and not a.shape and not b.shape:
            return _scalar_int(fn, a.item(), b.item())
    kernels = _KERNELS or _cpu_kernels()
    try:
        out = np.asarray(kernels[op](list(values), attrs or {}, shape, dtype), dtype=dtype.np)
    except Exception:  # noqa: BLE001 - an error is the worker's to report
        return None
    return out if out.shape == tuple(shape) else None


__all__ = ["BUY_BYTES", "HELD_OPS", "LIMIT_BYTES", "MADE_BYTES", "RENT_BYTES", "SMALL_BYTES", "SMALL_DATA_NUMBERS",
           "KnownValues"]
