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


# -- when the cells' library is built: loaded at once when cached, else once the scans have earned it -----------------

COMPILE_S = 120


@pytest.fixture
def fresh_cells(tmp_path, monkeypatch):
    """The cells as a new worker finds them, with an empty kernel cache of its own: nothing loaded, built or waited
    for (the module's state restored after the test). Returns the fresh C runtime."""
    from tensorwire.backends.codegen import cache as C
    from tensorwire.backends.cpu import compiled

    if compiled.runtime() is None:
        pytest.skip("the CPU cannot compile here: the scans use their numpy cells")
    monkeypatch.setenv(C.CACHE_ENV, str(tmp_path / "kernels"))
    return _new_worker(monkeypatch)


def _new_worker(monkeypatch):
    """A new worker process's C runtime and cells (nothing loaded), on the same kernel cache."""
    from tensorwire.backends.cpu import compiled

    base = compiled.runtime()
    rt = compiled.CRuntime(base.compiler, base.version)
    monkeypatch.setattr(compiled, "_RUNTIME", rt)
    for name, value in (("_CELLS", None), ("_WHY", ""), ("_EARNING", None), ("_BUILDING", False)):
        monkeypatch.setattr(rnn_cells, name, value)
    return rt


def _lstm_case(T=6, b=4, seed=5):
    rng = np.random.RandomState(seed)
    gi = rng.randn(T, b, 4 * H).astype(np.float32)
    h0, c0 = rng.randn(b, H).astype(np.float32), rng.randn(b, H).astype(np.float32)
    w, bias = rng.randn(4 * H, H).astype(np.float32) * 0.3, rng.randn(4 * H).astype(np.float32)
    return gi, h0, c0, w, bias


def _scan_and_grad(gi, h0, c0, w, bias):
    a = {"mode": "lstm", "reverse": False}
    y = KERNELS["rnn_scan"]([gi, h0, c0, w, bias], a, None, D.float32)
    gy = np.zeros_like(y)
    gy[:, :, :H] = 1
    return y, KERNELS["rnn_scan_grad"]([y, gy, h0, c0, w], a, None, D.float32)


def _numpy_scan_and_grad(monkeypatch, *case):
    with monkeypatch.context() as m:
        m.setattr(recurrent, "_cells", lambda mode, B_, H_, ct: recurrent._NumpyCells(B_, H_, ct))
        return _scan_and_grad(*case)


def test_cached_cells_load_at_first_use(fresh_cells, monkeypatch):
    """A library a run before built (here: built with the rule off) loads at once with the rule on: no build, no
    wait, the scans use it from their first step."""
    monkeypatch.setenv(rnn_cells.BUILD_TIME_ENV, "0")
    assert rnn_cells.cells() is not None and fresh_cells.cache.builds == 1  # (built on first use: the rule is off)
    rt = _new_worker(monkeypatch)
    monkeypatch.setenv(rnn_cells.BUILD_TIME_ENV, "1e9")  # (its scans would never earn a build)
    assert rnn_cells.cells() is not None and rt.cache.builds == 0 and rt.cache.hits == 1
    assert not rnn_cells.waiting()
    got = _scan_and_grad(*_lstm_case())
    want = _numpy_scan_and_grad(monkeypatch, *_lstm_case())
    assert any((g != w_).any() for g, w_ in zip(got, want))  # (the C cells ran: they round differently)
    for g, w_ in zip(got, want):
        np.testing.assert_allclose(g, w_, rtol=2e-5, atol=2e-5)


def test_uncached_cells_wait_for_the_scans_to_earn_their_build(fresh_cells, monkeypatch):
    """Not in the kernel cache: nothing is built at first use; the scans run their numpy cells (the same bits as
    forced numpy cells) and their CPU time is counted against the build's expected cost."""
    monkeypatch.setenv(rnn_cells.BUILD_TIME_ENV, "1e9")
    assert rnn_cells.cells() is None and rnn_cells.waiting()
    earning = rnn_cells._EARNING
    assert earning.cost == pytest.approx(1e9 * fresh_cells.cache.expected_seconds(rnn_cells.source()))
    assert earning.spent == 0
    got = _scan_and_grad(*_lstm_case())
    spent = earning.spent
    assert spent > 0  # (the forward scan and its gradient, timed)
    want = _numpy_scan_and_grad(monkeypatch, *_lstm_case())
    assert earning.spent == spent  # (cells forced to numpy are not the waiting scans': not counted)
    for g, w_ in zip(got, want):
        np.testing.assert_array_equal(g, w_)
    a = {"mode": "rnn_tanh", "reverse": False}  # (the plain RNN has no C cell: its time does not count)
    gi, h0 = np.ones((3, 2, H), np.float32), np.zeros((2, H), np.float32)
    KERNELS["rnn_scan"]([gi, h0, np.eye(H, dtype=np.float32), np.zeros(H, np.float32)], a, None, D.float32)
    assert earning.spent == spent
    assert rnn_cells.cells() is None and fresh_cells.cache.builds == 0
    assert not any(fresh_cells.cache.folder().glob("*.so"))


def test_earned_cells_are_built_in_the_background_for_later_scans(fresh_cells, monkeypatch):
    """Once the scans' numpy time has paid for the build, it runs on the compile thread (``hot``'s); later scans use
    the library, and a later worker loads it from the kernel cache."""
    from tensorwire.backends import hot

    monkeypatch.setenv(rnn_cells.BUILD_TIME_ENV, "1e-9")  # (one scan pays for it many times over)
    assert rnn_cells.cells() is None and fresh_cells.cache.builds == 0
    want = _scan_and_grad(*_lstm_case())  # numpy cells; the build starts
    for _ in range(3):  # (the compiles' budget may defer it to a later scan)
        hot._pool().submit(lambda: None).result(COMPILE_S)  # (the compile thread runs one task at a time, in order)
        if rnn_cells.cells() is not None:
            break
        _scan_and_grad(*_lstm_case())
    assert rnn_cells.cells() is not None and fresh_cells.cache.builds == 1 and not rnn_cells.waiting()
    got = _scan_and_grad(*_lstm_case())
    assert any((g != w_).any() for g, w_ in zip(got, want))  # the C cells now
    for g, w_ in zip(got, want):
        np.testing.assert_allclose(g, w_, rtol=2e-5, atol=2e-5)
    rt = _new_worker(monkeypatch)  # a later worker loads it (no build, no wait)
    monkeypatch.setenv(rnn_cells.BUILD_TIME_ENV, "1e9")
    assert rnn_cells.cells() is not None and rt.cache.builds == 0 and rt.cache.hits == 1


@pytest.mark.parametrize("ct", [np.float32, np.float64])
@pytest.mark.parametrize("names", [("h", "c"), ("h",), ("c",)])
def test_c_lstm_one_step_is_the_scan_of_one_bit_for_bit(ct, names):
    """A cell's one step (2-D ``gi`` / ``y``: ``_CCells.lstm_step`` and ``lstm_step_grad``, without the loops'
    bookkeeping) gives the 3-D scan of one step's values bit for bit: the packed row, and the gradient's rows."""
    _fns()
    dt = D.from_numpy(np.dtype(ct))
    rng = np.random.RandomState(5)
    gi, h0, c0 = rng.randn(B, 4 * H).astype(ct), rng.randn(B, H).astype(ct), rng.randn(B, H).astype(ct)
    w, bias = rng.randn(4 * H, H).astype(ct) * 0.3, rng.randn(4 * H).astype(ct)
    a = {"mode": "lstm", "reverse": False}
    y = KERNELS["rnn_scan"]([gi, h0, c0, w, bias], a, None, dt)
    y3 = KERNELS["rnn_scan"]([gi[None], h0, c0, w, bias], a, None, dt)
    assert y.shape == (B, 6 * H)
    np.testing.assert_array_equal(y, y3[0])
    parts = [rng.randn(B, H).astype(ct) for _ in names]
    ag = dict(a, grads=list(names))
    d = KERNELS["rnn_scan_grad"]([y, *parts, h0, c0, w], ag, None, dt)
    d3 = KERNELS["rnn_scan_grad"]([y3, *parts, h0, c0, w], ag, None, dt)
    assert d.shape == (2 * B, 4 * H)
    np.testing.assert_array_equal(d, d3.reshape(2 * B, 4 * H))
