"""Element-by-element writes of Python values are batched into one op (``client/element_writes.py``; issue 37):
a corpus built one element at a time records a handful of nodes, and every read, view, copy and later write sees
exactly what writing one at a time would give."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw

from .test_known_values import round_trips


def _recorded(session, fn) -> int:
    """How many nodes ``fn()`` records (the run of writes it leaves is recorded too)."""
    session.flush()
    fn()
    session.end_writes()
    return len(session._pending)


def test_a_corpus_written_one_element_at_a_time_records_one_run(session):
    text = "the quick brown fox jumps over the lazy dog " * 50
    stoi = {ch: i for i, ch in enumerate(sorted(set(text)))}
    ids = tw.zeros(len(text), dtype=tw.long)

    def build():
        for i, ch in enumerate(text):
            ids[i] = stoi[ch]

    n = _recorded(session, build)
    assert n <= 5, f"{len(text)} element writes recorded {n} nodes"  # reshape, two uploads, index_put, reshape
    np.testing.assert_array_equal(ids.numpy(), [stoi[ch] for ch in text])


def test_batched_writes_give_what_one_at_a_time_gives(session):
    x = tw.zeros(3, 4)
    ref = np.zeros((3, 4), np.float32)
    view = x[1]  # a view made before the writes follows them, as in torch
    for (i, j), v in [((1, 2), 5.5), ((-1, -1), 2), ((1, 2), 7), ((0, np.int64(3)), np.float32(1.25))]:
        x[i, j] = v
        ref[i, j] = v
    snapshot = x.clone()  # reads the value so far: the run is recorded here
    x[0, 0] = -1
    y = x * 2
    x[2, 0] = 9  # a new run after y was recorded: y keeps the value it was made from
    np.testing.assert_array_equal(snapshot.numpy(), ref)
    ref[0, 0] = -1
    np.testing.assert_array_equal(y.numpy(), ref * 2)
    ref[2, 0] = 9
    np.testing.assert_array_equal(x.numpy(), ref)
    np.testing.assert_array_equal(view.numpy(), ref[1])


@pytest.mark.parametrize("dtype,value,want", [(tw.int32, 3.9, 3), (tw.int64, -2.5, -2), (tw.bool, 2, True),
                                              (tw.float16, 1 / 3, np.float16(1 / 3)), (tw.bfloat16, 0.1, None),
                                              (tw.uint8, 7, 7)])
def test_values_are_converted_to_the_tensors_dtype_as_torch_does(session, dtype, value, want):
    x = tw.zeros(4, dtype=dtype)
    x[2] = value
    got = x.numpy()
    want = np.asarray(value).astype(x.dtype.np) if want is None else want
    assert got[2] == want and got.dtype == np.dtype(x.dtype.np) and not got[[0, 1, 3]].any()


def test_writes_into_a_known_small_value_need_no_round_trip(session):
    t = tw.tensor([1, 2, 3, 4])
    assert t.tolist() == [1, 2, 3, 4]
    with round_trips(session) as n:
        t[0] = 10
        t[3] = 40
        first = t.tolist()
        t[1] = 20
        assert [int(v) for v in t] == [10, 20, 3, 40] and first == [10, 2, 3, 40]
    assert n[0] == 0
    assert t.numpy().tolist() == [10, 20, 3, 40]  # the device has the same value


def test_out_of_range_and_other_keys(session):
    x = tw.zeros(2, 3)
    with pytest.raises(IndexError, match="index 2 is out of bounds for dimension 0 with size 2"):
        x[2, 0] = 1
    x[1] = 4  # a row, not an element: the general path
    x[0, 1:] = 2
    x[tw.tensor(0), 0] = 3  # a tensor index: the general path
    np.testing.assert_array_equal(x.numpy(), [[3, 2, 2], [4, 4, 4]])


def test_a_tensor_that_requires_grad_is_refused_as_torch_refuses_it(session):
    w = tw.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        w[0] = 1.0
    assert session._writes is None


def test_writes_through_views_of_slices_join_the_bases_run(session):
    """``t[i][0][j] = 1`` (the char-RNN tutorial's one-hot loop) writes the base's element: no write recorded back
    through the views' steps, and the base, the views and views made before all hold what numpy gives."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 4, 6)).astype(np.float32)
    t, ref = tw.tensor(a), a.copy()
    v1, r1 = t[1:5:2], ref[1:5:2]
    v2, r2 = v1[:, None, 1:4], r1[:, None, 1:4]
    v3, r3 = v2[1], r2[1]
    flat = t.view(-1)

    def write():
        v3[0, 2, 3] = 7.0
        r3[0, 2, 3] = 7.0
        v2[0, 0, 2, -1] = 3
        r2[0, 0, 2, -1] = 3
        flat[5] = 9
        ref.reshape(-1)[5] = 9
        for li in range(3):
            t[li][0][li + 1] = -1
            ref[li][0][li + 1] = -1

    session.flush()
    write()
    session.end_writes()
    ops = [e[1] for e in session._pending]
    assert "setslice" not in ops, ops
    np.testing.assert_array_equal(t.numpy(), ref)
    np.testing.assert_array_equal(v1.numpy(), r1)
    np.testing.assert_array_equal(v3.numpy(), r3)
    np.testing.assert_array_equal(flat.numpy(), ref.reshape(-1))
    with pytest.raises(IndexError, match="index 6 is out of bounds for dimension 0 with size 6"):
        t[0][0][6] = 1


def test_writes_through_other_views_take_the_general_path(session):
    x = tw.zeros(3, 4)
    ref = np.zeros((3, 4), np.float32)
    x.t()[1, 2] = 5  # a permuted view: its elements are not the base's in order
    ref.T[1, 2] = 5
    x.data[0][1] = 2  # a .data view: written outside autograd
    ref[0][1] = 2
    np.testing.assert_array_equal(x.numpy(), ref)
