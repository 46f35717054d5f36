"""``x[key]`` and ``x[key] = value`` with PyTorch's (numpy's) semantics.

Basic indexing (ints, slices with positive steps, ``None``, ``...``) makes a view: one strided
``slice`` plus a ``reshape``. Advanced indexing (integer tensors, lists, bool masks) records one
``index`` op over consecutive dims (transposing first when the indexed dims are not adjacent, as
numpy places the result dims first then). A bool mask needs a sync: its result's shape depends on
the data, so it becomes integer indices on the client.
"""

from __future__ import annotations

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import IndexOutOfRange

from . import _factories
from . import autocast_state as _amp
from . import views as V
from .element_writes import batchable, element_position, out_of_bounds, write, write_at
from .known_values import host_op

_amp_active = _amp._active

#: the client's ``Tensor`` class: :mod:`tensorwire.tensor` imports this module and installs the class here once it
#: exists (:func:`install`), so this module never imports ``tensor`` (no import circle)
Tensor: type | None = None


def install(tensor_class: type) -> None:
    """Called once by :mod:`tensorwire.tensor` after ``Tensor`` is defined."""
    global Tensor
    Tensor = tensor_class
    V.Tensor = tensor_class  # (the light windows basic_view makes)


def _is_tensorlike(k) -> bool:
    return isinstance(k, (Tensor, list, np.ndarray)) and not isinstance(k, (str, bytes))


def _expand_key(x, key):
    if not isinstance(key, tuple):
        key = (key,)
    # bool masks become integer index tensors (sync), one per masked dim
    out = []
    d = 0  # (the dim of x the next key indexes, while it is known: up to an ellipsis)
    for k in key:
        if isinstance(k, Tensor) and k.dtype is D.bool_:
            if k.ndim == 0:
                out.append(_Bool0(bool(k.item())))
            else:
                _check_mask(x, k._shape, d)
                out.extend(_as_index(x, i) for i in np.nonzero(k._numpy()))
        elif isinstance(k, (bool, np.bool_)):
            out.append(_Bool0(bool(k)))
        elif isinstance(k, range):  # torch indexes with a range as with the list of its ints (a copy, not a view)
            out.append(list(k))
        elif isinstance(k, (np.ndarray, list)) and len(k) and np.asarray(k).dtype == np.bool_:
            _check_mask(x, np.shape(k), d)
            out.extend(_as_index(x, i) for i in np.nonzero(np.asarray(k)))
        else:
            out.append(k)
        if d is not None:
            n = _dims_indexed(k)
            d = None if n is None else d + n
    key = tuple(out)
    n_ell = sum(1 for k in key if k is Ellipsis)
    if n_ell > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    consumed = sum(1 for k in key if k is not None and k is not Ellipsis and not isinstance(k, _Bool0))
    if consumed > x.ndim:
        if not x.ndim and len(key) == 1 and isinstance(key[0], int):  # (torch's word for ``loss[0]`` of a 0-d loss)
            raise IndexOutOfRange("invalid index of a 0-dim tensor. Use `tensor.item()` in Python or "
                                  "`tensor.item<T>()` in C++ to convert a 0-dim tensor to a number")
        raise IndexOutOfRange(f"too many indices for tensor of dimension {x.ndim}")
    if n_ell:
        i = next(j for j, k in enumerate(key) if k is Ellipsis)  # not .index: == on a tensor records an op
        key = key[:i] + (slice(None),) * (x.ndim - consumed) + key[i + 1:]
    else:
        key = key + (slice(None),) * (x.ndim - consumed)
    return key


def _dims_indexed(k) -> int | None:
    """How many dims of the indexed tensor key element ``k`` takes (None: an ellipsis, after which
    :func:`_expand_key` no longer follows the position)."""
    if k is Ellipsis:
        return None
    if k is None or isinstance(k, (bool, np.bool_)):
        return 0
    if isinstance(k, Tensor):
        return k.ndim if k.dtype is D.bool_ else 1
    if isinstance(k, (np.ndarray, list)) and len(k) and np.asarray(k).dtype == np.bool_:
        return np.ndim(k)
    return 1


def _check_mask(x, shape: tuple, d: int | None) -> None:
    """torch's IndexError for a bool mask of ``shape`` indexing ``x`` from dim ``d`` (None: after an ellipsis, not
    known here) whose dims are not those of ``x`` there."""
    if d is None:
        return
    for i, n in enumerate(shape):
        if d + i >= x.ndim or x._shape[d + i] != n:
            raise IndexError(f"The shape of the mask {list(shape)} at index {i} does not match the shape of the "
                             f"indexed tensor {list(x._shape)} at index {d + i}")


class _Bool0:
    """A 0-d bool index: adds a dim of size 1 (True) or 0 (False)."""

    def __init__(self, v: bool):
        if not v:
            raise NotImplementedError("indexing with a false 0-d mask (an empty dim) is not supported")
        self.v = v


def _as_index(x, arr):
    return _factories.from_data(x._s, np.asarray(arr, dtype=np.int64), None, x._dev)


def _basic_parts(x, key):
    """For a key without advanced parts: starts/stops/steps and the output shape."""
    starts, stops, steps, out = [], [], [], []
    d = 0
    for k in key:
        if k is None:
            out.append(1)
            continue
        if isinstance(k, _Bool0):
            out.append(1 if k.v else 0)
            continue
        n = x._shape[d]
        if type(k) is slice and k.start is None and k.stop is None and k.step is None:  # ``:``, the commonest
            starts.append(0)
            stops.append(n)
            steps.append(1)
            out.append(n)
        elif isinstance(k, slice):
            if k.step is not None and int(k.step) <= 0:
                raise ValueError("step must be greater than zero")
            a, b, st = slice(_int(k.start), _int(k.stop), _int(k.step)).indices(n)
            b = max(a, b)
            starts.append(a)
            stops.append(b)
            steps.append(st)
            out.append(max(0, (b - a + st - 1) // st))
        else:
            i = _int(k)
            if not -n <= i < n:
                raise out_of_bounds(i, d, n)
            i %= n
            starts.append(i)
            stops.append(i + 1)
            steps.append(1)
        d += 1
    return starts, stops, steps, tuple(out)


def _int(v):
    if v is None:
        return None
    if isinstance(v, Tensor):
        if not v._shape and v.dtype.category == 1:  # (a 0-d integer bound the client has, ``data[i:i + 8]``:
            s, b = v._s, v._base  # read here, as ``item`` would)
            if s._capture is None and (b is None or b._version == v._base_version):
                a = s._known.peek(v._id)  # (not counted as a read: a bound's read is the dict's get alone)
                if a is not None:
                    return a.item()  # (a 0-d integer array: its Python int)
        return int(v.item())
    if isinstance(v, (int, np.integer)):
        return int(v)
    raise TypeError(f"indices must be integers, slices, None, Ellipsis, or integer/bool tensors, got "
                    f"{type(v).__name__}")


_ALL = slice(None)


def getitem(x, key):
    tk = type(key)
    shape = x._shape
    if shape and (tk is int or tk is slice and key.step is None):  # ``x[i]``, ``x[a:b]``: the commonest keys
        n = shape[0]
        if tk is slice:  # (rows a:b, a step shared by their views: views.row_view)
            a, b = key.start, key.stop
            if type(a) is not int:
                a = 0 if a is None else _int(a)
            if type(b) is not int:
                b = n if b is None else _int(b)
            if not 0 <= a <= b <= n:  # (``slice.indices``' clamping, for the bounds that need it)
                a, b, _ = slice(a, b).indices(n)
                if b < a:
                    b = a
            return V.row_view(x, a, b)
        if not -n <= key < n:
            raise out_of_bounds(key, 0, n)
        return V.index_view(x, key if key >= 0 else key + n)
    if tk is tuple:  # ``x[:, :1]``, ``x[..., 0]``, ``x[i, j]``: a key of ints, slices, None and ``...`` is read here
        parts = _basic_tuple(shape, key)
        if parts is not None:
            return V.basic_view(x, *parts)
        key = _expand_key(x, key)
        if any(_is_tensorlike(k) for k in key):
            return _advanced(x, key)
    elif (tk is int or tk is slice) and shape:  # (a slice with a step)
        key = (key,) + (_ALL,) * (len(shape) - 1)
    else:
        key = _expand_key(x, key)
        if any(_is_tensorlike(k) for k in key):
            return _advanced(x, key)
    starts, stops, steps, out = _basic_parts(x, key)
    return V.basic_view(x, starts, stops, steps, out)


def _whole_dims(shape: tuple, d: int, end: int, starts: list, stops: list, steps: list, out: list) -> int:
    """Append dims ``d`` to ``end`` of ``shape``, taken whole, to a basic key's slice; returns ``end``."""
    for n in shape[d:end]:
        starts.append(0)
        stops.append(n)
        steps.append(1)
        out.append(n)
    return end


def _basic_tuple(shape: tuple, key: tuple):
    """``_basic_parts(x, _expand_key(x, key))`` plus the strided slice's shape (``basic_view``'s ``lens``, given for
    unit steps only), for ``x`` of shape ``shape`` and a key of ``int`` and ``slice`` (of ``int`` or None bounds and
    step) entries, ``None`` and at most one ``...``, read in one pass. None for any other key, and for a key those
    two functions would reject (an index out of range, too many indices, a step not above zero): they then read it,
    and raise their errors."""
    nd = len(shape)
    consumed = 0
    ell = False
    for k in key:
        tk = type(k)
        if tk is int or tk is slice:
            consumed += 1
        elif k is Ellipsis:
            if ell:
                return None
            ell = True
        elif k is not None:
            return None
    if consumed > nd:
        return None
    starts, stops, steps, out = [], [], [], []
    unit = True
    d = 0
    for k in key:
        tk = type(k)
        if tk is slice:
            n = shape[d]
            a, b, st = k.start, k.stop, k.step
            if a is None and b is None and st is None:  # ``:``
                starts.append(0)
                stops.append(n)
                steps.append(1)
                out.append(n)
            else:
                if (a is not None and type(a) is not int) or (b is not None and type(b) is not int) \
                        or (st is not None and (type(st) is not int or st <= 0)):
                    return None
                a, b, st = k.indices(n)
                if b < a:
                    b = a
                starts.append(a)
                stops.append(b)
                steps.append(st)
                if st != 1:
                    unit = False
                    out.append((b - a + st - 1) // st)
                else:
                    out.append(b - a)
            d += 1
        elif tk is int:
            n = shape[d]
            if not -n <= k < n:
                return None
            k %= n
            starts.append(k)
            stops.append(k + 1)
            steps.append(1)
            d += 1
        elif k is None:
            out.append(1)
        else:  # ``...``: the dims no other entry takes, whole
            d = _whole_dims(shape, d, d + nd - consumed, starts, stops, steps, out)
    _whole_dims(shape, d, nd, starts, stops, steps, out)  # (and the dims after the key's, whole)
    lens = tuple([b - a for a, b in zip(starts, stops)]) if unit else None
    return starts, stops, steps, tuple(out), lens


def iter_known(x):
    """``iter(x)`` for a tensor whose value the client has (``known_values``): :func:`_iter_known`'s elements. Those
    of a 1-d int64 ``x`` outside autograd, autocast and capture, up to date with its root (a loader's ``for i in ix``)
    are made at once, as torch's ``iter`` (``unbind``) makes its views (:func:`_int64_elements`)."""
    s = x._s
    b = x._base
    if x.dtype is D.int64 and len(x._shape) == 1 and s._capture is None and not _amp_active[0] \
            and not x.requires_grad and (b is None or b._version == x._base_version and not b.requires_grad):
        arr = s._known.peek(x._id)
        if arr is not None:
            return iter(_int64_elements(x, arr.tolist()))
    return _iter_known(x)


def _int64_elements(x, ints: list) -> list:
    """The elements of a 1-d int64 ``x`` whose value is ``ints`` (:func:`iter_known`'s case): each the view ``x[i]``
    (``x``'s root base, the chain of view steps: it sees ``x``'s later updates, recomputed from its root when read
    then, and writes through it reach ``x``) whose lazy node is the 0-d ``full`` of its value
    (``Session.known_int64``: no input pinned, recorded only if a recorded node reads it), its step shared
    (:func:`_element_steps`)."""
    make, dev = x._s.known_int64, x._dev
    root = x._base
    if root is None:
        root, chain, version = x, (), x._version
    else:
        chain, version = x._vsteps, root._version
    out = []
    for v, one in zip(ints, _element_steps(len(ints))):
        t = make(v, dev)
        t._base = root
        t._vsteps = chain + one if chain else one
        t._base_version = version
        out.append(t)
    return out


def _iter_known(x):
    """``iter(x)`` for a tensor whose value the client has (``known_values``): each element is the view ``x[i]`` as
    always (``x``'s root base, the chain of view steps: it sees ``x``'s later updates and writes through it reach
    ``x``), and its value is known at once (the element of ``x``'s value, while ``x`` still holds that value), so
    reading it (``__index__`` of a slice bound) is a look-up, not a recipe followed. Each element's lazy node is made
    directly (``Session.defer``): for a 1-d int64 ``x`` (a loader's ``for i in ix``) the 0-d ``full`` of its value
    (``Session.known_int64``: no input pinned; recorded only if a recorded node reads the element, and then it
    gives that value), else ``x[i]``'s slice and reshape, with the attrs key and meta every element shares worked out
    once. An element made when that is not so (``x`` changed in place to a value the client does not have, autograd,
    autocast, capture) is ``x[i]``'s general path."""
    s = x._s
    known = s._known
    shape = x._shape
    dt, dev = x.dtype, x._dev
    rest, nd, out = list(shape[1:]), len(shape), shape[1:]
    zeros = [0] * (nd - 1)
    lens = (1, *out)
    key_meta = V.slice_known(lens, (1,) * nd, dt)
    then = ("reshape", {"shape": rest}, (V.reshape_key(out), (out, dt)))
    one_d_int64 = nd == 1 and dt is D.int64
    # (a 1-d int64 x's elements: each x[i]'s step made once for every x of that length, see _element_steps)
    steps1 = _element_steps(shape[0]) if one_d_int64 else None
    Slice = V.Slice
    hid, arr, ints = None, None, None
    for i in range(shape[0]):
        b = x._base
        if b is not None and b._version != x._base_version:  # (a view whose base changed: recomputed first)
            x._refresh()
        if x._id != hid:  # (changed in place since the last element: its value now, if the client has it)
            hid = x._id
            arr = known.peek(hid)
            ints = arr.tolist() if arr is not None and one_d_int64 else None
        if steps1 is not None:
            one = steps1[i]
            step = one[0]
        elif nd == 1:
            step = Slice([i], [i + 1], [1], out, shape)  # (x[i])
        else:
            step = Slice([i, *zeros], [i + 1, *rest], [1] * nd, out, shape)
        if arr is None or s._capture is not None or _amp_active[0] or x.requires_grad or x._shape != shape \
                or (b is not None and b.requires_grad):
            yield x._view(step)
            continue
        if ints is not None:  # (mark_view's, for a step of its own kept: x[i] of a 1-d x is a 0-d, of no parts)
            t = s.known_int64(ints[i], dev)
            if b is None:
                t._base = x
                t._vsteps = one
                t._base_version = x._version
            else:
                t._base = b
                t._vsteps = (x._vsteps or ()) + (step,)
                t._base_version = b._version
            yield t
            continue
        step._known = key_meta
        t = s.defer("slice", (x,), {"starts": step.starts, "stops": step.stops, "steps": step.steps}, dev, key_meta,
                    then, arr[i, ...])
        V.mark_view(t, x, step)
        yield t


#: :func:`_element_steps`'s, by length (emptied when it holds :data:`_MAX_ELEMENT_STEPS` lengths: a known value has
#: at most a few thousand elements, so this keeps at most a few hundred thousand small steps)
_ELEMENT_STEPS: dict[int, tuple] = {}
_MAX_ELEMENT_STEPS = 64


def _element_steps(n: int) -> tuple:
    """Per ``i < n``, ``(step,)``: the view step of ``x[i]`` for a 1-d int64 ``x`` of ``n`` elements (its slice of
    ``[i:i + 1]`` and reshape to 0-d), with its attrs key and meta (``Slice._known``), as a view's chain of one step.
    Made once a length and shared by the elements of every such ``x`` (a loader iterates a new ``ix`` of the same
    length each batch): a step is never changed once made, and the chain of a 0-d view is never one whose rows are
    read (``Slice.rows`` of this step is None), so sharing it changes nothing a step's identity keys."""
    steps = _ELEMENT_STEPS.get(n)
    if steps is None:
        key_meta = V.slice_known((1,), (1,), D.int64)
        made = []
        for i in range(n):
            st = V.Slice([i], [i + 1], [1], (), (n,))
            st._known = key_meta
            made.append((st,))
        if len(_ELEMENT_STEPS) >= _MAX_ELEMENT_STEPS:
            _ELEMENT_STEPS.clear()
        steps = _ELEMENT_STEPS[n] = tuple(made)
    return steps


def _split_key(x, key):
    """Separate a key into its basic part (applied first, as a view) and its advanced indices.

    torch's rule: integers select their dim first (a 0-d integer tensor too, when other advanced
    indices are present; alone it indexes like an int anyway), ``None`` adds a size-1 dim, slices
    stay. Returns ``pre`` (a basic key) and ``adv``: ``[(dim of the basic view's result, index tensor)]``.
    """
    def zero_d(k):
        return isinstance(k, Tensor) and k.ndim == 0

    multi = any(_is_tensorlike(k) and not zero_d(k) for k in key)
    pre, adv = [], []
    d = 0  # dim of the basic view's result the next key entry lands on
    for k in key:
        if k is None or isinstance(k, _Bool0):
            pre.append(None)
            d += 1
        elif isinstance(k, slice):
            pre.append(k)
            d += 1
        elif _is_tensorlike(k) and not (multi and zero_d(k)):
            pre.append(slice(None))
            idx = k if isinstance(k, Tensor) else _as_index(x, np.asarray(k))
            if idx.dtype.is_floating_point or idx.dtype is D.bool_:
                raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
            if idx._dev != x._dev:
                idx = idx.to(x._dev)
            adv.append((d, idx))
            d += 1
        else:
            if zero_d(k) and (k.dtype.is_floating_point or k.dtype is D.bool_):
                raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
            pre.append(_int(k))
    return pre, adv


def _trivial(pre) -> bool:
    return all(p == slice(None) for p in pre)


def _index_layout(t, adv):
    dims = [a for a, _ in adv]
    if dims == list(range(dims[0], dims[0] + len(dims))):
        return t, dims[0], None
    order = dims + [i for i in range(t.ndim) if i not in dims]
    return t.permute(*order), 0, order


def _advanced(x, key):
    pre, adv = _split_key(x, key)
    t = x if _trivial(pre) else getitem(x, tuple(pre))
    t, start, _ = _index_layout(t, adv)
    return t._rec("index", [t, *[i for _, i in adv]], {"dim": start})


def setitem(x, key, value):
    """``x[key] = value`` (``Tensor.__setitem__`` itself)."""
    if isinstance(key, Tensor) and key.dtype is D.bool_ and _mask_fill(x, key, value):
        return
    if type(key) is tuple and _masked_part_fill(x, key, value):
        return
    if x._base is None:
        if _held_write(x, key, value):  # (a row the client holds, written with a value it holds: on the client)
            return
        if write(x, key, value):  # one element, a Python value: batched with the writes next to it
            return
    elif _view_element_write(x, key, value):  # (one element of a view: as one of its root's)
        return
    key = _expand_key(x, key)
    if isinstance(value, Tensor) and value._shape and value._shape[0] == 1:
        value = _without_leading_ones(value)
    if not any(_is_tensorlike(k) for k in key):
        starts, stops, steps, out = _basic_parts(x, key)
        shape = [max(0, (b - a + s - 1) // s) for a, b, s in zip(starts, stops, steps)]
        v = value if isinstance(value, Tensor) else x._s.scalar(
            value.item() if isinstance(value, np.generic) else value, x.dtype, x._dev) \
            if np.ndim(value) == 0 else x.new_tensor(value)
        if v._dev != x._dev:
            v = v.to(x._dev)
        v = v.to(x.dtype)
        v = v.expand(*out) if tuple(v.shape) != out else v
        v = v.reshape(shape)
        new = x._rec("setslice", [x, v], {"starts": starts, "stops": stops, "steps": steps})
    else:
        pre, adv = _split_key(x, key)
        if not _trivial(pre):  # write through the basic view; it writes back into x
            sub = getitem(x, tuple(pre))
            setitem(sub, _sub_key(sub.ndim, adv), value)
            return
        if not isinstance(value, Tensor):
            value = x._s.scalar(value.item() if isinstance(value, np.generic) else value, x.dtype, x._dev) \
                if np.ndim(value) == 0 else x.new_tensor(value)
        t, start, order = _index_layout(x, adv)
        v = value.to(x._dev).to(x.dtype)
        new = t._rec("index_put", [t, v, *[i for _, i in adv]], {"dim": start, "accumulate": False})
        if order is not None:
            inv = [0] * len(order)
            for i, o in enumerate(order):
                inv[o] = i
            new = new.permute(*inv)
    x._assign(new)


def _without_leading_ones(value):
    """``value`` without its leading dims of size 1, as torch's ``x[key] = value`` takes it (``slicePrefix1sSize``):
    a ``[1, 1, 4]`` value writes a ``[4]`` row, or any ``[n, 4]`` rows by broadcasting."""
    shape = value._shape
    n = 0
    while n < len(shape) and shape[n] == 1:
        n += 1
    return value.reshape(shape[n:])


def _mask_fill(x, mask, value) -> bool:
    """``x[mask] = value`` for a bool tensor ``mask`` over ``x``'s leading dims and a scalar ``value`` (a Python
    number or a 0-d tensor on ``x``'s device): torch's masked fill, ``x.masked_fill_``, a ``where`` on the device with
    nothing read back. The general path reads the mask to find its positions, a round trip: once a generated token in
    minGPT's and nanoGPT's top-k sampling, ``logits[logits < v[:, [-1]]] = -float('Inf')``. False for anything else."""
    n = mask.ndim
    if not n or n > x.ndim or mask._shape != x._shape[:n] or mask._s is not x._s or mask._dev != x._dev:
        return False
    if isinstance(value, Tensor):
        if value._shape or value._s is not x._s or value._dev != x._dev:
            return False
    elif type(value) not in (int, float, bool):  # (numpy scalars: the general path's rules)
        return False
    if n < x.ndim:  # (a mask over the leading dims selects whole rows: broadcast over the rest)
        mask = mask.reshape(mask._shape + (1,) * (x.ndim - n))
    x.masked_fill_(mask, value)
    return True


def _masked_part_fill(x, key: tuple, value) -> bool:
    """``x[key] = value`` for a key of ints, full slices, 0-d integer tensors and one bool mask of 1 dim or more (no
    ``None``, ``...`` or other advanced index), and a scalar ``value``: the part the key's other entries select, read
    with ``:`` in the mask's place, then written back as ``where(mask, value, part)``. What it selects has the dims of
    the slices and the mask in the key's order (0-d indices add none), so the mask broadcasts in place; nothing is
    read back, where the general path reads the mask for its positions, a round trip: PyTorch-YOLOv3's
    ``noobj_mask[b[i], anchor_ious > 0.5, gj[i], gi[i]] = 0``, once a target of every step. False for anything else."""
    if isinstance(value, Tensor):
        if value._shape or value._s is not x._s or value._dev != x._dev:
            return False
    elif type(value) not in (int, float, bool):
        return False
    mask_at = None
    dims = []  # (per entry: how many of x's dims it indexes, and how many the part keeps)
    for i, k in enumerate(key):
        if isinstance(k, Tensor):
            if k._s is not x._s or k._dev != x._dev:
                return False
            if k.dtype is D.bool_ and k.ndim:
                if mask_at is not None:
                    return False
                mask_at = i
                dims.append((k.ndim, k.ndim))
            elif not k._shape and k.dtype is not D.bool_ and not k.dtype.is_inexact:  # (an integer index)
                dims.append((1, 0))
            else:
                return False
        elif type(k) is int:
            dims.append((1, 0))
        elif type(k) is slice and k == slice(None):
            dims.append((1, 1))
        else:
            return False
    if mask_at is None or sum(d for d, _ in dims) > x.ndim:
        return False
    mask = key[mask_at]
    first = sum(d for d, _ in dims[:mask_at])
    if mask._shape != x._shape[first:first + mask.ndim]:
        return False  # (the general path's error)
    part_key = key[:mask_at] + (slice(None),) * mask.ndim + key[mask_at + 1:]
    part = getitem(x, part_key)
    before = sum(kept for _, kept in dims[:mask_at])
    after = part.ndim - before - mask.ndim
    where_mask = mask.reshape((1,) * before + mask._shape + (1,) * after)
    setitem(x, part_key, part.masked_fill(where_mask, value))
    return True


def _held_write(x, key, value) -> bool:
    """``x[key] = value`` worked out on the client, when it holds ``x``'s value (``Session.holds``: a ``zeros`` row a
    dataset fills) and ``value``'s (a Python scalar, or a tensor it holds) and ``key`` is basic (ints, slices,
    ``None``, ``...``): by the CPU worker's own kernels, as the general path's ``cast``, ``expand`` and ``setslice``
    would make it on a device. ``x`` then holds the result, a lazy upload (``Session.hold``): sent only if a device
    reads it. False where this is not that case (the general path then records the write, and reports any error)."""
    s = x._s
    xv = s._known.peek(x._id)
    if xv is None or s._capture is not None or x.dtype.is_complex or not s.holds(x):
        return False
    parts = key if isinstance(key, tuple) else (key,)
    for k in parts:
        if isinstance(k, (Tensor, list, np.ndarray, range, bool, np.bool_)):
            return False
    tv = type(value)
    if tv is int or tv is float or tv is bool:
        vv = host_op("full", [], {"value": value}, (), x.dtype)
    elif isinstance(value, Tensor):
        if value._s is not s or value._dev != x._dev or value.dtype.is_complex or not s.holds(value):
            return False
        vv = s._known.held(value)
        if vv is not None and value.dtype is not x.dtype:
            vv = host_op("cast", [vv], {}, tuple(vv.shape), x.dtype)
    else:
        return False
    if vv is None:
        return False
    tk = type(key)
    if (tk is int or (tk is slice and (key.step is None or (type(key.step) is int and key.step > 0)))) and xv.ndim:
        # one int or slice along dim 0 (a dataset's ``x[1:n] = ids``, ``y[n:] = -1``): numpy's basic indexing is
        # torch's here, and what it refuses (an index out of range, a value of another shape) the general path reports
        index = key
    else:
        starts, stops, steps, out = _basic_parts(x, _expand_key(x, key))
        lens = [max(0, (b - a + st - 1) // st) for a, b, st in zip(starts, stops, steps)]
        if vv.ndim:
            try:
                v = vv if vv.shape == out else np.broadcast_to(vv, out)
            except ValueError:  # (not broadcastable: the general path's inference says so)
                return False
            vv = v.reshape(lens)
        index = tuple(map(slice, starts, stops, steps))  # (a 0-d value: broadcast to any shape, as by expand)
    new = np.array(xv)
    try:
        new[index] = vv
    except (IndexError, ValueError, TypeError):  # (a lone key numpy refuses; the slices above always fit)
        return False
    x._assign(s.hold(new, x.dtype, x._dev))
    return True


def _view_element_write(x, key, value) -> bool:
    """``x[key] = value`` for one element of a view made of basic slices and reshapes (``t[i][0][j] = 1``), written as
    that element of the root base, so it joins the base's run of element writes (``client/element_writes.py``);
    False when it cannot (the general path then records it back through the view's steps)."""
    root = x._base
    if x.requires_grad or not batchable(root, value):  # (a view that requires grad: autograd's checks, general path)
        return False
    pos = element_position(x, key)  # (an int out of range raises here, in the view's dims, as the general path)
    if pos is None:
        return False
    pos = V.root_position(x, pos)
    if pos is None:
        return False
    write_at(root, pos, value)
    return True


def _sub_key(ndim, adv):
    key = [slice(None)] * ndim
    for d, idx in adv:
        key[d] = idx
    return tuple(key)
