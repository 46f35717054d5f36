"""A cached backward graph recorded in one pass (``Session._record_whole``, the entries made from the graph's templates
by zip) records exactly what its node-by-node recording (``Session.record_graph``'s loop) records: the same entries,
wired to the same handles, the same tensors kept, the same handles released; and a replay whose values it cannot
take as they are (a value whose meta differs from its templates') falls back to the node-by-node recording."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw
from tensorwire import autograd_engine as E
from tensorwire import session as S


def _loss(w, x):
    # a matmul, a view, a constant scalar, a reduction, and a product reading w's own value (the graph reads leaves,
    # constants and forward values)
    return ((x @ w).tanh()[:, 1:] * 3).sum() + (w * w).sum() / 2


@pytest.fixture
def recordings(monkeypatch) -> list:
    """Per ``record_graph`` call: its new pending entries and released handles, with every handle written as
    ``("n", j)`` (node ``j``'s output) or ``("v", k)`` (tensor ``k`` of ``vals``), and its kept tensors."""
    got: list = []
    orig = S.Session.record_graph

    def record_graph(self, nodes, vals, *a):
        start, released = len(self._pending), len(self._release)
        first = next(self._ids)
        self._ids = iter(range(first, 1 << 60))  # (the handle just taken given back: the graph's first one)
        out = orig(self, nodes, vals, *a)
        names = {first + j: ("n", j) for j in range(len(nodes))}
        names.update({t._id: ("v", k) for k, t in enumerate(vals)})
        entries = [(names[e[0]], e[1], tuple(names[i] for i in e[2]), e[3], e[4], e[6], e[7])
                   for e in self._pending[start:]]
        kept = [(names[t._id], t._shape, t.dtype) if t is not None else None for t in out]
        got.append((entries, [names[h] for h in self._release[released:]], kept))
        return out

    monkeypatch.setattr(S.Session, "record_graph", record_graph)
    return got


def _run(session, w0, x, monkeypatch, whole: bool):
    if not whole:
        monkeypatch.setattr(S.Session, "_record_whole", lambda *a: None)
    w = tw.tensor(w0, requires_grad=True)
    loss = _loss(w, x)
    session.flush()
    loss.backward()
    monkeypatch.setattr(S.Session, "_record_whole", S.Session.__dict__["_record_whole"])
    return w.grad.numpy()


def test_whole_recording_is_the_node_by_node_one(session, recordings, monkeypatch):
    rng = np.random.default_rng(0)
    x = tw.tensor(rng.standard_normal((4, 3)).astype(np.float32))
    w0 = rng.standard_normal((3, 5)).astype(np.float32)
    E.clear_cache()
    g = [_run(session, w0, x, monkeypatch, whole) for whole in (True, False, True)]
    assert len(recordings) == 3
    entries, released, kept = recordings[1]
    assert entries and released and any(k is not None for k in kept)
    assert any(("v", 0) in e[2] for e in entries)  # (the graph reads values: the seed at least)
    assert recordings[0] == recordings[1] == recordings[2]
    for gi in g[1:]:
        np.testing.assert_array_equal(gi, g[0])


def test_a_value_of_another_meta_takes_the_node_by_node_recording(session, monkeypatch):
    rng = np.random.default_rng(1)
    x = tw.tensor(rng.standard_normal((4, 3)).astype(np.float32))
    w = tw.tensor(rng.standard_normal((3, 5)).astype(np.float32), requires_grad=True)
    E.clear_cache()
    _loss(w, x).backward()  # (the graph cached; its plan's templates made)
    plan = next(bw["plan"] for bw in E._CACHE.values() if bw.get("plan") is not None and bw["plan"].entries)
    wholes = []
    orig = S.Session._record_whole

    def record_whole(self, *a):
        out = orig(self, *a)
        wholes.append(out is not None)
        return out

    monkeypatch.setattr(S.Session, "_record_whole", record_whole)
    w.grad = None
    _loss(w, x).backward()
    expected = w.grad.numpy()
    shape, dtype, dev = plan.vmeta[0]
    plan.vmeta[0] = ((7, *shape), dtype, dev)  # (as if the templates had been made for a value of another shape)
    w.grad = None
    _loss(w, x).backward()
    assert wholes == [True, False]
    np.testing.assert_array_equal(w.grad.numpy(), expected)
