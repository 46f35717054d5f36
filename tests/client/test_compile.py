"""``tw.compile``: a compiled function's replays give exactly what eager calls give (training steps with Adam,
dropout under a fixed seed, several devices, DataParallel), each replay is one message, data-dependent Python falls
back to eager with one warning naming the line, a new signature records again, and errors inside a replayed graph
name the user's line.

One cluster for the module (cpu:0 and cpu:1, collectives where MPI is installed); models and step counts are small
(each eager/compiled pair runs in ~1-3 s here)."""

from __future__ import annotations

import importlib.util
import warnings

import numpy as np
import pytest

import tensorwire as tw
from tensorwire import channels as channels_mod
from tensorwire import jit, nn, optim
from tensorwire import session as session_mod
from tensorwire.protocol.wire import unpack_header

from ._ref import line_of

HERE = __file__
STEPS = 8  # calls 1-3 record (the first step makes the optimizer state), 4-8 replay


def _both(make, steps: int = STEPS, seed: int = 1):
    """Run ``make()``'s step eagerly and compiled from the same initial state; returns both runs' history and the
    compiled function. ``make`` returns ``(step, snapshot)``: ``snapshot()`` lists the arrays to compare."""
    runs = []
    compiled = None
    for comp in (False, True):
        step, snapshot = make()
        if comp:
            step = compiled = tw.compile(step)
        tw.manual_seed(seed)
        hist = []
        for _ in range(steps):
            out = step()
            hist.append([out.detach().numpy().copy()] + [a.copy() for a in snapshot()])
        runs.append(hist)
    assert compiled.stats["replays"] >= steps - 3, compiled.stats
    return runs, compiled


def _assert_same(runs):
    for k, (a, b) in enumerate(zip(*runs)):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y, err_msg=f"call {k}")


def _trainer(build, x, y, loss_fn=nn.functional.cross_entropy):
    def make():
        tw.manual_seed(0)
        model = build()
        opt = optim.Adam(model.parameters(), lr=1e-2)

        def step():
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            return loss

        def snapshot():
            ps = list(model.parameters())
            st = opt.state[ps[0]]
            return [p.detach().numpy() for p in ps] + [
                ps[0].grad.numpy(),
                st["exp_avg"].numpy(),
                st["exp_avg_sq"].numpy(),
                np.asarray(st["step"]),
            ]

        return step, snapshot

    return make


def test_mlp_training_with_adam_replays_exactly_as_eager(session):
    rng = np.random.default_rng(0)
    x = tw.tensor(rng.standard_normal((32, 8)).astype(np.float32))
    y = tw.tensor(rng.integers(0, 3, 32))
    runs, _ = _both(_trainer(lambda: nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)), x, y))
    _assert_same(runs)


def test_cnn_training_with_adam_replays_exactly_as_eager(session):
    rng = np.random.default_rng(1)
    x = tw.tensor(rng.random((8, 1, 8, 8), dtype=np.float32))
    y = tw.tensor(rng.integers(0, 4, 8))

    def build():
        return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64, 4))

    runs, _ = _both(_trainer(build, x, y), steps=6)
    _assert_same(runs)


def test_transformer_layer_with_dropout_draws_fresh_masks_as_eager(session):
    rng = np.random.default_rng(2)
    x = tw.tensor(rng.standard_normal((4, 6, 16)).astype(np.float32))
    target = tw.tensor(rng.standard_normal((4, 6, 16)).astype(np.float32))

    def build():
        return nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.2, batch_first=True)

    runs, _ = _both(_trainer(build, x, target, nn.functional.mse_loss), steps=6)
    _assert_same(runs)
    losses = [h[0] for h in runs[1]]
    assert len({float(v) for v in losses}) == len(losses)


def test_random_ops_draw_fresh_numbers_every_replay(session):
    x = tw.zeros(5)

    def make():
        def step():
            return x + tw.rand(5)

        return step, list

    runs, _ = _both(make, steps=6, seed=7)
    _assert_same(runs)
    assert len({v[0].tobytes() for v in runs[1]}) == 6


def test_a_replay_goes_as_one_message_with_the_read_that_follows_it(session, monkeypatch):
    rng = np.random.default_rng(3)
    x = tw.tensor(rng.standard_normal((16, 4)).astype(np.float32))
    y = tw.tensor(rng.integers(0, 2, 16))
    step, _ = _trainer(lambda: nn.Linear(4, 2), x, y)()
    step = tw.compile(step)
    for _ in range(4):
        step().item()
    assert step.stats["replays"] >= 1
    sent = []
    real_send = session_mod.send_parts

    def send(sock, parts, **kw):
        h = unpack_header(parts[0])
        if h["t"] not in ("batch", "run"):
            return real_send(sock, parts, **kw)
        assert "outs" not in h  # a replay numbers its outputs from one id (protocol.batch_ids)
        sent.append(("fetch" if h.get("fetch") or h.get("sync") else "rest", h.get("plan")))
        return real_send(sock, parts, **kw)

    monkeypatch.setattr(session_mod, "send_parts", send)
    monkeypatch.setattr(channels_mod, "send_parts", send)  # (the replays go on the worker's direct channel)
    graph = next(iter(step._cache.values())).graph
    for _ in range(3):
        loss = step()
        assert session._pending == []  # nothing recorded: the replay waits to go out with the next message
        loss.item()
    # each step: the whole graph, one plan, carrying the fetch (the worker answers it before the backward pass and
    # Adam run: see tests/unit/backends/test_executor.py)
    assert sent == [("fetch", graph.whole.plan)] * 3
    sent.clear()
    for _ in range(3):
        step()
    session.synchronize()
    assert [kind for kind, _ in sent] == ["rest"] * 2 + ["fetch"]  # one message a step (the last with the sync)


def test_a_failure_after_the_fetched_value_surfaces_at_the_next_read_with_the_users_line(session):
    @tw.compile
    def f(x, i):
        c = tw.tensor([1.0, 2.0, 3.0])  # an upload inside the graph, read by both parts
        total = (x * c).sum()
        picked = x.index_select(0, i) + c  # PICK AFTER
        return total, picked

    x = tw.tensor(np.arange(3.0))
    for _ in range(4):
        t, p = f(x, tw.tensor([2]))
        assert t.item() == 8.0
        np.testing.assert_array_equal(p.numpy(), [3.0, 4.0, 5.0])
    assert f.stats["replays"] >= 1
    before = tw.memory_stats()["devices"]["cpu:0"]["buffers"]
    t, p = f(x, tw.tensor([7]))
    assert t.item() == 8.0  # answered once made; the node after it fails on the device
    with pytest.raises(tw.TensorwireError, match="out of bounds") as e:
        p.numpy()
    assert f"test_compile.py:{line_of(HERE, '# PICK AFTER')}" in str(e.value)
    for _ in range(20):  # the replays release what they made: nothing accumulates
        t, p = f(x * 2, tw.tensor([0]))
        assert t.item() == 16.0
        np.testing.assert_array_equal(p.numpy(), [1.0, 2.0, 3.0])
    del t, p
    assert tw.memory_stats()["devices"]["cpu:0"]["buffers"] <= before + 2


def test_data_dependent_branch_runs_eagerly_with_one_warning(session):
    def f(x):
        y = x * 2
        if y.sum() > 0:  # BRANCH ON A TENSOR
            return y + 1
        return y - 1

    g = tw.compile(f)
    inputs = [tw.tensor(np.array([1.0, -3.0]) * s) for s in (1, -1, 1, -1, 1)]
    with pytest.warns(jit.CompileWarning, match=rf"test_compile.py:{line_of(HERE, '# BRANCH ON A TENSOR')}"):
        got = [g(v).numpy() for v in inputs[:1]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # only once
        got += [g(v).numpy() for v in inputs[1:]]
    assert g.eager and g.stats["replays"] == 0
    for v, r in zip(inputs, got):
        np.testing.assert_array_equal(r, f(v).numpy())


def test_item_and_print_inside_fall_back(session, capsys):
    def with_item(x):
        return x * x.sum().item()  # ITEM INSIDE

    def with_print(x):
        print(x)  # PRINT INSIDE
        return x + 1

    for fn, marker in ((with_item, "# ITEM" + " INSIDE"), (with_print, "# PRINT" + " INSIDE")):
        g = tw.compile(fn)
        with pytest.warns(jit.CompileWarning, match=f":{line_of(HERE, marker)}"):
            g(tw.ones(3))
        np.testing.assert_array_equal(g(tw.ones(3)).numpy(), fn(tw.ones(3)).numpy())
        assert g.eager


def test_fullgraph_raises_instead_of_falling_back(session):
    @tw.compile(fullgraph=True)
    def f(x):
        return x + x.max().item()

    with pytest.raises(tw.CompileError, match="reads a tensor's value"):
        f(tw.ones(2))


def test_a_new_shape_or_scalar_records_again_and_the_cache_is_bounded(session):
    calls = []

    @tw.compile
    def f(x, k):
        calls.append(1)
        return (x * k).sum(0)

    for n in (2, 3):
        for _ in range(4):
            np.testing.assert_array_equal(f(tw.ones(n, 2), 3.0).numpy(), [3.0 * n] * 2)
    assert f.stats == {"traces": 6, "replays": 2} and len(calls) == 6  # 3 recorded calls a shape, then replays
    for _ in range(4):
        np.testing.assert_array_equal(f(tw.ones(2, 2), 5.0).numpy(), [10.0, 10.0])  # a new scalar: a new graph
    for n in range(4, 4 + jit.CACHE_SIZE):
        f(tw.ones(n, 2), 1.0)
    assert len(f._cache) == jit.CACHE_SIZE


def test_a_call_of_tensors_alone_is_keyed_as_the_general_walk_keys_it(session):
    """``signature``'s quick path (positional tensors only) makes the key the walk over ``(args, kwargs)`` makes:
    the same tensor twice, two tensors, none; a Parameter (a subclass) and keywords take the walk itself."""
    from tensorwire.jit.pytree import flatten
    from tensorwire.jit.signature import signature

    x, y = tw.ones(2, 3), tw.zeros(4)
    for args in ((x,), (x, y), (x, x), (y, x, y), ()):
        key, leaves, tensors = signature(args, {})
        walked: list = []
        assert key[0] == flatten((args, {}), walked) and leaves == walked == list(tensors), args
    assert signature((x, y), {})[0] != signature((y, x), {})[0]
    assert signature((x,), {})[0] != signature((x, x), {})[0]
    p = nn.Parameter(tw.ones(2, 3))
    assert signature((p,), {})[2] == [p] and signature((x,), {"k": 1})[1] == [x, 1]


def test_an_error_inside_a_replayed_graph_names_the_users_line(session):
    @tw.compile
    def pick(x, i):
        return x.index_select(0, i) * 2  # PICK ROWS

    x = tw.tensor(np.arange(12.0).reshape(4, 3))
    for _ in range(4):
        pick(x, tw.tensor([0, 3])).numpy()
    assert pick.stats["replays"] >= 1
    bad = pick(x, tw.tensor([1, 9]))
    with pytest.raises(tw.TensorwireError, match="index 9 is out of bounds") as e:
        bad.numpy()
    assert f"test_compile.py:{line_of(HERE, '# PICK ROWS')}" in str(e.value)
    np.testing.assert_array_equal(pick(x, tw.tensor([2, 1])).numpy(), np.arange(12.0).reshape(4, 3)[[2, 1]] * 2)


def test_training_flag_change_records_again(session):
    tw.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    f = tw.compile(lambda v: model(v))
    x = tw.ones(2, 4)
    with tw.no_grad():
        for _ in range(4):
            f(x)
        model.eval()
        np.testing.assert_array_equal(f(x).numpy(), model(x).numpy())  # no dropout: the graph recorded in train mode
        # would differ


def test_several_devices_in_one_graph(session):
    w = tw.tensor(np.arange(6.0).reshape(3, 2), device="cpu:1")

    def f(x):
        h = (x.to("cpu:1") @ w).relu()
        return h.to("cpu:0").sum(1)

    g = tw.compile(f)
    for k in range(6):
        x = tw.tensor(np.full((2, 3), k - 2.0))
        np.testing.assert_array_equal(g(x).numpy(), f(x).numpy())
    assert g.stats["replays"] >= 3


def test_compile_arguments_as_torch(session):
    def f(x):
        return x + 1

    assert tw.compile(f, disable=True) is f
    g = tw.compile(mode="reduce-overhead", fullgraph=False, dynamic=False, backend="inductor")(f)
    np.testing.assert_array_equal(g(tw.ones(2)).numpy(), [2.0, 2.0])
    with pytest.raises(tw.CompileError, match="Unrecognized mode"):
        tw.compile(f, mode="fastest")
    with pytest.raises(tw.CompileError, match="mode or options"):
        tw.compile(f, mode="default", options={})


@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None, reason="mpi4py/mpich not installed")
def test_data_parallel_step_with_collectives_replays_as_eager(session):
    rng = np.random.default_rng(4)
    x = tw.tensor(rng.standard_normal((16, 6)).astype(np.float32))
    y = tw.tensor(rng.integers(0, 3, 16))

    def build():
        net = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
        return nn.parallel.DataParallel(net, devices=["cpu:0", "cpu:1"])

    runs, _ = _both(_trainer(build, x, y), steps=6)
    _assert_same(runs)
