"""``tw.histogram``/``tw.histogramdd`` (torch's binning, computed on the host) and ``tw.fft``'s shifts (issue 33):
values against numpy, the edge rules torch has (last bin closed, non-increasing edges count nothing, one-valued
data widened by 0.5, density NaN with no point inside); the transforms themselves: tests/client/test_complex.py."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw

from ._ref import check

pytestmark = pytest.mark.usefixtures("session")


def test_histogram_bins_edges_weights_density():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(50)
    w = rng.uniform(0, 2, 50)
    for kw in ({}, {"density": True}, {"range": (-1.0, 0.5)}):
        hist, edges = tw.histogram(tw.tensor(x), 7, weight=tw.tensor(w), **kw)
        ref_hist, ref_edges = np.histogram(x, 7, weights=w, **kw)
        check(hist, ref_hist, rtol=1e-12)
        check(edges, ref_edges, rtol=1e-12)
    hist, edges = tw.tensor(x).histogram(tw.tensor([-1.0, 0.0, 2.0]))
    check(hist, np.histogram(x, [-1.0, 0.0, 2.0])[0])
    assert tw.histogram(tw.tensor([1.0, 2.0]), tw.tensor([0.5, -0.2])).hist.tolist() == [0.0]  # decreasing edges
    hist, edges = tw.histogram(tw.ones(3), 2)
    assert (hist.tolist(), edges.tolist()) == ([0.0, 3.0], [0.5, 1.0, 1.5])
    assert np.isnan(tw.histogram(tw.tensor([5.0]), tw.tensor([0.0, 1.0]), density=True).hist.tolist()[0])
    with pytest.raises(tw.DTypeError):
        tw.histogram(tw.tensor([1, 2]), 2)


def test_histogramdd_matches_numpy():
    rng = np.random.default_rng(4)
    pts = rng.standard_normal((40, 3))
    w = rng.uniform(0, 1, 40)
    hist, edges = tw.histogramdd(tw.tensor(pts), [2, 3, 4], weight=tw.tensor(w), density=True)
    ref_hist, ref_edges = np.histogramdd(pts, [2, 3, 4], weights=w, density=True)
    check(hist, ref_hist, rtol=1e-10)
    for e, r in zip(edges, ref_edges):
        check(e, r, rtol=1e-12)
    hist, _ = tw.histogramdd(tw.tensor(pts), 2, range=[-1.0, 1.0, -2.0, 2.0, 0.0, 1.0])
    check(hist, np.histogramdd(pts, 2, range=[(-1, 1), (-2, 2), (0, 1)])[0])


def test_fftshift():
    a = np.arange(30.0).reshape(5, 6)
    check(tw.fft.fftshift(tw.tensor(a)), np.fft.fftshift(a))
    check(tw.fft.ifftshift(tw.tensor(a), dim=0), np.fft.ifftshift(a, axes=0))
    check(tw.fft.ifftshift(tw.fft.fftshift(tw.tensor(a), (0, 1)), (0, 1)), a)
