"""Shape and dtype inference from the op table: bad inputs raise ShapeError/DTypeError with clear messages."""

from __future__ import annotations

import pytest

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DTypeError, IndexOutOfRange, ProtocolError, ShapeError
from tensorwire.protocol.graph import ExpandingBuilder, Value, attrs_key
from tensorwire.protocol.ops import infer
from tensorwire.protocol.shapes import broadcast, check_shape, infer_reshape, norm_dim, norm_dims

F32, I64 = D.float32, D.int64


def m(*shape, dt=F32):
    return (tuple(shape), dt)


# (op, metas, attrs, error class, words the message must contain)
ERRORS = [
    ("add", [m(2, 3), m(4)], {}, ShapeError, ["[2, 3]", "[4]", "broadcast"]),
    ("where", [m(2, dt=D.bool_), m(3), m(2)], {}, ShapeError, ["broadcast"]),
    ("matmul", [m(2, 3), m(4, 5)], {}, ShapeError, ["2x3", "4x5", "cannot be multiplied"]),
    ("matmul", [m(), m(3)], {}, ShapeError, ["at least 1D"]),
    ("matmul", [m(2, 3), m(3, 2, dt=D.float64)], {}, DTypeError, ["float32", "float64"]),
    ("matmul", [m(2, 2, 3), m(3, 3, 2)], {}, ShapeError, ["broadcast"]),
    ("reshape", [m(2, 3)], {"shape": [4, -1]}, ShapeError, ["[4, -1]", "size 6"]),
    ("reshape", [m(2, 3)], {"shape": [-1, -1]}, ShapeError, ["only one dimension"]),
    ("reshape", [m(2, 3)], {"shape": [7]}, ShapeError, ["invalid", "size 6"]),
    ("permute", [m(2, 3)], {"dims": [0]}, ShapeError, ["number of dimensions"]),
    ("permute", [m(2, 3)], {"dims": [0, 0]}, ShapeError, ["duplicate"]),
    ("permute", [m(2, 3)], {"dims": [0, 2]}, IndexOutOfRange, ["dimension out of range"]),
    ("expand", [m(3, 2)], {"shape": [3, 4]}, ShapeError, ["expanded size", "(4)", "(2)"]),
    ("expand", [m(3, 2)], {"shape": [2]}, ShapeError, ["number of sizes"]),
    ("cat", [m(2, 3), m(3, 3)], {"dim": 1}, ShapeError, ["[2, 3]", "[3, 3]"]),
    ("cat", [m(2, 3), m(2, 3, 1)], {"dim": 0}, ShapeError, ["must match"]),
    ("slice", [m(4)], {"starts": [0], "stops": [5], "steps": [1]}, ShapeError, ["out of range", "size 4"]),
    ("slice", [m(4)], {"starts": [0], "stops": [4], "steps": [0]}, ShapeError, ["step must be positive"]),
    ("slice", [m(4, 2)], {"starts": [0], "stops": [4], "steps": [1]}, ShapeError, ["one entry per dimension"]),
    ("pad", [m(2)], {"pads": [-2, -1]}, ShapeError, ["negative"]),
    ("pad", [m(2, 2)], {"pads": [1, 1]}, ShapeError, ["every dimension"]),
    ("sum", [m(2, 3)], {"dims": [2]}, IndexOutOfRange, ["dimension out of range", "[-2, 1]", "got 2"]),
    ("sum", [m(2, 3)], {"dims": [1, -1]}, ShapeError, ["multiple times"]),
    ("amax", [m(0, 3)], {"dims": [0]}, ShapeError, ["non-zero size"]),
    ("amin", [m(2, 0)], {}, ShapeError, ["non-zero size"]),
    ("argmax", [m(0)], {}, ShapeError, ["empty"]),
    ("argmin", [m(3, 0)], {"dim": 1}, ShapeError, ["non-zero size"]),
    ("mean", [m(2, dt=I64)], {}, DTypeError, ["mean()", "floating point", "Int64"]),
    ("bitwise_and", [m(2), m(2)], {}, DTypeError, ["bitwise_and", "integer", "float32"]),
    ("bitwise_not", [m(2)], {}, DTypeError, ["bitwise_not"]),
    ("neg", [m(2, dt=D.bool_)], {}, DTypeError, ["bool", "logical_not"]),
    ("sub", [m(2, dt=D.bool_), m(2, dt=D.bool_)], {}, DTypeError, ["bool", "logical_xor"]),
    ("lerp", [m(2, dt=D.bool_)] * 3, {}, DTypeError, ["bool"]),
    ("gather", [m(3, 4), m(2, 4)], {"dim": 0}, DTypeError, ["index", "integer"]),
    ("gather", [m(3, 4), m(2, dt=I64)], {"dim": 0}, ShapeError, ["same number of dimensions"]),
    ("gather", [m(3, 4), m(2, 5, dt=I64)], {"dim": 0}, ShapeError, ["does not fit"]),
    ("scatter", [m(3, 4), m(2, 4, dt=I64), m(1, 4)], {"dim": 0}, ShapeError, ["does not fit"]),
    ("index", [m(3), m(2, dt=I64), m(2, dt=I64)], {"dim": 0}, ShapeError, ["too many indices"]),
    ("index", [m(3), m(2, dt=D.float32)], {"dim": 0}, DTypeError, ["integer"]),
    ("index_put", [m(3, 4), m(5), m(2, dt=I64)], {"dim": 0}, ShapeError, ["[5]", "[2, 4]"]),
    ("setslice", [m(4), m(3)], {"starts": [0], "stops": [2], "steps": [1]}, ShapeError, ["[3]", "[2]"]),
    ("tril", [m(3)], {}, ShapeError, ["at least 2 dimensions"]),
    ("clamp", [m(3)], {}, ShapeError, ["min", "max"]),
    ("softmax", [m(2, 3)], {"dim": 3}, IndexOutOfRange, ["dimension out of range"]),
    ("full", [], {"shape": [2, -1], "dtype": "float32", "value": 0}, ShapeError, ["negative dimension"]),
    ("full", [], {"shape": [2.5], "dtype": "float32", "value": 0}, ProtocolError, ["list of ints"]),
    ("full", [], {"shape": [2], "dtype": "float128", "value": 0}, ProtocolError, ["dtype"]),
    ("full", [], {"shape": [2], "dtype": "float32", "value": "x"}, ProtocolError, ["number"]),
    ("randint", [], {"shape": [2], "dtype": "int64", "seed": 1, "offset": 0, "low": 5, "high": 5},
     ProtocolError, ["from=5", "to=5"]),
    ("randint", [], {"shape": [2], "dtype": "int64", "seed": 1, "offset": 0}, ProtocolError, ["low"]),
    ("rand", [], {"shape": [2], "dtype": "float32", "seed": "s", "offset": 0}, ProtocolError, ["seed"]),
    ("sum", [m(2)], {"dims": "a"}, ProtocolError, ["dims"]),
    ("sum", [m(2)], {"keepdim": 1}, ProtocolError, ["keepdim"]),
    ("nosuchop", [m(2)], {}, ProtocolError, ["unknown op"]),
    ("add", [m(2)], {}, ProtocolError, ["takes 2 inputs"]),
    ("cat", [], {"dim": 0}, ProtocolError, ["at least one input"]),
]


@pytest.mark.parametrize("op,metas,attrs,exc,words", ERRORS, ids=[f"{e[0]}-{i}" for i, e in enumerate(ERRORS)])
def test_inference_errors(op, metas, attrs, exc, words):
    with pytest.raises(exc) as info:
        infer(op, metas, attrs)
    msg = str(info.value)
    for w in words:
        assert w in msg, f"{w!r} not in the message {msg!r}"


def test_an_unknown_op_with_its_attrs_key_is_a_protocol_error():
    # (infer looks the op up itself when the caller gives the attrs key: a peer's junk name is still a typed error)
    for name in ("nosuchop", ["not", "hashable"]):
        with pytest.raises(ProtocolError, match="unknown op"):
            infer(name, [m(2)], {"dims": [0]}, (("dims", (0,)),))
    assert infer("sum", [m(2, 3)], {"dims": [0]}, (("dims", (0,)),)) == m(3)
    for name in ("nosuchop", ["not", "hashable"]):  # (attrs_key looks the op up itself too)
        with pytest.raises(ProtocolError, match="unknown op"):
            attrs_key(name, {"dims": [0]})
    assert attrs_key("sum", {"dims": [0]}) == (("dims", (0,)),)


def test_error_classes_are_pythons_too():
    with pytest.raises(ValueError):
        infer("add", [m(2), m(3)], {})
    with pytest.raises(TypeError):
        infer("mean", [m(2, dt=I64)], {})
    with pytest.raises(IndexError):
        infer("sum", [m(2)], {"dims": [5]})


GOOD = [
    ("add", [m(2, 1, 4), m(3, 1)], {}, m(2, 3, 4)),
    ("add", [m(0, 3), m(1, 3)], {}, m(0, 3)),
    ("add", [m(), m(2, dt=D.int32)], {}, m(2, dt=F32)),
    ("matmul", [m(3), m(3)], {}, m()),
    ("matmul", [m(2, 1, 3, 4), m(5, 4, 2)], {}, m(2, 5, 3, 2)),
    ("matmul", [m(3), m(2, 3, 4)], {}, m(2, 4)),
    ("reshape", [m(2, 3, 4)], {"shape": [4, -1]}, m(4, 6)),
    ("reshape", [m(0, 3)], {"shape": [3, 0]}, m(3, 0)),
    ("expand", [m(3, 1)], {"shape": [2, -1, 4]}, m(2, 3, 4)),
    ("sum", [m(2, 3, 4)], {"dims": [0, -1], "keepdim": True}, m(1, 3, 1, dt=F32)),
    ("sum", [m(2, 3, dt=D.int32)], {}, m(dt=I64)),
    ("sum", [m()], {"dims": [0], "keepdim": True}, m()),
    ("amax", [m(0, 3)], {"dims": [1]}, m(0)),
    ("amax", [m()], {"dims": [0]}, m()),
    ("argmax", [m(3, 4)], {"dim": -1, "keepdim": True}, m(3, 1, dt=I64)),
    ("mean", [m(2, 3, dt=D.float16)], {"dims": [1]}, m(2, dt=D.float16)),
    ("cat", [m(2, 3, dt=D.int32), m(2, 1)], {"dim": -1}, m(2, 4)),
    ("slice", [m(5, 6)], {"starts": [1, 0], "stops": [5, 6], "steps": [2, 4]}, m(2, 2)),
    ("pad", [m(4, 5)], {"pads": [-1, 0, 1, -2]}, m(3, 4)),
    ("index", [m(4, 3, 5), m(2, 1, dt=I64), m(4, dt=D.int32)], {"dim": 1}, m(4, 2, 4)),
    ("softmax", [m(2, dt=D.int32)], {"dim": 0}, m(2)),
    ("exp", [m(2, dt=D.bool_)], {}, m(2)),
    ("div", [m(2, dt=I64), m(2, dt=I64)], {}, m(2)),
    ("randint", [], {"shape": [3], "dtype": "int32", "seed": 0, "offset": 0, "low": 0, "high": 4}, m(3, dt=D.int32)),
]


@pytest.mark.parametrize("op,metas,attrs,want", GOOD, ids=[f"{g[0]}-{i}" for i, g in enumerate(GOOD)])
def test_inference(op, metas, attrs, want):
    assert infer(op, metas, attrs) == want


def test_shape_helpers():
    assert broadcast((3, 1), (1, 4)) == (3, 4) and broadcast((), (2,)) == (2,)
    assert check_shape(5) == (5,) and check_shape([2, 0]) == (2, 0)
    with pytest.raises(ShapeError, match="at most"):
        check_shape((1,) * 65)
    with pytest.raises(ShapeError, match="more than the limit"):
        check_shape((1 << 21, 1 << 21))
    with pytest.raises(ShapeError, match="sequence of ints"):
        check_shape([2.5])  # a float is not a size (it used to be truncated silently)
    assert infer_reshape((2, 3), (-1,)) == (6,)
    assert norm_dim(-1, 3) == 2 and norm_dim(0, 0) == 0 and norm_dim(-1, 0) == 0
    with pytest.raises(IndexOutOfRange):
        norm_dim(1, 0)
    with pytest.raises(ProtocolError):
        norm_dim(True, 2)
    assert norm_dims(None, 3) == (0, 1, 2) and norm_dims([-1, 0], 3) == (0, 2)


def test_composite_validates_as_itself_before_decomposing():
    """A composite's own shape rule runs first, so its error names the composite, not an inner op."""
    b = ExpandingBuilder()
    x = Value((2, 3), D.int64, -1)
    with pytest.raises(DTypeError, match="mean"):
        b.op("mean", x)
    with pytest.raises(IndexOutOfRange):
        b.op("softmax", Value((2, 3), F32, -1), dim=2)
    y = b.op("softmax", Value((2, 3), F32, -1), dim=1)
    assert (y.shape, y.dtype) == ((2, 3), F32) and {n[0] for n in b.nodes} >= {"exp", "sum", "div"}
