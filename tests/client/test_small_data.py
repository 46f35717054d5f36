"""Tensors of small Python data (``tw.tensor((0.1307,))``, torchvision's ``Normalize`` making ``as_tensor(mean)`` and
its ``view(-1, 1, 1)`` for every image) are made once a session and aliased after (``Session.small_data``): each call
still gives a tensor of its own, with torch's values, dtype and in-place semantics, and the upload and the view are
recorded once, not once a call."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw
from tensorwire.known_values import SMALL_DATA_NUMBERS
from tensorwire.session import MAX_SMALL_DATA


def _recorded_ops(session, fn) -> list[str]:
    """The ops ``fn()`` records (the pending batch's, after shipping what was pending before)."""
    session.flush()
    fn()
    return [entry[1] for entry in session._pending]


def test_each_call_gives_its_own_tensor_with_torchs_values_and_dtypes(session):
    a, b = tw.tensor([1.0, 2.0]), tw.tensor((1.0, 2.0))
    assert a is not b and a._id != b._id
    assert a.tolist() == b.tolist() == [1.0, 2.0] and a.dtype is b.dtype is tw.float32
    assert tw.tensor([1, 2]).dtype is tw.int64 and tw.tensor([True, False]).dtype is tw.bool
    assert tw.tensor([1, 2], dtype=tw.float64).dtype is tw.float64
    assert tw.tensor([1.0, 2.0]).tolist() == [1.0, 2.0]  # (and the float32 one is still itself)
    assert tw.tensor([0.0]).tolist() == [0.0] and np.signbit(tw.tensor([-0.0]).numpy()[0])  # (keyed by bits)
    try:
        tw.set_default_dtype(tw.float64)
        assert tw.tensor([1.5]).dtype is tw.float64
    finally:
        tw.set_default_dtype(tw.float32)
    assert tw.tensor([1.5]).dtype is tw.float32


def test_in_place_updates_and_writes_touch_only_their_own_tensor(session):
    m = tw.tensor([1.0, 2.0])
    m.add_(1)
    n = tw.tensor([1.0, 2.0])
    n[0] = 5.0
    v = tw.tensor([1.0, 2.0])
    w = v.view(2, 1)
    w.mul_(3)  # (through the view to its base, as torch)
    assert m.tolist() == [2.0, 3.0] and n.tolist() == [5.0, 2.0]
    assert w.tolist() == [[3.0], [6.0]] and v.tolist() == [3.0, 6.0]
    assert tw.tensor([1.0, 2.0]).tolist() == [1.0, 2.0] and tw.tensor([1.0, 2.0]).view(2, 1).tolist() == [[1.0], [2.0]]


def test_views_of_several_kinds_and_ops_reading_them(session):
    a, b = tw.tensor([1.0, 0.0, 0.0]), tw.tensor([0.0, 1.0, 0.0])
    assert tw.linalg.cross(a, b).tolist() == [0.0, 0.0, 1.0]  # (expands, then a select of each element)
    x = tw.tensor([1.0, 2.0, 3.0])
    assert [x[i].item() for i in range(3)] == [1.0, 2.0, 3.0] and x[1:].tolist() == [2.0, 3.0]
    assert tw.tensor([1.0, 2.0]).expand(3, 2).tolist() == [[1.0, 2.0]] * 3
    r = tw.randn(4, 3)
    np.testing.assert_allclose((r - tw.tensor([0.5, 1.0, 2.0]).view(1, 3)).numpy(),
                               r.numpy() - np.array([[0.5, 1.0, 2.0]], np.float32))
    assert (tw.tensor([1.0, 2.0]).to("cpu:1") * 2).tolist() == [2.0, 4.0]


def test_gradients_of_tensors_that_alias_one_kept_tensor_stay_apart(session):
    t, u = tw.tensor([1.0, 2.0]), tw.tensor([1.0, 2.0])
    t.requires_grad_()
    u.requires_grad_()
    ((t * t).sum() + (u * 3).sum()).backward()
    assert t.grad.tolist() == [2.0, 4.0] and u.grad.tolist() == [3.0, 3.0]


def test_a_normalize_for_every_image_records_no_upload_or_view_after_the_first(session):
    img = tw.rand(1, 4, 4)

    def normalize():  # (torchvision's Normalize)
        mean = tw.as_tensor((0.1307,), dtype=img.dtype, device=img.device).view(-1, 1, 1)
        std = tw.as_tensor((0.3081,), dtype=img.dtype, device=img.device).view(-1, 1, 1)
        return img.clone().sub_(mean).div_(std)

    first, _ = normalize(), normalize()  # (kept from the second sighting: Session.small_data)
    ops = _recorded_ops(session, lambda: [normalize() for _ in range(5)])
    assert "const" not in ops and "reshape" not in ops, ops
    assert ops.count("sub") == 5 and ops.count("div") == 5, ops
    want = (img.numpy() - np.float32(0.1307)) / np.float32(0.3081)
    np.testing.assert_array_equal(first.numpy(), want)


def test_data_seen_once_is_not_kept(session):
    before = len(session._small_data)
    rows = [[k, k + 1, 7] for k in range(100, 140)]  # (a dataset's rows of ids: each seen once)
    assert [tw.tensor(r).tolist() for r in rows] == rows and len(session._small_data) == before
    assert tw.tensor(rows[0]).tolist() == rows[0] and len(session._small_data) == before + 1  # (its second sighting)


def test_the_kept_tensors_are_bounded_and_larger_data_is_not_kept(session):
    for k in range(MAX_SMALL_DATA + 40):
        assert tw.tensor([float(k)]).item() == float(k) and tw.tensor([float(k)]).item() == float(k)
    assert len(session._small_data) <= MAX_SMALL_DATA
    big = list(range(SMALL_DATA_NUMBERS + 1))
    before = len(session._small_data)
    assert tw.tensor(big).tolist() == big and tw.tensor(big).tolist() == big and len(session._small_data) == before
    assert tw.tensor([[1.0, 2.0]]).tolist() == [[1.0, 2.0]]  # (nested data: made as before)


@pytest.mark.parametrize("data, dtype", [([], tw.float32), ([1, 2.5], tw.float32), ([True, 1], tw.int64),
                                         ([1.0, 2j], tw.complex64)])
def test_mixed_and_empty_data_keep_torchs_dtypes(session, data, dtype):
    got = tw.tensor(data)  # (torch's: float32, float32, int64, complex64)
    assert got.dtype is dtype and got.tolist() == [complex(v) if dtype.is_complex else v for v in data]


def test_a_compiled_function_reading_a_kept_tensor_replays_after_it_is_evicted(session):
    tw.tensor([0.5])
    m = tw.tensor([0.5]).view(1, 1)  # (kept and aliased: its second sighting)
    f = tw.compile(lambda a: a - m)
    for i in range(5):
        assert f(tw.full((1, 2), float(i))).tolist() == [[i - 0.5, i - 0.5]]
        for k in range(MAX_SMALL_DATA + 10):  # (every kept tensor evicted)
            v = [float(10_000 + 1_000 * i + k)]
            tw.tensor(v), tw.tensor(v)
    assert f.stats["replays"] >= 2 and not f.eager, f.stats
