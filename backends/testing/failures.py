"""Failure propagation cases: a node failing at run time, one failing inference and a failed external
input make their dependents fail with ``DependencyFailed`` while independent nodes still succeed."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from tensorwire.protocol import dtypes as D

from .. import executor as X
from .cases import Case, _Graph
from .inputs import _case, _f64, _vals


def _failure_cases() -> Iterator[Case]:
    def build_dep(rng):
        g = _Graph()
        x = _vals(rng, (3, 4), D.float32)
        xi = g.input(x)
        bad = g.op("gather", xi, g.input(np.array([[0, 9, 1, 2]])), dim=0)  # out of range at run time
        g.err(bad, "IndexError")
        d1 = g.op("neg", bad)
        g.err(d1, "DependencyFailed")
        ok = g.op("exp", xi)
        g.ref(ok, np.exp(_f64(x)))
        d2 = g.op("add", d1, ok)
        g.err(d2, "DependencyFailed")
        g.ref(g.op("mul", ok, xi), np.exp(_f64(x)) * _f64(x))
        return g
    yield _case("failure[index-error-propagates]", "<failure>", build_dep)

    def build_infer(rng):
        g = _Graph()
        x = _vals(rng, (2, 3), D.float32)
        xi = g.input(x)
        bad = g.op("add", xi, g.input(_vals(rng, (4,), D.float32)))  # fails inference
        g.err(bad, "ShapeError")
        g.err(g.op("relu", bad), "DependencyFailed")
        g.err(g.op("softmax", bad, dim=0), "DependencyFailed")
        g.ref(g.op("abs", xi), np.abs(_f64(x)))
        return g
    yield _case("failure[shape-error-propagates]", "<failure>", build_infer)

    def build_ext(rng):
        g = _Graph()
        x = _vals(rng, (2,), D.float32)
        failed = X.Fail({"code": "NotFound", "message": "handle 5 is gone"})
        fi = g.input(failed)
        xi = g.input(x)
        g.err(g.op("neg", fi), "DependencyFailed")
        g.ref(g.op("neg", xi), -_f64(x))
        return g
    yield _case("failure[failed-input-propagates]", "<failure>", build_ext)



