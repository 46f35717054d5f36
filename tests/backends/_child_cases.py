"""The conformance cases as the backend tests' child processes run them (``_opencl_child``, ``_gpu_child``,
``_mps_child``): the kernels the cases lower to, found without running them, and the cases' outcomes.

A stand-in that runs kernels as their OpenCL twins on PoCL pays PoCL's fixed cost per program; building all the
twins of a suite in a few programs first (``CLRuntime.prebuild``) makes the suite run several times faster.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from tensorwire.backends import executor as X
from tensorwire.backends import testing as T
from tensorwire.backends.testing.cases import _Ctx, _Err
from tensorwire.backends.testing.suite import kernel_lists  # noqa: F401 - the children's name
from tensorwire.backends.testing.suite import sample_cases as sample

#: set to 1 to run the whole conformance suite where a backend's tests run :func:`conformance_sample` (OpenCL, and
#: the CUDA and ROCm stand-ins): ``TENSORWIRE_FULL_CONFORMANCE=1 python -m pytest tests/backends/test_opencl.py``
FULL_ENV = "TENSORWIRE_FULL_CONFORMANCE"


def full_conformance() -> bool:
    """Whether :data:`FULL_ENV` asks for the whole suite."""
    return os.environ.get(FULL_ENV, "") not in ("", "0")


def conformance_sample(cases: list, sampler: Callable[[list], list] = sample) -> list:
    """The cases a backend's tests run: ``sampler(cases)`` (by default :func:`sample`, the first and the middle case of
    every op and every round-trip, replay and failure case: the same cases on every run, no randomness), or all of
    them when :data:`FULL_ENV` is set."""
    return list(cases) if full_conformance() else sampler(cases)


def assert_case_passed(outcomes: dict, name: str, stepwise_ok: bool = False) -> None:
    """A test's check of one case's outcome from :func:`run_cases` (as a child wrote it): skipped with the case's
    reason, else passed, and as fused kernels (run step by step only where a node is meant to fail, unless
    ``stepwise_ok``)."""
    status, msg, stepwise, expects_failure = outcomes[name]
    if status == "skip":
        pytest.skip(msg)
    assert status == "ok", msg
    assert stepwise_ok or not stepwise or expects_failure, f"{name} ran step by step although nothing was meant to fail"


def run_cases(backend, cases, failed: Callable[[Exception], str] = lambda e: "fail") -> dict:
    """``{name: [status, message, ran step by step, a failure was expected]}`` for every case run on ``backend``:
    status ``ok``, ``skip``, or ``failed(exception)`` (``fail`` unless the caller names a kinder one). "Step by step"
    says the executor re-ran a fragment one node at a time (a kernel failed, or the case expects an error)."""
    seen = {"execute": 0, "expects_failure": False}
    real_execute, real_run = X.execute, _Ctx.run

    def execute(*a, **k):
        seen["execute"] += 1
        return real_execute(*a, **k)

    def run(self, g, **kw):
        if any(isinstance(w, _Err) for w in g.expect.values()) or any(isinstance(a, X.Fail) for a in g.inputs):
            seen["expects_failure"] = True
        return real_run(self, g, **kw)

    X.execute, _Ctx.run = execute, run
    out = {}
    try:
        for case in cases:
            seen.update(execute=0, expects_failure=False)
            try:
                T.check_case(backend, case)
                status, msg = "ok", ""
            except pytest.skip.Exception as e:
                status, msg = "skip", str(e)
            except Exception as e:
                status, msg = failed(e), f"{type(e).__name__}: {e}"
            out[case.name] = [status, msg, seen["execute"] > 0, seen["expects_failure"]]
    finally:
        X.execute, _Ctx.run = real_execute, real_run
    return out
