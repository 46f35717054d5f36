"""Arguments tensorwire accepted and ignored where torch gives them a meaning (an audit of every public function's
parameters against torch, session 43): ``F.interpolate(antialias=True)``, ``fft.fftfreq(out=)``,
``DataParallel.load_state_dict(assign=True)``, ``to_sparse(dense_dim=)`` and ``blocksize=``,
``is_contiguous(memory_format=torch.channels_last)``. Each against PyTorch where it is installed."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw
import tensorwire.nn.functional as F

pytestmark = pytest.mark.usefixtures("session")

A = np.random.default_rng(0).random((2, 3, 8, 9)).astype(np.float32)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("size, align_corners", [((3, 3), False), ((5, 4), True), ((13, 20), False), ((8, 4), None)])
def test_interpolate_antialias_filters_as_torchs(mode, size, align_corners):
    got = F.interpolate(tw.tensor(A), size=size, mode=mode, antialias=True, align_corners=align_corners).numpy()
    plain = F.interpolate(tw.tensor(A), size=size, mode=mode, align_corners=align_corners).numpy()
    assert got.shape == (2, 3, *size)
    if size[0] < 8:  # (downsampling: the filter is stretched, so the result is not the plain one)
        assert np.abs(got - plain).max() > 1e-3
    torch = pytest.importorskip("torch")
    want = torch.nn.functional.interpolate(torch.tensor(A), size=size, mode=mode, antialias=True,
                                           align_corners=align_corners).numpy()
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_interpolate_antialias_of_its_gradient_and_errors():
    x = tw.tensor(A, requires_grad=True)
    F.interpolate(x, scale_factor=0.5, mode="bilinear", antialias=True).sum().backward()
    np.testing.assert_allclose(x.grad.numpy().sum(), 2 * 3 * 4 * 4, rtol=1e-5)  # (each output's weights sum to 1)
    for bad in (dict(mode="nearest"), dict(mode="bilinear", input=tw.ones(1, 2, 4))):
        with pytest.raises(ValueError, match="Anti-alias option is restricted to bilinear, bicubic"):
            F.interpolate(bad.pop("input", tw.tensor(A)), size=2 if "input" in bad else (2, 2), antialias=True,
                          **bad)


def test_fftfreq_writes_its_out():
    o, o3 = tw.zeros(5), tw.zeros(3)
    assert tw.fft.fftfreq(5, out=o) is o and tw.fft.rfftfreq(5, out=o3) is o3
    np.testing.assert_allclose(o.numpy(), [0, 0.2, 0.4, -0.4, -0.2], rtol=1e-6)
    np.testing.assert_allclose(o3.numpy(), [0, 0.2, 0.4], rtol=1e-6)
    with pytest.raises(TypeError):
        tw.fft.fftfreq(5, outt=o)  # (a misspelt argument is refused, not swallowed)


def test_data_parallel_load_state_dict_assigns():
    m = tw.nn.DataParallel(tw.nn.Linear(2, 2))
    m.load_state_dict({"module.weight": tw.ones(2, 2, dtype=tw.float64), "module.bias": tw.zeros(2, dtype=tw.float64)},
                      assign=True)
    assert m.module.weight.dtype is tw.float64


def test_to_sparse_dense_dim_and_blocksize():
    s = tw.eye(3).to_sparse(dense_dim=1)
    assert (s.sparse_dim(), s.dense_dim(), tuple(s._values().shape)) == (1, 1, (3, 3))
    np.testing.assert_array_equal(s.to_dense().numpy(), np.eye(3))
    with pytest.raises(RuntimeError, match="conversion from Strided to Sparse with blocksize argument given"):
        tw.eye(4).to_sparse(blocksize=(2, 2))


@pytest.mark.parametrize("shape", [(2, 1, 4, 5), (2, 3, 1, 1), (2, 3, 4, 5), (2, 3, 1, 5), (2, 3)])
def test_is_contiguous_asked_for_channels_last_answers_as_torch(shape):
    got = tw.ones(*shape).is_contiguous(memory_format=tw.channels_last)
    assert tw.ones(*shape).is_contiguous()
    torch = pytest.importorskip("torch")
    assert got == torch.ones(*shape).is_contiguous(memory_format=torch.channels_last)
