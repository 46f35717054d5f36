"""Reductions over dims (int, tuple, negative, none) with keepdim, against numpy float64 (and torch)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw

from ._ref import FLOAT_NAMES, as_f64, check, check_torch, data, torch, torch_of

pytestmark = pytest.mark.usefixtures("session")

SHAPE = (3, 4, 5)
DIMS = [None, 0, 1, -1, (0, 2), (-1, -2), (0, 1, 2)]


def _np_axis(dim):
    return dim


def _logsumexp(a, axis, keepdims):
    m = np.max(a, axis=axis, keepdims=True)
    r = np.log(np.sum(np.exp(a - m), axis=axis, keepdims=True)) + m
    return r if keepdims else np.squeeze(r, axis=axis if axis is not None else tuple(range(a.ndim)))


# name, numpy reference f(a64, axis, keepdims), result dtype rule
REDUCTIONS = [
    ("sum", lambda a, ax, k: np.sum(a, axis=ax, keepdims=k), "sum"),
    ("mean", lambda a, ax, k: np.mean(a, axis=ax, keepdims=k), "same"),
    ("amax", lambda a, ax, k: np.max(a, axis=ax, keepdims=k), "same"),
    ("amin", lambda a, ax, k: np.min(a, axis=ax, keepdims=k), "same"),
    ("logsumexp", _logsumexp, "float"),
    ("var", lambda a, ax, k: np.var(a, axis=ax, keepdims=k, ddof=1), "float"),
    ("std", lambda a, ax, k: np.std(a, axis=ax, keepdims=k, ddof=1), "float"),
    ("norm", lambda a, ax, k: np.sqrt(np.sum(a * a, axis=ax, keepdims=k)), "float"),
    ("all", lambda a, ax, k: np.all(a != 0, axis=ax, keepdims=k), "bool"),
    ("any", lambda a, ax, k: np.any(a != 0, axis=ax, keepdims=k), "bool"),
]


def _dtype_rule(rule, dt):
    if rule == "sum":
        return dt if dt in FLOAT_NAMES else "int64"
    if rule == "float":
        return dt if dt in FLOAT_NAMES else "float32"
    if rule == "bool":
        return "bool"
    return dt


def _call(x, name, dim, keepdim):
    if dim is None:
        if name == "logsumexp":
            return x.logsumexp(dim=tuple(range(x.ndim)), keepdim=keepdim)
        return getattr(x, name)() if not keepdim else getattr(x, name)(dim=tuple(range(x.ndim)), keepdim=True)
    return getattr(x, name)(dim, keepdim=keepdim) if name not in ("var", "std", "norm") else \
        getattr(x, name)(dim=dim, keepdim=keepdim)


@pytest.mark.parametrize("dt", ["float64", "float32", "float16", "int64", "int32", "bool"])
@pytest.mark.parametrize("name,ref,rule", REDUCTIONS, ids=[r[0] for r in REDUCTIONS])
def test_reductions(name, ref, rule, dt):
    if name == "mean" and dt not in FLOAT_NAMES:
        with pytest.raises(TypeError):
            tw.tensor(data(SHAPE, dt)).mean()
        return
    if dt == "bool" and name in ("amax", "amin", "var", "std", "norm", "logsumexp"):
        pytest.skip("not defined for bool in torch either")
    a = data(SHAPE, dt, seed=3)
    x = tw.tensor(a)
    a64 = as_f64(a)
    rtol = 5e-3 if dt == "float16" else (1e-5 if dt == "float32" else None)
    results = []
    for dim in DIMS:
        for keepdim in (False, True):
            r = _call(x, name, dim, keepdim)
            results.append((dim, keepdim, r, ref(a64, dim, keepdim)))
    for dim, keepdim, r, want in results:
        got = check(r, want, dtype=_dtype_rule(rule, dt), rtol=rtol, atol=rtol)
        # torch: no var/std/norm on ints; norm over None/3 dims goes to its matrix norm
        torch_ok = not (name in ("var", "std", "norm", "logsumexp") and dt not in FLOAT_NAMES) and \
            not (name == "norm" and (dim is None or len(dim if isinstance(dim, tuple) else (dim,)) > 2))
        if torch is not None and torch_ok:
            t = torch_of(a)
            tr = _call(t, name, dim, keepdim)
            check_torch(r, tr, value=got, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("dt", ["float64", "float32", "int64", "int16", "uint8"])
def test_prod_and_cumulative(dt):
    a = data((3, 4), dt, seed=4, low=-2, high=2)
    if dt != "uint8" and dt not in FLOAT_NAMES:
        a = (a % 3 - 1).astype(a.dtype)
    x = tw.tensor(a)
    a64 = as_f64(a)
    out_dt = dt if dt in FLOAT_NAMES else "int64"
    check(x.prod(), np.prod(a64), dtype=out_dt)
    for dim in (0, 1, -1):
        for keep in (False, True):
            check(x.prod(dim, keepdim=keep), np.prod(a64, axis=dim, keepdims=keep), dtype=out_dt)
        check(x.cumsum(dim), np.cumsum(a64, axis=dim), dtype=out_dt)
        check(x.cumprod(dim), np.cumprod(a64, axis=dim), dtype=out_dt)
        check(tw.cumsum(x, dim=dim), np.cumsum(a64, axis=dim), dtype=out_dt)
    check(x.sum(dtype=tw.float64), np.sum(a64), dtype="float64")
    check(x.cumsum(0, dtype=tw.float64), np.cumsum(a64, axis=0), dtype="float64")
    check(x.prod(1, dtype=tw.float64), np.prod(a64, axis=1), dtype="float64")
    if torch is not None:
        t = torch_of(a)
        check_torch(x.prod(1), t.prod(1))
        check_torch(x.cumsum(1), t.cumsum(1))
        check_torch(x.cumprod(0), t.cumprod(0))
        check_torch(x.sum(), t.sum())


def test_max_min_with_dim_return_values_and_indices():
    a = np.array([[1.0, 5.0, 5.0, -2.0], [7.0, 0.0, 7.0, 3.0], [-1.0, -1.0, -4.0, -1.0]])
    x = tw.tensor(a, dtype=tw.float64)
    for dim in (0, 1, -1):
        for keep in (False, True):
            mx = x.max(dim, keepdim=keep)
            mn = tw.min(x, dim, keep)
            vals, idx = mx
            assert mx.values is vals and mx.indices is idx
            check(vals, np.max(a, axis=dim, keepdims=keep), dtype="float64")
            check(mn.values, np.min(a, axis=dim, keepdims=keep), dtype="float64")
            # torch returns the first occurrence of the extreme value
            check(idx, np.argmax(a, axis=dim, keepdims=keep), dtype="int64")
            check(mn.indices, np.argmin(a, axis=dim, keepdims=keep), dtype="int64")
            check(x.argmax(dim, keepdim=keep), np.argmax(a, axis=dim, keepdims=keep), dtype="int64")
            check(tw.argmin(x, dim=dim, keepdim=keep), np.argmin(a, axis=dim, keepdims=keep), dtype="int64")
            if torch is not None:
                tv, ti = torch.tensor(a).max(dim, keepdim=keep)
                check_torch(vals, tv)
                check_torch(idx, ti)
    check(x.max(), np.asarray(7.0), dtype="float64")
    check(tw.max(x), np.asarray(7.0), dtype="float64")
    check(x.min(), np.asarray(-4.0), dtype="float64")
    check(x.argmax(), np.asarray(np.argmax(a)), dtype="int64")
    check(x.argmin(), np.asarray(np.argmin(a)), dtype="int64")
    check(x.argmax(keepdim=True), np.argmax(a).reshape(1, 1), dtype="int64") if torch is None else \
        check_torch(x.argmax(keepdim=True), torch.tensor(a).argmax(keepdim=True))
    xi = tw.tensor([[3, 1], [2, 9]], dtype=tw.int32)
    v, i = xi.max(1)
    check(v, np.array([3, 9]), dtype="int32")
    check(i, np.array([0, 1]), dtype="int64")
    v16, i16 = tw.tensor(a, dtype=tw.float16).min(0)
    check(v16, np.min(a, axis=0), dtype="float16")
    check(i16, np.argmin(a, axis=0), dtype="int64")


def test_var_std_corrections():
    a = data((4, 6), "float64", seed=5)
    x = tw.tensor(a)
    for dim in (None, 0, 1, (0, 1)):
        for ddof in (0, 1, 2):
            check(x.var(dim=dim, correction=ddof), np.var(a, axis=dim, ddof=ddof))
            check(x.std(dim=dim, correction=ddof), np.std(a, axis=dim, ddof=ddof))
        check(x.var(dim, unbiased=False), np.var(a, axis=dim, ddof=0))
        check(x.std(dim, unbiased=True), np.std(a, axis=dim, ddof=1))
        check(x.var(dim, keepdim=True), np.var(a, axis=dim, ddof=1, keepdims=True))
    check(x.var(unbiased=False), np.var(a))
    check(tw.std(x, 1, correction=0), np.std(a, axis=1))
    check(tw.var(x, 0), np.var(a, axis=0, ddof=1))
    xi = tw.tensor(np.array([[1, 2, 4], [3, 5, 9]]))
    check(xi.var(1), np.var([[1, 2, 4], [3, 5, 9]], axis=1, ddof=1), dtype="float32")
    if torch is not None:
        t = torch.tensor(a)
        check_torch(x.var(1, correction=0), t.var(1, correction=0))
        check_torch(x.std(0, unbiased=False), t.std(0, unbiased=False))
        check_torch(x.std(), t.std())


def test_norm_variants():
    a = data((3, 4), "float64", seed=6)
    x = tw.tensor(a)
    check(x.norm(), np.linalg.norm(a))
    check(tw.norm(x), np.linalg.norm(a))
    check(x.norm(p="fro"), np.linalg.norm(a))
    for p in (1, 2, 3, 0.5, float("inf"), float("-inf"), 0):
        for dim in (None, 1, (0, 1)):
            want = np.linalg.norm(a.reshape(-1) if dim in (None, (0, 1)) else a, ord=p,
                                  axis=None if dim in (None, (0, 1)) else dim)
            check(x.norm(p=p, dim=dim), np.asarray(want))
    check(x.norm(dim=1, keepdim=True), np.linalg.norm(a, axis=1, keepdims=True))
    check(x.float().norm(), np.linalg.norm(a), dtype="float32")
    if torch is not None:
        t = torch.tensor(a)
        check_torch(x.norm(p=1, dim=0), t.norm(p=1, dim=0))
        check_torch(x.norm(p=3), t.norm(p=3))


def test_logsumexp_extremes():
    a = np.array([[1000.0, 1000.0], [-1000.0, -1000.0], [-np.inf, -np.inf], [np.inf, 1.0]])
    x = tw.tensor(a)
    want = np.array([1000.0 + np.log(2), -1000.0 + np.log(2), -np.inf, np.inf])
    check(x.logsumexp(1), want)
    check(tw.logsumexp(x, dim=1, keepdim=True), want[:, None])
    if torch is not None:
        check_torch(x.logsumexp(1), torch.tensor(a).logsumexp(1))


def test_all_any_values():
    a = np.array([[True, True, False], [True, True, True]])
    x = tw.tensor(a)
    check(x.all(), np.asarray(False), dtype="bool")
    check(x.any(), np.asarray(True), dtype="bool")
    check(x.all(1), a.all(1), dtype="bool")
    check(x.any(0, keepdim=True), a.any(0, keepdims=True), dtype="bool")
    check(tw.all(x, dim=1), a.all(1), dtype="bool")
    f = tw.tensor([0.0, 0.5, np.nan])
    check(f.any(), np.asarray(True), dtype="bool")
    check(f.all(), np.asarray(False), dtype="bool")
    e = tw.zeros(0)
    check(e.all(), np.asarray(True), dtype="bool")
    check(e.any(), np.asarray(False), dtype="bool")
    check(e.sum(), np.asarray(0.0), dtype="float32")


def test_empty_and_zero_d_reductions():
    z = tw.tensor(3.5)
    check(z.sum(), np.asarray(3.5))
    check(z.mean(), np.asarray(3.5))
    check(z.amax(), np.asarray(3.5))
    check(z.sum(0), np.asarray(3.5))
    check(z.sum(-1, keepdim=True), np.asarray(3.5))
    check(z.cumsum(0), np.asarray(3.5))
    check(z.argmax(), np.asarray(0), dtype="int64")
    e = tw.zeros(2, 0)
    check(e.sum(1), np.zeros(2), dtype="float32")
    check(e.sum(0), np.zeros(0), dtype="float32")
    check(e.prod(1), np.ones(2), dtype="float32")
    with pytest.raises(ValueError):
        e.amax(1)
    with pytest.raises(ValueError):
        e.argmax()


def test_reduction_dim_errors():
    x = tw.zeros(2, 3)
    with pytest.raises(IndexError):
        x.sum(2)
    with pytest.raises(IndexError):
        x.mean(-3)
    with pytest.raises(ValueError):
        x.sum((0, 0))
    with pytest.raises(IndexError):
        x.argmax(5)
    with pytest.raises(IndexError):
        x.cumsum(2)


def test_count_nonzero_nansum_aminmax():
    a = np.array([[0.0, 1.5, np.nan], [2.0, 0.0, 3.0]])
    x = tw.tensor(a, dtype=tw.float64)
    check(x.count_nonzero(), np.asarray(np.count_nonzero(a)), dtype="int64")
    check(x.count_nonzero(1), np.count_nonzero(a, axis=1), dtype="int64")
    check(x.nansum(), np.asarray(np.nansum(a)), dtype="float64")
    check(x.nansum(0), np.nansum(a, axis=0), dtype="float64")
    b = np.nan_to_num(a)
    mm = tw.tensor(b).aminmax(dim=1)
    check(mm.min, b.min(1))
    check(mm.max, b.max(1))


def test_empty_dim_list_reduces_everything():
    a = np.arange(6.0).reshape(2, 3)
    x = tw.tensor(a)
    check(x.sum(dim=[]), np.asarray(15.0))
    check(x.mean(dim=()), np.asarray(2.5))
    check(x.amax(()), np.asarray(5.0))
    check(x.sum(dim=[], keepdim=True), np.full((1, 1), 15.0))
    if torch is not None:
        check_torch(x.sum(dim=[]), torch.tensor(a).sum(dim=[]))


def test_mean_dtype_argument():
    xi = tw.tensor([[1, 2], [3, 5]])
    check(xi.mean(dtype=tw.float64), np.asarray(2.75), dtype="float64")
    check(xi.float().mean(0), np.array([2.0, 3.5]), dtype="float32")
    check(xi.sum(1, keepdim=True), np.array([[3], [8]]), dtype="int64")
