"""Element-by-element writes of Python values, batched: ``x[i] = 3`` (every index a Python int, the value a Python or
numpy scalar) records nothing at once; consecutive such writes to one tensor become ONE ``index_put`` of all their
positions and values (two small uploads), recorded just before anything else is recorded, uploaded or shipped.

A loop that builds a corpus or a lookup table one element at a time (``ids[i] = stoi[ch]``) otherwise records
~5 ops per element (the scalar, its cast, expand, reshape and the ``setslice``), 70,000 ops for a small text.

The tensor takes its new handle at the first write, as any in-place op gives it, but the node that makes that
handle is recorded only when the run of writes ends; nothing can read the handle before then, because every
read goes through recording, an upload or a flush of the session, and each of those ends the run first. A later
write to the same position wins, as it would one at a time. Writes to a view, to a tensor that requires grad,
while ``tw.compile`` records, or of tensors and sequences take the general path (``client/indexing.py``).
"""

from __future__ import annotations

import numbers

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import IndexOutOfRange
from tensorwire.protocol.graph import attrs_key

from . import views as V
from ._frames import _user_frame

#: a run of writes is recorded once it holds this many positions (its two uploads stay small)
MAX_RUN = 1 << 16
#: the complex dtypes (``DType.is_complex``: their writes take the general path), a set: its test costs less than the
#: property
_COMPLEX = frozenset(d for d in D.ALL if d.is_complex)
#: the attrs key of a run's ``index_put`` (:meth:`ElementWrites.record`: its nodes' inference is done there)
_INDEX_PUT_KEY = attrs_key("index_put", {"dim": 0, "accumulate": False})


def _as_int(k) -> int | None:
    if type(k) is int:  # (the common case first: an int is never a bool here)
        return k
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
        return None
    return int(k)


def out_of_bounds(i: int, dim: int, size: int) -> IndexOutOfRange:
    """torch's IndexError for int ``i`` outside dimension ``dim`` of length ``size``."""
    return IndexOutOfRange(f"index {i} is out of bounds for dimension {dim} with size {size}")


def element_position(x, key) -> int | None:
    """The flat (row-major) position that ``key`` names in ``x`` when it names one element by Python ints, else
    None; raises torch's IndexError for an int out of range."""
    shape = x._shape
    if type(key) is int and len(shape) == 1:  # (``x[i]`` of a 1-d tensor or view, the commonest: the loop below's)
        n = shape[0]
        if not -n <= key < n:
            raise out_of_bounds(key, 0, n)
        return key + n if key < 0 else key
    if not isinstance(key, tuple):
        key = (key,)
    if len(key) != len(x._shape) or not key:
        return None
    pos = 0
    for d, (k, n) in enumerate(zip(key, x._shape)):
        i = _as_int(k)
        if i is None:
            return None
        if not -n <= i < n:
            raise out_of_bounds(i, d, n)
        pos = pos * n + (i + n if i < 0 else i)
    return pos


def batchable(x, value) -> bool:
    """Whether ``x[...] = value`` may join a run of element writes."""
    tv = type(value)
    if tv is int or tv is float or tv is bool:  # (the common case: no ABC check)
        pass
    elif isinstance(value, (bool, np.bool_)):
        pass
    elif not isinstance(value, (numbers.Real, np.number)) or isinstance(value, (complex, np.complexfloating)):
        return False
    s = x._s
    return (s._capture is None and x._base is None and not x.requires_grad and x.dtype not in _COMPLEX
            and not s.closed)


class ElementWrites:
    """One run: the tensor, the value it had before the run (a tensor holding that handle), and position ->
    value."""

    def __init__(self, x):
        s = x._s
        self.target = x
        # x takes a new handle now; ``self.before`` keeps the old one (and its value) alive until the run is recorded
        future = x._with_new_handle()
        V.assign(x, future)
        self.before = future  # after the swap it holds x's previous handle
        self.hid = x._id
        self.values: dict[int, object] = {}
        # the old value when the client has it, copied: the run's own, written in place, and the new handle's value
        # once the run is recorded (a read of the tensor while the run is open ends the run first: Session.fetch)
        old = s._known.get(self.before._id)
        self.known = None if old is None else np.array(old)

    def add(self, pos: int, value) -> None:
        self.values[pos] = value
        self.target._version += 1
        if self.known is not None:
            self.known.reshape(-1)[pos] = value

    def record(self, where=None) -> None:
        """Record the run: ``index_put`` of every position's last value into the flattened old value, reshaped.
        ``where``: the user's line that ended the run, when the caller has it (``Session.record``'s)."""
        x, s = self.target, self.target._s
        dt = x.dtype
        if self.known is not None:
            s._known.put(self.hid, self.known)
        if self.known is not None and s.holds(self.before):  # (written into a value the client holds: so is the
            made = s._hold(self.hid, s._known.peek(self.hid), x._shape, dt, x._dev)  # result, nothing recorded)
            made._s = None  # (as below: x holds this handle)
            self.before = None
            return
        n = x.numel()
        pos = np.fromiter(self.values.keys(), np.int64, len(self.values))
        vals = np.array(list(self.values.values()), dtype=np.float64 if dt.is_floating_point else object).astype(dt.np)
        # (each node's attrs key and output meta given: a reshape to (n,), the index_put of that shape, the reshape
        # back to x's shape, whose handle the run took at its first write; all five name the user's line that ended
        # the run, found once: this runs below the session's record, end_writes and the client's calls above them;
        # the values and positions are kept by the client (known_values) only where it computes x's value)
        if where is None:
            where = _user_frame()
        flat_meta = ((n,), dt)
        keep = self.known is not None
        flat = s.record("reshape", [self.before], {"shape": [n]}, x._dev, (V.reshape_key((n,)), flat_meta), where)
        out = s.record("index_put", [flat, s.const(vals, x._dev, dt, where=where, keep=keep),
                                     s.const(pos, x._dev, where=where, keep=keep)],
                       {"dim": 0, "accumulate": False}, x._dev, (_INDEX_PUT_KEY, flat_meta), where)
        made = s.record("reshape", [out], {"shape": list(x._shape)}, x._dev, (V.reshape_key(x._shape), (x._shape, dt)),
                        where, hid=self.hid)
        made._s = None  # x holds this handle: the record's own tensor must not release it when it dies
        self.before = None


def write(x, key, value) -> bool:
    """``x[key] = value`` as part of a run of element writes, when it can be one (see the module doc)."""
    if x._base is not None or not batchable(x, value):  # (a view: never, checked first as it is cheap)
        return False
    pos = element_position(x, key)
    if pos is None:
        return False
    write_at(x, pos, value)
    return True


def write_at(x, pos: int, value) -> None:
    """``x``'s element at flat (row-major) position ``pos`` set to ``value``, in a run of element writes; ``x`` and
    ``value`` as :func:`write` takes them (``x`` not a view, :func:`batchable`)."""
    s = x._s
    run = s._writes
    if run is None or run.target is not x or x._id != run.hid:
        s.end_writes()
        run = s._writes = ElementWrites(x)
    run.add(pos, value.item() if isinstance(value, np.generic) else value)
    if len(run.values) >= MAX_RUN:
        s.end_writes()
