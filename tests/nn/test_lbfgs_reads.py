"""LBFGS reads the numbers its decisions need together (``client/optim/lbfgs.py``): it records the next
iteration's direction before it knows whether the last step's pair ``(y, s)`` enters the memory (torch takes it
when ``y.s > 1e-10``). These check the case where it does not, against torch, and the round trips an iteration."""

from __future__ import annotations

import numpy as np

import tensorwire as tw

from ._util import needs_torch, torch


def _run(lib, tensor, steps: int, **kw):
    """A linear objective: its gradient never changes, so ``y.s`` is 0 and no pair enters the memory."""
    w = lib.nn.Parameter(tensor(np.zeros(4)))
    c = tensor(np.array([1.0, -2.0, 0.5, 3.0]))
    opt = lib.optim.LBFGS([w], **kw)

    def closure():
        opt.zero_grad()
        loss = (w * c).sum()
        loss.backward()
        return loss

    losses = [opt.step(closure).item() for _ in range(steps)]
    st = opt.state[w]
    return np.asarray(w.detach().numpy()), losses, st["func_evals"], st["n_iter"], len(st["old_dirs"])


@needs_torch
def test_lbfgs_pair_refused_matches_torch(session):
    x, losses, evals, iters, kept = _run(tw, tw.tensor, 3, max_iter=5)
    tx, tlosses, tevals, titers, tkept = _run(torch, torch.tensor, 3, max_iter=5)
    np.testing.assert_allclose(x, tx, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(losses, tlosses, rtol=1e-12)
    assert (evals, iters, kept) == (tevals, titers, tkept) and kept == 0  # (no pair taken: the fallback ran)


def test_lbfgs_reads_once_an_iteration(session):
    """Without a line search: one round trip after the first evaluation, then one after each re-evaluation (the
    loss, the stopping tests, the curvature and the next direction's slope together)."""
    x, loss_fn = _quadratic()
    opt = tw.optim.LBFGS([x], max_iter=4)

    def closure():
        opt.zero_grad()
        loss = loss_fn()
        loss.backward()
        return loss

    opt.step(closure)  # (the first step of all: the same count; warm the plans)
    waits = [0]
    flush = session._flush

    def counted(fetch, sync, *a, **k):
        waits[0] += bool(fetch or sync)
        return flush(fetch, sync, *a, **k)

    session._flush = counted
    try:
        opt.step(closure)
    finally:
        del session._flush
    assert opt.state[x]["n_iter"] == 8
    assert waits[0] == 4  # 1 + 3 re-evaluations (the 4th iteration evaluates nothing)


def _quadratic():
    rng = np.random.default_rng(3)
    a = tw.tensor(rng.standard_normal((6, 4)))
    b = tw.tensor(rng.standard_normal(6))
    x = tw.nn.Parameter(tw.tensor(np.zeros(4)))

    def loss_fn():
        r = a @ x - b
        return (r * r).sum() + (x * x * x * x).sum() * 0.1

    return x, loss_fn


def test_lbfgs_direction_is_one_op_with_the_recursion_s_values(session):
    """The two-loop recursion records one ``lbfgs_direction`` op (not ~11 a remembered pair), and its direction is
    the op-by-op recursion's bit for bit (the CPU kernel runs the decomposition's numpy steps in its order)."""
    from tensorwire.optim.lbfgs import LBFGS

    rng = np.random.default_rng(5)
    vec = lambda: tw.tensor(rng.standard_normal(7))  # noqa: E731
    g, dirs, stps = vec(), [vec() for _ in range(3)], [vec() for _ in range(3)]
    ro = [1.0 / y.dot(s) for y, s in zip(dirs, stps)]
    h_diag = dirs[-1].dot(stps[-1]) / dirs[-1].dot(dirs[-1])
    ops = []
    record = session.record

    def counted(op, *a, **k):
        ops.append(op)
        return record(op, *a, **k)

    session.record = counted
    try:
        d = LBFGS._two_loop(g, (dirs, stps, ro, h_diag))
    finally:
        del session.record
    assert ops == ["lbfgs_direction"]
    q, al = -g, [None] * 3
    for i in (2, 1, 0):
        al[i] = stps[i].dot(q) * ro[i]
        q = q - dirs[i] * al[i]
    r = q * h_diag
    for i in range(3):
        r = r + stps[i] * (al[i] - dirs[i].dot(r) * ro[i])
    np.testing.assert_array_equal(d.numpy(), r.numpy())
