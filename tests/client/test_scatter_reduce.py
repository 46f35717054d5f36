"""``scatter_reduce`` and ``index_reduce`` against PyTorch (2.13, CPU): every reduction, with and without
``include_self``, along dims 0 and 1, with duplicate indices, for the dtypes torch takes; gradients (ties of
amax/amin split as torch splits them, ``self``'s own value counted even without ``include_self``; prod through
zeros; mean over its count); and the recorded work, linear in the index: the ``scatter_reduce`` primitive or
``scatter_add``, never a comparison of every index with every position (was 6 s for a graph network's aggregation
of 10,000 edges into 2,000 nodes, and out of memory at Cora's size)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tensorwire as tw

from ._calls import counted

pytestmark = pytest.mark.usefixtures("session")

RNG = np.random.default_rng(611)
REDUCES = ("sum", "prod", "mean", "amax", "amin")


def _torch():
    return pytest.importorskip("torch", reason="PyTorch is the reference here (pip install torch==2.13.0)")


def _data(dtype: str, dim: int, larger_src: bool = True):
    """``(input, index, src)``: a 4 x 5 input, an index of 7 along ``dim`` with duplicates (and positions nothing
    reaches), a ``src`` larger than the index (torch reads its leading part; its backward refuses such a ``src``)."""
    shape = (4, 5)
    ishape = (7, 3) if dim == 0 else (3, 7)
    sshape = (ishape[0] + 1, ishape[1] + 2) if larger_src else ishape
    idx = RNG.integers(0, shape[dim] - 1, ishape)  # (the last position along dim never reached)
    if dtype == "bool":
        return RNG.random(shape) < 0.5, idx, RNG.random(sshape) < 0.5
    if dtype.startswith("int"):
        return RNG.integers(-4, 5, shape).astype(dtype), idx, RNG.integers(-4, 5, sshape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype), idx, RNG.standard_normal(sshape).astype(dtype)


def _same(ours, ref, exact=False):
    assert ours.dtype.name == str(ref.dtype).removeprefix("torch.")
    assert tuple(ours.shape) == tuple(ref.shape)
    got, want = ours.detach().numpy(), ref.detach().numpy()
    if exact:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "bool"])
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("include_self", [True, False])
def test_values_are_torchs(dtype, dim, include_self):
    torch = _torch()
    x, idx, src = _data(dtype, dim % 2)
    for reduce in REDUCES:
        if dtype == "bool" and reduce == "mean":  # (torch has no bool mean; neither do we)
            with pytest.raises(TypeError, match="Bool"):
                tw.tensor(x).scatter_reduce(dim, tw.tensor(idx), tw.tensor(src), reduce, include_self=include_self)
            continue
        ref = torch.tensor(x).scatter_reduce(dim, torch.tensor(idx), torch.tensor(src), reduce,
                                             include_self=include_self)
        ours = tw.tensor(x).scatter_reduce(dim, tw.tensor(idx), tw.tensor(src), reduce, include_self=include_self)
        _same(ours, ref, exact=not dtype.startswith("float"))


@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce_is_torchs(dim, include_self):
    torch = _torch()
    x = RNG.standard_normal((4, 5))
    index = RNG.integers(0, x.shape[dim] - 1, 6)
    source = RNG.standard_normal((6, 5) if dim == 0 else (4, 6))
    for reduce in ("prod", "mean", "amax", "amin"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (torch: index_reduce is in beta)
            ref = torch.tensor(x).index_reduce(dim, torch.tensor(index), torch.tensor(source), reduce,
                                               include_self=include_self)
        ours = tw.tensor(x).index_reduce(dim, tw.tensor(index), tw.tensor(source), reduce, include_self=include_self)
        _same(ours, ref)


def _grads(lib, x, idx, src, reduce, include_self, w, dim=0, index_reduce=False):
    xt = lib.tensor(x, requires_grad=True)
    st = lib.tensor(src, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if index_reduce:
            y = xt.index_reduce(dim, lib.tensor(idx), st, reduce, include_self=include_self)
        else:
            y = xt.scatter_reduce(dim, lib.tensor(idx), st, reduce, include_self=include_self)
    gx, gs = lib.autograd.grad((y * lib.tensor(w)).sum(), [xt, st])
    return [np.asarray(t.detach().numpy()) for t in (y, gx, gs)]


def _check_grads(x, idx, src, reduce, include_self, dim=0, index_reduce=False):
    torch = _torch()
    w = RNG.standard_normal(x.shape)
    ref = _grads(torch, x, idx, src, reduce, include_self, w, dim, index_reduce)
    ours = _grads(tw, x, idx, src, reduce, include_self, w, dim, index_reduce)
    for got, want in zip(ours, ref):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dim", [0, 1])
def test_gradients_are_torchs(reduce, include_self, dim):
    x, idx, src = _data("float64", dim, larger_src=False)
    _check_grads(x, idx, src, reduce, include_self, dim)


@pytest.mark.parametrize("reduce", REDUCES)
def test_a_larger_src_gets_the_gradient_of_the_part_read(reduce):
    """torch's backward refuses a ``src`` larger than the index; ours gives the part read torch's gradient (that of
    a ``src`` cut to the index) and the rest 0."""
    torch = _torch()
    x, idx, src = _data("float64", 0)
    w = RNG.standard_normal(x.shape)
    cut = src[:idx.shape[0], :idx.shape[1]]
    _, gx_ref, gs_ref = _grads(torch, x, idx, np.ascontiguousarray(cut), reduce, False, w)
    _, gx, gs = _grads(tw, x, idx, src, reduce, False, w)
    np.testing.assert_allclose(gx, gx_ref, rtol=1e-10, atol=1e-12)
    want = np.zeros_like(src)
    want[:idx.shape[0], :idx.shape[1]] = gs_ref
    np.testing.assert_allclose(gs, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("reduce", ["amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_ties_share_the_gradient_as_torchs(reduce, include_self):
    """Values on a coarse grid: several sources equal to the result share its gradient evenly, and ``self`` equal to
    it takes a share even where ``include_self`` leaves it out (torch's rule: the sources then get less)."""
    x = RNG.integers(-2, 3, (5, 4)).astype(np.float64)
    idx = RNG.integers(0, 4, (12, 4))
    src = RNG.integers(-2, 3, (12, 4)).astype(np.float64)
    _check_grads(x, idx, src, reduce, include_self)


@pytest.mark.parametrize("include_self", [True, False])
def test_prod_gradient_through_zeros_is_torchs(include_self):
    """One zero at a position (its gradient is the product of the others), two (all 0), and a zero in ``self``."""
    x = np.array([[2.0, 0.0, 3.0], [0.5, 1.5, -1.0], [4.0, 1.0, 2.0]])
    idx = np.array([[0, 0, 0], [0, 1, 1], [1, 1, 2], [0, 2, 1]])
    src = np.array([[0.0, 2.0, 0.0], [3.0, 0.0, 0.5], [-2.0, 0.0, 1.5], [1.5, 1.0, 2.0]])
    _check_grads(x, idx, src, "prod", include_self)


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
def test_index_reduce_gradients_are_torchs(reduce):
    x = RNG.integers(-2, 3, (5, 3)).astype(np.float64)  # (ties)
    index = np.array([0, 2, 0, 3, 0])
    source = RNG.integers(-2, 3, (5, 3)).astype(np.float64)
    for include_self in (True, False):
        _check_grads(x, index, source, reduce, include_self, index_reduce=True)


def test_a_0d_input_and_an_empty_index():
    torch = _torch()
    for reduce in REDUCES:
        ref = torch.tensor(2.0).scatter_reduce(0, torch.tensor(0), torch.tensor(5.0), reduce)
        _same(tw.tensor(2.0).scatter_reduce(0, tw.tensor(0), tw.tensor(5.0), reduce), ref)
        ref = torch.ones(3, 2).scatter_reduce(0, torch.zeros(0, 2, dtype=torch.int64), torch.ones(0, 2), reduce)
        _same(tw.ones(3, 2).scatter_reduce(0, tw.zeros(0, 2, dtype=tw.int64), tw.ones(0, 2), reduce), ref)


def test_out_of_range_and_bad_arguments_raise():
    x = tw.zeros(3, 2)
    with pytest.raises(IndexError, match="out of bounds"):
        x.scatter_reduce(0, tw.tensor([[3, 0]]), tw.ones(1, 2), "amax").numpy()
    with pytest.raises(ValueError, match="reduce argument"):
        x.scatter_reduce(0, tw.tensor([[0, 0]]), tw.ones(1, 2), "max")
    with pytest.raises(ValueError, match="index_reduce"):
        x.index_reduce(0, tw.tensor([0]), tw.ones(1, 2), "sum")


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
def test_the_recorded_work_is_linear_in_the_index(session, reduce, include_self):
    """A graph network's aggregation of edge messages into nodes records scatters of the index's size: no op
    compares every index with every node (which made index.numel() x nodes values)."""
    torch = _torch()
    nodes, edges, channels = 50, 400, 4
    dst = RNG.integers(0, nodes, edges)
    msg = RNG.standard_normal((edges, channels))
    index = tw.tensor(dst).unsqueeze(1).expand(edges, channels)
    x = tw.zeros(nodes, channels, dtype=tw.float64)
    src = tw.tensor(msg)
    with counted(session, "record") as (_, ops):
        out = x.scatter_reduce(0, index, src, reduce, include_self=include_self)
    assert set(ops) <= {"scatter_reduce", "scatter", "scatter_add", "expand", "full", "clamp", "div"}, ops
    ref = torch.zeros(nodes, channels, dtype=torch.float64).scatter_reduce(
        0, torch.tensor(dst).unsqueeze(1).expand(edges, channels), torch.tensor(msg), reduce,
        include_self=include_self)
    _same(out, ref)
