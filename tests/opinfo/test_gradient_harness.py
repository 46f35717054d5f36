"""The op_db gradient check can fail: a wrong backward is ``wrong`` (not excused as rounding), a refused one is
``unsupported``, and the finite-difference fallback (for entries whose torch gradient op_db itself marks as failing)
rejects a wrong gradient."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the reference here (pip install torch==2.13.0)")
pytest.importorskip("expecttest", reason="torch's op_db imports expecttest (pip install expecttest)")

import tensorwire as tw  # noqa: E402

from . import gradients as G  # noqa: E402
from . import harness as H  # noqa: E402

pytestmark = pytest.mark.usefixtures("session")


def _entry(name: str):
    return next(o for o in H.op_db() if H.entry_name(o) == name)


def _first_sample(op):
    torch.manual_seed(0)
    return next(s for s in op.sample_inputs("cpu", torch.float32, requires_grad=True) if s.input.numel() > 1)


class _SinWithBackward(tw.autograd.Function):
    """sin's value, with the backward ``scale * g * cos(x)`` (or a refusal)."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        return x.sin()

    @staticmethod
    def backward(ctx, g):
        if ctx.scale is None:
            raise NotImplementedError("sin's gradient is not here")
        (x,) = ctx.saved_tensors
        return g * x.cos() * ctx.scale, None


def _target(scale) -> H.Target:
    return H.Target("test", lambda x, *a, **k: _SinWithBackward.apply(x, scale))


def test_a_wrong_gradient_is_wrong_and_a_right_one_ok():
    op = _entry("sin")
    sample = _first_sample(op)
    assert G.run_grad_sample(op, _target(1.0), sample).status == "ok"
    bad = G.run_grad_sample(op, _target(1.001), sample)  # 0.1% off: beyond float32 rounding, and not excused
    assert bad.status == "wrong" and "gradient" in bad.detail
    assert G.run_grad_sample(op, _target(None), sample).status == "unsupported"


def test_finite_differences_reject_a_wrong_gradient():
    op = _entry("as_strided_scatter")  # op_db: torch's own gradient fails its check
    assert G.torch_grad_known_wrong(op) and not G.torch_grad_known_wrong(_entry("sin"))
    torch.manual_seed(0)
    sample = next(s for s in op.sample_inputs("cpu", torch.float32, requires_grad=True) if s.input.numel() > 4)
    leaves = G.grad_leaves(sample)
    mask, vs, _ = G._torch_grads(op, sample, leaves, torch.float32, 0)
    ours = G._tw_grads(op, H.resolve(op), sample, leaves, mask, vs)
    got = [G._as_got(g, t) for g, t in zip(ours, leaves)]
    assert G.finite_differences_agree(op, sample, leaves, got, 0)
    off = [H._Got(g.dtype, g.shape, g.value * 1.01) for g in got]
    assert not G.finite_differences_agree(op, sample, leaves, off, 0)


def test_normwise_excuse_is_narrow():
    exact = [torch.tensor([10.0, 0.0, -3.0], dtype=torch.float64)]
    theirs = [torch.tensor([10.0, 2e-5, -3.0])]  # torch's float32 is 2e-5 off somewhere
    near = [H._Got("float32", (3,), torch.tensor([10.0, 0.0, -3.00002]).numpy())]
    far = [H._Got("float32", (3,), torch.tensor([10.0, 0.0, -3.001]).numpy())]
    assert G._no_further_normwise(near, theirs, exact)
    assert not G._no_further_normwise(far, theirs, exact)
