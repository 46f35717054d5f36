"""``tw.optim.Adafactor`` against torch 2.13's ``torch.optim.Adafactor``: a small model trained 20 steps from torch's
initial weights on the same batches (float64: the parameters equal to 1e-10; float32 to rounding), parameters of
every rank with the same gradients (factored row and column second moments from 2 dims, a whole one below), torch's
state and ``param_groups`` keys, the ``state_dict`` round trip (ours, and torch's loaded mid-run) and torch's argument
checks.

torch is the reference (imported through a fixture: it is optional)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw

pytestmark = pytest.mark.usefixtures("session")


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch", reason="PyTorch is the reference here (pip install torch==2.13.0)")


CONFIGS = [{}, dict(lr=0.05, weight_decay=0.1, eps=(1e-6, 1e-2), d=1.5, beta2_decay=-0.6),
           dict(maximize=True, foreach=False)]


def _models(torch, dtype: str):
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    ref = ref.to(getattr(torch, dtype))
    mine = tw.nn.Sequential(tw.nn.Linear(5, 8), tw.nn.Tanh(), tw.nn.Linear(8, 3)).to(getattr(tw, dtype))
    mine.load_state_dict({k: tw.tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    return mine, ref


def _train(lib, model, opt, batches, dtype: str) -> None:
    for x, y in batches:
        opt.zero_grad()
        out = model(lib.tensor(x.astype(dtype)))
        loss = ((out - lib.tensor(y.astype(dtype))) ** 2).mean()
        loss.backward()
        opt.step()


def _batches(n: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((6, 5)), rng.standard_normal((6, 3))) for _ in range(n)]


def _assert_params(mine, ref, tol) -> None:
    for (name, p), q in zip(mine.named_parameters(), ref.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=tol, atol=tol, err_msg=name)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("kw", CONFIGS, ids=["defaults", "options", "maximize"])
def test_adafactor_trains_a_model_as_torch(torch, kw, dtype):
    mine, ref = _models(torch, dtype)
    opt, opt_t = tw.optim.Adafactor(mine.parameters(), **kw), torch.optim.Adafactor(ref.parameters(), **kw)
    batches = _batches(20)
    _train(tw, mine, opt, batches, dtype)
    _train(torch, ref, opt_t, batches, dtype)
    start = _models(torch, dtype)[1]
    moved = max(float((p - q).detach().abs().max()) for p, q in zip(ref.parameters(), start.parameters()))
    assert moved > 1e-2  # (the steps did something)
    _assert_params(mine, ref, 1e-10 if dtype == "float64" else 2e-5)
    tol = 1e-10 if dtype == "float64" else 1e-5
    for p, q in zip(mine.parameters(), ref.parameters()):
        st, st_t = opt.state[p], opt_t.state[q]
        assert sorted(st) == sorted(st_t) == (["col_var", "row_var", "step"] if p.ndim > 1 else ["step", "variance"])
        assert st["step"] == int(st_t["step"]) == 20
        for k in st_t:
            if k != "step":
                assert tuple(st[k].shape) == tuple(st_t[k].shape), k
                np.testing.assert_allclose(st[k].numpy(), st_t[k].numpy(), rtol=tol, atol=tol, err_msg=k)
    group, group_t = opt.state_dict()["param_groups"][0], opt_t.state_dict()["param_groups"][0]
    assert sorted(group) == sorted(group_t)
    assert {k: v for k, v in group.items() if k != "params"} == {k: v for k, v in group_t.items() if k != "params"}


def test_adafactor_every_rank_with_the_same_gradients(torch):
    rng = np.random.default_rng(2)
    shapes = [(4, 3), (3,), (2, 3, 4), ()]
    init = [rng.standard_normal(s) for s in shapes]
    ref_params = [torch.tensor(a, requires_grad=True) for a in init]
    params = [tw.nn.Parameter(tw.tensor(a)) for a in init]
    opt_t = torch.optim.Adafactor(ref_params, lr=0.03, weight_decay=0.05)
    opt = tw.optim.Adafactor(params, lr=0.03, weight_decay=0.05)
    for step in range(20):
        grads = [rng.standard_normal(s) for s in shapes]
        if step == 5:
            grads[2][0] = 0  # (a factored block whose gradient is 0: the eps1 floor)
        for p, g in zip(ref_params, grads):
            p.grad = torch.tensor(g)
        for p, g in zip(params, grads):
            p.grad = tw.tensor(g)
        opt_t.step()
        opt.step()
    for p, q in zip(params, ref_params):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-10, atol=1e-10)
    assert tuple(opt.state[params[2]]["row_var"].shape) == (2, 3, 1)
    assert tuple(opt.state[params[2]]["col_var"].shape) == (2, 1, 4)
    assert tuple(opt.state[params[3]]["variance"].shape) == ()


def test_adafactor_state_dict_round_trip(torch, tmp_path):
    """Ten steps, the state saved (``tw.save``) and loaded into a fresh optimizer of a copy of the model, ten more: the
    run of twenty uninterrupted steps. Torch's state dict after ten steps, loaded into ours, continues as torch."""
    batches = _batches(20, seed=3)
    whole, ref = _models(torch, "float64")
    opt = tw.optim.Adafactor(whole.parameters(), lr=0.02)
    _train(tw, whole, opt, batches, "float64")

    half, _ = _models(torch, "float64")
    first = tw.optim.Adafactor(half.parameters(), lr=0.02)
    _train(tw, half, first, batches[:10], "float64")
    path = tmp_path / "adafactor.safetensors"
    tw.save({"model": half.state_dict(), "optim": first.state_dict()}, str(path))
    saved = tw.load(str(path))
    resumed, _ = _models(torch, "float64")
    resumed.load_state_dict(saved["model"])
    second = tw.optim.Adafactor(resumed.parameters(), lr=0.5)  # (the loaded groups bring lr back)
    second.load_state_dict(saved["optim"])
    assert second.param_groups[0]["lr"] == 0.02 and second.param_groups[0]["eps"] == (None, 1e-3)
    assert second.state[next(iter(resumed.parameters()))]["step"] == 10
    _train(tw, resumed, second, batches[10:], "float64")
    for p, q in zip(resumed.parameters(), whole.parameters()):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())

    # torch's state dict (its step a float32 tensor) mid-run
    opt_t = torch.optim.Adafactor(ref.parameters(), lr=0.02)
    _train(torch, ref, opt_t, batches[:10], "float64")
    mine, _ = _models(torch, "float64")
    mine.load_state_dict({k: tw.tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    sd = opt_t.state_dict()
    ours = tw.optim.Adafactor(mine.parameters(), lr=0.02)
    ours.load_state_dict({"state": {i: {k: tw.tensor(v.numpy()) for k, v in st.items()}
                                    for i, st in sd["state"].items()},
                          "param_groups": sd["param_groups"]})
    _train(torch, ref, opt_t, batches[10:], "float64")
    _train(tw, mine, ours, batches[10:], "float64")
    _assert_params(mine, ref, 1e-10)


def test_adafactor_argument_checks(torch):
    p = [tw.nn.Parameter(tw.zeros(2))]
    for kw, msg in ((dict(lr=-1), "Learning rate should be >= 0"),
                    (dict(beta2_decay=0.1), "beta2_decay should be <= 0"),
                    (dict(eps=(-1, 1e-3)), "epsilon1 should be >= 0"), (dict(eps=(None, -1)), "epsilon2 should be"),
                    (dict(d=0.5), "Clipping threshold d should be >= 1"), (dict(weight_decay=-1), "weight_decay")):
        with pytest.raises(ValueError, match=msg):
            tw.optim.Adafactor(p, **kw)
        with pytest.raises(ValueError, match=msg):
            torch.optim.Adafactor([torch.zeros(2, requires_grad=True)], **kw)
    assert "Adafactor" in tw.optim.__all__
