"""torch's joining and selecting functions, ``tw.cat``, ``tw.stack``, ``tw.where`` (and ``hstack``, ``vstack``),
with the ``out=`` writer :func:`write_out`: the few module-level functions that Tensor's own methods build on.

They sit below :mod:`tensorwire.tensor` (which imports them for its own methods) and :mod:`tensorwire.functions`
(which gives them as ``tw.<name>``): this module imports neither ``tensor`` nor ``creation`` (a tensor is a
``_factories.TensorBase``; :func:`arange_like` records through the tensor's session), so it is always whole when
``tensor`` and the modules that add Tensor's methods (client/_install.py) import it.
"""

from __future__ import annotations

import warnings

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import ShapeError
from tensorwire.protocol.graph import MAX_INPUTS, attrs_key, chunks
from tensorwire.protocol.shapes import norm_dim, numel

from . import autocast_state as _amp
from . import autograd_hooks as _hooks
from . import views as V
from ._aliases import alias, rebind
from ._factories import TensorBase as Tensor
from ._factories import arange_attrs
from .known_values import LIGHT
from .zero_grads import zero_grad_from

_amp_active = _amp._active
_INDEX_DIM0_KEY = attrs_key("index", {"dim": 0})


def _first_tensor(*xs) -> Tensor | None:
    for x in xs:
        if isinstance(x, Tensor):
            return x
    return None


def write_out(out, result):
    """torch's ``out=``: ``result`` written into ``out`` in place (cast to its dtype, refusing a narrower dtype
    category as torch does), or ``out`` resized to ``result``'s shape when it differs; returns ``out``. Tuple
    results (``max(dim=...)``) take a tuple of outs."""
    if out is None:
        return result
    if isinstance(result, tuple):
        if not isinstance(out, (tuple, list)) or len(out) != len(result):
            raise TypeError(f"out= must be a tuple of {len(result)} tensors here")
        for o, r in zip(out, result):
            write_out(o, r)
        return type(result)(*out) if hasattr(result, "_fields") else tuple(out)
    if not isinstance(out, Tensor):
        raise TypeError(f"out= must be a Tensor, not {type(out).__name__}")
    if out._shape == result._shape:
        return out._assign(result)
    D.check_cast(result.dtype, out.dtype)
    if numel(out._shape):  # (torch's warning: an out of no elements is resized silently)
        warnings.warn(f"An output with one or more elements was resized since it had shape {list(out._shape)}, which "
                      f"does not match the required output shape {list(result._shape)}. This behavior is deprecated, "
                      "and in a future PyTorch release outputs will not be resized unless they have zero elements. "
                      "You can explicitly reuse an out tensor t by resizing it, inplace, to zero elements with "
                      "t.resize_(0).", UserWarning, stacklevel=3)
    return rebind(out, alias(result.to(out.dtype)))


def _row_ranges(tensors: list):
    """``(root, starts, length)`` when every tensor is a view of one root base that takes rows ``start:start +
    length`` of it (one ``length`` for all, above 0), through a chain of unit-step slices that take every other dim
    whole (``data[i:i + 8]``, also of a slice ``data[:n]``: ``views.Slice.rows``), up to date with the root or a
    light window (``views.basic_view``: read as the root is now), and nothing is tracked by autograd, autocast or
    ``tw.compile``'s capture; else None. One pass: the windows of one parent share the steps before their last, whose
    row offset is worked out once (:func:`_chain_offset`)."""
    root = tensors[0]._base
    if root is None or root.requires_grad or root._s._capture is not None or _amp_active[0]:
        return None
    version = root._version
    shape = root._shape
    length = tensors[0]._shape[0] if tensors[0]._shape else 0
    if length <= 0:
        return None
    starts = []
    prefix = off = None  # the steps before the last of the tensor before, and their row offset
    for t in tensors:
        if t._base is not root or t.requires_grad:
            return None
        steps = t._vsteps
        last = steps[-1]
        if type(last) is not V.Slice:
            return None
        if t._base_version == LIGHT:  # (its last step takes rows of its parent, by construction)
            if last.out_shape[0] != length:
                return None
            a = last.starts[0]
        else:
            if t._base_version != version:
                return None
            r = last.rows()
            if r is None or r[1] - r[0] != length:
                return None
            a = r[0]
        if len(steps) == 1:
            if last.in_shape != shape:  # (the chain starts at the root's shape)
                return None
            starts.append(a)
            continue
        head = steps[:-1]
        if head != prefix:  # (a tuple of the same step objects compares by identity first: one parent's windows)
            off = _chain_offset(head, shape)
            if off is None:
                return None
            prefix = head
        starts.append(a + off)
    return root, starts, length


def _chain_offset(steps: tuple, shape: tuple) -> int | None:
    """The row of a root of ``shape`` that row 0 of the view through ``steps`` is: the sum of their row starts,
    when each takes rows of its input (``views.Slice.rows``) and the first takes them of the root's shape; else
    None."""
    first = steps[0]
    if type(first) is not V.Slice or first.in_shape != shape:
        return None
    off = 0
    for st in steps:
        r = st.rows() if type(st) is V.Slice else None
        if r is None:
            return None
        off += r[0]
    return off


#: :func:`_arange_row`'s rows, by length (read-only)
_ARANGE_ROWS: dict[int, np.ndarray] = {}


def _arange_row(length: int) -> np.ndarray:
    """``arange(length)`` as a read-only ``(1, length)`` int64 array, made once per length."""
    row = _ARANGE_ROWS.get(length)
    if row is None:
        if len(_ARANGE_ROWS) >= 256:  # (a bounded memo: programs take few window lengths)
            _ARANGE_ROWS.clear()
        row = _ARANGE_ROWS[length] = np.arange(length, dtype=np.int64).reshape(1, length)
        row.flags.writeable = False
    return row


def _gather_rows(root, starts: list, length: int, stacked: bool) -> Tensor:
    """Rows ``start:start + length`` of ``root`` for each of ``starts``, one after the other (``stacked``: each range
    its own entry of a new dim 0): ONE ``index`` of ``root`` by the positions (an upload), what ``cat`` (``stack``)
    of those row views gives, where it would record each view's slice (a batch loader's 32 windows of a text)."""
    # (a column of the starts plus a row of 0..length-1, broadcast: fewer instructions than ``np.add.outer`` of a
    # converted list; the row kept per length, never written)
    pos = np.fromiter(starts, np.int64, len(starts)).reshape(-1, 1) + _arange_row(length)
    if not stacked:
        pos = pos.reshape(-1)
    s, dev = root._s, root._dev
    meta = (pos.shape + root._shape[1:], root.dtype)  # (the index op's inference, done here)
    return _hooks.record(s, "index", [root, s.const(pos, dev)], {"dim": 0}, dev, 3, (_INDEX_DIM0_KEY, meta))


def cat(tensors, dim: int = 0, *, out=None) -> Tensor:
    """Concatenate tensors along ``dim`` (dtypes promote; empty 1-D tensors are skipped, as torch). Views that are
    row ranges of one base, joined along dim 0, are gathered from the base in one op (:func:`_gather_rows`)."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("cat() expected a non-empty list of Tensors")
    live = tensors
    for i, t in enumerate(tensors):  # (a loop, no list made: an empty 1-D tensor is rare)
        sh = t._shape
        if not sh:  # (torch checks every tensor, at its place in the list, before it skips the empty ones)
            raise ShapeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")
        if sh == (0,) and live is tensors:
            live = [t for t in tensors if t._shape != (0,)] or tensors[:1]
    if len(live) == 1:
        r = live[0].clone()
    else:
        t0 = live[0]
        nd = len(t0._shape)
        d = dim if type(dim) is int and 0 <= dim < nd else norm_dim(dim, nd)  # (norm_dim's answer for a dim in range)
        rows = _row_ranges(live) if d == 0 and len(live) == len(tensors) else None
        # (recorded here, not by ``t0._rec``: one call less, and the search for the user's line starts above this frame)
        # (a list of more than a node's inputs, a corpus of one tensor a line: cats of at most MAX_INPUTS, chained)
        r = _gather_rows(*rows, False) if rows is not None else \
            _hooks.record(t0._s, "cat", live, {"dim": d}, t0._dev, 2) if len(live) <= MAX_INPUTS else \
            chunks(live, lambda part: _hooks.record(t0._s, "cat", part, {"dim": d}, t0._dev, 3))
    if len(live) < len(tensors):  # the skipped ones still get torch's (zero) gradient
        kept = {id(t) for t in live}
        r = zero_grad_from(r, *(t for t in tensors if id(t) not in kept))
    return r if out is None else write_out(out, r)


concat = cat
concatenate = cat


def stack(tensors, dim: int = 0, *, out=None) -> Tensor:
    """Stack same-shaped tensors along a new dim."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("stack expects a non-empty TensorList")
    s0 = tensors[0]._shape
    for t in tensors:
        if t._shape != s0:
            raise ShapeError(f"stack expects each tensor to be equal size, but got {list(s0)} and {list(t._shape)}")
    d = norm_dim(dim, len(s0), allow_end=True)
    if d == len(s0):  # a new last dim (0-d tensors too): each one a column
        return cat([t.unsqueeze(d) for t in tensors], d, out=out)
    rows = _row_ranges(tensors) if d == 0 and len(tensors) > 1 else None
    if rows is not None:  # (row ranges of one base: one gather, already of the stacked shape)
        return write_out(out, _gather_rows(*rows, True))
    # along an existing position: the tensors side by side along dim d are the stack with dims d and d + 1 merged,
    # so one cat and one reshape (two records, not one unsqueeze per tensor and a cat)
    joined = cat(tensors, d)
    shape = s0[:d] + (len(tensors),) + s0[d:]
    return write_out(out, joined._rec("reshape", [joined], {"shape": list(shape)}))


def hstack(tensors) -> Tensor:
    """The tensors joined along dim 1 (1-D ones along dim 0), 0-d ones taken as 1-D first (torch's atleast_1d)."""
    tensors = [t.reshape(1) if t.ndim == 0 else t for t in tensors]
    return cat(tensors, 0 if tensors[0].ndim == 1 else 1)


def vstack(tensors) -> Tensor:
    """The tensors joined along dim 0, 0-d and 1-D ones taken as rows first (torch's atleast_2d)."""
    return cat([t.reshape(1, -1) if t.ndim < 2 else t for t in tensors], 0)


def where(condition, input=None, other=None, *, out=None) -> Tensor:  # noqa: A002
    """``where(cond, x, y)`` elementwise; ``where(cond)`` is ``cond.nonzero(as_tuple=True)``."""
    if input is None and other is None:
        return condition.nonzero(as_tuple=True)
    ref = _first_tensor(input, other, condition)
    x = input if isinstance(input, Tensor) else None
    y = other if isinstance(other, Tensor) else None
    if x is None and y is None:
        dt = D.result_type(input, other)
        x = ref._s.scalar(input, dt, ref._dev)
        y = ref._s.scalar(other, dt, ref._dev)
    elif x is None:
        x = ref._s.scalar(input, D.result_type((y.dtype, y.ndim), input), ref._dev)
    elif y is None:
        y = ref._s.scalar(other, D.result_type((x.dtype, x.ndim), other), ref._dev)
    c = condition if isinstance(condition, Tensor) else ref._operand(condition)
    return write_out(out, ref._rec("where", [c, x, y]))


def arange_like(t: Tensor, start: int, end: int) -> Tensor:
    return t._s.record("arange", [], arange_attrs(start, end, 1, None), t._dev)
