"""torch's dropout layers besides ``nn.Dropout`` (issue 33): ``Dropout1d/2d/3d``, ``AlphaDropout``,
``FeatureAlphaDropout``: their reprs and checks as torch's, identity in eval, whole channels dropped together and the
kept ones scaled, alpha dropout keeping a standard normal's mean and variance, gradients through the same mask."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw
from tensorwire import nn
from tensorwire.protocol.errors import ShapeError

from ._util import needs_autograd, needs_torch, torch

LAYERS = ["Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout"]
#: the input each layer drops whole channels of (N, C, *spatial); AlphaDropout drops elements
SHAPES = {"Dropout1d": (4, 6, 50), "Dropout2d": (4, 6, 7, 7), "Dropout3d": (4, 6, 3, 4, 4),
          "AlphaDropout": (4, 6, 50), "FeatureAlphaDropout": (4, 6, 7, 7)}


@needs_torch
@pytest.mark.parametrize("name", LAYERS)
def test_layers_are_torchs(session, name):
    ours, ref = getattr(nn, name)(0.3, inplace=True), getattr(torch.nn, name)(0.3, inplace=True)
    assert repr(ours) == repr(ref) and isinstance(ours, nn.Dropout)
    assert (ours.p, ours.inplace) == (ref.p, ref.inplace)
    with pytest.raises(ValueError, match="between 0 and 1"):
        getattr(nn, name)(1.5)
    x = tw.randn(*SHAPES[name])
    m = getattr(nn, name)(0.5).eval()
    assert m(x) is x or m(x).tolist() == x.tolist()


@pytest.mark.parametrize("name", ["Dropout1d", "Dropout2d", "Dropout3d"])
def test_feature_dropout_zeroes_whole_channels_and_scales_the_rest(session, name):
    tw.manual_seed(0)
    shape = SHAPES[name]
    x = tw.ones(*shape)
    y = getattr(nn, name)(0.5)(x).numpy().reshape(shape[0] * shape[1], -1)
    per_channel = {tuple(np.unique(row)) for row in y}
    assert per_channel <= {(0.0,), (2.0,)} and len(per_channel) == 2  # each channel all dropped or all kept
    if name != "Dropout2d":  # (a 3-D input to dropout2d is (N, C, L) in torch: test_feature_dropout_ranks)
        unbatched = getattr(nn, name)(0.5)(tw.ones(*shape[1:])).numpy().reshape(shape[1], -1)
        assert {tuple(np.unique(row)) for row in unbatched} <= {(0.0,), (2.0,)}


#: (function, input shape, the shape of its draws) for every rank torch takes, deprecated ones included: dropout2d
#: draws along dims 0 and 1 whatever the rank (a 2-D input element by element, a 3-D one as (N, C, L)); dropout1d's
#: and dropout3d's unbatched inputs have dim 0 as the channel
RANKS = [("dropout1d", (6, 50), (6, 1)), ("dropout1d", (4, 6, 50), (4, 6, 1)),
         ("dropout2d", (64,), None), ("dropout2d", (16, 64), (16, 64)), ("dropout2d", (6, 7, 50), (6, 7, 1)),
         ("dropout2d", (4, 6, 7, 7), (4, 6, 1, 1)), ("dropout2d", (2, 3, 4, 5, 6), (2, 3, 1, 1, 1)),
         ("dropout3d", (64,), (64,)), ("dropout3d", (8, 50), (8, 1)), ("dropout3d", (8, 5, 6), (8, 1, 1)),
         ("dropout3d", (6, 3, 4, 4), (6, 1, 1, 1)), ("dropout3d", (4, 6, 3, 4, 4), (4, 6, 1, 1, 1))]


def _draws(mask: np.ndarray, noise) -> bool:
    """Whether ``mask`` is constant along the dims ``noise`` has as 1 (one draw per element of ``noise``)."""
    axes = tuple(d for d, n in enumerate(noise) if n == 1)
    return bool((mask == mask.max(axis=axes, keepdims=True)).all()) if axes else True


@needs_torch
@pytest.mark.parametrize("fn, shape, noise", RANKS, ids=[f"{f}-{len(s)}d" for f, s, _ in RANKS])
def test_feature_dropout_ranks_are_torchs(session, fn, shape, noise):
    """The rank rules of torch's channel dropouts (#77081): the same output shape, errors and warnings as torch, and
    the draws along the same dims (a silent error found by pytorch/examples' mnist_rnn, whose ``Dropout2d`` on
    (N, 64) features gave (N, N, 64))."""
    import warnings

    tw.manual_seed(0)
    torch.manual_seed(0)
    x, tx = tw.ones(*shape), torch.ones(*shape)
    ours, ref = getattr(nn.functional, fn), getattr(torch.nn.functional, fn)
    if noise is None:
        with pytest.raises(RuntimeError), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref(tx, 0.5)
        with pytest.raises(ShapeError, match="at least 2 dimensions"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ours(x, 0.5)
        return
    with warnings.catch_warnings(record=True) as theirs:
        warnings.simplefilter("always")
        want = ref(tx, 0.5).numpy()
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        y = ours(x, 0.5).numpy()
    assert [str(w.message) for w in got] == [str(w.message) for w in theirs]
    assert y.shape == want.shape == shape
    assert _draws(want, noise) and _draws(y, noise)
    assert set(np.unique(y)) <= {0.0, 2.0}


def test_alpha_dropout_keeps_mean_and_variance(session):
    tw.manual_seed(0)
    x = tw.randn(200_000)
    y = nn.AlphaDropout(0.2)(x).numpy()
    assert abs(y.mean()) < 0.02 and abs(y.std() - 1) < 0.02
    assert len(np.unique(y[np.isclose(y, y.min())])) == 1  # the dropped ones share one value
    f = nn.FeatureAlphaDropout(0.5)(tw.randn(8, 16, 5, 5)).numpy().reshape(128, 25)
    constant = [len(np.unique(row)) == 1 for row in f]  # a dropped channel is one constant, a kept one varies
    assert 0 < sum(constant) < 128


@needs_autograd
def test_gradient_goes_through_the_kept_channels(session):
    tw.manual_seed(1)
    x = tw.ones(2, 3, 4, 4, requires_grad=True)
    y = nn.Dropout2d(0.5)(x)
    y.sum().backward()
    assert x.grad.numpy().tolist() == (y.detach().numpy()).tolist()  # d(sum)/dx = the mask times 1/(1-p)
