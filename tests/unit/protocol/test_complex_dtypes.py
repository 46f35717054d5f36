"""Complex dtypes in the protocol (issue 33): torch's promotion with complex64 and complex128, complex values over the
wire and through safetensors, a complex ``full``'s attribute, and the complex ops' inference."""

from __future__ import annotations

import numpy as np
import pytest

from tensorwire.protocol import dtypes as D
from tensorwire.protocol import safetensors_io as ST
from tensorwire.protocol import wire
from tensorwire.protocol.errors import DTypeError, ProtocolError, ShapeError
from tensorwire.protocol.ops import infer

C64, C128 = D.complex64, D.complex128


@pytest.mark.parametrize(("a", "b", "want"), [
    ("complex64", "float32", "complex64"), ("complex64", "float64", "complex128"),
    ("complex64", "float16", "complex64"), ("complex64", "bfloat16", "complex64"), ("complex64", "int64", "complex64"),
    ("complex64", "bool", "complex64"), ("complex128", "float32", "complex128"),
    ("complex64", "complex128", "complex128"), ("complex64", "uint8", "complex64"),
])
def test_promote_types_with_complex(a, b, want):
    assert D.promote_types(D.get(a), D.get(b)) is D.get(want)
    assert D.promote_types(D.get(b), D.get(a)) is D.get(want)


@pytest.mark.parametrize(("ops", "want"), [
    ([("float64", 1), 1j], "complex128"),          # a complex scalar keeps the tensor's value type
    ([("float32", 1), 1j], "complex64"),
    ([("int32", 1), 1j], "complex64"),             # integers: the default complex dtype
    ([("float32", 1), ("complex128", 0)], "complex64"),  # a 0-d complex128 raises the category only
    ([("float64", 1), ("complex64", 0)], "complex128"),
    ([("int64", 1), ("complex128", 0)], "complex128"),
    ([("complex64", 1), 2.5], "complex64"),
    ([("complex64", 1), ("float64", 1)], "complex128"),
])
def test_result_type_with_complex(ops, want):
    got = D.result_type(*[(D.get(x[0]), x[1]) if isinstance(x, tuple) else x for x in ops])
    assert got is D.get(want)


def test_result_type_matches_torch():
    torch = pytest.importorskip("torch")
    names = ["bool", "uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32", "float64", "complex64",
             "complex128"]
    for a in names:
        for b in names:
            for nd in (0, 1):
                ta = torch.zeros([2], dtype=getattr(torch, a))
                tb = torch.zeros([2] * nd, dtype=getattr(torch, b))
                want = str(torch.result_type(ta, tb)).removeprefix("torch.")
                if want == "complex32":  # (float16 with complex: tensorwire has no complex32, it widens)
                    want = "complex64"
                assert D.result_type((D.get(a), 1), (D.get(b), nd)).name == want, (a, b, nd)
            want = str(torch.result_type(torch.zeros(2, dtype=getattr(torch, a)), 1j)).removeprefix("torch.")
            if want == "complex32":  # (float16 with a complex number: tensorwire has no complex32, it widens)
                want = "complex64"
            assert D.result_type((D.get(a), 1), 1j).name == want, a


def test_the_dtypes_themselves():
    assert C64.is_complex and not C64.is_floating_point and C64.is_inexact and C64.itemsize == 8
    assert C128.np == np.complex128 and D.to_real(C128) is D.float64 and D.to_complex(D.float32) is C64
    assert D.to_complex(D.int64) is C64 and D.float_of(C64) is C64 and D.get("cfloat") is C64
    assert D.scalar_dtype(1j) is C64 and D.from_numpy(np.dtype(np.complex128)) is C128


@pytest.mark.parametrize("dt", [C64, C128], ids=lambda d: d.name)
def test_complex_values_over_the_wire(dt):
    a = (np.arange(12) - 5.5 + 1j * np.linspace(-3, 7, 12)).astype(dt.np).reshape(3, 4)
    a[0, 0] = complex(np.nan, -np.inf)
    frame = wire.as_frame(a)
    import zmq

    for f in (frame, bytes(frame), zmq.Frame(bytes(frame))):
        hid, b = wire.array_from_frame(wire.describe(a, 7, 0), [f])
        assert hid == 7 and b.dtype == dt.np and b.tobytes() == a.tobytes()


def test_safetensors_complex64_and_the_refusal_of_complex128():
    a = (np.arange(6) + 1j * np.arange(6)[::-1]).astype(np.complex64).reshape(2, 3)
    data = ST.save_bytes({"z": a})
    back = ST.load_buffer(np.frombuffer(data, np.uint8))
    assert back["z"].dtype == np.complex64 and np.array_equal(back["z"], a)
    header = data[8:8 + int.from_bytes(data[:8], "little")]
    assert b'"C64"' in header
    with pytest.raises(DTypeError, match="complex128"):
        ST.save_bytes({"z": a.astype(np.complex128)})


def test_a_complex_full_takes_real_and_imaginary_parts():
    assert infer("full", [], {"shape": [2], "dtype": "complex64", "value": [1.0, -2.0]}) == ((2,), C64)
    with pytest.raises(ProtocolError):
        infer("full", [], {"shape": [2], "dtype": "complex64", "value": [1.0]})
    with pytest.raises(ProtocolError):
        infer("full", [], {"shape": [2], "dtype": "float32", "value": [1.0, 2.0]})


def test_the_complex_ops_inference():
    assert infer("real", [((3,), C128)], {}) == ((3,), D.float64)
    assert infer("abs", [((3,), C64)], {}) == ((3,), D.float32)
    assert infer("complex", [((3, 1), D.float32), ((4,), D.float32)], {}) == ((3, 4), C64)
    assert infer("fft_r2c", [((5, 8), D.float64)], {"dims": [1], "norm": "none"}) == ((5, 5), C128)
    assert infer("fft_c2r", [((5, 5), C64)], {"dims": [1], "norm": "n", "n": 9}) == ((5, 9), D.float32)
    with pytest.raises(DTypeError):
        infer("imag", [((3,), D.float32)], {})
    with pytest.raises(DTypeError):
        infer("complex", [((3,), D.float32), ((3,), D.float64)], {})
    with pytest.raises(ShapeError):
        infer("fft_c2r", [((5, 4), C64)], {"dims": [1], "norm": "n", "n": 9})
    for op in ("lt", "maximum", "floor_divide"):  # complex numbers have no order
        with pytest.raises(DTypeError, match="complex"):
            infer(op, [((3,), C64), ((3,), C64)], {})
    with pytest.raises(DTypeError, match="complex"):
        infer("amax", [((3,), C64)], {"dims": [0]})
