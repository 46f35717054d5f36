"""``rnn_scan``'s gradient reaches ``rnn_scan_grad`` in the parts a layer's outputs got (its output's, its final
``h``'s and ``c``'s: the ``grads`` attribute), not padded into the packed output's shape and summed first: the
backward graph of a cell or a layer records no ``pad`` for it, a gradient of anything else (a gate column) falls
back to the packed whole, and the CPU kernel's result from the parts is bit-equal to its result from the packed
sum (C and numpy cells)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw
from tensorwire.autograd.backward_graph import build_backward
from tensorwire.autograd_hooks import record
from tensorwire.backends.cpu import recurrent, rnn_cells
from tensorwire.backends.cpu.kernels import KERNELS
from tensorwire.backends.testing.recurrent import packed_grad
from tensorwire.protocol import dtypes as D
from tensorwire.protocol.ops.recurrent import GATES, PACKED

B, H = 3, 4


def _scan_graph(mode: str, T: int, reverse: bool, reads) -> dict:
    """A forward graph as the client records a layer (``T > 1``) or a cell (``T == 1``): ``rnn_scan``, the last
    step's packed row, and slices of what ``reads`` names (``out``: every step's h, ``h``/``c``: the final state,
    ``gate``: a gate column of the last step), each summed into the loss."""
    G, S = GATES[mode] * H, PACKED[mode] * H
    n = 2 if mode == "lstm" else 1
    ext = [[[T, B, G], "float32", 0]] + [[[B, H], "float32", 0]] * n + [[[G, H], "float32", 0], [[G], "float32", 0]]
    nodes = [["rnn_scan", [-(k + 1) for k in range(len(ext))], {"mode": mode, "reverse": reverse}, 0]]
    t = 0 if reverse else T - 1
    if T == 1:
        nodes.append(["reshape", [0], {"shape": [B, S]}, 0])
    else:
        nodes.append(["slice", [0], {"starts": [t, 0, 0], "stops": [t + 1, B, S], "steps": [1, 1, 1]}, 0])
        nodes.append(["reshape", [1], {"shape": [B, S]}, 0])
    last = len(nodes) - 1
    cols = {"h": (0, H), "c": (H, 2 * H), "gate": (2 * H, 3 * H)}
    sums = []
    for r in reads:
        if r == "out":
            nodes.append(["slice", [0], {"starts": [0, 0, 0], "stops": [T, B, H], "steps": [1, 1, 1]}, 0])
        else:
            a, b = cols[r]
            nodes.append(["slice", [last], {"starts": [0, a], "stops": [B, b], "steps": [1, 1]}, 0])
        nodes.append(["mul", [len(nodes) - 1, len(nodes) - 1], None, 0])
        nodes.append(["sum", [len(nodes) - 1], None, 0])
        sums.append(len(nodes) - 1)
    total = sums[0]
    for s in sums[1:]:
        nodes.append(["add", [total, s], None, 0])
        total = len(nodes) - 1
    return {"devs": ["cpu:0"], "ext": ext, "nodes": nodes, "roots": [total],
            "targets": [-(k + 1) for k in range(len(ext))]}


@pytest.mark.parametrize("mode,T,reverse,reads,want", [
    ("lstm", 1, False, ("h", "c"), ["h", "c"]),  # a cell: its new state
    ("lstm", 1, False, ("h",), ["h"]),  # a cell whose c nothing reads
    ("lstm", 3, False, ("out", "h", "c"), ["out", "h", "c"]),  # a layer: output and final state
    ("lstm", 3, True, ("out", "c"), ["out", "c"]),
    ("gru", 3, True, ("out", "h"), ["out", "h"]),
    ("rnn_tanh", 2, False, ("h",), ["h"]),
    ("lstm", 3, False, ("out", "gate"), None),  # a gate column: the packed whole
])
def test_the_scan_gradient_gets_the_parts_its_outputs_got(mode, T, reverse, reads, want):
    bw = build_backward(_scan_graph(mode, T, reverse, reads))
    ops = [n[0] for n in bw["nodes"]]
    (grad,) = [n for n in bw["nodes"] if n[0] == "rnn_scan_grad"]
    assert (grad[2] or {}).get("grads") == want
    if want is not None:  # nothing padded the parts into the packed shape
        assert "pad" not in ops
        assert len(grad[1]) == 1 + len(want) + (2 if mode == "lstm" else 1) + 1


def _scan(mode, reverse, T, rng, ct):
    G = GATES[mode] * H
    gi = rng.randn(T, B, G).astype(ct)
    states = [rng.randn(B, H).astype(ct) for _ in range(2 if mode == "lstm" else 1)]
    w, b = (rng.randn(G, H) * 0.4).astype(ct), rng.randn(G).astype(ct)
    a = {"mode": mode, "reverse": reverse}
    y = KERNELS["rnn_scan"]([gi, *states, w, b], a, None, D.from_numpy(np.dtype(ct)))
    return y, states, w, a


@pytest.mark.parametrize("cells", ["c", "numpy"])
@pytest.mark.parametrize("mode,grads", [
    ("lstm", ("h", "c")), ("lstm", ("out", "h", "c")), ("lstm", ("c",)), ("lstm", ("y", "out", "h", "c")),
    ("gru", ("out", "h")), ("gru", ("y", "h")), ("rnn_tanh", ("out",)), ("rnn_relu", ("h",)),
])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("ct", [np.float32, np.float64])
def test_the_kernel_from_parts_equals_it_from_their_packed_sum(monkeypatch, cells, mode, grads, reverse, ct):
    if cells == "c" and rnn_cells.cells() is None:
        pytest.skip("the CPU cannot compile here: the scans use their numpy cells")
    if cells == "numpy":
        monkeypatch.setattr(recurrent, "_cells", lambda m, B_, H_, c: recurrent._NumpyCells(B_, H_, c))
    rng = np.random.RandomState(7)
    T = 4
    y, states, w, a = _scan(mode, reverse, T, rng, ct)
    shapes = {"y": y.shape, "out": (T, B, H), "h": (B, H), "c": (B, H)}
    parts = [rng.randn(*shapes[g]).astype(ct) for g in grads]
    if "y" in grads:  # the gates' own gradients too
        parts[0][:, :, H:] = rng.randn(T, B, y.shape[2] - H)
    dt = D.from_numpy(np.dtype(ct))
    got = KERNELS["rnn_scan_grad"]([y, *parts, *states, w], {**a, "grads": list(grads)}, None, dt)
    gy = packed_grad(mode, reverse, grads, parts, T, B, H, y.shape[2], ct)  # summed in the kernel's order
    want = KERNELS["rnn_scan_grad"]([y, gy, *states, w], a, None, dt)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mode,grads,reverse", [("lstm", ("out", "h", "c"), False), ("lstm", ("c",), True),
                                                ("gru", ("y", "h"), True)])
def test_the_gradient_from_parts_is_differentiable(session, mode, grads, reverse):
    """Double backward goes through the parts form's decomposition (float64 finite differences)."""
    rng = np.random.default_rng(5)
    T, n = 3, 2 if mode == "lstm" else 1
    G, S = GATES[mode] * H, PACKED[mode] * H
    shapes = {"y": (T, B, S), "out": (T, B, H), "h": (B, H), "c": (B, H)}
    ins = [rng.uniform(0.1, 0.9, (T, B, S))] + [rng.uniform(-1, 1, shapes[g]) for g in grads] + \
        [rng.uniform(-1, 1, (B, H)) for _ in range(n)] + [rng.uniform(-1, 1, (G, H))]
    xs = [tw.tensor(a, dtype=tw.float64, requires_grad=True) for a in ins]
    attrs = {"mode": mode, "reverse": reverse, "grads": list(grads)}
    assert tw.autograd.gradcheck(lambda *v: record(v[0]._s, "rnn_scan_grad", list(v), attrs, v[0]._dev), xs,
                                 fast_mode=True)
