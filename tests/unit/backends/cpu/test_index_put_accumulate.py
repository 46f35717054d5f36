"""The CPU kernel of ``index_put`` with ``accumulate`` (an embedding's gradient: rows of zeros added to at repeated
indices): its flat path (one index along dim 0 of a row-major tensor) gives numpy's ``add.at`` bits, the additions
to each element in the same order, for every layout, dtype and index shape."""

from __future__ import annotations

import numpy as np
import pytest

from tensorwire.backends.cpu.kernels import KERNELS
from tensorwire.protocol import dtypes as D


def _add_at(x, v, idx, dim):
    out = x.copy()
    key = (slice(None),) * dim + tuple(i.astype(np.int64) for i in idx)
    np.add.at(out, key, np.broadcast_to(v, out[key].shape))
    return out


def _put(x, v, idx, dim=0):
    return KERNELS["index_put"]([x, v, *idx], {"dim": dim, "accumulate": True}, x.shape,
                                D.from_numpy(x.dtype))


CASES = [((30, 64), (8, 24), (8, 24, 64)), ((30, 64), (50,), (50, 64)), ((5,), (9,), (9,)),
         ((7, 3, 4), (6,), (6, 3, 4)), ((7, 3, 4), (6,), (1, 4)), ((30, 64), (0,), (0, 64)), ((4, 2), (3,), ())]


@pytest.mark.parametrize("shape,ishape,vshape", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.float16])
def test_repeated_rows_add_up_as_add_at_does(shape, ishape, vshape, dtype):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 100).astype(dtype)
    v = (rng.standard_normal(vshape) * 100).astype(dtype)
    idx = rng.integers(-shape[0], shape[0], ishape)  # (negative indices count from the end)
    got = _put(x, v, [idx])
    want = _add_at(x, v, [idx], 0)
    assert got.dtype == want.dtype and np.array_equal(got.view(np.uint8), want.view(np.uint8))
    assert not np.shares_memory(got, x)


def test_other_layouts_and_dims_keep_add_at():
    rng = np.random.default_rng(1)
    x = np.asfortranarray(rng.standard_normal((30, 64)).astype(np.float32))
    v = rng.standard_normal((10, 64)).astype(np.float32)
    idx = rng.integers(0, 30, 10)
    assert np.array_equal(_put(x, v, [idx]), _add_at(x, v, [idx], 0))
    y = rng.standard_normal((3, 9, 5)).astype(np.float32)
    w = rng.standard_normal((3, 12, 5)).astype(np.float32)
    j = rng.integers(0, 9, 12)
    assert np.array_equal(_put(y, w, [j], 1), _add_at(y, w, [j], 1))


def test_signed_zeros_and_nan_as_add_at():
    x = np.array([[0.0, -0.0], [1.0, 2.0]], np.float32)
    v = np.array([[-0.0, -0.0], [np.nan, 1.0], [-0.0, 0.0]], np.float32)
    idx = np.array([0, 1, 0])
    got, want = _put(x, v, [idx]), _add_at(x, v, [idx], 0)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("bad", [-5, 4])
def test_an_index_out_of_bounds_raises_as_add_at_does(bad):
    # (one row past either end: a flat position made of -5 * 2 + k would wrap to another row of a [4, 2] tensor)
    x = np.zeros((4, 2), np.float32)
    v = np.ones((2, 2), np.float32)
    with pytest.raises(IndexError):
        _put(x, v, [np.array([0, bad])])
