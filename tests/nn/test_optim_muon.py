"""``tw.optim.Muon`` against torch 2.13's ``torch.optim.Muon``: 2-D parameters (wide and tall) with the same
gradients for several steps, Nesterov or not, both learning-rate adjustments: the parameters torch's in float64 (the
Newton-Schulz iterations round to bfloat16 after each of torch's ops, as torch's kernels do: nearly every element to
1e-12, a rare one a bfloat16 rounding away), the momentum buffer torch's; the ``state_dict`` round trip and torch's
checks (2-D parameters only).

torch is the reference (imported through a fixture: it is optional)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw

pytestmark = pytest.mark.usefixtures("session")


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch", reason="PyTorch is the reference here (pip install torch==2.13.0)")


CONFIGS = [dict(lr=0.02), dict(lr=0.05, nesterov=False, adjust_lr_fn="match_rms_adamw", weight_decay=0.01),
           dict(lr=0.01, momentum=0.8, ns_steps=3, adjust_lr_fn="original")]
SHAPES = [(4, 6), (7, 3), (5, 5)]


def _run(lib, opt_cls, kw, init, grads, steps_from=0, state=None):
    params = [lib.nn.Parameter(lib.tensor(a)) if lib is tw else lib.tensor(a, requires_grad=True) for a in init]
    opt = opt_cls(params, **kw)
    if state is not None:
        opt.load_state_dict(state)
    for gs in grads[steps_from:]:
        for p, g in zip(params, gs):
            p.grad = lib.tensor(g)
        opt.step()
    return params, opt


def _data(steps: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    init = [rng.standard_normal(s) for s in SHAPES]
    return init, [[rng.standard_normal(s) for s in SHAPES] for _ in range(steps)]


@pytest.mark.parametrize("kw", CONFIGS, ids=["defaults", "adamw-rms", "original"])
def test_muon_steps_match_torch(torch, kw):
    init, grads = _data(8)
    params, opt = _run(tw, tw.optim.Muon, kw, init, grads)
    ref, opt_t = _run(torch, torch.optim.Muon, kw, init, grads)
    for p, q, a in zip(params, ref, init):
        assert float((q.detach() - torch.tensor(a)).abs().max()) > 1e-2  # (the steps did something)
        a, b = p.detach().numpy(), q.detach().numpy()
        # (a float32 sum whose order differs from torch's may round the other way to bfloat16: an element of the
        # update one bfloat16 step off, ~lr * 2e-3, rarely; every other element is torch's to float64 rounding)
        np.testing.assert_allclose(a, b, rtol=0, atol=5e-4)
        assert np.isclose(a, b, rtol=0, atol=1e-12).mean() >= 0.75
        st, st_t = opt.state[p], opt_t.state[q]
        assert sorted(st) == sorted(st_t) == ["momentum_buffer"]
        np.testing.assert_allclose(st["momentum_buffer"].numpy(), st_t["momentum_buffer"].numpy(), rtol=1e-12,
                                   atol=1e-12)  # (the gradients' average: no bfloat16 in it)
    group, group_t = opt.state_dict()["param_groups"][0], opt_t.state_dict()["param_groups"][0]
    assert sorted(group) == sorted(group_t)


def test_muon_state_dict_round_trip(torch):
    init, grads = _data(8, seed=1)
    whole, _ = _run(tw, tw.optim.Muon, {"lr": 0.02}, init, grads)
    half, first = _run(tw, tw.optim.Muon, {"lr": 0.02}, init, grads[:4])
    resumed, _ = _run(tw, tw.optim.Muon, {"lr": 0.02}, [p.detach().numpy() for p in half], grads, steps_from=4,
                      state=first.state_dict())
    for p, q in zip(resumed, whole):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())


def test_muon_checks(torch):
    with pytest.raises(ValueError, match="Muon only supports 2D parameters"):
        tw.optim.Muon([tw.nn.Parameter(tw.zeros(3))])
    with pytest.raises(ValueError, match="Adjust learning rate function sqrt is not supported"):
        tw.optim.Muon([tw.nn.Parameter(tw.zeros(2, 2))], adjust_lr_fn="sqrt")
    with pytest.raises(ValueError, match="momentum should be >= 0"):
        tw.optim.Muon([tw.nn.Parameter(tw.zeros(2, 2))], momentum=-1)
    p = tw.nn.Parameter(tw.zeros(2, 2))
    p.grad = tw.ones(2, 2)
    with pytest.raises(ValueError, match="less than 100"):
        tw.optim.Muon([p], ns_steps=100).step()
    assert "Muon" in tw.optim.__all__
