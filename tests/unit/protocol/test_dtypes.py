"""Type promotion follows PyTorch: against torch where it is installed, and a hand-written table always."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tensorwire.protocol import dtypes as D
from tensorwire.protocol import ops as O
from tensorwire.protocol.errors import DTypeError

ALL = D.ALL
SCALARS = [True, 3, -1000, 2.5]

# hand-written: (a, b) -> torch.promote_types(a, b)
PROMOTE = [
    ("bool", "bool", "bool"), ("bool", "uint8", "uint8"), ("bool", "float16", "float16"),
    ("uint8", "int8", "int16"), ("uint8", "int16", "int16"), ("uint8", "int64", "int64"),
    ("int8", "int32", "int32"), ("int32", "int64", "int64"), ("int64", "float16", "float16"),
    ("int32", "bfloat16", "bfloat16"), ("float16", "bfloat16", "float32"), ("bfloat16", "float32", "float32"),
    ("float32", "float64", "float64"), ("uint8", "float64", "float64"), ("int64", "bool", "int64"),
]

# hand-written: operands ((dtype, ndim) for a tensor, or a Python scalar) -> torch.result_type
RESULT = [
    ((("int32", 1), 2.5), "float32"),  # a Python float only raises the category (to the default dtype)
    ((("int8", 1), 1000), "int8"),  # a Python int does not widen an int tensor
    ((("uint8", 2), True), "uint8"),
    ((("bool", 1), 1), "int64"),
    ((("bool", 1), True), "bool"),
    ((("float16", 1), 2.5), "float16"),
    ((("float16", 1), ("float64", 0)), "float16"),  # dimensioned tensors win over 0-d within a category
    ((("int32", 3), ("int64", 0)), "int32"),
    ((("int32", 1), ("float64", 0)), "float64"),  # a 0-d tensor of a higher category keeps its dtype
    ((("bool", 1), ("int16", 0)), "int16"),
    ((("float64", 0), ("float32", 0)), "float64"),  # 0-d with 0-d: ordinary promotion
    ((("int64", 0), 2.5), "float32"),
    ((("uint8", 1), ("int8", 1)), "int16"),
    ((("bfloat16", 1), ("float16", 1)), "float32"),
    ((("bfloat16", 0), ("int64", 1)), "bfloat16"),
    ((True, 3), "int64"),
    ((3, 2.5), "float32"),
]


def _ops(spec):
    return [(D.BY_NAME[x[0]], x[1]) if isinstance(x, tuple) else x for x in spec]


@pytest.mark.parametrize("a,b,want", PROMOTE)
def test_promote_types_table(a, b, want):
    assert D.promote_types(D.BY_NAME[a], D.BY_NAME[b]) is D.BY_NAME[want]
    assert D.promote_types(D.BY_NAME[b], D.BY_NAME[a]) is D.BY_NAME[want]


@pytest.mark.parametrize("spec,want", RESULT, ids=[str(r[0]) for r in RESULT])
def test_result_type_table(spec, want):
    assert D.result_type(*_ops(spec)) is D.BY_NAME[want]


def test_promote_types_is_symmetric_and_idempotent():
    for a, b in itertools.product(ALL, ALL):
        assert D.promote_types(a, b) is D.promote_types(b, a)
        assert D.promote_types(a, a) is a


def test_result_type_needs_an_operand_and_rejects_non_numbers():
    with pytest.raises(DTypeError):
        D.result_type()
    with pytest.raises(DTypeError):
        D.result_type((D.int32, 1), "x")


def test_get_resolves_names_aliases_numpy_and_python_types():
    assert D.get("float32") is D.float32 and D.get("torch.half") is D.float16 and D.get("bf16") is D.bfloat16
    assert D.get(np.dtype("int16")) is D.int16 and D.get(np.float64) is D.float64
    assert D.get(bool) is D.bool_ and D.get(int) is D.int64 and D.get(float) is D.float32
    assert D.from_numpy(D.bfloat16.np) is D.bfloat16
    with pytest.raises(DTypeError, match="unknown dtype"):
        D.get("float128")
    assert D.get(np.complex64) is D.complex64 and D.get("cdouble") is D.complex128 and D.get(complex) is D.complex64
    with pytest.raises(DTypeError, match="not supported"):
        D.get(np.clongdouble)
    with pytest.raises(DTypeError, match="not supported"):
        D.from_numpy(np.dtype("uint32"))


def test_codes_and_names_are_unique():
    assert len({d.code for d in ALL}) == len(ALL) == len({d.name for d in ALL})
    assert all(D.BY_CODE[d.code] is d and D.BY_NAME[d.name] is d for d in ALL)


# -- against PyTorch ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def _name(torch_dtype) -> str:
    """A torch dtype's name in tensorwire's terms: torch's complex32 (float16 with complex) is complex64 here, which has
    no complex32."""
    return str(torch_dtype).removeprefix("torch.").replace("complex32", "complex64")


def _t(torch, dt, ndim):
    return torch.ones((2,) * ndim, dtype=getattr(torch, dt.name))


def test_promote_types_matches_torch(torch):
    for a, b in itertools.product(ALL, ALL):
        want = torch.promote_types(getattr(torch, a.name), getattr(torch, b.name))
        assert D.promote_types(a, b).name == _name(want), (a, b)


@pytest.mark.parametrize("na,nb", [(1, 1), (1, 0), (0, 1), (0, 0), (2, 0)])
def test_result_type_tensor_pairs_match_torch(torch, na, nb):
    for a, b in itertools.product(ALL, ALL):
        want = torch.result_type(_t(torch, a, na), _t(torch, b, nb))
        got = D.result_type((a, na), (b, nb))
        assert got.name == _name(want), (a, na, b, nb)


@pytest.mark.parametrize("ndim", [0, 1])
def test_result_type_tensor_scalar_matches_torch(torch, ndim):
    for a, s in itertools.product(ALL, SCALARS):
        want = torch.result_type(_t(torch, a, ndim), s)
        assert D.result_type((a, ndim), s).name == _name(want), (a, ndim, s)
        want = torch.result_type(s, _t(torch, a, ndim))
        assert D.result_type(s, (a, ndim)).name == _name(want), (s, a, ndim)


def test_hand_table_agrees_with_torch(torch):
    for spec, want in RESULT:
        args = [_t(torch, D.BY_NAME[x[0]], x[1]) if isinstance(x, tuple) else x for x in spec]
        if not any(isinstance(a, torch.Tensor) for a in args):
            continue  # torch.result_type needs a tensor operand
        assert str(torch.result_type(*args)).removeprefix("torch.") == want, spec


_BINARY_TORCH = {"add": "add", "mul": "mul", "div": "div", "maximum": "maximum", "eq": "eq", "lt": "lt",
                 "atan2": "atan2", "remainder": "remainder", "floor_divide": "floor_divide",
                 "logical_and": "logical_and", "bitwise_and": "bitwise_and", "pow": "pow", "sub": "sub",
                 "bitwise_left_shift": "bitwise_left_shift", "bitwise_right_shift": "bitwise_right_shift",
                 "gcd": "gcd", "lcm": "lcm"}


@pytest.mark.parametrize("op", sorted(_BINARY_TORCH))
def test_binary_op_result_dtypes_match_torch(torch, op):
    """The op table's output dtype is torch's, wherever torch accepts the dtypes."""
    fn = getattr(torch, _BINARY_TORCH[op])
    checked = 0
    for (a, na), (b, nb) in itertools.product(itertools.product(ALL, (1, 0)), repeat=2):
        try:
            want = fn(_t(torch, a, na), _t(torch, b, nb)).dtype
        except (RuntimeError, TypeError):
            continue
        try:
            _, got = O.infer(op, [((2,) * na, a), ((2,) * nb, b)], {})
        except DTypeError:
            pytest.fail(f"{op}({a.name}[{na}d], {b.name}[{nb}d]): torch gives {want}, the op table refuses")
        assert got.name == _name(want), (op, a, na, b, nb)
        checked += 1
    assert checked


@pytest.mark.parametrize("op", ["bitwise_left_shift", "bitwise_right_shift", "gcd", "lcm"])
def test_integer_only_ops_refuse_what_torch_refuses(torch, op):
    """torch's integer-only binary ops: the op table refuses exactly the dtype pairs torch's CPU kernels refuse
    (floats, complex, bool with bool; a bool tensor with an integer one is that integer dtype, accepted)."""
    fn = getattr(torch, op)
    for (a, na), (b, nb) in itertools.product(itertools.product(ALL, (1, 0)), repeat=2):
        try:
            fn(_t(torch, a, na), _t(torch, b, nb))
            torch_accepts = True
        except (RuntimeError, TypeError):  # (torch's NotImplementedError is a RuntimeError)
            torch_accepts = False
        try:
            O.infer(op, [((2,) * na, a), ((2,) * nb, b)], {})
            accepts = True
        except DTypeError:
            accepts = False
        assert accepts == torch_accepts, (op, a.name, na, b.name, nb, torch_accepts)


@pytest.mark.parametrize("op", ["exp", "sqrt", "sin", "neg", "abs", "floor", "sum", "mean", "cumsum", "argmax",
                                "isnan", "logical_not", "bitwise_not"])
def test_unary_op_result_dtypes_match_torch(torch, op):
    fn = {"sum": lambda x: x.sum(0), "mean": lambda x: x.mean(0), "cumsum": lambda x: x.cumsum(0),
          "argmax": lambda x: x.argmax(0)}.get(op) or getattr(torch, op)
    attrs = {"dims": [0]} if op in ("sum", "mean") else ({"dim": 0} if op in ("cumsum", "argmax") else {})
    for a in ALL:
        try:
            want = fn(_t(torch, a, 1)).dtype
        except (RuntimeError, TypeError):
            continue
        _, got = O.infer(op, [((2,), a)], attrs)
        assert got.name == _name(want), (op, a)
