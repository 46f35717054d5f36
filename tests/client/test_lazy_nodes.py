"""Lazy nodes (``Session._defer``; issue 37): a view outside autograd, and an integer result the client computes, are
recorded only when a recorded op reads them, their value is fetched from a device, or a compiled graph takes them.
Counted, not timed: the nodes a loader's slice loop, a ``Linear`` layer and a hand-written SGD update record; and the
semantics that must not move: views see their base's in-place updates, writes through views reach the base, a view
outlives its base, gradients flow through views, handles are released once nothing reads them."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import tensorwire as tw

from ._calls import device_value
from .test_known_values import round_trips


def _recorded(session, fn):
    """``(fn's result, the nodes it left recorded and not shipped)``: the ops of those nodes."""
    session.flush()
    out = fn()
    session.end_writes()
    return out, [e[1] for e in session._pending]


def test_a_loader_slice_loop_records_one_gather_a_batch(session):
    rng = np.random.default_rng(0)
    text = rng.integers(0, 28, 1000)
    data = tw.tensor(text, dtype=tw.long)
    train = data[:900]
    offsets = rng.integers(0, 900 - 8, 32)
    ix = tw.tensor(offsets)
    session.flush()
    with round_trips(session) as trips:
        xs, ops = _recorded(session, lambda: [train[i:i + 8] for i in ix])
        assert ops == []  # nothing a device must run: the bounds came from the client's copy of ix
        (x, y), ops = _recorded(session, lambda: (tw.stack(xs), tw.stack([train[i + 1:i + 9] for i in ix])))
    assert trips[0] == 2  # (the two flushes of _recorded: no read went to a device)
    # data's upload (held by the client until a device reads it), then per batch: the windows' positions (an upload)
    # and one gather of data's rows (combine._gather_rows): no slice
    assert ops == ["const", "const", "index", "const", "index"], ops
    np.testing.assert_array_equal(x.numpy(), np.stack([text[:900][o:o + 8] for o in offsets]))
    np.testing.assert_array_equal(y.numpy(), np.stack([text[:900][o + 1:o + 9] for o in offsets]))


def test_one_hot_rows_written_through_views_record_one_run(session):
    """The char-RNN tutorial's ``tensor[li][0][letter] = 1``: the views are never read, the writes are one run; on a
    ``zeros`` the client holds, the run is worked out on the client (known_values.HELD_OPS): nothing is recorded, and
    the first op a device runs on the rows reads them as one upload."""
    word = [3, 1, 4, 1, 5, 9]

    def build():
        t = tw.zeros(len(word), 1, 10)
        for li, k in enumerate(word):
            t[li][0][k] = 1
        return t

    t, ops = _recorded(session, build)
    assert ops == [], ops
    want = np.zeros((len(word), 1, 10), np.float32)
    want[np.arange(len(word)), 0, word] = 1
    np.testing.assert_array_equal(t.numpy(), want)
    r, ops = _recorded(session, lambda: t.exp())
    assert ops == ["const", "exp"], ops
    np.testing.assert_allclose(r.numpy(), np.exp(want), rtol=1e-6)
    big, ops = _recorded(session, lambda: tw.randn(len(word), 1, 10))  # (a value on the device: one run of writes)
    _, ops = _recorded(session, lambda: [big[li][0].__setitem__(k, 1) for li, k in enumerate(word)])
    assert ops.count("slice") == 0 and ops.count("index_put") == 1 and len(ops) <= 6, ops


def test_a_linear_layer_records_one_node(session):
    lin = tw.nn.Linear(5, 3)
    x = tw.randn(2, 5)
    y, ops = _recorded(session, lambda: lin(x))
    assert ops == ["linear"]
    w, b = lin.weight.detach().numpy(), lin.bias.detach().numpy()
    np.testing.assert_allclose(y.detach().numpy(), x.numpy() @ w.T + b, rtol=1e-5, atol=1e-6)


def test_sgd_by_hand_through_data_records_no_alias(session):
    """``p.data.add_(p.grad.data, alpha=-lr)``: ``.data`` is an alias, read as the value it aliases; the update is the
    scaled gradient added in one node, add_scaled (no ``reshape`` of the parameter or its gradient before or after)."""
    lin = tw.nn.Linear(4, 2)
    x = tw.randn(3, 4)
    lin(x).sum().backward()
    before = [p.detach().numpy().copy() for p in lin.parameters()]
    grads = [p.grad.numpy().copy() for p in lin.parameters()]

    def update():
        for p in lin.parameters():
            p.data.add_(p.grad.data, alpha=-0.1)

    _, ops = _recorded(session, update)
    assert [op for op in ops if op != "full"] == ["add_scaled"] * 2, ops  # (full: the cached scalar -0.1)
    for p, b, g in zip(lin.parameters(), before, grads):
        np.testing.assert_allclose(p.detach().numpy(), b - 0.1 * g, rtol=1e-6)
        assert p.requires_grad and p.is_leaf
    # the next forward and backward read the updated parameters
    lin.zero_grad()
    out = lin(x)
    np.testing.assert_allclose(out.detach().numpy(), x.numpy() @ (before[0] - 0.1 * grads[0]).T
                               + (before[1] - 0.1 * grads[1]), rtol=1e-5, atol=1e-6)
    out.sum().backward()
    np.testing.assert_allclose(lin.weight.grad.numpy(), np.tile(x.numpy().sum(0), (2, 1)), rtol=1e-5)


def test_a_lazy_view_sees_its_base_updated_in_place(session):
    x = tw.tensor(np.arange(12.0).reshape(3, 4))
    v = x[1]
    t = x.t()[2]
    x.add_(10)  # before anything read the views
    np.testing.assert_array_equal(v.numpy(), [14.0, 15.0, 16.0, 17.0])
    np.testing.assert_array_equal(t.numpy(), [12.0, 16.0, 20.0])
    x[1, 2] = -1.0
    assert v.tolist() == [14.0, 15.0, -1.0, 17.0]
    np.testing.assert_array_equal((v * 2).numpy(), [28.0, 30.0, -2.0, 34.0])


def test_writes_through_a_lazy_view_reach_the_base(session):
    x = tw.zeros(3, 4)
    row = x[1]
    col = row[1:3]
    col.add_(5)  # through two lazy views
    row[3] = 7.0
    x.t()[0].fill_(2.0)
    want = np.zeros((3, 4), np.float32)
    want[1, 1:3] += 5
    want[1, 3] = 7
    want[:, 0] = 2
    np.testing.assert_array_equal(x.numpy(), want)
    np.testing.assert_array_equal(row.numpy(), want[1])
    np.testing.assert_array_equal(col.numpy(), want[1, 1:3])


def test_data_writes_reach_the_parameter_and_its_other_views(session):
    p = tw.nn.Parameter(tw.ones(2, 3))
    d = p.data
    r = p.data[0]
    d.mul_(3)
    p.data.copy_(p.data + 1)  # the base's value read through a fresh alias
    np.testing.assert_array_equal(p.detach().numpy(), np.full((2, 3), 4.0))
    np.testing.assert_array_equal(d.numpy(), np.full((2, 3), 4.0))
    np.testing.assert_array_equal(r.numpy(), np.full(3, 4.0))
    assert p.requires_grad and not d.requires_grad and p.is_leaf


def test_a_lazy_view_outlives_its_base(session):
    base = tw.tensor(np.arange(10.0))
    v = base[2:5]
    w = v.reshape(3, 1)
    del base
    gc.collect()
    session.flush()
    np.testing.assert_array_equal((w + 0).numpy().ravel(), [2.0, 3.0, 4.0])
    np.testing.assert_array_equal(v.numpy(), [2.0, 3.0, 4.0])


def test_a_handle_a_lazy_node_reads_is_held_until_nothing_reads_it(session):
    base = tw.arange(20000.0)  # (too big for the client to follow its views' values: no recipe holds a view)
    session.flush()
    v = base[2:19002]
    w = v.reshape(19000, 1)  # lazy: reads v's handle, itself lazy
    del v
    gc.collect()
    session.flush()
    assert len(session._held) == 1  # v's handle: its tensor is gone, w still reads it
    np.testing.assert_array_equal((w + 1).numpy().ravel(), np.arange(3.0, 19003.0))  # w, then v, recorded now
    del w
    gc.collect()
    session.flush()
    session.flush()
    assert not session._pins and not session._held
    assert all(node[0] == "full" for node in session._lazy.values())  # (only the session's cached scalars: `+ 1`)


def test_lazy_nodes_released_unrecorded_are_dropped_with_the_handles_they_pin(session):
    """A base, lazy views of it, views of those, and slice bounds (``i + 1``) all released before anything read
    them: the flushes drop every lazy node unrecorded (``Session._take_release``'s rounds: a view's parent is held
    until the view goes, then dropped too), and the upload of ``ix`` that no device read, release to the devices
    only the handle they made (the base), and forget the values and recipes the client kept for all of them."""
    base = device_value(tw.tensor(np.arange(40, dtype=np.int64)))  # (made on the device)
    ix = tw.tensor([3, 5])  # (held by the client: a lazy upload, never read by a device here)
    session.flush()
    made = {base._id}
    views = [base[k:k + 8] for k in range(0, 32, 4)]
    light = {v._id for v in views}  # (light windows, views.basic_view: their handles, lazy nodes of no input ...)
    deeper = [v[1:3] for v in views]  # (each reads its parent's handle: pinned; ... until this made them lazy views)
    elements = list(ix)
    bounds = [i + 1 for i in elements]
    lazy = {t._id for t in views + deeper + elements + bounds}
    assert not light & lazy
    assert session._pins[base._id] == len(views) and lazy <= session._lazy.keys()
    assert all(session._known.gives(t) for t in views + deeper + elements + bounds)
    taken = []
    take = session._take_release
    session._take_release = lambda: taken.append(take()) or taken[-1]
    ix_id = ix._id
    try:
        del base, ix, views, deeper, elements, bounds
        gc.collect()
        session.flush()
        gc.collect()
        session.flush()  # (a recipe forgotten by the first frees a parent: the base goes with the second)
    finally:
        del session._take_release
    out = [h for o, _ in taken for h in o]
    dropped = [h for _, d in taken for h in d]
    assert set(out) == made and len(out) == len(made)  # (released once each; the lazy ones never reached a device)
    assert set(dropped) == lazy | light | {ix_id} and len(dropped) == len(lazy | light) + 1
    assert not session._pins and not session._held and not lazy & session._lazy.keys()
    assert not any(session._known.follows(h) for h in lazy | made | {ix_id})


def test_an_element_view_is_one_lazy_node_and_two_nodes_once_read(session):
    """``x[i]``: the slice and the reshape that drops the int dim wait as one node (one tensor, one handle); read by a
    recorded op, both are recorded, and the slice's handle is released once the batch ran."""
    base = tw.arange(20000.0)
    session.flush()
    lazy_before = len(session._lazy)
    e, ops = _recorded(session, lambda: base[7])
    assert ops == [] and len(session._lazy) == lazy_before + 1
    assert session._lazy[e._id][0] == "slice" and e.shape == ()
    r, ops = _recorded(session, lambda: e * 2)
    assert [o for o in ops if o != "full"] == ["slice", "reshape", "mul"], ops  # (full: the cached scalar 2)
    assert float(r.item()) == 14.0 and float(e.item()) == 7.0
    session.flush()
    session.flush()
    assert not session._pins and not session._held


def test_a_view_that_requires_grad_is_recorded_at_once_and_differentiates(session):
    a = tw.tensor(np.arange(6.0, dtype=np.float32).reshape(2, 3), requires_grad=True)
    _, ops = _recorded(session, lambda: a[1])
    assert "slice" in ops  # (autograd's views are recorded with their graph, as before)
    c = tw.tensor(np.arange(6.0, dtype=np.float32).reshape(2, 3))
    ((a[1] * c[0]).sum() + (a.t()[2] * c.t()[1]).sum()).backward()
    want = np.zeros((2, 3), np.float32)
    want[1] += [0.0, 1.0, 2.0]
    want[:, 2] += [1.0, 4.0]
    np.testing.assert_array_equal(a.grad.numpy(), want)


def test_integer_index_arithmetic_is_deferred_and_read_on_the_client(session):
    ix = tw.tensor([3, 5, 7])
    session.flush()
    with round_trips(session) as trips:
        (bounds, ops) = _recorded(session, lambda: [(int(i), int(i + 4), int(2 * i - 1)) for i in ix])
    assert ops == [] and trips[0] == 1
    assert bounds == [(3, 7, 5), (5, 9, 9), (7, 11, 13)]
    j = ix[1] + 100
    np.testing.assert_array_equal((tw.arange(3) + j).numpy(), [105, 106, 107])  # read by a device: recorded


def test_a_compiled_function_takes_a_lazy_argument(session):
    @tw.compile
    def f(a, b):
        return a * 2 + b

    x = tw.tensor(np.arange(8.0).reshape(2, 4))
    for k in range(3):
        out = f(x[k % 2], x.t()[1:3].reshape(4))
        np.testing.assert_array_equal(out.numpy(), np.arange(8.0).reshape(2, 4)[k % 2] * 2
                                      + np.arange(8.0).reshape(2, 4).T[1:3].reshape(4))


@pytest.mark.parametrize("read", ["item", "numpy", "sum"])
def test_a_lazy_result_read_from_a_device(session, read):
    big = tw.tensor(np.arange(40000, dtype=np.int64))  # (over the client's small-value bound: the device's to give)
    v = big[100:200:7]
    want = np.arange(40000)[100:200:7]
    if read == "item":
        assert v[3].item() == want[3]
    elif read == "numpy":
        np.testing.assert_array_equal(v.numpy(), want)
    else:
        assert int(v.sum()) == want.sum()
