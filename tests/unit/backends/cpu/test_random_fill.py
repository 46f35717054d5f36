"""``randn``'s C fill on the CPU (``backends/cpu/random_fill.py``): the numbers of ``protocol.random.normal``'s numpy
spelling bit for bit (seeds and counters wrapping mod 2**64, float32 and float64, sizes across OpenMP's threshold),
and the CPU kernel taking it where it applies and numpy's spelling where it does not."""

from __future__ import annotations

import numpy as np
import pytest

from tensorwire.backends.cpu import compiled, random_fill
from tensorwire.backends.cpu.kernels import KERNELS
from tensorwire.protocol import dtypes as D
from tensorwire.protocol import random as R

needs_cc = pytest.mark.skipif(compiled.runtime() is None, reason=f"the CPU cannot compile: {compiled.why_not()}")


@needs_cc
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("seed,offset,shape", [(0, 0, (4096,)), (7, 12, (65, 71)), (2**63 + 5, 2**64 - 7, (70001,)),
                                               (2**64 - 1, 3, (3, 128, 257))])
def test_c_fill_is_the_portable_stream(seed, offset, shape, dtype):
    got = random_fill.normal(seed, offset, shape, dtype)
    assert got is not None and got.shape == shape and got.dtype == np.dtype(dtype)
    assert got.tobytes() == R.normal(seed, offset, shape, dtype).tobytes()


def test_where_it_does_not_apply_numpy_draws():
    """Half dtypes and small draws are left to numpy's spelling (None), and the kernel's numbers are the stream's
    whichever draws them."""
    assert random_fill.normal(1, 0, (8,), np.float32) is None
    assert random_fill.normal(1, 0, (10000,), np.float16) is None
    for shape, dt in [((8,), D.float32), ((10000,), D.float16), ((300, 40), D.float64)]:
        got = KERNELS["randn"]([], {"seed": 5, "offset": 9}, shape, dt)
        assert got.tobytes() == R.normal(5, 9, shape, dt.np).tobytes()
