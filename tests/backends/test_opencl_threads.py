"""PoCL's thread pinning default (``backends/opencl/discovery.pin_pocl_threads``): on where every CPU is allowed,
never over the user's choice, never where PoCL would be asked to pin a thread to a CPU it cannot run on."""

from __future__ import annotations

import os

import pytest

from tensorwire.backends.opencl.discovery import POCL_AFFINITY_ENV, pin_pocl_threads

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="needs Linux's sched_getaffinity")


def _all_cpus() -> bool:
    return os.sched_getaffinity(0) == set(range(os.cpu_count() or 0))


def test_pinned_by_default_where_every_cpu_is_allowed():
    env: dict = {}
    assert pin_pocl_threads(env) is _all_cpus()
    assert env == ({POCL_AFFINITY_ENV: "1"} if _all_cpus() else {})


@pytest.mark.parametrize("value", ["0", "1"])
def test_the_users_setting_is_kept(value):
    env = {POCL_AFFINITY_ENV: value}
    assert not pin_pocl_threads(env)
    assert env == {POCL_AFFINITY_ENV: value}


@pytest.mark.parametrize("var", ["POCL_MAX_PTHREAD_COUNT", "POCL_CPU_MAX_CU_COUNT"])
def test_not_pinned_when_pocl_starts_more_threads_than_cpus(var):
    env = {var: str((os.cpu_count() or 1) + 1)}
    assert not pin_pocl_threads(env)
    assert POCL_AFFINITY_ENV not in env
    fewer = {var: "1"}
    assert pin_pocl_threads(fewer) is _all_cpus()


def test_not_pinned_when_some_cpu_is_not_allowed(monkeypatch):
    cpus = os.cpu_count() or 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(1, cpus)))  # CPU 0 left out (taskset -c 1-)
    env: dict = {}
    assert not pin_pocl_threads(env)
    assert env == {}
