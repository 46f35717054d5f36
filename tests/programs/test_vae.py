"""The VAE of pytorch/examples (vae/main.py), on sklearn's 8x8 digits: encoder to a mean and a log-variance, the
reparameterisation trick, a sigmoid decoder, binary cross-entropy plus the KL term, Adam. The noise of the
reparameterisation comes from ``init`` so both runs draw the same numbers."""

from __future__ import annotations

import numpy as np
import pytest

from ._harness import run_both

pytestmark = pytest.mark.usefixtures("session")

STEPS, BATCH, LATENT = 12, 64, 8


def vae(torch, init):
    nn, F = torch.nn, torch.nn.functional

    class VAE(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(64, 32)
            self.fc21 = nn.Linear(32, LATENT)
            self.fc22 = nn.Linear(32, LATENT)
            self.fc3 = nn.Linear(LATENT, 32)
            self.fc4 = nn.Linear(32, 64)

        def encode(self, x):
            h1 = F.relu(self.fc1(x))
            return self.fc21(h1), self.fc22(h1)

        def reparameterize(self, mu, logvar, eps):
            std = torch.exp(0.5 * logvar)
            return mu + eps * std

        def decode(self, z):
            h3 = F.relu(self.fc3(z))
            return torch.sigmoid(self.fc4(h3))

        def forward(self, x, eps):
            mu, logvar = self.encode(x.view(-1, 64))
            z = self.reparameterize(mu, logvar, eps)
            return self.decode(z), mu, logvar

    def loss_function(recon_x, x, mu, logvar):
        bce = F.binary_cross_entropy(recon_x, x.view(-1, 64), reduction="sum")
        kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
        return bce + kld

    model = VAE()
    model.load_state_dict({k: torch.tensor(v) for k, v in init["weights"].items()})
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = torch.tensor(init["data"])
    model.train()
    losses = []
    for step in range(STEPS):
        x = data[step * BATCH:(step + 1) * BATCH]
        optimizer.zero_grad()
        recon, mu, logvar = model(x, torch.tensor(init["eps"][step]))
        loss = loss_function(recon, x, mu, logvar)
        loss.backward()
        optimizer.step()
        losses.append(loss.item() / len(x))
    return losses


def _init():
    from sklearn.datasets import load_digits

    rng = np.random.default_rng(0)
    data = (load_digits().data[:STEPS * BATCH] / 16.0).astype(np.float32)
    shapes = {"fc1": (32, 64), "fc21": (LATENT, 32), "fc22": (LATENT, 32), "fc3": (32, LATENT), "fc4": (64, 32)}
    weights = {}
    for name, (o, i) in shapes.items():
        bound = 1 / np.sqrt(i)
        weights[f"{name}.weight"] = rng.uniform(-bound, bound, (o, i)).astype(np.float32)
        weights[f"{name}.bias"] = rng.uniform(-bound, bound, o).astype(np.float32)
    eps = rng.standard_normal((STEPS, BATCH, LATENT)).astype(np.float32)
    return {"data": data, "weights": weights, "eps": eps}


def test_vae_matches_torch():
    pytest.importorskip("sklearn")
    got, _ = run_both(vae, _init(), rtol=1e-4)
    assert got[-1] < got[0]
