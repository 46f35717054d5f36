"""ConvTranspose1d/2d, TransformerDecoderLayer, TransformerDecoder and Transformer against torch with copied weights:
parameter names, outputs and gradients (float32 tolerances), output_size, masks, initialisation and errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensorwire as tw
from tensorwire import nn
from tensorwire.nn import functional as F
from tensorwire.protocol.errors import ShapeError

from ._util import close, copy_weights, needs_autograd, needs_torch, torch

pytestmark = [needs_torch, needs_autograd]


def _pair(make):
    torch.manual_seed(0)
    ref, mine = make(torch.nn), make(nn)
    assert [(n, tuple(p.shape)) for n, p in mine.named_parameters()] == [
        (n, tuple(p.shape)) for n, p in ref.named_parameters()
    ]
    copy_weights(mine, ref)
    return ref, mine


def _check_grads(mine, ref, got, want, leaves, rtol=1e-4, atol=1e-5):
    """Backpropagate the same random upstream gradient through both and compare every gradient."""
    up = np.random.default_rng(9).standard_normal(tuple(want.shape)).astype(np.float32)
    (got * tw.tensor(up)).sum().backward()
    (want * torch.tensor(up)).sum().backward()
    for a, b in leaves:
        close(a.grad, b.grad, rtol, atol)
    for (n, p), q in zip(mine.named_parameters(), ref.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=rtol, atol=atol, err_msg=n)


CONV_T = {
    "2d_stride_outpad": (lambda m: m.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1), (2, 4, 5, 6)),
    "2d_groups_dilation_nobias": (
        lambda m: m.ConvTranspose2d(4, 6, (3, 2), stride=(2, 1), padding=(0, 1), groups=2, dilation=(1, 2), bias=False),
        (2, 4, 5, 6),
    ),
    # output_padding >= stride (allowed below the dilation): zero rows past the last contribution, then the bias
    "2d_outpad_below_dilation": (lambda m: m.ConvTranspose2d(2, 3, 3, dilation=3, output_padding=2), (1, 2, 4, 4)),
    "2d_unbatched": (lambda m: m.ConvTranspose2d(3, 2, 2, stride=2), (3, 4, 4)),
    "1d_stride_pad_outpad": (lambda m: m.ConvTranspose1d(3, 4, 4, stride=3, padding=2, output_padding=2), (2, 3, 7)),
    "1d_depthwise_unbatched": (lambda m: m.ConvTranspose1d(4, 4, 3, groups=4, dilation=2), (4, 9)),
}


@pytest.mark.parametrize("name", list(CONV_T))
def test_conv_transpose_matches_torch(session, name):
    make, shape = CONV_T[name]
    ref, mine = _pair(make)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    X, tx = tw.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    got, want = mine(X), ref(tx)
    assert tuple(got.shape) == tuple(want.shape)
    close(got, want, 1e-4, 1e-5)
    _check_grads(mine, ref, got, want, [(X, tx)])
    assert str(mine) == str(ref)


def test_conv_transpose_output_size_functional_and_init(session):
    ref, mine = _pair(lambda m: m.ConvTranspose2d(3, 2, 3, stride=3, padding=1))
    x = np.random.default_rng(2).standard_normal((2, 3, 4, 5)).astype(np.float32)
    for size in ((10, 13), (2, 2, 12, 15), (11, 14)):  # H: 10..12, W: 13..15
        got, want = mine(tw.tensor(x), output_size=size), ref(torch.tensor(x), output_size=size)
        assert tuple(got.shape) == tuple(want.shape)
        close(got, want, 1e-4, 1e-5)
    with pytest.raises(
        ValueError,
        match="requested an output size of \\[13, 13\\], but valid sizes range from \\[10, 13\\] to \\[12, 15\\]",
    ):
        mine(tw.tensor(x), output_size=(13, 13))
    w = np.random.default_rng(3).standard_normal((3, 4, 2)).astype(np.float32)
    z = np.random.default_rng(4).standard_normal((2, 3, 6)).astype(np.float32)
    close(
        F.conv_transpose1d(tw.tensor(z), tw.tensor(w), stride=2, padding=1, output_padding=1),
        torch.nn.functional.conv_transpose1d(torch.tensor(z), torch.tensor(w), stride=2, padding=1, output_padding=1),
        1e-4,
        1e-5,
    )
    tw.manual_seed(0)
    big = nn.ConvTranspose2d(64, 32, 3, groups=2)  # fan_in = (32 / 2) * 3 * 3 = 144
    bound = 1 / math.sqrt(144)
    v = big.weight.detach().numpy()
    assert big.weight.shape == (64, 16, 3, 3) and v.min() >= -bound and v.max() <= bound
    assert abs(v.std() - bound / math.sqrt(3)) < 0.03 * bound
    b = big.bias.detach().numpy()
    assert b.min() >= -bound and b.max() <= bound


def test_conv_transpose_errors(session):
    with pytest.raises(ValueError, match='Only "zeros" padding mode is supported for ConvTranspose2d'):
        nn.ConvTranspose2d(2, 2, 3, padding_mode="reflect")
    with pytest.raises(ValueError, match="out_channels must be divisible by groups"):
        nn.ConvTranspose1d(2, 3, 3, groups=2)
    with pytest.raises(ValueError, match="output padding must be smaller than either stride or dilation"):
        nn.ConvTranspose2d(2, 2, 3, stride=2, output_padding=2)(tw.zeros(1, 2, 4, 4))
    with pytest.raises(ShapeError, match="to have 2 channels, but got 3 channels instead"):
        nn.ConvTranspose2d(2, 2, 3)(tw.zeros(1, 3, 4, 4))
    with pytest.raises(ShapeError, match="Output size is too small"):
        nn.ConvTranspose1d(2, 2, 1, padding=3)(tw.zeros(1, 2, 4))


DEC = dict(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0)


@pytest.mark.parametrize("batch_first,norm_first,act", [(False, False, "relu"), (True, True, "gelu")])
def test_decoder_layer_and_decoder_match_torch(session, batch_first, norm_first, act):
    kw = dict(DEC, batch_first=batch_first, norm_first=norm_first, activation=act)
    ref, mine = _pair(
        lambda m: m.TransformerDecoder(m.TransformerDecoderLayer(**kw), num_layers=2, norm=m.LayerNorm(8))
    )
    assert mine.layers[0].linear1.weight is not mine.layers[1].linear1.weight
    rng = np.random.default_rng(5)
    tgt = rng.standard_normal((4, 3, 8)).astype(np.float32)
    mem = rng.standard_normal((6, 3, 8)).astype(np.float32)
    if batch_first:
        tgt, mem = tgt.transpose(1, 0, 2).copy(), mem.transpose(1, 0, 2).copy()
    kpm = np.zeros((3, 6), bool)
    kpm[1, -2:] = True
    causal = torch.nn.Transformer.generate_square_subsequent_mask(4)
    T, tT = tw.tensor(tgt, requires_grad=True), torch.tensor(tgt, requires_grad=True)
    M, tM = tw.tensor(mem, requires_grad=True), torch.tensor(mem, requires_grad=True)
    got = mine(T, M, tgt_mask=tw.tensor(causal.numpy()), memory_key_padding_mask=tw.tensor(kpm))
    want = ref(tT, tM, tgt_mask=causal, memory_key_padding_mask=torch.tensor(kpm))
    close(got, want, 1e-4, 1e-5)
    _check_grads(mine, ref, got, want, [(T, tT), (M, tM)], 1e-3, 1e-4)


def test_transformer_matches_torch(session):
    ref, mine = _pair(lambda m: m.Transformer(8, 2, 2, 1, 16, dropout=0.1, batch_first=True))
    ref.eval()
    mine.eval()  # dropout off (its masks come from a different generator than torch's)
    rng = np.random.default_rng(6)
    src = rng.standard_normal((2, 5, 8)).astype(np.float32)
    tgt = rng.standard_normal((2, 4, 8)).astype(np.float32)
    mask = nn.Transformer.generate_square_subsequent_mask(4)
    np.testing.assert_array_equal(mask.numpy(), torch.nn.Transformer.generate_square_subsequent_mask(4).numpy())
    S, tS = tw.tensor(src, requires_grad=True), torch.tensor(src, requires_grad=True)
    got = mine(S, tw.tensor(tgt), tgt_mask=mask, tgt_is_causal=True)
    want = ref(tS, torch.tensor(tgt), tgt_mask=torch.tensor(mask.numpy()), tgt_is_causal=True)
    close(got, want, 1e-4, 1e-5)
    _check_grads(mine, ref, got, want, [(S, tS)], 1e-3, 1e-4)
    with pytest.raises(ShapeError, match="the batch number of src and tgt must be equal"):
        mine(tw.tensor(src), tw.tensor(tgt[:1]))
    with pytest.raises(ShapeError, match="the feature number of src and tgt must be equal to d_model"):
        mine(tw.tensor(src[..., :4]), tw.tensor(tgt[..., :4]))
    # every matrix Xavier-uniform, as torch's _reset_parameters
    tw.manual_seed(0)
    big = nn.Transformer(64, 4, 1, 1, 128)
    w = big.decoder.layers[0].linear1.weight.detach().numpy()
    lim = math.sqrt(6 / (64 + 128))
    assert w.min() >= -lim and w.max() <= lim and abs(w.std() - lim / math.sqrt(3)) < 0.03 * lim
