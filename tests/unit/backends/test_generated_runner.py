"""The generated straight-line runner (issue 37) leaves ``env`` as the loop does, at its early answer and at its end,
for programs that read inputs, reuse and overwrite slots (inputs included) and free slots no kept step read; a
straight-line runner makes one generated runner a place it answers at, the loop serving the others."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tensorwire.backends import executor as X
from tensorwire.backends.cpu import NumpyBackend
from tensorwire.protocol import dtypes as D


def _step(k: int):
    def fn(*args):
        return ("v", k, args)

    return fn


def _dyn_step(k: int):
    def fn(args, dyn, frames):
        return ("d", k, tuple(args), dyn, len(frames))

    return fn


def _program(rng: random.Random, nslots: int, inputs: int, n: int) -> tuple:
    """``n`` steps over ``nslots`` slots, the first ``inputs`` holding inputs: any step reads, writes and frees any
    slot (reads of freed slots, writes over inputs, frees of slots nothing read)."""
    prog = []
    for k in range(n):
        ins = tuple(rng.sample(range(nslots), rng.randint(0, min(3, nslots))))
        out = rng.randrange(nslots)
        frees = tuple(rng.sample(range(nslots), rng.randint(0, min(3, nslots))))
        if rng.random() < 0.2:
            prog.append((_dyn_step(k), ins, out, frees, k))
        else:
            prog.append((_step(k), ins, out, frees, None))
    return tuple(prog)


@pytest.mark.parametrize("seed", range(40))
def test_the_generated_runner_leaves_env_as_the_loop_does(seed):
    rng = random.Random(seed)
    nslots, inputs, n = rng.randint(1, 9), rng.randint(0, 4), rng.randint(0, 14)
    inputs = min(inputs, nslots)
    prog = _program(rng, nslots, inputs, n)
    for stop in [-1, *range(n)]:
        envs, seens = [], []
        for gen in (False, True):
            env = [None] * nslots
            env[:inputs] = [("in", i) for i in range(inputs)]
            seen: list = []

            def answer(e, seen=seen):
                seen.append(list(e))

            if gen:
                X._generated(prog, stop, inputs)(env, {3: {"a": 1}}, [b"x"], answer)
            else:
                X._looped(prog)(env, {3: {"a": 1}}, [b"x"], (stop, answer))
            envs.append(env)
            seens.append(seen)
        assert envs[0] == envs[1]
        assert seens[0] == seens[1]
        assert len(seens[1]) == (stop >= 0)


def test_a_runner_generates_one_runner_a_place_it_answers_at_and_loops_for_more(monkeypatch):
    made: list = []
    generated = X._generated

    def counted(prog, stop=-1, inputs=0):
        made.append(stop)
        return generated(prog, stop, inputs)

    monkeypatch.setattr(X, "_generated", counted)
    monkeypatch.setattr(X, "GENERATED_VARIANTS", 2)
    dev = NumpyBackend().open(0)
    nodes = [["mul", [-1, -2], None], ["exp", [0], None], ["add", [1, -1], None], ["neg", [2], None]]
    plan = X.compile_plan(dev, nodes, [((8,), D.float32), ((8,), D.float32)])
    keep = frozenset(s for s in plan.node_slot if s is not None)
    run = X._runner(dev, plan, keep)
    x, y = np.linspace(0, 1, 8, dtype=np.float32), np.full(8, 0.5, np.float32)
    want = -(np.exp(x * y) + x)
    for stop in (None, 0, 1, 2):
        for _ in range(X.GENERATE_AFTER + 2):
            env = [None] * plan.nslots
            env[:2] = [x, y]
            seen: list = []
            run(env, {}, [], None if stop is None else (stop, lambda e, seen=seen: seen.append(True)))
            np.testing.assert_allclose(env[plan.node_slot[3]], want, rtol=1e-6)
            assert len(seen) == (stop is not None)
    assert made == [-1, 0]  # (the answers after items 1 and 2 went through the loop)
