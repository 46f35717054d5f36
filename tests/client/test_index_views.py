"""``x[i]`` by a view step made once per input shape, index and dtype (``views.index_view``), element writes through
such views at the root's position (``views.root_position``, its per-step map), and ``full``'s node inference kept per
shape, dtype and value type (``_factories.full``): what each gives is what the general path gives."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw
from tensorwire.protocol.errors import ShapeError


def test_int_views_of_same_shaped_tensors_of_two_dtypes(session):
    a = tw.tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    b = tw.tensor(np.arange(12, dtype=np.int64).reshape(3, 4) * 10)
    for i in (0, 2, -1):
        va, vb = a[i], b[i]
        assert va.dtype == tw.float32 and vb.dtype == tw.int64
        assert va.shape == (4,) and vb.shape == (4,)
        np.testing.assert_array_equal(va.numpy(), np.arange(12, dtype=np.float32).reshape(3, 4)[i])
        np.testing.assert_array_equal(vb.numpy(), np.arange(12).reshape(3, 4)[i] * 10)


def test_a_shared_step_keeps_its_dtype_after_a_view_is_recomputed_in_another(session):
    x = tw.zeros(2, 3)
    v = x[1]
    x.data = tw.ones(2, 3, dtype=tw.float64)  # v's root changed dtype: v is brought up to date from a float64 value
    assert v.dtype == tw.float32  # (as torch: the view keeps its dtype)
    v.numpy()
    y = tw.full((2, 3), 2.0)  # a float32 tensor of the same shape: its y[1] is float32 as before
    w = y[1]
    assert w.dtype == tw.float32
    np.testing.assert_array_equal((w + 1).numpy(), np.full(3, 3.0, np.float32))


def test_element_writes_through_chained_int_views(session):
    for shape in ((5, 1, 7), (4, 2, 3), (3, 1, 1)):
        t = tw.zeros(*shape)
        ref = np.zeros(shape, np.float32)
        for i in range(shape[0]):
            j = (i * 5) % shape[2]
            k = i % shape[1]
            t[i][k][j] = i + 1
            ref[i, k, j] = i + 1
        t[-1][0][-1] = 9
        ref[-1, 0, -1] = 9
        np.testing.assert_array_equal(t.numpy(), ref)
        np.testing.assert_array_equal(t[1].numpy(), ref[1])


def test_int_views_with_grad_are_differentiable(session):
    x = tw.tensor(np.arange(6, dtype=np.float32).reshape(3, 2), requires_grad=True)
    y = (x[0] * 2 + x[2] * 3).sum() + x[-1][1]
    y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[2, 2], [0, 0], [3, 4]])


def test_full_of_each_value_type_keeps_its_dtype_and_value(session):
    for value, dtype, np_dtype in ((1, tw.int64, np.int64), (1.5, tw.float32, np.float32),
                                   (True, tw.bool, np.bool_), (0, tw.int64, np.int64)):
        t = tw.full((2, 3), value)
        assert t.dtype == dtype
        np.testing.assert_array_equal(t.numpy(), np.full((2, 3), value, np_dtype))
    z = tw.zeros(2, 3, dtype=tw.float64)
    o = tw.ones(2, 3, dtype=tw.float64)
    assert z.dtype == tw.float64 and o.dtype == tw.float64
    np.testing.assert_array_equal((z + o).numpy(), np.ones((2, 3)))
    n = tw.full((2, 3), float("nan"))
    assert np.isnan(n.numpy()).all()


def test_an_update_through_data_leaves_the_root_holding_the_new_value(session):
    p = tw.tensor([1.0, 2.0, 3.0], requires_grad=True)
    d = p.data
    d.add_(tw.tensor([1.0, 1.0, 1.0]), alpha=-0.5)
    assert p._id not in session._lazy  # (the root holds the value's handle itself, not a lazy alias of it)
    np.testing.assert_array_equal(p.detach().numpy(), [0.5, 1.5, 2.5])
    np.testing.assert_array_equal(d.numpy(), [0.5, 1.5, 2.5])
    p.data.mul_(2)  # a later update through another .data: both follow, as torch's shared storage
    np.testing.assert_array_equal(d.numpy(), [1.0, 3.0, 5.0])
    p.data.view(-1).view(3).sub_(1)  # (an alias of the whole value through reshapes)
    np.testing.assert_array_equal(p.detach().numpy(), [0.0, 2.0, 4.0])
    np.testing.assert_array_equal(d.numpy(), [0.0, 2.0, 4.0])
    assert p.requires_grad and p.grad_fn is None and p._version == 3
    (p * p).sum().backward()
    np.testing.assert_array_equal(p.grad.numpy(), [0.0, 4.0, 8.0])


def test_views_of_views_follow_their_root(session):
    # (a small root, whose value the client keeps, and one above known_values' small bound; a view of a view's
    # value, and after an update of the root)
    for n in (3, 5000):
        base = np.arange(n * 2 * 4, dtype=np.int64).reshape(n, 2, 4)
        x = tw.tensor(base)
        v = x[n - 1][1]
        assert v.shape == (4,)
        assert v.tolist() == base[n - 1, 1].tolist()
        assert v[2].item() == base[n - 1, 1, 2]
        x.add_(1)
        assert v.tolist() == (base[n - 1, 1] + 1).tolist()
        w = x[0][0]
        w[3] = -7  # (an element write through the view: seen by the root)
        assert x[0, 0, 3].item() == -7 and w.tolist() == [1, 2, 3, -7]


def test_full_shapes_are_checked_as_before(session):
    assert tw.zeros(2, 0, 3).shape == (2, 0, 3)
    assert tw.zeros((2, 3)).shape == (2, 3)
    assert tw.full((np.int64(2), 3), 1.5).tolist() == [[1.5] * 3] * 2
    with pytest.raises(ShapeError, match="negative"):
        tw.full((2, -1), 1.0)
    with pytest.raises(TypeError, match="sequence of ints"):
        tw.full((2.0, 3), 1.0)


def test_tensor_of_a_flat_list_of_numbers(session):
    assert tw.tensor([3], dtype=tw.long).tolist() == [3]
    assert tw.tensor([1, 2.5, True]).dtype == tw.float32
    assert tw.tensor([tw.tensor(2.0), 3.0]).tolist() == [2.0, 3.0]  # (a tensor among the numbers: read as its value)
