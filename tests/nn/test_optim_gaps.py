"""``Rprop`` and ``ASGD`` against torch's (the same parameters and gradients for several steps: parameters and state
equal, float64 exactly and float32 to rounding), and the schedulers ``PolynomialLR``, ``CosineAnnealingWarmRestarts``
(also stepped with fractional epochs), ``CyclicLR`` (its three modes, momentum and Adam's beta1 cycled) and
``ChainedScheduler`` against torch's learning rates step by step, with their ``state_dict`` round trips.

torch is the reference (imported through a fixture: it is optional)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tensorwire as tw

pytestmark = pytest.mark.usefixtures("session")


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch", reason="PyTorch is the reference here (pip install torch==2.13.0)")


OPTIMIZERS = [
    ("Rprop", {}), ("Rprop", dict(lr=0.05, etas=(0.3, 1.5), step_sizes=(1e-3, 0.2), maximize=True)),
    ("ASGD", {}), ("ASGD", dict(lr=0.05, lambd=1e-2, alpha=0.5, t0=2, weight_decay=0.1)),
    ("ASGD", dict(maximize=True, t0=0)),
]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name,kw", OPTIMIZERS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(OPTIMIZERS)])
def test_optimizer_steps_match_torch(torch, name, kw, dtype):
    rng = np.random.default_rng(0)
    w0, b0 = rng.standard_normal((3, 4)).astype(dtype), rng.standard_normal(4).astype(dtype)
    ref_params = [torch.tensor(w0, requires_grad=True), torch.tensor(b0, requires_grad=True)]
    params = [tw.nn.Parameter(tw.tensor(w0)), tw.nn.Parameter(tw.tensor(b0))]
    ref, mine = getattr(torch.optim, name)(ref_params, **kw), getattr(tw.optim, name)(params, **kw)
    for step in range(6):
        grads = [rng.standard_normal(w0.shape).astype(dtype), rng.standard_normal(b0.shape).astype(dtype)]
        if step == 3:
            grads[0][0] = 0  # (Rprop: a zero gradient keeps the step size)
        for p, g in zip(ref_params, grads):
            p.grad = torch.tensor(g)
        for p, g in zip(params, grads):
            p.grad = tw.tensor(g)
        ref.step()
        mine.step()
    tol = 1e-15 if dtype == "float64" else 1e-7
    for p, q in zip(params, ref_params):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=tol, atol=tol)
    st, ref_st = mine.state[params[0]], ref.state[ref_params[0]]
    assert sorted(st) == sorted(ref_st)
    for k, v in ref_st.items():
        got = st[k].numpy() if isinstance(st[k], tw.Tensor) else np.asarray(st[k])
        np.testing.assert_allclose(got, np.asarray(v), rtol=tol, atol=tol, err_msg=k)
    assert sorted(mine.state_dict()["param_groups"][0]) == sorted(ref.state_dict()["param_groups"][0])


def test_optimizer_argument_checks(torch):
    p = [tw.nn.Parameter(tw.zeros(2))]
    with pytest.raises(ValueError, match="Invalid eta values: 1.5, 1.2"):
        tw.optim.Rprop(p, etas=(1.5, 1.2))
    with pytest.raises(ValueError, match="Invalid weight_decay value"):
        tw.optim.ASGD(p, weight_decay=-1)


def _opt(lib, which: str):
    ps = [lib.nn.Parameter(lib.zeros(2)), lib.nn.Parameter(lib.zeros(3))]
    groups = [{"params": [ps[0]]}, {"params": [ps[1]], "lr": 0.5}]
    return lib.optim.Adam(groups, lr=0.1) if which == "Adam" else lib.optim.SGD(groups, lr=0.1, momentum=0.9)


def _schedules(lib, which):
    L = lib.optim.lr_scheduler
    return {
        "poly": lambda o: L.PolynomialLR(o, total_iters=7, power=2.0),
        "warm": lambda o: L.CosineAnnealingWarmRestarts(o, T_0=4, T_mult=2, eta_min=0.01),
        "warm_frac": lambda o: L.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2),
        "cyclic": lambda o: L.CyclicLR(o, 0.01, [0.1, 0.2], step_size_up=3, step_size_down=2),
        "cyclic2": lambda o: L.CyclicLR(o, 0.01, 0.1, step_size_up=2, mode="triangular2"),
        "cyclic_exp": lambda o: L.CyclicLR(o, 0.01, 0.1, step_size_up=2, mode="exp_range", gamma=0.9),
        "cyclic_adam": lambda o: L.CyclicLR(o, 0.01, 0.1, step_size_up=2),
        "chained": lambda o: L.ChainedScheduler([L.ConstantLR(o, factor=0.5, total_iters=3),
                                                 L.ExponentialLR(o, gamma=0.9)]),
        "chained2": lambda o: L.ChainedScheduler([L.PolynomialLR(o, total_iters=5),
                                                  L.CosineAnnealingWarmRestarts(o, T_0=3)]),
    }[which]


def _trajectory(lib, which, steps=20, start=0, sched_state=None):
    o = _opt(lib, "Adam" if which == "cyclic_adam" else "SGD")
    s = _schedules(lib, which)(o)
    if sched_state is not None:
        s.load_state_dict(sched_state)
        for g, lr in zip(o.param_groups, s.get_last_lr()):
            g["lr"] = lr
    seq = []
    for i in range(start, steps):
        o.step()
        if which == "warm_frac":
            s.step(i * 0.5)
        else:
            s.step()
        seq.append(list(s.get_last_lr()) + [g.get("momentum", g.get("betas", (0,))[0]) for g in o.param_groups])
    return np.array(seq), s


@pytest.mark.parametrize("which", ["poly", "warm", "warm_frac", "cyclic", "cyclic2", "cyclic_exp", "cyclic_adam",
                                   "chained", "chained2"])
def test_scheduler_matches_torch(torch, which):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch's "lr_scheduler.step() before optimizer.step()" and epoch warnings)
        ref, _ = _trajectory(torch, which)
        mine, sched = _trajectory(tw, which)
        np.testing.assert_allclose(mine, ref, rtol=0, atol=1e-15)
        # a state_dict taken half-way, loaded into a fresh scheduler, continues the same schedule
        _, half = _trajectory(tw, which, steps=10)
        rest, _ = _trajectory(tw, which, steps=20, start=10, sched_state=half.state_dict())
        np.testing.assert_allclose(rest, mine[10:], rtol=0, atol=1e-15)
    state = sched.state_dict()
    assert "optimizer" not in state
    if which.startswith("chained"):
        assert isinstance(state["_schedulers"], list) and all(isinstance(d, dict) for d in state["_schedulers"])


def test_scheduler_argument_checks(torch):
    L = tw.optim.lr_scheduler
    o = _opt(tw, "SGD")
    with pytest.raises(ValueError, match="Expected positive integer T_0"):
        L.CosineAnnealingWarmRestarts(o, T_0=0)
    with pytest.raises(ValueError, match="mode is invalid and scale_fn is None"):
        L.CyclicLR(o, 0.01, 0.1, mode="sine")
    with pytest.raises(ValueError, match="does not support `ReduceLROnPlateau`"):
        L.ChainedScheduler([L.ReduceLROnPlateau(o)])
    with pytest.raises(ValueError, match="must support momentum or beta1"):
        L.CyclicLR(tw.optim.Adagrad([tw.nn.Parameter(tw.zeros(1))]), 0.01, 0.1)
