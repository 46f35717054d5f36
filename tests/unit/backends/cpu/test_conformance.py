"""The CPU backend passes the conformance suite (tensorwire.backends.testing), and the suite itself holds."""

from __future__ import annotations

import numpy as np
import pytest

from tensorwire.backends import testing as T
from tensorwire.backends.cpu import NumpyBackend
from tensorwire.backends.testing.cases import _expand
from tensorwire.protocol import dtypes as D
from tensorwire.protocol.ops import OPS, OpDef, primitives

BACKEND = NumpyBackend()
CASES = T.conformance_cases()


@pytest.mark.parametrize("case", CASES, ids=str)
def test_conformance(case):
    T.check_case(BACKEND, case)


def test_every_primitive_is_covered():
    covered = {c.op for c in CASES}
    missing = [p for p in primitives() if p not in covered or not T.has_reference(p)]
    assert not missing, f"primitives without conformance cases: {missing}"
    assert not BACKEND.missing_primitives()


def test_cases_cover_dtypes_shapes_and_failures():
    names = [c.name for c in CASES]
    for dt in T.SELECTED_DTYPES:
        assert any(f"add[{dt.name}" in n for n in names if dt is not D.bool_) or dt is D.bool_
        assert f"roundtrip[{dt.name}]" in names
    assert any(":0d" in n for n in names) and any("0x3" in n for n in names)
    assert any("keepdim=True" in n for n in names)
    assert {"failure[index-error-propagates]", "failure[shape-error-propagates]",
            "failure[failed-input-propagates]", "replay[fresh-inputs]"} <= set(names)
    assert len(set(names)) == len(names)


@pytest.fixture
def temp_op():
    """Register ops for one test and take them out of the table afterwards."""
    added = []

    def add(op: OpDef):
        OPS[op.name] = op
        added.append(op.name)
        return op
    yield add
    for n in added:
        OPS.pop(n, None)


def _same(metas, attrs):
    return metas[0]


def test_a_new_primitive_without_generator_fails(temp_op):
    temp_op(OpDef("zz_new_primitive", 1, _same))
    cases = T.conformance_cases(load_plugins=False, ops=["zz_new_primitive"])
    assert [c.name for c in cases] == ["zz_new_primitive[no-generator]"]
    with pytest.raises(T.ConformanceError, match="no conformance generator"):
        T.check_case(BACKEND, cases[0])
    report = T.run_conformance(BACKEND, cases=cases)
    assert not report.ok and "zz_new_primitive[no-generator]" in report.failed


def test_composite_without_reference_skips_unless_native(temp_op):
    temp_op(OpDef("zz_new_composite", 1, _same, decompose=lambda g, x, attrs: g.op("neg", x)))
    case, = T.conformance_cases(load_plugins=False, ops=["zz_new_composite"])
    with pytest.raises(pytest.skip.Exception):
        T.check_case(BACKEND, case)
    native = NumpyBackend()
    native.add_kernels({"zz_new_composite": lambda ins, a, s, dt: -ins[0]})
    with pytest.raises(T.ConformanceError, match="native kernel"):
        T.check_case(native, case)


def test_custom_op_examples_are_checked(temp_op):
    """A custom op with examples: against its reference, or its native kernel against its decomposition."""
    ex = [([np.array([1.0, -2.0, 3.5], np.float32)], {})]
    temp_op(OpDef("zz_double", 1, _same, decompose=lambda g, x, attrs: g.op("add", x, x),
                  extra={"examples": ex, "reference": lambda xs, a: 2 * xs[0]}))
    temp_op(OpDef("zz_triple", 1, _same, decompose=lambda g, x, attrs: g.op("add", g.op("add", x, x), x),
                  extra={"examples": ex}))
    cases = T.conformance_cases(load_plugins=False, ops=["zz_double", "zz_triple"])
    assert len(cases) == 2
    for c in cases:
        T.check_case(BACKEND, c)
    good = NumpyBackend()
    good.add_kernels({"zz_double": lambda ins, a, s, dt: ins[0] * 2, "zz_triple": lambda ins, a, s, dt: ins[0] * 3})
    for c in cases:
        T.check_case(good, c)
    bad = NumpyBackend()
    bad.add_kernels({"zz_double": lambda ins, a, s, dt: ins[0] * 3, "zz_triple": lambda ins, a, s, dt: ins[0] * 2})
    for c in cases:
        with pytest.raises(T.ConformanceError):
            T.check_case(bad, c)


def _broken(op, fn):
    b = NumpyBackend()
    b.add_kernels({op: fn})
    return b


@pytest.mark.parametrize("op,kernel,fragment", [
    ("exp", lambda ins, a, s, dt: (np.exp(ins[0].astype(np.float64)) * 1.001).astype(dt.np), "exp["),
    ("round", lambda ins, a, s, dt: np.floor(ins[0].astype(np.float64) + 0.5).astype(dt.np), "round[float32:special"),
    ("rand", lambda ins, a, s, dt: np.zeros(s, dt.np), "rand["),
    ("add", lambda ins, a, s, dt: (ins[0].astype(np.float16) + ins[1].astype(np.float16)).astype(dt.np),
     "add["),  # computes in float16
    ("gather", lambda ins, a, s, dt: np.zeros(s, dt.np), "gather[out-of-range]"),
    ("neg", lambda ins, a, s, dt: np.negative(ins[0], out=ins[0]), "neg["),
    ("argmax", lambda ins, a, s, dt: np.zeros(s, np.int32), "argmax["),
])
def test_suite_catches_broken_kernels(op, kernel, fragment):
    """The suite is not a rubber stamp: a wrong kernel fails its cases."""
    cases = [c for c in CASES if c.name.startswith(fragment)]
    assert cases
    report = T.run_conformance(_broken(op, kernel), cases=cases)
    assert report.failed, f"a broken {op} kernel passed {fragment}"


def test_decompose_mode_expands_composites():
    nodes = [["softmax", [-1], {"dim": 1}], ["relu", [0], None]]
    metas = [((2, 3), D.float32)]
    new, exp, mapping = _expand(nodes, {1: "x"}, metas)
    ops = {n[0] for n in new}
    assert "softmax" not in ops and "relu" not in ops and {"exp", "amax", "sum", "maximum"} <= ops
    assert list(exp) == [len(new) - 1] and mapping[1] == len(new) - 1
