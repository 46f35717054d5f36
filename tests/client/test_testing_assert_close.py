"""``tw.testing.assert_close`` and ``make_tensor`` against torch's ``torch.testing``: the same outcome (pass, or the
same exception type and message, up to the library's names: ``tensorwire.float32`` for ``torch.float32``, the
class names, ``cpu:0`` for ``cpu``) on the same inputs: tensors of every kind of dtype, default tolerances, NaN and
infinities, ``equal_nan``, ``check_dtype``, ``msg``, numbers, numpy arrays, nested sequences and mappings; and
``make_tensor``'s ranges, dtypes and checks.

torch is the reference (imported through a fixture: it is optional)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tensorwire as tw
from tensorwire.testing import assert_close, make_tensor

pytestmark = pytest.mark.usefixtures("session")


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch", reason="PyTorch is the reference here (pip install torch==2.13.0)")


def _outcome(fn):
    try:
        fn()
    except Exception as e:  # (the outcome compared: any exception's type and message)
        text = str(e).replace("tensorwire.", "torch.").replace("cpu:0", "cpu")
        text = re.sub(r"<class '[\w.]*\.(Tensor|Parameter)'>", r"<class '\1'>", text)
        return type(e).__name__, text
    return None


NAN, INF = float("nan"), float("inf")
TENSOR_CASES = [
    ([1.0, 2.0, 3.0], [1.0, 2.5, 3.0], "float32"), ([1.0, 2.0, 3.0], [1.0, 2.5, 3.0], "float64"),
    ([1, 2, 3], [1, 4, 3], "int64"), ([[1.0, 2.0], [3.0, NAN]], [[1.0, 2.0], [3.0, NAN]], "float32"),
    ([[1.0, 2.0], [3.0, 4.0]], [[1.0, 2.0], [3.0, 5.0]], "float32"), (1.5, 1.0, "float32"),
    ([1.0, 0.0], [1.0, 1e-6], "float32"), ([0.0, 1.0], [0.0, 0.0], "float64"), ([True, False], [True, True], "bool"),
    ([1e-6, 2.0], [0.0, 2.0], "float16"), ([INF, 1.0], [INF, 1.0], "float32"), ([INF, 1.0], [-INF, 1.0], "float32"),
    ([1.0], [1.01], "bfloat16"), ([1.0], [1.1], "bfloat16"), ([1, 2], [2, 1], "uint8"),
    ([1 + 1j], [1 + 2j], "complex64"), ([1.0, 1.0 + 1e-6], [1.0, 1.0], "float32"),
]


@pytest.mark.parametrize("actual,expected,dtype", TENSOR_CASES, ids=[str(i) for i in range(len(TENSOR_CASES))])
def test_tensors_compare_as_torch(torch, actual, expected, dtype):
    mine = _outcome(lambda: assert_close(tw.tensor(actual, dtype=getattr(tw, dtype)),
                                         tw.tensor(expected, dtype=getattr(tw, dtype))))
    ref = _outcome(lambda: torch.testing.assert_close(torch.tensor(actual, dtype=getattr(torch, dtype)),
                                                      torch.tensor(expected, dtype=getattr(torch, dtype))))
    assert mine == ref


OPTION_CASES = {
    "equal_nan": lambda L: L.testing.assert_close(L.tensor([NAN]), L.tensor([NAN]), equal_nan=True),
    "dtype": lambda L: L.testing.assert_close(L.tensor([1.0]), L.tensor([1.0], dtype=L.float64)),
    "no_dtype_check": lambda L: L.testing.assert_close(L.tensor([1.0]), L.tensor([1.01], dtype=L.float64),
                                                       check_dtype=False),
    "promoted": lambda L: L.testing.assert_close(L.tensor([1, 2]), L.tensor([1.0, 2.0]), check_dtype=False),
    "shape": lambda L: L.testing.assert_close(L.tensor([1.0]), L.tensor([1.0, 2.0])),
    "tolerances": lambda L: L.testing.assert_close(L.tensor([1.0]), L.tensor([1.1]), rtol=0.2, atol=0),
    "one_tolerance": lambda L: L.testing.assert_close(L.tensor([1.0]), L.tensor([1.1]), rtol=0.2),
    "msg": lambda L: L.testing.assert_close(L.tensor([1.0]), L.tensor([1.1]), msg="custom"),
    "msg_fn": lambda L: L.testing.assert_close(L.tensor([1.0]), L.tensor([1.1]), msg=lambda m: "X" + m),
    "nested": lambda L: L.testing.assert_close({"a": [L.tensor([1.0]), 2], "b": None},
                                               {"a": [L.tensor([1.0]), 3], "b": None}),
    "nested_ok": lambda L: L.testing.assert_close([L.tensor([1.0]), (2, 3.0)], [L.tensor([1.0]), (2, 3.0)]),
    "keys": lambda L: L.testing.assert_close({"a": 1}, {"b": 1}),
    "lengths": lambda L: L.testing.assert_close([1, 2], [1, 2, 3]),
    "number_types": lambda L: L.testing.assert_close(1, 1.0),
    "numbers_close": lambda L: L.testing.assert_close(1.0, 1.0 + 1e-8),
    "numbers_far": lambda L: L.testing.assert_close(1.0, 1.1),
    "tensor_and_number": lambda L: L.testing.assert_close(L.tensor(1.0), 1.0),
    "tensor_and_array": lambda L: L.testing.assert_close(L.tensor([1.0]), np.array([1.0], dtype=np.float32)),
    "arrays": lambda L: L.testing.assert_close(np.array([1.0, 2.0]), np.array([1.0, 2.1])),
    "numpy_scalars": lambda L: L.testing.assert_close(np.float32(1.0), np.float32(1.0)),
    "none": lambda L: L.testing.assert_close(None, 1),
    "bools": lambda L: L.testing.assert_close(True, False),
    "strings": lambda L: L.testing.assert_close("a", "a"),
    "subclasses": lambda L: L.testing.assert_close(L.nn.Parameter(L.tensor([1.0])), L.tensor([1.0]),
                                                   allow_subclasses=False),
}


@pytest.mark.parametrize("case", list(OPTION_CASES))
def test_options_inputs_and_messages_as_torch(torch, case):
    assert _outcome(lambda: OPTION_CASES[case](tw)) == _outcome(lambda: OPTION_CASES[case](torch))


def test_devices_are_tensorwires():
    a = tw.tensor([1.0, 2.0], device="cpu:0")
    assert_close(a, a.clone())
    devices = tw.devices() if callable(getattr(tw, "devices", None)) else []
    other = next((d for d in devices if str(d) != "cpu:0"), None)
    if other is None:
        pytest.skip("the test cluster has one device")
    b = a.to(other)
    with pytest.raises(AssertionError, match=f"The values for attribute 'device' do not match: cpu != {other}"):
        assert_close(a, b)
    assert_close(a, b, check_device=False)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16", "int64", "uint8", "int8", "bool",
                                   "complex64"])
def test_make_tensor_ranges_and_dtypes(dtype):
    dt = getattr(tw, dtype)
    t = make_tensor(3, 40, dtype=dt, device="cpu:0")
    assert t.dtype is dt and tuple(t.shape) == (3, 40) and t.device == "cpu:0" and str(t.device) == "cpu"
    a = t.numpy()
    if dtype == "bool":
        assert set(np.unique(a)) <= {False, True}
        return
    parts = [a.real, a.imag] if dtype.startswith("complex") else [a.astype(np.float64)]
    lo, hi = (0, 10) if dtype == "uint8" else (-9, 10 if dtype.startswith(("int", "uint")) else 9)
    for p in parts:
        assert p.min() >= lo and p.max() < hi and len(np.unique(p)) > 3


def test_make_tensor_options_and_checks():
    t = make_tensor((2, 3), dtype=tw.float32, device="cpu", low=0, high=1, requires_grad=True, noncontiguous=True,
                    exclude_zero=True)
    assert tuple(t.shape) == (2, 3) and t.requires_grad and t.is_leaf and (t.detach().numpy() != 0).all()
    assert set(make_tensor(50, dtype=tw.uint8, device="cpu", low=-5, high=3).tolist()) <= {0, 1, 2}
    z = make_tensor(100, dtype=tw.int64, device="cpu", low=0, high=2, exclude_zero=True)
    assert set(z.tolist()) == {1}
    with pytest.raises(ValueError, match="`requires_grad=True` is not supported for boolean and integral dtypes"):
        make_tensor(2, dtype=tw.int32, device="cpu", requires_grad=True)
    with pytest.raises(ValueError, match="`low` must be less than `high`, but got 3 >= 1"):
        make_tensor(2, dtype=tw.float32, device="cpu", low=3, high=1)
    with pytest.raises(ValueError, match="mutually exclusive"):
        make_tensor(2, dtype=tw.float32, device="cpu", noncontiguous=True, memory_format=tw.contiguous_format)
