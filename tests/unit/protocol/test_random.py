"""The counter-based RNG (protocol/random.py): deterministic, counter-addressable, well distributed."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tensorwire.protocol import random as R

FLOATS = [np.float64, np.float32, np.float16, ml_dtypes.bfloat16]
MASK = (1 << 64) - 1


def _splitmix(seed: int, counter: int) -> int:
    """SplitMix64's finaliser on (seed + 1) * golden + counter, in Python ints (the documented spec)."""
    z = ((seed + 1) * 0x9E3779B97F4A7C15 + counter) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


@pytest.mark.parametrize("seed,offset", [(0, 0), (1, 5), (2**63 + 7, 2**40), (2**64 - 1, 2**64 - 3)])
def test_bits_match_the_documented_formula(seed, offset):
    w = R.bits(seed, offset, 6)
    assert [int(x) for x in w] == [_splitmix(seed, (offset + i) & MASK) for i in range(6)]
    w2 = R.bits(seed, offset, 3, stride=2, start=1)
    assert [int(x) for x in w2] == [_splitmix(seed, (offset + 1 + 2 * i) & MASK) for i in range(3)]


def test_no_common_seed_starts_on_a_zero_word():
    """The finaliser keeps 0: the word of (seed, counter) must not be 0 for the seeds scripts use (``manual_seed(0)``'s
    first ``rand`` was exactly 0.0 until session 59: ``rand().log()`` -inf, ``bernoulli(1e-6)`` 1)."""
    for seed in range(1000):
        assert int(R.bits(seed, 0, 1)[0]) != 0
        assert R.uniform(seed, 0, (1,), np.float32)[0] > 0
    assert (R.uniform(0, 0, (4,), np.float32) > 0).all()
    assert np.isfinite(np.log(R.uniform(0, 0, (64,), np.float64))).all()


def test_uniform_matches_the_documented_formula():
    for dt, p in ((np.float64, 53), (np.float32, 24), (np.float16, 11), (ml_dtypes.bfloat16, 8)):
        u = R.uniform(9, 3, (5,), dt)
        want = [(_splitmix(9, 3 + i) >> (64 - p)) * 2.0 ** -p for i in range(5)]
        assert u.astype(np.float64).tolist() == want, dt


@pytest.mark.parametrize("fn", ["uniform", "normal"])
@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: np.dtype(d).name)
def test_same_seed_same_numbers(fn, dt):
    f = getattr(R, fn)
    a, b = f(42, 7, (4, 5), dt), f(42, 7, (4, 5), dt)
    assert a.dtype == np.dtype(dt) and a.shape == (4, 5)
    assert a.tobytes() == b.tobytes()
    assert f(43, 7, (4, 5), dt).tobytes() != a.tobytes()


def test_seeds_are_taken_mod_2_64():
    assert R.uniform(2**64 + 5, 0, (8,), np.float64).tobytes() == R.uniform(5, 0, (8,), np.float64).tobytes()


def test_offsets_address_counters():
    """Element i of an op uses counter offset + i (randn: 2 counters per element), so offsets split a stream."""
    u = R.uniform(3, 10, (100,), np.float64)
    assert np.array_equal(u[25:], R.uniform(3, 35, (75,), np.float64))
    assert not np.array_equal(u[:50], R.uniform(3, 11, (50,), np.float64))
    z = R.normal(3, 10, (100,), np.float64)
    assert np.array_equal(z[25:], R.normal(3, 10 + R.counters_used("randn", 25), (75,), np.float64))
    assert not np.array_equal(z[:50], R.normal(3, 11, (50,), np.float64))
    k = R.randint(3, 10, (100,), np.int64, 0, 1000)
    assert np.array_equal(k[25:], R.randint(3, 35, (75,), np.int64, 0, 1000))
    assert R.counters_used("randn", 7) == 14 and R.counters_used("rand", 7) == 7 and R.counters_used("randint", 7) == 7


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: np.dtype(d).name)
def test_uniform_is_in_0_1_and_uniform(dt):
    u = R.uniform(123, 0, (100_000,), dt).astype(np.float64)
    assert u.min() >= 0.0 and u.max() < 1.0  # float16/bfloat16 included: no value rounds up to 1
    assert abs(u.mean() - 0.5) < 0.01
    assert abs(u.var() - 1 / 12) < 0.005
    hist = np.histogram(u, bins=10, range=(0, 1))[0]
    assert hist.min() > 9_000 and hist.max() < 11_000


@pytest.mark.parametrize("dt", [np.float64, np.float32], ids=lambda d: np.dtype(d).name)
def test_normal_moments(dt):
    z = R.normal(7, 0, (100_000,), dt).astype(np.float64)
    assert np.all(np.isfinite(z))
    assert abs(z.mean()) < 0.02 and abs(z.std() - 1) < 0.02
    assert abs(np.mean(z ** 3)) < 0.05 and abs(np.mean(z ** 4) - 3) < 0.1
    assert 0.30 < np.mean(np.abs(z) > 1) < 0.34  # P(|z| > 1) = 0.317


@pytest.mark.parametrize("low,high,dt", [(0, 10, np.int64), (-5, 3, np.int32), (0, 2, np.int8), (3, 250, np.uint8),
                                         (-(2**40), 2**40, np.int64), (0, 7, np.float32)])
def test_randint_bounds(low, high, dt):
    k = R.randint(11, 0, (50_000,), dt, low, high)
    assert k.dtype == np.dtype(dt)
    k = k.astype(np.int64)
    assert k.min() >= low and k.max() < high
    if high - low <= 300:
        assert set(np.unique(k)) == set(range(low, high))  # every value is hit
        counts = np.bincount(k - low)
        expected = len(k) / (high - low)
        assert np.all(np.abs(counts - expected) < 5 * np.sqrt(expected))  # within 5 sigma


def test_empty_and_0d_shapes():
    assert R.uniform(1, 0, (), np.float32).shape == ()
    assert R.normal(1, 0, (0, 3), np.float64).shape == (0, 3)
    assert R.randint(1, 0, (2, 0), np.int64, 0, 5).shape == (2, 0)


def test_normal_in_blocks_is_the_whole_stream(monkeypatch):
    """``normal`` computes a large draw a block at a time (``NORMAL_BLOCK``): element for element the numbers of the
    one-block computation, blocks not a multiple of the size included."""
    monkeypatch.setattr(R, "NORMAL_BLOCK", 64)
    blocked = R.normal(7, 12, (5, 61), np.float32)
    monkeypatch.setattr(R, "NORMAL_BLOCK", 1 << 20)
    assert blocked.tobytes() == R.normal(7, 12, (5, 61), np.float32).tobytes()
    assert blocked.shape == (5, 61)
