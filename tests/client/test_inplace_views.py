"""In-place methods, ``x += y`` forms, item assignment, and views that share updates with their base."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw

from ._ref import check, check_torch, data, torch

pytestmark = pytest.mark.usefixtures("session")

A = np.arange(12, dtype=np.float64).reshape(3, 4)
B = data((3, 4), "float64", seed=1, positive=True)


def _pair():
    """The same start value as a tensorwire tensor and (when installed) a torch tensor."""
    return tw.tensor(A), (torch.tensor(A) if torch is not None else None)


# name, tensorwire/torch in-place call, numpy reference on a float64 array
INPLACE = [
    ("add_", lambda x, o: x.add_(o), lambda a, o: a + o),
    ("add_ alpha", lambda x, o: x.add_(o, alpha=2), lambda a, o: a + 2 * o),
    ("sub_", lambda x, o: x.sub_(o), lambda a, o: a - o),
    ("sub_ alpha", lambda x, o: x.sub_(o, alpha=0.5), lambda a, o: a - 0.5 * o),
    ("mul_", lambda x, o: x.mul_(o), lambda a, o: a * o),
    ("div_", lambda x, o: x.div_(o), lambda a, o: a / o),
    ("pow_", lambda x, o: x.pow_(o), lambda a, o: a ** o),
    ("+=", lambda x, o: x.__iadd__(o), lambda a, o: a + o),
    ("-=", lambda x, o: x.__isub__(o), lambda a, o: a - o),
    ("*=", lambda x, o: x.__imul__(o), lambda a, o: a * o),
    ("/=", lambda x, o: x.__itruediv__(o), lambda a, o: a / o),
    ("//=", lambda x, o: x.__ifloordiv__(o), lambda a, o: np.floor_divide(a, o)),
    ("%=", lambda x, o: x.__imod__(o), lambda a, o: np.remainder(a, o)),
    ("**=", lambda x, o: x.__ipow__(o), lambda a, o: a ** o),
]


@pytest.mark.parametrize("name,fn,ref", INPLACE, ids=[c[0] for c in INPLACE])
@pytest.mark.parametrize("other", ["tensor", "row", "scalar"])
def test_inplace_arithmetic(name, fn, ref, other):
    o_np = {"tensor": B, "row": B[0], "scalar": 1.5}[other]
    x, t = _pair()
    before = x
    o = tw.tensor(o_np) if other != "scalar" else o_np
    r = fn(x, o)
    assert r is before  # in-place methods return self
    assert x.shape == A.shape and x.dtype is tw.float64
    got = check(x, ref(A, o_np))
    if t is not None:
        fn(t, torch.tensor(o_np) if other != "scalar" else o_np)
        check_torch(x, t, value=got)


def test_augmented_assignment_keeps_identity_and_dtype():
    x = tw.tensor([1, 2, 3])
    y = x
    x += 1
    assert x is y
    x *= 3
    x -= tw.tensor([1, 1, 1])
    check(y, (np.array([1, 2, 3]) + 1) * 3 - 1, dtype="int64")
    # int tensor += float: torch refuses (the result can't be cast back to int64)
    with pytest.raises(TypeError):
        x += 1.5
    with pytest.raises(TypeError):
        x /= 2
    f = tw.tensor([1.0, 2.0], dtype=tw.float16)
    f += tw.tensor([1.0, 1.0], dtype=tw.float64)  # higher precision, same category: allowed
    check(f, np.array([2.0, 3.0]), dtype="float16")
    b = tw.tensor([True, False])
    b |= tw.tensor([False, True])
    check(b, np.array([True, True]), dtype="bool")
    b &= tw.tensor([True, False])
    check(b, np.array([True, False]), dtype="bool")
    b ^= tw.tensor([True, True])
    check(b, np.array([False, True]), dtype="bool")
    i = tw.tensor([6, 7])
    i //= 2
    check(i, np.array([3, 3]), dtype="int64")
    i %= 2
    check(i, np.array([1, 1]), dtype="int64")
    i **= 3
    check(i, np.array([1, 1]), dtype="int64")


def test_other_inplace_methods():
    x, t = _pair()
    x.clamp_(2, 9)
    check(x, np.clip(A, 2, 9))
    x.clamp_(min=3)
    check(x, np.clip(A, 3, 9))
    x.clip_(max=8)
    check(x, np.clip(A, 3, 8))
    x.zero_()
    check(x, np.zeros_like(A))
    x.fill_(2.5)
    check(x, np.full_like(A, 2.5))
    x.fill_(tw.tensor(4.0))
    check(x, np.full_like(A, 4.0))
    x.copy_(tw.tensor(B))
    check(x, B)
    x.copy_(tw.tensor(B[1]))  # broadcast
    check(x, np.broadcast_to(B[1], A.shape))
    x.copy_(tw.tensor(A.astype(np.int32), device="cpu:1"))  # cast and move
    check(x, A, dtype="float64")
    assert x.device == "cpu:0"
    m = A > 5
    x.masked_fill_(tw.tensor(m), -1)
    check(x, np.where(m, -1.0, A))
    y = tw.tensor(A)
    y.index_add_(0, tw.tensor([0, 0, 2]), tw.tensor(np.ones((3, 4))), alpha=3)
    want = A.copy()
    want[0] += 6
    want[2] += 3
    check(y, want)
    z = tw.tensor(B)
    z.exp_().log_().sqrt_()
    check(z, np.sqrt(B))
    z.neg_().abs_()
    check(z, np.sqrt(B))
    for name, ref in (("floor_", np.floor), ("ceil_", np.ceil), ("trunc_", np.trunc), ("round_", np.round),
                      ("sigmoid_", lambda v: 1 / (1 + np.exp(-v))), ("relu_", lambda v: np.maximum(v, 0)),
                      ("tanh_", np.tanh), ("square_", np.square), ("reciprocal_", lambda v: 1 / v)):
        w = tw.tensor(B - 1)
        getattr(w, name)()
        with np.errstate(divide="ignore"):
            check(w, ref(B - 1))
    v = tw.tensor(A)
    v.lerp_(tw.tensor(B), 0.5)
    check(v, A + 0.5 * (B - A))
    if t is not None:
        t.clamp_(2, 9)
        t.zero_()


def test_setitem_basic_and_advanced():
    x, t = _pair()
    want = A.copy()
    ops = [
        ((0,), 5.0), ((slice(None), 1), tw.tensor([7.0, 8.0, 9.0])), ((1, slice(1, 3)), tw.tensor([-1.0, -2.0])),
        ((Ellipsis, -1), 0.5), ((slice(None, None, 2), slice(None, None, 3)), 42.0),
        (([0, 2], [1, 3]), tw.tensor([100.0, 200.0])), ((tw.tensor([1]), slice(None)), tw.tensor([[1.0, 2, 3, 4]])),
        ((slice(1, None), [0, 3]), tw.tensor([[9.0, 9.5], [8.0, 8.5]])), ((2,), tw.tensor([3, 3, 3, 3])),
        ((None, 0, 0), 11.0), ((slice(None), tw.tensor([True, False, False, True])), -5.0),
    ]
    for key, val in ops:
        x[key] = val
        npkey = tuple(np.asarray(k.numpy()) if isinstance(k, tw.Tensor) else k for k in key)
        nval = val.numpy() if isinstance(val, tw.Tensor) else val
        want[npkey] = nval
        if t is not None:
            tkey = tuple(torch.tensor(k.numpy()) if isinstance(k, tw.Tensor) else k for k in key)
            t[tkey] = torch.tensor(nval).to(t.dtype) if isinstance(val, tw.Tensor) else nval
    check(x, want)
    if t is not None:
        check_torch(x, t)
    # values of other dtypes are cast; lists and numpy arrays are accepted
    y = tw.zeros(2, 3, dtype=tw.int32)
    y[0] = [1.7, 2.2, 3.9]
    y[1, :2] = np.array([4, 5])
    check(y, np.array([[1, 2, 3], [4, 5, 0]]), dtype="int32")
    with pytest.raises(ValueError):
        y[0] = tw.tensor([1, 2])


def test_setitem_drops_a_values_leading_ones_as_torch_does():
    """torch's ``x[key] = value`` drops the value's leading dims of size 1 (``slicePrefix1sSize``) before it
    broadcasts: a ``[1, 1, 4]`` value writes a row, basic or advanced key; a leading dim of 2 is still refused."""
    x, t = _pair()
    want = A.copy()
    ones = np.ones((1, 1, 4))
    for key, val in [((slice(0, 1),), ones), ((2,), ones), (([0, 1],), np.ones((1, 1, 2, 4)) * 3),
                     ((np.array([False, True, False]),), np.ones((1, 1, 4)) * 5)]:
        x[tuple(tw.tensor(k) if isinstance(k, np.ndarray) else k for k in key)] = tw.tensor(val)
        want[key] = val.reshape(val.shape[2:] if val.ndim == 4 else val.shape[-1:])
        if t is not None:
            t[tuple(torch.tensor(k) if isinstance(k, np.ndarray) else k for k in key)] = torch.tensor(val)
    check(x, want)
    if t is not None:
        check_torch(x, t)
    with pytest.raises(tw.ShapeError):
        x[0] = tw.ones(2, 1, 4)


def test_view_sees_later_inplace_updates_of_base():
    x, t = _pair()
    views = {
        "row": (x[1], lambda a: a[1]),
        "col": (x[:, 2], lambda a: a[:, 2]),
        "strided": (x[::2, 1::2], lambda a: a[::2, 1::2]),
        "T": (x.T, lambda a: a.T),
        "view": (x.view(4, 3), lambda a: a.reshape(4, 3)),
        "reshape+slice": (x.reshape(2, 6)[:, 1:4], lambda a: a.reshape(2, 6)[:, 1:4]),
        "unsqueeze": (x.unsqueeze(0), lambda a: a[None]),
        "expand": (x[:1].expand(5, 4), lambda a: np.broadcast_to(a[:1], (5, 4))),
        "narrow": (x.narrow(1, 1, 2), lambda a: a[:, 1:3]),
        "split": (x.split(2, 1)[1], lambda a: a[:, 2:]),
        "unbind": (x.unbind(1)[3], lambda a: a[:, 3]),
        "chunk": (x.chunk(3)[2], lambda a: a[2:]),
        "permute": (x.permute(1, 0), lambda a: a.T),
        "flatten": (x.flatten(), lambda a: a.reshape(-1)),
        "squeeze": (x[None].squeeze(0), lambda a: a),
        "view of view": (x[1:][:, ::2], lambda a: a[1:][:, ::2]),
        "None": (x[None, :, None], lambda a: a[None, :, None]),
        "mT": (x.mT, lambda a: a.T),
    }
    for v, ref in views.values():
        check(v, ref(A))
    x.add_(100)
    x[0, 0] = -7
    x.mul_(tw.tensor(B))
    want = A + 100
    want[0, 0] = -7
    want = want * B
    for name, (v, ref) in views.items():
        try:
            check(v, ref(want))
        except AssertionError as e:
            raise AssertionError(f"view {name!r}: {e}") from None
    # a second round of updates, through other in-place forms
    x.zero_()
    x += 1
    for _, (v, ref) in views.items():
        check(v, ref(np.ones_like(A)))


def test_writing_through_a_view_updates_the_base():
    cases = [
        ("row", lambda x: x[1], lambda a: a[1]),
        ("col", lambda x: x[:, 2], lambda a: a[:, 2]),
        ("strided", lambda x: x[::2, 1::2], lambda a: a[::2, 1::2]),
        ("T", lambda x: x.T, lambda a: a.T),
        ("view", lambda x: x.view(4, 3), lambda a: a.reshape(4, 3)),
        ("reshape+slice", lambda x: x.reshape(2, 6)[:, 1:4], lambda a: a.reshape(2, 6)[:, 1:4]),
        ("narrow", lambda x: x.narrow(0, 1, 2), lambda a: a[1:3]),
        ("unbind", lambda x: x.unbind(0)[2], lambda a: a[2]),
        ("split", lambda x: x.split([1, 3], 1)[1], lambda a: a[:, 1:]),
        ("permute", lambda x: x.permute(1, 0), lambda a: a.T),
        ("view of view", lambda x: x[1:][:, ::2], lambda a: a[1:][:, ::2]),
        ("transpose then index", lambda x: x.t()[1], lambda a: a.T[1]),
        ("unsqueeze", lambda x: x.unsqueeze(1), lambda a: a[:, None]),
        # (numpy's diagonal is read-only: the same elements as a strided slice of the flat array)
        ("diagonal", lambda x: x.diagonal(), lambda a: a.reshape(-1)[0:11:5]),
        ("diagonal 1", lambda x: x.diagonal(1), lambda a: a.reshape(-1)[1::5]),
        ("diagonal -1", lambda x: x.diagonal(-1), lambda a: a.reshape(-1)[4:10:5]),
        ("T diagonal 1", lambda x: x.T.diagonal(1), lambda a: a.reshape(-1)[4:10:5]),
        ("torch.diagonal", lambda x: tw.diagonal(x, 0, 1, 0), lambda a: a.reshape(-1)[0:11:5]),
    ]
    for _name, mk, ref in cases:
        x = tw.tensor(A)
        want = A.copy()
        v = mk(x)
        v.mul_(2)
        v += 1
        ref(want)[...] = ref(want) * 2 + 1
        check(x, want)
        check(v, ref(want))
        v.zero_()
        ref(want)[...] = 0
        check(x, want)
        v[...] = tw.tensor(7.0)
        ref(want)[...] = 7
        check(x, want)
        # a sibling view sees the write too
        sib = mk(x)
        v.fill_(3.0)
        ref(want)[...] = 3
        check(sib, ref(want))
        check(x, want)
        if torch is not None:
            tt = torch.tensor(A)
            tv = mk(tt) if _name != "torch.diagonal" else torch.diagonal(tt, 0, 1, 0)
            tv.mul_(2)
            tv += 1
            tv.zero_()
            tv[...] = 7.0
            tv.fill_(3.0)
            check_torch(x, tt)


def test_diagonal_is_a_view_with_torch_strides_and_gradient():
    x = tw.tensor(A[:3, :3].copy())
    d = x.diagonal()
    assert d.stride() == (4,) and d._base is x
    x.add_(1)  # the view sees the base's later writes
    check(d, np.diagonal(A[:3, :3]) + 1)
    w = tw.tensor(A, requires_grad=True)
    (w.diagonal(1) * tw.tensor([1.0, 2.0, 3.0], dtype=tw.float64)).sum().backward()
    want = np.zeros_like(A)
    want[[0, 1, 2], [1, 2, 3]] = [1.0, 2.0, 3.0]
    check(w.grad, want)
    e = tw.ones(2, 3, 4).diagonal(0, 2, 0)  # batched, dims in any order
    assert tuple(e.shape) == (3, 2) and tuple(tw.ones(3, 3).diagonal(5).shape) == (0,)
    with pytest.raises(tw.ShapeError, match="cannot be identical"):
        tw.ones(2, 2).diagonal(0, 1, -1)


@pytest.mark.parametrize("chain,shares", [
    ("x.t().reshape(-1)", False), ("x.t().flatten()", False), ("x[:, 1:3].reshape(-1)", False),
    ("x.t().reshape(4, 3)", True), ("x[1:].reshape(-1)", True), ("x.t().reshape(4, 1, 3)", True),
    ("x[:, 1:3].reshape(3, 2, 1)", True), ("x.t().view(4, 3)", True),
    ("x.unsqueeze(0).transpose(1, 2).flatten(0, 1)", True),
    ("x.unsqueeze(0).transpose(1, 2).flatten(1)", False),
])
def test_reshape_of_a_view_copies_where_torch_s_strides_cannot_view(chain, shares):
    x = tw.tensor(A)
    r = eval(chain)
    r.add_(100)  # torch's reshape views where strides allow, else copies: a write reaches x only through a view
    assert bool((x > 50).any()) is shares
    if torch is not None and chain != "x.t().view(4, 3)":  # (torch refuses that view; tensorwire writes it back)
        t = eval(chain, {"x": torch.tensor(A)})
        check_torch(r, t.add_(100))


def test_setitem_on_view_and_index_on_updated_base():
    x = tw.tensor(A)
    row = x[2]
    row[[0, 3]] = tw.tensor([50.0, 60.0])
    want = A.copy()
    want[2, [0, 3]] = [50.0, 60.0]
    check(x, want)
    col = x[:, 1]
    col[col > 4] = 0.0
    want[:, 1][want[:, 1] > 4] = 0.0
    check(x, want)
    check(col, want[:, 1])
    x[1][2] = 99.0  # chained basic indexing writes through
    want[1][2] = 99.0
    check(x, want)


def test_clone_does_not_share_updates_and_a_leafs_detach_does():
    """torch's: ``clone()`` is a copy; ``detach()`` shares the storage, so updates show both ways (of a leaf here; of a
    recorded result, the value as it is: see Tensor.detach)."""
    x = tw.tensor(A)
    d, c, v = x.detach(), x.clone(), x[0]
    x.add_(1)
    check(d, A + 1)
    check(c, A)
    check(v, A[0] + 1)
    d.add_(5)
    check(x, A + 6)
    check(c, A)
    z = x * 2  # (a result without a graph is a leaf too, as torch's: it shares)
    z.detach().add_(1)
    check(z, (A + 6) * 2 + 1)
    w = tw.tensor(A, requires_grad=True)
    y = w * 2  # (a result with a graph: its detach() holds the value as it is, Tensor.detach says why)
    e = y.detach()
    e.add_(1)
    check(y.detach(), A * 2)
    check(e, A * 2 + 1)


def test_expanded_view_refuses_writes():
    x = tw.tensor(A)
    e = x[:1].expand(3, 4)
    with pytest.raises(tw.TensorwireError):
        e.add_(1)


def test_inplace_results_are_used_by_later_ops_in_one_batch():
    """Many in-place updates recorded without a sync, then one fetch."""
    x = tw.zeros(4, dtype=tw.float64)
    for i in range(200):
        x[i % 4] += i
        x.mul_(1.0)
    want = np.zeros(4)
    for i in range(200):
        want[i % 4] += i
    check(x, want)


def test_view_dtype_and_shape_after_base_update_with_cast():
    x = tw.tensor([1, 2, 3, 4], dtype=tw.int32)
    v = x.view(2, 2)
    x.add_(tw.tensor([1, 1, 1, 1], dtype=tw.int8))
    check(v, np.array([[2, 3], [4, 5]]), dtype="int32")
    assert v.shape == (2, 2)


def test_assignments_reading_the_target():
    x = tw.arange(5.0)
    x[1:] = x[:-1].clone()
    check(x, np.array([0.0, 0.0, 1.0, 2.0, 3.0]))
    y = tw.tensor(A)
    y[[0, 1]] = y[[1, 0]]
    want = A.copy()
    want[[0, 1]] = want[[1, 0]]
    check(y, want)
    z = tw.tensor(A)
    z[0] = z[2]
    z[:, 0] += z[:, 1]
    w = A.copy()
    w[0] = w[2]
    w[:, 0] += w[:, 1]
    check(z, w)
    if torch is not None:
        tz = torch.tensor(A)
        tz[0] = tz[2]
        tz[:, 0] += tz[:, 1]
        check_torch(z, tz)


def test_copy_into_a_tensor_does_not_alias_the_source():
    src = tw.tensor(B)
    dst = tw.zeros(3, 4, dtype=tw.float64)
    dst.copy_(src)
    src.add_(1)
    check(dst, B)
    row = tw.zeros(4, dtype=tw.float64)
    row.copy_(src[0])
    src.zero_()
    check(row, B[0] + 1)


def test_initialisers_and_random_fills_write_through_views():
    """``nn.init.uniform_(p.data)`` and pygcn's ``p.data.uniform_(-s, s)`` change ``p`` (an initialiser rebound the
    view only: the parameter kept its zeros, silently); ``uniform_``/``normal_`` exist and refuse a leaf that
    requires grad, as torch."""
    p = tw.nn.Parameter(tw.zeros(4, 50))
    tw.nn.init.uniform_(p.data, -1, 1)
    v = p.detach().numpy()
    assert (v != 0).all() and v.min() >= -1 and v.max() <= 1 and p.requires_grad
    p.data.uniform_(2, 3)
    assert (p.detach().numpy() >= 2).all() and (p.detach().numpy() <= 3).all()
    w = tw.zeros(3, 1000)
    tw.nn.init.normal_(w[1], 5.0, 0.5)
    got = w.numpy()
    assert not got[[0, 2]].any() and abs(got[1].mean() - 5.0) < 0.1 and abs(got[1].std() - 0.5) < 0.05
    x = tw.empty(2000).normal_(1.0, 2.0)
    assert abs(float(x.mean()) - 1.0) < 0.2 and abs(float(x.std()) - 2.0) < 0.2
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        p.uniform_()


def test_backward_through_an_in_place_leaky_relu_on_a_non_leaf():
    """A DCGAN discriminator's ``LeakyReLU(0.2, inplace=True)``: its gradient comes from its output, as torch's,
    since the input was overwritten."""
    x = tw.tensor([-2.0, -0.5, 0.0, 1.0, 3.0], requires_grad=True)
    tw.nn.functional.leaky_relu(x + 1, 0.2, inplace=True).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.2, 1, 1, 1, 1])
