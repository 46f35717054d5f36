"""torch Tensor methods and functions filled in (against torch): the in-place variants (``x.atan2_(y)``), ``stride()``
and ``storage_offset()`` of views (and ``as_strided`` with them), ``new``, ``type_as``, ``get_device``,
``pin_memory``, and the index functions ``bincount``, ``triu_indices``, ``tril_indices``, ``unravel_index``."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw

pytestmark = pytest.mark.usefixtures("session")

TORCH_WHY = "PyTorch is the reference here (pip install torch==2.13.0)"


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch", reason=TORCH_WHY)


A = np.array([[0.5, -1.25, 2.0], [0.75, 3.0, -0.5]], np.float32)
B = np.array([[1.5, 0.5, -2.0], [2.0, -0.25, 1.0]], np.float32)

# method, its arguments (a string "B": the tensor made of B), the dtype the tensor is in
INPLACE = [("atan2", ("B",), np.float32), ("arctan2", ("B",), np.float32), ("hypot", ("B",), np.float32),
           ("fmod", ("B",), np.float32), ("copysign", ("B",), np.float32), ("xlogy", ("B",), np.float32),
           ("clamp_min", (0.6,), np.float32), ("clamp_max", (0.6,), np.float32), ("eq", ("B",), np.float32),
           ("lt", ("B",), np.float32), ("greater_equal", ("B",), np.float32), ("cumsum", (1,), np.float32),
           ("cumprod", (0,), np.float32), ("tril", (), np.float32), ("triu", (1,), np.float32),
           ("sinh", (), np.float32), ("asin", (), np.float32), ("acosh", (), np.float32), ("sgn", (), np.float32),
           ("deg2rad", (), np.float32), ("negative", (), np.float32), ("true_divide", ("B",), np.float32),
           ("bitwise_and", ("B",), np.int64), ("bitwise_not", (), np.int64), ("logical_xor", ("B",), np.float32)]


@pytest.mark.parametrize("name,args,dtype", INPLACE, ids=[c[0] for c in INPLACE])
def test_inplace_variants_match_torch(torch, name, args, dtype):
    a, b = (A * 4).astype(dtype), (B * 4).astype(dtype)
    if name == "acosh":
        a = np.abs(a) + 1
    if name == "asin":
        a = a / 16
    tt, tw_ = torch.tensor(a), tw.tensor(a)
    view = tw_[1]  # (a view of the row written: it sees the update)
    r1 = getattr(tt, name + "_")(*[torch.tensor(b) if x == "B" else x for x in args])
    r2 = getattr(tw_, name + "_")(*[tw.tensor(b) if x == "B" else x for x in args])
    assert r2 is tw_ and r1 is tt
    np.testing.assert_allclose(tw_.numpy(), tt.numpy(), rtol=1e-6, equal_nan=True)
    np.testing.assert_allclose(view.numpy(), tt.numpy()[1], rtol=1e-6, equal_nan=True)
    assert tw_.dtype.name == str(tt.dtype).removeprefix("torch.")


def test_inplace_variants_keep_torch_casting_rules():
    with pytest.raises(tw.DTypeError, match="can't be cast"):
        tw.tensor([1, 2]).asin_()
    with pytest.raises(tw.DTypeError, match="float_power_"):
        tw.tensor([1.0, 2.0]).float_power_(2)
    x = tw.tensor([1.0, 2.0], dtype=tw.float64)
    x.float_power_(2)
    assert x.tolist() == [1.0, 4.0]
    leaf = tw.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(tw.TensorwireError, match="leaf"):
        leaf.atan2_(tw.tensor([1.0, 1.0]))


VIEWS = [lambda x: x, lambda x: x[1], lambda x: x[:, 1:3], lambda x: x.transpose(0, 2), lambda x: x[:, ::2, 1:],
         lambda x: x.permute(2, 0, 1)[1:], lambda x: x[0].t(), lambda x: x.reshape(6, 4)[2:5],
         lambda x: x[:, 1].unsqueeze(1), lambda x: x[None, :, 2], lambda x: x[1, 1:2, :].expand(3, 4),
         lambda x: x[..., 1], lambda x: x.view(-1)[3:10:2], lambda x: x[1:, :2].reshape(2, 4),
         lambda x: x.transpose(1, 2)[:, 1:, ::2], lambda x: x.narrow(2, 1, 2).squeeze(0)]


@pytest.mark.parametrize("k", range(len(VIEWS)))
def test_strides_and_offsets_of_views_match_torch(torch, k):
    base = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    tv, wv = VIEWS[k](torch.from_numpy(base.copy())), VIEWS[k](tw.tensor(base))
    assert wv.stride() == tv.stride()
    assert wv.storage_offset() == tv.storage_offset()
    assert [wv.stride(d) for d in range(wv.ndim)] == [tv.stride(d) for d in range(tv.ndim)]
    # as_strided reads the root's storage: the view's own layout reads back the view
    again = tw.as_strided(wv, wv.shape, wv.stride(), wv.storage_offset())
    np.testing.assert_array_equal(again.numpy(), tv.numpy())


def test_a_reshape_torch_would_copy_reads_as_contiguous(torch):
    base = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = torch.from_numpy(base.copy()).transpose(0, 2).reshape(4, 6)  # (torch copies: contiguous, offset 0)
    w = tw.tensor(base).transpose(0, 2).reshape(4, 6)
    assert w.stride() == t.stride() == (6, 1) and w.storage_offset() == t.storage_offset() == 0


def test_new_type_as_get_device_pin_memory(torch):
    x = tw.zeros(2)
    assert x.new(2, 3).shape == (2, 3) and x.new(2, 3).dtype is tw.float32
    assert x.new(tw.Size([3])).shape == (3,) and x.new().shape == (0,)
    assert x.new((2, 3)).tolist() == torch.zeros(2).new((2, 3)).tolist() == [2.0, 3.0]
    assert tw.zeros(2, dtype=tw.int32).new([1, 2]).dtype is tw.int32
    assert tw.tensor([1, 2]).type_as(tw.zeros(1, dtype=tw.float64)).dtype is tw.float64
    with pytest.raises(TypeError):
        x.type_as(1.0)
    assert x.get_device() == torch.zeros(2).get_device() == -1
    assert x.pin_memory() is x and not x.is_pinned()


BINCOUNT = [([0, 1, 1, 3], None, 0), ([0, 1, 1, 3], [0.5, 1, 1, 2], 0), ([2, 2], None, 5), ([], None, 3),
            ([4], [2.0], 0), ([1, 0, 2], [1.0, 2.0, 3.0], 1)]


@pytest.mark.parametrize("values,weights,minlength", BINCOUNT)
@pytest.mark.parametrize("wdtype", ["float32", "float64", "int32"])
def test_bincount_matches_torch(torch, values, weights, minlength, wdtype):
    x = np.array(values, np.int64)
    w = None if weights is None else np.array(weights, wdtype)
    want = torch.bincount(torch.from_numpy(x), None if w is None else torch.from_numpy(w), minlength)
    got = tw.bincount(tw.tensor(x), None if w is None else tw.tensor(w), minlength)
    assert got.tolist() == want.tolist() and got.dtype.name == str(want.dtype).removeprefix("torch.")
    assert tw.tensor(x).bincount(None if w is None else tw.tensor(w), minlength=minlength).tolist() == want.tolist()


def test_bincount_refuses_what_torch_refuses():
    with pytest.raises(ValueError, match="non-negative"):
        tw.bincount(tw.tensor([-1, 2]))
    with pytest.raises(tw.DTypeError):
        tw.bincount(tw.tensor([1.0]))
    with pytest.raises(tw.ShapeError, match="1-d"):
        tw.bincount(tw.tensor([[1]]))
    with pytest.raises(tw.ShapeError, match="same length"):
        tw.bincount(tw.tensor([1, 2]), tw.tensor([1.0]))
    with pytest.raises(ValueError, match="minlength"):
        tw.bincount(tw.tensor([1]), minlength=-1)


@pytest.mark.parametrize("row,col,offset", [(3, 3, 0), (3, 4, -1), (4, 3, 1), (0, 3, 0), (3, 3, 10), (3, 3, -10),
                                            (1, 5, 2)])
def test_triangle_indices_match_torch(torch, row, col, offset):
    for name in ("triu_indices", "tril_indices"):
        want, got = getattr(torch, name)(row, col, offset), getattr(tw, name)(row, col, offset)
        assert got.shape == tuple(want.shape) and got.tolist() == want.tolist() and got.dtype is tw.int64
    assert tw.tril_indices(3, 3, dtype=tw.int32).dtype is tw.int32
    with pytest.raises(ValueError, match="non-negative"):
        tw.triu_indices(-1, 3)
    with pytest.raises(tw.DTypeError):
        tw.triu_indices(3, 3, dtype=tw.float32)


@pytest.mark.parametrize("indices,shape", [([4, 1, -1, 6, -7], (2, 3)), ([[1, 5]], (2, 3)), ([1, 2], 3),
                                           ([7, 0], (2, 2, 2)), (5, (2, 3))])
def test_unravel_index_matches_torch(torch, indices, shape):
    want = torch.unravel_index(torch.tensor(indices), shape)
    got = tw.unravel_index(tw.tensor(indices), shape)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.tolist() == b.tolist() and a.dtype is tw.int64


def test_unravel_index_refuses_what_torch_refuses():
    with pytest.raises(TypeError, match="integer dtype"):
        tw.unravel_index(tw.tensor([1.0]), (2, 3))
    with pytest.raises(ValueError, match="negative"):
        tw.unravel_index(tw.tensor([1]), (2, -3))
    with pytest.raises(TypeError):
        tw.unravel_index(3, (2, 3))


@pytest.mark.parametrize("shape,wrap", [((3, 3), False), ((7, 3), True), ((7, 3), False), ((2, 2, 2), False),
                                        ((3, 5), False)])
def test_fill_diagonal_matches_torch(torch, shape, wrap):
    t, w = torch.zeros(shape), tw.zeros(*shape)
    t.fill_diagonal_(5, wrap=wrap)
    assert w.fill_diagonal_(5, wrap=wrap) is w
    np.testing.assert_array_equal(w.numpy(), t.numpy())
    with pytest.raises(tw.ShapeError, match="equal length"):
        tw.zeros(2, 3, 4).fill_diagonal_(1)


def test_random_and_bernoulli_fill_in_place_with_torch_ranges():
    x = tw.zeros(2000)
    assert x.random_() is x
    v = x.numpy()
    assert v.min() >= 0 and v.max() <= 2**24 and v.max() > 2**20 and np.all(v == np.round(v))
    b = tw.zeros(2000, dtype=tw.int8).random_().numpy()
    assert b.min() >= 0 and b.max() <= 127 and b.max() > 100
    assert set(tw.zeros(300).random_(5).tolist()) == {0, 1, 2, 3, 4}
    assert set(tw.zeros(300).random_(2, 4).tolist()) == {2, 3}
    assert set(tw.zeros(300, dtype=tw.bool).random_().tolist()) == {False, True}
    with pytest.raises(ValueError):
        tw.zeros(3).random_(4, 2)
    m = tw.zeros(4000).bernoulli_(0.3).mean().item()
    assert 0.25 < m < 0.35
    assert tw.zeros(2, dtype=tw.int64).bernoulli_(tw.tensor([0.0, 1.0])).tolist() == [0, 1]


def test_detach_in_place_and_product_updates(torch):
    x = tw.ones(2, requires_grad=True)
    y = x * 2
    assert y.detach_() is y and not y.requires_grad and y.grad_fn is None and y.is_leaf
    with pytest.raises(tw.TensorwireError, match="views in-place"):
        (x * 2)[0:1].detach_()
    a, b = np.arange(8, dtype=np.float32).reshape(2, 4), np.ones((4, 3), np.float32)
    want = torch.zeros(2, 3).addmm_(torch.from_numpy(a), torch.from_numpy(b), alpha=2)
    np.testing.assert_array_equal(tw.zeros(2, 3).addmm_(tw.tensor(a), tw.tensor(b), alpha=2).numpy(), want.numpy())


def test_in_place_functions_vander_chain_matmul_can_cast_typename(torch):
    x = tw.tensor([0.25, -1.5, 4.0])
    assert tw.relu_(x) is x and x.tolist() == [0.25, 0.0, 4.0]
    assert tw.clamp_(x, max=1.0).tolist() == [0.25, 0.0, 1.0]
    assert tw.get_device(x) == -1 and not tw.is_conj(x) and not tw.is_neg(x)
    for v, n, inc in (([1.0, 2, 3], None, False), ([1, 2, 3], 2, True), ([2.0, -1], 4, False)):
        want = torch.vander(torch.tensor(v), N=n, increasing=inc)
        got = tw.vander(tw.tensor(v), N=n, increasing=inc)
        assert got.tolist() == want.tolist() and got.dtype.name == str(want.dtype).removeprefix("torch.")
    with pytest.raises(ValueError):
        tw.vander(tw.ones(2, 2))
    a, b, c = (np.arange(k * m, dtype=np.float64).reshape(k, m) for k, m in ((2, 3), (3, 4), (4, 2)))
    np.testing.assert_allclose(tw.chain_matmul(tw.tensor(a), tw.tensor(b), tw.tensor(c)).numpy(), a @ b @ c)
    dts = ["bool", "uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32", "float64", "complex64"]
    for f in dts:
        for t in dts:
            assert tw.can_cast(getattr(tw, f), getattr(tw, t)) == torch.can_cast(getattr(torch, f), getattr(torch, t))
    with pytest.raises(TypeError):
        tw.can_cast(tw.zeros(1), tw.float32)
    assert tw.typename(tw.zeros(2)) == torch.typename(torch.zeros(2)) == "torch.FloatTensor"
    assert tw.typename(3) == "int"
    assert tw.typename(tw.nn.Linear).endswith("Linear")


def test_data_ptr_tells_sharing_as_torchs():
    torch = pytest.importorskip("torch")
    for lib in (tw, torch):
        x = lib.ones(3, 4)
        assert x.data_ptr() == x.data.data_ptr() == x.t().data_ptr() == x.view(12).data_ptr()
        assert x[1:].data_ptr() - x.data_ptr() == 4 * x.element_size()
        assert x[:, 2].data_ptr() - x.data_ptr() == 2 * x.element_size()
        assert x.clone().data_ptr() != x.data_ptr() and lib.ones(3, 4).data_ptr() != x.data_ptr()


def test_contiguous_and_is_contiguous_follow_the_layout_as_torchs():
    """``is_contiguous()`` and ``contiguous()`` follow a view's layout in its base, as ``stride()`` does: a transposed
    view is not contiguous, its ``contiguous()`` is a tensor of its own whose strides and ``as_strided`` reads are
    row-major (until session 59 it was the view itself: ``x.t().contiguous().stride()`` was (1, 3))."""
    torch = pytest.importorskip("torch")

    def run(lib):
        out = []
        x = lib.arange(6.0).view(2, 3)
        for t in (x, x.t(), x[:, 1:], x[1], x.t().contiguous(), x[:, 1:].contiguous(), x.unsqueeze(0), x[:, :1]):
            out.append((tuple(t.stride()), t.is_contiguous()))
        out.append(x.t().contiguous().as_strided((3,), (1,)).tolist())
        out.append(lib.arange(20.0).view(4, 5)[:, 1:].contiguous().as_strided((2, 2), (4, 1)).tolist())
        out.append(x.t().contiguous().view(-1).tolist())
        c = x.t()
        out.append(c.contiguous() is not c and x.contiguous() is x)
        return out

    assert run(tw) == run(torch)

