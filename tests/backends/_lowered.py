"""The kernels the conformance cases lower to, found without running them (for building a stand-in's kernels ahead).

A stand-in that runs kernels as their OpenCL twins on PoCL pays PoCL's fixed cost per program; building all the
twins of a suite in a few programs first (``CLRuntime.prebuild``) makes the suite run several times faster.
"""

from __future__ import annotations

import pytest

from tensorwire.backends import testing as T


class _Dry(Exception):
    pass


def _dry(*args):
    raise _Dry()


def kernel_lists(backend, cases) -> list:
    """The kernels of every fragment ``cases`` run on ``backend``'s device 0 (one list a fragment), lowered with the
    device's ``lowering_options`` and never run."""
    from tensorwire.backends.codegen.lower import lower

    dev = T._device(backend, 0)
    lists = []

    def collect(plan, keep):
        lw = lower(plan.program.steps, set(keep), dev.lowering_options)
        if lw.kernels:
            lists.append(lw.kernels)
        return _dry

    dev.runner, dev.run_step = collect, _dry  # instance attributes: every case lowers, nothing runs
    try:
        for case in cases:
            try:
                T.check_case(backend, case)
            except (Exception, pytest.skip.Exception):  # every dry case fails (or skips): only the lowering counts
                pass
    finally:
        del dev.runner, dev.run_step
    return lists
