"""Sparse COO and CSR tensors and ``tw.sparse`` (client/sparse.py, issue 33) against torch's CPU build and scipy in
float64: construction, coalescing, conversions, products, sums, arithmetic, softmax, and gradients through them."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw

torch = pytest.importorskip("torch", reason="PyTorch is the reference here (pip install torch==2.13.0)")
sp = pytest.importorskip("scipy.sparse")

pytestmark = pytest.mark.usefixtures("session")

# an uncoalesced COO matrix: (0, 2) appears twice, rows 0 and 1 of a 2 x 3 matrix
I = np.array([[0, 1, 1, 0], [2, 0, 2, 2]], np.int64)
V = np.array([3.0, 4.0, 5.0, 1.0], np.float32)


def _coo(dtype=np.float32, requires_grad=False):
    return (tw.sparse_coo_tensor(tw.tensor(I), tw.tensor(V.astype(dtype)), (2, 3), requires_grad=requires_grad),
            torch.sparse_coo_tensor(torch.tensor(I), torch.tensor(V.astype(dtype)), (2, 3),
                                    requires_grad=requires_grad))


def _random_coo(rng, shape, nnz, dup=True):
    """Random indices (with repeats when ``dup``) and float32 values, as numpy arrays."""
    idx = np.stack([rng.integers(0, n, nnz) for n in shape]).astype(np.int64)
    if dup:
        idx[:, -2:] = idx[:, :2]  # two repeated positions
    return idx, rng.standard_normal(nnz).astype(np.float32)


def _eq(got: tw.Tensor, want: torch.Tensor, rtol=1e-5, atol=1e-6):
    """Same layout, shape, dtype and (dense) values."""
    assert str(got.layout).removeprefix("tensorwire.") == str(want.layout).removeprefix("torch.")
    assert tuple(got.shape) == tuple(want.shape)
    assert got.dtype.name == str(want.dtype).removeprefix("torch.")
    g = got.detach().to_dense().numpy() if got.layout != "strided" else got.detach().numpy()
    w = want.detach().to_dense().numpy() if want.layout is not torch.strided else want.detach().numpy()
    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


# -- what a sparse tensor is -----------------------------------------------------------------------------------------

def test_properties_match_torch():
    s, t = _coo()
    assert (s.is_sparse, s.is_sparse_csr, s.layout, s._nnz(), s.is_coalesced(), s.sparse_dim(), s.dense_dim()) == (
        t.is_sparse, t.is_sparse_csr, tw.sparse_coo, t._nnz(), t.is_coalesced(), t.sparse_dim(), t.dense_dim())
    assert tuple(s.shape) == tuple(t.shape) and s.dim() == 2 and s.dtype is tw.float32 and tw.is_tensor(s)
    np.testing.assert_array_equal(s._indices().numpy(), t._indices().numpy())
    np.testing.assert_array_equal(s._values().numpy(), t._values().numpy())
    assert "indices=tensor([[0, 1, 1, 0],\n                       [2, 0, 2, 2]])" in repr(s)
    assert "nnz=4, layout=tensorwire.sparse_coo" in repr(s)
    d = tw.ones(2)
    assert (d.layout, d.is_sparse, d.is_sparse_csr) == (tw.strided, False, False)
    assert d.layout == "strided" and repr(tw.sparse_csr) == "tensorwire.sparse_csr" and isinstance(d.layout, tw.layout)


def test_size_is_inferred_from_the_indices():
    s = tw.sparse_coo_tensor(I, V)
    assert tuple(s.shape) == tuple(torch.sparse_coo_tensor(torch.tensor(I), torch.tensor(V)).shape) == (2, 3)
    assert tw.sparse_coo_tensor(I, V, dtype=tw.float64).dtype is tw.float64


def test_invalid_arguments_are_refused_as_torch():
    with pytest.raises(RuntimeError, match="same nnz"):
        tw.sparse_coo_tensor(tw.tensor([[0, 1]]), tw.tensor([1.0]), (2,))
    with pytest.raises(RuntimeError, match="len\\(size\\) == sparse_dim \\+ dense_dim"):
        tw.sparse_coo_tensor(tw.tensor([[0, 1], [0, 1]]), tw.tensor([1.0, 2.0]), (2,))
    with pytest.raises(IndexError, match="out of bounds"):
        tw.sparse_coo_tensor(tw.tensor([[0, 5]]), tw.tensor([1.0, 2.0]), (3,), check_invariants=True)
    s, _ = _coo()
    with pytest.raises(RuntimeError, match="coalesce"):
        s.indices()
    with pytest.raises(RuntimeError, match="coalesce"):
        s.values()
    with pytest.raises(RuntimeError, match="sparse row compressed"):
        s.crow_indices()
    with pytest.raises(TypeError, match="to_dense"):
        s.numpy()


def test_dense_ops_refuse_a_sparse_operand_naming_to_dense():
    s, _ = _coo()
    with pytest.raises(NotImplementedError, match="to_dense"):
        tw.exp(s)
    with pytest.raises(NotImplementedError, match="to_dense"):
        s.reshape(6)
    with pytest.raises(RuntimeError, match="add\\(dense, sparse\\)"):
        s + tw.ones(2, 3)


# -- coalescing and conversions --------------------------------------------------------------------------------------

def test_coalesce_matches_torch_and_scipy():
    rng = np.random.default_rng(0)
    idx, val = _random_coo(rng, (5, 7), 30)
    s = tw.sparse_coo_tensor(idx, val, (5, 7))
    c, tc = s.coalesce(), torch.sparse_coo_tensor(torch.tensor(idx), torch.tensor(val), (5, 7)).coalesce()
    assert c.is_coalesced() and c.coalesce() is c
    np.testing.assert_array_equal(c.indices().numpy(), tc.indices().numpy())
    ref = sp.coo_matrix((val.astype(np.float64), (idx[0], idx[1])), shape=(5, 7)).tocsr()
    ref.sum_duplicates()
    np.testing.assert_allclose(c.values().numpy(), ref.data, rtol=1e-6, atol=1e-6)


def test_to_dense_sums_duplicates_as_scipy():
    rng = np.random.default_rng(1)
    idx, val = _random_coo(rng, (4, 6), 20)
    got = tw.sparse_coo_tensor(idx, val, (4, 6)).to_dense()
    ref = sp.coo_matrix((val.astype(np.float64), (idx[0], idx[1])), shape=(4, 6)).toarray()
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-6, atol=1e-6)


def test_hybrid_and_3d_tensors_to_dense():
    rng = np.random.default_rng(2)
    idx = np.array([[0, 2, 0], [1, 0, 1]], np.int64)
    val = rng.standard_normal((3, 4)).astype(np.float32)  # a dense dim of 4
    got = tw.sparse_coo_tensor(idx, val, (3, 2, 4))
    want = torch.sparse_coo_tensor(torch.tensor(idx), torch.tensor(val), (3, 2, 4))
    assert (got.sparse_dim(), got.dense_dim()) == (2, 1)
    _eq(got, want)
    _eq(got.coalesce(), want.coalesce())


@pytest.mark.parametrize("sparse_dim", [None, 1, 2])
def test_to_sparse_matches_torch(sparse_dim):
    x = np.array([[0.0, 1.5, 0.0], [-2.0, 0.0, -0.0], [0.0, 0.0, 0.0]], np.float32)
    args = () if sparse_dim is None else (sparse_dim,)
    got, want = tw.tensor(x).to_sparse(*args), torch.tensor(x).to_sparse(*args)
    assert got.is_coalesced() and got._nnz() == want._nnz()
    np.testing.assert_array_equal(got.indices().numpy(), want.indices().numpy())
    np.testing.assert_array_equal(got.values().numpy(), want.values().numpy())
    _eq(got, want)


def test_to_sparse_of_zeros_and_int_and_bool():
    z = tw.zeros(2, 3).to_sparse()
    assert z._nnz() == 0 and z.is_coalesced() and z.to_dense().numpy().sum() == 0
    for x in (np.array([[0, 3], [-1, 0]], np.int64), np.array([[True, False], [False, True]])):
        _eq(tw.tensor(x).to_sparse(), torch.tensor(x).to_sparse())


def test_csr_matches_torch():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((6, 5)) * (rng.random((6, 5)) < 0.4)).astype(np.float32)
    x[2] = 0  # an empty row
    got, want = tw.tensor(x).to_sparse_csr(), torch.tensor(x).to_sparse_csr()
    assert got.layout == tw.sparse_csr and got.is_sparse_csr and not got.is_sparse
    for a, b in ((got.crow_indices(), want.crow_indices()), (got.col_indices(), want.col_indices()),
                 (got.values(), want.values())):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    made = tw.sparse_csr_tensor(want.crow_indices().numpy(), want.col_indices().numpy(), want.values().numpy(),
                                (6, 5))
    np.testing.assert_array_equal(made.to_dense().numpy(), x)
    np.testing.assert_array_equal(made.to_sparse().to_dense().numpy(), x)
    assert "crow_indices=tensor([" in repr(made) and "layout=tensorwire.sparse_csr" in repr(made)


# -- products ----------------------------------------------------------------------------------------------------------

def test_products_with_a_dense_matrix_match_scipy():
    rng = np.random.default_rng(4)
    idx, val = _random_coo(rng, (6, 8), 25)
    d = rng.standard_normal((8, 3)).astype(np.float32)
    e = rng.standard_normal((4, 6)).astype(np.float32)
    v = rng.standard_normal(8).astype(np.float32)
    a = sp.coo_matrix((val.astype(np.float64), (idx[0], idx[1])), shape=(6, 8)).toarray()
    s = tw.sparse_coo_tensor(idx, val, (6, 8))
    ref = a @ d.astype(np.float64)
    for got in (tw.sparse.mm(s, tw.tensor(d)), tw.spmm(s, tw.tensor(d)), tw.mm(s, tw.tensor(d)), s @ tw.tensor(d),
                tw.matmul(s, tw.tensor(d)), s.coalesce().to_sparse_csr() @ tw.tensor(d)):
        assert got.layout == "strided"
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose((tw.tensor(e) @ s).numpy(), e.astype(np.float64) @ a, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tw.mm(tw.tensor(e), s).numpy(), e.astype(np.float64) @ a, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose((s @ tw.tensor(v)).numpy(), a @ v.astype(np.float64), rtol=1e-5, atol=1e-5)
    w = rng.standard_normal((6, 3)).astype(np.float32)
    np.testing.assert_allclose(tw.sparse.addmm(tw.tensor(w), s, tw.tensor(d), beta=0.5, alpha=2.0).numpy(),
                               0.5 * w + 2.0 * ref, rtol=1e-5, atol=1e-5)
    with pytest.raises(tw.ShapeError, match="cannot be multiplied"):
        tw.sparse.mm(s, tw.tensor(e))


@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "amin"])
def test_csr_mm_reduce_matches_torch(reduce):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((7, 6)) * (rng.random((7, 6)) < 0.5)).astype(np.float32)
    x[3] = 0  # an empty row: zeros in every reduction
    d = rng.standard_normal((6, 4)).astype(np.float32)
    got = tw.sparse.mm(tw.tensor(x).to_sparse_csr(), tw.tensor(d), reduce)
    want = torch.sparse.mm(torch.tensor(x).to_sparse_csr(), torch.tensor(d), reduce)
    _eq(got, want)


def test_sampled_addmm_matches_torch():
    rng = np.random.default_rng(6)
    c = (rng.standard_normal((5, 4)) * (rng.random((5, 4)) < 0.5)).astype(np.float32)
    a, b = rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
    got = tw.sparse.sampled_addmm(tw.tensor(c).to_sparse_csr(), tw.tensor(a), tw.tensor(b), beta=0.3, alpha=1.7)
    want = torch.sparse.sampled_addmm(torch.tensor(c).to_sparse_csr(), torch.tensor(a), torch.tensor(b), beta=0.3,
                                      alpha=1.7)
    _eq(got, want)
    np.testing.assert_array_equal(got.col_indices().numpy(), want.col_indices().numpy())


# -- sums and arithmetic -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dim", [None, 0, 1, (0, 1), -1])
def test_sparse_sum_matches_torch(dim):
    s, t = _coo()
    args = () if dim is None else (dim,)
    got, want = tw.sparse.sum(s, *args), torch.sparse.sum(t, *args)
    _eq(got, want)
    _eq(s.sum(*args), t.sum(*args))
    if got.layout != "strided":
        assert got.is_coalesced() == want.is_coalesced()
        np.testing.assert_array_equal(got.indices().numpy(), want.indices().numpy())


def test_sum_over_a_dense_dim_of_a_hybrid_tensor():
    idx = np.array([[0, 2]], np.int64)
    val = np.arange(8, dtype=np.float32).reshape(2, 4)
    s = tw.sparse_coo_tensor(idx, val, (3, 4))
    t = torch.sparse_coo_tensor(torch.tensor(idx), torch.tensor(val), (3, 4))
    for dim in (0, 1):
        _eq(tw.sparse.sum(s, dim), torch.sparse.sum(t, dim))


def test_arithmetic_matches_torch():
    s, t = _coo()
    c, tc = s.coalesce(), t.coalesce()
    other = tw.sparse_coo_tensor([[1, 0], [1, 2]], [2.0, -1.0], (2, 3))
    tother = torch.sparse_coo_tensor(torch.tensor([[1, 0], [1, 2]]), torch.tensor([2.0, -1.0]), (2, 3))
    dense = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    # the sum of an uncoalesced operand is uncoalesced on both sides, its elements in another order (torch merges the
    # operands as if they were sorted; tensorwire concatenates them): the same tensor, compared by value
    for got, want in ((s + s, t + t), (s - other, t - tother), (s.add(other, alpha=3), t.add(tother, alpha=3))):
        _eq(got, want)
        assert not got.is_coalesced() and not want.is_coalesced()
    cases = [
        (c + c, tc + tc), (c + other.coalesce(), tc + tother.coalesce()),
        (s * 2.5, t * 2.5), (2.5 * s, 2.5 * t), (s / 4, t / 4), (-s, -t),
        (s * tw.tensor(dense), t * torch.tensor(dense)), (tw.tensor(dense) * s, torch.tensor(dense) * t),
        (tw.tensor(dense) + s, torch.tensor(dense) + t), (tw.tensor(dense) - s, torch.tensor(dense) - t),
        (c * other.coalesce(), tc * tother.coalesce()), (s * other, t * tother), (other * s, tother * t),
        (s * other.coalesce(), t * tother.coalesce()), (c * other, tc * tother), (s * s, t * t),
        (s.t(), t.t()), (s.transpose(0, 1), t.transpose(0, 1)),
    ]
    for got, want in cases:
        _eq(got, want)
        if got.layout == tw.sparse_coo:
            assert (got.is_coalesced(), got._nnz()) == (want.is_coalesced(), want._nnz())
    assert (c * 2).is_coalesced() and not s.t().is_coalesced()
    # (a dense tensor updated in place by a sparse one: Python asks the sparse operand's reflected ``__rsub__``)
    d1, d2, td = tw.tensor(dense), tw.tensor(dense), torch.tensor(dense)
    d1.sub_(s)
    d2 -= s
    td -= t
    _eq(d1, td)
    _eq(d2, td)
    s2, t2 = s.clone(), t.clone()
    s2 += other
    s2 *= 2
    t2 += tother
    t2 *= 2
    _eq(s2, t2)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        _coo(requires_grad=True)[0].mul_(2)


def test_values_as_lists_take_torchs_dtypes():
    assert tw.sparse_coo_tensor(tw.tensor(I), [1.0, 2.0, 3.0, 4.0]).dtype is tw.float32
    assert tw.sparse_coo_tensor(I.tolist(), [1, 2, 3, 4]).dtype is tw.int64
    assert tw.sparse_coo_tensor(I, V.astype(np.float64)).dtype is tw.float64


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dim", [0, 1])
def test_sparse_softmax_matches_torch(log, dim):
    rng = np.random.default_rng(7)
    idx, val = _random_coo(rng, (4, 5), 9)
    s = tw.sparse_coo_tensor(idx, val * 10, (4, 5))
    t = torch.sparse_coo_tensor(torch.tensor(idx), torch.tensor(val * 10), (4, 5))
    fn, tfn = (tw.sparse.log_softmax, torch.sparse.log_softmax) if log else (tw.sparse.softmax, torch.sparse.softmax)
    got, want = fn(s, dim), tfn(t, dim)
    np.testing.assert_array_equal(got.indices().numpy(), want.coalesce().indices().numpy())
    np.testing.assert_allclose(got.values().numpy(), want.coalesce().values().numpy(), rtol=1e-5, atol=1e-6)


# -- gradients ---------------------------------------------------------------------------------------------------------

def test_sparse_mm_gradient_of_a_sparse_leaf_and_the_dense_operand_matches_torch():
    s, t = _coo(requires_grad=True)
    d = np.random.default_rng(8).standard_normal((3, 2)).astype(np.float32)
    dw, tdw = tw.tensor(d, requires_grad=True), torch.tensor(d, requires_grad=True)
    assert s.requires_grad and s.is_leaf
    (tw.sparse.mm(s, dw) ** 2).sum().backward()
    (torch.sparse.mm(t, tdw) ** 2).sum().backward()
    _eq(dw.grad, tdw.grad)
    g, tg = s.grad, t.grad
    # each specified element once, in order (torch's flag says uncoalesced here, and coalesced after sparse.sum)
    assert g.layout == tw.sparse_coo and g._nnz() == tg._nnz() == 3
    np.testing.assert_array_equal(g._indices().numpy(), tg._indices().numpy())
    np.testing.assert_allclose(g._values().numpy(), tg._values().numpy(), rtol=1e-5, atol=1e-6)
    s.grad = None
    assert s.grad is None


def test_values_given_to_sparse_coo_tensor_get_each_entrys_gradient():
    v, tv = tw.tensor(V, requires_grad=True), torch.tensor(V, requires_grad=True)
    d = np.random.default_rng(9).standard_normal((3, 2)).astype(np.float32)
    for fn, tfn in ((lambda s: tw.mm(s, tw.tensor(d)), lambda t: torch.mm(t, torch.tensor(d))),
                    (lambda s: tw.sparse.sum(s * 3.0, 1).to_dense(),
                     lambda t: torch.sparse.sum(t * 3.0, 1).to_dense())):
        s = tw.sparse_coo_tensor(tw.tensor(I), v, (2, 3))
        t = torch.sparse_coo_tensor(torch.tensor(I), tv, (2, 3))
        assert not s.is_leaf and s.grad_fn is not None
        fn(s).exp().sum().backward()
        tfn(t).exp().sum().backward()
    np.testing.assert_allclose(v.grad.numpy(), tv.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_autograd_grad_of_a_csr_leaf_is_csr_at_its_elements():
    rng = np.random.default_rng(10)
    x = (rng.standard_normal((5, 5)) * (rng.random((5, 5)) < 0.5)).astype(np.float32)
    d = rng.standard_normal((5, 3)).astype(np.float32)
    c = tw.tensor(x).to_sparse_csr().requires_grad_()
    tc = torch.tensor(x).to_sparse_csr().requires_grad_()
    dw, tdw = tw.tensor(d, requires_grad=True), torch.tensor(d, requires_grad=True)
    for reduce in ("sum", "mean"):
        g = tw.autograd.grad((tw.sparse.mm(c, dw, reduce) ** 2).sum(), [c, dw])
        tg = torch.autograd.grad((torch.sparse.mm(tc, tdw, reduce) ** 2).sum(), [tc, tdw])
        assert g[0].layout == tw.sparse_csr
        _eq(g[0], tg[0], rtol=1e-4)
        _eq(g[1], tg[1], rtol=1e-4)


def test_to_dense_and_to_sparse_gradients_against_finite_differences():
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((4, 3)) * (rng.random((4, 3)) < 0.6)).astype(np.float64)
    w = rng.standard_normal((4, 3))

    def f(a):
        return float(np.sum(np.sin(a) * w))

    xt = tw.tensor(x, requires_grad=True)
    loss = (tw.sin(xt.to_sparse().to_dense()) * tw.tensor(w)).sum()
    loss.backward()
    eps = 1e-6
    fd = np.zeros_like(x)
    for k in range(x.size):
        e = np.zeros(x.size)
        e[k] = eps
        fd.reshape(-1)[k] = (f(x + e.reshape(x.shape)) - f(x - e.reshape(x.shape))) / (2 * eps)
    fd[x == 0] = 0  # to_sparse keeps the nonzeros: the zeros get no gradient, as torch's
    np.testing.assert_allclose(xt.grad.numpy(), fd, rtol=1e-6, atol=1e-8)


def test_mm_of_a_sparse_leaf_that_requires_grad_is_refused():
    s, _ = _coo(requires_grad=True)
    with pytest.raises(NotImplementedError, match="tw.sparse.mm"):
        tw.mm(s, tw.ones(3, 2))
    with tw.no_grad():
        assert tuple(tw.mm(s, tw.ones(3, 2)).shape) == (2, 2)
    assert tuple(tw.mm(s.detach(), tw.ones(3, 2)).shape) == (2, 2)
