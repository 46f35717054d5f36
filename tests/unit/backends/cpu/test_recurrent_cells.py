"""The CPU's recurrent cells (backends/cpu/recurrent.py, rnn_cells.py): the fused C LSTM step adds the hidden bias and
the step's input projection itself, in the numpy steps' order, and agrees with the numpy cells and with torch."""

import numpy as np
import pytest

from tensorwire.backends.cpu import recurrent, rnn_cells
from tensorwire.backends.cpu.kernels import KERNELS
from tensorwire.protocol import dtypes as D

B, H = 5, 8


def _fns():
    fns = rnn_cells.cells()
    if fns is None:
        pytest.skip("the CPU cannot compile here: the scans use their numpy cells")
    return fns


def _step_inputs(rng, ct):
    pre = rng.randn(B, 4 * H).astype(ct)
    b = rng.randn(4 * H).astype(ct)
    x = rng.randn(B, 4 * H).astype(ct)
    cp = rng.randn(B, H).astype(ct)
    return pre, b, x, cp


@pytest.mark.parametrize("ct", [np.float32, np.float64])
def test_c_lstm_step_adds_bias_then_input_in_numpy_order(ct):
    """``(h W^T + b) + gi_t``, rounded as numpy's two in-place adds: the same bits as the cell given numpy's sum."""
    cells = recurrent._CCells(_fns(), B, H, ct)
    rng = np.random.RandomState(0)
    pre, b, x, cp = _step_inputs(rng, ct)
    fused = np.empty((B, 6 * H), ct)
    cells.lstm_fwd(pre.copy(), b, x, cp, fused)
    summed = pre.copy()
    summed += b
    summed += x
    ref = np.empty((B, 6 * H), ct)
    cells.lstm_fwd(summed, np.zeros(4 * H, ct), np.zeros((B, 4 * H), ct), cp, ref)
    np.testing.assert_array_equal(fused, ref)


@pytest.mark.parametrize("ct", [np.float32, np.float64])
def test_c_and_numpy_lstm_steps_agree(ct):
    fns = _fns()
    rng = np.random.RandomState(1)
    pre, b, x, cp = _step_inputs(rng, ct)
    got, want = np.empty((B, 6 * H), ct), np.empty((B, 6 * H), ct)
    recurrent._CCells(fns, B, H, ct).lstm_fwd(pre.copy(), b, x, cp, got)
    recurrent._NumpyCells(B, H, ct).lstm_fwd(pre.copy(), b, x, cp, want)
    tol = 1e-6 if ct is np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("reverse", [False, True])
def test_lstm_scan_matches_torch(reverse):
    torch = pytest.importorskip("torch")
    T, IN = 6, 3
    rng = np.random.RandomState(2)
    lstm = torch.nn.LSTM(IN, H)
    x = rng.randn(T, B, IN).astype(np.float32)
    h0, c0 = rng.randn(B, H).astype(np.float32), rng.randn(B, H).astype(np.float32)
    w_ih, w_hh = lstm.weight_ih_l0.detach().numpy(), lstm.weight_hh_l0.detach().numpy()
    b_ih, b_hh = lstm.bias_ih_l0.detach().numpy(), lstm.bias_hh_l0.detach().numpy()
    gi = x @ w_ih.T + b_ih
    y = KERNELS["rnn_scan"]([gi, h0, c0, w_hh, b_hh], {"mode": "lstm", "reverse": reverse}, None, D.float32)
    xt = torch.from_numpy(x.copy())
    with torch.no_grad():
        ref, _ = lstm(xt.flip(0) if reverse else xt, (torch.from_numpy(h0)[None], torch.from_numpy(c0)[None]))
    ref = ref.flip(0) if reverse else ref
    np.testing.assert_allclose(y[:, :, :H], ref.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("T,b", [(5, B), (1, 1), (0, B)])
@pytest.mark.parametrize("reverse", [False, True])
def test_c_lstm_loops_match_numpy_steps(monkeypatch, T, b, reverse):
    """The scans' whole LSTM loops in the C cells (row addresses computed, not asked of views) against the numpy
    cells' step-by-step loops: forward, and the gradient with and without the gates' own gradients."""
    _fns()
    rng = np.random.RandomState(3)
    gi = rng.randn(T, b, 4 * H).astype(np.float32)
    h0, c0 = rng.randn(b, H).astype(np.float32), rng.randn(b, H).astype(np.float32)
    w, bias = rng.randn(4 * H, H).astype(np.float32) * 0.3, rng.randn(4 * H).astype(np.float32)
    a = {"mode": "lstm", "reverse": reverse}

    def run():
        y = KERNELS["rnn_scan"]([gi, h0, c0, w, bias], a, None, D.float32)
        gy = np.zeros_like(y)
        gy[:, :, :H] = rng_g.randn(T, b, H)
        plain = KERNELS["rnn_scan_grad"]([y, gy, h0, c0, w], a, None, D.float32)
        gy[:, :, 2 * H:] = rng_g.randn(T, b, 4 * H)
        return y, plain, KERNELS["rnn_scan_grad"]([y, gy, h0, c0, w], a, None, D.float32)

    rng_g = np.random.RandomState(4)
    got = run()
    monkeypatch.setattr(recurrent, "_cells", lambda mode, B_, H_, ct: recurrent._NumpyCells(B_, H_, ct))
    rng_g = np.random.RandomState(4)
    want = run()
    for g, w_ in zip(got, want):
        assert g.shape == w_.shape
        np.testing.assert_allclose(g, w_, rtol=2e-5, atol=2e-5)
