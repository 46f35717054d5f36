"""The client's recording path (issue 37): the shortcuts it takes record what the general path would, and the
bookkeeping of lazy nodes (pins, held handles, known values) ends empty once their tensors are gone."""

from __future__ import annotations

import gc

import numpy as np

import tensorwire as tw
from tensorwire.known_values import LIGHT
from tensorwire.protocol.graph import attrs_key
from tensorwire.protocol.ops import infer


def _lazy_node(session, t):
    """``(op, attrs, attrs key, then)`` of the lazy node of ``t``."""
    op, _ids, attrs, _dev, _metas, akey, _alias, then = session._lazy[t._id]
    return op, attrs, akey, then


def test_iterating_a_known_tensor_gives_each_element_the_key_inference_would(session):
    x = tw.tensor(np.arange(12, dtype=np.int64).reshape(4, 3))
    rows = list(x)  # (every element's slice node shares one key, worked out for the first)
    for i, r in enumerate(rows):
        op, attrs, akey, then = _lazy_node(session, r)
        assert op == "slice" and attrs["starts"] == [i, 0] and attrs["stops"] == [i + 1, 3]
        assert akey == attrs_key("slice", attrs)
        assert then[0] == "reshape" and then[3] == [infer("slice", [((4, 3), tw.int64)], attrs, akey)]
        assert r.tolist() == list(range(3 * i, 3 * i + 3))


def test_a_slice_bounded_by_known_values_is_one_lazy_slice_with_the_inferred_key(session):
    data = tw.tensor(np.arange(100, dtype=np.int64) % 7)
    ix = tw.tensor([3, 40, 91])
    for i in ix:
        s = data[i:i + 8]
        assert s._base_version == LIGHT and _lazy_node(session, s)[0] == "light window"  # (views.basic_view)
        s._refresh()  # (what a reader other than stack/cat does first: the window becomes its slice's lazy node)
        op, attrs, akey, then = _lazy_node(session, s)
        assert op == "slice" and then is None
        assert akey == attrs_key("slice", attrs)
        assert s.shape == (min(8, 100 - int(i)),)
        np.testing.assert_array_equal(s.numpy(), (np.arange(100) % 7)[int(i):int(i) + 8])


def test_a_float_op_never_asks_the_known_values(session):
    a, b = tw.ones(5000), tw.ones(5000)  # (values a device makes: past known_values.HOST_ELEMENTS)
    calls = []
    known = session._known
    orig = known.compute
    known.compute = lambda *args: calls.append((args[1], args[5])) or orig(*args)  # (op, result dtype)
    try:
        c = a + b
        i = tw.tensor([2]) + 3  # (1-d: a 0-d int64 with a Python int takes the shortcut, known_values.known_int_op)
    finally:
        del known.compute
    assert ("add", tw.int64) in calls and not [dt for _, dt in calls if dt.is_floating_point]
    assert c[:3].tolist() == [2.0, 2.0, 2.0] and int(i) == 5


def test_lazy_nodes_released_together_leave_nothing_pinned(session):
    x = tw.tensor(np.arange(24, dtype=np.int64).reshape(6, 4))
    for order in (0, 1):  # the readers released after their inputs, then before them
        a = x[1:5]  # a lazy slice of x
        b = a[2]  # an element view of a (reads a's handle: pinned)
        c = b + 1  # known: deferred, reads b
        d = c[1:3]
        assert d.tolist() == [14, 15]  # (row 3 of x, plus one)
        views = [a, b, c, d] if order == 0 else [d, c, b, a]
        del a, b, c, d
        views.clear()
        gc.collect()
        session.flush()
        scalars = {t._id for t in session._scalars.values()}  # (the cached Python scalars: lazy while cached)
        kept = {t._id for t, _ in session._small_data.values()}  # (tensors of small Python data, and their views)
        # (and x's upload: the client holds x, no device read it; a kept view pins the kept tensor it reads)
        assert set(session._lazy) <= scalars | kept | {x._id} and set(session._pins) <= kept and not session._held
    known = session._known
    assert known.bytes == sum(v.nbytes for v in known._values.values())
    assert x.tolist() == np.arange(24).reshape(6, 4).tolist()
