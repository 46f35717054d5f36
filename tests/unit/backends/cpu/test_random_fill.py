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


#: run in a fresh process: this one may hold the fill already (a loaded library counts as cached)
_POLICY = """
import numpy as np
from pathlib import Path
from tensorwire.backends.cpu import random_fill as F
from tensorwire.protocol import random as R
cache = Path(__import__("os").environ["TENSORWIRE_KERNEL_CACHE"])
F.BUILD_ELEMENTS = 20000
assert F.normal(3, 0, (5000,), np.float32) is None
assert F._fill == "absent" and not any(cache.rglob("*.so"))
big = F.normal(3, 0, (20000,), np.float64)
assert big is not None and big.tobytes() == R.normal(3, 0, (20000,), np.float64).tobytes()
assert any(cache.rglob("*.so"))
small = F.normal(3, 0, (5000,), np.float32)
assert small is not None and small.tobytes() == R.normal(3, 0, (5000,), np.float32).tobytes()
"""


@needs_cc
def test_small_draws_do_not_wait_for_the_compiler(tmp_path):
    """With a kernel cache that lacks the fill, draws under ``BUILD_ELEMENTS`` stay on numpy (nothing is built: a
    program of small inits never waits for gcc); the first large one builds it, and later small ones use it."""
    import os
    import subprocess
    import sys

    cache = tmp_path / "kernels"
    cache.mkdir(mode=0o700)
    env = {**os.environ, "TENSORWIRE_KERNEL_CACHE": str(cache)}
    done = subprocess.run([sys.executable, "-c", _POLICY], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
