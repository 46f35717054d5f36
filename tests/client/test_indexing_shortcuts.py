"""The client's shortcuts for basic indexing, iteration of a known tensor and integer arithmetic on known 0-d values
(issue 37: ``views.basic_view``, ``indexing.iter_known``, ``known_values.known_int_op``, all through
``Session.defer``) make what the general path (``Session.record`` through a view step or ``autograd_hooks``) makes:
the same view of the same root base, the same known value, the same errors, and the same lazy node, but for a 0-d
int64 whose value the shortcut knows (``i + 8``, an element of an iterated 1-d int64 ``ix``): that is ONE lazy
``full`` of the value (``Session.known_int64``, the node ``record("full", ...)`` makes), not the general path's
``add`` of a scalar operand or ``slice`` of ``ix``; recorded, it gives the same value."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import tensorwire as tw
from tensorwire import views as V
from tensorwire.indexing import _basic_parts, _expand_key
from tensorwire.protocol.errors import IndexOutOfRange


@contextlib.contextmanager
def counted(session, *methods: str):
    """Counts the calls of each ``session.<method>`` while the block runs: ``{method: [first argument, ...]}``."""
    calls: dict[str, list] = {m: [] for m in methods}

    def wrap(m, orig):
        def wrapper(*a, **k):
            calls[m].append(a[0] if a else None)
            return orig(*a, **k)
        return wrapper

    for m in methods:
        setattr(session, m, wrap(m, getattr(session, m)))
    try:
        yield calls
    finally:
        for m in methods:
            delattr(session, m)


def _node(session, t):
    """The lazy node of ``t`` without its handles: ``(op, attrs, device, metas, attrs key, is an alias, then)``
    (``metas`` as a list: a node shared by handles keeps a tuple, ``Session.known_int64``)."""
    op, _ids, attrs, dev, metas, akey, alias, then = session._lazy[t._id]
    return op, attrs, dev, list(metas), akey, alias is not None, then


def _general(x, key):
    """``x[key]`` for a basic key through the general path: the view step's ``forward`` and ``Tensor._view``."""
    return x._view(V.Slice(*_basic_parts(x, _expand_key(x, key)), x._shape))


def _full_node(session, value: int, device: str):
    """The lazy node ``record`` makes for a 0-d int64 ``full`` of ``value`` (what the shortcuts make for a known 0-d
    int64), without its handle."""
    return _node(session, session.record("full", [], {"shape": [], "dtype": "int64", "value": value}, device,
                                         lazy=True))


def _same_view(session, fast, slow, node=True):
    """``fast`` and ``slow`` are the same view (shape, dtype, root base, chain of steps) with the same value, and,
    with ``node``, the same lazy node. A light window (``views.basic_view``: rows, no node yet) is compared as what
    any reader makes of it first (``Tensor._refresh``)."""
    assert fast.shape == slow.shape and fast.dtype == slow.dtype
    if fast._base_version == V.LIGHT:
        assert session._lazy[fast._id][0] == "light window"
        fast._refresh()
    assert fast._base is slow._base and fast._base_version == slow._base_version
    assert [(type(s), getattr(s, "starts", None), getattr(s, "stops", None), getattr(s, "steps", None),
             getattr(s, "out_shape", None)) for s in fast._vsteps] == \
           [(type(s), getattr(s, "starts", None), getattr(s, "stops", None), getattr(s, "steps", None),
             getattr(s, "out_shape", None)) for s in slow._vsteps]
    if node:
        assert _node(session, fast) == _node(session, slow)
    np.testing.assert_array_equal(fast.numpy(), slow.numpy())


@pytest.mark.parametrize("shape", [(40,), (7, 3, 5)])
def test_a_basic_key_makes_the_node_and_view_the_general_path_makes(session, shape):
    n = int(np.prod(shape))
    x = tw.tensor(np.arange(n, dtype=np.int64).reshape(shape))
    i, j = tw.tensor(2), tw.tensor(5)  # (0-d bounds the client knows)
    for key in [3, -1, slice(1, 4), slice(-3, None), slice(None, 100), slice(5, 2), slice(i, j), slice(i, i + 3),
                slice(None, -2)]:
        with counted(session, "record") as calls:
            fast = x[key]
        # (one lazy node, by Session.defer_view: for all of x, the general path's reshape, an alias of x)
        assert calls["record"] == [], key
        element = isinstance(key, int) and len(shape) == 1  # (a 0-d int64 the client knows: one lazy ``full``)
        _same_view(session, fast, _general(x, key), node=not element)
        if element:
            assert _node(session, fast) == _full_node(session, int(np.arange(n)[key]), x._dev)
        np.testing.assert_array_equal(fast.numpy(), np.arange(n).reshape(shape)[
            slice(int(key.start) if isinstance(key.start, tw.Tensor) else key.start,
                  int(key.stop) if isinstance(key.stop, tw.Tensor) else key.stop) if isinstance(key, slice) else key])


def test_a_view_of_a_view_is_a_view_of_the_root_base_and_follows_it(session):
    data = tw.tensor(np.arange(100, dtype=np.int64))
    part = data[10:60]
    i = tw.tensor([4, 9])[1]  # (an element view: a known 0-d bound)
    w = part[i:i + 8]
    _same_view(session, w, _general(part, slice(9, 17)))
    assert w._base is data and len(w._vsteps) == 2
    assert w.tolist() == list(range(19, 27))
    data.add_(1000)  # the views see their base's update, as torch's do
    assert w.tolist() == list(range(1019, 1027)) and int(part[0]) == 1010
    w[0] = -1  # a write through the view of a view reaches the root
    assert int(data[19]) == -1 and int(part[9]) == -1
    v = part[3]  # ... and an element view of a view, then a slice of a stale view
    part.mul_(2)
    assert int(v) == 2026 and part[1:3].tolist() == [2022, 2024]


def test_an_index_into_a_dim_of_one_is_the_general_paths_reshape_of_the_whole(session):
    """``t[i][0]`` of a ``(n, 1, k)`` tensor (a char-RNN's one-hot letters): the whole of ``t[i]``, reshaped to drop
    its dim of one; made directly (one lazy node, no record), the node and view the general path makes; with
    autograd, recorded, and the gradient reaches the base."""
    x = tw.tensor(np.arange(24, dtype=np.float32).reshape(4, 1, 6))
    row = x[2]
    with counted(session, "record") as calls:
        fast = row[0]
    assert calls["record"] == []
    _same_view(session, fast, _general(row, 0))
    assert fast._base is x and fast.tolist() == list(range(12, 18))
    fast[3] = -1.0  # a write through it reaches the base
    assert x[2, 0, 3].item() == -1.0
    w = tw.tensor(np.ones((3, 1, 2), dtype=np.float32), requires_grad=True)
    (w[1][0] * tw.tensor([2.0, 3.0])).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy()[:, 0], [[0, 0], [2, 3], [0, 0]])


def test_elements_of_iterated_tensors_of_one_length_stay_views_of_their_own_tensor(session):
    """The view steps of a 1-d int64's elements are made once a length (``indexing._element_steps``) and shared: each
    element is still a view of the tensor iterated, and a write through it reaches that tensor only."""
    a, b = tw.tensor([1, 2, 3]), tw.tensor([4, 5, 6])
    ea, eb = list(a), list(b)
    assert [e._base for e in ea] == [a] * 3 and [e._base for e in eb] == [b] * 3
    eb[1].add_(10)
    assert a.tolist() == [1, 2, 3] and b.tolist() == [4, 15, 6] and int(eb[1]) == 15 and int(ea[1]) == 2
    assert tw.stack([a[i:i + 1] for i in list(tw.tensor([2, 0]))]).tolist() == [[3], [1]]


def test_steps_and_bounds_out_of_range_behave_as_before(session):
    x = tw.tensor(np.arange(10, dtype=np.int64))
    assert x[::3].tolist() == [0, 3, 6, 9] and x[1:8:3].tolist() == [1, 4, 7] and x[7:100].tolist() == [7, 8, 9]
    assert x[100:].tolist() == [] and x[-100:2].tolist() == [0, 1] and x[:, None].shape == (10, 1)
    with pytest.raises(ValueError, match="step must be greater than zero"):
        x[::-1]
    with pytest.raises(ValueError, match="step must be greater than zero"):
        x[2:5:0]
    for bad in (10, -11):
        with pytest.raises(IndexOutOfRange, match="out of bounds for dimension 0 with size 10"):
            x[bad]
    with pytest.raises(IndexOutOfRange, match="out of bounds"):  # (a 0-d tensor index: the device's error)
        x[tw.tensor(10)].item()
    with pytest.raises(IndexOutOfRange, match="invalid index of a 0-dim tensor"):  # (torch's words)
        tw.tensor(3)[0]
    with pytest.raises(TypeError, match="indices must be integers"):
        x[1.5:3]


def test_iterating_a_known_tensor_makes_the_element_views_the_general_path_makes(session):
    ix = tw.tensor(np.array([[3, 1], [4, 1], [5, 9]], dtype=np.int64))
    flat = tw.tensor([8, 2, 6])
    with counted(session, "record", "_flush") as calls:
        rows = list(ix)
        els = list(ix[0])  # (an element of a view: iterated through the view's known value)
        ints = list(flat)
        values = [r.tolist() for r in rows] + [int(e) for e in els] + [int(e) for e in ints]
    assert calls["record"] == [] and calls["_flush"] == []  # no op recorded, no round trip
    assert values == [[3, 1], [4, 1], [5, 9], 3, 1, 8, 2, 6]
    for k, r in enumerate(rows):
        _same_view(session, r, _general(ix, k))
    for k, e in enumerate(els):
        _same_view(session, e, _general(ix[0], k))
    for k, e in enumerate(ints):  # a 0-d int64 element: the general path's view, its node the full of its value
        _same_view(session, e, _general(flat, k), node=False)
        assert _node(session, e) == _full_node(session, values[5 + k], e._dev)
    assert tw.stack([ints[2], ints[0]]).tolist() == [6, 8]  # (read by a recorded node: the full nodes give the values)


def test_elements_follow_in_place_updates_of_the_iterated_tensor(session):
    ix = tw.tensor([10, 20, 30, 40])
    seen, elems = [], []
    for k, e in enumerate(ix):
        seen.append(int(e))
        elems.append(e)
        if k == 1:
            ix.add_(100)  # the later elements are of the new value; the earlier ones are views: they see it too
        if k == 2:
            ix[3] = 7
    assert seen == [10, 20, 130, 7]
    assert [int(e) for e in elems] == [110, 120, 130, 7] and ix.tolist() == [110, 120, 130, 7]
    view = tw.tensor(np.arange(12, dtype=np.int64).reshape(3, 4))[1]  # iterating a view whose base changes
    got = []
    for k, e in enumerate(view):
        got.append(int(e))
        if k == 0:
            view._base.mul_(-1)
    assert got == [4, -5, -6, -7]


def test_integer_arithmetic_on_a_known_value_makes_one_node_of_the_value(session):
    i, big = tw.tensor([7, 2**62])  # (elements of a known tensor: their values are known)
    cases = [(lambda: i + 8, "add", False, 8, 15), (lambda: 8 + i, "add", True, 8, 15),
             (lambda: i - 3, "sub", False, 3, 4), (lambda: 3 - i, "sub", True, 3, -4),
             (lambda: i * 6, "mul", False, 6, 42), (lambda: big * 4, "mul", False, 4, 0)]  # (int64 wraps)
    for fn, op, reverse, c, want in cases:
        t = i if op != "mul" or c != 4 else big
        with counted(session, "record", "scalar", "_flush") as calls:
            fast = fn()
        assert calls == {"record": [], "scalar": [], "_flush": []}  # one lazy node, no scalar operand, no round trip
        assert _node(session, fast) == _full_node(session, want, t._dev)
        s = session.scalar(c, tw.int64, t._dev)
        slow = session.record(op, [s, t] if reverse else [t, s], None, t._dev)  # (the general path: the same value)
        assert session._known.peek(fast._id) == session._known.peek(slow._id) == want
        assert int(fast) == want and fast.shape == () and fast.dtype == tw.int64
        # read by a recorded node (the worker's cat), the lazy full is recorded and gives the general path's value
        assert tw.stack([fast, slow]).tolist() == [want, want]
    j = i + 1
    i._base.add_(10)  # i is a view: a stale one is recomputed first, as record's inputs are
    assert int(i + 1) == 18 and int(j) == 8
    assert int(i // 2) == 8 and int(i % 5) == 2  # (other ops: the general path, computed on the client too)


def test_the_shortcuts_stand_aside_in_capture_and_autograd(session):
    w = tw.tensor(np.arange(6.0, dtype=np.float32), requires_grad=True)
    with counted(session, "defer", "defer_view", "known_int64") as calls:
        (w[1:4] * 2).sum().backward()  # (a view that requires grad: recorded with autograd)
    assert calls == {"defer": [], "defer_view": [], "known_int64": []}
    np.testing.assert_array_equal(w.grad.numpy(), [0, 2, 2, 2, 0, 0])

    @tw.compile
    def f(data, ix):
        return tw.stack([data[k:k + 2] for k in range(3)]) + ix[0] + 1

    data = tw.tensor(np.arange(10, dtype=np.int64))
    ix = tw.tensor([5, 6])
    for _ in range(2):
        np.testing.assert_array_equal(f(data, ix).numpy(), np.stack([np.arange(10)[k:k + 2] for k in range(3)]) + 6)
