"""``tw.nn.functional``'s names that torch has and tensorwire lacked: ``affine_grid`` (2-D and 3-D, both corner
conventions, then ``grid_sample`` of the grid, values and the gradients of theta and the input), ``gumbel_softmax``
(simplex, hard one-hot with the soft sample's straight-through gradient, the argmax's distribution), the in-place
activations (``relu_`` ... ``threshold_``: the input rewritten and returned, torch's values and gradients), the
``*_with_indices`` pools (torch's values and indices, always a pair), ``native_channel_shuffle`` and ``conv_tbc``.
Everything against torch in float64 with the same inputs.

torch is the reference (imported through a fixture: it is optional)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import tensorwire as tw
from tensorwire.autograd_engine import AutogradError

F = tw.nn.functional
pytestmark = pytest.mark.usefixtures("session")


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch", reason="PyTorch is the reference here (pip install torch==2.13.0)")


def _pair_of(torch, shape, seed=0, requires_grad=True):
    a = np.random.default_rng(seed).standard_normal(shape)
    return tw.tensor(a, requires_grad=requires_grad), torch.tensor(a, requires_grad=requires_grad)


def _close(mine, ref, tol=1e-10):
    a, r = mine.detach().numpy(), ref.detach().numpy()
    assert a.shape == r.shape, (a.shape, r.shape)
    np.testing.assert_allclose(a, r, rtol=tol, atol=tol)


# -- affine_grid -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("size", [(2, 3, 4, 5), (2, 2, 3, 4, 5), (1, 1, 1, 6)], ids=["2d", "3d", "2d-unit-height"])
def test_affine_grid_then_grid_sample_match_torch(torch, size, align_corners):
    nd = len(size) - 2
    Ft = torch.nn.functional
    theta, theta_t = _pair_of(torch, (size[0], nd, nd + 1), seed=1)
    x, xt = _pair_of(torch, size, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the unit-size grid's align_corners warning, torch's too)
        grid, grid_t = F.affine_grid(theta, size, align_corners), Ft.affine_grid(theta_t, size, align_corners)
    _close(grid, grid_t)
    y = F.grid_sample(x, grid, align_corners=align_corners)
    yt = Ft.grid_sample(xt, grid_t, align_corners=align_corners)
    _close(y, yt)
    w = np.random.default_rng(3).standard_normal(tuple(yt.shape))
    (y * tw.tensor(w)).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    _close(theta.grad, theta_t.grad)
    _close(x.grad, xt.grad)


def test_affine_grid_checks_and_warnings(torch):
    theta = tw.tensor(np.eye(2, 3)[None])
    with pytest.warns(UserWarning, match="align_corners=False since 1.3.0"):
        grid = F.affine_grid(theta, (1, 1, 2, 3))
    ref = torch.nn.functional.affine_grid(torch.tensor(np.eye(2, 3)[None]), (1, 1, 2, 3), False)
    _close(grid, ref)  # the identity map: the pixel centres
    with pytest.warns(UserWarning, match="align_corners=False since 1.3.0") as caught:
        _close(F.grid_sample(grid.permute(0, 3, 1, 2), grid),
               torch.nn.functional.grid_sample(ref.permute(0, 3, 1, 2), ref, align_corners=False))
    assert caught[0].filename == __file__  # (on the caller's line, as torch's)
    with pytest.warns(UserWarning, match="unit-size grids when align_corners=True"):
        F.affine_grid(theta, (1, 1, 1, 3), True)
    with pytest.raises(ValueError, match="Nx2x3"):
        F.affine_grid(tw.tensor(np.zeros((1, 3, 4))), (1, 1, 2, 3), False)
    with pytest.raises(ValueError, match="Nx3x4"):
        F.affine_grid(theta, (1, 1, 2, 3, 4), False)
    with pytest.raises(NotImplementedError, match="only supports 4D and 5D sizes"):
        F.affine_grid(theta, (1, 2, 3), False)
    with pytest.raises(ValueError, match="floating point"):
        F.affine_grid(tw.tensor(np.zeros((1, 2, 3), np.int64)), (1, 1, 2, 3), False)
    with pytest.raises(ValueError, match="positive output size"):
        F.affine_grid(theta, (1, 1, 0, 3), False)
    with pytest.raises(tw.ShapeError, match="2 affine maps for a batch of 1"):
        F.affine_grid(tw.tensor(np.zeros((2, 2, 3))), (1, 1, 2, 3), False)


# -- gumbel_softmax --------------------------------------------------------------------------------------------------

def _soft_grad(y: np.ndarray, w: np.ndarray, tau: float, dim: int) -> np.ndarray:
    """The gradient of ``sum(w * softmax((logits + g) / tau))`` with respect to the logits, from the sample ``y``."""
    return y * (w - (w * y).sum(dim, keepdims=True)) / tau


@pytest.mark.parametrize("dim", [-1, 0])
def test_gumbel_softmax_samples_and_straight_through_gradient(dim):
    rng = np.random.default_rng(4)
    a = rng.standard_normal((5, 4))
    w = tw.tensor(rng.standard_normal((5, 4)))
    tau = 0.7
    logits = tw.tensor(a, requires_grad=True)
    tw.manual_seed(11)
    soft = F.gumbel_softmax(logits, tau, dim=dim)
    assert tuple(soft.shape) == (5, 4) and soft.dtype is tw.float64
    y = soft.detach().numpy()
    assert (y >= 0).all()
    np.testing.assert_allclose(y.sum(dim), 1.0, rtol=0, atol=1e-12)
    (soft * w).sum().backward()
    np.testing.assert_allclose(logits.grad.numpy(), _soft_grad(y, w.numpy(), tau, dim), rtol=1e-10, atol=1e-12)
    soft_grad = logits.grad.numpy()
    # the same draws (the same seed): the hard sample is the soft one's one-hot, its gradient the soft one's
    logits.grad = None
    tw.manual_seed(11)
    hard = F.gumbel_softmax(logits, tau, hard=True, dim=dim)
    h = hard.detach().numpy()
    expected = np.zeros_like(y)
    np.put_along_axis(expected, y.argmax(dim).reshape((1, -1) if dim == 0 else (-1, 1)), 1.0, dim)
    np.testing.assert_array_equal(h, expected)
    (hard * w).sum().backward()
    np.testing.assert_allclose(logits.grad.numpy(), soft_grad, rtol=1e-12, atol=1e-14)


def test_gumbel_softmax_argmax_follows_the_softmax_probabilities():
    """The argmax of a Gumbel-perturbed sample is a draw of softmax(logits), whatever tau: 40,000 draws, each
    class's frequency within 6 standard deviations of its probability (a bound a correct sampler breaks with
    probability ~1e-9 per class)."""
    probs = np.array([0.5, 0.25, 0.15, 0.07, 0.03])
    n = 40_000
    logits = tw.tensor(np.log(probs)).reshape(1, -1).expand(n, -1)
    tw.manual_seed(5)
    for tau, dim in ((1.0, -1), (0.3, 1)):
        counts = F.gumbel_softmax(logits, tau, hard=True, dim=dim).sum(0).numpy()
        assert counts.sum() == n
        freq = counts / n
        bound = 6 * np.sqrt(probs * (1 - probs) / n)
        assert (np.abs(freq - probs) <= bound).all(), (freq, probs, bound)


def test_gumbel_softmax_checks():
    logits = tw.tensor(np.zeros((2, 3)))
    with pytest.warns(UserWarning, match="`eps` parameter is deprecated"):
        F.gumbel_softmax(logits, eps=1e-5)
    with pytest.raises(tw.DTypeError, match="gumbel_softmax"):
        F.gumbel_softmax(tw.tensor([[1, 2]]))


# -- in-place activations --------------------------------------------------------------------------------------------

INPLACE = [("relu_", ()), ("elu_", (0.7,)), ("celu_", (1.3,)), ("selu_", ()), ("leaky_relu_", (0.2,)),
           ("hardtanh_", (-0.5, 0.8)), ("rrelu_", (0.1, 0.3)), ("threshold_", (0.2, -1.5))]


@pytest.mark.parametrize("name,args", INPLACE, ids=[n for n, _ in INPLACE])
def test_inplace_activation_rewrites_its_input(torch, name, args):
    Ft = torch.nn.functional
    a = np.random.default_rng(6).standard_normal((3, 5)) * 2
    x = tw.tensor(a)
    out = getattr(F, name)(x, *args)
    assert out is x
    ref = getattr(Ft, name)(torch.tensor(a), *args)
    _close(x, ref)
    _close(getattr(F, name.rstrip("_"))(tw.tensor(a), *args), ref)  # = the out-of-place form's
    # on a tensor with history: torch's gradient through the rewritten value
    leaf, leaf_t = _pair_of(torch, (3, 5), seed=7)
    y, yt = leaf * 2, leaf_t * 2
    assert getattr(F, name)(y, *args) is y
    getattr(Ft, name)(yt, *args)
    _close(y, yt)
    g = np.random.default_rng(8).standard_normal((3, 5))
    y.backward(tw.tensor(g))
    yt.backward(torch.tensor(g))
    # (torch's celu_ differentiates through its result with 1 / alpha rounded to float32, also for float64: its
    # gradient is celu's to ~3e-8; ours is celu's)
    _close(leaf.grad, leaf_t.grad, 1e-7 if name == "celu_" else 1e-10)
    with pytest.raises(AutogradError, match="leaf Variable that requires grad"):
        getattr(F, name)(leaf, *args)


def test_inplace_relu_is_tw_relu_and_rrelu_draws_its_slopes():
    a = np.array([-1.5, 0.5, 2.0])
    x, y = tw.tensor(a), tw.tensor(a)
    assert F.relu_(x) is x and tw.relu_(y) is y
    assert x.tolist() == y.tolist() == [0.0, 0.5, 2.0]
    # rrelu_ in training: a slope drawn in [lower, upper] per negative element, which is also its gradient
    src = np.linspace(-3, 3, 1000)
    leaf = tw.tensor(src, requires_grad=True)
    z = leaf * 1
    lower, upper = 0.1, 0.3
    assert F.rrelu_(z, lower, upper, training=True) is z
    got = z.detach().numpy()
    np.testing.assert_array_equal(got[src >= 0], src[src >= 0])
    slope = got[src < 0] / src[src < 0]
    assert (slope >= lower - 1e-12).all() and (slope <= upper + 1e-12).all() and slope.std() > 0.01
    z.sum().backward()
    grad = leaf.grad.numpy()
    np.testing.assert_array_equal(grad[src >= 0], 1.0)
    np.testing.assert_allclose(grad[src < 0], slope, rtol=1e-12)


# -- pools with indices ----------------------------------------------------------------------------------------------

POOLS = [
    ("max_pool1d_with_indices", (3, 2, 1), (2, 3, 9)),
    ("max_pool2d_with_indices", ((2, 3), 1, (1, 1), 1, True), (2, 3, 5, 6)),
    ("max_pool3d_with_indices", (2,), (2, 2, 4, 5, 6)),
    ("max_pool3d_with_indices", ((2, 3, 2), (1, 2, 2), 1, (1, 1, 2), True), (2, 5, 6, 7)),
    ("adaptive_max_pool1d_with_indices", (4,), (2, 3, 9)),
    ("adaptive_max_pool2d_with_indices", ((3, None),), (2, 3, 7, 5)),
    ("adaptive_max_pool3d_with_indices", ((2, 3, 2),), (1, 2, 5, 4, 5)),
    ("fractional_max_pool2d_with_indices", (2, (3, 4)), (2, 3, 7, 8)),
    ("fractional_max_pool3d_with_indices", (2, None, 0.5), (1, 2, 6, 6, 7)),
]


@pytest.mark.parametrize("name,args,shape", POOLS, ids=[f"{p[0]}-{i}" for i, p in enumerate(POOLS)])
def test_pool_with_indices_matches_torch(torch, name, args, shape):
    Ft = torch.nn.functional
    x, xt = _pair_of(torch, shape, seed=9)
    kw, kwt = {}, {}
    if name.startswith("fractional"):
        n = 2 if "2d" in name else 3
        lead = shape[:-n - 1] if len(shape) == n + 2 else ()
        samples = np.random.default_rng(10).random((*(lead or (1,)), shape[-n - 1], n))
        kw, kwt = {"_random_samples": tw.tensor(samples)}, {"_random_samples": torch.tensor(samples)}
    out = getattr(F, name)(x, *args, **kw)
    ref = getattr(Ft, name)(xt, *args, **kwt)
    assert isinstance(out, tuple) and len(out) == 2
    _close(out[0], ref[0])
    assert out[1].dtype is tw.int64 and out[1].numpy().tolist() == ref[1].numpy().tolist()
    g = np.random.default_rng(11).standard_normal(tuple(ref[0].shape))
    out[0].backward(tw.tensor(g))
    ref[0].backward(torch.tensor(g))
    _close(x.grad, xt.grad)
    # (torch's return_indices is there for the signature: the pair comes back whatever it says)
    again = getattr(F, name)(x.detach(), *args, **kw, return_indices=False)
    assert isinstance(again, tuple) and again[1].numpy().tolist() == ref[1].numpy().tolist()


def test_with_indices_stay_out_of_all_and_new_names_are_in():
    assert not any(n.endswith("_with_indices") for n in F.__all__)
    for name in ("affine_grid", "gumbel_softmax", "relu_", "elu_", "celu_", "selu_", "leaky_relu_", "hardtanh_",
                 "rrelu_", "threshold_", "native_channel_shuffle", "conv_tbc"):
        assert name in F.__all__ and callable(getattr(F, name)), name


# -- shuffles and the time-first convolution -------------------------------------------------------------------------

def test_native_channel_shuffle_matches_torch(torch):
    x, xt = _pair_of(torch, (2, 6, 3, 2), seed=12)
    y, yt = F.native_channel_shuffle(x, 3), torch.nn.functional.native_channel_shuffle(xt, 3)
    _close(y, yt)
    _close(F.channel_shuffle(x, 3), yt)
    y.backward(tw.tensor(np.arange(72.0).reshape(2, 6, 3, 2)))
    assert x.grad.numpy().reshape(-1).tolist() == (
        torch.nn.functional.channel_shuffle(torch.arange(72.0).reshape(2, 6, 3, 2), 2).reshape(-1).tolist())


@pytest.mark.parametrize("pad", [0, 2])
def test_conv_tbc_matches_torch(torch, pad):
    x, xt = _pair_of(torch, (7, 2, 3), seed=13)
    w, wt = _pair_of(torch, (3, 3, 4), seed=14)
    b, bt = _pair_of(torch, (4,), seed=15)
    y, yt = F.conv_tbc(x, w, b, pad), torch.nn.functional.conv_tbc(xt, wt, bt, pad)
    _close(y, yt)
    g = np.random.default_rng(16).standard_normal(tuple(yt.shape))
    y.backward(tw.tensor(g))
    yt.backward(torch.tensor(g))
    for mine, ref in ((x, xt), (w, wt), (b, bt)):
        _close(mine.grad, ref.grad)


def test_conv_tbc_checks():
    x, w, b = tw.zeros(5, 2, 3), tw.zeros(2, 3, 4), tw.zeros(4)
    with pytest.raises(tw.ShapeError, match="Input must have 3 dims"):
        F.conv_tbc(x[0], w, b)
    with pytest.raises(tw.ShapeError, match="is not == dim 1 in the weight"):
        F.conv_tbc(x, tw.zeros(2, 2, 4), b)
    with pytest.raises(tw.ShapeError, match="Bias size"):
        F.conv_tbc(x, w, tw.zeros(3))
    assert math.prod(F.conv_tbc(x, w, b, 1).shape) == 6 * 2 * 4
