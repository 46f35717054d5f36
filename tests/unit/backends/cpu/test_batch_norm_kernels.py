"""The CPU's batch-norm kernels (``backends/cpu/kernels.py``) against float64 references, with short rows (the
per-channel values taken as a [C, L] block) and long ones (a [C, 1] column), and the two ways bit-equal."""

from __future__ import annotations

import numpy as np
import pytest

from tensorwire.backends.cpu import kernels
from tensorwire.backends.cpu.kernels import KERNELS
from tensorwire.protocol import dtypes as D

EPS = 1e-5
#: input shapes: rows of 16 and 1 (blocks, and BatchNorm1d's [N, C]) and of 300 (> _BN_BLOCK_ROWS: a column)
SHAPES = [(6, 5, 4, 4), (7, 3), (3, 4, 300)]


def _inputs(shape):
    rng = np.random.default_rng(0)
    c = shape[1]
    x = (rng.standard_normal(shape) * 2 + 3).astype(np.float32)
    g = rng.standard_normal(shape).astype(np.float32)
    w, b = rng.uniform(0.5, 1.5, c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    return x, g, w, b


def _run(shape):
    """Every kernel of a training step's batch norm: (y, stats, grad_stats, dx)."""
    x, g, w, b = _inputs(shape)
    c, f32 = shape[1], D.float32
    train = {"training": True, "eps": EPS, "has_weight": True, "has_bias": True}
    y = KERNELS["batch_norm"]([x, w, b], train, shape, f32)
    stats = KERNELS["batch_norm_stats"]([x], {}, (2 * c,), f32)
    gs = KERNELS["batch_norm_grad_stats"]([g, x, stats], {"eps": EPS}, (2 * c,), f32)
    dx = KERNELS["batch_norm_grad"]([g, x, stats, gs, w], {**train, "has_bias": False}, shape, f32)
    return y, stats, gs, dx


def _reference(shape):
    x, g, w, b = (v.astype(np.float64) for v in _inputs(shape))
    axes = tuple(i for i in range(len(shape)) if i != 1)
    col = (1, -1) + (1,) * (len(shape) - 2)
    n = x.size // shape[1]
    mean, var = x.mean(axes), x.var(axes)
    rstd = 1 / np.sqrt(var + EPS)
    xhat = (x - mean.reshape(col)) * rstd.reshape(col)
    sg, sgx = g.sum(axes), (g * xhat).sum(axes)
    dx = (rstd * w).reshape(col) * (g - sg.reshape(col) / n - xhat * sgx.reshape(col) / n)
    return xhat * w.reshape(col) + b.reshape(col), np.concatenate([mean, var]), np.concatenate([sg, sgx]), dx


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_batch_norm_kernels_match_reference(shape):
    for got, want in zip(_run(shape), _reference(shape)):
        assert got.dtype == np.float32 and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_channel_blocks_and_columns_agree_bitwise(shape, monkeypatch):
    """Per-channel values as [C, L] blocks or [C, 1] columns: the same elementwise ops, the same bits."""
    blocks = _run(shape)
    monkeypatch.setattr(kernels, "_BN_BLOCK_ROWS", 0)
    for a, b in zip(blocks, _run(shape)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("shape", SHAPES)
def test_batch_norm_reads_given_statistics(shape):
    """In training with ``has_stats`` the kernel normalises with the [2C] statistics it is given (batch_norm_stats's,
    which the client records once for the normalisation, the running buffers and the backward): the output of the
    statistics it computes itself, within float32 rounding of the statistics."""
    x, _, w, b = _inputs(shape)
    f32 = D.float32
    train = {"training": True, "eps": EPS, "has_weight": True, "has_bias": True}
    stats = KERNELS["batch_norm_stats"]([x], {}, (2 * shape[1],), f32)
    given = KERNELS["batch_norm"]([x, stats, w, b], {**train, "has_stats": True}, shape, f32)
    own = KERNELS["batch_norm"]([x, w, b], train, shape, f32)
    np.testing.assert_allclose(given, own, rtol=1e-5, atol=1e-5)
    with pytest.raises(AssertionError):  # (it does read them)
        np.testing.assert_allclose(KERNELS["batch_norm"]([x, stats * 2, w, b], {**train, "has_stats": True}, shape,
                                                         f32), own, rtol=1e-5, atol=1e-5)
