"""Train a LeNet-style CNN on scikit-learn's bundled 8x8 digits (no download) on a tensorwire cluster.

    pip install -e ".[examples]" && python examples/train_digits_cnn.py [--epochs 6] [--address tcp://...]
"""

from __future__ import annotations

import argparse
import os
import sys

import tensorwire as tw

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_digits_mlp import load_digits_split, train  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--address", default=None, help="dispatcher address (default: an embedded local cluster)")
    a = p.parse_args()
    tw.connect(a.address)
    tw.manual_seed(a.seed)
    x_tr, y_tr, x_te, y_te = load_digits_split(a.seed)
    data = (x_tr.reshape(-1, 1, 8, 8), y_tr, x_te.reshape(-1, 1, 8, 8), y_te)
    model = tw.models.LeNet(in_channels=1, num_classes=10, image_size=8, channels=(8, 16), hidden=64)
    print(model)
    acc = train(model, data, a.epochs, a.batch_size, a.lr, a.seed)
    print(f"test accuracy: {acc:.4f}")


if __name__ == "__main__":
    main()
