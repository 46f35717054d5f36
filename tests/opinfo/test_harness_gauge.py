"""The op_db harness excuses eigen- and singular vectors whose signs differ from torch's (LAPACK leaves them free), and
nothing else: a vector flipped without its partner, or a wrong value, is still wrong."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the reference here (pip install torch==2.13.0)")
pytest.importorskip("expecttest", reason="torch's op_db imports expecttest (pip install expecttest)")

from . import harness as H  # noqa: E402


def _entry_and_sample(name: str):
    op = next(o for o in H.op_db() if H.entry_name(o) == name)
    sample = next(s for s in op.sample_inputs("cpu", torch.float32) if s.input.numel() and s.input.shape[-1] > 2)
    return op, sample


def _got(tensors) -> list:
    return [H._Got(str(t.dtype).removeprefix("torch."), tuple(t.shape), t.numpy().copy()) for t in tensors]


def test_svd_signs_flip_in_pairs_only():
    op, sample = _entry_and_sample("linalg.svd")
    u, s, vh = op(sample.input, *sample.args, **sample.kwargs)
    flip = torch.ones(s.shape[-1])
    flip[0] = -1
    k = s.shape[-1]
    u2 = torch.cat([u[..., :k] * flip, u[..., k:]], -1)
    assert H.compare(_got([u2, s, vh * flip.unsqueeze(-1)]), (u, s, vh)) is not None
    assert H.gauge_explains(op, sample, _got([u2, s, vh * flip.unsqueeze(-1)]), (u, s, vh))
    assert not H.gauge_explains(op, sample, _got([u2, s, vh]), (u, s, vh))  # U flipped, V not: another matrix
    assert not H.gauge_explains(op, sample, _got([u2, s * 1.01, vh * flip.unsqueeze(-1)]), (u, s, vh))


def test_eigh_signs_and_values():
    op, sample = _entry_and_sample("linalg.eigh")
    w, v = op(sample.input, *sample.args, **sample.kwargs)
    assert H.gauge_explains(op, sample, _got([w, -v]), (w, v))
    assert not H.gauge_explains(op, sample, _got([w, v.flip(-1)]), (w, v))  # vectors of other eigenvalues
    assert not H.gauge_explains(op, sample, _got([w + 1e-3, -v]), (w, v))
    other, _ = _entry_and_sample("linalg.qr")  # QR's factors are unique: no sign is excused
    q, r = other(sample.input)
    assert not H.gauge_explains(other, sample, _got([-q, -r]), (q, r))


def test_rounding_excuses_a_factor_beside_exact_integer_parts():
    """A result with an integer part (``ldl_factor``'s pivots beside its factor): the factor may differ from torch's
    float32 one by what rounding explains (it is torch's float64 answer, rounded), the pivots must be torch's."""
    op = next(o for o in H.op_db() if H.entry_name(o) == "linalg.ldl_factor")
    sample = next(s for s in op.sample_inputs("cpu", torch.float32) if s.input.shape == (5, 5))
    ld, piv = op(sample.input, *sample.args, **sample.kwargs)
    exact = op(sample.input.double(), *sample.args, **sample.kwargs)[0].float()  # (float64's answer, rounded)
    assert H.rounding_explains(op, sample, _got([exact, piv]), (ld, piv))
    other = piv.clone()
    other[0] = other[0] + 1
    assert not H.rounding_explains(op, sample, _got([exact, other]), (ld, piv))
    assert not H.rounding_explains(op, sample, _got([exact + 1e-3, piv]), (ld, piv))
