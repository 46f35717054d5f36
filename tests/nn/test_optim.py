"""Optimizers, schedulers and gradient clipping against numpy references and torch (gradients set by hand,
so these tests need no autograd); the recorded step keeps one structure (the plan is replayed)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensorwire as tw
from tensorwire import nn, optim

from ._util import needs_torch, torch


def _params(seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in ((4, 3), (3,))]


def _grads(step, dtype=np.float64):
    rng = np.random.default_rng(100 + step)
    return [rng.standard_normal(s).astype(dtype) for s in ((4, 3), (3,))]


def _run_tw(make, steps=5, dtype=np.float64):
    ps = [nn.Parameter(tw.tensor(a)) for a in _params(dtype=dtype)]
    opt = make(ps)
    for s in range(steps):
        for p, g in zip(ps, _grads(s, dtype)):
            p.grad = tw.tensor(g)
        opt.step()
    return [p.detach().numpy() for p in ps], opt


def test_sgd_and_adam_match_numpy(session):
    out, _ = _run_tw(lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01))
    ref = _params()
    bufs = [None, None]
    for s in range(5):
        for i, g in enumerate(_grads(s)):
            g = g + 0.01 * ref[i]
            bufs[i] = g.copy() if bufs[i] is None else 0.9 * bufs[i] + g
            ref[i] = ref[i] - 0.1 * (g + 0.9 * bufs[i])
    for a, b in zip(out, ref):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    out, opt = _run_tw(lambda ps: optim.Adam(ps, lr=0.01, betas=(0.8, 0.9), eps=1e-6))
    ref = _params()
    m = [np.zeros_like(r) for r in ref]
    v = [np.zeros_like(r) for r in ref]
    for s in range(5):
        for i, g in enumerate(_grads(s)):
            m[i] = 0.8 * m[i] + 0.2 * g
            v[i] = 0.9 * v[i] + 0.1 * g * g
            mh, vh = m[i] / (1 - 0.8 ** (s + 1)), v[i] / (1 - 0.9 ** (s + 1))
            ref[i] = ref[i] - 0.01 * mh / (np.sqrt(vh) + 1e-6)
    for a, b in zip(out, ref):
        np.testing.assert_allclose(a, b, rtol=1e-10)
    assert opt.state[opt.param_groups[0]["params"][0]]["step"] == 5


@needs_torch
@pytest.mark.parametrize("name,kw", [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, maximize=True)),
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.01, weight_decay=0.1, amsgrad=True)),
    ("AdamW", dict(lr=0.01, weight_decay=0.1)),
    ("RMSprop", dict(lr=0.01)),
    ("RMSprop", dict(lr=0.01, momentum=0.5, centered=True, weight_decay=0.01)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.01, weight_decay=0.1, initial_accumulator_value=0.5)),
    ("Adadelta", dict()),
    ("Adadelta", dict(lr=0.5, rho=0.8, eps=1e-5, weight_decay=0.1, maximize=True)),
    ("Adamax", dict()),
    ("Adamax", dict(lr=0.01, betas=(0.8, 0.9), weight_decay=0.1)),
    ("NAdam", dict()),
    ("NAdam", dict(lr=0.01, weight_decay=0.1, momentum_decay=0.01)),
    ("NAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True, maximize=True)),
    ("RAdam", dict(lr=0.01)),  # rho_t <= 5 for the first steps, rectified after step 5
    ("RAdam", dict(lr=0.01, betas=(0.5, 0.6), weight_decay=0.1)),
    ("RAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True)),
])
def test_optimizers_match_torch(session, name, kw):
    for dtype, rtol in ((np.float64, 1e-10), (np.float32, 1e-5)):
        out, _ = _run_tw(lambda ps: getattr(optim, name)(ps, **kw), 8, dtype)
        tps = [torch.nn.Parameter(torch.tensor(a)) for a in _params(dtype=dtype)]
        topt = getattr(torch.optim, name)(tps, **kw)
        for s in range(8):
            for p, g in zip(tps, _grads(s, dtype)):
                p.grad = torch.tensor(g)
            topt.step()
        for a, b in zip(out, tps):
            np.testing.assert_allclose(a, b.detach().numpy(), rtol=rtol, atol=rtol * 1e-2)


@needs_torch
@pytest.mark.parametrize("kw", [dict(lr=0.05), dict(lr=0.01, betas=(0.5, 0.8), eps=1e-6, maximize=True)])
def test_sparse_adam_matches_torch(session, kw):
    """``SparseAdam`` on an ``Embedding(sparse=True)`` (word2vec's habit): torch's lazy update, bit for bit in float32,
    the rows not looked up left as they are (their moments too); repeated ids in a batch; and torch's errors."""
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal((10, 4)).astype(np.float32)
    batches = [rng.integers(0, 8, 6) for _ in range(6)]  # (rows 8 and 9 never looked up)
    batches[2] = np.array([1, 1, 1, 7])  # (a repeated id: its gradients add up, as torch's coalesce adds them)
    targets = [rng.standard_normal((len(b), 4)).astype(np.float32) for b in batches]

    def run(lib):
        emb = lib.nn.Embedding(10, 4, sparse=True)
        with lib.no_grad():
            emb.weight.copy_(lib.tensor(w0))
        opt = lib.optim.SparseAdam(emb.parameters(), **kw)
        for ids, t in zip(batches, targets):
            opt.zero_grad()
            ((emb(lib.tensor(ids)) - lib.tensor(t)) ** 2).sum().backward()
            opt.step()
        st = opt.state[emb.weight]
        return [emb.weight.detach().numpy().copy(), st["exp_avg"].numpy().copy(), st["exp_avg_sq"].numpy().copy()], \
            int(st["step"])

    got, steps = run(tw)
    want, tsteps = run(torch)
    assert steps == tsteps == len(batches)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    untouched = sorted(set(range(10)) - set(np.concatenate(batches)))
    assert untouched and np.array_equal(got[0][untouched], w0[untouched])
    with pytest.raises(ValueError, match="Invalid learning rate"):
        optim.SparseAdam([nn.Parameter(tw.ones(2))], lr=0)
    with pytest.raises(ValueError, match="does not support complex"):
        optim.SparseAdam([nn.Parameter(tw.ones(2, dtype=tw.complex64))])


def test_step_replays_one_plan_and_does_not_sync(session):
    ps = [nn.Parameter(tw.tensor(a)) for a in _params()]
    opt = optim.Adam(ps, lr=0.01)
    sched = optim.lr_scheduler.StepLR(opt, 2, 0.5)
    counts = []
    for s in range(6):
        for p, g in zip(ps, _grads(s)):
            p.grad = tw.tensor(g)
        opt.step()
        sched.step()
        n = len(session._pending)  # nothing was shipped by step(): it only recorded
        assert n > 0
        counts.append(n)
        session.synchronize()
    assert len(set(counts[2:])) == 1  # same structure every step (new lr/bias corrections are dynamic values)
    plans = len(session._plans)
    for p, g in zip(ps, _grads(9)):
        p.grad = tw.tensor(g)
    opt.step()
    session.synchronize()
    assert len(session._plans) == plans  # the cached plan was replayed


def test_optimizer_state_dict_roundtrip(session):
    ps = [nn.Parameter(tw.tensor(a)) for a in _params()]
    opt = optim.Adam(ps, lr=0.01)
    for s in range(3):
        for p, g in zip(ps, _grads(s)):
            p.grad = tw.tensor(g)
        opt.step()
    sd = opt.state_dict()
    assert sorted(sd["state"]) == [0, 1] and sd["param_groups"][0]["params"] == [0, 1]
    assert set(sd["state"][0]) == {"step", "exp_avg", "exp_avg_sq"}
    qs = [nn.Parameter(tw.tensor(p.detach().numpy())) for p in ps]
    opt2 = optim.Adam(qs, lr=0.5)
    opt2.load_state_dict(sd)
    assert opt2.param_groups[0]["lr"] == 0.01
    for p, q in ((ps, opt), (qs, opt2)):
        for par, g in zip(p, _grads(7)):
            par.grad = tw.tensor(g)
        q.step()
    for a, b in zip(ps, qs):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    with pytest.raises(ValueError):
        optim.SGD([nn.Parameter(tw.ones(1))], lr=0.1).load_state_dict(sd)
    with pytest.raises(ValueError):
        optim.SGD([], lr=0.1)


def test_param_groups_and_zero_grad(session):
    a, b = nn.Parameter(tw.ones(2)), nn.Parameter(tw.ones(2))
    opt = optim.SGD([{"params": [a]}, {"params": [b], "lr": 1.0}], lr=0.1)
    a.grad, b.grad = tw.ones(2), tw.ones(2)
    opt.step()
    np.testing.assert_allclose(a.detach().numpy(), [0.9, 0.9])
    np.testing.assert_allclose(b.detach().numpy(), [0.0, 0.0])
    opt.zero_grad()
    assert a.grad is None and b.grad is None
    c = nn.Parameter(tw.ones(1))
    opt.add_param_group({"params": c, "lr": 3.0})
    assert opt.param_groups[2]["momentum"] == 0
    with pytest.raises(ValueError, match="more than one"):
        opt.add_param_group({"params": [a]})
    assert "Parameter Group 1" in repr(opt)


@needs_torch
@pytest.mark.parametrize("make", [
    lambda m, o: m.StepLR(o, 3, 0.5),
    lambda m, o: m.MultiStepLR(o, [2, 5], 0.3),
    lambda m, o: m.ExponentialLR(o, 0.9),
    lambda m, o: m.CosineAnnealingLR(o, 7, eta_min=0.01),
    lambda m, o: m.LambdaLR(o, lambda e: 1 / (e + 1)),
    lambda m, o: m.LinearLR(o, 0.25, 1.0, 4),
    lambda m, o: m.ConstantLR(o, 0.5, 3),
    lambda m, o: m.OneCycleLR(o, 1.0, total_steps=15),
    lambda m, o: m.OneCycleLR(o, 1.0, total_steps=15, three_phase=True, anneal_strategy="linear"),
], ids=["step", "multistep", "exp", "cosine", "lambda", "linear", "constant", "onecycle", "onecycle3"])
def test_schedulers_match_torch(session, make):
    for opt_name in ("SGD", "Adam"):
        kw = {"lr": 0.1, "momentum": 0.9} if opt_name == "SGD" else {"lr": 0.1}
        p = nn.Parameter(tw.ones(1))
        o = getattr(optim, opt_name)([p], **kw)
        tp = torch.nn.Parameter(torch.ones(1))
        to = getattr(torch.optim, opt_name)([tp], **kw)
        s, ts = make(optim.lr_scheduler, o), make(torch.optim.lr_scheduler, to)
        for _ in range(14):
            assert s.get_last_lr() == pytest.approx(ts.get_last_lr(), rel=1e-12)
            g, tg = o.param_groups[0], to.param_groups[0]
            if "momentum" in g:
                assert g["momentum"] == pytest.approx(tg["momentum"])
            else:
                assert g["betas"][0] == pytest.approx(tg["betas"][0])
            o.step()
            to.step()
            s.step()
            ts.step()
    assert "optimizer" not in s.state_dict()


def test_clip_grad_norm(session):
    rng = np.random.default_rng(0)
    gs = [rng.standard_normal(s) for s in ((3, 4), (5,))]
    ps = [nn.Parameter(tw.zeros(*g.shape, dtype=tw.float64)) for g in gs]
    for p, g in zip(ps, gs):
        p.grad = tw.tensor(g)
    total = math.sqrt(sum(float((g ** 2).sum()) for g in gs))
    n = nn.utils.clip_grad_norm_(ps, 1.0)
    assert n.item() == pytest.approx(total)
    for p, g in zip(ps, gs):
        np.testing.assert_allclose(p.grad.numpy(), g / (total + 1e-6), rtol=1e-9)
    n2 = nn.utils.clip_grad_norm_(ps, 100.0, norm_type=math.inf)
    assert n2.item() == pytest.approx(max(np.abs(g).max() for g in gs) / (total + 1e-6))
    nn.utils.clip_grad_value_(ps, 0.01)
    assert float(ps[0].grad.abs().max()) <= 0.01
    v = nn.utils.parameters_to_vector(ps)
    assert v.shape == (17,)
    nn.utils.vector_to_parameters(v * 0 + 1, ps)
    assert float(ps[1].sum()) == 5


def test_clip_grad_norm_records_outside_autograd(session):
    """As torch's (under ``no_grad``): gradients that require grad (``create_graph``) are scaled, and the norm
    taken, without a graph; the values as before."""
    ws = [nn.Parameter(tw.tensor(v, dtype=tw.float64)) for v in ([[1.0, -2.0], [0.5, 3.0]], [2.0, -1.0])]
    (sum((w ** 3).sum() for w in ws)).backward(create_graph=True)
    assert all(w.grad.requires_grad for w in ws)
    gs = [3 * np.asarray(v) ** 2 for v in ([[1.0, -2.0], [0.5, 3.0]], [2.0, -1.0])]
    total = math.sqrt(sum(float((g ** 2).sum()) for g in gs))
    n = nn.utils.clip_grad_norm_(ws, 1.0)
    assert not n.requires_grad and n.item() == pytest.approx(total)
    for w, g in zip(ws, gs):
        assert not w.grad.requires_grad
        np.testing.assert_allclose(w.grad.detach().numpy(), g / (total + 1e-6), rtol=1e-12)


_GROUPED = [
    ("SGD", dict(lr=0.1, momentum=0.9), dict(lr=0.01, nesterov=True, momentum=0.5)),
    ("Adam", dict(lr=0.01), dict(lr=0.1, betas=(0.5, 0.6), amsgrad=True, weight_decay=0.1)),
    ("Adadelta", dict(), dict(lr=0.1, rho=0.5, weight_decay=0.01)),
    ("Adamax", dict(lr=0.01), dict(betas=(0.5, 0.9), eps=1e-3)),
    ("NAdam", dict(lr=0.01), dict(lr=0.05, momentum_decay=0.1, weight_decay=0.1, decoupled_weight_decay=True)),
    ("RAdam", dict(lr=0.01), dict(lr=0.05, betas=(0.8, 0.99), weight_decay=0.1)),
]


@needs_torch
@pytest.mark.parametrize("name,default,group", _GROUPED, ids=[g[0] for g in _GROUPED])
def test_param_groups_match_torch(session, name, default, group):
    """Two groups with their own options, a third added mid-run with add_param_group, a StepLR scheduler over all
    of them: the trajectories, the groups' keys and the state_dict layout are torch's."""
    extra = np.random.default_rng(5).standard_normal(5)

    def run(lib, tensor, param):
        ps = [param(tensor(a)) for a in _params()]
        opt = getattr(lib.optim, name)([{"params": [ps[0]]}, {"params": [ps[1]], **group}], **default)
        sched = lib.optim.lr_scheduler.StepLR(opt, 2, gamma=0.5)
        q = param(tensor(extra))
        for s in range(7):
            if s == 3:
                opt.add_param_group({"params": q, "lr": 0.02})
            for p, g in zip(ps, _grads(s)):
                p.grad = tensor(g)
            q.grad = tensor(np.sin(extra + s))
            opt.step()
            sched.step()
        return [np.asarray(p.detach().numpy()) for p in (*ps, q)], opt, sched

    out, opt, sched = run(tw, tw.tensor, nn.Parameter)
    ref, topt, tsched = run(torch, torch.tensor, torch.nn.Parameter)
    for a, b in zip(out, ref):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    assert sched.get_last_lr() == pytest.approx(tsched.get_last_lr(), rel=1e-12)
    sd, tsd = opt.state_dict(), topt.state_dict()
    assert [sorted(g) for g in sd["param_groups"]] == [sorted(g) for g in tsd["param_groups"]]
    assert [g["params"] for g in sd["param_groups"]] == [g["params"] for g in tsd["param_groups"]]
    assert sorted(sd["state"]) == sorted(tsd["state"])
    for k, st in tsd["state"].items():
        assert sorted(sd["state"][k]) == sorted(st)
        for key, v in st.items():
            if key != "step":  # torch keeps the step as a tensor, tensorwire as a number
                np.testing.assert_allclose(np.asarray(sd["state"][k][key].numpy() if hasattr(sd["state"][k][key],
                                           "numpy") else sd["state"][k][key]), np.asarray(v), rtol=1e-6)
            else:
                assert sd["state"][k][key] == float(v)


def test_param_groups_errors_and_named_parameters(session):
    a = nn.Parameter(tw.ones(2))
    with pytest.raises(TypeError, match="ordered collections"):
        optim.Adam([{"params": {a}}])
    with pytest.raises(ValueError, match="Invalid rho"):
        optim.Adadelta([a], rho=1.5)
    with pytest.raises(ValueError, match="Invalid beta"):
        optim.NAdam([a], betas=(1.0, 0.9))
    with pytest.raises(ValueError, match="Invalid momentum_decay"):
        optim.NAdam([a], momentum_decay=-1)
    lin = nn.Linear(3, 2)
    opt = optim.RAdam(lin.named_parameters(), lr=0.1)
    assert opt.param_groups[0]["param_names"] == ["weight", "bias"]
    assert opt.state_dict()["param_groups"][0]["param_names"] == ["weight", "bias"]
    with pytest.raises(ValueError, match="parameter groups"):
        optim.LBFGS([{"params": [a]}, {"params": [nn.Parameter(tw.ones(1))]}])


def _lbfgs_problem(lib, tensor, dtype):
    """A small ill-conditioned least-squares problem plus a quartic term (non-quadratic, so the line search works)."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((6, 4)) * np.array([1.0, 3.0, 0.3, 2.0])
    b = rng.standard_normal(6)
    x = lib.nn.Parameter(tensor(np.zeros(4, dtype)))
    at, bt = tensor(a.astype(dtype)), tensor(b.astype(dtype))

    def loss_fn():
        r = at @ x - bt
        return (r * r).sum() + (x * x * x * x).sum() * 0.1

    return x, loss_fn


@needs_torch
@pytest.mark.parametrize("kw", [dict(), dict(line_search_fn="strong_wolfe", history_size=3, max_iter=7),
                                dict(lr=0.5, max_iter=4)], ids=["plain", "strong_wolfe", "lr"])
def test_lbfgs_matches_torch(session, kw):
    """Several LBFGS steps with a closure: the same iterates, losses and evaluation counts as torch (float64)."""
    def run(lib, tensor):
        x, loss_fn = _lbfgs_problem(lib, tensor, np.float64)
        opt = lib.optim.LBFGS([x], **kw)
        losses = []

        def closure():
            opt.zero_grad()
            loss = loss_fn()
            loss.backward()
            return loss

        for _ in range(3):
            losses.append(opt.step(closure).item())
        st = opt.state[x]
        return np.asarray(x.detach().numpy()), losses, st["func_evals"], st["n_iter"], loss_fn().item()

    x, losses, evals, iters, final = run(tw, tw.tensor)
    tx, tlosses, tevals, titers, tfinal = run(torch, torch.tensor)
    np.testing.assert_allclose(x, tx, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(losses, tlosses, rtol=1e-9)
    assert (evals, iters) == (tevals, titers)
    assert final == pytest.approx(tfinal, rel=1e-9)
    assert final < losses[0] * 0.5


def test_lbfgs_float32_converges_and_state_dict(session):
    x, loss_fn = _lbfgs_problem(tw, tw.tensor, np.float32)
    opt = optim.LBFGS([x], line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = loss_fn()
        loss.backward()
        return loss

    first = float(opt.step(closure))
    opt.step(closure)
    if torch is not None:  # the same two steps in torch, where it is installed
        tx, tloss = _lbfgs_problem(torch, torch.tensor, np.float32)
        topt = torch.optim.LBFGS([tx], line_search_fn="strong_wolfe")
        for _ in range(2):
            topt.step(lambda: (topt.zero_grad(), (lambda v: (v.backward(), v)[1])(tloss()))[1])
        np.testing.assert_allclose(x.detach().numpy(), tx.detach().numpy(), rtol=1e-4, atol=1e-5)
    assert float(loss_fn()) < first
    sd = opt.state_dict()
    assert set(sd["state"][0]) >= {"d", "t", "old_dirs", "old_stps", "ro", "H_diag", "prev_flat_grad", "func_evals"}
    y = nn.Parameter(tw.tensor(x.detach().numpy()))
    opt2 = optim.LBFGS([y], line_search_fn="strong_wolfe")
    opt2.load_state_dict(sd)
    assert len(opt2.state[y]["old_dirs"]) == len(sd["state"][0]["old_dirs"])
    np.testing.assert_array_equal(opt2.state[y]["d"].numpy(), opt.state[x]["d"].numpy())


@needs_torch
@pytest.mark.parametrize("kw", [dict(patience=1, factor=0.5, min_lr=[0.02, 0.0]),
                                dict(mode="max", threshold_mode="abs", threshold=0.1, cooldown=2, patience=0)])
def test_reduce_lr_on_plateau_matches_torch(session, kw):
    """Per-group lrs after a metric that improves, stalls and improves again, for two param groups."""
    metrics = [1.0, 0.9, 0.95, 0.97, 0.96, 0.5, 0.55, 0.6, 0.61, 0.4, 0.41, 0.42]

    def run(lib, param):
        a, b = param(lib.ones(1)), param(lib.ones(1))
        opt = lib.optim.Adadelta([{"params": [a]}, {"params": [b], "lr": 0.3}], lr=1.0)
        sched = lib.optim.lr_scheduler.ReduceLROnPlateau(opt, **kw)
        out = []
        for m in metrics:
            sched.step(m)
            out.append(sched.get_last_lr())
        return out

    assert run(tw, nn.Parameter) == run(torch, torch.nn.Parameter)
