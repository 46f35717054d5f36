"""op_db entries that were missing or refused (issue 33), each against a numpy float64 reference written from the
definition: ``as_strided`` (a view of the base's storage: reads, writes through it, its gradient),
``F.embedding_bag``, ``F.embedding``'s ``max_norm`` and ``scale_grad_by_freq``, ``Tensor.index_copy``/``index_copy_``
and ``nn.PairwiseDistance``/``nn.CosineSimilarity``."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw
import tensorwire.nn.functional as F
from tensorwire.protocol.errors import ShapeError

pytestmark = pytest.mark.usefixtures("session")

RNG = np.random.default_rng(33)


def _strided(storage: np.ndarray, size, stride, offset) -> np.ndarray:
    """The definition: element ``i`` is ``storage[offset + Σ i_k stride_k]``."""
    out = np.empty(size, storage.dtype)
    for i in np.ndindex(*size):
        out[i] = storage[offset + sum(a * s for a, s in zip(i, stride))]
    return out


# -- as_strided ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("size", "stride", "offset"), [((2, 2), (1, 2), None), ((2, 2), (1, 2), 0),
                                                         ((2, 2), (1, 2), 10), ((2, 3), (0, 1), 4),
                                                         ((0, 3), (1, 1), 0)])
def test_as_strided_reads_the_base_storage_of_a_view(size, stride, offset):
    """A view's storage is its base's: the default offset is the view's own (5 here), an explicit one counts from
    the base's first element, past the view's end included."""
    base = np.arange(20, dtype=np.float32)
    v = tw.tensor(base)[5:15]
    got = tw.as_strided(v, size, stride, offset) if offset is not None else v.as_strided(size, stride)
    np.testing.assert_array_equal(got.numpy(), _strided(base, size, stride, 5 if offset is None else offset))


def test_as_strided_is_a_view_both_ways():
    """Writes through the view reach the base; the base's later writes reach the view (as torch's shared
    storage)."""
    x = tw.tensor(np.arange(9, dtype=np.float32).reshape(3, 3))
    v = x.as_strided((2, 2), (1, 2), 1)
    v.mul_(10)
    want = np.arange(9, dtype=np.float32)
    want[[1, 2, 3, 4]] *= 10
    np.testing.assert_array_equal(x.numpy().reshape(-1), want)
    x.add_(1)
    np.testing.assert_array_equal(v.numpy(), _strided(want + 1, (2, 2), (1, 2), 1))


def test_as_strided_gradient_sums_over_overlaps():
    x = tw.tensor(np.arange(9, dtype=np.float64), requires_grad=True)
    y = x.as_strided((3, 3), (1, 2), 0)  # positions 0..6, the middle ones twice or three times
    (g,) = tw.autograd.grad((y * y).sum(), [x])
    want = np.zeros(9)
    for i in np.ndindex(3, 3):
        p = i[0] + 2 * i[1]
        want[p] += 2 * p
    np.testing.assert_allclose(g.numpy(), want)


def test_as_strided_refuses_out_of_bounds_and_overlapping_writes():
    x = tw.tensor(np.zeros((3, 3), np.float32))
    with pytest.raises(ShapeError, match="out of bounds"):
        x.as_strided((4, 4), (4, 1))
    with pytest.raises(ShapeError, match="more than one element"):
        x.as_strided((2, 2), (0, 1)).add_(1)
    with pytest.raises(ShapeError, match="Negative strides"):
        x.as_strided((2,), (-1,), 4)


# -- embedding_bag and embedding's options ---------------------------------------------------------------------------

def _bag_ref(w, idx, bags, mode, psw=None, padding_idx=None):
    """The definition: per bag, the sum / mean / max of the rows it names (``padding_idx`` left out; an empty bag
    gives zeros)."""
    out = np.zeros((len(bags), w.shape[1]))
    for b, members in enumerate(bags):
        keep = [k for k in members if padding_idx is None or idx[k] != padding_idx]
        if not keep:
            continue
        rows = np.stack([w[idx[k]] * (1.0 if psw is None else psw[k]) for k in keep])
        out[b] = {"sum": rows.sum(0), "mean": rows.mean(0), "max": rows.max(0)}[mode]
    return out


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_with_offsets(mode):
    w = RNG.normal(size=(10, 4))
    idx = np.array([1, 2, 4, 5, 4, 3, 2, 9, 0])
    offsets = np.array([0, 3, 3, 7])  # bag 1 is empty
    bags = [range(0, 3), range(3, 3), range(3, 7), range(7, 9)]
    got = F.embedding_bag(tw.tensor(idx), tw.tensor(w), tw.tensor(offsets), mode=mode, padding_idx=4)
    np.testing.assert_allclose(got.numpy(), _bag_ref(w, idx, bags, mode, padding_idx=4), rtol=1e-12)
    last = F.embedding_bag(tw.tensor(idx), tw.tensor(w), tw.tensor(np.r_[offsets, 9]), mode=mode,
                           include_last_offset=True)
    np.testing.assert_allclose(last.numpy(), _bag_ref(w, idx, bags, mode), rtol=1e-12)


def test_embedding_bag_2d_weighted_sum_and_gradients():
    w = RNG.normal(size=(6, 3))
    idx = np.array([[0, 2, 2], [5, 1, 0]])
    psw = RNG.normal(size=(2, 3))
    wt = tw.tensor(w, requires_grad=True)
    pt = tw.tensor(psw, requires_grad=True)
    got = F.embedding_bag(tw.tensor(idx), wt, mode="sum", per_sample_weights=pt)
    flat = idx.reshape(-1)
    np.testing.assert_allclose(got.detach().numpy(), _bag_ref(w, flat, [range(0, 3), range(3, 6)], "sum",
                                                        psw.reshape(-1)))
    gw, gp = tw.autograd.grad(got.sum(), [wt, pt])
    want_w = np.zeros_like(w)
    np.add.at(want_w, flat, psw.reshape(-1)[:, None] * np.ones((1, 3)))
    np.testing.assert_allclose(gw.numpy(), want_w)
    np.testing.assert_allclose(gp.numpy(), w[idx].sum(-1))
    with pytest.raises(NotImplementedError, match="per_sample_weights"):
        F.embedding_bag(tw.tensor(idx), wt, mode="mean", per_sample_weights=pt)


def test_embedding_max_norm_renormalises_the_weight_in_place():
    w = np.array([[3.0, 4.0], [0.3, 0.4], [6.0, 8.0]])
    wt = tw.tensor(w)
    out = F.embedding(tw.tensor(np.array([0, 1, 0])), wt, max_norm=1.0)
    scaled = w.copy()
    scaled[0] *= 1.0 / (5.0 + 1e-7)  # row 2 is not looked up: left as it is
    np.testing.assert_allclose(wt.numpy(), scaled)
    np.testing.assert_allclose(out.numpy(), scaled[[0, 1, 0]])


def test_embedding_scale_grad_by_freq():
    wt = tw.tensor(RNG.normal(size=(4, 2)), requires_grad=True)
    idx = tw.tensor(np.array([[1, 1, 3], [1, 0, 3]]))
    out = F.embedding(idx, wt, scale_grad_by_freq=True)
    np.testing.assert_allclose(out.detach().numpy(), wt.detach().numpy()[idx.numpy()])
    (g,) = tw.autograd.grad(out.sum(), [wt])
    np.testing.assert_allclose(g.numpy(), [[1, 1], [1, 1], [0, 0], [1, 1]])  # each row's count / its count


def test_index_copy_method_and_in_place():
    x = tw.tensor(np.zeros((4, 2)))
    src = np.arange(4.0).reshape(2, 2)
    want = np.zeros((4, 2))
    want[[3, 0]] = src
    np.testing.assert_array_equal(x.index_copy(0, tw.tensor(np.array([3, 0])), tw.tensor(src)).numpy(), want)
    assert x.index_copy_(0, tw.tensor(np.array([3, 0])), tw.tensor(src)) is x
    np.testing.assert_array_equal(x.numpy(), want)


def test_distance_modules():
    a, b = RNG.normal(size=(3, 5)), RNG.normal(size=(3, 5))
    d = tw.nn.PairwiseDistance(p=1.0)(tw.tensor(a), tw.tensor(b))
    np.testing.assert_allclose(d.numpy(), np.abs(a - b + 1e-6).sum(1))
    c = tw.nn.CosineSimilarity(dim=1)(tw.tensor(a), tw.tensor(b))
    np.testing.assert_allclose(c.numpy(), (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1))


def test_as_strided_of_a_view_differentiates_the_view():
    """torch's gradient reaches the view it was given (a leaf view of a base without grad here): the elements inside
    the view are read from it, those outside from the base; a read wholly outside gives the view zeros."""
    base = tw.tensor(np.arange(20, dtype=np.float64))
    v = base[5:15].requires_grad_()
    w = tw.tensor(RNG.normal(size=(2, 2)))
    for off, inside in ((10, [5, 6, 7, 8]), (3, [0, 1]), (0, [])):
        y = tw.as_strided(v, (2, 2), (1, 2), off)
        np.testing.assert_array_equal(y.detach().numpy(), _strided(np.arange(20.0), (2, 2), (1, 2), off))
        (g,) = tw.autograd.grad((y * w).sum(), [v])
        want = np.zeros(10)
        for i in np.ndindex(2, 2):
            p = off + i[0] + 2 * i[1] - 5
            if 0 <= p < 10:
                want[p] += w.numpy()[i]
        np.testing.assert_allclose(g.numpy(), want)
        assert sorted(np.flatnonzero(want)) == sorted(inside)
