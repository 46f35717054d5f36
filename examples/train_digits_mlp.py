"""Train an MLP on scikit-learn's bundled 8x8 digits (no download) on a tensorwire cluster.

    pip install -e ".[examples]" && python examples/train_digits_mlp.py [--epochs 6] [--address tcp://...]

Parameters, optimizer state and the data set live on the cluster's device; each step ships one batch of
indices, runs forward, backward and the Adam update there, and (every few steps) fetches the loss.
"""

from __future__ import annotations

import argparse

import numpy as np
from sklearn.datasets import load_digits
from tqdm import tqdm

import tensorwire as tw
import tensorwire.nn.functional as F


def load_digits_split(seed: int = 0, test_fraction: float = 0.25):
    """(x_train, y_train, x_test, y_test) as float32 / int64 numpy arrays, pixels scaled to [0, 1]."""
    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    perm = np.random.default_rng(seed).permutation(len(x))
    n_test = int(len(x) * test_fraction)
    te, tr = perm[:n_test], perm[n_test:]
    return x[tr], y[tr], x[te], y[te]


def evaluate(model, x, y, batch_size: int = 512) -> float:
    """Accuracy of ``model`` on cluster tensors ``x``/``y`` (one fetch per batch)."""
    model.eval()
    correct = 0
    with tw.no_grad():
        for i in range(0, x.shape[0], batch_size):
            pred = model(x[i:i + batch_size]).argmax(1)
            correct += int((pred == y[i:i + batch_size]).sum().item())
    model.train()
    return correct / x.shape[0]


def train(model, data, epochs: int = 10, batch_size: int = 64, lr: float = 2e-3, seed: int = 0,
          progress: bool = True, log_every: int = 10):
    """Train ``model`` with Adam and a cosine schedule; returns the test accuracy."""
    x_tr, y_tr, x_te, y_te = data
    # the whole (small) data set goes to the device once; batches are gathers there
    xs, ys = tw.tensor(x_tr), tw.tensor(y_tr)
    xt, yt = tw.tensor(x_te), tw.tensor(y_te)
    loader = tw.utils.data.DataLoader(tw.utils.data.TensorDataset(xs, ys), batch_size=batch_size, shuffle=True,
                                      drop_last=True, generator=tw.Generator(seed))
    opt = tw.optim.Adam(model.parameters(), lr=lr)
    sched = tw.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs * len(loader))
    bar = tqdm(total=epochs * len(loader), disable=not progress, desc="train", unit="step")
    for epoch in range(epochs):
        for step, (xb, yb) in enumerate(loader):
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            if step % log_every == 0:  # fetching the loss is the only sync in the loop
                bar.set_postfix(epoch=epoch, loss=f"{loss.item():.4f}")
            bar.update(1)
    bar.close()
    return evaluate(model, xt, yt)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--address", default=None, help="dispatcher address (default: an embedded local cluster)")
    a = p.parse_args()
    tw.connect(a.address)
    tw.manual_seed(a.seed)
    model = tw.models.MLP(64, [128], 10)
    print(model)
    acc = train(model, load_digits_split(a.seed), a.epochs, a.batch_size, a.lr, a.seed)
    print(f"test accuracy: {acc:.4f}")


if __name__ == "__main__":
    main()
