"""Fixtures of the backend tests: the device-generic tests' record and parameters (``_device_checks``), and the
compiled CPU backend's (test_nested_loops.py, test_outer_product_fusion.py)."""

from __future__ import annotations

import collections

import pytest

from tensorwire.backends import executor as X
from tensorwire.backends.cpu import CompiledBackend
from tests.backends._device_checks import DeviceUnderTest


def pytest_generate_tests(metafunc):
    """Parametrise the shared device tests a module imports from ``_device_checks`` by its ``UNDER_TEST``."""
    under_test = getattr(metafunc.module, "UNDER_TEST", None)
    if not isinstance(under_test, DeviceUnderTest):
        return
    for name, (values, ids) in under_test.parameters().items():
        if name in metafunc.fixturenames:
            metafunc.parametrize(name, values, ids=ids)


@pytest.fixture(scope="module")
def device_under_test(request) -> DeviceUnderTest:
    """The module's device as its ``UNDER_TEST`` describes it (for the tests of ``_device_checks``)."""
    return request.module.UNDER_TEST


@pytest.fixture(scope="module")
def compiled_device():
    """A compiled CPU device that compiles every fragment, however small."""
    return CompiledBackend(min_work=0, large_runs=0).open(0)


@pytest.fixture
def fallbacks(monkeypatch):
    """Counts the fragments the executor had to interpret step by step (a fused kernel failed)."""
    seen = collections.Counter()
    real = X.execute

    def execute(*a, **k):
        seen["n"] += 1
        return real(*a, **k)
    monkeypatch.setattr(X, "execute", execute)
    return seen
