"""Fixes found by probing ``tw.nn`` against PyTorch 2.13 (CPU), each against torch with the same inputs:

- ``layer_norm`` / ``group_norm`` / ``rms_norm`` (and their modules) of a float16 / bfloat16 input with float32
  weights (a LayerNorm after a Linear under CPU autocast) give the input's dtype, computed in float32 as torch's
  kernels; ``rms_norm``'s default eps for a half input is float32's;
- ``grid_sample``'s gradient w.r.t. the grid is 0 for points exactly at the clipping limits of ``border`` and
  ``reflection`` padding (an identity spatial transformer's corners with ``align_corners=True``), 2-D and 3-D;
- ``one_hot`` raises torch's errors for class values out of range (at once for values the client holds, when the
  result is read for values only the device has);
- ``unfold`` / ``nn.Unfold`` of an unbatched ``[C, H, W]`` input;
- ``nn.utils.parametrizations.orthogonal``: torch's maps, initial weights and training steps.

(``functional_call``: tests/client/test_func_namespace.py.)"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tensorwire as tw

torch = pytest.importorskip("torch", reason="PyTorch is the reference here (pip install torch==2.13.0)")

F = tw.nn.functional
TF = torch.nn.functional
pytestmark = pytest.mark.usefixtures("session")

HALVES = [("bfloat16", 1 / 128), ("float16", 1 / 1024)]


def _np(t) -> np.ndarray:
    """A tensor's values in float64 (a half one through float32: numpy reads neither torch's bfloat16 nor float16)."""
    t = t.detach()
    if _dtype_name(t) in ("bfloat16", "float16"):
        t = t.float()
    return np.asarray(t.numpy(), dtype=np.float64)


def _dtype_name(t) -> str:
    return str(t.dtype).removeprefix("torch.").removeprefix("tensorwire.")


# -- normalisation of half inputs with float32 weights ---------------------------------------------------------------

def _norm_cases(lib):
    Fn = lib.nn.functional
    return {
        "layer_norm": lambda x, w, b: Fn.layer_norm(x, (6,), w, b),
        "layer_norm_weight_only": lambda x, w, b: Fn.layer_norm(x, (6,), w),
        "layer_norm_plain": lambda x, w, b: Fn.layer_norm(x, (4, 6)),
        "group_norm": lambda x, w, b: Fn.group_norm(x, 2, w[:4], b[:4]),
        "rms_norm": lambda x, w, b: Fn.rms_norm(x, (6,), w),
        "rms_norm_plain": lambda x, w, b: Fn.rms_norm(x, (6,)),
    }


@pytest.mark.parametrize("half,ulp", HALVES)
@pytest.mark.parametrize("weights", ["float32", "same"])
def test_half_norms_keep_the_input_dtype_with_float32_weights(half, ulp, weights):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((3, 4, 6)) * 0.05).astype(np.float32)  # (small values: rms_norm's eps shows)
    w, b = rng.standard_normal(6).astype(np.float32), rng.standard_normal(6).astype(np.float32)
    wdt = weights if weights != "same" else half
    xt, wt, bt = (torch.tensor(a).to(getattr(torch, d)) for a, d in ((x, half), (w, wdt), (b, wdt)))
    xw, ww, bw = (tw.tensor(a).to(getattr(tw, d)) for a, d in ((x, half), (w, wdt), (b, wdt)))
    ours, ref = _norm_cases(tw), _norm_cases(torch)
    for name in ours:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (torch's rms_norm: "Mismatch dtype between input and weight")
            want = ref[name](xt, wt, bt)
        got = ours[name](xw, ww, bw)
        assert _dtype_name(got) == _dtype_name(want) == half, name
        # one rounding of the float32 result (torch's), not two or three: within an ulp of the values' size
        np.testing.assert_allclose(_np(got), _np(want), rtol=ulp, atol=ulp, err_msg=name)


def test_half_norm_modules_and_their_gradients():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 3, 3)).astype(np.float32)
    for make in (lambda lib: lib.nn.LayerNorm([3, 3]), lambda lib: lib.nn.GroupNorm(2, 4),
                 lambda lib: lib.nn.RMSNorm(3)):
        mt, m = make(torch), make(tw)
        with torch.no_grad():
            for p in mt.parameters():
                p.copy_(torch.tensor(rng.standard_normal(tuple(p.shape)).astype(np.float32)))
        m.load_state_dict({k: tw.tensor(v.numpy()) for k, v in mt.state_dict().items()})
        xt = torch.tensor(x).bfloat16().requires_grad_()
        xw = tw.tensor(x).bfloat16().requires_grad_()
        yt, yw = mt(xt), m(xw)
        assert yw.dtype is tw.bfloat16 and yt.dtype is torch.bfloat16
        np.testing.assert_allclose(_np(yw), _np(yt), rtol=1 / 128, atol=1 / 128)
        g = rng.standard_normal(x.shape).astype(np.float32)
        (yt.float() * torch.tensor(g)).sum().backward()
        (yw.float() * tw.tensor(g)).sum().backward()
        assert xw.grad.dtype is tw.bfloat16
        np.testing.assert_allclose(_np(xw.grad), _np(xt.grad), rtol=3e-2, atol=3e-2)
        for p, pt in zip(m.parameters(), mt.parameters()):
            assert p.grad.dtype is tw.float32
            np.testing.assert_allclose(_np(p.grad), _np(pt.grad), rtol=3e-2, atol=3e-2)


def test_layer_norm_after_linear_under_cpu_autocast():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 8)).astype(np.float32)
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.LayerNorm(6), torch.nn.Linear(6, 6),
                              torch.nn.GroupNorm(3, 6))
    ours = tw.nn.Sequential(tw.nn.Linear(8, 6), tw.nn.LayerNorm(6), tw.nn.Linear(6, 6), tw.nn.GroupNorm(3, 6))
    ours.load_state_dict({k: tw.tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = ref(torch.tensor(x))
    with tw.autocast("cpu", dtype=tw.bfloat16):
        got = ours(tw.tensor(x))
    assert want.dtype is torch.bfloat16 and got.dtype is tw.bfloat16
    np.testing.assert_allclose(_np(got), _np(want), rtol=3e-2, atol=3e-2)


def test_float32_norms_are_unchanged():
    rng = np.random.default_rng(3)
    x, w, b = rng.standard_normal((3, 4, 6)), rng.standard_normal(6), rng.standard_normal(6)
    ours, ref = _norm_cases(tw), _norm_cases(torch)
    for name in ours:
        got = ours[name](tw.tensor(x), tw.tensor(w), tw.tensor(b))
        want = ref[name](torch.tensor(x), torch.tensor(w), torch.tensor(b))
        assert got.dtype is tw.float64, name
        np.testing.assert_allclose(_np(got), _np(want), rtol=1e-12, atol=1e-12, err_msg=name)


# -- grid_sample's grid gradient at the clipping limits --------------------------------------------------------------

#: normalised coordinates at the limits (-1, 1), just inside, inside and outside them
_POINTS = np.array([-1.0, 1.0, -0.999, 0.3, -1.2, 1.3, 0.6, -2.5, 2.2, 0.999])


@pytest.mark.parametrize("align_corners", [True, False])
@pytest.mark.parametrize("padding_mode", ["border", "reflection", "zeros"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_grid_sample_grid_gradient_at_the_limits_matches_torch(mode, padding_mode, align_corners):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 2, 4, 5))
    grid = np.stack(np.meshgrid(_POINTS, _POINTS[::-1]), -1)[None].repeat(2, 0)  # every pair of points
    gt, gw = torch.tensor(grid, requires_grad=True), tw.tensor(grid, requires_grad=True)
    xt, xw = torch.tensor(x, requires_grad=True), tw.tensor(x, requires_grad=True)
    yt = TF.grid_sample(xt, gt, mode=mode, padding_mode=padding_mode, align_corners=align_corners)
    yw = F.grid_sample(xw, gw, mode=mode, padding_mode=padding_mode, align_corners=align_corners)
    w = rng.standard_normal(tuple(yt.shape))
    (yt * torch.tensor(w)).sum().backward()
    (yw * tw.tensor(w)).sum().backward()
    np.testing.assert_allclose(_np(yw), _np(yt), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(_np(gw.grad), _np(gt.grad), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(_np(xw.grad), _np(xt.grad), rtol=1e-10, atol=1e-12)


def test_identity_spatial_transformer_corners_get_no_grid_gradient():
    """An identity affine grid with ``align_corners=True`` puts the corners exactly at +-1: with border padding their
    grid gradient is 0 along the clipped coordinate (torch's), and so is theta's, as torch's."""
    x = np.random.default_rng(5).standard_normal((1, 1, 3, 4))
    theta = np.array([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
    tt, tw_theta = torch.tensor(theta, requires_grad=True), tw.tensor(theta, requires_grad=True)
    yt = TF.grid_sample(torch.tensor(x), TF.affine_grid(tt, (1, 1, 3, 4), align_corners=True),
                        padding_mode="border", align_corners=True)
    yw = F.grid_sample(tw.tensor(x), F.affine_grid(tw_theta, (1, 1, 3, 4), align_corners=True),
                       padding_mode="border", align_corners=True)
    yt.sum().backward()
    yw.sum().backward()
    np.testing.assert_allclose(_np(tw_theta.grad), _np(tt.grad), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("align_corners", [True, False])
@pytest.mark.parametrize("padding_mode", ["border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_3d_grid_gradient_at_the_limits_matches_torch(mode, padding_mode, align_corners):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 2, 3, 4, 5))
    pts = np.array([-1.0, 1.0, 0.2, 1.4, -1.1])
    grid = np.stack(np.meshgrid(pts, pts, pts, indexing="ij"), -1)[None]
    gt, gw = torch.tensor(grid, requires_grad=True), tw.tensor(grid, requires_grad=True)
    yt = TF.grid_sample(torch.tensor(x), gt, mode=mode, padding_mode=padding_mode, align_corners=align_corners)
    yw = F.grid_sample(tw.tensor(x), gw, mode=mode, padding_mode=padding_mode, align_corners=align_corners)
    w = rng.standard_normal(tuple(yt.shape))
    (yt * torch.tensor(w)).sum().backward()
    (yw * tw.tensor(w)).sum().backward()
    np.testing.assert_allclose(_np(yw), _np(yt), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(_np(gw.grad), _np(gt.grad), rtol=1e-10, atol=1e-12)


# -- one_hot's class checks ------------------------------------------------------------------------------------------

def _device_only(values) -> tw.Tensor:
    """An int64 tensor of ``values`` that only the device has (a float product, then a cast: not worked out on the
    client), so reading it would cost a round trip."""
    t = (tw.tensor(np.asarray(values, np.float64)) * 1.0).long()
    assert F._held_value(t) is None
    return t


@pytest.mark.parametrize("values,num_classes", [([0, 5], 3), ([-1, 1], 3), ([-1, 1], -1), ([2, 0], 2),
                                                ([0, 1], 0), ([1], -2)])
def test_one_hot_rejects_out_of_range_classes_at_once_when_held(values, num_classes):
    with pytest.raises(RuntimeError) as want:
        TF.one_hot(torch.tensor(values), num_classes)
    with pytest.raises(RuntimeError) as got:
        F.one_hot(tw.tensor(values), num_classes)
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize("values", [[0, 5, 1], [0, -1, 2]])
def test_one_hot_of_device_values_fails_when_read(values):
    """Values only the device has: no read at the call (no round trip); the result fails to read, a RuntimeError as
    torch's."""
    out = F.one_hot(_device_only(values), 3)
    assert tuple(out.shape) == (3, 3)
    with pytest.raises(RuntimeError, match="out of bounds"):
        out.numpy()


def test_one_hot_of_device_values_with_num_classes_minus_one_reads_min_and_max():
    with pytest.raises(RuntimeError, match="Class values must be non-negative."):
        F.one_hot(_device_only([0, -1, 2]))
    np.testing.assert_array_equal(F.one_hot(_device_only([[0, 3], [1, 1]])).numpy(),
                                  TF.one_hot(torch.tensor([[0, 3], [1, 1]])).numpy())


def test_one_hot_valid_values_and_empty_tensors_match_torch():
    for values, n in (([1, 0, 3], 5), ([[2], [0]], 3), ([[2], [0]], -1)):
        want = TF.one_hot(torch.tensor(values), n).numpy()
        np.testing.assert_array_equal(F.one_hot(tw.tensor(values), n).numpy(), want)
        np.testing.assert_array_equal(F.one_hot(_device_only(values), n).numpy(), want)
    empty = tw.tensor(np.zeros(0, np.int64))
    assert tuple(F.one_hot(empty, 4).shape) == tuple(TF.one_hot(torch.zeros(0, dtype=torch.long), 4).shape)
    with pytest.raises(RuntimeError, match="Can not infer total number of classes from empty tensor."):
        F.one_hot(empty)


# -- unbatched unfold ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [{"kernel_size": 2}, {"kernel_size": (2, 3), "padding": 1, "stride": (1, 2)},
                                    {"kernel_size": 2, "dilation": 2}])
def test_unfold_of_an_unbatched_input_matches_torch(kwargs):
    x = np.random.default_rng(7).standard_normal((3, 5, 6))
    xt, xw = torch.tensor(x, requires_grad=True), tw.tensor(x, requires_grad=True)
    yt, yw = TF.unfold(xt, **kwargs), F.unfold(xw, **kwargs)
    assert tuple(yw.shape) == tuple(yt.shape) and yw.ndim == 2
    np.testing.assert_allclose(_np(yw), _np(yt), rtol=0, atol=0)
    w = np.random.default_rng(8).standard_normal(tuple(yt.shape))
    (yt * torch.tensor(w)).sum().backward()
    (yw * tw.tensor(w)).sum().backward()
    np.testing.assert_allclose(_np(xw.grad), _np(xt.grad), rtol=1e-12, atol=1e-12)
    mt, m = torch.nn.Unfold(**kwargs), tw.nn.Unfold(**kwargs)
    np.testing.assert_allclose(_np(m(xw)), _np(mt(xt)), rtol=0, atol=0)
    np.testing.assert_allclose(_np(F.unfold(xw[None], **kwargs)), _np(TF.unfold(xt[None], **kwargs)), rtol=0, atol=0)


def test_unfold_then_fold_unbatched_and_bad_ranks():
    x = np.random.default_rng(9).standard_normal((2, 4, 4))
    cols = F.unfold(tw.tensor(x), 2, stride=2)
    np.testing.assert_allclose(_np(F.fold(cols, (4, 4), 2, stride=2)), x, rtol=0, atol=0)
    for shape in ((4, 4), (1, 1, 2, 4, 4)):
        with pytest.raises((ValueError, RuntimeError), match="3D or 4D"):
            F.unfold(tw.zeros(*shape), 2)


# -- orthogonal ------------------------------------------------------------------------------------------------------

def _linear_pair(out_f: int, in_f: int, seed: int = 0):
    torch.manual_seed(seed)
    mt = torch.nn.Linear(in_f, out_f).double()
    m = tw.nn.Linear(in_f, out_f).double()
    m.load_state_dict({k: tw.tensor(v.detach().numpy()) for k, v in mt.state_dict().items()})
    return m, mt


def _orthonormality_error(w: np.ndarray) -> float:
    g = w.T @ w if w.shape[0] >= w.shape[1] else w @ w.T
    return float(np.abs(g - np.eye(min(w.shape))).max())


@pytest.mark.parametrize("shape,orthogonal_map,triv", [
    ((4, 4), None, True), ((5, 3), None, True), ((3, 5), None, True), ((4, 4), "cayley", True),
    ((5, 3), "matrix_exp", True), ((4, 4), "householder", True), ((5, 3), "householder", False),
    ((3, 5), "householder", False)])
def test_orthogonal_matches_torch_at_registration_and_through_training(shape, orthogonal_map, triv):
    P, PT = tw.nn.utils.parametrizations, torch.nn.utils.parametrizations
    m, mt = _linear_pair(*shape)
    PT.orthogonal(mt, orthogonal_map=orthogonal_map, use_trivialization=triv)
    P.orthogonal(m, orthogonal_map=orthogonal_map, use_trivialization=triv)
    assert sorted(m.state_dict()) == sorted(mt.state_dict())
    assert type(m).__name__ == "ParametrizedLinear"
    if shape[0] == shape[1] or not triv:  # (no random completion: the same weights from the same original)
        np.testing.assert_allclose(_np(m.weight), _np(mt.weight), rtol=1e-10, atol=1e-12)
    # a tall or wide base is completed with random columns: take torch's, then train both alike
    m.load_state_dict({k: tw.tensor(v.detach().numpy()) for k, v in mt.state_dict().items()})
    np.testing.assert_allclose(_np(m.weight), _np(mt.weight), rtol=1e-10, atol=1e-12)
    assert _orthonormality_error(_np(m.weight)) < 1e-12
    opt, optt = tw.optim.SGD(m.parameters(), lr=0.2), torch.optim.SGD(mt.parameters(), lr=0.2)
    rng = np.random.default_rng(10)
    for _ in range(4):
        x, y = rng.standard_normal((6, shape[1])), rng.standard_normal((6, shape[0]))
        for mod, o, lib in ((m, opt, tw), (mt, optt, torch)):
            o.zero_grad()
            ((mod(lib.tensor(x)) - lib.tensor(y)) ** 2).mean().backward()
            o.step()
    np.testing.assert_allclose(_np(m.parametrizations.weight.original), _np(mt.parametrizations.weight.original),
                               rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(_np(m.weight), _np(mt.weight), rtol=1e-8, atol=1e-9)
    assert _orthonormality_error(_np(m.weight)) < 1e-12


def test_orthogonal_keeps_an_orthogonal_weight_and_assignment_sets_the_base():
    P = tw.nn.utils.parametrizations
    q = np.linalg.qr(np.random.default_rng(11).standard_normal((4, 4)))[0]
    m = tw.nn.Linear(4, 4).double()
    with tw.no_grad():
        m.weight.copy_(tw.tensor(q))
    P.orthogonal(m)
    np.testing.assert_allclose(_np(m.weight), q, rtol=1e-12, atol=1e-12)  # (orthogonal already: kept)
    np.testing.assert_allclose(_np(m.parametrizations.weight.original), -np.eye(4), rtol=0, atol=0)
    q2 = np.linalg.qr(np.random.default_rng(12).standard_normal((4, 4)))[0]
    m.weight = tw.tensor(q2)
    np.testing.assert_allclose(_np(m.weight), q2, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_np(m.parametrizations.weight[0].base), q2, rtol=1e-12, atol=1e-12)


def test_orthogonal_rejects_what_torch_rejects():
    P = tw.nn.utils.parametrizations
    with pytest.raises(ValueError, match="Expected a matrix or batch of matrices"):
        P.orthogonal(tw.nn.Linear(3, 3), "bias")
    with pytest.raises(ValueError, match="orthogonal_map has to be one of"):
        P.orthogonal(tw.nn.Linear(3, 3), orthogonal_map="qr")
    with pytest.raises(ValueError, match="has no parameter or buffer"):
        P.orthogonal(tw.nn.Linear(3, 3), "nothing")
    m = P.orthogonal(tw.nn.Linear(3, 3), use_trivialization=False)
    with pytest.raises(NotImplementedError, match="use_trivialization=False"):
        m.weight = tw.eye(3)

