"""A few Adam steps of the digits MLP on one device: the losses, for comparing devices and CPU modes."""

from __future__ import annotations

import os
import sys

import pytest


def adam_losses(device: str, steps: int = 6) -> list[float]:
    """The losses of ``steps`` Adam steps (batch 32, seed 0) of the digits MLP on ``device`` (default session)."""
    pytest.importorskip("sklearn", reason="scikit-learn is needed for the digits data set")
    import tensorwire as tw
    import tensorwire.nn.functional as F

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
    try:
        import train_digits_mlp
    finally:
        sys.path.pop(0)
    x_tr, y_tr, _, _ = train_digits_mlp.load_digits_split(0)
    batches = [(x_tr[i:i + 32], y_tr[i:i + 32]) for i in range(0, 32 * 4, 32)]
    tw.manual_seed(0)
    model = tw.models.MLP(64, [128], 10).to(device)
    opt = tw.optim.Adam(model.parameters(), lr=5e-3)
    out = []
    for step in range(steps):
        x, y = batches[step % len(batches)]
        loss = F.cross_entropy(model(tw.tensor(x, device=device)), tw.tensor(y, device=device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(loss)
    return [float(v.item()) for v in out]
