"""Fixtures of the compiled CPU backend's tests (test_nested_loops.py, test_outer_product_fusion.py)."""

from __future__ import annotations

import collections

import pytest

from tensorwire.backends import executor as X
from tensorwire.backends.cpu import CompiledBackend


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
