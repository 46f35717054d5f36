"""Shared fixtures: real clusters started on free local ports, one per test module."""

from __future__ import annotations

import faulthandler
import os
import sys

import pytest

os.environ.setdefault("TENSORWIRE_START_TIMEOUT", "120")

# pytest-timeout (300 s, pyproject) fails a test stuck in Python; a test stuck inside native code (a driver, MLX, a
# compiler) never returns to the interpreter to see its signal. This watchdog runs in C, without the GIL: past it,
# the run prints every thread's stack and exits, so a hang costs minutes and names itself instead of eating CI.
HARD_LIMIT_S = 900


def _stderr_fd(config) -> int:
    """The terminal's stderr, past pytest's capture (the descriptor pytest's own faulthandler plugin writes to)."""
    try:
        from _pytest.faulthandler import fault_handler_stderr_fd_key

        return config.stash[fault_handler_stderr_fd_key]
    except (ImportError, KeyError):
        return sys.__stderr__.fileno()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Arm the native watchdog for the test's setup, call and teardown."""
    faulthandler.dump_traceback_later(HARD_LIMIT_S, exit=True, file=_stderr_fd(item.config))
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="module")
def cluster():
    """A LocalCluster with cpu:0 and cpu:1 for the whole test module."""
    import tensorwire as tw

    with tw.LocalCluster(devices=["cpu:0", "cpu:1"]) as c:
        yield c


@pytest.fixture(scope="module")
def session(cluster):
    """A session on the module's cluster, the default one while the module runs."""
    import tensorwire as tw

    s = tw.connect(cluster.address)
    yield s
    s.close()
    tw.set_session(None)
