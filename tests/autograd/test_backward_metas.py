"""The autograd service's reply carries each backward node's output meta (``metas``: its own inference), so the
client records even a graph's first replay whole (``Session.record_graph``), as it records the replays after it: a
batch whose shapes change every step (a new backward graph each time) no longer records its backward node by node,
inferring each node again (issue 37)."""

from __future__ import annotations

import numpy as np

try:
    import torch
except ImportError:  # (optional: the reference for the gradients' values)
    torch = None

import tensorwire as tw
import tensorwire.nn.functional as F
from tensorwire import autograd_engine as E
from tensorwire.autograd.backward_graph import build_backward
from tensorwire.protocol import dtypes as D
from tensorwire.protocol.ops import infer


def _loss(w, x):
    h = F.gelu(F.layer_norm(x @ w, (w.shape[1],)))
    return (h[:, 1:] * 3).sum() + h.mean()


def _entries(session):
    """The pending entries without their handles: op, attrs, device, user line, input metas, attrs key."""
    return [(e[1], e[3], e[4], e[5], tuple(map(tuple, e[6])), e[7]) for e in session._pending]


def test_the_service_infers_what_the_client_would():
    g = {"devs": ["cpu:0"], "ext": [[[4, 3], "float32", 0], [[3, 5], "float32", 0]],
         "nodes": [["matmul", [-1, -2], None, 0], ["tanh", [0], None, 0], ["sum", [1], None, 0]],
         "roots": [2], "targets": [-2]}
    bw = build_backward(g)
    assert len(bw["metas"]) == len(bw["nodes"])
    ext_metas = {"x": [((4, 3), D.float32), ((3, 5), D.float32)]}
    fwd = [((4, 5), D.float32), ((4, 5), D.float32), ((), D.float32)]
    vals = []
    for kind, i in bw["ext"]:
        vals.append(ext_metas["x"][i] if kind == "x" else fwd[i] if kind == "n" else fwd[2])
    out = []
    for (op, refs, attrs, _), (shape, dtype) in zip(bw["nodes"], bw["metas"]):
        meta = infer(op, [out[r] if r >= 0 else vals[-r - 1] for r in refs], attrs or {})
        assert meta == (tuple(shape), D.BY_NAME[dtype])
        out.append(meta)
    assert out[bw["grads"][0]] == ((3, 5), D.float32)


def test_a_first_replay_is_recorded_whole_as_node_by_node(session, monkeypatch, record_graph_calls):
    """With the service's metas the first replay of a new graph goes through ``record_graph`` and records exactly
    what node-by-node recording (an older service's reply, without metas) records; the gradients are right."""
    wholes = record_graph_calls
    rng = np.random.default_rng(0)
    x = tw.tensor(rng.standard_normal((4, 3)).astype(np.float32))
    w0 = rng.standard_normal((3, 5)).astype(np.float32)
    recorded, grads = [], []
    for with_metas in (True, False):
        E.clear_cache()
        if not with_metas:
            monkeypatch.setattr(E, "_known_from_metas", lambda bw, grads: None)
        w = tw.tensor(w0, requires_grad=True)
        loss = _loss(w, x)
        session.flush()
        n = len(wholes)
        loss.backward()
        assert len(wholes) - n == (1 if with_metas else 0)
        recorded.append(_entries(session))
        grads.append(w.grad.numpy())
    assert recorded[0] == recorded[1]
    np.testing.assert_array_equal(grads[0], grads[1])
    bw = next(iter(E._CACHE.values()))  # (the node-by-node replay's inference: the service's metas, exactly)
    assert bw["known"] == [(k[0], (tuple(m[0]), D.BY_NAME[m[1]])) for k, m in zip(bw["known"], bw["metas"])]
    if torch is None:  # (the two paths agree above; torch, where installed, checks the values too)
        return
    wt = torch.tensor(w0, requires_grad=True)
    h = torch.nn.functional.gelu(torch.nn.functional.layer_norm(torch.tensor(x.numpy()) @ wt, (5,)))
    ((h[:, 1:] * 3).sum() + h.mean()).backward()
    np.testing.assert_allclose(grads[0], wt.grad.numpy(), rtol=1e-4, atol=1e-5)
