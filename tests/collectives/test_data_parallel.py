"""DataParallel on 2 devices trains exactly like one device with the whole batch."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import tensorwire as tw

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None,
                                reason="mpi4py/mpich not installed (pip install 'tensorwire[mpi]')")


@pytest.fixture(scope="module")
def cluster():
    with tw.LocalCluster(devices=["cpu:0", "cpu:1"]) as c:
        yield c


def _make():
    tw.manual_seed(0)
    return tw.nn.Sequential(tw.nn.Linear(12, 32), tw.nn.Tanh(), tw.nn.Linear(32, 32), tw.nn.ReLU(),
                            tw.nn.Linear(32, 4))


def _data():
    rng = np.random.default_rng(0)
    X = tw.tensor(rng.standard_normal((64, 12)).astype(np.float32))
    Y = tw.tensor(rng.integers(0, 4, 64))
    return X, Y


@pytest.mark.parametrize("opt_name", ["SGD", "Adam"])
def test_twenty_steps_match_single_device(session, opt_name):
    X, Y = _data()
    make_opt = {"SGD": lambda ps: tw.optim.SGD(ps, lr=0.1, momentum=0.9),
                "Adam": lambda ps: tw.optim.Adam(ps, lr=1e-2)}[opt_name]
    single = _make()
    dp = tw.nn.parallel.DataParallel(_make(), devices=["cpu:0", "cpu:1"])
    opt1, opt2 = make_opt(single.parameters()), make_opt(dp.parameters())
    loss_fn = tw.nn.CrossEntropyLoss()
    losses = []
    for _ in range(20):
        pair = []
        for model, opt in ((single, opt1), (dp, opt2)):
            opt.zero_grad()
            loss = loss_fn(model(X), Y)
            loss.backward()
            opt.step()
            pair.append(loss)
        losses.append(pair)
    for a, b in zip(single.parameters(), dp.module.parameters()):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-5, atol=1e-6)
    for a, b in zip(dp.module.parameters(), dp._replicas[1].parameters()):
        assert b.device == "cpu:1"
        np.testing.assert_array_equal(a.numpy(), b.numpy())  # replicas stay identical
    assert losses[-1][0].item() < losses[0][0].item()
    np.testing.assert_allclose(losses[-1][1].item(), losses[-1][0].item(), rtol=1e-5)


def test_state_dict_and_module(session):
    dp = tw.nn.parallel.DataParallel(_make(), devices=["cpu:0", "cpu:1"])
    sd = dp.state_dict()
    assert all(k.startswith("module.") for k in sd)
    assert dp.module is dp._replicas[0]
    n_single = sum(1 for _ in _make().parameters())
    assert len(list(dp.parameters())) == 2 * n_single
    out = dp(tw.randn(5, 12))  # fewer samples than 2 x per-device: still works, gathered on cpu:0
    assert out.shape == (5, 4) and out.device == "cpu:0"
