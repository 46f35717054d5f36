"""DataParallel on 2 devices trains exactly like one device with the whole batch (on the run's shared cluster:
cpu:0, cpu:1 and the collectives service, tests/conftest.py)."""

from __future__ import annotations

import contextlib
import importlib.util

import numpy as np
import pytest

import tensorwire as tw

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None,
                                reason="mpi4py/mpich not installed (pip install 'tensorwire[mpi]')")


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
        np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), rtol=1e-5, atol=1e-6)
    for a, b in zip(dp.module.parameters(), dp._replicas[1].parameters()):
        assert b.device == "cpu:1"
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())  # replicas stay identical
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


def _grads(model):
    return [p.grad.numpy() for p in model.parameters()]


@pytest.mark.parametrize("accumulate", ["no_sync", "plain"])
def test_gradient_accumulation_matches_single_device(session, accumulate):
    """Two micro-batches accumulated before a step (inside ``no_sync`` or not): the reduced gradients equal one
    device's accumulated gradients; without no_sync the already-reduced first part must not count per replica."""
    X, Y = _data()
    single = _make()
    ddp = tw.nn.parallel.DistributedDataParallel(_make())
    loss_fn = tw.nn.CrossEntropyLoss()
    for lo, hi in ((0, 32), (32, 64)):
        loss_fn(single(X[lo:hi]), Y[lo:hi]).backward()
    ctx = ddp.no_sync() if accumulate == "no_sync" else contextlib.nullcontext()
    with ctx:
        loss_fn(ddp(X[:32]), Y[:32]).backward()
    loss_fn(ddp(X[32:]), Y[32:]).backward()
    for r in ddp._replicas:
        for a, b in zip(_grads(single), _grads(r)):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_ddp_with_process_group_and_distributed_sampler(session):
    """A DDP program's idioms (init_process_group, DistributedSampler + set_epoch, DDP(model, device_ids=[rank]),
    destroy_process_group) run over the cluster's two devices and train exactly like one device."""
    import tensorwire.distributed as dist
    from tensorwire.utils.data import DataLoader, DistributedSampler, TensorDataset

    with pytest.raises(ValueError, match="not been initialized"):
        dist.get_world_size()
    with pytest.raises(tw.TensorwireError, match="launch the program once"):
        dist.init_process_group("nccl", world_size=2, rank=1)
    dist.init_process_group(backend="nccl")
    try:
        assert dist.is_initialized() and dist.get_rank() == 0 and dist.get_world_size() == 1
        assert dist.get_backend() == "nccl"
        X, Y = _data()
        ds = TensorDataset(X, Y)
        sampler = DistributedSampler(ds, shuffle=True, seed=3)
        single = _make()
        ddp = tw.nn.parallel.DistributedDataParallel(_make().to("cpu:0"), device_ids=[dist.get_rank()])
        assert ddp.devices == ["cpu:0", "cpu:1"]
        opt1 = tw.optim.SGD(single.parameters(), lr=0.1, momentum=0.9)
        opt2 = tw.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
        loss_fn = tw.nn.CrossEntropyLoss()
        for epoch in range(2):
            sampler.set_epoch(epoch)
            for xb, yb in DataLoader(ds, batch_size=16, sampler=sampler):
                for model, opt in ((single, opt1), (ddp, opt2)):
                    opt.zero_grad()
                    loss = loss_fn(model(xb), yb)
                    loss.backward()
                    t = loss.detach()
                    dist.all_reduce(t, op=dist.ReduceOp.SUM)  # torch's one-tensor form: a group of one process
                    opt.step()
        for a, b in zip(single.parameters(), ddp.module.parameters()):
            np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), rtol=1e-5, atol=1e-6)
        assert all(k.startswith("module.") for k in ddp.state_dict())
        assert len(list(sampler)) == 64 and sorted(sampler) == list(range(64))
        dist.barrier()
    finally:
        dist.destroy_process_group()
    assert not dist.is_initialized()


def test_torchs_spelling_names_the_same_data_parallel(session):
    """``tw.nn.DataParallel(module, device_ids=[0, 1])``: torch's name and arguments (ints: the indices of the
    default device's type), torch's repr."""
    dp = tw.nn.DataParallel(tw.nn.Linear(3, 2), device_ids=[0, 1], output_device=1)
    assert tw.nn.DataParallel is tw.nn.parallel.DataParallel
    assert dp.devices == ["cpu:0", "cpu:1"] and dp.output_device == "cpu:1"
    assert repr(dp) == "DataParallel(\n  (module): Linear(in_features=3, out_features=2, bias=True)\n)"
    assert tuple(dp(tw.ones(4, 3)).shape) == (4, 2)
