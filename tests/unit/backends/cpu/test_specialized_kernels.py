"""The straight-line runner's specialised callables (``kernels.specialize``: the numpy function itself, without the
generic kernel's dtype logic) give what the generic kernels give, bit for bit, signs of zeros, infinities and nans
included, and refuse what they refuse; a matmul that contracts a dimension of 1 (an outer product: a recurrent
layer's weight gradient) is a broadcast multiply, equal to BLAS's product and with torch's signs of zeros."""

from __future__ import annotations

import numpy as np
import pytest

from tensorwire.backends import executor as X
from tensorwire.backends.cpu import NumpyBackend
from tensorwire.backends.cpu.kernels import KERNELS, specialize
from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import IndexOutOfRange

DEVICE = NumpyBackend().open(0)
RNG = np.random.default_rng(7)


def _step(op: str, arrays: list, attrs: dict):
    """The one step a node ``op`` over inputs shaped as ``arrays`` plans to."""
    plan = X.compile_plan(DEVICE, [[op, [-(k + 1) for k in range(len(arrays))], attrs]],
                          [(a.shape, D.from_numpy(a.dtype)) for a in arrays])
    assert not plan.failed_nodes, plan.node_meta
    (step,) = plan.program.steps
    return step


def _both(op: str, arrays: list, attrs: dict, specialised: bool = True):
    """(the specialised callable's result, the generic kernel's) for ``op`` over ``arrays``."""
    step = _step(op, arrays, attrs)
    fn = DEVICE.specialize(step)
    assert (specialize(step) is not None) == specialised  # (else the generic kernel, wrapped)
    with np.errstate(all="ignore"):  # (as the runners run them)
        generic = KERNELS[op](list(arrays), step.attrs, step.shape, step.dtype)
        got = fn(*arrays)
    assert got.shape == tuple(step.shape) and got.dtype == step.dtype.np
    return got, generic


def _same_bits(a, b) -> None:
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype
    assert np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


def _special(shape, dtype=np.float32) -> np.ndarray:
    """Random values with a -0.0, a 0.0, an infinity and a nan among them."""
    x = RNG.standard_normal(shape).astype(dtype)
    flat = x.reshape(-1)
    for k, v in enumerate((-0.0, 0.0, np.inf, np.nan)[:flat.size]):
        flat[(k * 7) % flat.size] = v
    return x


@pytest.mark.parametrize("xs,ys", [((5, 1), (1, 3)), ((2, 5, 1), (2, 1, 3)), ((2, 5, 1), (1, 3)), ((4, 2), (2, 3)),
                                   ((3,), (3, 2)), ((1,), (1, 4)), ((0, 1), (1, 3))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matmul(xs, ys, dtype):
    x, y = _special(xs, dtype), _special(ys, dtype)
    got, generic = _both("matmul", [x, y], {})
    _same_bits(got, generic)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(got, np.matmul(x, y))  # (equal values; nan where BLAS has nan)


def test_an_outer_product_keeps_the_signs_of_zeros_as_torch_does():
    """BLAS's ``[M, 1] @ [1, N]`` adds each product to +0.0 (``-1 * 0.0`` comes out +0.0); torch's CPU matmul and
    the multiply keep the product's sign."""
    x = np.array([[-1.0], [1.0]], np.float32)
    y = np.array([[0.0, -0.0, 2.0]], np.float32)
    got, _ = _both("matmul", [x.T.copy().T, y], {})  # (a transposed view, as a weight gradient's ``h.T``)
    assert np.signbit(got).tolist() == [[True, False, True], [False, True, False]]


@pytest.mark.parametrize("xs,ws,bias", [((2, 7), (3, 7), True), ((2, 7), (3, 7), False), ((4, 1), (3, 1), True),
                                        ((7,), (3, 7), True), ((1, 185), (128, 185), True)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_linear(xs, ws, bias, dtype):
    arrays = [_special(xs, dtype), RNG.standard_normal(ws).astype(dtype)]
    if bias:
        arrays.append(_special((ws[0],), dtype))
    got, generic = _both("linear", arrays, {})
    _same_bits(got, generic)


def test_a_linear_of_3d_input_stays_on_the_generic_kernel():
    """(Its rows are one gemm there: :func:`kernels._matmul`.)"""
    arrays = [_special((2, 2, 3)), _special((4, 3)), _special((4,))]
    got, generic = _both("linear", arrays, {}, specialised=False)
    _same_bits(got, generic)


@pytest.mark.parametrize("shape,dim", [((1, 4), 1), ((3, 4), 1), ((3, 4), 0), ((2, 3, 4), -1), ((5,), 0)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_log_softmax(shape, dim, dtype):
    x = _special(shape, dtype)
    if len(shape) > 1:
        x[0] = np.inf  # (a row whose maximum is infinite: read as 0, as the decomposition reads it)
    got, generic = _both("log_softmax", [x], {"dim": dim})
    _same_bits(got, generic)


@pytest.mark.parametrize("shapes,dim", [([(1, 57), (1, 128)], 1), ([(2, 3), (4, 3), (1, 3)], 0), ([(2, 0), (2, 3)], 1)])
def test_cat(shapes, dim):
    arrays = [_special(s) for s in shapes]
    got, generic = _both("cat", arrays, {"dim": dim})
    _same_bits(got, generic)


@pytest.mark.parametrize("xs,idx,dim", [((1, 4), [[3]], -1), ((3, 4), [[0, 3], [1, 1], [2, 0]], 1),
                                        ((3, 4), [[2, 0, 1, 1], [0, 0, 0, 2]], 0), ((2, 3, 4), [[[1], [0]]], 2)])
def test_gather(xs, idx, dim):
    x = _special(xs)
    i = np.array(idx, np.int64)
    got, generic = _both("gather", [x, i], {"dim": dim})
    _same_bits(got, generic)
    d = dim % x.ndim
    sub = tuple(slice(None) if k == d else slice(0, n) for k, n in enumerate(i.shape))
    _same_bits(got, np.take_along_axis(x[sub], i, axis=d))


@pytest.mark.parametrize("bad", [4, -1])
def test_a_gather_out_of_range_raises_as_the_kernel_does(bad):
    x, i = _special((2, 4)), np.array([[0], [bad]], np.int64)
    step = _step("gather", [x, i], {"dim": 1})
    for fn in (DEVICE.specialize(step), lambda *a: KERNELS["gather"](list(a), step.attrs, step.shape, step.dtype)):
        with pytest.raises(IndexOutOfRange, match=f"index {bad} is out of bounds for dimension with size 4"):
            fn(x, i)


@pytest.mark.parametrize("src,shape", [((), (2, 3)), ((1, 1), (2, 3)), ((1,), (4,)), ((3, 1), (3, 4)), ((), (0, 2))])
def test_expand(src, shape):
    x = _special(src) if src else np.array(-0.0, np.float32)
    got, generic = _both("expand", [x], {"shape": list(shape)})
    _same_bits(got, generic)
    assert not got.flags.writeable  # (a view of its input: buffers are immutable)
    assert DEVICE.storage(got) == DEVICE.storage(x)  # (the quota counts the input's memory, once)


def test_expand_of_a_full_reductions_numpy_scalar():
    """A full reduction's result may be a numpy scalar, not an array: it expands all the same."""
    x = np.add.reduce(np.ones(3, np.float32), axis=None)
    step = _step("expand", [np.asarray(x)], {"shape": [2, 2]})
    got = DEVICE.specialize(step)(x)
    _same_bits(got, np.full((2, 2), 3.0, np.float32))
    assert DEVICE.storage(DEVICE.specialize(_step("expand", [np.asarray(x)], {"shape": [1000, 1000]}))(x))[1] == 4


FILLS = [(0, "float32"), (0.0, "float32"), (-0.0, "float32"), (0, "int64"), (False, "bool"), (1.5, "float64"),
         (0, "complex64"), ([0.0, -0.0], "complex64"), (0.005263157894736844, "float32"), (1e40, "float32"),
         (float("nan"), "float64"), (2.7, "int64"), (0.1, "float16")]


@pytest.mark.parametrize("shape", [(2, 3), ()])
@pytest.mark.parametrize("value,dtype", FILLS)
def test_full(value, dtype, shape):
    """``full`` makes zeros and 0-d floats without np.full's wrapper: the very values np.full makes."""
    dt = D.BY_NAME[dtype]
    v = complex(*value) if isinstance(value, list) else value
    with np.errstate(all="ignore"):
        got = KERNELS["full"]([], {"value": value, "shape": list(shape), "dtype": dtype}, shape, dt)
        _same_bits(got, np.full(shape, v, dtype=dt.np))


# the fused kernels of a training step (issue 30's digits MLP: cross entropy, Adam's three updates, a ReLU's backward)

ADAM_SHAPES = [(128, 64), (10,), (1,), ()]


def _adam_inputs(shape, dtype):
    p, m, g = _special(shape, dtype), _special(shape, dtype), _special(shape, dtype)
    v = np.abs(_special(shape, dtype))
    return p, m, v, g


@pytest.mark.parametrize("shape", ADAM_SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("with_param", [False, True])
def test_adam_moments(shape, dtype, with_param):
    """m + (g - m)(1 - beta1) and g (1 - beta2) g + v beta2, as the decomposition orders them (its weight decay of 0
    adds nothing: the parameter input is passed and unused)."""
    p, m, v, g = _adam_inputs(shape, dtype)
    c = dtype(1 - 0.9)
    got, generic = _both("adam_exp_avg", [m, g, p] if with_param else [m, g], {"beta1": 0.9, "weight_decay": 0})
    _same_bits(got, generic)
    with np.errstate(all="ignore"):
        _same_bits(got, np.asarray((g - m) * c + m, dtype))
    got, generic = _both("adam_exp_avg_sq", [v, g, p] if with_param else [v, g],
                         {"beta2": 0.999, "weight_decay": 0})
    _same_bits(got, generic)
    with np.errstate(all="ignore"):
        _same_bits(got, np.asarray(g * dtype(1 - 0.999) * g + v * dtype(0.999), dtype))


@pytest.mark.parametrize("op", ["adam_exp_avg", "adam_exp_avg_sq"])
def test_adam_moments_with_weight_decay_stay_on_the_generic_kernel(op):
    p, m, v, g = _adam_inputs((3, 2), np.float32)
    got, generic = _both(op, [m, g, p], {"beta1": 0.9, "beta2": 0.99, "weight_decay": 0.01}, specialised=False)
    _same_bits(got, generic)


@pytest.mark.parametrize("shape", ADAM_SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_adam_param(shape, dtype):
    """p - m / (sqrt(v) / bc2_sqrt + eps) * step_size, in the kernel's buffer or not: the same bits."""
    p, m, v, _ = _adam_inputs(shape, dtype)
    v.reshape(-1)[-1] = 0.0  # (a denominator of eps)
    ss, bc = np.array(-0.005263157894736844, dtype), np.array(0.044710177812216, dtype)
    got, generic = _both("adam_param", [p, m, v, ss, bc], {"eps": 1e-8})
    _same_bits(got, generic)
    with np.errstate(all="ignore"):
        _same_bits(got, np.asarray(p - m / (np.sqrt(v) / bc + dtype(1e-8)) * ss, dtype))


@pytest.mark.parametrize("shape", ADAM_SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_adamw_param(shape, dtype):
    """AdamW's update (a sixth input, the decay ``1 - lr wd``) is specialised too: the parameter decayed, then
    Adam's update, the generic kernel's bits."""
    p, m, v, _ = _adam_inputs(shape, dtype)
    ss, bc, decay = (np.array(x, dtype) for x in (-0.005263157894736844, 0.044710177812216, 1 - 1e-3 * 0.1))
    got, generic = _both("adam_param", [p, m, v, ss, bc, decay], {"eps": 1e-8})
    _same_bits(got, generic)
    with np.errstate(all="ignore"):
        _same_bits(got, np.asarray(p * decay - m / (np.sqrt(v) / bc + dtype(1e-8)) * ss, dtype))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ignore", [-100, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cross_entropy_and_its_gradient(reduction, ignore, dtype):
    x = _special((6, 5), dtype)
    x[1] = np.inf  # (a row whose maximum is infinite)
    t = np.array([0, 4, 2, 2, 1, 3], np.int64)
    attrs = {"reduction": reduction, "ignore_index": ignore}
    got, generic = _both("cross_entropy_index", [x, t], attrs)
    _same_bits(got, generic)
    g = np.array(0.75, dtype) if reduction != "none" else _special((6,), dtype)
    got, generic = _both("cross_entropy_index_grad", [x, t, g], attrs)
    _same_bits(got, generic)


def test_a_cross_entropy_target_out_of_range_raises_as_the_kernel_does():
    x, t = _special((2, 3)), np.array([0, 3], np.int64)
    step = _step("cross_entropy_index", [x, t], {"reduction": "mean", "ignore_index": -100})
    for fn in (DEVICE.specialize(step), lambda *a: KERNELS[step.op](list(a), step.attrs, step.shape, step.dtype)):
        with pytest.raises(IndexOutOfRange, match="target 3 is out of bounds for 3 classes"):
            fn(x, t)


@pytest.mark.parametrize("shape", [(64, 128), (3, 4)])
@pytest.mark.parametrize("y", [0.0, -0.0, 2.5, None])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_where(shape, y, dtype):
    """A ReLU's backward (``where(x > 0, g, 0)``) and others: large conditions select bits, small ones np.where."""
    c = RNG.standard_normal(shape) > 0
    x = _special(shape, dtype)
    yv = _special(shape, dtype) if y is None else np.array(y, dtype)
    got, generic = _both("where", [c, x, yv], {})
    _same_bits(got, generic)
    _same_bits(got, np.where(c, x, yv))
