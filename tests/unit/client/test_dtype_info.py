"""``tw.finfo`` and ``tw.iinfo`` (client/dtype_info.py): torch's attributes, values, types, repr and errors."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw

FLOATS = ("float16", "bfloat16", "float32", "float64")
INTS = ("uint8", "int8", "int16", "int32", "int64")
FINFO = ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution", "dtype")


@pytest.mark.parametrize("name", FLOATS + ("complex64", "complex128"))
def test_finfo_is_torchs(name):
    torch = pytest.importorskip("torch")
    ours, ref = tw.finfo(getattr(tw, name)), torch.finfo(getattr(torch, name))
    for attr in FINFO:
        assert getattr(ours, attr) == getattr(ref, attr), attr
        assert type(getattr(ours, attr)) is type(getattr(ref, attr)), attr
    assert repr(ours) == repr(ref) and str(ours) == str(ref)


@pytest.mark.parametrize("name", INTS)
def test_iinfo_is_torchs(name):
    torch = pytest.importorskip("torch")
    ours, ref = tw.iinfo(getattr(tw, name)), torch.iinfo(getattr(torch, name))
    for attr in ("bits", "max", "min", "dtype"):
        assert getattr(ours, attr) == getattr(ref, attr) and type(getattr(ours, attr)) is type(getattr(ref, attr))
    assert repr(ours) == repr(ref)


def test_half_precision_values_without_torch():
    """bfloat16's and float16's numbers, written out (torch's; numpy's float16 ``resolution`` differs)."""
    b = tw.finfo(tw.bfloat16)
    assert (b.bits, b.eps, b.max, b.tiny, b.resolution, b.dtype) == (16, 0.0078125, 3.3895313892515355e+38,
                                                                       1.1754943508222875e-38, 0.01, "bfloat16")
    h = tw.finfo(tw.half)
    assert (h.bits, h.eps, h.max, h.min, h.tiny, h.resolution) == (16, 0.0009765625, 65504.0, -65504.0,
                                                                    6.103515625e-05, 0.001)
    assert tw.iinfo(tw.int64).max == 2 ** 63 - 1 and tw.iinfo(tw.uint8).min == 0


def test_finfo_without_a_dtype_is_the_default_dtypes():
    prev = tw.get_default_dtype()
    try:
        assert tw.finfo().dtype == "float32"
        tw.set_default_dtype(tw.float64)
        assert tw.finfo() == tw.finfo(tw.float64) and tw.finfo().eps == 2.220446049250313e-16
    finally:
        tw.set_default_dtype(prev)


def test_wrong_kinds_are_type_errors_as_torchs():
    with pytest.raises(TypeError, match="requires a floating point input type"):
        tw.finfo(tw.int32)
    with pytest.raises(TypeError, match="requires an integer input type"):
        tw.iinfo(tw.float32)
    with pytest.raises(TypeError, match="not supported by iinfo"):
        tw.iinfo(tw.bool)
    with pytest.raises(TypeError, match="must be tensorwire.dtype, not str"):
        tw.finfo("float32")
    with pytest.raises(TypeError):
        tw.iinfo()


def test_torch_and_numpy_dtypes_are_taken_and_the_info_is_read_only():
    assert tw.finfo(np.float32) == tw.finfo(tw.float32) != tw.finfo(tw.float64)
    info = tw.finfo(tw.float32)
    with pytest.raises(AttributeError):
        info.eps = 1.0
    assert isinstance(info, tw.finfo) and isinstance(tw.iinfo(tw.int8), tw.iinfo)
