"""sort, argsort, msort, topk, kthvalue, unique and multinomial against PyTorch (client/sorting.py)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw

torch = pytest.importorskip("torch", reason="PyTorch is the reference here (pip install torch==2.13.0)")

pytestmark = pytest.mark.usefixtures("session")


def _data(dtype=np.float32, shape=(4, 9), seed=0):
    x = np.round(np.random.default_rng(seed).standard_normal(shape) * 2).astype(dtype)  # many ties
    if np.dtype(dtype).kind == "f":
        x.reshape(-1)[[2, 11]] = np.nan
        x.reshape(-1)[5] = np.inf
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32])
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_matches_torch_stable(dtype, dim, descending):
    x = _data(dtype)
    got = tw.sort(tw.tensor(x), dim=dim, descending=descending)
    want = torch.sort(torch.tensor(x), dim=dim, descending=descending, stable=True)
    np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())
    np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())
    np.testing.assert_array_equal(tw.tensor(x).argsort(dim, descending).numpy(),
                                  torch.argsort(torch.tensor(x), dim=dim, descending=descending, stable=True).numpy())


def test_sort_of_bool_float16_and_0d():
    b = np.array([True, False, True, False, False])
    np.testing.assert_array_equal(tw.sort(tw.tensor(b)).indices.numpy(),
                                  torch.sort(torch.tensor(b), stable=True).indices.numpy())
    h = _data(np.float16)
    np.testing.assert_array_equal(tw.tensor(h).sort(1).values.numpy(), torch.tensor(h).sort(1).values.numpy())
    s = tw.sort(tw.tensor(3.0))
    assert s.values.item() == 3.0 and s.indices.item() == 0
    np.testing.assert_array_equal(tw.msort(tw.tensor(_data())).numpy(), torch.msort(torch.tensor(_data())).numpy())


@pytest.mark.parametrize("largest", [True, False])
def test_topk_matches_torch(largest):
    x = np.random.default_rng(1).permutation(40).reshape(4, 10).astype(np.float32)  # no ties: indices are defined
    got = tw.tensor(x).topk(3, dim=1, largest=largest)
    want = torch.tensor(x).topk(3, dim=1, largest=largest)
    np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())
    np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())
    got0 = tw.topk(tw.tensor(x), 2, dim=0)
    np.testing.assert_array_equal(got0.values.numpy(), torch.topk(torch.tensor(x), 2, dim=0).values.numpy())
    with pytest.raises(tw.ShapeError, match="out of range"):
        tw.tensor(x).topk(11)


def test_topk_counts_nan_as_largest():
    x = np.array([1.0, np.nan, 3.0, 2.0], np.float32)
    np.testing.assert_array_equal(tw.tensor(x).topk(2).values.numpy(), torch.tensor(x).topk(2).values.numpy())


@pytest.mark.parametrize("keepdim", [False, True])
def test_kthvalue_matches_torch(keepdim):
    x = np.random.default_rng(2).permutation(36).reshape(4, 9).astype(np.float64)
    for dim, k in ((1, 1), (1, 5), (0, 4), (-1, 9)):
        got = tw.tensor(x).kthvalue(k, dim, keepdim)
        want = torch.tensor(x).kthvalue(k, dim, keepdim)
        np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())
        np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())
    with pytest.raises(tw.ShapeError, match="out of range"):
        tw.tensor(x).kthvalue(0)


def test_sort_values_carry_gradients():
    x = _data(np.float64, (3, 5), seed=3)
    x[np.isnan(x) | np.isinf(x)] = 7.0
    x = x + np.arange(15).reshape(3, 5) * 1e-3  # no ties: the gradient is defined
    a = tw.tensor(x, requires_grad=True)
    t = torch.tensor(x, requires_grad=True)
    w = np.linspace(-1, 1, 6).reshape(3, 2)
    (a.sort(1, descending=True).values[:, :2] * tw.tensor(w)).sum().backward()
    (t.sort(1, descending=True).values[:, :2] * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy())
    b = tw.tensor(x, requires_grad=True)
    b.topk(2).values.sum().backward()
    assert b.grad.numpy().sum() == 6.0


@pytest.mark.parametrize("kw", [{}, {"return_inverse": True}, {"return_counts": True},
                                {"return_inverse": True, "return_counts": True}])
def test_unique_matches_torch(kw):
    x = np.array([[3, 1, 3], [2, 1, 7]])
    got = tw.unique(tw.tensor(x), **kw)
    want = torch.unique(torch.tensor(x), **kw)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w.numpy())
    rows = np.array([[1, 2], [0, 5], [1, 2]])
    np.testing.assert_array_equal(tw.tensor(rows).unique(dim=0).numpy(), torch.tensor(rows).unique(dim=0).numpy())


def test_multinomial_with_replacement_follows_the_weights():
    tw.manual_seed(0)
    p = tw.tensor([1.0, 0.0, 6.0, 3.0])  # unnormalised, as torch accepts
    s = tw.multinomial(p, 20000, replacement=True).numpy()
    assert s.dtype == np.int64 and s.shape == (20000,)
    freq = np.bincount(s, minlength=4) / 20000
    assert freq[1] == 0.0
    np.testing.assert_allclose(freq, [0.1, 0.0, 0.6, 0.3], atol=0.015)  # ~4.5 standard deviations
    rows = tw.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 2.0]]).multinomial(50, replacement=True).numpy()
    assert rows.shape == (2, 50) and set(rows[0]) <= {0, 1} and set(rows[1]) == {2}


def test_multinomial_without_replacement():
    tw.manual_seed(1)
    p = tw.tensor([0.1, 0.0, 0.6, 0.3]).expand(4000, 4).contiguous()
    s = tw.multinomial(p, 2).numpy()
    assert s.shape == (4000, 2) and (s[:, 0] != s[:, 1]).all() and not (s == 1).any()
    np.testing.assert_allclose(np.bincount(s[:, 0], minlength=4) / 4000, [0.1, 0.0, 0.6, 0.3], atol=0.025)
    # the second draw, given the first was 2: 0 with 0.1 / 0.4, 3 with 0.3 / 0.4 (as sequential draws)
    second = s[s[:, 0] == 2, 1]
    np.testing.assert_allclose((second == 3).mean(), 0.75, atol=0.04)
    assert sorted(tw.multinomial(tw.tensor([1.0, 2.0, 3.0]), 3).tolist()) == [0, 1, 2]
    with pytest.raises(ValueError, match="without replacement"):
        tw.multinomial(tw.tensor([1.0, 2.0]), 3)
    with pytest.raises(TypeError, match="floating"):
        tw.multinomial(tw.tensor([1, 2]), 1)
