"""``tw.linalg``'s factorisations and solves (client/linalg_decomp.py, run on the client's LAPACK) and torch's older
names for them (client/linalg_legacy.py): values against numpy float64, the factorisations by what defines them
(a reconstruction, orthogonality, triangles), torch's result tuples, errors and ``info`` codes. Gradients against
central differences are in tests/client/test_special_linalg.py."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw

from ._ref import check

pytestmark = pytest.mark.usefixtures("session")

RNG = np.random.default_rng(7)


def _spd(n: int, batch=()) -> np.ndarray:
    x = RNG.standard_normal((*batch, n, n))
    return x @ np.swapaxes(x, -1, -2) + n * np.eye(n)


def _get(t) -> np.ndarray:
    return np.asarray(t.numpy())


def test_det_slogdet_logdet_inv():
    a = RNG.standard_normal((3, 4, 4))
    t = tw.tensor(a)
    check(tw.linalg.det(t), np.linalg.det(a), rtol=1e-10)
    sign, logabs = tw.linalg.slogdet(t)
    check(sign, np.linalg.slogdet(a)[0])
    check(logabs, np.linalg.slogdet(a)[1], rtol=1e-10)
    d = np.linalg.det(a)
    expect = np.where(d < 0, np.nan, np.log(np.abs(d)))
    np.testing.assert_allclose(_get(tw.logdet(t)), expect, rtol=1e-10)  # NaN for a negative determinant
    check(tw.linalg.inv(t), np.linalg.inv(a), rtol=1e-9)
    check(t.inverse(), np.linalg.inv(a), rtol=1e-9)
    f = tw.tensor(a.astype(np.float32))
    assert tw.linalg.det(f).dtype is tw.float32 and tw.linalg.det(tw.zeros(0, 0)).shape == ()


def test_singular_matrices_raise_or_report_info():
    a = np.array([[1.0, 2.0], [2.0, 4.0]])
    t = tw.tensor(a)
    with pytest.raises(tw.linalg.LinAlgError, match="singular"):
        tw.linalg.inv(t)
    with pytest.raises(tw.linalg.LinAlgError, match="singular"):
        tw.linalg.solve(t, tw.ones(2, dtype=tw.float64))
    inverse, info = tw.linalg.inv_ex(t)
    assert int(info) == 2 and np.isnan(_get(inverse)).all()
    assert float(tw.linalg.det(t)) == 0.0 and float(tw.linalg.slogdet(t).logabsdet) == -np.inf
    low, info = tw.linalg.cholesky_ex(tw.tensor([[4.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, 1.0]]))
    assert int(info) == 2  # the leading minor of order 2 is not positive-definite
    with pytest.raises(tw.linalg.LinAlgError, match="positive-definite"):
        tw.linalg.cholesky(tw.tensor([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(tw.DTypeError, match="floating point"):
        tw.linalg.inv(tw.tensor([[1, 0], [0, 1]]))
    w = tw.linalg.eigvals(t)  # complex results (tests/client/test_complex.py checks them)
    assert w.dtype is tw.complex128 and np.allclose(np.sort_complex(w.numpy()), np.sort_complex(np.linalg.eigvals(
        _get(t))))


def test_solve_forms_broadcast_and_vectors():
    a = RNG.standard_normal((2, 1, 3, 3)) + 3 * np.eye(3)
    b = RNG.standard_normal((4, 3, 2))
    x = tw.linalg.solve(tw.tensor(a), tw.tensor(b))
    check(x, np.linalg.solve(a, b), rtol=1e-9)
    assert x.shape == (2, 4, 3, 2)
    v = RNG.standard_normal((2, 1, 3))  # A's shape but the last: a batch of vectors
    check(tw.linalg.solve(tw.tensor(a), tw.tensor(v)), np.linalg.solve(a, v[..., None])[..., 0], rtol=1e-9)
    br = RNG.standard_normal((2, 1, 5, 3))  # X A = B
    check(tw.linalg.solve(tw.tensor(a), tw.tensor(br), left=False), br @ np.linalg.inv(a), rtol=1e-9)
    up = np.triu(a[0, 0])
    bb = RNG.standard_normal((3, 2))
    check(tw.linalg.solve_triangular(tw.tensor(a[0, 0]), tw.tensor(bb), upper=True), np.linalg.solve(up, bb),
          rtol=1e-9)
    unit = np.tril(a[0, 0], -1) + np.eye(3)
    check(tw.linalg.solve_triangular(tw.tensor(a[0, 0]), tw.tensor(bb.T), upper=False, left=False,
                                     unitriangular=True), bb.T @ np.linalg.inv(unit), rtol=1e-9)
    sol, coeff = tw.triangular_solve(tw.tensor(bb), tw.tensor(a[0, 0]), transpose=True)
    check(sol, np.linalg.solve(up.T, bb), rtol=1e-9)
    check(coeff, a[0, 0])


def test_cholesky_family():
    a = _spd(4, (2,))
    low = tw.linalg.cholesky(tw.tensor(a))
    check(low, np.linalg.cholesky(a), rtol=1e-10)
    check(tw.linalg.cholesky(tw.tensor(a), upper=True), np.swapaxes(np.linalg.cholesky(a), -1, -2), rtol=1e-10)
    b = RNG.standard_normal((2, 4, 3))
    check(tw.cholesky_solve(tw.tensor(b), low), np.linalg.solve(a, b), rtol=1e-9)
    check(tw.cholesky_solve(tw.tensor(b), low.mT, upper=True), np.linalg.solve(a, b), rtol=1e-9)
    check(tw.cholesky_inverse(low), np.linalg.inv(a), rtol=1e-9)


def test_eigh_svd_qr_by_their_definitions():
    s = _spd(5)
    w, v = tw.linalg.eigh(tw.tensor(s))
    check(w, np.linalg.eigvalsh(s), rtol=1e-10)
    vv = _get(v)
    np.testing.assert_allclose(vv @ np.diag(_get(w)) @ vv.T, s, atol=1e-9)
    check(tw.linalg.eigvalsh(tw.tensor(s), UPLO="U"), np.linalg.eigvalsh(s), rtol=1e-10)
    a = RNG.standard_normal((2, 5, 3))
    u, sv, vh = tw.linalg.svd(tw.tensor(a), full_matrices=False)
    check(sv, np.linalg.svd(a)[1], rtol=1e-10)
    np.testing.assert_allclose(_get(u) @ (_get(sv)[..., None] * _get(vh)), a, atol=1e-10)
    u_full = _get(tw.linalg.svd(tw.tensor(a)).U)
    assert u_full.shape == (2, 5, 5)
    np.testing.assert_allclose(np.swapaxes(u_full, -1, -2) @ u_full, np.broadcast_to(np.eye(5), (2, 5, 5)),
                               atol=1e-10)
    uu, ss, vv = tw.svd(tw.tensor(a))  # torch.svd: V, not Vh
    np.testing.assert_allclose(_get(uu) @ (_get(ss)[..., None] * np.swapaxes(_get(vv), -1, -2)), a, atol=1e-10)
    assert float(tw.svd(tw.tensor(a), compute_uv=False).U.abs().sum()) == 0.0
    q, r = tw.linalg.qr(tw.tensor(a))
    check(q, np.linalg.qr(a)[0], rtol=1e-9)  # geqrf's Householder convention, as torch's
    check(r, np.linalg.qr(a)[1], rtol=1e-9)
    q, r = tw.linalg.qr(tw.tensor(a), mode="r")
    assert q.shape == (0,) and r.shape == (2, 3, 3)
    assert tw.linalg.qr(tw.tensor(a), mode="complete").Q.shape == (2, 5, 5)


def test_lu_ldl_householder_against_lapack():
    lapack = pytest.importorskip("scipy.linalg.lapack", reason="LU and LDL pivots come from scipy (pip install scipy)")

    a = RNG.standard_normal((3, 4, 4))
    lu, piv = tw.linalg.lu_factor(tw.tensor(a))
    for k in range(3):
        ref_lu, ref_piv, _ = lapack.dgetrf(a[k])
        np.testing.assert_allclose(_get(lu)[k], ref_lu, rtol=1e-12)
        np.testing.assert_array_equal(_get(piv)[k], ref_piv + 1)
    assert piv.dtype is tw.int32
    p, low, up = tw.linalg.lu(tw.tensor(a))
    np.testing.assert_allclose(_get(p) @ _get(low) @ _get(up), a, atol=1e-12)
    b = RNG.standard_normal((3, 4, 2))
    check(tw.linalg.lu_solve(lu, piv, tw.tensor(b)), np.linalg.solve(a, b), rtol=1e-9)
    check(tw.linalg.lu_solve(lu, piv, tw.tensor(b), adjoint=True), np.linalg.solve(np.swapaxes(a, -1, -2), b),
          rtol=1e-9)
    bt = np.swapaxes(b, -1, -2)
    check(tw.linalg.lu_solve(lu, piv, tw.tensor(bt), left=False), bt @ np.linalg.inv(a), rtol=1e-9)
    wide = RNG.standard_normal((3, 5))
    p, low, up = tw.linalg.lu(tw.tensor(wide))
    assert (low.shape, up.shape) == ((3, 3), (3, 5))
    np.testing.assert_allclose(_get(p) @ _get(low) @ _get(up), wide, atol=1e-12)
    sym = a + np.swapaxes(a, -1, -2)
    ld, piv = tw.linalg.ldl_factor(tw.tensor(sym))
    check(tw.linalg.ldl_solve(ld, piv, tw.tensor(b)), np.linalg.solve(sym, b), rtol=1e-8)
    h, tau = tw.geqrf(tw.tensor(a))
    check(tw.linalg.householder_product(h, tau), np.linalg.qr(a)[0], rtol=1e-9)
    q_full = np.linalg.qr(a)[0]
    check(tw.ormqr(h, tau, tw.tensor(b)), q_full @ b, rtol=1e-9)
    check(tw.ormqr(h, tau, tw.tensor(b), transpose=True), np.swapaxes(q_full, -1, -2) @ b, rtol=1e-9)
    check(tw.ormqr(h, tau, tw.tensor(bt), left=False), bt @ q_full, rtol=1e-9)


def test_pinv_rank_cond_lstsq_norms():
    a = RNG.standard_normal((6, 2)) @ RNG.standard_normal((2, 4))  # rank 2
    t = tw.tensor(a)
    check(tw.linalg.pinv(t), np.linalg.pinv(a), rtol=1e-8, atol=1e-10)
    check(tw.pinverse(t), np.linalg.pinv(a, rcond=1e-15), rtol=1e-6, atol=1e-8)
    assert int(tw.linalg.matrix_rank(t)) == 2
    assert int(tw.linalg.matrix_rank(t, atol=1e9)) == 0
    s = _spd(4)
    check(tw.linalg.pinv(tw.tensor(s), hermitian=True), np.linalg.inv(s), rtol=1e-9)
    assert int(tw.linalg.matrix_rank(tw.tensor(s), hermitian=True)) == 4
    sq = RNG.standard_normal((4, 4))
    for p in (None, 2, -2, 1, -1, np.inf, -np.inf, "fro", "nuc"):
        check(tw.linalg.cond(tw.tensor(sq), p), np.linalg.cond(sq, p), rtol=1e-8)
    for o in ("nuc", 2, -2):
        check(tw.linalg.matrix_norm(tw.tensor(sq), o), np.linalg.norm(sq, o), rtol=1e-10)
    check(tw.tensor(sq).norm("nuc"), np.linalg.norm(sq, "nuc"), rtol=1e-10)
    check(tw.linalg.matrix_power(tw.tensor(sq), -2), np.linalg.matrix_power(sq, -2), rtol=1e-8)
    tall, rhs = RNG.standard_normal((2, 6, 3)), RNG.standard_normal((2, 6, 2))
    x, res, rank, sv = tw.linalg.lstsq(tw.tensor(tall), tw.tensor(rhs), driver="gelsd")
    ref = np.linalg.lstsq(tall[0], rhs[0], rcond=None)
    check(x[0], ref[0], rtol=1e-9)
    check(res[0], ref[1], rtol=1e-9)
    assert rank.dtype is tw.int64 and _get(rank).tolist() == [3, 3] and sv.shape == (2, 3)
    x, res, rank, sv = tw.linalg.lstsq(tw.tensor(tall), tw.tensor(rhs))  # gelsy: no residuals, no values
    assert (res.shape, rank.shape, sv.shape) == ((0,), (2,), (0,))


def test_tensorinv_tensorsolve_lowrank():
    a = RNG.standard_normal((4, 6, 8, 3))
    inv = tw.linalg.tensorinv(tw.tensor(a), ind=2)
    check(inv, np.linalg.tensorinv(a, ind=2), rtol=1e-8)
    b = RNG.standard_normal((4, 6))
    check(tw.linalg.tensorsolve(tw.tensor(a), tw.tensor(b)), np.linalg.tensorsolve(a, b), rtol=1e-8)
    m = RNG.standard_normal((7, 5))
    u, s, v = tw.svd_lowrank(tw.tensor(m), q=2)
    assert (u.shape, s.shape, v.shape) == ((7, 2), (2,), (5, 2))
    check(s, np.linalg.svd(m)[1][:2], rtol=1e-10)
    u, s, v = tw.pca_lowrank(tw.tensor(m), q=3)
    check(s, np.linalg.svd(m - m.mean(0))[1][:3], rtol=1e-10)


def test_empty_matrices():
    e = tw.zeros(2, 0, 0, dtype=tw.float64)
    assert _get(tw.linalg.det(e)).tolist() == [1.0, 1.0]
    assert tw.linalg.inv(e).shape == (2, 0, 0)
    lu, piv = tw.linalg.lu_factor(e)
    assert (lu.shape, piv.shape) == ((2, 0, 0), (2, 0))
    assert tw.linalg.lu(e).P.shape == (2, 0, 0)
    assert tw.linalg.ldl_solve(*tw.linalg.ldl_factor(e), tw.zeros(2, 0, 3, dtype=tw.float64)).shape == (2, 0, 3)
    assert tw.linalg.pinv(tw.zeros(3, 0)).shape == (0, 3)
    assert tw.linalg.svd(tw.zeros(0, 3)).Vh.shape == (3, 3)
