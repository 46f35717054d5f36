"""Module semantics (registration, state_dict, to, train/eval, hooks, repr, containers, init) and layer forward
passes against torch with the same weights."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

import tensorwire as tw
from tensorwire import nn
from tensorwire.nn import functional as F

from ._util import close, copy_weights, needs_torch, torch


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.act = nn.ReLU()
        self.blocks = nn.ModuleList([nn.Linear(8, 8), nn.Linear(8, 8)])
        self.heads = nn.ModuleDict({"a": nn.Linear(8, 2)})
        self.scale = nn.Parameter(tw.ones(1))
        self.register_buffer("steps", tw.zeros(1))
        self.register_buffer("cache", tw.zeros(2), persistent=False)
        self.note = "plain attribute"

    def forward(self, x):
        x = self.act(self.fc1(x))
        for b in self.blocks:
            x = b(x)
        return self.heads["a"](x) * self.scale


def test_registration_and_iteration(session):
    m = Net()
    names = [n for n, _ in m.named_parameters()]
    assert names == ["scale", "fc1.weight", "fc1.bias", "blocks.0.weight", "blocks.0.bias", "blocks.1.weight",
                     "blocks.1.bias", "heads.a.weight", "heads.a.bias"]
    assert len(list(m.parameters())) == 9
    assert all(p.requires_grad and isinstance(p, nn.Parameter) for p in m.parameters())
    assert [n for n, _ in m.named_buffers()] == ["steps", "cache"]
    assert [n for n, _ in m.named_children()] == ["fc1", "act", "blocks", "heads"]
    assert len(list(m.modules())) == 8
    assert m.note == "plain attribute" and "note" not in dict(m.named_parameters())
    assert list(m.state_dict()) == ["scale", "steps", "fc1.weight", "fc1.bias", "blocks.0.weight", "blocks.0.bias",
                                    "blocks.1.weight", "blocks.1.bias", "heads.a.weight", "heads.a.bias"]
    assert m.get_submodule("blocks.1") is m.blocks[1]
    assert m.get_parameter("heads.a.bias") is m.heads["a"].bias
    # shared modules count once
    seq = nn.Sequential(m.fc1, m.fc1)
    assert len(list(seq.parameters())) == 2
    with pytest.raises(TypeError):
        m.fc1 = "not a module"
    del m.fc1
    assert "fc1" not in dict(m.named_children())


def test_state_dict_roundtrip_and_strict(session):
    tw.manual_seed(0)
    a, b = Net(), Net()
    r = b.load_state_dict(a.state_dict())
    assert r.missing_keys == [] and r.unexpected_keys == []
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy(), err_msg=n)
    sd = a.state_dict()
    snap = sd["fc1.weight"].numpy().copy()
    kept = copy.deepcopy(sd)
    with tw.no_grad():
        a.fc1.weight.add_(1.0)
    # torch's: the values share the parameters' updates (deepcopy keeps a snapshot) ...
    np.testing.assert_array_equal(sd["fc1.weight"].numpy(), snap + 1)
    np.testing.assert_array_equal(kept["fc1.weight"].numpy(), snap)
    with tw.no_grad():  # ... both ways: an EMA written through the state dict (timm's ModelEmaV2) changes the module
        sd["fc1.weight"].mul_(0.5)
        sd["fc1.bias"].zero_()
    np.testing.assert_array_equal(a.fc1.weight.detach().numpy(), ((snap + 1) * np.float32(0.5)))
    assert not a.fc1.bias.detach().numpy().any()
    bad = dict(sd)
    bad.pop("fc1.bias")
    bad["extra"] = tw.zeros(1)
    with pytest.raises(RuntimeError, match='Missing key.*"fc1.bias".*\n.*Unexpected key.*"extra"'):
        b.load_state_dict(bad)
    r = b.load_state_dict(bad, strict=False)
    assert r.missing_keys == ["fc1.bias"] and r.unexpected_keys == ["extra"]
    wrong = dict(sd)
    wrong["fc1.weight"] = tw.zeros(3, 3)
    with pytest.raises(RuntimeError, match="size mismatch for fc1.weight"):
        b.load_state_dict(wrong)
    b.load_state_dict({k: v.numpy() for k, v in sd.items()})  # numpy values work too
    np.testing.assert_array_equal(b.fc1.bias.detach().numpy(), a.fc1.bias.detach().numpy())


def test_to_train_eval_grad_flags(session):
    m = Net()
    p = m.fc1.weight
    m.to(tw.float64)
    assert m.fc1.weight is p and p.dtype == tw.float64 and m.steps.dtype == tw.float64
    m.to("cpu:1")
    assert p.device == "cpu:1" and m.steps.device == "cpu:1"
    assert m(tw.ones(2, 4, dtype=tw.float64, device="cpu:1")).shape == (2, 2)
    m.to("cpu:0").float()
    assert p.device == "cpu:0" and p.dtype == tw.float32
    assert m.training and all(x.training for x in m.modules())
    m.eval()
    assert not any(x.training for x in m.modules())
    m.train()
    m.requires_grad_(False)
    assert not any(q.requires_grad for q in m.parameters())
    m.requires_grad_(True)
    seen = []
    m.apply(lambda mod: seen.append(type(mod).__name__))
    assert seen[-1] == "Net" and seen.count("Linear") == 4


def test_zero_grad_hooks_repr_deepcopy(session):
    m = Net()
    for q in m.parameters():
        q.grad = tw.ones_like(q)
    m.zero_grad(set_to_none=False)
    assert float(m.fc1.weight.grad.abs().sum()) == 0
    m.zero_grad()
    assert m.fc1.weight.grad is None
    calls = []
    h = m.fc1.register_forward_hook(lambda mod, args, out: calls.append(out.shape) or out * 0)
    pre = m.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
    out = m(tw.ones(3, 4))
    assert calls == [(3, 8)]
    h.remove()
    pre.remove()
    m(tw.ones(3, 4))
    assert len(calls) == 1
    h0 = tw.zeros(3, 8)  # the hook zeroed fc1's output
    for b in m.blocks:
        h0 = b(h0)
    np.testing.assert_allclose(out.detach().numpy(), (m.heads["a"](h0) * m.scale).detach().numpy(), rtol=1e-6)
    text = repr(m)
    assert "(fc1): Linear(in_features=4, out_features=8, bias=True)" in text
    assert "(blocks): ModuleList(\n    (0-1): 2 x Linear" in text  # (torch folds equal layers)
    c = copy.deepcopy(m)
    assert c.fc1.weight is not m.fc1.weight
    np.testing.assert_array_equal(c.fc1.weight.detach().numpy(), m.fc1.weight.detach().numpy())
    with tw.no_grad():
        c.fc1.weight.mul_(0)
    assert float(m.fc1.weight.abs().sum()) > 0


def test_containers(session):
    s = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    assert len(s) == 3 and isinstance(s[1], nn.ReLU) and len(s[:2]) == 2 and isinstance(s[-1], nn.Linear)
    s.append(nn.Sigmoid())
    assert s(tw.ones(5, 2)).shape == (5, 1)
    from collections import OrderedDict

    named = nn.Sequential(OrderedDict(first=nn.Linear(2, 2), act=nn.Tanh()))
    assert [n for n, _ in named.named_parameters()] == ["first.weight", "first.bias"]
    ml = nn.ModuleList([nn.Linear(1, 1)])
    ml += [nn.Linear(1, 1)]
    ml.insert(0, nn.Identity())
    assert len(ml) == 3 and isinstance(ml[0], nn.Identity)
    md = nn.ModuleDict({"x": nn.Linear(1, 1)})
    md["y"] = nn.ReLU()
    assert list(md.keys()) == ["x", "y"] and "x" in md
    pl = nn.ParameterList([nn.Parameter(tw.zeros(2)), tw.ones(1)])
    assert [n for n, _ in pl.named_parameters()] == ["0", "1"]


def test_init_is_seeded_and_has_torch_statistics(session):
    tw.manual_seed(123)
    a = nn.Linear(256, 512)
    tw.manual_seed(123)
    b = nn.Linear(256, 512)
    np.testing.assert_array_equal(a.weight.detach().numpy(), b.weight.detach().numpy())
    w = a.weight.detach().numpy()
    bound = 1 / math.sqrt(256)  # kaiming_uniform_(a=sqrt(5)) gives U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    assert w.min() >= -bound and w.max() <= bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.01 * bound
    t = tw.empty(400, 300)
    nn.init.xavier_uniform_(t)
    lim = math.sqrt(6 / 700)
    assert abs(t.numpy().std() - lim / math.sqrt(3)) < 0.02 * lim
    nn.init.kaiming_normal_(t, nonlinearity="relu")
    assert abs(t.numpy().std() - math.sqrt(2 / 300)) < 0.02 * math.sqrt(2 / 300)
    nn.init.trunc_normal_(t, std=0.5, a=-1, b=1)
    v = t.numpy()
    assert v.min() >= -1 and v.max() <= 1 and 0.35 < v.std() < 0.45
    nn.init.zeros_(t)
    assert float(t.abs().sum()) == 0
    nn.init.orthogonal_(t)
    q = t.numpy().astype(np.float64)
    np.testing.assert_allclose(q.T @ q, np.eye(300), atol=1e-4)
    e = nn.Embedding(10, 4, padding_idx=2)
    assert float(e.weight[2].abs().sum()) == 0


def test_dropout(session):
    tw.manual_seed(0)
    x = tw.ones(200, 100)
    d = nn.Dropout(0.3)
    y = d(x).numpy()
    np.testing.assert_allclose(np.unique(y), [0.0, 1 / 0.7], rtol=1e-6)
    assert abs((y == 0).mean() - 0.3) < 0.02
    d.eval()
    assert d(x) is x


@needs_torch
@pytest.mark.parametrize("make", [
    lambda m: m.Linear(6, 5),
    lambda m: m.Bilinear(6, 4, 3),
    lambda m: m.Conv2d(3, 4, 3, stride=2, padding=1),
    lambda m: m.Conv2d(4, 6, (3, 2), padding="same", groups=2, padding_mode="reflect"),
    lambda m: m.Conv1d(3, 4, 3, dilation=2),
    lambda m: m.LayerNorm(6),
    lambda m: m.RMSNorm(6),
    lambda m: m.GroupNorm(2, 4),
    lambda m: m.MaxPool2d(3, 2, 1),
    lambda m: m.AvgPool2d(2),
    lambda m: m.AdaptiveAvgPool2d((3, 2)),
    lambda m: m.GELU("tanh"),
    lambda m: m.LeakyReLU(0.2),
    lambda m: m.LogSoftmax(-1),
    lambda m: m.Flatten(),
], ids=["linear", "bilinear", "conv2d", "conv2d_same_groups_reflect", "conv1d", "layernorm", "rmsnorm", "groupnorm",
        "maxpool", "avgpool", "adaptive", "gelu", "leaky", "logsoftmax", "flatten"])
def test_layers_match_torch(session, make):
    torch.manual_seed(0)
    ref = make(torch.nn)
    mine = make(nn)
    copy_weights(mine, ref)
    name = type(ref).__name__
    rng = np.random.default_rng(0)
    if name == "Bilinear":
        a, b = rng.standard_normal((5, 6)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
        close(mine(tw.tensor(a), tw.tensor(b)), ref(torch.tensor(a), torch.tensor(b)), 1e-4, 1e-5)
        return
    shape = {"Linear": (5, 6), "LayerNorm": (2, 3, 6), "RMSNorm": (2, 3, 6), "Conv1d": (2, 3, 12),
             "Conv2d": (2, ref.in_channels if hasattr(ref, "in_channels") else 3, 9, 8)}.get(name, (2, 4, 9, 8))
    x = rng.standard_normal(shape).astype(np.float32)
    close(mine(tw.tensor(x)), ref(torch.tensor(x)), 1e-4, 1e-5)


@needs_torch
def test_batchnorm_train_and_eval_match_torch(session):
    rng = np.random.default_rng(1)
    for ref, mine, shape in ((torch.nn.BatchNorm2d(3), nn.BatchNorm2d(3), (4, 3, 5, 5)),
                             (torch.nn.BatchNorm1d(5, momentum=None), nn.BatchNorm1d(5, momentum=None), (8, 5))):
        for _ in range(3):
            x = rng.standard_normal(shape).astype(np.float32) * 2 + 1
            close(mine(tw.tensor(x)), ref(torch.tensor(x)), 1e-4, 1e-5)
        close(mine.running_mean, ref.running_mean, 1e-5, 1e-6)
        close(mine.running_var, ref.running_var, 1e-5, 1e-6)
        assert int(mine.num_batches_tracked.item()) == 3
        mine.eval()
        ref.eval()
        close(mine(tw.tensor(x)), ref(torch.tensor(x)), 1e-4, 1e-5)


@needs_torch
def test_embedding_attention_transformer_match_torch(session):
    torch.manual_seed(0)
    rng = np.random.default_rng(2)
    emb_t, emb = torch.nn.Embedding(20, 8, padding_idx=0), nn.Embedding(20, 8, padding_idx=0)
    copy_weights(emb, emb_t)
    ids = rng.integers(0, 20, (3, 7))
    close(emb(tw.tensor(ids)), emb_t(torch.tensor(ids)))
    mha_t = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    assert [n for n, _ in mha.named_parameters()] == [n for n, _ in mha_t.named_parameters()]
    copy_weights(mha, mha_t)
    q = rng.standard_normal((3, 5, 8)).astype(np.float32)
    kv = rng.standard_normal((3, 6, 8)).astype(np.float32)
    kpm = np.zeros((3, 6), bool)
    kpm[0, -2:] = True
    out, w = mha(tw.tensor(q), tw.tensor(kv), tw.tensor(kv), key_padding_mask=tw.tensor(kpm))
    ro, rw = mha_t(torch.tensor(q), torch.tensor(kv), torch.tensor(kv), key_padding_mask=torch.tensor(kpm))
    close(out, ro, 1e-4, 1e-5)
    close(w, rw, 1e-4, 1e-5)
    for norm_first, act in ((False, "relu"), (True, "gelu")):
        layer_t = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=False, norm_first=norm_first,
                                                   activation=act)
        layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=False, norm_first=norm_first,
                                           activation=act)
        assert [n for n, _ in layer.named_parameters()] == [n for n, _ in layer_t.named_parameters()]
        copy_weights(layer, layer_t)
        layer_t.eval()
        src = rng.standard_normal((5, 3, 8)).astype(np.float32)
        causal = torch.nn.Transformer.generate_square_subsequent_mask(5)
        close(layer(tw.tensor(src), src_mask=tw.tensor(causal.numpy())),
              layer_t(torch.tensor(src), src_mask=causal), 1e-4, 1e-5)
    enc = nn.TransformerEncoder(layer, 2)
    assert len(enc.layers) == 2 and enc.layers[0].linear1.weight is not layer.linear1.weight
    assert enc(tw.tensor(src)).shape == (5, 3, 8)


@needs_torch
@pytest.mark.parametrize("args", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
                                  dict(kernel_size=2, stride=1, dilation=(1, 2))])
def test_max_pool2d_gradient_matches_torch_with_ties(session, args):
    """max_pool2d's backward routes each window's gradient to its first maximum, as torch does, also when a window
    holds the maximum twice (integers make ties certain) and where windows overlap; NaN windows route to the NaN, and
    an infinite output gradient reaches only its window's maximum."""
    rng = np.random.default_rng(11)
    x = rng.integers(0, 3, (2, 3, 7, 8)).astype(np.float64)
    x[0, 0, 1, 1] = np.nan
    g = rng.standard_normal(tuple(torch.nn.functional.max_pool2d(torch.tensor(x), **args).shape))
    g[1, 2, 0, 0] = np.inf
    X = tw.tensor(x, requires_grad=True)
    (F.max_pool2d(X, **args) * tw.tensor(g)).sum().backward()
    tx = torch.tensor(x, requires_grad=True)
    (torch.nn.functional.max_pool2d(tx, **args) * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(X.grad.numpy(), tx.grad.numpy(), rtol=1e-12, atol=0)


@needs_torch
def test_functional_matches_torch(session):
    import torch.nn.functional as TF

    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 3, 9, 10)).astype(np.float32)
    X, tx = tw.tensor(x), torch.tensor(x)
    close(F.unfold(X, (2, 3), padding=1, stride=(1, 2)), TF.unfold(tx, (2, 3), padding=1, stride=(1, 2)))
    close(F.max_pool2d(X, 3, 2, 1, ceil_mode=True), TF.max_pool2d(tx, 3, 2, 1, ceil_mode=True))
    close(F.avg_pool2d(X, 3, 2, 1, ceil_mode=True, count_include_pad=False),
          TF.avg_pool2d(tx, 3, 2, 1, ceil_mode=True, count_include_pad=False))
    close(F.pad(X, (1, 2, 2, 3), mode="reflect"), TF.pad(tx, (1, 2, 2, 3), mode="reflect"))
    close(F.pad(X, (1, 2, 0, 3), value=-1.5), TF.pad(tx, (1, 2, 0, 3), value=-1.5))
    close(F.interpolate(X, size=(5, 17)), TF.interpolate(tx, size=(5, 17)))
    close(F.interpolate(X, scale_factor=2, mode="bilinear"), TF.interpolate(tx, scale_factor=2, mode="bilinear"),
          1e-5, 1e-5)
    close(F.interpolate(X, size=(15, 7), mode="bilinear", align_corners=True),
          TF.interpolate(tx, size=(15, 7), mode="bilinear", align_corners=True), 1e-5, 1e-5)
    close(F.one_hot(tw.tensor([1, 0, 3]), 5), TF.one_hot(torch.tensor([1, 0, 3]), 5))
    z = rng.standard_normal((5, 12)).astype(np.float32)
    Z, tz = tw.tensor(z), torch.tensor(z)
    for f, g in ((F.gelu, TF.gelu), (F.silu, TF.silu), (F.softplus, TF.softplus), (F.relu6, TF.relu6),
                 (lambda a: F.gelu(a, approximate="tanh"), lambda a: TF.gelu(a, approximate="tanh")),
                 (lambda a: F.softmax(a, -1), lambda a: TF.softmax(a, -1))):
        close(f(Z), g(tz))
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3, 5, 8), (2, 3, 6, 8), (2, 3, 6, 8)))
    Q, K, V = map(tw.tensor, (q, k, v))
    tq, tk, tv = map(torch.tensor, (q, k, v))
    close(F.scaled_dot_product_attention(Q, K, V, is_causal=True), TF.scaled_dot_product_attention(tq, tk, tv,
                                                                                                    is_causal=True))
    m = rng.random((5, 6)) > 0.3
    m[:, 0] = True
    close(F.scaled_dot_product_attention(Q, K, V, attn_mask=tw.tensor(m)),
          TF.scaled_dot_product_attention(tq, tk, tv, attn_mask=torch.tensor(m)))
    fm = rng.standard_normal((5, 6)).astype(np.float32)
    close(F.scaled_dot_product_attention(Q, K, V, attn_mask=tw.tensor(fm), scale=0.3),
          TF.scaled_dot_product_attention(tq, tk, tv, attn_mask=torch.tensor(fm), scale=0.3))


@needs_torch
def test_losses_match_torch(session):
    import torch.nn.functional as TF

    rng = np.random.default_rng(4)
    z = rng.standard_normal((6, 5)).astype(np.float32)
    t = np.array([1, 0, 4, -100, 3, 2])
    w = rng.random(5).astype(np.float32)
    p = rng.random((6, 5)).astype(np.float32)
    Z, T, W, P = tw.tensor(z), tw.tensor(t), tw.tensor(w), tw.tensor(p)
    tz, tt, tww, tp = torch.tensor(z), torch.tensor(t), torch.tensor(w), torch.tensor(p)
    for kw in ({}, {"label_smoothing": 0.1}, {"weight": "w", "label_smoothing": 0.2}, {"reduction": "sum"},
               {"reduction": "none", "label_smoothing": 0.3}):
        a = {k: (W if v == "w" else v) for k, v in kw.items()}
        b = {k: (tww if v == "w" else v) for k, v in kw.items()}
        close(nn.CrossEntropyLoss(**a)(Z, T), TF.cross_entropy(tz, tt, **b), 1e-5, 1e-6)
    t2 = np.array([1, 0, 4, 4, 3, 2])
    close(F.cross_entropy(Z, tw.tensor(t2), ignore_index=4, label_smoothing=0.1),
          TF.cross_entropy(tz, torch.tensor(t2), ignore_index=4, label_smoothing=0.1))
    close(F.cross_entropy(Z, P, label_smoothing=0.1), TF.cross_entropy(tz, tp, label_smoothing=0.1))
    z4 = rng.standard_normal((2, 5, 3, 4)).astype(np.float32)
    t4 = rng.integers(0, 5, (2, 3, 4))
    close(F.cross_entropy(tw.tensor(z4), tw.tensor(t4)), TF.cross_entropy(torch.tensor(z4), torch.tensor(t4)))
    close(nn.NLLLoss(weight=W)(F.log_softmax(Z, 1), T), TF.nll_loss(TF.log_softmax(tz, 1), tt, weight=tww))
    s = 1 / (1 + np.exp(-z))
    close(nn.BCELoss()(tw.tensor(s), P), TF.binary_cross_entropy(torch.tensor(s), tp))
    close(nn.BCEWithLogitsLoss(pos_weight=W)(Z, P), TF.binary_cross_entropy_with_logits(tz, tp, pos_weight=tww))
    close(nn.MSELoss()(Z, P), TF.mse_loss(tz, tp))
    close(nn.L1Loss(reduction="sum")(Z, P), TF.l1_loss(tz, tp, reduction="sum"))
    close(nn.SmoothL1Loss(beta=0.5)(Z, P), TF.smooth_l1_loss(tz, tp, beta=0.5))



def test_detach_and_state_dict_share_updates_as_torchs(session):
    """The EMA habits (timm's ModelEmaV2 through ``state_dict()`` values, torch's ``AveragedModel`` through
    ``p.detach().copy_``), the torch-1.x clipping (``p.grad.detach().mul_(c)``), a parameter's ``detach()`` made a
    leaf of its own, and ``detach()`` inside an expression: the same values as torch's (in-place writes through them
    were lost until session 59)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    weights = [rng.standard_normal(s).astype(np.float32) for s in ((2, 2), (2,), (2, 2), (2,))]

    def run(lib):
        out = []
        p = lib.nn.Parameter(lib.ones(3))
        p.detach().add_(1)
        out.append(p.detach().numpy().copy())
        d = p.detach()
        with lib.no_grad():
            p.mul_(3)
        out.append(d.numpy().copy())
        lin, ema = lib.nn.Linear(2, 2), lib.nn.Linear(2, 2)
        with lib.no_grad():
            for t, w in zip([*lin.parameters(), *ema.parameters()], weights):
                t.copy_(lib.tensor(w))
            for e, v in zip(ema.state_dict().values(), lin.state_dict().values()):
                e.copy_(e * 0.9 + v * 0.1)
            for e, v in zip(ema.parameters(), lin.parameters()):
                e.detach().copy_(e.detach() * 0.5 + v.detach() * 0.5)
        out += [t.detach().numpy().copy() for t in ema.parameters()]
        x = p.detach().requires_grad_()
        (x * 2).sum().backward()
        out += [x.grad.numpy().copy(), p.grad is None]
        (p.detach() * p).sum().backward()
        out.append(p.grad.numpy().copy())
        p.grad.detach().mul_(0.5)
        out.append(p.grad.numpy().copy())
        y = p * 2
        out += [y.detach().requires_grad, y.detach().is_leaf]
        return out

    got, want = run(tw), run(torch)
    assert len(got) == len(want)
    for k, (a, b) in enumerate(zip(got, want)):
        assert (np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b), (k, a, b)
