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
