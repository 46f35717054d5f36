"""A cold kernel cache (issue 37: a script's first run on a fresh cluster with an empty kernel cache): a hot plan
does not plan, lower and render its kernels only to find that the cache holds none (backends/hot.py
``Tier._wait_for_build``, backends/codegen/cache.py ``holds_nothing``)."""

from __future__ import annotations

import numpy as np
import pytest

from tensorwire.backends import executor as X
from tensorwire.backends import hot
from tensorwire.backends.codegen import cache as C
from tensorwire.backends.cpu import CompiledBackend, compiled
from tensorwire.protocol import dtypes as D

COMPILE_S = 120  # bound on one background task (a busy machine)
CHAIN = [["tanh", [-1], None], ["exp", [0], None], ["neg", [1], None], ["sigmoid", [2], None]]


def test_a_cache_holds_nothing_until_a_kernel_is_in_it(tmp_path, monkeypatch):
    root = tmp_path / "kernels"
    monkeypatch.setenv(C.CACHE_ENV, str(root))
    assert C.holds_nothing()  # (not there yet)
    (root / "c").mkdir(parents=True)
    (root / "c" / "tmpab12.so.tmp").write_bytes(b"half")  # a build under way elsewhere: a temporary only
    assert C.holds_nothing()
    (root / "c" / "0123abcd.c").write_text("int f;")
    assert not C.holds_nothing()


def test_anything_but_a_target_folder_in_the_cache_counts_as_something(tmp_path, monkeypatch):
    monkeypatch.setenv(C.CACHE_ENV, str(tmp_path))
    (tmp_path / "stray").write_text("?")  # (the look-up then runs, and says what is wrong, if anything)
    assert not C.holds_nothing()


@pytest.mark.skipif(compiled.runtime() is None, reason=f"no C compiler: {compiled.why_not()}")
def test_a_hot_plan_does_not_render_its_kernels_to_look_them_up_in_an_empty_cache(tmp_path, monkeypatch):
    root = tmp_path / "kernels"
    monkeypatch.setenv(C.CACHE_ENV, str(root))
    monkeypatch.setenv(compiled.BUILD_RUNS_ENV, "5")
    dev = CompiledBackend(min_work=1 << 20, hot_runs=2, trial_runs=0).open(0)
    x = np.linspace(-1, 1, 24, dtype=np.float32)
    metas = [((24,), D.float32)]

    def hot_twice() -> tuple:
        """A new plan of the chain, run until hot (and its compile, if one started, over); the planner's calls."""
        plan = X.compile_plan(dev, CHAIN, metas)
        planned = []
        plan.tier.planner = lambda *a, **k: planned.append(1) or X.compile_plan(*a, **k)
        for _ in range(2):
            X.run_plan(dev, plan, [x], [0, 1, 2, 3], {}, [], set(plan.node_slot))
        hot._pool().submit(lambda: None).result(COMPILE_S)  # (one task at a time, in order)
        return plan, planned

    plan, planned = hot_twice()
    assert planned == []  # the cache is empty: nothing planned again to look its kernels up
    assert plan.tier.hot_runs == 5 and not plan.tier.done.is_set()  # as a look-up that missed leaves it

    (root / "c").mkdir(parents=True, exist_ok=True)
    (root / "c" / "0123abcd.so").write_bytes(b"another fragment's")
    plan, planned = hot_twice()
    assert planned == [1]  # something cached: looked up (and missed: this chain's kernels are not there)
    assert plan.tier.hot_runs == 5 and not plan.tier.done.is_set()
