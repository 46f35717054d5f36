"""Gradients the op_db backward check found wrong (issue 33), each against float64 finite differences or torch's
formula: cumprod through zeros, a p-norm at zero elements, pinv of a rank-deficient matrix and lstsq, polygamma,
I1 at 0, atanh near ±1, index_fill with a repeated index; lgamma and digamma at the integers, xlogy at x = 0 and
BCE on logits at 0 (session 38, found by the distributions' tests)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensorwire as tw

pytestmark = pytest.mark.usefixtures("session")

RNG = np.random.default_rng(33)


def _leaf(a, dtype=tw.float64):
    return tw.tensor(np.asarray(a, dtype=np.float64), dtype=dtype, requires_grad=True)


def _grad(y, x, g=None):
    (gx,) = tw.autograd.grad(y, [x], grad_outputs=g, allow_unused=True)
    return None if gx is None else np.asarray(gx.numpy())


def test_cumprod_through_zeros():
    """d y_j / d x_i = prod_{k <= j, k != i} x_k: the first zero's gradient is not 0/0 (was NaN), the later ones'
    are 0."""
    x = _leaf([[2.0, 0.0, 3.0, 0.0, 5.0], [1.5, 2.0, -3.0, 4.0, 0.5], [0.0, 1.0, 2.0, 0.0, 2.0]])
    assert tw.autograd.gradcheck(lambda t: t.cumprod(1), [x])
    assert tw.autograd.gradcheck(lambda t: t.cumprod(0), [_leaf(RNG.normal(size=(4, 3)) * (RNG.random((4, 3)) > .4))])
    g = _grad(x.cumprod(1).sum(), x)
    # row 0: y = [2, 0, 0, 0, 0]; dy/dx1 = 2 + 2*3 + 0 + 0 (x3 = 0 keeps the last two at 0); after the zero: 0
    np.testing.assert_allclose(g[0], [1.0, 8.0, 0.0, 0.0, 0.0])


@pytest.mark.parametrize("p", [-0.5, -2.0, 0.5, 1.5, 3.0])
def test_vector_norm_at_zero_elements(p):
    """torch's subgradients: 0 at a zero element for p < 2 (0 * inf was NaN), and 0 for a negative p's norm of a
    vector with a zero (the norm itself is 0 there)."""
    z = _leaf(np.zeros(5))
    np.testing.assert_array_equal(_grad(tw.linalg.vector_norm(z, p), z), np.zeros(5))
    x = _leaf([0.0, 1.0, -4.0, 0.5])
    g = _grad(tw.linalg.vector_norm(x, p), x)
    assert np.isfinite(g).all()
    if p > 0:
        a = np.array([0.0, 1.0, -4.0, 0.5])
        y = (np.abs(a) ** p).sum() ** (1 / p)
        with np.errstate(divide="ignore", invalid="ignore"):
            want = np.where(a == 0, 0.0, np.sign(a) * np.abs(a) ** (p - 1) * y ** (1 - p))
        np.testing.assert_allclose(g, want, rtol=1e-12)
    nz = _leaf([0.3, 1.0, -4.0, 0.5])
    assert tw.autograd.gradcheck(lambda t: tw.linalg.vector_norm(t, p), [nz])


def test_pinv_of_a_rank_deficient_matrix():
    """pinv is differentiable where the rank holds (A = a b^T): torch's pinv_backward, not the SVD's gradient (NaN
    or wrong where singular values repeat, as a rank-deficient matrix's zeros do)."""
    a, b = _leaf(RNG.normal(size=(4, 1))), _leaf(RNG.normal(size=(3, 1)))
    assert tw.autograd.gradcheck(lambda u, v: tw.linalg.pinv(u @ v.mT), [a, b])
    a2, b2 = _leaf(RNG.normal(size=(2, 5, 2))), _leaf(RNG.normal(size=(2, 6, 2)))
    assert tw.autograd.gradcheck(lambda u, v: tw.linalg.pinv(u @ v.mT), [a2, b2])


def test_lstsq_underdetermined():
    A, B = _leaf(RNG.normal(size=(2, 3))), _leaf(RNG.normal(size=(2, 3)))  # noqa: N806
    assert tw.autograd.gradcheck(lambda m, r: tw.linalg.lstsq(m, r, driver="gels").solution, [A, B])


@pytest.mark.parametrize("n", [0, 1, 2, 3])
def test_polygamma_gradient_is_the_next_polygamma(n):
    """d/dx polygamma(n, x) = polygamma(n + 1, x), finite where polygamma is (ζ's series gave NaN)."""
    x = _leaf([-1.5, -0.3, 0.7, 2.5, 11.0])
    g = _grad(tw.polygamma(n, x).sum(), x)
    np.testing.assert_allclose(g, tw.polygamma(n + 1, x.detach()).numpy(), rtol=1e-12)
    assert np.isfinite(g).all()
    assert tw.autograd.gradcheck(lambda t: tw.special.polygamma(n, t), [_leaf([0.7, 2.5, 11.0])])


@pytest.mark.parametrize("fn", [tw.special.i1, tw.special.i1e])
def test_i1_at_zero(fn):
    """I1'(0) = 1/2 (the odd function was sign(x) f(|x|), whose gradient at 0 read 0)."""
    x = _leaf([0.0, -0.5, 3.0, 9.0])
    g = _grad(fn(x).sum(), x)
    assert g[0] == pytest.approx(0.5, rel=1e-12)
    assert tw.autograd.gradcheck(fn, [_leaf([-0.5, 0.1, 3.0, 9.0])])


def test_atanh_near_one_in_float32():
    """1 / (1 - x²) to float32's precision near ±1 (the old log1p(2x / (1 - x)) chain lost digits there)."""
    a = np.array([0.9995, -0.99971, 0.9991, 0.5, -0.2], dtype=np.float32)
    x = tw.tensor(a, requires_grad=True)
    g = _grad(tw.atanh(x).sum(), x)
    exact = 1 / (1 - a.astype(np.float64) ** 2)
    np.testing.assert_allclose(g, exact, rtol=2e-6)


def test_index_fill_repeated_index():
    """torch fills each indexed slice once, so the value's gradient counts a repeated index once."""
    x = _leaf(np.zeros((2, 3)))
    v = _leaf(0.0)
    y = x.index_fill(1, tw.tensor([1, 1, 2, -1]), v)
    g = tw.tensor(np.arange(6.0).reshape(2, 3), dtype=tw.float64)
    gx, gv = tw.autograd.grad(y, [x, v], grad_outputs=g)
    assert float(gv.numpy()) == 1 + 2 + 4 + 5
    np.testing.assert_array_equal(gx.numpy(), [[0, 0, 0], [3, 0, 0]])
    assert math.isclose(float(y.detach().sum().numpy()), 0.0)


@pytest.mark.parametrize("name", ["sign", "floor", "ceil", "round", "trunc"])
def test_piecewise_constant_ops_give_zero_gradients(name):
    """As torch's: the output requires grad and its gradient is zeros (x.grad was None, and x.floor() could not be
    differentiated at all)."""
    x = _leaf([0.3, -1.7, 2.5, -0.2])
    y = getattr(x, name)()
    assert y.requires_grad
    np.testing.assert_array_equal(_grad(y.sum(), x), np.zeros(4))
    np.testing.assert_array_equal(_grad((y * x).sum(), x), y.detach().numpy())  # the product rule's other term


# -- zeros, not None: composites that left the graph (zero_grads.zero_grad_from, floor_divide's zero rule) ----------

def _x(shape=(3, 4)):
    return _leaf(RNG.normal(size=shape))


def _ONES():  # noqa: N802 - a constant operand (no gradient wanted)
    return tw.ones(3, 4, dtype=tw.float64)


ZERO_GRAD_CASES = {
    # name: (inputs, fn) — each input requires grad and torch gives it zeros (grad() without allow_unused raised)
    "cdist p=0": (lambda: [_x((3, 2)), _x((4, 2))], lambda a, b: tw.cdist(a, b, p=0)),
    "pdist p=0": (lambda: [_x((4, 3))], lambda a: tw.nn.functional.pdist(a, p=0)),
    "pdist of one row": (lambda: [_x((1, 3))], lambda a: tw.nn.functional.pdist(a)),
    "copysign's sign source": (lambda: [_x()], lambda b: tw.copysign(_ONES(), b)),
    "div floor": (lambda: [_x(), _x()], lambda a, b: tw.div(a, b, rounding_mode="floor")),
    "floor division operator": (lambda: [_x(), _x()], lambda a, b: a // b),
    "bernoulli": (lambda: [_leaf(RNG.random((3, 4)))], lambda p: tw.bernoulli(p)),
    "fill": (lambda: [_x()], lambda a: tw.fill(a, 2.0)),
    "zero_": (lambda: [_x()], lambda a: tw.zero_(a * 1)),
    "combinations, none": (lambda: [_x((2,))], lambda a: tw.combinations(a, r=3)),
    "matrix_power 0": (lambda: [_x((3, 3))], lambda a: tw.linalg.matrix_power(a, 0)),
    "pinv of an empty matrix": (lambda: [_x((2, 0, 3))], lambda a: tw.linalg.pinv(a)),
    "put, no index": (lambda: [_x((0,))], lambda s: tw.put(_ONES(), tw.tensor(np.zeros(0, np.int64)), s)),
    "cat's skipped empty 1-D": (lambda: [_x((0,))], lambda e: tw.cat([e, _ONES()])),
    "index_copy of a 0-d": (lambda: [_x(())], lambda a: tw.index_copy(a, 0, tw.tensor([0]), _ONES().sum())),
}


@pytest.mark.parametrize("name", list(ZERO_GRAD_CASES))
def test_inputs_of_a_piecewise_constant_or_empty_result_get_zero_gradients(name):
    """torch gives every input of a result that requires grad a gradient: zeros here (``None`` before, so
    ``autograd.grad`` without ``allow_unused`` raised). The values are unchanged (checked by tests/opinfo)."""
    make, fn = ZERO_GRAD_CASES[name]
    xs = make()
    y = fn(*xs)
    assert y.requires_grad
    grads = tw.autograd.grad(y.sum(), xs)
    for x, g in zip(xs, grads):
        assert g is not None and g.shape == x.shape
        np.testing.assert_array_equal(g.numpy(), np.zeros(x.shape))


def test_zero_grad_link_keeps_infinite_values_and_the_real_gradient():
    """The join is ``where(True, out, x.sum())``: an infinite or NaN ``x`` does not reach the value (no ``0 * inf``),
    and an input that also reaches the result through differentiable ops keeps that gradient."""
    a = _leaf([np.inf, -2.0, np.nan])
    b = _leaf([1.0, -1.0, 0.0])
    y = tw.copysign(b, a)  # b's gradient is sign(b) * sign source's sign; a's is zeros
    np.testing.assert_array_equal(y.detach().numpy(), [1.0, -1.0, 0.0])
    ga, gb = tw.autograd.grad(y.sum(), [a, b])
    np.testing.assert_array_equal(ga.numpy(), np.zeros(3))
    np.testing.assert_array_equal(gb.numpy(), [1.0, 1.0, 0.0])


# -- LU of a non-square matrix, QR with rows < columns, the full SVD of a non-square matrix (were refused) ----------

@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (2, 3, 4), (2, 4, 3)])
def test_lu_factor_gradient_of_a_non_square_matrix(shape):
    a = _leaf(RNG.normal(size=shape))
    assert tw.autograd.gradcheck(lambda t: tw.linalg.lu_factor(t)[0], [a])
    assert tw.autograd.gradcheck(lambda t: tw.linalg.lu(t)[1:], [a])


@pytest.mark.parametrize("mode", ["reduced", "complete"])
def test_qr_gradient_with_fewer_rows_than_columns(mode):
    a = _leaf(RNG.normal(size=(2, 3, 5)))
    assert tw.autograd.gradcheck(lambda t: tw.linalg.qr(t, mode=mode), [a])


@pytest.mark.parametrize("shape", [(3, 5), (5, 3)])
def test_full_svd_gradient_of_a_non_square_matrix(shape):
    """torch differentiates the reduced factors (the extra singular vectors are not unique): checked on functions
    of them that do not depend on the vectors' signs."""
    a = _leaf(RNG.normal(size=shape))
    k = min(shape)

    def f(t):
        u, s, vh = tw.linalg.svd(t, full_matrices=True)
        u, vh = u[:, :k], vh[:k, :]
        return s, u.matmul(vh), (u * u).sum(0)
    assert tw.autograd.gradcheck(f, [a])


@pytest.mark.parametrize("how", ["zero_", "fill_", "copy_", "a_view_filled"])
def test_an_in_place_overwrite_keeps_the_history(how):
    """torch: a tensor that requires grad still does after an in-place op that writes a value without history
    (``zero_``, ``fill_``, ``copy_`` of a constant), and what its old value came from gets a zero gradient where it
    was overwritten. tensorwire dropped the history: ``requires_grad`` became False and ``backward`` raised."""
    a = tw.tensor(np.arange(6.0, dtype=np.float32).reshape(2, 3), requires_grad=True)
    x = a * 2
    if how == "zero_":
        x.zero_()
    elif how == "fill_":
        x.fill_(3.0)
    elif how == "copy_":
        x.copy_(tw.ones(2, 3))
    else:
        x[0].fill_(7.0)
    assert x.requires_grad
    (x * x).sum().backward()
    want = np.zeros((2, 3))
    if how == "a_view_filled":  # row 1 keeps 2a: d(4a^2)/da = 8a
        want[1] = 8 * np.arange(3.0, 6.0)
    np.testing.assert_array_equal(a.grad.numpy(), want)


def test_lgamma_and_digamma_gradients_at_the_integers():
    """ψ(x) and ψ'(x) at 1, 2, 3 (were NaN: the reflection branch's pole, discarded by a where, reached the
    gradient), and between them."""
    x = [1.0, 2.0, 3.0, 0.3, -1.5, 7.25]
    digamma = [-0.5772156649015329, 0.42278433509846713, 0.9227843350984671, -3.502524222200133, 0.7031566406452434,
               1.9104535268837362]
    xl = _leaf(x)
    np.testing.assert_allclose(_grad(xl.lgamma().sum(), xl), digamma, rtol=1e-9)
    trigamma = [math.pi ** 2 / 6, math.pi ** 2 / 6 - 1, math.pi ** 2 / 6 - 1.25]
    xd = _leaf(x[:3])
    np.testing.assert_allclose(_grad(xd.digamma().sum(), xd), trigamma, rtol=1e-8)


def test_xlogy_gradient_at_zero_x_is_torchs():
    """d/dx x log y = log y, at x = 0 too where y > 0 (was 0); 0 where x = 0 and y <= 0; d/dy = x / y."""
    x, y = _leaf([0.0, 0.0, 0.0, 1.0, 2.0]), _leaf([2.0, 0.0, -1.0, 0.0, 3.0])
    out = tw.xlogy(x, y)
    assert out.detach().tolist() == [0.0, 0.0, 0.0, -math.inf, 2 * math.log(3.0)]
    gx, gy = tw.autograd.grad(out.sum(), [x, y])
    np.testing.assert_allclose(gx.numpy(), [math.log(2.0), 0.0, 0.0, -math.inf, math.log(3.0)])
    np.testing.assert_allclose(gy.numpy(), [0.0, 0.0, 0.0, math.inf, 2 / 3])


def test_bce_with_logits_gradient_at_zero_is_sigmoid_minus_target():
    """sigmoid(0) - t: -1/2 and +1/2 (was 0 and 1: the subgradients of |x| and max(-x, 0))."""
    x = _leaf([0.0, 0.0, 1.5, -3.0])
    t = tw.tensor([1.0, 0.0, 0.25, 1.0], dtype=tw.float64)
    loss = tw.nn.functional.binary_cross_entropy_with_logits(x, t, reduction="sum")
    sig = 1 / (1 + np.exp(-np.array([0.0, 0.0, 1.5, -3.0])))
    np.testing.assert_allclose(_grad(loss, x), sig - np.array([1.0, 0.0, 0.25, 1.0]), rtol=1e-12)
