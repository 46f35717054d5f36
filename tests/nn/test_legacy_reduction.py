"""The losses' deprecated ``size_average`` / ``reduce`` arguments mean what torch's mean, in ``tw.nn.functional`` as
in the loss modules: old tutorials' VAE sums its reconstruction loss with ``F.binary_cross_entropy(x_reconst, x,
size_average=False)`` (yunjey's pytorch-tutorial), which tensorwire took for a mean (a loss ~800 times too small,
silently). Against PyTorch where installed, else against the ``reduction=`` spelling."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tensorwire as tw
import tensorwire.nn.functional as F

pytestmark = pytest.mark.usefixtures("session")

rng = np.random.default_rng(0)
X = rng.random((4, 3)).astype(np.float32) * 0.8 + 0.1
Y = rng.random((4, 3)).astype(np.float32)
SIGN = np.where(rng.random(4) > 0.5, 1.0, -1.0).astype(np.float32)
CLS = rng.integers(0, 3, 4)

# (name, positional arguments before size_average, as numpy arrays / ints)
CASES = [("mse_loss", (X, Y)), ("l1_loss", (X, Y)), ("smooth_l1_loss", (X, Y)), ("binary_cross_entropy", (X, Y, None)),
         ("binary_cross_entropy_with_logits", (X, Y, None)), ("nll_loss", (np.log(X), CLS, None)),
         ("cross_entropy", (X, CLS, None)), ("kl_div", (np.log(X), Y)), ("soft_margin_loss", (X, np.sign(Y - .5))),
         ("margin_ranking_loss", (X[:, 0], Y[:, 0], SIGN, 0.1)), ("hinge_embedding_loss", (X, np.sign(Y - .5), 1.0)),
         ("multilabel_soft_margin_loss", (X, (Y > .5).astype(np.float32), None)),
         ("multi_margin_loss", (X, CLS, 1, 1.0, None)),
         ("cosine_embedding_loss", (X, Y, SIGN, 0.0)), ("poisson_nll_loss", (X, Y, True, False))]


def _args(lib, values):
    return [lib.tensor(v) if isinstance(v, np.ndarray) else v for v in values]


@pytest.mark.parametrize("legacy, reduction", [({"size_average": False}, "sum"), ({"reduce": False}, "none"),
                                               ({"size_average": True}, "mean")])
@pytest.mark.parametrize("name, values", CASES, ids=[c[0] for c in CASES])
def test_a_functional_losss_legacy_arguments_mean_torchs_reduction(name, values, legacy, reduction):
    fn = getattr(F, name)
    with pytest.warns(UserWarning, match=f"please use reduction='{reduction}' instead"):
        got = fn(*_args(tw, values), **legacy)
    want = fn(*_args(tw, values), reduction=reduction)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    try:
        import torch
    except ImportError:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = getattr(torch.nn.functional, name)(*_args(torch, values), **legacy)
    np.testing.assert_allclose(got.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-7)


def test_positional_legacy_arguments_too():
    x, y = tw.tensor(X), tw.tensor(Y)
    with pytest.warns(UserWarning, match="reduction='sum'"):
        got = F.mse_loss(x, y, False)  # (size_average, positionally: torch's third parameter)
    np.testing.assert_allclose(got.item(), ((X - Y) ** 2).sum(), rtol=1e-6)
    with pytest.warns(UserWarning, match="reduction='none'"):
        assert F.binary_cross_entropy(x, tw.tensor(Y), None, None, False).shape == (4, 3)


def test_a_call_without_them_warns_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        F.binary_cross_entropy(tw.tensor(X), tw.tensor(Y), reduction="sum")
        F.mse_loss(tw.tensor(X), tw.tensor(Y))
