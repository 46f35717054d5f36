"""What recording costs the client where autograd is involved (issue 37): a view step of a tensor that requires grad
hands its node's attrs key and meta through grad tracking (no inference), and a backward graph replayed from the
client's cache is recorded whole (``Session.record_graph``): the same nodes as node-by-node recording, tensors for
the gradients only, its other outputs released."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw
from tensorwire import autograd_engine as E
from tensorwire import session as S
from tensorwire.protocol.graph import attrs_key
from tensorwire.protocol.ops import infer


@pytest.fixture
def inferences(monkeypatch):
    """The ops ``Session.record`` infers while the test runs (inference skipped: not listed)."""
    seen = []

    def counted(op, metas, attrs, akey=None):
        seen.append(op)
        return infer(op, metas, attrs, akey)

    monkeypatch.setattr(S, "infer", counted)
    return seen


def test_grad_tracked_slices_are_recorded_without_inference(session, inferences):
    w = tw.tensor(np.arange(12, dtype=np.float32).reshape(3, 4), requires_grad=True)
    session.flush()
    a, b = w[:, :1], w[2]
    assert inferences == []
    assert a.grad_fn is not None and b.grad_fn is not None  # (still tracked)
    for e in session._pending:  # (the keys the view steps gave: what inference would have keyed them by)
        assert e[1] == "const" or e[7] == attrs_key(e[1], e[3])  # (w's upload, held until read, has no key)
    (a.sum() * 2 + b.sum()).backward()
    np.testing.assert_array_equal(w.grad.numpy(), [[2, 0, 0, 0], [2, 0, 0, 0], [3, 1, 1, 1]])


def _step(w, x):
    return ((x @ w).tanh()[:, 1:] * 3).sum()


def _entries(session):
    """The pending entries without their handles (which differ from one recording to the next), and the batch's
    structure (its wiring)."""
    return [(e[1], e[3], e[4], e[5], tuple(map(tuple, e[6])), e[7]) for e in session._pending], \
        S.encode_batch(session._pending).skey


def test_a_cached_backward_graph_is_recorded_whole_as_node_by_node(session, record_graph_calls):
    wholes = record_graph_calls
    rng = np.random.default_rng(0)
    x = tw.tensor(rng.standard_normal((4, 3)).astype(np.float32))
    grads, recorded = [], []
    for _ in range(3):  # the first replay records node by node (and asks the service), the next ones whole
        w = tw.tensor(rng.standard_normal((3, 5)).astype(np.float32), requires_grad=True)
        loss = _step(w, x)
        session.flush()
        loss.backward()
        recorded.append(_entries(session))
        grads.append((w, w.grad.numpy()))
    assert len(wholes) >= 2  # (the second and third replays at least)
    assert recorded[0] == recorded[1] == recorded[2]
    for w, g in grads:
        wv = w.detach().numpy()
        t = np.tanh(x.numpy() @ wv)
        mask = np.zeros_like(t)
        mask[:, 1:] = 3
        np.testing.assert_allclose(g, x.numpy().T @ (mask * (1 - t * t)), rtol=1e-5, atol=1e-6)


def test_a_replayed_backward_graph_leaves_no_handle_behind(session):
    rng = np.random.default_rng(1)
    x = tw.tensor(rng.standard_normal((4, 3)).astype(np.float32))
    w = tw.tensor(rng.standard_normal((3, 5)).astype(np.float32), requires_grad=True)

    def buffers():
        return sum(d["buffers"] for d in session.memory_stats()["devices"].values())

    counts = []
    for _ in range(5):
        w.grad = None
        _step(w, x).backward()
        w.grad.numpy()
        counts.append(buffers())
    assert counts[1:] == [counts[1]] * 4  # (the first may hold the service's answer's first replay)


def test_nodes_whose_values_the_client_may_keep_are_recorded_one_by_one(session, monkeypatch):
    """In a backward graph recorded whole, a node of an integer or bool result (its value may be the client's,
    ``known_values``: relu's ``x > 0``) still goes through ``Session.record``, with tensors for its inputs."""
    recorded = []
    orig = S.Session.record

    def record(self, op, *a, **k):
        recorded.append(op)
        return orig(self, op, *a, **k)

    E.clear_cache()  # (the graph looked up below is this test's: another test's may also hold a gt)
    x = tw.tensor([[-1.0, 2.0], [3.0, -4.0]], requires_grad=True)
    for i in range(3):
        x.grad = None
        y = (x * 2).relu().sum()
        if i == 2:  # (the graph's third replay: recorded whole)
            monkeypatch.setattr(S.Session, "record", record)
        y.backward()
        monkeypatch.undo()
        np.testing.assert_array_equal(x.grad.numpy(), [[0, 2], [2, 0]])
    bw = next(bw for bw in E._CACHE.values() if any(n[0] == "gt" for n in bw["nodes"]))
    host = [bw["nodes"][j][0] for j in sorted(bw["host"])]
    assert host == ["gt"] and bw["host"] == E.host_nodes(bw["nodes"], bw["known"])
    assert recorded == host
