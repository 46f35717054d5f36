"""``tw.amp`` against ``torch.amp`` on the CPU: autocast's output dtypes per op (torch's CPU list), gradients
through the casts, the decorator form and nesting, and GradScaler's scale / unscale / skip / update behaviour."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw
from tensorwire import nn

from ._util import needs_torch, torch

F = nn.functional


def _ops(lib):
    Fn = lib.nn.functional
    return {
        "matmul": lambda x, w, b, t: x @ w.T,
        "mm": lambda x, w, b, t: x.mm(w.T),
        "bmm": lambda x, w, b, t: x[None].bmm(w.T[None]),
        "linear": lambda x, w, b, t: Fn.linear(x, w),
        "conv2d": lambda x, w, b, t: Fn.conv2d(x.reshape(1, 1, 4, 5), w[:2].reshape(2, 1, 1, 5)[..., :3]),
        "einsum": lambda x, w, b, t: lib.einsum("ij,kj->ik", x, w),
        "f64_matmul": lambda x, w, b, t: x.double() @ w.double().T,
        "softmax_f32": lambda x, w, b, t: x.softmax(-1),
        "softmax_low": lambda x, w, b, t: b.softmax(-1),
        "exp_low": lambda x, w, b, t: b.exp(),
        "sum_low": lambda x, w, b, t: b.sum(),
        "prod_low": lambda x, w, b, t: b.prod(),
        "cross_entropy_low": lambda x, w, b, t: Fn.cross_entropy(b[:, :3], t),
        "cat_mixed": lambda x, w, b, t: lib.cat([x, b]),
        "add_mixed": lambda x, w, b, t: x + b,
        "mse_low": lambda x, w, b, t: Fn.mse_loss(b, x),
        "layer_norm_low": lambda x, w, b, t: Fn.layer_norm(b, (5,)),
    }


@needs_torch
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_autocast_output_dtypes_match_torch_cpu(session, dtype):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal((3, 5)).astype(np.float32)
    t = np.array([0, 1, 2, 0])
    ours, ref = _ops(tw), _ops(torch)
    tx, tw_, tb, tt = torch.tensor(x), torch.tensor(w), torch.tensor(x).to(getattr(torch, dtype)), torch.tensor(t)
    ax, aw, ab, at = tw.tensor(x), tw.tensor(w), tw.tensor(x).to(getattr(tw, dtype)), tw.tensor(t)
    for name in ours:
        with torch.autocast("cpu", dtype=getattr(torch, dtype)):
            want = ref[name](tx, tw_, tb, tt)
        with tw.autocast("cpu", dtype=getattr(tw, dtype)):
            got = ours[name](ax, aw, ab, at)
        assert got.dtype.name == str(want.dtype).removeprefix("torch."), name
        np.testing.assert_allclose(got.float().numpy(), want.float().numpy(), rtol=2e-2, atol=2e-2, err_msg=name)
    assert (ax @ aw.T).dtype is tw.float32  # outside the scope: as recorded


@needs_torch
def test_autocast_gradients_flow_to_float32_parameters(session):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 6)).astype(np.float32)
    y = rng.integers(0, 3, 8)
    ref = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    ours = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    ours.load_state_dict({k: tw.tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    with torch.autocast("cpu", dtype=torch.bfloat16):
        tout = ref(torch.tensor(x))
        tloss = torch.nn.functional.cross_entropy(tout, torch.tensor(y))
    tloss.backward()
    with tw.autocast("cpu", dtype=tw.bfloat16):
        out = ours(tw.tensor(x))
        loss = F.cross_entropy(out, tw.tensor(y))
    loss.backward()
    assert out.dtype is tw.bfloat16 and loss.dtype is tw.float32
    for p, tp in zip(ours.parameters(), ref.parameters()):
        assert p.grad.dtype is tw.float32
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=5e-2, atol=5e-3)


def test_autocast_scopes_nest_and_decorate(session):
    a, b = tw.randn(3, 3), tw.randn(3, 3)

    @tw.amp.autocast("cpu", dtype=tw.float16)
    def f(u, v):
        return u @ v

    assert f(a, b).dtype is tw.float16
    with tw.autocast("cpu"):
        assert tw.amp.is_autocast_enabled("cpu") and tw.amp.get_autocast_dtype("cpu") is tw.bfloat16
        assert (a @ b).dtype is tw.bfloat16
        with tw.autocast("cpu", enabled=False):
            assert (a @ b).dtype is tw.float32
        assert (a @ b).dtype is tw.bfloat16
        with tw.autocast("cuda"):  # another device type: cpu tensors are not touched
            assert (a @ b).dtype is tw.bfloat16
    assert not tw.amp.is_autocast_enabled("cpu")
    with pytest.raises(RuntimeError, match="unsupported autocast device_type"):
        tw.autocast("tpu")
    with pytest.warns(UserWarning, match="not supported"):
        with tw.autocast("cpu", dtype=tw.float64):
            assert (a @ b).dtype is tw.float32


def _scaler_run(lib, grads_seq, **kw):
    p = lib.nn.Parameter(lib.tensor(np.ones(3, np.float32)))
    opt = lib.optim.SGD([p], lr=0.1)
    scaler = lib.amp.GradScaler("cpu", **kw)
    scales, values = [], []
    for g in grads_seq:
        opt.zero_grad()
        loss = scaler.scale((p * lib.tensor(np.asarray(g, np.float32))).sum())
        loss.backward()
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
        values.append(np.asarray(p.detach().numpy()).copy())
    return scales, values, scaler


@needs_torch
def test_grad_scaler_matches_torch(session):
    """Growth after growth_interval clean steps, backoff and a skipped step on inf/NaN, state_dict: as torch."""
    seq = [[1, 2, 3], [1, 1, 1], [np.inf, 0, 0], [0.5, 0.5, 0.5], [np.nan, 1, 1], [1, 2, 3], [3, 2, 1], [1, 1, 1]]
    kw = dict(init_scale=2.0**10, growth_factor=4.0, backoff_factor=0.25, growth_interval=2)
    s, v, scaler = _scaler_run(tw, seq, **kw)
    ts, tv, tscaler = _scaler_run(torch, seq, **kw)
    assert s == ts
    for a, b in zip(v, tv):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    assert scaler.state_dict() == pytest.approx(tscaler.state_dict())
    fresh = tw.amp.GradScaler("cpu")
    fresh.load_state_dict(scaler.state_dict())
    assert fresh.get_scale() == scaler.get_scale()


def test_grad_scaler_unscale_and_errors(session):
    p = nn.Parameter(tw.ones(2))
    opt = tw.optim.SGD([p], lr=1.0)
    scaler = tw.amp.GradScaler("cpu", init_scale=8.0)
    with pytest.raises(AssertionError, match="did not use scaler.scale"):
        scaler.unscale_(opt)
    loss = scaler.scale((p * tw.tensor([1.0, 2.0])).sum())
    assert loss.item() == 24.0
    loss.backward()
    scaler.unscale_(opt)
    np.testing.assert_allclose(p.grad.numpy(), [1.0, 2.0])  # the real gradients, e.g. for clip_grad_norm_
    with pytest.raises(RuntimeError, match="already been called"):
        scaler.unscale_(opt)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match="after step"):
        scaler.unscale_(opt)
    scaler.update()
    np.testing.assert_allclose(p.detach().numpy(), [0.0, -1.0])
    off = tw.amp.GradScaler(enabled=False)
    assert off.scale(loss) is loss and off.get_scale() == 1.0 and off.state_dict() == {}
    with pytest.raises(RuntimeError, match="Closure"):
        scaler.scale(loss)
        scaler.step(opt, closure=lambda: loss)


def test_a_cuda_scaler_without_cuda_disables_itself_as_torch_s_does(session):
    """nanoGPT's ``torch.cuda.amp.GradScaler(enabled=(dtype == 'float16'))`` on a CPU: torch warns and disables it
    (no scaling, no inf check, so no read, a step); so does ours on a cluster without a ``cuda`` device."""
    assert not tw.cuda.is_available()
    with pytest.warns(UserWarning, match="CUDA is not available.  Disabling"):
        scaler = tw.cuda.amp.GradScaler(enabled=True)
    with pytest.warns(UserWarning, match="CUDA is not available"):
        assert not tw.amp.GradScaler("cuda").is_enabled()
    loss = tw.tensor(2.0, requires_grad=True)
    assert not scaler.is_enabled() and scaler.scale(loss) is loss and scaler.get_scale() == 1.0
    assert tw.amp.GradScaler("cpu").is_enabled()  # (torch checks the cuda scaler only)
    torch = pytest.importorskip("torch", reason="PyTorch is the reference here (pip install torch==2.13.0)")
    if not torch.cuda.is_available():
        with pytest.warns(UserWarning, match="CUDA is not available.  Disabling"):
            assert not torch.amp.GradScaler("cuda").is_enabled()


@pytest.mark.parametrize("decompose", [False, True], ids=["native", "decomposed"])
def test_a_bfloat16_linear_rounds_once_after_the_bias(session, decompose):
    """1.5 * 1.0078125 = 1.51171875 lies halfway between two bfloat16s and rounds to 1.515625: rounding the product
    before adding the bias -1.515625 gives an exact 0 (which a ReLU then gates off), torch's single rounding gives
    -2**-8. The CPU's native kernel and the decomposition every other backend runs agree with torch."""
    from tensorwire.backends import executor as X
    from tensorwire.backends.cpu import make_backend
    from tensorwire.protocol import dtypes as D
    from tensorwire.protocol.graph import ExpandingBuilder, Value

    x, w, b = (np.array(v, np.float32) for v in ([[1.5, 1.0]], [[1.0078125, 0.0]], [-1.515625]))
    want = np.float32(1.5 * 1.0078125 - 1.515625)  # exact in float32, and a bfloat16 too
    assert want == -(2.0 ** -8)
    bf = D.bfloat16
    shapes = [(1, 2), (1, 2), (1,)]
    eb = ExpandingBuilder(frozenset() if decompose else frozenset({"linear"}))
    eb.op("linear", *(Value(s, bf, -k - 1) for k, s in enumerate(shapes)))
    nodes = [[n[0], list(n[1]), n[2]] for n in eb.nodes]
    assert any(n[0] == "linear" for n in nodes) is not decompose
    dev = make_backend().open(0)
    plan = X.compile_plan(dev, nodes, [(s, bf) for s in shapes])
    last = len(nodes) - 1
    got = X.run_plan(dev, plan, [a.astype(bf.np) for a in (x, w, b)], list(range(len(nodes))), {}, [],
                     frozenset({plan.node_slot[last]}), None)[last]
    assert got.astype(np.float32)[0, 0] == want
    if torch is not None:
        t = torch.nn.functional.linear(*(torch.tensor(a).to(torch.bfloat16) for a in (x, w, b)))
        assert t.float().item() == want
