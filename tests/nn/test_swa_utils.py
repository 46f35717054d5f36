"""``tw.optim.swa_utils`` against torch's, from the same initial weights: an SWA run (SGD, ``SWALR``, an
``AveragedModel`` updated every step after a start, then ``update_bn`` over a DataLoader), EMA runs (``multi_avg_fn``
and ``avg_fn``, ``use_buffers=True``), ``SWALR``'s schedules and state, and the errors."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest

import tensorwire as tw
from tensorwire.optim import swa_utils

from ..programs._harness import tensorwire_as_torch
from ._util import close, copy_weights, needs_torch, torch

pytestmark = pytest.mark.usefixtures("session")

_RNG = np.random.default_rng(3)
_X = _RNG.standard_normal((16, 3)).astype(np.float32)
_Y = _RNG.standard_normal((16, 1)).astype(np.float32)


def _model(lib):
    nn = lib.nn
    return nn.Sequential(nn.Linear(3, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))


def _models():
    """(torch's model, tensorwire's with torch's initial parameters and buffers)."""
    torch.manual_seed(0)
    ref = _model(torch)
    ours = _model(tw)
    copy_weights(ours, ref)
    return ref, ours


def _train_step(lib, model, opt, x, y) -> None:
    opt.zero_grad()
    lib.nn.functional.mse_loss(model(x), y).backward()
    opt.step()


def _swa_run(lib, model, strategy: str, steps: int = 8, swa_start: int = 3):
    """torch's SWA recipe: SGD, ``SWALR`` and an ``AveragedModel`` updated every step from ``swa_start``, then
    ``update_bn`` over a DataLoader (the averaged model in eval mode, which it keeps); (averaged model, lrs)."""
    su = lib.optim.swa_utils
    opt = lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    swa_model = su.AveragedModel(model)
    sched = su.SWALR(opt, swa_lr=0.05, anneal_epochs=3, anneal_strategy=strategy)
    x, y = lib.tensor(_X), lib.tensor(_Y)
    lrs = []
    for i in range(steps):
        _train_step(lib, model, opt, x, y)
        if i >= swa_start:
            swa_model.update_parameters(model)
            sched.step()
        lrs.append(sched.get_last_lr())
    swa_model.eval()
    loader = lib.utils.data.DataLoader(lib.utils.data.TensorDataset(x, y), batch_size=4)
    su.update_bn(loader, swa_model)
    return swa_model, lrs


def _same_state(ours, ref) -> None:
    """The same names, values (float32 tolerances; integers exactly) and dtypes in the two state dicts."""
    sd, tsd = ours.state_dict(), ref.state_dict()
    assert list(sd) == list(tsd)
    for k, v in tsd.items():
        assert str(sd[k].dtype).removeprefix("tensorwire.") == str(v.dtype).removeprefix("torch."), k
        if v.is_floating_point():
            close(sd[k], v, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(sd[k].numpy(), v.numpy(), err_msg=k)


@needs_torch
@pytest.mark.parametrize("strategy", ["cos", "linear"])
@pytest.mark.parametrize("foreach", [False, True], ids=["per_tensor", "foreach"])
def test_swa_run_and_update_bn_match_torch(strategy, foreach, monkeypatch):
    """Torch on CPU averages one tensor at a time; ``foreach``: tensorwire takes the ``_foreach_lerp_`` path that
    torch takes on CUDA (the device types where it has foreach kernels), which must agree."""
    made = []
    if foreach:
        monkeypatch.setattr(swa_utils, "_FOREACH_DEVICE_TYPES", ("cpu",))
        make = swa_utils.get_swa_multi_avg_fn
        monkeypatch.setattr(swa_utils, "get_swa_multi_avg_fn", lambda: made.append(1) or make())
    ref, ours = _models()
    ref_swa, ref_lrs = _swa_run(torch, ref, strategy)
    swa, lrs = _swa_run(tw, ours, strategy)
    assert len(made) == (4 if foreach else 0)  # (one a device and dtype, each update after the first)
    assert np.asarray(lrs) == pytest.approx(np.asarray(ref_lrs), rel=1e-12)
    assert int(swa.n_averaged) == int(ref_swa.n_averaged) == 5
    _same_state(swa, ref_swa)  # (parameters, n_averaged, and the BatchNorm statistics update_bn recomputed)
    _same_state(ours, ref)
    bn, ref_bn = swa.module[1], ref_swa.module[1]
    assert not swa.training and bn.momentum == ref_bn.momentum == 0.1
    assert int(bn.num_batches_tracked) == 4
    close(swa(tw.tensor(_X)), ref_swa(torch.tensor(_X)), rtol=1e-5, atol=1e-5)


def _ema_run(lib, model, make_fns, steps: int = 6):
    """An ``AveragedModel(use_buffers=True)`` (the averaging functions ``make_fns(swa_utils)`` gives) updated after
    every SGD step of ``model`` in training mode."""
    su = lib.optim.swa_utils
    opt = lib.optim.SGD(model.parameters(), lr=0.05, momentum=0.5)
    ema = su.AveragedModel(model, use_buffers=True, **make_fns(su))
    x, y = lib.tensor(_X), lib.tensor(_Y)
    for _ in range(steps):
        _train_step(lib, model, opt, x, y)
        ema.update_parameters(model)
    return ema


@needs_torch
@pytest.mark.parametrize("make_fns", [
    lambda su: {"multi_avg_fn": su.get_ema_multi_avg_fn(0.99)},
    lambda su: {"avg_fn": su.get_ema_avg_fn(0.99)},
    lambda su: {"avg_fn": su.get_swa_avg_fn()},
    lambda su: {},
], ids=["ema_multi", "ema", "swa", "default"])
def test_averaged_buffers_match_torch(make_fns):
    """Parameters and buffers (the BatchNorm statistics; ``num_batches_tracked``, an integer, averaged and
    truncated as torch's) of the averaged model, and ``n_averaged``. (Not ``get_swa_multi_avg_fn()``: its
    ``_foreach_addcdiv_`` refuses the integer buffer, torch's too: :func:`test_swa_multi_avg_fn_is_torchs`.)"""
    ref, ours = _models()
    ref_ema = _ema_run(torch, ref, make_fns)
    ema = _ema_run(tw, ours, make_fns)
    assert int(ema.n_averaged) == int(ref_ema.n_averaged) == 6
    _same_state(ema, ref_ema)
    _same_state(ours, ref)


@needs_torch
def test_swa_multi_avg_fn_is_torchs():
    """Floats: the running average by ``_foreach_lerp_`` (the count a tensor or a number); integers: torch's
    ``_foreach_addcdiv_`` (count a tensor) and ``_foreach_add_`` (a number, a float ``alpha``) refuse them."""
    errors, outs = [], []
    for lib in (torch, tw):
        fn = lib.optim.swa_utils.get_swa_multi_avg_fn()
        avg, cur = [lib.tensor([1.0, 2.0]), lib.tensor([3.0])], [lib.tensor([4.0, 8.0]), lib.tensor([0.0])]
        fn(avg, cur, lib.tensor(2))
        fn(avg, cur, 3)
        outs.append([t.numpy() for t in avg])
        for count in (lib.tensor(2), 2):
            # (tensorwire's in-place integer ops refuse the float result with its DTypeError, a TypeError, where
            # torch's refuse integer addcdiv and a float alpha with RuntimeErrors of their own)
            with pytest.raises((RuntimeError, TypeError)) as info:
                fn([lib.tensor([1])], [lib.tensor([4])], count)
            errors.append(info.value)
    for a, b in zip(*outs):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    assert all(isinstance(e, RuntimeError) for e in errors[:2])


@needs_torch
def test_update_parameters_without_buffers_copies_them_and_detach_updates_in_place():
    """``use_buffers=False``: the buffers follow the model's; the averaged parameters stay the same objects (the
    ``p.detach().copy_`` updates reach them)."""
    ref, ours = _models()
    for lib, model in ((torch, ref), (tw, ours)):
        ema = lib.optim.swa_utils.AveragedModel(model, avg_fn=lib.optim.swa_utils.get_ema_avg_fn(0.9))
        params = list(ema.parameters())
        model.train()
        x = lib.tensor(_X)
        for _ in range(3):
            with lib.no_grad():
                model(x)
                for p in model.parameters():
                    p.mul_(1.5)
            ema.update_parameters(model)
        assert [id(p) for p in ema.parameters()] == [id(p) for p in params]
        assert all(p.requires_grad for p in params)
        if lib is torch:
            ref_ema = ema
    _same_state(ema, ref_ema)
    assert int(ema.module[1].num_batches_tracked) == 3


@needs_torch
@pytest.mark.parametrize("kw", [
    {"swa_lr": 0.05},
    {"swa_lr": [0.05, 0.2], "anneal_epochs": 4, "anneal_strategy": "linear"},
    {"swa_lr": 0.5, "anneal_epochs": 0},
    {"swa_lr": 0.01, "anneal_epochs": 1, "anneal_strategy": "linear"},
], ids=["cos", "groups_linear", "no_anneal", "one"])
def test_swalr_matches_torch(kw):
    scheds = []
    for lib in (torch, tw):
        a, b = lib.nn.Parameter(lib.ones(2)), lib.nn.Parameter(lib.ones(1))
        opt = lib.optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.3}], lr=0.1)
        scheds.append(lib.optim.swa_utils.SWALR(opt, **kw))
    ref, ours = scheds
    for _ in range(12):
        assert ours.get_last_lr() == pytest.approx(ref.get_last_lr(), rel=1e-12)
        assert [g["swa_lr"] for g in ours.optimizer.param_groups] == [g["swa_lr"]
                                                                    for g in ref.optimizer.param_groups]
        ours.optimizer.step()
        ref.optimizer.step()
        ours.step()
        ref.step()
    sd = ours.state_dict()
    assert set(sd) == set(ref.state_dict())
    assert "optimizer" not in sd and "anneal_func" not in sd
    with pytest.warns(UserWarning, match="get_last_lr"):
        ours.get_lr()


def test_swalr_state_dict_roundtrip():
    p = tw.nn.Parameter(tw.ones(1))
    s = swa_utils.SWALR(tw.optim.SGD([p], lr=1.0), swa_lr=0.1, anneal_epochs=5, anneal_strategy="linear")
    for _ in range(2):
        s.step()
    sd = s.state_dict()
    q = tw.nn.Parameter(tw.ones(1))
    s2 = swa_utils.SWALR(tw.optim.SGD([q], lr=1.0), swa_lr=0.1)  # (cos, 10 epochs: replaced by the state)
    s2.load_state_dict(sd)
    s2.optimizer.param_groups[0]["lr"] = s.optimizer.param_groups[0]["lr"]
    assert s2.anneal_func is s2._linear_anneal and s2.anneal_epochs == 5
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(4):
            s.step()
            s2.step()
            assert s2.get_last_lr() == s.get_last_lr()
    assert s.get_last_lr() == pytest.approx([0.1])


@needs_torch
@pytest.mark.parametrize("call", [
    lambda su, m, o: su.get_ema_multi_avg_fn(1.5),
    lambda su, m, o: su.get_ema_avg_fn(-0.1),
    lambda su, m, o: su.AveragedModel(m, avg_fn=su.get_swa_avg_fn(), multi_avg_fn=su.get_swa_multi_avg_fn()),
    lambda su, m, o: su.SWALR(o, swa_lr=0.1, anneal_strategy="exp"),
    lambda su, m, o: su.SWALR(o, swa_lr=0.1, anneal_epochs=-1),
    lambda su, m, o: su.SWALR(o, swa_lr=0.1, anneal_epochs=2.0),
    lambda su, m, o: su.SWALR(o, swa_lr=[0.1, 0.2]),
], ids=["multi_decay", "decay", "both_fns", "strategy", "negative_epochs", "float_epochs", "lrs_length"])
def test_errors_match_torch(call):
    errors = []
    for lib in (torch, tw):
        m = lib.nn.Linear(2, 1)
        with pytest.raises(Exception) as info:  # noqa: PT011 - compared with torch's below
            call(lib.optim.swa_utils, m, lib.optim.SGD(m.parameters(), lr=0.1))
        errors.append(info.value)
    ref, ours = errors
    assert type(ours) is type(ref) and str(ours) == str(ref)


def test_update_bn_without_batchnorm_and_with_device():
    """No BatchNorm: nothing runs (the loader is not read). Batches as tuples, moved to ``device``; the layers'
    momenta and the model's mode come back."""
    model = tw.nn.Linear(2, 2)
    swa_utils.update_bn(iter(()), model)
    swa_utils.update_bn(_Unread(), model)
    bn = tw.nn.BatchNorm1d(3, momentum=0.3)
    seq = tw.nn.Sequential(bn).eval()
    data = [(tw.tensor(_X[:4]), 0), (tw.tensor(_X[4:12]), 1)]
    swa_utils.update_bn(data, seq, device=tw.tensor(0.0).device)
    assert not seq.training and bn.momentum == 0.3 and int(bn.num_batches_tracked) == 2
    # (momentum None: the cumulative average over batches, whatever their sizes)
    means = (_X[:4].mean(0) + _X[4:12].mean(0)) / 2
    close(bn.running_mean, means, rtol=1e-5, atol=1e-6)


class _Unread:
    def __iter__(self):
        raise AssertionError("update_bn read the loader of a model without BatchNorm")


def test_swa_utils_imports_as_torchs():
    assert tw.optim.swa_utils is swa_utils and "swa_utils" in tw.optim.__all__
    with tensorwire_as_torch():
        import torch.optim.swa_utils as su  # noqa: PLC0415 - the aliased import is the point
        from torch.optim.swa_utils import SWALR, AveragedModel, update_bn  # noqa: PLC0415

        assert su is swa_utils and sys.modules["torch.optim.swa_utils"] is swa_utils
        assert (AveragedModel, SWALR, update_bn) == (swa_utils.AveragedModel, swa_utils.SWALR, swa_utils.update_bn)
    assert set(swa_utils.__all__) == {"AveragedModel", "update_bn", "SWALR", "get_ema_multi_avg_fn",
                                      "get_swa_multi_avg_fn", "get_ema_avg_fn", "get_swa_avg_fn"}


def test_averaged_model_on_another_device():
    """``device=``: the averaged copy (and ``n_averaged``) live there; the model's values are moved to it."""
    model = _model(tw)
    here = swa_utils.AveragedModel(model, use_buffers=True)
    there = swa_utils.AveragedModel(model, device="cpu:1", use_buffers=True)
    assert {str(t.device) for t in there.state_dict().values()} == {"cpu:1"}
    assert "cpu:1" not in {str(t.device) for t in model.state_dict().values()}
    model.train()
    for _ in range(3):
        with tw.no_grad():
            model(tw.tensor(_X))
            for p in model.parameters():
                p.mul_(0.5)
        here.update_parameters(model)
        there.update_parameters(model)
    for (k, a), b in zip(here.state_dict().items(), there.state_dict().values()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=k)
