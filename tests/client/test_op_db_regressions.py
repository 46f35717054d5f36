"""Silent errors that torch's op_db found (issue 33; tests/opinfo runs the whole database): each answer is checked
against a numpy float64 reference written from the definition, and against torch where it is installed (value,
shape and dtype). Before their fixes, every case here returned a wrong value, shape or dtype without a word."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw
import tensorwire.nn.functional as F

from ._ref import check, check_torch, data, torch

pytestmark = pytest.mark.usefixtures("session")


def _t(a: np.ndarray):
    """The torch tensor of ``a`` (None without torch)."""
    return None if torch is None else torch.from_numpy(np.array(a))


def _tf():
    return None if torch is None else torch.nn.functional


# -- conv_transpose with output_padding >= stride and padding > 0 ----------------------------------------------------

def _conv_transpose_ref(x, w, b, stride, padding, output_padding, groups, dilation) -> np.ndarray:
    """The definition: every input element adds ``x * w[k]`` at ``i * stride + k * dilation`` of the full output,
    which is then cropped by ``padding`` on both sides and lengthened by ``output_padding`` at the high end."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    sp, k = x.shape[2:], w.shape[2:]
    nd, cg, og = len(sp), x.shape[1] // groups, w.shape[1]
    full = [(sp[i] - 1) * stride[i] + dilation[i] * (k[i] - 1) + 1 for i in range(nd)]
    big = np.zeros((x.shape[0], og * groups, *[f + o for f, o in zip(full, output_padding)]))
    for g in range(groups):
        xs, ws = x[:, g * cg:(g + 1) * cg], w[g * cg:(g + 1) * cg]
        for pos in np.ndindex(*sp):
            for kk in np.ndindex(*k):
                at = tuple(pos[i] * stride[i] + kk[i] * dilation[i] for i in range(nd))
                big[(slice(None), slice(g * og, (g + 1) * og), *at)] += xs[(..., *pos)] @ ws[(..., *kk)]
    crop = tuple(slice(p, f - p + o) for p, f, o in zip(padding, full, output_padding))
    return big[(..., *crop)] + b.astype(np.float64).reshape(-1, *[1] * nd)


CONV_T = [  # (input shape, weight shape, stride, padding, output_padding, groups, dilation)
    # op_db's sample: width output_padding 3 >= stride 2, padding 2 (max diff 62.7 before the fix)
    ((2, 2, 4, 4), (2, 2, 4, 5), (3, 2), (1, 2), (2, 3), 2, (4, 4)),
    # padding larger than output_padding: the extra positions all hold real values
    ((1, 3, 5, 4), (3, 2, 3, 2), (1, 2), (3, 2), (1, 2), 1, (2, 3)),
    ((1, 2, 3, 3), (2, 1, 2, 2), (1, 1), (1, 1), (2, 2), 2, (3, 3)),
]


@pytest.mark.parametrize("xs,ws,stride,padding,op,groups,dilation", CONV_T)
def test_conv_transpose2d_keeps_the_values_output_padding_reaches(xs, ws, stride, padding, op, groups, dilation):
    x, w = data(xs, "float32", seed=1), data(ws, "float32", seed=2)
    b = data((ws[1] * groups,), "float32", seed=3)
    y = F.conv_transpose2d(tw.tensor(x), tw.tensor(w), tw.tensor(b), stride, padding, op, groups, dilation)
    check(y, _conv_transpose_ref(x, w, b, stride, padding, op, groups, dilation), dtype="float32", rtol=1e-5,
          atol=1e-4)
    if torch is not None:
        ref = _tf().conv_transpose2d(_t(x), _t(w), _t(b), stride, padding, op, groups, dilation)
        check_torch(y, ref, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("stride,padding,op,dilation", [(2, 1, 2, 3), (2, 3, 2, 3), (1, 2, 1, 2)])
def test_conv_transpose1d_keeps_the_values_output_padding_reaches(stride, padding, op, dilation):
    x, w, b = data((2, 4, 6), "float32", seed=4), data((4, 3, 3), "float32", seed=5), data((3,), "float32", seed=6)
    y = F.conv_transpose1d(tw.tensor(x), tw.tensor(w), tw.tensor(b), stride, padding, op, 1, dilation)
    ref = _conv_transpose_ref(x, w, b, (stride,), (padding,), (op,), 1, (dilation,))
    check(y, ref, dtype="float32", rtol=1e-5, atol=1e-4)
    if torch is not None:
        check_torch(y, _tf().conv_transpose1d(_t(x), _t(w), _t(b), stride, padding, op, 1, dilation), rtol=1e-5,
                    atol=1e-4)


@pytest.mark.skipif(torch is None, reason="torch's autograd is the gradient reference")
@pytest.mark.parametrize("stride,padding", [(2, 3), (1, 1)])  # output_padding 2 above and below the padding
def test_conv_transpose2d_gradients_through_the_cropped_output(stride, padding):
    x, w = data((1, 2, 4, 4), "float32", seed=7), data((2, 3, 3, 3), "float32", seed=8)
    n = 3 * stride - 2 * padding + 3 * 2 + 2 + 1
    g = data((1, 3, n, n), "float32", seed=9)
    args = (stride, padding, 2, 1, 3)
    tx, tw_ = tw.tensor(x, requires_grad=True), tw.tensor(w, requires_grad=True)
    (F.conv_transpose2d(tx, tw_, None, *args) * tw.tensor(g)).sum().backward()
    rx, rw = _t(x).requires_grad_(), _t(w).requires_grad_()
    (_tf().conv_transpose2d(rx, rw, None, *args) * _t(g)).sum().backward()
    np.testing.assert_allclose(tx.grad.numpy(), rx.grad.numpy(), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(tw_.grad.numpy(), rw.grad.numpy(), rtol=1e-5, atol=1e-4)


# -- std / var: a bool first argument is `unbiased` --------------------------------------------------------------------

@pytest.mark.parametrize("name", ["std", "var"])
def test_std_var_read_a_leading_bool_as_unbiased(name):
    x = data((5, 5), "float32", seed=10)
    t, x64 = tw.tensor(x), x.astype(np.float64)
    fn = np.std if name == "std" else np.var
    for unbiased in (False, True):
        check(getattr(t, name)(unbiased), fn(x64, ddof=int(unbiased)), dtype="float32")
        check(getattr(tw, name)(t, unbiased), fn(x64, ddof=int(unbiased)), dtype="float32")
        check_torch(getattr(t, name)(unbiased), None if torch is None else getattr(_t(x), name)(unbiased))
    check(getattr(t, name)(0), fn(x64, axis=0, ddof=1), dtype="float32")  # an int is still a dim
    check(getattr(t, name)(1, False), fn(x64, axis=1, ddof=0), dtype="float32")


# -- inner ----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "int64"])
@pytest.mark.parametrize("sa,sb", [((), (5, 5)), ((3, 4), ()), ((4,), (4,)), ((3, 4), (2, 4)), ((2, 3, 4), (4,))])
def test_inner_sums_over_the_last_dims(dtype, sa, sb):
    a, b = data(sa, dtype, seed=11), data(sb, dtype, seed=12)
    y = tw.inner(tw.tensor(a), tw.tensor(b))
    ref = np.inner(a.astype(np.float64), b.astype(np.float64))
    check(y, ref if dtype == "float32" else ref.astype(np.int64), dtype=dtype)
    check_torch(y, None if torch is None else torch.inner(_t(a), _t(b)))


def test_inner_refuses_mismatched_last_dims():
    with pytest.raises(tw.ShapeError, match="last dimension must match"):
        tw.inner(tw.ones(2, 3), tw.ones(3, 2))


# -- avg_pool and hardtanh on integers --------------------------------------------------------------------------------

def _avg_pool2d_int_ref(x: np.ndarray, k: int, s: int, p: int) -> np.ndarray:
    """torch's int64 average pool (count_include_pad, no ceil_mode): window sums over the zero-padded input,
    divided by k * k, truncated towards zero."""
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (p, p), (p, p)])
    oh, ow = (xp.shape[2] - k) // s + 1, (xp.shape[3] - k) // s + 1
    out = np.zeros(x.shape[:2] + (oh, ow))
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = xp[:, :, i * s:i * s + k, j * s:j * s + k].sum((2, 3))
    return np.trunc(out / (k * k)).astype(np.int64)


def test_avg_pool_of_int64_truncates_as_torch():
    x = data((2, 3, 9), "int64", seed=13) * 7
    y = F.avg_pool1d(tw.tensor(x), 3)
    check(y, np.trunc(x.reshape(2, 3, 3, 3).sum(-1) / 3).astype(np.int64), dtype="int64")
    check_torch(y, None if torch is None else _tf().avg_pool1d(_t(x), 3))
    x2 = data((1, 2, 7, 7), "int64", seed=14) * 5
    y2 = F.avg_pool2d(tw.tensor(x2), 3, 2, 1)
    check(y2, _avg_pool2d_int_ref(x2, 3, 2, 1), dtype="int64")
    check_torch(y2, None if torch is None else _tf().avg_pool2d(_t(x2), 3, 2, 1))
    check(F.avg_pool2d(tw.tensor(x2), 3, ()), F.avg_pool2d(tw.tensor(x2), 3).numpy(), dtype="int64")  # () = kernel
    if torch is not None:  # op_db's sample: ceil_mode, padding not counted, a divisor override
        y3 = F.avg_pool2d(tw.tensor(x2), 3, 1, 1, True, False, 2)
        check_torch(y3, _tf().avg_pool2d(_t(x2), 3, 1, 1, True, False, 2))


@pytest.mark.parametrize("dtype", ["int32", "uint8", "bool"])
def test_avg_pool_refuses_the_integers_torch_refuses(dtype):
    x = tw.tensor(data((1, 1, 4, 4), dtype, seed=15))
    with pytest.raises(TypeError, match="not implemented for " + dtype):
        F.avg_pool2d(x, 2)
    if torch is not None:
        with pytest.raises(RuntimeError, match="not implemented"):
            _tf().avg_pool2d(_t(x.numpy()), 2)


@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_hardtanh_of_integers_keeps_the_dtype_and_truncates_the_bounds(dtype):
    x = data((5, 5), dtype, seed=16)
    for lo, hi in ((-0.5, 0.5), (-1.7, 2.5), (-1.0, 1.0)):
        y = F.hardtanh(tw.tensor(x), lo, hi)
        check(y, np.clip(x, int(lo), int(hi)), dtype=dtype)
        check_torch(y, None if torch is None else _tf().hardtanh(_t(x), lo, hi))


def test_hardtanh_refuses_bool_as_torch():
    with pytest.raises(TypeError, match="bool"):
        F.hardtanh(tw.tensor([True, False]))


# -- float_power ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("base_dtype,exp_dtype", [("float32", "float32"), ("int64", "int64"), ("bool", "bool"),
                                                  ("float32", "int64")])
def test_float_power_computes_in_float64(base_dtype, exp_dtype):
    a = data((4, 3), base_dtype, seed=17, positive=True)
    e = data((4, 3), exp_dtype, seed=18)
    y = tw.float_power(tw.tensor(a), tw.tensor(e))
    ref = np.power(a.astype(np.float64), e.astype(np.float64))
    check(y, ref, dtype="float64")
    check_torch(y, None if torch is None else torch.float_power(_t(a), _t(e)))


def test_float_power_takes_negative_integer_exponents():
    a = np.array([2, 4, -8, 3], np.int64)
    y = tw.tensor(a).float_power(tw.tensor(np.array([-1, -2, -1, 0], np.int64)))
    check(y, [0.5, 0.0625, -0.125, 1.0], dtype="float64")
    check(tw.tensor(a).float_power(-2), 1.0 / a.astype(np.float64) ** 2, dtype="float64")
    check_torch(y, None if torch is None else torch.float_power(_t(a), torch.tensor([-1, -2, -1, 0])))


# -- batch_norm of an empty 1-D input -------------------------------------------------------------------------------

def test_batch_norm_of_an_empty_1d_input_is_empty():
    for training in (False, True):
        y = F.batch_norm(tw.zeros(0), tw.zeros(0), tw.ones(0), training=training)
        check(y, np.zeros(0), dtype="float32")
    rm, rv = tw.zeros(3), tw.ones(3)
    check(F.batch_norm(tw.zeros(0, 3), rm, rv, training=True), np.zeros((0, 3)), dtype="float32")
    check(rm, np.zeros(3)), check(rv, np.ones(3))  # an empty batch leaves the statistics (torch)


def test_batch_norm_refuses_statistics_of_the_wrong_size():
    with pytest.raises(tw.ShapeError, match="running_mean should contain 0 elements not 3"):
        F.batch_norm(tw.ones(3), tw.zeros(3), tw.ones(3))
    with pytest.raises(tw.ShapeError, match="should contain 4 elements not 3"):
        F.batch_norm(tw.ones(2, 4), tw.zeros(3), tw.ones(3))


# -- found by the harness beyond the list ---------------------------------------------------------------------

def test_cosine_similarity_broadcasts_before_the_norms():
    a, b = data((1, 2, 3), "float32", seed=19), data((2, 1, 3), "float32", seed=20)
    y = F.cosine_similarity(tw.tensor(a), tw.tensor(b), dim=-2)
    a64, b64 = np.broadcast_arrays(a.astype(np.float64), b.astype(np.float64))
    ref = (a64 * b64).sum(-2) / np.maximum(np.linalg.norm(a64, axis=-2) * np.linalg.norm(b64, axis=-2), 1e-8)
    check(y, ref, dtype="float32")
    check_torch(y, None if torch is None else _tf().cosine_similarity(_t(a), _t(b), dim=-2))


def test_unbatched_nll_and_cross_entropy_without_reduction_are_0d():
    logits = data((3,), "float32", seed=21)
    logp = logits.astype(np.float64) - np.log(np.exp(logits.astype(np.float64)).sum())
    y = F.nll_loss(tw.tensor(logp.astype(np.float32)), tw.tensor(np.array(1)), reduction="none")
    check(y, -logp[1], dtype="float32")
    for smoothing in (0.0, 0.2):
        ce = F.cross_entropy(tw.tensor(logits), tw.tensor(np.array(2)), reduction="none", label_smoothing=smoothing)
        check(ce, -(1 - smoothing) * logp[2] - smoothing * logp.mean(), dtype="float32")


@pytest.mark.parametrize("pads", [(-1, 1), (1, -1), (-2, 1), (2, -1), (-1, 3), (-1, 1, -2, 1)])
def test_circular_pad_crops_before_it_wraps(pads):
    x = data((1, 2, 4, 5)[4 - len(pads):], "int64", seed=22)  # torch pads the last dim of 3-D, the last 2 of 4-D
    ref = x
    for i in range(len(pads) // 2):  # torch: crop the negative pads, then wrap the positive ones around the rest
        axis, (lo, hi) = x.ndim - 1 - i, pads[2 * i:2 * i + 2]
        n = ref.shape[axis]
        ref = np.take(ref, range(max(-lo, 0), n - max(-hi, 0)), axis=axis)
        widths = [(0, 0)] * x.ndim
        widths[axis] = (max(lo, 0), max(hi, 0))
        ref = np.pad(ref, widths, mode="wrap")
    y = F.pad(tw.tensor(x), pads, "circular")
    check(y, ref, dtype="int64")
    check_torch(y, None if torch is None else _tf().pad(_t(x), pads, "circular"))


def test_integer_ranges_step_in_integers_as_torch():
    # values torch 2.13 gives (each bound truncated; linspace's second half stepped back from its end)
    check(tw.arange(0.0, -8.000001, -4.0, dtype=tw.int64), [0, -4], dtype="int64")
    check(tw.arange(0.5, 4.7, 1.5, dtype=tw.int64), [0, 1, 2, 3], dtype="int64")
    check(tw.linspace(-3.7, 10.2, 9, dtype=tw.int64), [-3, -1, 0, 1, 3, 5, 6, 8, 10], dtype="int64")
    check(tw.linspace(-2.0, -3, 1, dtype=tw.int64), [-2], dtype="int64")
    assert tw.linspace(0, 1, 50, dtype=tw.int64).tolist()[-2:] == [0, 1]
    check(tw.logspace(0, 2.7, 4, dtype=tw.int64), [1, 4, 21, 100], dtype="int64")
    if torch is not None:
        for args in ((0, 1, 50), (-3.7, 10.2, 9), (0.5, 10.5, 7)):
            check_torch(tw.linspace(*args, dtype=tw.int64), torch.linspace(*args, dtype=torch.int64))
        check_torch(tw.logspace(0, 1.2, 2, dtype=tw.int64), torch.logspace(0, 1.2, 2, dtype=torch.int64))


# -- errors and refusals op_db found (session 20): each of these raised before, or was refused -----------------------

def test_flip_dims_keyword_and_to_positional_flags():
    x = tw.tensor(data((2, 3), "float32", seed=30))
    assert x.flip(dims=(0, 1)).tolist() == x.flip(0, 1).tolist()
    y = x.to("cpu", tw.float64, False, True)  # torch's to(device, dtype, non_blocking, copy)
    assert y.dtype is tw.float64 and y is not x
    assert x.to("cpu", None, False, True) is not x  # copy=True even without a conversion
    for name in ("float", "double", "half", "bfloat16", "long", "int", "short", "char", "byte", "bool"):
        assert getattr(x, name)(memory_format=tw.contiguous_format).dtype is getattr(x, name)().dtype


def test_zero_dim_tensors_index_as_one_element():
    """torch treats a 0-d tensor as one element along dim 0 in the index ops and reductions."""
    x = tw.tensor(2.5)
    i = tw.tensor([0])
    check(x.index_select(0, i), 2.5)
    check(x.index_add(0, i, tw.tensor(1.5), alpha=2), 5.5)
    check(x.index_fill(0, i, -1.0), -1.0)
    check(x.scatter(0, tw.tensor(0), tw.tensor(7.0)), 7.0)
    check(x.scatter_add(0, tw.tensor(0), tw.tensor(7.0)), 9.5)
    check(x.mean(dim=0, keepdim=True), 2.5)
    check(x.sum(-1), 2.5)
    assert tuple(x.nonzero().shape) == (1, 0) and tuple(tw.tensor(0.0).nonzero().shape) == (0, 0)


def test_gathers_take_negative_indices_and_broadcast_masks():
    a = data((3, 4), "float32", seed=31)
    idx = np.array([[-1, 0], [1, -4], [3, -2]])
    check(tw.tensor(a).take_along_dim(tw.tensor(idx), 1), np.take_along_axis(a, idx % 4, 1))
    m = data((2, 3, 4), "bool", seed=32)
    check(tw.tensor(a).masked_select(tw.tensor(m)), np.broadcast_to(a, m.shape)[m])
    parts = tw.tensor(a).tensor_split(tw.tensor([1, 3]), 1)
    assert [tuple(p.shape) for p in parts] == [(3, 1), (3, 2), (3, 1)]
    assert len(tw.tensor(a).tensor_split(tw.tensor(2))) == 2


def test_scatter_multiply_and_scatter_reduce():
    x = np.full((3, 3), 2.0, np.float32)
    idx = np.array([[0, 1, 0], [0, 0, 2]])
    src = np.array([[2.0, 3.0, 4.0], [5.0, 6.0, 7.0]], np.float32)
    ref = x.copy()
    for (r, c), v in zip(np.ndindex(*idx.shape), src.reshape(-1)):
        ref[idx[r, c], c] *= v
    check(tw.tensor(x).scatter(0, tw.tensor(idx), tw.tensor(src), reduce="multiply"), ref)
    out = tw.tensor(np.zeros(3, np.float32)).scatter_reduce(0, tw.tensor([0, 0, 2]), tw.tensor([1.0, 5.0, 2.0]),
                                                            "amax", include_self=False)
    check(out, [5.0, 0.0, 2.0])
    mean = tw.tensor([5, 7, 9]).scatter_reduce(0, tw.tensor([0, 0]), tw.tensor([2, 4]), "mean")
    assert mean.tolist() == [3, 7, 9] and mean.dtype is tw.int64  # (5 + 2 + 4) // 3, as torch


def test_tensordot_broadcasts_size_one_dims():
    a, b = data((1, 1, 1), "float32", seed=33), data((2, 1, 2), "float32", seed=34)
    got = tw.tensordot(tw.tensor(a), tw.tensor(b), dims=([0, 1], [2, 0]))
    # a's size-1 dims 0 and 1 meet b's dims 2 and 0 (size 2): a broadcasts, and the sum runs over both
    want = np.einsum("ijk,jmi->km", np.broadcast_to(a, (2, 2, 1)), b)
    check(got, want)
    if torch is not None:
        check_torch(got, torch.tensordot(_t(a), _t(b), dims=([0, 1], [2, 0])))


@pytest.mark.skipif(torch is None, reason="torch is the reference for these layers")
def test_functional_forms_match_torch():
    rng = np.random.default_rng(35)
    x = rng.standard_normal((2, 3, 6, 7)).astype(np.float32)
    tf = _tf()
    v, i = F.max_pool2d(tw.tensor(x), 3, 2, 1, return_indices=True)
    rv, ri = tf.max_pool2d(_t(x), 3, 2, 1, return_indices=True)
    check_torch(v, rv)
    check_torch(i, ri)
    for mode, kw in (("area", {}), ("nearest-exact", {}), ("bicubic", {"align_corners": False}),
                     ("bicubic", {"align_corners": True})):
        check_torch(F.interpolate(tw.tensor(x), size=(4, 9), mode=mode, **kw),
                    tf.interpolate(_t(x), size=(4, 9), mode=mode, **kw), rtol=1e-5, atol=1e-5)
    grid = rng.uniform(-1.2, 1.2, (2, 5, 4, 2)).astype(np.float32)
    for mode in ("bilinear", "nearest", "bicubic"):
        for pad in ("zeros", "border", "reflection"):
            check_torch(F.grid_sample(tw.tensor(x), tw.tensor(grid), mode, pad, align_corners=False),
                        tf.grid_sample(_t(x), _t(grid), mode, pad, align_corners=False), rtol=1e-5, atol=1e-5)
    x3 = rng.standard_normal((1, 2, 5, 6, 7)).astype(np.float32)
    w3 = rng.standard_normal((4, 2, 3, 2, 3)).astype(np.float32)
    check_torch(F.conv3d(tw.tensor(x3), tw.tensor(w3), None, (2, 1, 2), 1, (1, 2, 1)),
                tf.conv3d(_t(x3), _t(w3), None, (2, 1, 2), 1, (1, 2, 1)), rtol=1e-5, atol=1e-5)
    check_torch(F.avg_pool3d(tw.tensor(x3), 2, 1, 1, count_include_pad=False),
                tf.avg_pool3d(_t(x3), 2, 1, 1, count_include_pad=False))
    u = rng.random((2, 3, 2)).astype(np.float32)
    fv, fi = F.fractional_max_pool2d(tw.tensor(x), 2, output_size=(3, 4), return_indices=True,
                                     _random_samples=tw.tensor(u))
    rv, ri = tf.fractional_max_pool2d(_t(x), 2, output_size=(3, 4), return_indices=True, _random_samples=_t(u))
    check_torch(fv, rv)
    check_torch(fi, ri)


@pytest.mark.skipif(torch is None, reason="torch is the reference for its signature")
def test_multi_head_attention_forward_takes_torchs_signature():
    rng = np.random.default_rng(36)
    L, N, E, H = 3, 2, 4, 2  # noqa: N806
    q = rng.standard_normal((L, N, E)).astype(np.float32)
    w_in, b_in = rng.standard_normal((3 * E, E)).astype(np.float32), rng.standard_normal(3 * E).astype(np.float32)
    w_out, b_out = rng.standard_normal((E, E)).astype(np.float32), rng.standard_normal(E).astype(np.float32)
    args = [E, H]
    out, w = F.multi_head_attention_forward(tw.tensor(q), tw.tensor(q), tw.tensor(q), *args, tw.tensor(w_in),
                                            tw.tensor(b_in), None, None, False, 0.0, tw.tensor(w_out),
                                            tw.tensor(b_out), training=False)
    rout, rw = _tf().multi_head_attention_forward(_t(q), _t(q), _t(q), *args, _t(w_in), _t(b_in), None, None, False,
                                                  0.0, _t(w_out), _t(b_out), training=False)
    check_torch(out, rout, rtol=1e-5, atol=1e-5)
    check_torch(w, rw, rtol=1e-5, atol=1e-5)


def test_nextafter_steps_one_ulp_as_numpy():
    for dt in (np.float32, np.float64):
        fi = np.finfo(dt)
        x = np.array([0.0, -0.0, 1.0, 0.5, -2.0, 3.0, fi.tiny, -float(fi.smallest_subnormal), fi.max, np.inf,
                      -np.inf, np.nan, 1e-30], dtype=dt)
        for y in (np.full_like(x, np.inf), np.zeros_like(x), x[::-1].copy()):
            got = tw.nextafter(tw.tensor(x), tw.tensor(y)).numpy()
            with np.errstate(over="ignore"):
                want = np.nextafter(x, y)
            assert got.dtype == dt
            assert np.array_equal(got, want, equal_nan=True)
            assert np.array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.skipif(torch is None, reason="torch is the reference for the CTC loss and its gradient")
def test_ctc_loss_and_gradient_match_torch():
    rng = np.random.default_rng(37)
    T, N, C = 7, 3, 5  # noqa: N806
    logits = rng.standard_normal((T, N, C))
    targets = np.array([[1, 2, 2], [3, 0, 0], [4, 1, 0]])  # a repeated label, a short and an empty-padded target
    in_len, tg_len = [7, 5, 6], [3, 1, 2]
    x = tw.tensor(logits, requires_grad=True)
    loss = F.ctc_loss(x.log_softmax(2), tw.tensor(targets), in_len, tg_len)
    loss.backward()
    tx = torch.tensor(logits, requires_grad=True)
    ref = _tf().ctc_loss(tx.log_softmax(2), torch.tensor(targets), in_len, tg_len)
    ref.backward()
    check_torch(loss.detach(), ref.detach(), rtol=1e-9, atol=1e-9)
    check_torch(x.grad, tx.grad, rtol=1e-7, atol=1e-9)


# -- fmax / fmin were maximum / minimum, which propagate NaN -----------------------------------------------------------

@pytest.mark.parametrize("name", ["fmax", "fmin"])
def test_fmax_fmin_take_the_operand_that_is_not_nan(name):
    """torch.fmax/fmin (numpy's too): where one operand is NaN the other is the result, NaN only where both are; the
    gradient goes where torch's mask sends it (the first operand where it wins, ties, or the second is NaN)."""
    a = np.array([1.0, np.nan, np.nan, -2.0, 3.0, 4.0], np.float32)
    b = np.array([np.nan, 2.0, np.nan, -1.0, 5.0, 4.0], np.float32)
    got = getattr(tw, name)(tw.tensor(a), tw.tensor(b)).numpy()
    np.testing.assert_array_equal(got, getattr(np, name)(a.astype(np.float64), b.astype(np.float64)).astype(np.float32))
    np.testing.assert_array_equal(getattr(tw.tensor(a), name)(tw.tensor(b)).numpy(), got)
    x, y = tw.tensor(a, requires_grad=True), tw.tensor(b, requires_grad=True)
    getattr(tw, name)(x, y).sum().backward()
    first = (a >= b) if name == "fmax" else (a <= b)
    first = first | np.isnan(b)
    np.testing.assert_array_equal(x.grad.numpy(), first.astype(np.float32))
    np.testing.assert_array_equal(y.grad.numpy(), (~first).astype(np.float32))
    assert getattr(tw, name)(tw.tensor([1, 5]), tw.tensor([3, 2])).dtype == tw.int64
    if torch is not None:
        ref = getattr(torch, name)(_t(a), _t(b)).numpy()
        np.testing.assert_array_equal(got, ref)
