"""``tw.special``, ``tw.linalg`` and the derived math, array and functional ops composed for issue 33: values
against float64 references written from the definitions (Python's ``math``, numpy's polynomial classes), the edge
cases torch specifies (infinities, NaN, -0.0, ties, beta=0), and gradients against central differences."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.polynomial import chebyshev as C
from numpy.polynomial import hermite as H
from numpy.polynomial import hermite_e as HE
from numpy.polynomial import laguerre as L
from numpy.polynomial import legendre as P

import tensorwire as tw
import tensorwire.nn.functional as F

from ._ref import check

pytestmark = pytest.mark.usefixtures("session")


def _f32(a) -> tw.Tensor:
    return tw.tensor(np.asarray(a, dtype=np.float32))


# -- special ---------------------------------------------------------------------------------------------------------

def _i1_series(v: float) -> float:
    """I1 by its series Σ (v/2)^(2k+1) / (k! (k+1)!), each term from the previous one."""
    term, total = v / 2, 0.0
    for k in range(200):
        total += term
        term *= (v / 2) ** 2 / ((k + 1) * (k + 2))
    return total


def test_bessel_i0_i1_and_scaled():
    x = np.array([-30.0, -8.5, -8.0, -1.0, 0.0, 0.5, 3.0, 8.0, 9.0, 40.0])
    i0 = np.i0(x)
    i1 = np.array([_i1_series(v) for v in x])
    t = tw.tensor(x)
    check(tw.special.i0(t), i0, dtype="float64", rtol=1e-12)
    check(tw.i0(t), i0, dtype="float64", rtol=1e-12)
    check(tw.special.i0e(t), i0 * np.exp(-np.abs(x)), rtol=1e-12)
    check(tw.special.i1(t), i1, rtol=1e-12)
    check(tw.special.i1e(_f32(x)), i1 * np.exp(-np.abs(x)), dtype="float32")
    check(tw.special.i0(tw.tensor([2, -3])), np.i0([2.0, -3.0]), dtype="float32")  # integers: the default float


def _log_ndtr_ref(v: float) -> float:
    """log Φ(v): the asymptotic series where erfc underflows, else from math.erfc."""
    if v <= -20:
        return -v * v / 2 - math.log(-v) - 0.5 * math.log(2 * math.pi) + math.log1p(-1 / v**2 + 3 / v**4 - 15 / v**6)
    if v < 5:
        return math.log(0.5 * math.erfc(-v / math.sqrt(2)))
    return math.log1p(-0.5 * math.erfc(v / math.sqrt(2)))


def test_erfcx_log_ndtr_ndtr_far_into_the_tails():
    x = np.array([-30.0, -10.0, -3.0, -0.5, 0.0, 0.7, 2.0, 5.0, 12.0])
    erfcx = [math.inf if v * v > 700 else math.exp(v * v) * math.erfc(v) for v in x]  # overflows below -26.5
    check(tw.special.erfcx(tw.tensor(x)), erfcx, rtol=2e-7)
    big = 1 / (50 * math.sqrt(math.pi)) * (1 - 1 / 5000 + 3 / (4 * 50 ** 4))  # the asymptotic series
    check(tw.special.erfcx(_f32([50.0, float("nan")])), [big, math.nan])
    y = np.array([-60.0, -20.0, -5.0, -1.0, 0.0, 1.5, 6.0, 20.0])
    log_ndtr = [_log_ndtr_ref(v) for v in y]
    check(tw.special.log_ndtr(tw.tensor(y)), log_ndtr, rtol=2e-7, atol=1e-30)
    check(tw.special.ndtr(tw.tensor(y)), [0.5 * math.erfc(-v / math.sqrt(2)) for v in y], rtol=2e-7, atol=1e-300)


def test_incomplete_gamma_closed_forms_and_edges():
    a = np.array([1.0, 2.0, 3.0, 7.0, 0.5, 0.5, 40.0, 40.0])
    x = np.array([0.3, 2.5, 9.0, 4.0, 0.2, 30.0, 38.0, 45.0])
    def q_int(n, v):  # Q(n, x) = e^-x Σ_{k<n} x^k / k! for an integer n
        return math.exp(-v) * sum(v**k / math.factorial(k) for k in range(int(n)))
    ref_q = np.array([q_int(n, v) if n == int(n) else math.erfc(math.sqrt(v)) for n, v in zip(a, x)])
    check(tw.special.gammaincc(tw.tensor(a), tw.tensor(x)), ref_q, rtol=1e-10, atol=1e-14)
    check(tw.igamma(tw.tensor(a), tw.tensor(x)), 1 - ref_q, rtol=1e-10, atol=1e-14)
    check(_f32(a).igammac(_f32(x)), ref_q, dtype="float32")
    edges = tw.igamma(tw.tensor([0.0, 0.0, 1.0, -1.0, 2.0, 2.0, math.inf, 3.0]),
                      tw.tensor([0.0, 1.0, 0.0, 1.0, math.inf, -1.0, 1.0, math.nan]))
    np.testing.assert_array_equal(edges.numpy(), [np.nan, 1.0, 0.0, np.nan, 1.0, np.nan, 0.0, np.nan])


def test_ndtri_and_erfinv_invert_their_functions():
    p = np.array([1e-300, 1e-10, 0.01, 0.3, 0.5, 0.8, 0.99, 1 - 1e-12])
    x = tw.special.ndtri(tw.tensor(p))
    check(tw.special.ndtr(x), p, rtol=1e-6)  # ndtr's own error (1.2e-7) bounds the round trip
    check(tw.special.ndtri(_f32([0.0, 1.0, -0.1, 1.5])), [-math.inf, math.inf, math.nan, math.nan])
    z = np.array([-3.0, -0.5, -1e-8, 0.0, 1e-8, 0.25, 2.0, 4.0])
    check(tw.erfinv(tw.tensor(np.array([math.erf(v) for v in z]))), z, rtol=2e-8, atol=0)
    check(tw.special.erfinv(_f32([1.0, -1.0, 2.0])), [math.inf, -math.inf, math.nan])


def test_entr_at_zero_negative_and_nan():
    check(tw.special.entr(_f32([0.0, 0.5, 2.0, -1.0, float("nan")])),
          [0.0, -0.5 * math.log(0.5), -2 * math.log(2.0), -math.inf, math.nan])


@pytest.mark.parametrize(("name", "ref"), [
    ("chebyshev_polynomial_t", lambda x, n: C.chebval(x, [0] * n + [1])),
    ("chebyshev_polynomial_u", lambda x, n: np.sin((n + 1) * np.arccos(x)) / np.sin(np.arccos(x))),
    ("hermite_polynomial_h", lambda x, n: H.hermval(x, [0] * n + [1])),
    ("hermite_polynomial_he", lambda x, n: HE.hermeval(x, [0] * n + [1])),
    ("laguerre_polynomial_l", lambda x, n: L.lagval(x, [0] * n + [1])),
    ("legendre_polynomial_p", lambda x, n: P.legval(x, [0] * n + [1])),
    ("shifted_chebyshev_polynomial_t", lambda x, n: C.chebval(2 * x - 1, [0] * n + [1])),
])
def test_orthogonal_polynomials_per_element_degree(name, ref):
    """Each element has its own degree (a float degree truncates; a negative one gives 0), as torch."""
    x = np.array([-0.9, -0.3, 0.2, 0.45, 0.7, 0.95])
    n = np.array([0.0, 1.0, 2.9, 5.0, 8.0, -2.0])
    want = np.array([ref(xv, int(nv)) if nv >= 0 else 0.0 for xv, nv in zip(x, n)])
    check(getattr(tw.special, name)(tw.tensor(x), tw.tensor(n)), want, rtol=1e-10, atol=1e-12)
    check(getattr(tw.special, name)(tw.tensor(x), 3), [ref(v, 3) for v in x], rtol=1e-10, atol=1e-12)


# -- derived math ----------------------------------------------------------------------------------------------------

def test_logaddexp_xlogy_copysign_edges():
    inf, nan = math.inf, math.nan
    check(tw.logaddexp(_f32([inf, -inf, 1.0, -1000.0]), _f32([inf, -inf, 2.0, -1000.5])),
          [inf, -inf, math.log(math.e + math.e ** 2), -1000 + math.log1p(math.exp(-0.5))])
    check(tw.logaddexp2(_f32([3.0]), _f32([3.0])), [4.0])
    check(tw.xlogy(_f32([0.0, 0.0, 2.0]), _f32([0.0, nan, 3.0])), [0.0, nan, 2 * math.log(3.0)])
    check(tw.special.xlog1py(_f32([0.0, 2.0]), _f32([-1.0, 1.0])), [0.0, 2 * math.log(2.0)])
    r = tw.copysign(_f32([1.0, 2.0, 3.0]), _f32([-0.0, 0.0, -5.0])).numpy()
    assert list(r) == [-1.0, 2.0, -3.0]
    check(tw.copysign(tw.tensor([3, -2]), tw.tensor([-1, 1])), [-3.0, 2.0], dtype="float32")


def test_cummax_takes_the_last_tie_and_propagates_nan():
    v, i = tw.cummax(_f32([1.0, 3.0, 3.0, 2.0, float("nan"), 5.0]), 0)
    check(v, [1.0, 3.0, 3.0, 3.0, math.nan, math.nan])
    assert i.tolist() == [0, 1, 2, 2, 4, 4]
    v, i = tw.cummin(tw.tensor([[4, 2, 2, 7]]), dim=1)
    assert v.tolist() == [[4, 2, 2, 2]] and i.tolist() == [[0, 1, 2, 2]]


def test_addmm_beta_zero_ignores_nan_input():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.ones((3, 2), dtype=np.float32)
    r = tw.addmm(_f32(np.full((2, 2), np.nan)), tw.tensor(a), tw.tensor(b), beta=0, alpha=2)
    check(r, 2 * a @ b)
    check(tw.tensor(np.ones(2, np.float32)).addmv(tw.tensor(a), tw.tensor(np.ones(3, np.float32)), beta=0.5),
          0.5 + a.sum(1))


def test_diff_take_masked_scatter_meshgrid():
    x = tw.tensor([[1, 4, 9], [2, 2, 2]])
    assert tw.diff(x, dim=1).tolist() == [[3, 5], [0, 0]]
    assert tw.diff(x, n=0, prepend=x).tolist() == x.tolist()  # n=0: the input, nothing joined
    assert tw.diff(x, dim=1, append=tw.tensor([[0], [0]])).tolist() == [[3, 5, -9], [0, 0, -2]]
    assert tw.take(x, tw.tensor([[-1, 0]])).tolist() == [[2, 1]]
    m = tw.tensor([True, False, True])
    assert tw.masked_scatter(tw.zeros(2, 3), m, tw.arange(6.0)).tolist() == [[0, 0, 1], [2, 0, 3]]
    gx, gy = tw.meshgrid(tw.arange(3), tw.arange(2), indexing="xy")
    assert tuple(gx.shape) == (2, 3) and gx.tolist() == [[0, 1, 2], [0, 1, 2]] and gy.tolist() == [[0] * 3, [1] * 3]


def test_searchsorted_sides_and_nan():
    b = _f32([1.0, 2.0, 2.0, 3.0])
    v = _f32([2.0, 0.0, 9.0, float("nan")])
    assert tw.searchsorted(b, v).tolist() == [1, 0, 4, 4]
    assert tw.searchsorted(b, v, right=True).tolist() == [3, 0, 4, 4]
    assert tw.bucketize(v, b, out_int32=True).dtype is tw.int32


# -- linalg ----------------------------------------------------------------------------------------------------------

def test_linalg_norms():
    a = np.array([[1.0, -4.0, 0.0], [2.5, 3.0, -1.0]])
    t = tw.tensor(a)
    check(tw.linalg.vector_norm(t, math.inf), np.abs(a).max())
    check(tw.linalg.vector_norm(t, -math.inf, dim=1), np.abs(a).min(1))
    check(tw.linalg.vector_norm(t, 0), 5.0)
    check(tw.linalg.vector_norm(t, 3, dim=0, keepdim=True), (np.abs(a) ** 3).sum(0, keepdims=True) ** (1 / 3))
    check(tw.linalg.matrix_norm(t, 1), np.linalg.norm(a, 1))
    check(tw.linalg.matrix_norm(t, -math.inf), np.linalg.norm(a, -np.inf))
    check(tw.linalg.norm(t), np.linalg.norm(a))
    for o in ("nuc", 2, -2):  # from the singular values (client/linalg_lapack.py)
        check(tw.linalg.matrix_norm(t, o), np.linalg.norm(a, o))
    check(tw.linalg.matrix_norm(tw.zeros(0, 3), math.inf), 0.0, dtype="float32")  # torch: 0 for an empty matrix
    check(tw.linalg.matrix_norm(tw.zeros(3, 0), 2), 0.0, dtype="float32")


def test_linalg_products():
    rng = np.random.default_rng(0)
    a, b, c = rng.standard_normal(3), rng.standard_normal((3, 4)), rng.standard_normal(4)
    check(tw.linalg.multi_dot([tw.tensor(a), tw.tensor(b), tw.tensor(c)]), a @ b @ c)
    m = rng.standard_normal((2, 3, 3))
    check(tw.linalg.matrix_power(tw.tensor(m), 5), np.linalg.matrix_power(m, 5), rtol=1e-10)
    check(tw.linalg.matrix_power(tw.tensor(m), 0), np.broadcast_to(np.eye(3), m.shape))
    u, v = rng.standard_normal((2, 3)), rng.standard_normal(3)
    check(tw.linalg.cross(tw.tensor(u), tw.tensor(v)), np.cross(u, v))
    check(tw.linalg.vander(tw.tensor([2, 3])), [[1, 2], [1, 3]], dtype="int64")


# -- functional ------------------------------------------------------------------------------------------------------

def test_functional_extras_values():
    x = np.array([-4.0, -1.0, -0.2, 0.0, 0.3, 2.0, 5.0])
    t = tw.tensor(x)
    check(F.hardswish(t), x * np.clip(x + 3, 0, 6) / 6)
    check(F.softshrink(t, 0.5), np.where(x > 0.5, x - 0.5, np.where(x < -0.5, x + 0.5, 0)))
    check(F.celu(t, 2.0), np.maximum(x, 0) + np.minimum(0, 2 * np.expm1(x / 2)))
    y = np.arange(2 * 8 * 2 * 3, dtype=np.float64).reshape(2, 8, 2, 3)
    s = F.pixel_shuffle(tw.tensor(y), 2)
    assert tuple(s.shape) == (2, 2, 4, 6)
    check(F.pixel_unshuffle(s, 2), y)
    p = np.array([[0.2, 0.8], [0.5, 0.5]])
    q = np.log(np.array([[0.1, 0.9], [0.4, 0.6]]))
    check(F.kl_div(tw.tensor(q), tw.tensor(p), reduction="batchmean"), (p * (np.log(p) - q)).sum() / 2)


# -- gradients -------------------------------------------------------------------------------------------------------

_GRAD_CASES = {
    "asinh": (lambda x: tw.asinh(x), 1),
    "atanh": (lambda x: tw.atanh(x * 0.5), 1),
    "logaddexp": (lambda x, y: tw.logaddexp(x, y), 2),
    "xlogy": (lambda x, y: tw.xlogy(x, y.abs() + 0.5), 2),
    "i0": (lambda x: tw.special.i0(x * 4), 1),
    "i1e": (lambda x: tw.special.i1e(x * 10), 1),
    "erfcx": (lambda x: tw.special.erfcx(x), 1),
    "log_ndtr": (lambda x: tw.special.log_ndtr(x * 3), 1),
    "addmm": (lambda x, y: tw.addmm(x[:2, :2], x, y, beta=0.5, alpha=2), 2),
    "cross": (lambda x, y: tw.cross(x, y, dim=1), 2),
    "kron": (lambda x, y: tw.kron(x, y), 2),
    "logcumsumexp": (lambda x: tw.logcumsumexp(x, 1), 1),
    "cdist": (lambda x, y: tw.cdist(x, y), 2),
    "hardswish": (lambda x: F.hardswish(x * 4), 1),
    "vector_norm_3": (lambda x: tw.linalg.vector_norm(x, 3, dim=1), 1),
    "legendre_p": (lambda x: tw.special.legendre_polynomial_p(x, 4), 1),
    "lgamma": (lambda x: tw.lgamma(x * 3 + 0.1), 1),
    "digamma": (lambda x: tw.digamma(x * 3 - 0.5), 1),
    "polygamma_2": (lambda x: tw.polygamma(2, x + 1.5), 1),
    "igamma_x": (lambda x, y: tw.igamma(x.abs() * 3 + 0.5, y.abs() * 4 + 0.1), 2),
    "zeta_q": (lambda x: tw.special.zeta(x * 0 + 3.0, x + 2.0), 1),
    "bessel_j0": (lambda x: tw.special.bessel_j0(x * 8), 1),
    "bessel_k1": (lambda x: tw.special.modified_bessel_k1(x.abs() * 4 + 0.2), 1),
    "matrix_exp": (lambda x: tw.linalg.matrix_exp(x[:, :2]), 1),
    "quantile": (lambda x: tw.quantile(x, 0.3, dim=1), 1),
    "nanmean": (lambda x: tw.nanmean(x, 1), 1),
    "cummax": (lambda x: tw.cummax(x, 1).values, 1),
    "scatter_reduce_prod": (lambda x: tw.scatter_reduce(x, 1, tw.tensor([[0, 0, 2], [1, 1, 1]]), x * 2, "prod"), 1),
    "max_pool3d": (lambda x: F.max_pool3d(x.reshape(1, 1, 1, 2, 3), (1, 2, 2), 1), 1),
    "conv3d": (lambda x, y: F.conv3d(x.reshape(1, 1, 1, 2, 3), y.reshape(1, 1, 1, 2, 3)[..., :2, :2]), 2),
    "grid_sample": (lambda x, y: F.grid_sample(x.reshape(1, 1, 2, 3), y.reshape(1, 1, 3, 2), align_corners=True), 2),
    "interpolate_bicubic": (lambda x: F.interpolate(x.reshape(1, 1, 2, 3), size=(3, 4), mode="bicubic"), 1),
    "gaussian_nll": (lambda x, y: F.gaussian_nll_loss(x, y, y.abs() + 0.5), 2),
    "multi_margin": (lambda x: F.multi_margin_loss(x, tw.tensor([2, 0])), 1),
    "masked_std": (lambda x: tw.masked.std(x, 1, mask=tw.tensor([[True, False, True], [True, True, True]])), 1),
    # the factorisations (client/linalg_lapack.py): square matrices made from the 2 x 3 inputs, results that do not
    # depend on the signs LAPACK picks for eigen- and singular vectors
    "linalg_solve": (lambda x, y: tw.linalg.solve(_invertible(x), y), 2),
    "linalg_inv_det": (lambda x: tw.linalg.inv(_invertible(x)) * tw.linalg.det(_invertible(x)), 1),
    "slogdet": (lambda x: tw.linalg.slogdet(_invertible(x)).logabsdet, 1),
    "solve_triangular": (lambda x, y: tw.linalg.solve_triangular(_invertible(x), y, upper=True), 2),
    "cholesky": (lambda x: tw.linalg.cholesky(_spd(x)), 1),
    "cholesky_upper_inverse": (lambda x: tw.cholesky_inverse(tw.linalg.cholesky(_spd(x), upper=True), upper=True), 1),
    "eigh": (lambda x: (lambda w, v: w.unsqueeze(0) * v * v)(*tw.linalg.eigh(x.mT @ x + _eye(3))), 1),
    "svd": (lambda x: (lambda u, s, vh: u @ vh + s.unsqueeze(-1))(*tw.linalg.svd(x, full_matrices=False)), 1),
    "svd_tall": (lambda x: (lambda u, s, vh: u @ vh * s.sum())(*tw.linalg.svd(x.mT, full_matrices=False)), 1),
    "svdvals": (lambda x: tw.linalg.svdvals(x), 1),
    "qr": (lambda x: tw.cat(list(tw.linalg.qr(x.mT))), 1),
    "pinv": (lambda x: tw.linalg.pinv(x), 1),
    "lstsq": (lambda x, y: tw.linalg.lstsq(x.mT, y.mT, driver="gelsd").solution, 2),
    "lu_solve": (lambda x, y: tw.linalg.lu_solve(*tw.linalg.lu_factor(_pivoting(x)), y), 2),
    "lu": (lambda x: tw.cat(list(tw.linalg.lu(_pivoting(x)))), 1),
    "householder_product": (lambda x, y: tw.linalg.householder_product(x.mT, y[0, :2]), 2),
    "matrix_norm_nuc": (lambda x: tw.linalg.matrix_norm(x, "nuc"), 1),
}


def _eye(n: int) -> tw.Tensor:
    return tw.eye(n, dtype=tw.float64)


def _invertible(x: tw.Tensor) -> tw.Tensor:
    """A 2 x 2 matrix far from singular, from a 2 x 3 input."""
    return x[:, :2] + 2 * _eye(2)


def _pivoting(x: tw.Tensor) -> tw.Tensor:
    """A 2 x 2 matrix whose LU swaps its rows."""
    return x[:, :2] * 0.1 + _eye(2).flip(0)


def _spd(x: tw.Tensor) -> tw.Tensor:
    return x @ x.mT + _eye(2)


@pytest.mark.parametrize("name", sorted(_GRAD_CASES))
def test_gradients_match_central_differences(name):
    fn, nargs = _GRAD_CASES[name]
    rng = np.random.default_rng(1)
    xs = [rng.uniform(-0.9, 0.9, (2, 3)) for _ in range(nargs)]
    if name in ("addmm",):
        xs[1] = rng.uniform(-0.9, 0.9, (3, 2))
    ts = [tw.tensor(a, requires_grad=True) for a in xs]
    w = rng.standard_normal(tuple(fn(*[tw.tensor(a) for a in xs]).shape))
    (fn(*ts) * tw.tensor(w)).sum().backward()
    h = 1e-6
    for k, a in enumerate(xs):
        num = np.zeros_like(a)
        for idx in np.ndindex(*a.shape):
            hi, lo = [b.copy() for b in xs], [b.copy() for b in xs]
            hi[k][idx] += h
            lo[k][idx] -= h
            f_hi = (fn(*[tw.tensor(b) for b in hi]).numpy() * w).sum()
            f_lo = (fn(*[tw.tensor(b) for b in lo]).numpy() * w).sum()
            num[idx] = (f_hi - f_lo) / (2 * h)
        np.testing.assert_allclose(ts[k].grad.numpy(), num, rtol=1e-5, atol=1e-6, err_msg=f"{name}: input {k}")
