"""Training on the cluster: the same model, initial weights, data and optimizer give the same losses as torch
step by step; the digits MLP and CNN reach 95% test accuracy."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import tensorwire as tw
from tensorwire import nn, optim
from tensorwire.nn import functional as F

from ._util import copy_weights, needs_autograd, needs_torch, torch

pytestmark = needs_autograd


def _losses_tw(model, make_opt, batches, loss_fn, steps):
    opt = make_opt(model.parameters())
    out = []
    for i in range(steps):
        x, y = batches[i % len(batches)]
        loss = loss_fn(model(tw.tensor(x)), tw.tensor(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(loss)
    return [float(v.item()) for v in out]  # fetched at the end: the loop itself never syncs


def _losses_torch(model, make_opt, batches, loss_fn, steps):
    opt = make_opt(model.parameters())
    out = []
    for i in range(steps):
        x, y = batches[i % len(batches)]
        loss = loss_fn(model(torch.tensor(x)), torch.tensor(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


def _compare(make_tw, make_torch, opt_name, opt_kw, batches, loss_name, dtype, rtol, steps=8, skip=()):
    torch.manual_seed(0)
    tm = make_torch().to(getattr(torch, dtype))
    mm = make_tw().to(getattr(tw, dtype))
    copy_weights(mm, tm)
    tl = _losses_torch(tm, lambda ps: getattr(torch.optim, opt_name)(ps, **opt_kw), batches,
                       getattr(torch.nn.functional, loss_name), steps)
    ml = _losses_tw(mm, lambda ps: getattr(optim, opt_name)(ps, **opt_kw), batches, getattr(F, loss_name), steps)
    np.testing.assert_allclose(ml, tl, rtol=rtol)
    for (n, p), tp in zip(mm.named_parameters(), tm.parameters()):
        if n in skip:  # its exact gradient is 0: Adam turns rounding noise into +-lr steps, in torch too
            continue
        np.testing.assert_allclose(p.detach().numpy(), tp.detach().numpy(), rtol=rtol * 10, atol=rtol, err_msg=n)


def _cls_batches(shape, classes, dtype, n=3, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(shape).astype(dtype), rng.integers(0, classes, shape[0])) for _ in range(n)]


@needs_torch
@pytest.mark.parametrize("opt_name,opt_kw", [("SGD", dict(lr=0.1, momentum=0.9, nesterov=True)),
                                             ("Adam", dict(lr=0.01)),
                                             ("AdamW", dict(lr=0.01, weight_decay=0.1))])
@pytest.mark.parametrize("dtype,rtol", [("float64", 1e-5), ("float32", 1e-4)])
def test_mlp_losses_match_torch(session, opt_name, opt_kw, dtype, rtol):
    def make(m):
        return m.Sequential(m.Linear(10, 16), m.GELU(), m.Linear(16, 16), m.Tanh(), m.Linear(16, 4))

    _compare(lambda: make(nn), lambda: make(torch.nn), opt_name, opt_kw,
             _cls_batches((12, 10), 4, np.dtype(dtype)), "cross_entropy", dtype, rtol)


@needs_torch
def test_cnn_losses_match_torch(session):
    def make(m):
        return m.Sequential(m.Conv2d(1, 4, 3, padding=1, bias=False), m.BatchNorm2d(4), m.ReLU(), m.MaxPool2d(2),
                            m.Conv2d(4, 6, 3, stride=2, padding=1), m.SiLU(), m.AvgPool2d(2), m.Flatten(),
                            m.Linear(6, 5))

    _compare(lambda: make(nn), lambda: make(torch.nn), "Adam", dict(lr=0.01),
             _cls_batches((6, 1, 8, 8), 5, np.float32), "cross_entropy", "float32", 1e-4, steps=6)


@needs_torch
def test_transformer_layer_losses_match_torch(session):
    class Tiny:
        @staticmethod
        def build(m):
            class Net(m.Module):
                def __init__(self):
                    super().__init__()
                    self.enc = m.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
                    self.norm = m.LayerNorm(8)
                    self.head = m.Linear(8, 3)

                def forward(self, x):
                    return self.head(self.norm(self.enc(x)).mean(1))

            return Net()

    _compare(lambda: Tiny.build(nn), lambda: Tiny.build(torch.nn), "AdamW", dict(lr=0.01),
             _cls_batches((4, 5, 8), 3, np.float32), "cross_entropy", "float32", 1e-4, steps=6,
             skip=("enc.self_attn.in_proj_bias",))  # the key bias cannot change the attention weights


@needs_torch
def test_mse_regression_with_scheduler_and_clipping_match_torch(session):
    rng = np.random.default_rng(5)
    batches = [(rng.standard_normal((16, 3)), rng.standard_normal((16, 2))) for _ in range(2)]
    torch.manual_seed(1)
    tm = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.LeakyReLU(0.1), torch.nn.Linear(8, 2)).double()
    mm = nn.Sequential(nn.Linear(3, 8), nn.LeakyReLU(0.1), nn.Linear(8, 2)).double()
    copy_weights(mm, tm)
    to, mo = torch.optim.RMSprop(tm.parameters(), lr=0.01, momentum=0.5), optim.RMSprop(mm.parameters(), lr=0.01,
                                                                                        momentum=0.5)
    ts, ms = torch.optim.lr_scheduler.OneCycleLR(to, 0.05, total_steps=10), optim.lr_scheduler.OneCycleLR(
        mo, 0.05, total_steps=10)
    for i in range(10):
        x, y = batches[i % 2]
        tl = torch.nn.functional.mse_loss(tm(torch.tensor(x)), torch.tensor(y))
        ml = F.mse_loss(mm(tw.tensor(x)), tw.tensor(y))
        to.zero_grad()
        mo.zero_grad()
        tl.backward()
        ml.backward()
        tn = torch.nn.utils.clip_grad_norm_(tm.parameters(), 0.5)
        mn = nn.utils.clip_grad_norm_(mm.parameters(), 0.5)
        to.step()
        mo.step()
        ts.step()
        ms.step()
        assert ml.item() == pytest.approx(tl.item(), rel=1e-9)
        assert mn.item() == pytest.approx(tn.item(), rel=1e-9)


def _example():
    """The digits example module (examples/train_digits_mlp.py) and its data split."""
    pytest.importorskip("sklearn", reason="scikit-learn is needed for the digits data set")
    path = os.path.join(os.path.dirname(__file__), "..", "..", "examples")
    if path not in sys.path:
        sys.path.insert(0, path)
    import train_digits_mlp

    return train_digits_mlp, train_digits_mlp.load_digits_split(0)


def test_digits_mlp_reaches_95_percent(session):
    ex, data = _example()
    tw.manual_seed(0)
    acc = ex.train(tw.models.MLP(64, [128], 10), data, epochs=6, batch_size=32, lr=5e-3, progress=False)
    assert acc >= 0.95


def test_digits_cnn_reaches_95_percent(session):
    ex, (x_tr, y_tr, x_te, y_te) = _example()
    tw.manual_seed(0)
    model = tw.models.LeNet(1, 10, image_size=8, channels=(8, 16), hidden=64)
    # (10 epochs: at 6, seeds 0-5 of the generator as of session 59 reach 0.944-0.967, the test's margin was its seed's;
    # at 10 they reach 0.962-0.978)
    acc = ex.train(model, (x_tr.reshape(-1, 1, 8, 8), y_tr, x_te.reshape(-1, 1, 8, 8), y_te), epochs=10,
                   batch_size=32, lr=1e-2, progress=False)
    assert acc >= 0.95
