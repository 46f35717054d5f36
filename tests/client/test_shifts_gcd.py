"""``bitwise_left_shift``, ``bitwise_right_shift``, ``gcd`` and ``lcm`` against torch: every integer dtype, edge
shift counts (negative, the width and past it), the dtype's ends, zeros and negatives, broadcasting, promotion and
scalar operands, and the dtypes torch refuses (floats, complex, bool with bool).

torch is the reference (imported in each test: it is optional)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw
from tensorwire.protocol.errors import DTypeError

pytestmark = pytest.mark.usefixtures("session")

INT_NAMES = ("int8", "int16", "int32", "int64", "uint8")
SHIFTS = ("bitwise_left_shift", "bitwise_right_shift")


def _torch():
    return pytest.importorskip("torch", reason="PyTorch is the reference here (pip install torch==2.13.0)")


def _same(got: tw.Tensor, want) -> None:
    """``got`` is torch's ``want``: dtype, shape and every value."""
    name = str(want.dtype).removeprefix("torch.")
    assert got.dtype.name == name, f"dtype {got.dtype.name} != torch's {name}"
    assert tuple(got.shape) == tuple(want.shape), f"shape {tuple(got.shape)} != torch's {tuple(want.shape)}"
    g, w = got.numpy(), want.numpy()
    assert np.array_equal(g, w), f"values differ at {np.argwhere(g != w)[:8].tolist()}:\n got {g}\n torch {w}"


def _edges(name: str) -> np.ndarray:
    """The dtype's ends and their neighbours, zero, and small values of both signs with common divisors."""
    info = np.iinfo(name)
    small = (-16, -12, -9, -6, -5, -4, -1, 0, 1, 3, 4, 6, 9, 12, 16, 77, 100)
    return np.array(sorted({info.min, info.min + 1, info.max - 1, info.max, *(v for v in small if v >= info.min)}),
                    dtype=name)


def _counts(name: str) -> np.ndarray:
    """Shift counts from -2 to the width + 2 (uint8: from 0, and 254 and 255, its negative counts' bits)."""
    w = 8 * np.dtype(name).itemsize
    c = np.arange(-2, w + 3) if name != "uint8" else np.concatenate([np.arange(0, w + 3), [254, 255]])
    return c.astype(name)


@pytest.mark.parametrize("op", SHIFTS)
@pytest.mark.parametrize("name", INT_NAMES)
def test_shifts_match_torch_at_every_count(op, name):
    """Each edge value (a column) shifted by each count (a row, broadcast): a count below 0 or not below the width
    gives 0 (left) or the sign's copies (right), within it the truncated (left) or arithmetic (right) shift."""
    torch = _torch()
    a, c = _edges(name)[:, None], _counts(name)[None, :]
    got = getattr(tw, op)(tw.tensor(a), tw.tensor(c))
    _same(got, getattr(torch, op)(torch.from_numpy(a), torch.from_numpy(c)))
    _same(getattr(tw.tensor(a), op)(tw.tensor(c)), getattr(torch.from_numpy(a), op)(torch.from_numpy(c)))


@pytest.mark.parametrize("op", SHIFTS)
def test_shift_edges_by_hand(op):
    """torch's edge values, written out: int8 1 << 7 is -128, a count of -1 or 8 shifts everything out."""
    a = tw.tensor(np.array([1, -1, 64, -128], np.int8))
    n = tw.tensor(np.array([7, 8, -1, 3], np.int8))
    want = [-128, 0, 0, 0] if op == "bitwise_left_shift" else [0, -1, 0, -16]
    got = getattr(tw, op)(a, n)
    assert got.dtype is tw.int8 and got.numpy().tolist() == want


@pytest.mark.parametrize("op", ("gcd", "lcm"))
@pytest.mark.parametrize("name", INT_NAMES)
def test_gcd_lcm_match_torch(op, name):
    """Every pair of edge values: gcd non-negative (gcd(0, 0) = 0; torch's wrapped |.| of the dtype's minimum kept),
    lcm 0 with a 0, non-negative, and wrapping as torch's where it overflows. (torch's own lcm traps on the 32- and
    64-bit minimum over a gcd of -1, so those pairs are left out.)"""
    torch = _torch()
    v = _edges(name)
    a, b = np.repeat(v, v.size), np.tile(v, v.size)
    if op == "lcm" and name in ("int32", "int64"):
        keep = ~((a == np.iinfo(name).min) & (torch.gcd(torch.from_numpy(a), torch.from_numpy(b)).numpy() == -1))
        a, b = a[keep], b[keep]
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    _same(getattr(tw, op)(tw.tensor(a), tw.tensor(b)), getattr(torch, op)(ta, tb))
    _same(getattr(tw.tensor(a), op)(tw.tensor(b)), getattr(ta, op)(tb))


def test_gcd_lcm_by_hand():
    a = tw.tensor([-4, 4, -4, 0, 0, 6, 0])
    b = tw.tensor([6, -6, -6, 0, -7, 0, 5])
    assert tw.gcd(a, b).numpy().tolist() == [2, 2, 2, 0, 7, 6, 5]
    assert a.lcm(b).numpy().tolist() == [12, 12, 12, 0, 0, 0, 0]
    i8 = tw.tensor(np.array([16, -128], np.int8))
    assert tw.lcm(i8, tw.tensor(np.array([9, 5], np.int8))).numpy().tolist() == [-112, -128]  # (144, 640 truncated)


@pytest.mark.parametrize("op", (*SHIFTS, "gcd", "lcm"))
def test_random_values_broadcasting_and_promotion(op):
    """Random values over the dtypes' ranges, shapes that broadcast, operands of two dtypes (torch's result_type)."""
    torch = _torch()
    rng = np.random.default_rng(3)
    for (da, sa), (db, sb) in ((("int64", (2, 1, 40)), ("int64", (3, 1))), (("int8", (5, 1)), ("int32", (1, 6))),
                               (("uint8", (4, 3)), ("int8", (3,))), (("bool", (2, 3)), ("int16", (2, 3))),
                               (("int32", (0, 3)), ("int32", (1, 3))), (("int16", ()), ("int16", ()))):
        a = rng.random(sa) < 0.5 if da == "bool" else rng.integers(
            np.iinfo(da).min, np.iinfo(da).max, size=sa, endpoint=True).astype(da)
        if op in SHIFTS:
            w = 8 * np.dtype(db).itemsize
            b = rng.integers(0 if db == "uint8" else -2, w + 3, size=sb).astype(db)
        else:
            b = rng.integers(0 if db == "uint8" else -12, 13, size=sb).astype(db)
            a = a if da == "bool" else (a % 97).astype(da) if op == "lcm" else a  # (torch's lcm traps at int min)
        ta, tb = torch.from_numpy(np.asarray(a)), torch.from_numpy(np.asarray(b))
        _same(getattr(tw, op)(tw.tensor(a), tw.tensor(b)), getattr(torch, op)(ta, tb))


@pytest.mark.parametrize("op", SHIFTS)
def test_shift_by_python_scalars(op):
    """A Python int is a wrapped number: an int8 tensor stays int8 (and 1000 is past its width), a bool tensor
    becomes int64; the scalar may come first (``tw.bitwise_left_shift(3, t)``)."""
    torch = _torch()
    x = np.array([-100, -3, 0, 1, 2, 77], np.int8)
    for n in (0, 1, 3, 7, 8, 9, 63, 64, 1000, -1):
        _same(getattr(tw.tensor(x), op)(n), getattr(torch, op)(torch.from_numpy(x), n))
    m = np.array([True, False, True])
    _same(getattr(tw, op)(tw.tensor(m), 3), getattr(torch, op)(torch.from_numpy(m), 3))
    n8 = np.array([1, 2, 7, 8], np.int8)
    _same(getattr(tw, op)(3, tw.tensor(n8)), getattr(torch, op)(3, torch.from_numpy(n8)))


def test_gcd_lcm_with_a_0d_tensor():
    """A 0-d int64 tensor only raises the category: with an int8 tensor the result is int8, as torch's."""
    torch = _torch()
    x = np.array([-12, 0, 9, 100, -128], np.int8)
    for op in ("gcd", "lcm"):
        _same(getattr(tw, op)(tw.tensor(x), tw.tensor(6)), getattr(torch, op)(torch.from_numpy(x), torch.tensor(6)))


@pytest.mark.parametrize("op", (*SHIFTS, "gcd", "lcm"))
def test_refused_dtypes(op):
    """Integer dtypes only, as torch's kernels ("lshift_cpu" not implemented for 'Float'): floats, complex, bool with
    bool and an integer tensor with a float scalar are DTypeErrors."""
    f = getattr(tw, op)
    ints = tw.tensor([1, 2, 3])
    for a, b in ((tw.tensor([1.0, 2.0]), tw.tensor([1.0, 2.0])), (ints, tw.tensor([1.0, 2.0, 3.0])),
                 (tw.tensor([True, False]), tw.tensor([True, True])), (tw.tensor([1.0, 2.0], dtype=tw.float64), 1),
                 (tw.tensor([1 + 1j]), tw.tensor([1 + 0j]))):
        with pytest.raises(DTypeError, match=f"{op} is only supported for integer tensors"):
            f(a, b).numpy()
    with pytest.raises(DTypeError):
        getattr(ints, op)(1.5).numpy()
    assert getattr(tw.tensor([True, False]), op)(tw.tensor([2, 4])).dtype is tw.int64  # (bool with int64: fine)


def test_methods_and_functions_exist():
    for op in (*SHIFTS, "gcd", "lcm"):
        assert callable(getattr(tw.Tensor, op)) and callable(getattr(tw, op)), op


def test_shift_operators_and_in_place_forms_match_torch():
    torch = _torch()
    a = np.array([1, -8, 3, 100], np.int64)
    for make in (lambda x: x << 2, lambda x: x >> 1, lambda x: 2 << x.abs() % 5, lambda x: -64 >> x.abs() % 7,
                 lambda x: x << x.abs() % 3):
        _same(make(tw.tensor(a)), make(torch.from_numpy(a)))
    for name in ("bitwise_left_shift_", "bitwise_right_shift_", "gcd_", "lcm_"):
        t, w = torch.from_numpy(a.copy()), tw.tensor(a)
        assert getattr(w, name)(tw.tensor([3, 2, 1, 4])) is w
        getattr(t, name)(torch.tensor([3, 2, 1, 4]))
        _same(w, t)
    x, tx = tw.tensor([1, 2], dtype=tw.int8), torch.tensor([1, 2], dtype=torch.int8)
    view = x[1:]
    x <<= 7
    tx <<= 7
    _same(x, tx)
    assert view.tolist() == [0]
    x >>= 1
    tx >>= 1
    _same(x, tx)
    with pytest.raises(DTypeError):
        tw.tensor([1.0]) << 1
