"""The CPU kernels' per-thread scratch buffers (``backends/cpu/scratch.py``) and the conv kernels that take their
temporaries there: a slot's pages are reused call after call, slots and threads never share memory, and no kernel
result lives in scratch memory (a later conv call must not change an earlier call's result)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tensorwire.backends.cpu import scratch as S
from tensorwire.backends.cpu.kernels import KERNELS
from tensorwire.protocol import dtypes as D

from .test_conv_layouts import CASES


def _base(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def test_a_slot_reuses_its_buffer_and_grows():
    a = S.scratch("t-grow", (4, 8), np.float32)
    assert a.shape == (4, 8) and a.dtype == np.float32 and a.flags.c_contiguous
    b = S.scratch("t-grow", 16, np.float64)  # as many bytes: the same memory
    assert np.shares_memory(a, b)
    c = S.scratch("t-grow", 1000, np.float32)  # larger: a new buffer, kept from then on
    assert not np.shares_memory(a, c)
    assert np.shares_memory(c, S.scratch("t-grow", (10, 10), np.float32))


def test_slots_do_not_share_memory():
    a, b = S.scratch("t-a", 64, np.float32), S.scratch("t-b", 64, np.float32)
    assert not np.shares_memory(a, b)


def test_threads_do_not_share_memory():
    mine = S.scratch("t-thread", 256, np.float32)
    theirs = []
    t = threading.Thread(target=lambda: theirs.append(S.scratch("t-thread", 256, np.float32)))
    t.start()
    t.join()
    assert not np.shares_memory(mine, theirs[0])


def test_over_the_limit_is_a_fresh_array():
    n = S.SCRATCH_MAX // 4 + 1
    a, b = S.scratch("t-big", n, np.float32), S.scratch("t-big", n, np.float32)
    assert a.size == n and not np.shares_memory(a, b)


def test_zeros_and_copy():
    S.scratch("t-z", 12, np.float32)[:] = 7
    assert not S.scratch_zeros("t-z", (3, 4), np.float32).any()
    x = np.arange(12.0).reshape(3, 4).T
    c = S.scratch_copy("t-z", x)
    assert c.flags.c_contiguous and np.array_equal(c, x)


@pytest.mark.parametrize("name,sx,sw_,a,layout", CASES, ids=[c[0] for c in CASES])
def test_conv_results_are_not_scratch(name, sx, sw_, a, layout):
    """Each layout's three kernels, run twice on different values: the first results are unchanged by the second
    run, and no result shares memory with the other run's (none of them is a view of a scratch buffer)."""
    rng = np.random.default_rng(1)
    dt = D.float32

    def run(seed):
        r = np.random.default_rng(seed)
        x, w = (r.uniform(-2, 2, s).astype(np.float32) for s in (sx, sw_))
        y = KERNELS["conv2d"]([x, w], a, _out_shape(x, w), dt)
        gy = r.uniform(-2, 2, y.shape).astype(np.float32)
        gx = KERNELS["conv2d_grad_input"]([gy, w], {**a, "input_size": list(sx[2:])}, sx, dt)
        gw = KERNELS["conv2d_grad_weight"]([x, gy], {**a, "kernel": list(sw_[2:])}, sw_, dt)
        return [y, gx, gw]

    def _out_shape(x, w):
        (sh, sw), (ph, pw), (dh, dw) = (tuple(a.get(k, d)) for k, d in (("stride", (1, 1)), ("padding", (0, 0)),
                                                                          ("dilation", (1, 1))))
        oh = (x.shape[2] + 2 * ph - dh * (w.shape[2] - 1) - 1) // sh + 1
        ow = (x.shape[3] + 2 * pw - dw * (w.shape[3] - 1) - 1) // sw + 1
        return (x.shape[0], w.shape[0], oh, ow)

    first = run(rng.integers(1 << 30))
    kept = [r.copy() for r in first]
    second = run(rng.integers(1 << 30))
    for got, want in zip(first, kept):
        np.testing.assert_array_equal(got, want)
    for f, s in zip(first, second):
        assert not np.shares_memory(_base(f), _base(s))


@pytest.mark.parametrize("name,sx,sw_,a,layout", CASES, ids=[c[0] for c in CASES])
def test_conv_reads_no_stale_scratch(name, sx, sw_, a, layout):
    """The conv kernels give the same bits whatever their scratch slots held before: every slot filled with NaN
    first (a value read before it was written would show), then with zeros."""
    from .test_conv_layouts import _run

    def poisoned(fill):
        for slot in ("pad", "cols", "out", "grad", "acc"):
            S.scratch(slot, 1 << 16, np.float64).fill(fill)
        return _run(sx, sw_, a, np.float32, with_bias=False)

    for (got_nan, want), (got_zero, _) in zip(poisoned(np.nan), poisoned(0.0)):
        assert not np.isnan(got_nan).any()
        np.testing.assert_array_equal(got_nan, got_zero)
        np.testing.assert_allclose(got_nan, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
