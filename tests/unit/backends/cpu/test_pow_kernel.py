"""The CPU kernel of ``pow`` computes a float base to the power 2 or 3 as torch's CPU kernel does: by multiplying
(``x * x``, ``x * x * x``), bit for bit, not with numpy's per-element ``pow()`` (which rounds a cube differently and
is ~30x slower). Other exponents, integer bases and exponents of more elements keep numpy's ``power``."""

import numpy as np
import pytest

from tensorwire.backends.cpu.kernels import KERNELS
from tensorwire.protocol import dtypes as D

POW = KERNELS["pow"]


def _pow(x, y, dt=D.float32):
    shape = np.broadcast_shapes(x.shape, y.shape)
    return POW([x, y], {}, shape, dt)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_squares_and_cubes_multiply(dtype):
    x = np.random.default_rng(0).standard_normal(4096).astype(dtype) * 3
    dt = D.from_numpy(np.dtype(dtype))
    sq = _pow(x, np.array(2, dtype), dt)
    cube = _pow(x, np.array(3, dtype), dt)
    assert sq.dtype == dtype and cube.dtype == dtype
    np.testing.assert_array_equal(sq, x * x)
    np.testing.assert_array_equal(cube, x * x * x)
    # (the point of it: powf's correctly rounded cube differs from the product in some last bits)
    assert dtype is np.float64 or not np.array_equal(cube, np.power(x, dtype(3)))


def test_other_exponents_and_shapes_keep_numpy_power():
    x = np.abs(np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32)) + 0.5
    np.testing.assert_array_equal(_pow(x, np.array(2.5, np.float32)), np.power(x, np.float32(2.5)))
    y = np.array([2, 3, 2, 3, 2], np.float32)  # (an exponent a column: numpy's power)
    np.testing.assert_array_equal(_pow(x, y), np.power(x, y))
    row = _pow(x[0], np.full((1, 1), 3, np.float32))  # (an exponent of more dims than the base: the result's shape)
    assert row.shape == (1, 5)
    np.testing.assert_allclose(row[0], x[0] ** 3, rtol=1e-6)
    ints = _pow(np.arange(5, dtype=np.int64), np.array(3, np.int64), D.int64)
    np.testing.assert_array_equal(ints, np.arange(5) ** 3)
    with pytest.raises(ValueError, match="negative integer powers"):
        _pow(np.arange(5, dtype=np.int64), np.array(-1, np.int64), D.int64)


def test_matches_torch_bit_for_bit():
    torch = pytest.importorskip("torch")
    x = torch.randn(10000, dtype=torch.float32) * 3
    for e in (2, 3):
        got = _pow(x.numpy(), np.array(e, np.float32))
        np.testing.assert_array_equal(got, (x ** e).numpy())


@pytest.mark.parametrize("e", [2, 3])
def test_a_0d_base_squares_and_cubes(e):
    """A 0-d base's square is a numpy scalar, which takes no ``out=``: the cube of ``tw.tensor(2.0)`` failed the
    batch (``torch.norm(x, 3)`` of a 0-d x, found by op_db)."""
    got = _pow(np.array(2.0, np.float32), np.array(e, np.float32))
    assert np.asarray(got).shape == () and float(got) == 2.0 ** e
