"""Shape ops, cat/stack/einsum, indexing (basic and advanced), gather/scatter and item assignment."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw

from ._ref import check, check_torch, torch

pytestmark = pytest.mark.usefixtures("session")

A = np.arange(2 * 3 * 4, dtype=np.float64).reshape(2, 3, 4)


def _x():
    return tw.tensor(A)


def _t():
    return torch.tensor(A) if torch is not None else None


# ------------------------------------------------------------------ shape ops (method, numpy reference)

SHAPE_CASES = [
    ("reshape(4, 6)", lambda x: x.reshape(4, 6), lambda a: a.reshape(4, 6)),
    ("reshape((-1,))", lambda x: x.reshape((-1,)), lambda a: a.reshape(-1)),
    ("reshape(2, -1, 2)", lambda x: x.reshape(2, -1, 2), lambda a: a.reshape(2, -1, 2)),
    ("view(6, 4)", lambda x: x.view(6, 4), lambda a: a.reshape(6, 4)),
    ("view(-1)", lambda x: x.view(-1), lambda a: a.reshape(-1)),
    ("flatten()", lambda x: x.flatten(), lambda a: a.reshape(-1)),
    ("flatten(1)", lambda x: x.flatten(1), lambda a: a.reshape(2, 12)),
    ("flatten(0, 1)", lambda x: x.flatten(0, 1), lambda a: a.reshape(6, 4)),
    ("unflatten(2, (2, 2))", lambda x: x.unflatten(2, (2, 2)), lambda a: a.reshape(2, 3, 2, 2)),
    ("unflatten(-1, (-1, 2))", lambda x: x.unflatten(-1, (-1, 2)), lambda a: a.reshape(2, 3, 2, 2)),
    ("unsqueeze(0)", lambda x: x.unsqueeze(0), lambda a: a[None]),
    ("unsqueeze(-1)", lambda x: x.unsqueeze(-1), lambda a: a[..., None]),
    ("unsqueeze(1).squeeze()", lambda x: x.unsqueeze(1).squeeze(), lambda a: a),
    ("unsqueeze(1).squeeze(1)", lambda x: x.unsqueeze(1).squeeze(1), lambda a: a),
    ("squeeze(0) noop", lambda x: x.squeeze(0), lambda a: a),
    ("reshape(1,2,1,12).squeeze((0, 2))", lambda x: x.reshape(1, 2, 1, 12).squeeze((0, 2)),
     lambda a: a.reshape(2, 12)),
    ("transpose(0, 2)", lambda x: x.transpose(0, 2), lambda a: a.transpose(2, 1, 0)),
    ("transpose(-1, -2)", lambda x: x.transpose(-1, -2), lambda a: a.swapaxes(-1, -2)),
    ("swapaxes(0, 1)", lambda x: x.swapaxes(0, 1), lambda a: a.swapaxes(0, 1)),
    ("permute(2, 0, 1)", lambda x: x.permute(2, 0, 1), lambda a: a.transpose(2, 0, 1)),
    ("permute((1, 2, 0))", lambda x: x.permute((1, 2, 0)), lambda a: a.transpose(1, 2, 0)),
    ("permute(-1, 0, 1)", lambda x: x.permute(-1, 0, 1), lambda a: a.transpose(2, 0, 1)),
    ("mT", lambda x: x.mT, lambda a: a.swapaxes(-1, -2)),
    ("[0].T", lambda x: x[0].T, lambda a: a[0].T),
    ("[0].t()", lambda x: x[0].t(), lambda a: a[0].T),
    ("expand(2, 2, 3, 4)", lambda x: x.expand(2, 2, 3, 4), lambda a: np.broadcast_to(a, (2, 2, 3, 4))),
    ("[:, :1].expand(-1, 5, -1)", lambda x: x[:, :1].expand(-1, 5, -1),
     lambda a: np.broadcast_to(a[:, :1], (2, 5, 4))),
    ("broadcast_to((3, 2, 3, 4))", lambda x: x.broadcast_to((3, 2, 3, 4)),
     lambda a: np.broadcast_to(a, (3, 2, 3, 4))),
    ("repeat(1, 2, 1)", lambda x: x.repeat(1, 2, 1), lambda a: np.tile(a, (1, 2, 1))),
    ("repeat(2, 1, 1, 2)", lambda x: x.repeat(2, 1, 1, 2), lambda a: np.tile(a, (2, 1, 1, 2))),
    ("tile((2,))", lambda x: x.tile((2,)), lambda a: np.tile(a, (2,))),
    ("tile(2, 1, 1)", lambda x: x.tile(2, 1, 1), lambda a: np.tile(a, (2, 1, 1))),
    ("flip(0)", lambda x: x.flip(0), lambda a: np.flip(a, 0)),
    ("flip(0, 2)", lambda x: x.flip(0, 2), lambda a: np.flip(a, (0, 2))),
    ("flip((-1,))", lambda x: x.flip((-1,)), lambda a: np.flip(a, -1)),
    ("roll(1)", lambda x: x.roll(1), lambda a: np.roll(a, 1)),
    ("roll(-5)", lambda x: x.roll(-5), lambda a: np.roll(a, -5)),
    ("roll(2, 2)", lambda x: x.roll(2, 2), lambda a: np.roll(a, 2, 2)),
    ("roll((1, -1), (0, 2))", lambda x: x.roll((1, -1), (0, 2)), lambda a: np.roll(a, (1, -1), (0, 2))),
    ("roll(7, -1)", lambda x: x.roll(7, -1), lambda a: np.roll(a, 7, -1)),
    ("narrow(2, 1, 2)", lambda x: x.narrow(2, 1, 2), lambda a: a[:, :, 1:3]),
    ("narrow(1, -2, 2)", lambda x: x.narrow(1, -2, 2), lambda a: a[:, 1:3]),
    ("narrow(0, 0, 0)", lambda x: x.narrow(0, 0, 0), lambda a: a[:0]),
    ("tril()", lambda x: x.tril(), lambda a: np.tril(a)),
    ("tril(1)", lambda x: x.tril(1), lambda a: np.tril(a, 1)),
    ("tril(-1)", lambda x: x.tril(-1), lambda a: np.tril(a, -1)),
    ("triu()", lambda x: x.triu(), lambda a: np.triu(a)),
    ("triu(2)", lambda x: x.triu(2), lambda a: np.triu(a, 2)),
    ("triu(-1)", lambda x: x.triu(-1), lambda a: np.triu(a, -1)),
    ("moveaxis(0, -1)", lambda x: x.moveaxis(0, -1), lambda a: np.moveaxis(a, 0, -1)),
    ("movedim((0, 1), (2, 0))", lambda x: x.movedim((0, 1), (2, 0)), lambda a: np.moveaxis(a, (0, 1), (2, 0))),
    ("select(1, -1)", lambda x: x.select(1, -1), lambda a: a[:, -1]),
    ("expand_as", lambda x: x[:1].expand_as(x), lambda a: np.broadcast_to(a[:1], a.shape)),
    ("view_as", lambda x: x.reshape(6, 4).view_as(x), lambda a: a),
    ("ravel", lambda x: x.ravel(), lambda a: a.ravel()),
    ("diagonal", lambda x: x.diagonal(0, 1, 2), lambda a: np.diagonal(a, 0, 1, 2)),
    ("diagonal(1)", lambda x: x[0].diagonal(1), lambda a: np.diagonal(a[0], 1)),
    ("diagonal(-1)", lambda x: x[0].diagonal(-1), lambda a: np.diagonal(a[0], -1)),
]


@pytest.mark.parametrize("label,fn,ref", SHAPE_CASES, ids=[c[0] for c in SHAPE_CASES])
def test_shape_ops(label, fn, ref):
    x = _x()
    r = fn(x)
    want = ref(A)
    got = check(r, want, dtype="float64")
    if torch is not None:
        check_torch(r, fn(_t()), value=got)
    # each op also works on an int tensor and keeps its dtype
    check(fn(tw.tensor(A.astype(np.int32))), want.astype(np.int32), dtype="int32")


def test_function_forms_of_shape_ops():
    x = _x()
    check(tw.reshape(x, (6, 4)), A.reshape(6, 4))
    check(tw.flatten(x, 1), A.reshape(2, 12))
    check(tw.transpose(x, 0, 1), A.swapaxes(0, 1))
    check(tw.permute(x, (2, 1, 0)), A.transpose(2, 1, 0))
    check(tw.squeeze(x.unsqueeze(0), 0), A)
    check(tw.unsqueeze(x, 1), A[:, None])
    check(tw.flip(x, (1,)), np.flip(A, 1))
    check(tw.roll(x, 1, 0), np.roll(A, 1, 0))
    check(tw.narrow(x, 1, 1, 1), A[:, 1:2])
    check(tw.tril(x), np.tril(A))
    check(tw.triu(x, 1), np.triu(A, 1))
    check(tw.swapaxes(x, 1, 2), A.swapaxes(1, 2))
    check(tw.broadcast_to(x, (2, 2, 3, 4)), np.broadcast_to(A, (2, 2, 3, 4)))
    check(tw.tile(x, (1, 2)), np.tile(A, (1, 2)))


@pytest.mark.parametrize("arg,dim", [(2, 0), (2, 1), ([1, 2], 1), (3, -1), ([1, 1, 2], 2), (5, 2), (1, 0)])
def test_split(arg, dim):
    x = _x()
    parts = x.split(arg, dim)
    idx = np.cumsum(arg)[:-1] if isinstance(arg, list) else list(range(arg, A.shape[dim], arg))
    want = np.split(A, idx, axis=dim)
    assert isinstance(parts, tuple) and len(parts) == len(want)
    for p, w in zip(parts, want):
        check(p, w)
    check(tw.cat(parts, dim), A)
    if torch is not None:
        for p, tp in zip(parts, torch.split(_t(), arg, dim)):
            check_torch(p, tp)
    parts2 = tw.split(x, arg, dim=dim)
    assert len(parts2) == len(want)


@pytest.mark.parametrize("chunks,dim", [(2, 0), (2, 1), (3, 1), (3, 2), (4, 2), (5, 1), (1, 0)])
def test_chunk(chunks, dim):
    x = _x()
    parts = x.chunk(chunks, dim)
    if torch is not None:
        tparts = _t().chunk(chunks, dim)
        assert len(parts) == len(tparts)
        for p, tp in zip(parts, tparts):
            check_torch(p, tp)
    step = -(-A.shape[dim] // chunks)
    want = np.split(A, list(range(step, A.shape[dim], step)), axis=dim)
    assert len(parts) == len(want)
    for p, w in zip(parts, want):
        check(p, w)
    assert len(tw.chunk(x, chunks, dim)) == len(want)


def test_unbind():
    x = _x()
    for dim in (0, 1, -1):
        parts = x.unbind(dim)
        want = [np.take(A, i, axis=dim) for i in range(A.shape[dim])]
        assert len(parts) == len(want)
        for p, w in zip(parts, want):
            check(p, w)
    assert len(tw.unbind(x, 1)) == 3


def test_cat_and_stack():
    a = np.arange(6.0).reshape(2, 3)
    b = np.arange(6.0, 15.0).reshape(3, 3)
    x, y = tw.tensor(a), tw.tensor(b)
    check(tw.cat([x, y]), np.concatenate([a, b]))
    check(tw.cat((x, y), dim=0), np.concatenate([a, b]))
    check(tw.cat([x, x], dim=1), np.concatenate([a, a], 1))
    check(tw.cat([x, x], dim=-1), np.concatenate([a, a], -1))
    check(tw.concat([x, y]), np.concatenate([a, b]))
    check(tw.cat([x]), a)
    check(tw.cat([x, tw.tensor([])]), a)  # empty 1-D tensors are skipped, as torch
    check(tw.cat([x.int(), y]), np.concatenate([a, b]), dtype="float64")  # promotes
    check(tw.cat([x.int(), y.half()]), np.concatenate([a, b]), dtype="float16")
    for dim in (0, 1, 2, -1, -3):
        check(tw.stack([x, x * 2, x * 3], dim), np.stack([a, a * 2, a * 3], dim))
    check(tw.stack([x[0], x[1]]), np.stack([a[0], a[1]]))
    check(tw.hstack([x, x]), np.hstack([a, a]))
    check(tw.vstack([x, y]), np.vstack([a, b]))
    with pytest.raises(ValueError):
        tw.cat([x, x], dim=1) if False else tw.cat([x, y], dim=1)
    with pytest.raises(ValueError):
        tw.stack([x, y])
    with pytest.raises(ValueError):
        tw.cat([])
    if torch is not None:
        check_torch(tw.cat([x.int(), y.half()]), torch.cat([torch.tensor(a).int(), torch.tensor(b).half()]))
        check_torch(tw.stack([x, x], 1), torch.stack([torch.tensor(a)] * 2, 1))


@pytest.mark.parametrize("eq,shapes", [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("ij,jk", [(2, 3), (3, 4)]),
    ("bij,bjk->bik", [(2, 2, 3), (2, 3, 4)]),
    ("ij->ji", [(2, 3)]),
    ("ij->", [(2, 3)]),
    ("ij->j", [(2, 3)]),
    ("i,i->", [(4,), (4,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
    ("...ij,...jk->...ik", [(2, 2, 3), (2, 3, 4)]),
    ("...ij,jk->...ik", [(2, 2, 3), (3, 4)]),
    ("ijk,ik->j", [(2, 3, 4), (2, 4)]),
    ("ab,bc,cd->ad", [(2, 3), (3, 4), (4, 5)]),
    ("ij,ij->ij", [(2, 3), (2, 3)]),
    ("ba", [(2, 3)]),
    ("ii", [(3, 3)]),
    ("ii->i", [(3, 3)]),
    ("bii->b", [(2, 3, 3)]),
    ("iji->j", [(3, 2, 3)]),
    ("ij,jj->i", [(2, 3), (3, 3)]),
    ("...j,jk", [(2, 2, 3), (3, 4)]),  # (implicit output: the ellipsis dims first)
])
def test_einsum(eq, shapes):
    rng = np.random.default_rng(len(eq))
    arrs = [rng.standard_normal(s) for s in shapes]
    r = tw.einsum(eq, *[tw.tensor(a) for a in arrs])
    check(r, np.einsum(eq, *arrs), rtol=1e-9, atol=1e-9)
    r2 = tw.einsum(eq, [tw.tensor(a) for a in arrs])
    check(r2, np.einsum(eq, *arrs), rtol=1e-9, atol=1e-9)
    if torch is not None:
        check_torch(r, torch.einsum(eq, *[torch.tensor(a) for a in arrs]))


def test_einsum_sublist_form():
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 5))
    cases = [(0, 1, 2), (2, 30), (0, 1, 30)], [(Ellipsis, 2), (2, 30)], [(0, 1, 2), (2, 3)], [(0, 1, 2), None, (2,)]
    for sa, sb, *out in cases:
        args = [a, list(sa)] + ([b, list(sb)] if sb is not None else []) + [list(o) for o in out if o is not None]
        got = tw.einsum(*[tw.tensor(x) if isinstance(x, np.ndarray) else x for x in args])
        if torch is not None:
            check_torch(got, torch.einsum(*[torch.tensor(x) if isinstance(x, np.ndarray) else x for x in args]))
    check(tw.einsum(tw.tensor(a), [0, 1, 2], tw.tensor(b), [2, 3], [0, 3]), np.einsum("abc,cd->ad", a, b))
    with pytest.raises(ValueError, match="valid range"):
        tw.einsum(tw.tensor(a), [0, 1, 52])


def test_matmul_shapes():
    rng = np.random.default_rng(1)
    for sa, sb in [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((5, 2, 3), (3, 4)), ((2, 3), (5, 3, 4)),
                   ((2, 1, 2, 3), (4, 3, 2)), ((1, 3), (3, 1))]:
        a, b = rng.standard_normal(sa), rng.standard_normal(sb)
        check(tw.matmul(tw.tensor(a), tw.tensor(b)), np.matmul(a, b), rtol=1e-9, atol=1e-9)
    with pytest.raises(ValueError):
        tw.zeros(2, 3) @ tw.zeros(2, 3)
    with pytest.raises(ValueError):
        tw.zeros(2, 3, 4) @ tw.zeros(3, 4, 5)
    with pytest.raises(TypeError):
        tw.zeros(2, 3) @ tw.zeros(3, 2, dtype=tw.float64)


# ------------------------------------------------------------------ indexing

I0, I1 = np.array([1, 0, 1]), np.array([2, 0, 3])


def _keys():
    """(label, key for tensorwire, key for numpy/torch) — torch's semantics (ints select first)."""
    return [
        ("int", 1, 1),
        ("neg int", -1, -1),
        ("int,int", (1, 2), (1, 2)),
        ("int,int,int", (1, 2, 3), (1, 2, 3)),
        ("slice", slice(1, None), slice(1, None)),
        ("slice step", (slice(None), slice(None, None, 2)), (slice(None), slice(None, None, 2))),
        ("slice step 3", (..., slice(0, 4, 3)), (..., slice(0, 4, 3))),
        ("slice neg bounds", (slice(-1, None), slice(-3, -1)), (slice(-1, None), slice(-3, -1))),
        ("slice out of range", (slice(0, 10), slice(5, 9)), (slice(0, 10), slice(5, 9))),
        ("slice empty", slice(2, 1), slice(2, 1)),
        ("None", None, None),
        ("None mid", (slice(None), None, 1), (slice(None), None, 1)),
        ("None,None", (None, 0, None), (None, 0, None)),
        ("Ellipsis", (..., 1), (..., 1)),
        ("Ellipsis mid", (0, ..., 2), (0, ..., 2)),
        ("Ellipsis only", ..., ...),
        ("Ellipsis None", (..., None), (..., None)),
        ("list", [1, 0], [1, 0]),
        ("list neg", [-1, 0, -2], [-1, 0, -2]),
        ("tensor idx", "T:[1, 0, 1]", [1, 0, 1]),
        ("2-D idx", "T:[[0, 1], [1, 1]]", np.array([[0, 1], [1, 1]])),
        ("two adv adjacent", (slice(None), "T:[0, 2]", "T:[1, 3]"), (slice(None), [0, 2], [1, 3])),
        ("two adv broadcast", ("T:[[0], [1]]", "T:[0, 2]"), (np.array([[0], [1]]), np.array([0, 2]))),
        ("adv non-adjacent", ("T:[0, 1]", slice(None), "T:[1, 3]"), ([0, 1], slice(None), [1, 3])),
        ("adv + slice", (slice(1, 3), [0, 2]), (slice(1, 3), [0, 2])),
        ("adv slice adv", ([1, 0, 1], slice(0, 2), [2, 0, 3]), (I0, slice(0, 2), I1)),
        ("int then adv", (0, slice(None), [1, 2]), (0, slice(None), [1, 2])),
        ("adv then int", ([0, 1], slice(None), 0), ([0, 1], slice(None), 0)),
        ("int adv", (1, [0, 2]), (1, [0, 2])),
        ("adv int adv", ([0, 1], 1, [1, 2]), ([0, 1], 1, [1, 2])),
        ("None adv", (None, [0, 1]), (None, [0, 1])),
        ("adv None adv", ([0, 1], None, [1, 2]), ([0, 1], None, [1, 2])),
        ("Ellipsis adv", (..., [0, 3]), (..., [0, 3])),
        ("adv Ellipsis adv", ([1, 0], ..., [0, 3]), ([1, 0], ..., [0, 3])),
        ("0-d tensor idx", ("T0:1", slice(None), [1, 2]), (1, slice(None), [1, 2])),
        ("int32 idx", "T32:[1, 0]", [1, 0]),
        ("uint8 idx", "TU8:[1, 0]", [1, 0]),
        ("step adv", (slice(None, None, 2), slice(None), [3, 0]), (slice(None, None, 2), slice(None), [3, 0])),
        ("empty adv", [], np.array([], dtype=np.int64)),
    ]


KEYS = _keys()


def _tw_key(k, dev="cpu:0"):
    if isinstance(k, tuple):
        return tuple(_tw_key(v, dev) for v in k)
    if isinstance(k, str) and k.startswith("T"):
        kind, _, lit = k.partition(":")
        v = eval(lit)  # noqa: S307 - literal from the table above
        dt = {"T": tw.int64, "T0": tw.int64, "T32": tw.int32, "TU8": tw.uint8}[kind]
        return tw.tensor(v, dtype=dt, device=dev)
    return k


def _torch_key(k):
    if isinstance(k, tuple):
        return tuple(_torch_key(v) for v in k)
    if isinstance(k, np.ndarray):
        return torch.tensor(k)
    if isinstance(k, list) and k and isinstance(k[0], list):
        return torch.tensor(k)
    return k


def _numpy_torch_semantics(a, key):
    """numpy's result for ``key`` under torch's rule: integers select their dim before advanced indexing."""
    if not isinstance(key, tuple):
        key = (key,)
    # apply integer selections first (back to front), dropping their dims
    if any(isinstance(k, (int, np.integer)) for k in key) and any(isinstance(k, (list, np.ndarray)) for k in key):
        n_ell = sum(1 for k in key if k is Ellipsis)
        consumed = sum(1 for k in key if k is not None and k is not Ellipsis)
        if n_ell:
            i = next(j for j, k in enumerate(key) if k is Ellipsis)
            key = key[:i] + (slice(None),) * (a.ndim - consumed) + key[i + 1:]
        rest, dim, sel = [], 0, []
        for k in key:
            if k is None:
                rest.append(None)
                continue
            if isinstance(k, (int, np.integer)):
                sel.append((dim, k))
            else:
                rest.append(k)
            dim += 1
        for d, k in reversed(sel):
            a = np.take(a, k, axis=d)
        return a[tuple(rest)]
    return a[key]


@pytest.mark.parametrize("label,key,ref_key", KEYS, ids=[k[0] for k in KEYS])
def test_getitem(label, key, ref_key):
    x = _x()
    r = x[_tw_key(key)]
    want = _numpy_torch_semantics(A, ref_key)
    got = check(r, want, dtype="float64")
    if torch is not None:
        check_torch(r, _t()[_torch_key(ref_key)], value=got)
    # on another device, with index tensors made there
    y = tw.tensor(A, device="cpu:1")
    check(y[_tw_key(key, "cpu:1")], want)


@pytest.mark.parametrize("label,key,ref_key", KEYS, ids=[k[0] for k in KEYS])
def test_setitem(label, key, ref_key):
    want = A.copy()
    tkey = _tw_key(key)
    target_shape = _numpy_torch_semantics(A, ref_key).shape
    if label in ("list neg",):  # duplicate-free key: every written element gets a known value
        pass
    vals = np.arange(np.prod(target_shape), dtype=np.float64).reshape(target_shape) + 100
    _np_setitem(want, ref_key, vals)
    x = _x()
    x[tkey] = tw.tensor(vals)
    check(x, want)
    # a scalar broadcast to the indexed region
    want2 = A.copy()
    _np_setitem(want2, ref_key, -1.0)
    x2 = _x()
    x2[tkey] = -1
    check(x2, want2)
    if torch is not None:
        t = _t()
        t[_torch_key(ref_key)] = torch.tensor(vals)
        check_torch(x, t)


def _np_setitem(a, key, vals):
    """a[key] = vals with torch's rule for integers (select first) applied through a view."""
    if not isinstance(key, tuple):
        key = (key,)
    if any(isinstance(k, (int, np.integer)) for k in key) and any(isinstance(k, (list, np.ndarray)) for k in key):
        n_ell = sum(1 for k in key if k is Ellipsis)
        consumed = sum(1 for k in key if k is not None and k is not Ellipsis)
        if n_ell:
            i = next(j for j, k in enumerate(key) if k is Ellipsis)
            key = key[:i] + (slice(None),) * (a.ndim - consumed) + key[i + 1:]
        basic = tuple(k if isinstance(k, (int, np.integer)) else slice(None) for k in key if k is not None)
        view = a[basic]  # a numpy view: ints dropped
        rest = tuple(k for k in key if not isinstance(k, (int, np.integer)))
        view[rest] = vals
        return
    a[key] = vals


def test_bool_mask_indexing():
    m = A % 3 == 0
    x = _x()
    M = tw.tensor(m)
    check(x[M], A[m])
    check(x[x > 10], A[A > 10])
    check(x[M[0, 0] if False else tw.tensor(m[:, 0, 0])], A[m[:, 0, 0]])
    check(x[:, tw.tensor([True, False, True])], A[:, [True, False, True]])
    check(x[tw.tensor(m[..., 0])], A[m[..., 0]])
    check(x[[True, False]], A[[True, False]])
    check(x[np.array([False, True])], A[np.array([False, True])])
    check(x[x > 1000], A[A > 1000])
    check(x[tw.tensor(True)], A[None])
    check(x.masked_select(M), A[m])
    if torch is not None:
        check_torch(x[M], _t()[torch.tensor(m)])
        check_torch(x[tw.tensor(True)], _t()[torch.tensor(True)])
    # assignment through a mask
    y = _x()
    y[M] = 0.0
    w = A.copy()
    w[m] = 0.0
    check(y, w)
    y2 = _x()
    y2[y2 > 5] = y2[y2 > 5] * 10
    w2 = A.copy()
    w2[w2 > 5] *= 10
    check(y2, w2)


def test_index_errors():
    x = _x()
    with pytest.raises(IndexError):
        x[2]
    with pytest.raises(IndexError):
        x[0, 0, 0, 0]
    with pytest.raises(IndexError):
        x[-3]
    with pytest.raises(IndexError):
        x[..., ...]
    with pytest.raises(ValueError):
        x[::-1]
    with pytest.raises(IndexError):
        x[tw.tensor([0.5])]
    with pytest.raises(TypeError):
        x["a"]
    with pytest.raises(TypeError):
        x[1.5]
    # an out-of-range index tensor fails when it runs (its values live on the device)
    bad = x[tw.tensor([0, 5])]
    with pytest.raises(IndexError):
        bad.numpy()


# ------------------------------------------------------------------ gather / scatter / index_select / masked_fill

def test_gather_and_take_along_dim():
    rng = np.random.default_rng(2)
    for dim in (0, 1, 2, -1):
        n = A.shape[dim]
        shape = list(A.shape)
        shape[dim] = 5
        idx = rng.integers(0, n, size=shape)
        x = _x()
        check(x.gather(dim, tw.tensor(idx)), np.take_along_axis(A, idx, axis=dim))
        check(tw.gather(x, dim, tw.tensor(idx)), np.take_along_axis(A, idx, axis=dim))
        check(x.take_along_dim(tw.tensor(idx), dim), np.take_along_axis(A, idx, axis=dim))
        if torch is not None:
            check_torch(x.gather(dim, tw.tensor(idx)), _t().gather(dim, torch.tensor(idx)))
    # index smaller than the input in the other dims
    idx = np.array([[0, 2], [1, 0]])
    check(_x()[0].gather(1, tw.tensor(idx)), np.take_along_axis(A[0, :2], idx, axis=1))
    # take_along_dim broadcasting and dim=None
    am = np.argmax(A, axis=1, keepdims=True)
    check(_x().take_along_dim(tw.tensor(am), 1), np.take_along_axis(A, am, 1))
    flat_idx = np.array([0, 5, 23])
    check(_x().take_along_dim(tw.tensor(flat_idx)), A.reshape(-1)[flat_idx])
    check(tw.take_along_dim(_x(), tw.tensor(am[:1]), dim=1),
          np.take_along_axis(A, np.broadcast_to(am[:1], (2, 1, 4)), 1))
    if torch is not None:
        check_torch(tw.take_along_dim(_x(), tw.tensor(am[:1]), dim=1),
                    torch.take_along_dim(_t(), torch.tensor(am[:1]), dim=1))


def test_scatter_and_scatter_add():
    base = np.zeros((3, 5))
    idx = np.array([[0, 1, 2, 0, 1], [2, 0, 0, 1, 2]])
    src = np.arange(10.0).reshape(2, 5) + 1
    x = tw.tensor(base)
    # scatter: unique targets per column
    r = x.scatter(0, tw.tensor(idx), tw.tensor(src))
    want = base.copy()
    for i in range(2):
        for j in range(5):
            want[idx[i, j], j] = src[i, j]
    check(r, want)
    # scatter_add accumulates duplicates
    idx2 = np.array([[0, 0, 2, 0, 1], [0, 0, 0, 1, 1]])
    r2 = x.scatter_add(0, tw.tensor(idx2), tw.tensor(src))
    want2 = base.copy()
    for i in range(2):
        for j in range(5):
            want2[idx2[i, j], j] += src[i, j]
    check(r2, want2)
    check(tw.scatter_add(x, 0, tw.tensor(idx2), tw.tensor(src)), want2)
    # scatter a scalar value, along dim 1, with a src larger than the index
    idx3 = np.array([[4], [0], [2]])
    r3 = x.scatter(1, tw.tensor(idx3), 7.0)
    want3 = base.copy()
    want3[np.arange(3), idx3[:, 0]] = 7.0
    check(r3, want3)
    big_src = np.arange(30.0).reshape(3, 10)
    r4 = x.scatter(1, tw.tensor(idx3), tw.tensor(big_src))
    want4 = base.copy()
    want4[np.arange(3), idx3[:, 0]] = big_src[:, 0]
    check(r4, want4)
    r5 = x.scatter(1, tw.tensor(idx3), tw.tensor(big_src), reduce="add")
    check(r5, want4)
    if torch is not None:
        tb = torch.tensor(base)
        check_torch(r, tb.scatter(0, torch.tensor(idx), torch.tensor(src)))
        check_torch(r2, tb.scatter_add(0, torch.tensor(idx2), torch.tensor(src)))
        check_torch(r4, tb.scatter(1, torch.tensor(idx3), torch.tensor(big_src)))
    # in-place forms
    y = tw.tensor(base)
    y.scatter_(0, tw.tensor(idx), tw.tensor(src))
    check(y, want)
    y.scatter_add_(0, tw.tensor(idx2), tw.tensor(src))
    check(y, want + want2)


def test_index_select_masked_fill_index_add():
    x = _x()
    for dim in (0, 1, 2, -1):
        idx = np.array([0, A.shape[dim] - 1, 0])
        check(x.index_select(dim, tw.tensor(idx)), np.take(A, idx, axis=dim))
        check(tw.index_select(x, dim, tw.tensor(idx, dtype=tw.int32)), np.take(A, idx, axis=dim))
        if torch is not None:
            check_torch(x.index_select(dim, tw.tensor(idx)), _t().index_select(dim, torch.tensor(idx)))
    m = A > 7
    check(x.masked_fill(tw.tensor(m), -1.0), np.where(m, -1.0, A))
    check(x.masked_fill(tw.tensor(m[0, 0]), 0), np.where(m[0, 0], 0.0, A))  # broadcast mask
    check(tw.masked_fill(x, tw.tensor(m), tw.tensor(5.0)), np.where(m, 5.0, A))
    xi = tw.tensor(A.astype(np.int64))
    check(xi.masked_fill(tw.tensor(m), 3), np.where(m, 3, A), dtype="int64")
    if torch is not None:
        check_torch(x.masked_fill(tw.tensor(m), -1.0), _t().masked_fill(torch.tensor(m), -1.0))
    # index_add (out of place and in place), with duplicates
    src = np.ones((2, 2, 4))
    idx = np.array([2, 2])
    want = A.copy()
    np.add.at(want, (slice(None), idx), src)
    check(x.index_add(1, tw.tensor(idx), tw.tensor(src)), want)
    check(x.index_add(1, tw.tensor(idx), tw.tensor(src), alpha=2), A + 2 * (want - A))
    y = _x()
    y.index_add_(1, tw.tensor(idx), tw.tensor(src))
    check(y, want)
    if torch is not None:
        check_torch(x.index_add(1, tw.tensor(idx), tw.tensor(src)),
                    _t().index_add(1, torch.tensor(idx), torch.tensor(src)))


def test_iteration_and_len():
    x = _x()
    rows = [r for r in x]
    assert len(rows) == 2 == len(x)
    for r, w in zip(rows, A):
        check(r, w)
    with pytest.raises(TypeError):
        iter(tw.tensor(1.0))


def test_shape_errors_raise_on_the_recording_line():
    x = _x()
    with pytest.raises(tw.ShapeError):
        x.reshape(5, 5)
    with pytest.raises(ValueError):
        x.view(-1, -1)
    with pytest.raises(ValueError):
        x.permute(0, 1)
    with pytest.raises(ValueError):
        x.permute(0, 0, 1)
    with pytest.raises(ValueError):
        x.expand(3, 3, 4)
    with pytest.raises(ValueError):
        x.unflatten(1, (2, 2))
    with pytest.raises(ValueError):
        x.split([1, 1], 1)
    with pytest.raises(IndexError):
        x.narrow(1, 2, 5)
    with pytest.raises(IndexError):
        x.transpose(0, 3)
    with pytest.raises(IndexError):
        x.unsqueeze(4)
    with pytest.raises(ValueError):
        x.repeat(2)
    with pytest.raises(ValueError):
        tw.zeros(3).tril()
    with pytest.raises(ValueError):
        x.mT if False else tw.zeros(3).mT
    with pytest.raises(ValueError):
        x + tw.zeros(3)
    with pytest.raises(ValueError):
        x.gather(0, tw.tensor([[0]]))


def _random_key(rng, shape):
    """A random mix of ints, slices (positive steps), None, Ellipsis, lists and index tensors."""
    kinds = []
    for _ in range(rng.integers(1, len(shape) + 2)):
        r = rng.random()
        kinds.append(None if r < 0.1 else Ellipsis if r < 0.16 else
                     ["int", "slice", "list", "tensor", "tensor2d"][rng.integers(0, 5)])
    if kinds.count(Ellipsis) > 1:
        kinds = [k for k in kinds if k is not Ellipsis] + [Ellipsis]
    real = [k for k in kinds if k not in (None, Ellipsis)][:len(shape)]
    it = iter(real)
    kinds = [k if k in (None, Ellipsis) else next(it, None) for k in kinds]
    kinds = [k for k in kinds if k is not None or rng.random() < 0.5]
    consumed = sum(1 for k in kinds if k not in (None, Ellipsis))
    tw_key, np_key, d = [], [], 0
    for k in kinds:
        if k is None or k is Ellipsis:
            tw_key.append(k)
            np_key.append(k)
            d += (len(shape) - consumed) if k is Ellipsis else 0
            continue
        n = shape[d]
        d += 1
        if k == "int":
            v = int(rng.integers(-n, n))
            tw_key.append(v)
            np_key.append(v)
        elif k == "slice":
            a = None if rng.random() < 0.3 else int(rng.integers(-n, n + 1))
            b = None if rng.random() < 0.3 else int(rng.integers(-n, n + 2))
            st = [None, 1, 2, 3][rng.integers(0, 4)]
            tw_key.append(slice(a, b, st))
            np_key.append(slice(a, b, st))
        else:
            v = rng.integers(-n, n, size=(2,) if k != "tensor2d" else (2, 1))
            np_key.append(v)
            tw_key.append(v.tolist() if k == "list" else tw.tensor(v))
    return tuple(tw_key), tuple(np_key)


def test_random_keys_get_and_set():
    """150 random keys: x[key] and x[key] = -1 against numpy under torch's rules (and torch itself)."""
    rng = np.random.default_rng(1234)
    shape = (3, 4, 5)
    base = np.arange(60, dtype=np.float64).reshape(shape)
    x0 = tw.tensor(base)
    gets, sets = [], []
    for _ in range(150):
        tk, nk = _random_key(rng, shape)
        want = _numpy_torch_semantics(base, nk)
        gets.append((x0[tk], want, nk))
        w = base.copy()
        _np_setitem(w, nk, -1.0)
        x = tw.tensor(base)
        x[tk] = -1.0
        sets.append((x, w, nk))
    for r, want, nk in gets:
        got = check(r, want)
        if torch is not None:
            tkey = tuple(torch.tensor(k) if isinstance(k, np.ndarray) else k for k in nk)
            check_torch(r, torch.tensor(base)[tkey], value=got)
    for x, w, _ in sets:
        check(x, w)
