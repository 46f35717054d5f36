"""Indexing cases: ``gather``, ``scatter``/``scatter_add``/``scatter_reduce``, ``index``, ``index_put`` and
``setslice``, with int32 and int64 indices, and the out-of-range cases (a ``Fail`` coded ``IndexError``)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.ops import SCATTER_REDUCES, scatter_identity

from .cases import Case, _Graph
from .inputs import SELECTED_DTYPES, _case, _f64, _vals


def _gather_ref(x, idx, dim):
    out = np.empty(idx.shape, np.float64)
    for pos in np.ndindex(*idx.shape):
        src = list(pos)
        src[dim] = idx[pos]
        out[pos] = x[tuple(src)]
    return out


def _scatter_ref(x, idx, src, dim, add):
    out = x.copy()
    for pos in np.ndindex(*idx.shape):
        tgt = list(pos)
        tgt[dim] = idx[pos]
        out[tuple(tgt)] = out[tuple(tgt)] + src[pos] if add else src[pos]
    return out


def _scatter_reduce_ref(x, idx, src, dim, reduce, include_self, dt):
    """torch's scatter_reduce, one index element after another: ``x``, ``src`` in float64 (0/1 for bools)."""
    out = x.copy()
    started = set()
    for pos in np.ndindex(*idx.shape):
        tgt = list(pos)
        tgt[dim] = idx[pos]
        tgt = tuple(tgt)
        if not include_self and tgt not in started:
            started.add(tgt)
            out[tgt] = float(scatter_identity(reduce, dt))
        v = src[pos]
        out[tgt] = out[tgt] * v if reduce == "prod" else max(out[tgt], v) if reduce == "amax" else min(out[tgt], v)
    return out


def _distinct_index(rng, n, shape, dim):
    """An index of ``shape`` with values < n, distinct along ``dim`` (scatter without duplicates)."""
    idx = np.empty(shape, np.int64)
    other = [s for i, s in enumerate(shape) if i != dim]
    for pos in np.ndindex(*other):
        perm = rng.permutation(n)[:shape[dim]]
        key = list(pos)
        key.insert(dim, slice(None))
        idx[tuple(key)] = perm
    return idx


def _index_cases(op: str) -> Iterator[Case]:
    for i, dt in enumerate(SELECTED_DTYPES):
        idt = D.int64 if i % 2 == 0 else D.int32

        if op == "gather":
            def build(rng, dt=dt, idt=idt):
                g = _Graph()
                x = _vals(rng, (3, 4), dt)
                i0 = rng.integers(0, 3, size=(2, 3)).astype(idt.np)
                i1 = rng.integers(0, 4, size=(3, 5)).astype(idt.np)
                g.ref(g.op("gather", g.input(x), g.input(i0), dim=0), _gather_ref(_f64(x), i0, 0))
                g.ref(g.op("gather", g.input(x), g.input(i1), dim=-1), _gather_ref(_f64(x), i1, 1))
                e = np.zeros((0, 4), idt.np)
                g.ref(g.op("gather", g.input(x), g.input(e), dim=0), np.zeros((0, 4)))
                return g
        elif op in ("scatter", "scatter_add"):
            add = op == "scatter_add"

            def build(rng, dt=dt, idt=idt, add=add):
                g = _Graph()
                x = _vals(rng, (4, 3), dt)
                src = _vals(rng, (3, 3), dt)
                if add:
                    i0 = rng.integers(0, 4, size=(3, 2)).astype(idt.np)  # duplicates accumulate
                else:
                    i0 = _distinct_index(rng, 4, (2, 3), 0).astype(idt.np)
                g.ref(g.op(op, g.input(x), g.input(i0), g.input(src), dim=0),
                      _scatter_ref(_f64(x), i0, _f64(src), 0, add))
                i1 = (rng.integers(0, 3, size=(4, 2)) if add else _distinct_index(rng, 3, (4, 2), 1)).astype(idt.np)
                src1 = _vals(rng, (4, 3), dt)
                g.ref(g.op(op, g.input(x), g.input(i1), g.input(src1), dim=1),
                      _scatter_ref(_f64(x), i1, _f64(src1), 1, add))
                return g
        elif op == "scatter_reduce":
            def build(rng, dt=dt, idt=idt):
                g = _Graph()
                x = _vals(rng, (4, 3), dt)
                for reduce in SCATTER_REDUCES:
                    for keep in (True, False):
                        src = _vals(rng, (3, 3), dt)
                        i0 = rng.integers(0, 4, size=(3, 2)).astype(idt.np)  # duplicates reduce together
                        g.ref(g.op(op, g.input(x), g.input(i0), g.input(src), dim=0, reduce=reduce, include_self=keep),
                              _scatter_reduce_ref(_f64(x), i0, _f64(src), 0, reduce, keep, dt))
                        src1 = _vals(rng, (4, 3), dt)
                        i1 = rng.integers(0, 3, size=(4, 2)).astype(idt.np)
                        want = _scatter_reduce_ref(_f64(x), i1, _f64(src1), 1, reduce, keep, dt)
                        g.ref(g.op(op, g.input(x), g.input(i1), g.input(src1), dim=-1, reduce=reduce,
                                   include_self=keep), want)
                return g
        elif op == "index":
            def build(rng, dt=dt, idt=idt):
                g = _Graph()
                x = _vals(rng, (4, 3, 5), dt)
                x64 = _f64(x)
                a = rng.integers(-4, 4, size=(2, 3)).astype(idt.np)
                g.ref(g.op("index", g.input(x), g.input(a), dim=0), x64[a.astype(np.int64)])
                b = rng.integers(-3, 3, size=(2, 1)).astype(idt.np)
                c = rng.integers(-5, 5, size=(4,)).astype(np.int64)
                g.ref(g.op("index", g.input(x), g.input(b), g.input(c), dim=1), x64[:, b.astype(np.int64), c])
                z = np.array(2, idt.np)
                g.ref(g.op("index", g.input(x), g.input(z), dim=2), x64[:, :, 2])
                return g
        elif op == "index_put":
            def build(rng, dt=dt, idt=idt):
                g = _Graph()
                x = _vals(rng, (5, 3), dt)
                x64 = _f64(x)
                a = rng.permutation(5)[:3].astype(idt.np)
                v = _vals(rng, (3, 3), dt)
                out = x64.copy()
                out[a.astype(np.int64)] = _f64(v)
                g.ref(g.op("index_put", g.input(x), g.input(v), g.input(a), dim=0, accumulate=False), out)
                d = np.array([0, 2, 0, -1], idt.np)  # duplicates accumulate; negative counts from the end
                w = _vals(rng, (3,), dt)
                out = x64.copy()
                np.add.at(out, d.astype(np.int64), np.broadcast_to(_f64(w), (4, 3)))
                g.ref(g.op("index_put", g.input(x), g.input(w), g.input(d), dim=0, accumulate=True), out)
                r, c = np.array([1, 3], idt.np), np.array([2, 0], np.int64)
                s = _vals(rng, (), dt)
                out = x64.copy()
                out[r.astype(np.int64), c] = _f64(s)
                g.ref(g.op("index_put", g.input(x), g.input(s), g.input(r), g.input(c), dim=0), out)
                return g
        elif op == "setslice":
            def build(rng, dt=dt, idt=idt):
                g = _Graph()
                x = _vals(rng, (5, 4), dt)
                v = _vals(rng, (2, 1), dt)
                out = _f64(x).copy()
                out[1:5:2, 0:4:1] = _f64(v)
                g.ref(g.op("setslice", g.input(x), g.input(v), starts=[1, 0], stops=[5, 4], steps=[2, 1]), out)
                e = _vals(rng, (0, 4), dt)
                g.ref(g.op("setslice", g.input(x), g.input(e), starts=[2, 0], stops=[2, 4], steps=[1, 1]), _f64(x))
                return g
        else:  # pragma: no cover
            raise KeyError(op)
        yield _case(f"{op}[{dt.name},index={idt.name}]", op, build)
    yield from _oob_cases(op)


def _oob_cases(op: str) -> Iterator[Case]:
    def build(rng):
        g = _Graph()
        x = _vals(rng, (3, 4), D.float32)
        if op == "gather":
            n = g.op("gather", g.input(x), g.input(np.array([[0, 3], [1, 2]])), dim=0)
            m = g.op("gather", g.input(x), g.input(np.array([[0, -1]])), dim=1)
            g.err(m, "IndexError")
        elif op in ("scatter", "scatter_add", "scatter_reduce"):
            attrs = {"reduce": "amax", "include_self": False} if op == "scatter_reduce" else {}
            n = g.op(op, g.input(x), g.input(np.array([[4, 0]])), g.input(np.ones((1, 2), np.float32)), dim=1,
                     **attrs)
        elif op == "index":
            n = g.op("index", g.input(x), g.input(np.array([0, -4])), dim=0)
            m = g.op("index", g.input(x), g.input(np.array([4])), dim=1)
            g.err(m, "IndexError")
        elif op == "index_put":
            n = g.op("index_put", g.input(x), g.input(np.float32(1.0).reshape(())), g.input(np.array([3])), dim=0)
        else:
            return None
        g.err(n, "IndexError")
        g.ref(g.op("neg", g.input(x)), -_f64(x))  # independent work still runs
        return g
    if op in ("gather", "scatter", "scatter_add", "scatter_reduce", "index", "index_put"):
        yield _case(f"{op}[out-of-range]", op, build)



