"""Every composite op, generated from the op table, through its decomposition and (where the CPU backend
has a native kernel) natively, against numpy float64 references (tensorwire.backends.testing)."""

from __future__ import annotations

import pytest

from tensorwire.backends import testing as T
from tensorwire.backends.cpu import NumpyBackend
from tensorwire.protocol.ops import OPS

BACKEND = NumpyBackend()
COMPOSITES = [n for n, op in OPS.items() if not op.primitive]
CASES = T.conformance_cases(load_plugins=False, ops=COMPOSITES)
PARAMS = [pytest.param(c, True, id=f"decomposed-{c}") for c in CASES]
PARAMS += [pytest.param(c, False, id=f"native-{c}") for c in CASES if c.op in BACKEND.native]


def test_every_composite_has_a_reference():
    missing = [n for n in COMPOSITES if not T.has_reference(n)]
    assert not missing, f"composite ops without a reference in tensorwire.backends.testing: {missing}"


def test_cpu_has_native_composites():
    assert BACKEND.native, "the CPU backend declares no native composite: the native path goes untested"


@pytest.mark.parametrize("case,decompose", PARAMS)
def test_composite(case, decompose):
    T.check_case(BACKEND, case, decompose=decompose)
