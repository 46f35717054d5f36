"""``SequentialLR`` against torch's: a checkpoint of the optimizer and the scheduler (its schedulers' states inside)
resumes the schedule where it was, and the constructor checks torch's arguments as torch does."""

from __future__ import annotations

import warnings

import pytest

import tensorwire as tw

pytestmark = pytest.mark.usefixtures("session")

TORCH_WHY = "PyTorch is the reference here (pip install torch==2.13.0)"


def _build(lib, p):
    L = lib.optim.lr_scheduler
    opt = lib.optim.SGD([p], lr=0.1, momentum=0.9)
    warm = L.LinearLR(opt, start_factor=0.1, total_iters=4)
    decay = L.CosineAnnealingLR(opt, T_max=5, eta_min=0.001)
    after = L.ExponentialLR(opt, gamma=0.8)
    return opt, L.SequentialLR(opt, [warm, decay, after], milestones=[4, 8])


def _steps(opt, sched, n: int) -> list[float]:
    lrs = []
    for _ in range(n):
        opt.step()
        sched.step()
        lrs.append(sched.get_last_lr()[0])
    return lrs


def _run(lib, resume_at: int | None, tmp_path=None) -> list[float]:
    p = lib.nn.Parameter(lib.zeros(2))
    opt, sched = _build(lib, p)
    if resume_at is None:
        return _steps(opt, sched, 11)
    lrs = _steps(opt, sched, resume_at)
    ckpt = {"opt": opt.state_dict(), "sched": sched.state_dict()}
    if tmp_path is not None:  # (through a checkpoint file: tw.save's tree of plain values)
        tw.save(ckpt, tmp_path / "ckpt.pt")
        ckpt = tw.load(tmp_path / "ckpt.pt")
    opt, sched = _build(lib, p)  # a new process: everything rebuilt, then the state loaded
    opt.load_state_dict(ckpt["opt"])
    sched.load_state_dict(ckpt["sched"])
    return lrs + _steps(opt, sched, 11 - resume_at)


def test_sequential_lr_resumes_from_a_checkpoint_as_torch(tmp_path):
    torch = pytest.importorskip("torch", reason=TORCH_WHY)
    ref = _run(torch, None)
    assert _run(torch, 5) == pytest.approx(ref, rel=1e-12)  # (what torch's own resume gives)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (the switch at a milestone no longer warns that step(epoch) is deprecated)
        mine = _run(tw, None)
        resumed = _run(tw, 5)
        through_file = _run(tw, 5, tmp_path)
    assert mine == pytest.approx(ref, rel=1e-12)
    assert resumed == pytest.approx(ref, rel=1e-12)
    assert through_file == pytest.approx(ref, rel=1e-12)


def test_sequential_lr_state_dict_holds_its_schedulers_states():
    torch = pytest.importorskip("torch", reason=TORCH_WHY)
    for lib in (torch, tw):
        _, sched = _build(lib, lib.nn.Parameter(lib.zeros(2)))
        state = sched.state_dict()
        assert "optimizer" not in state and len(state["_schedulers"]) == 3
        assert all(isinstance(s, dict) and "last_epoch" in s for s in state["_schedulers"])
        sched.load_state_dict(state)
        assert "_schedulers" in state  # (the caller's dict is left as it was)


def test_sequential_lr_argument_checks_as_torch():
    torch = pytest.importorskip("torch", reason=TORCH_WHY)
    for lib in (torch, tw):
        L = lib.optim.lr_scheduler
        opt = lib.optim.SGD([lib.nn.Parameter(lib.zeros(2))], lr=0.1)
        other = lib.optim.SGD([lib.nn.Parameter(lib.zeros(2))], lr=0.1)
        a, b = L.ExponentialLR(opt, gamma=0.9), L.StepLR(opt, step_size=2)
        with pytest.raises(ValueError, match="expects number of schedulers provided to be one more"):
            L.SequentialLR(opt, [a, b], milestones=[2, 4])
        with pytest.raises(ValueError, match="expects number of schedulers provided to be one more"):
            L.SequentialLR(opt, [a, b], milestones=[])
        with pytest.raises(ValueError, match="expects at least one scheduler"):
            L.SequentialLR(opt, [], milestones=[])
        with pytest.raises(ValueError, match="does not support `ReduceLROnPlateau`"):
            L.SequentialLR(opt, [a, L.ReduceLROnPlateau(opt)], milestones=[2])
        with pytest.raises(ValueError, match="expects all schedulers to belong to the same optimizer"):
            L.SequentialLR(opt, [a, L.ExponentialLR(other, gamma=0.5)], milestones=[2])
        with pytest.raises(TypeError, match="should have `optimizer` as its attribute"):
            L.SequentialLR(opt, [a, object()], milestones=[2])
