"""PyTorch's "Learning PyTorch with examples" polynomial fit of sin(x), written the way old tutorials and many
programs still write it: the weights updated in place through ``.data``, their gradients zeroed through
``.grad.data`` (and, in the second variant, under ``torch.no_grad()`` with ``-=``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ._harness import run_both

pytestmark = pytest.mark.usefixtures("session")


def polyfit_data(torch, init):
    x = torch.linspace(-math.pi, math.pi, 2000)
    y = torch.sin(x)
    a, b, c, d = (torch.tensor(v, requires_grad=True) for v in init["abcd"])
    learning_rate = 1e-6
    losses = []
    for _ in range(120):
        y_pred = a + b * x + c * x ** 2 + d * x ** 3
        loss = (y_pred - y).pow(2).sum()
        losses.append(loss.item())
        loss.backward()
        for p in (a, b, c, d):
            p.data -= learning_rate * p.grad.data
            p.grad.data.zero_()
    return losses


def polyfit_no_grad(torch, init):
    x = torch.linspace(-math.pi, math.pi, 2000)
    y = torch.sin(x)
    a, b, c, d = (torch.tensor(v, requires_grad=True) for v in init["abcd"])
    losses = []
    for _ in range(120):
        loss = (a + b * x + c * x ** 2 + d * x ** 3 - y).pow(2).sum()
        losses.append(loss.item())
        loss.backward()
        with torch.no_grad():
            for p in (a, b, c, d):
                p -= 1e-6 * p.grad
                p.grad = None
    return losses


@pytest.mark.parametrize("program", [polyfit_data, polyfit_no_grad])
def test_polyfit_matches_torch(program):
    init = {"abcd": np.random.default_rng(0).standard_normal(4).astype(np.float32)}
    got, _ = run_both(program, init, rtol=2e-4)
    assert got[-1] < 0.2 * got[0]  # it learns
