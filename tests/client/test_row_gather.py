"""``stack``/``cat`` along dim 0 of views that are row ranges of one base (issue 37: the bigram loader's
``torch.stack([data[i:i + 8] for i in ix])``) is ONE ``index`` of the base by the rows' positions
(``combine._row_ranges`` and ``_gather_rows``), not one recorded ``slice`` a view and a ``cat``; anything else takes
the general path. Counted, not timed: the nodes recorded, and the values against numpy's, including the cases that
must not gather."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw

from ._calls import device_value


def _recorded(session, fn):
    """``(fn's result, the ops of the nodes it left recorded and not shipped)``."""
    session.flush()
    out = fn()
    session.end_writes()
    return out, [e[1] for e in session._pending]


def test_stacked_windows_of_a_slice_of_a_text_are_one_gather(session):
    rng = np.random.default_rng(0)
    text = rng.integers(0, 28, 1000)
    data = tw.tensor(text, dtype=tw.long)
    train = data[:900]  # (a view of data: the windows' root base is data, their rows offset by train's)
    offsets = rng.integers(0, 900 - 9, 32)
    ix = tw.tensor(offsets)
    (x, y), ops = _recorded(session, lambda: (tw.stack([train[i:i + 8] for i in ix]),
                                              tw.stack([train[i + 1:i + 9] for i in ix])))
    # the text's upload (held by the client until a device reads it: the first gather's batch carries it), then per
    # batch the positions and one gather
    assert ops == ["const", "const", "index", "const", "index"], ops
    assert x.shape == (32, 8) and x.dtype == tw.int64
    np.testing.assert_array_equal(x.numpy(), np.stack([text[:900][o:o + 8] for o in offsets]))
    np.testing.assert_array_equal(y.numpy(), np.stack([text[:900][o + 1:o + 9] for o in offsets]))


def test_row_ranges_of_a_matrix_stack_and_cat_as_torch(session):
    a = np.arange(60, dtype=np.float32).reshape(12, 5)
    m = tw.tensor(a)
    (s, c), ops = _recorded(session, lambda: (tw.stack([m[2:5], m[0:3], m[9:12]]), tw.cat([m[7:9], m[1:3]], 0)))
    assert ops.count("index") == 2 and "slice" not in ops and "cat" not in ops, ops
    np.testing.assert_array_equal(s.numpy(), np.stack([a[2:5], a[0:3], a[9:12]]))
    np.testing.assert_array_equal(c.numpy(), np.concatenate([a[7:9], a[1:3]]))
    out = tw.zeros(3, 3, 5)
    assert tw.stack([m[2:5], m[0:3], m[9:12]], out=out) is out
    np.testing.assert_array_equal(out.numpy(), s.numpy())


@pytest.mark.parametrize("case", ["two bases", "lengths differ", "a step", "columns", "rows of columns",
                                  "rows of a reshape", "an element", "dim 1", "not a view"])
def test_what_is_not_row_ranges_of_one_base_takes_the_general_path(session, case):
    a = np.arange(48, dtype=np.int64).reshape(8, 6)
    # (cloned: values on the device, not ones the client holds, whose ``cat`` it would work out itself: known_values)
    m, other = device_value(tw.tensor(a)), device_value(tw.tensor(a * 10))
    parts, want, dim = {
        "two bases": ([m[1:3], other[2:4]], [a[1:3], (a * 10)[2:4]], 0),
        "lengths differ": ([m[1:3], m[2:5]], [a[1:3], a[2:5]], 0),
        "a step": ([m[0:4:2], m[1:3]], [a[0:4:2], a[1:3]], 0),
        "columns": ([m[1:3, 0:2], m[4:6, 0:2]], [a[1:3, 0:2], a[4:6, 0:2]], 0),
        "rows of a reshape": ([m.reshape(6, 8)[0:2], m.reshape(6, 8)[3:5]], [a.reshape(6, 8)[0:2],
                                                                             a.reshape(6, 8)[3:5]], 0),
        "rows of columns": ([m[:, 1:4][0:2], m[:, 1:4][5:7]], [a[:, 1:4][0:2], a[:, 1:4][5:7]], 0),
        "an element": ([m[1], m[3]], [a[1], a[3]], 0),
        "dim 1": ([m[1:3], m[4:6]], [a[1:3], a[4:6]], 1),
        "not a view": ([m[1:3], m[4:6] + 0], [a[1:3], a[4:6]], 0),
    }[case]
    c, ops = _recorded(session, lambda: tw.cat(parts, dim))
    assert "index" not in ops and "cat" in ops, ops
    np.testing.assert_array_equal(c.numpy(), np.concatenate(want, dim))
    if parts[0].shape == parts[1].shape:
        s, ops = _recorded(session, lambda: tw.stack(parts, dim))
        assert "index" not in ops, ops
        np.testing.assert_array_equal(s.numpy(), np.stack(want, dim))


def test_a_view_whose_base_changed_is_read_as_it_is_now(session):
    data = tw.tensor(np.arange(20, dtype=np.int64))
    v = data[2:5]
    data.add_(100)  # v is stale: the general path brings it up to date first
    w = data[0:3]
    np.testing.assert_array_equal(tw.stack([v, w]).numpy(), [[102, 103, 104], [100, 101, 102]])
    np.testing.assert_array_equal(tw.stack([data[5:7], data[1:3]]).numpy(), [[105, 106], [101, 102]])


def test_gradients_flow_through_stacked_row_views_of_a_parameter(session):
    w = tw.tensor(np.arange(10, dtype=np.float32), requires_grad=True)
    x, ops = _recorded(session, lambda: tw.stack([w[1:4], w[5:8]]))
    assert "index" not in ops  # (a base autograd tracks: the general path's slices and cat)
    (x * tw.tensor([[1.0], [2.0]])).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [0, 1, 1, 1, 0, 2, 2, 2, 0, 0])
    with tw.no_grad():
        np.testing.assert_array_equal(tw.stack([w[1:4], w[5:8]]).numpy(), [[1, 2, 3], [5, 6, 7]])


def test_in_compile_the_rows_are_sliced_as_recorded(session):
    @tw.compile
    def f(data, k):
        return tw.stack([data[k:k + 2], data[k + 3:k + 5]]) * 2

    data = tw.tensor(np.arange(10, dtype=np.int64))
    for k in range(3):
        np.testing.assert_array_equal(f(data, k).numpy(), np.stack([np.arange(10)[k:k + 2],
                                                                     np.arange(10)[k + 3:k + 5]]) * 2)
