"""The recurrent programs of issue 17, run once with torch and once with tensorwire imported as torch from the same
initial weights: their losses agree step by step (and the final evaluation loss too)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tensorwire as tw

from ..nn._util import needs_autograd, needs_torch
from ._harness import compare, load, tensorwire_as_torch

pytestmark = [needs_torch, needs_autograd]

HERE = Path(__file__).parent


def test_sine_wave_lstm(session):
    """Two LSTMCells in float64 trained with LBFGS and a closure, as the original, then a 4-step-ahead prediction."""
    ref, got = compare(HERE / "sine_wave_lstm.py", steps=8)
    assert ref[-2] < ref[0] / 2  # it learns
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-12)


def test_lstm_language_model(session):
    """Embedding, 2-layer LSTM with tied decoder, truncated BPTT with detached hidden state, clipping, float32."""
    ref, got = compare(HERE / "lstm_language_model.py", steps=30)  # 3 passes over the corpus, ~5 s
    assert ref[-1] < ref[0] - 0.4  # it learns (evaluation loss ~2.45 from ~2.99)
    np.testing.assert_allclose(got, ref, rtol=2e-5, atol=1e-6)


def test_harness_restores_torch(session):
    import torch

    import tensorwire

    from ._harness import tensorwire_as_torch

    with tensorwire_as_torch():
        import torch as inside
        import torch.nn.functional as inside_f

        assert inside is tensorwire and inside_f is tensorwire.nn.functional
    import torch as after

    assert after is torch and after.nn.functional is not tensorwire.nn.functional
    with pytest.raises(ModuleNotFoundError):
        with tensorwire_as_torch():
            import torch.no_such_module  # noqa: F401


def test_sine_wave_lbfgs_round_trips(session):
    """LBFGS reads the numbers its decisions need together: after each evaluation of the closure, the loss, the
    gradient's largest entry, the step's largest entry, the next curvature ``y.s`` and the next direction's slope
    ``g.d`` in one round trip (torch's order would wait five times an iteration), four iterations a step."""
    waits = [0]
    flush = session._flush

    def counted(fetch, sync, *a, **k):
        waits[0] += bool(fetch or sync)
        return flush(fetch, sync, *a, **k)

    with tensorwire_as_torch():
        prog = load(HERE / "sine_wave_lstm.py")
        tw.manual_seed(0)
        model = prog.build_model()
        session._flush = counted
        try:
            losses = prog.train(model, 2)
        finally:
            del session._flush
    assert len(losses) == 3 and all(np.isfinite(losses))
    # 2 steps x (1 after the first evaluation + 3 after the re-evaluations), and the evaluation's read (19 a step
    # when each number was read on its own)
    assert 0 < waits[0] <= 2 * 4 + 1, waits[0]
