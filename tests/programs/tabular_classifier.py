"""A tabular classifier with the usual habits of Kaggle notebooks: an nn.Sequential MLP with BatchNorm1d and
Dropout, AdamW with two parameter groups (weight decay on the weights, none on biases and norms), label smoothing,
ReduceLROnPlateau on the validation loss, per-step accuracy with ``.item()``, early-stopping bookkeeping, the best
weights kept with ``torch.save(model.state_dict(), buf)`` in an ``io.BytesIO`` and loaded back at the end.

Synthetic data from a seeded numpy RNG: 20 numeric features, 4 classes given by a random 2-layer teacher.
Batches come from a DataLoader over a TensorDataset with a seeded numpy permutation as its sampler.
"""

import io

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

N_FEATURES, N_CLASSES = 20, 4
BATCH_SIZE = 64
EVAL_EVERY = 5


def make_data(n=3000, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.randn(n, N_FEATURES).astype(np.float32)
    X[:, :5] *= 3.0  # features on different scales, as real tables have
    X[:, 5:10] += 2.0
    w1 = rng.randn(N_FEATURES, 32)
    w2 = rng.randn(32, N_CLASSES)
    y = np.argmax(np.tanh(X @ w1 / 4.0) @ w2 + 0.5 * rng.randn(n, N_CLASSES), axis=1).astype(np.int64)
    n_tr, n_va = int(0.7 * n), int(0.15 * n)
    # standardise with the training split's statistics
    mean, std = X[:n_tr].mean(0), X[:n_tr].std(0)
    X = (X - mean) / std
    return (X[:n_tr], y[:n_tr]), (X[n_tr:n_tr + n_va], y[n_tr:n_tr + n_va]), (X[n_tr + n_va:], y[n_tr + n_va:])


def build_model(dropout=0.0, bias=True):
    # bias=False: the Linears before a BatchNorm without bias (their bias gradient is rounding noise, which Adam
    # turns into real updates; with it two float32 libraries agree only to ~1e-4 on the eval-mode losses)
    return nn.Sequential(
        nn.Linear(N_FEATURES, 128, bias=bias),
        nn.BatchNorm1d(128),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(128, 64, bias=bias),
        nn.BatchNorm1d(64),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(64, N_CLASSES),
    )


def evaluate(model, loader, criterion):
    model.eval()
    total_loss, correct, count = 0.0, 0, 0
    with torch.no_grad():
        for xb, yb in loader:
            logits = model(xb)
            total_loss += criterion(logits, yb).item() * len(yb)
            correct += (logits.argmax(1) == yb).sum().item()
            count += len(yb)
    model.train()
    return total_loss / count, correct / count


def train(model, steps, lr=3e-3, weight_decay=1e-2, patience=4):
    (Xtr, ytr), (Xva, yva), (Xte, yte) = make_data()
    train_ds = TensorDataset(torch.tensor(Xtr), torch.tensor(ytr))
    val_loader = DataLoader(TensorDataset(torch.from_numpy(Xva), torch.from_numpy(yva)), batch_size=256)
    test_loader = DataLoader(TensorDataset(torch.from_numpy(Xte), torch.from_numpy(yte)), batch_size=256)
    rng = np.random.RandomState(1)
    order = np.concatenate([rng.permutation(len(train_ds)) for _ in range(1 + steps * BATCH_SIZE // len(train_ds))])
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, sampler=order.tolist(), drop_last=True)

    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if p.ndim < 2 or "bias" in name:
            no_decay.append(p)
        else:
            decay.append(p)
    optimizer = torch.optim.AdamW([
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ], lr=lr)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=1)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)

    losses, accs = [], []
    best_val, best_step, bad_evals, stopped_at = float("inf"), -1, 0, None
    buf = io.BytesIO()
    batches = iter(train_loader)
    model.train()
    for step in range(steps):
        xb, yb = next(batches)
        optimizer.zero_grad()
        logits = model(xb)
        loss = criterion(logits, yb)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        accs.append((logits.argmax(1) == yb).sum().item() / len(yb))

        if (step + 1) % EVAL_EVERY == 0:
            val_loss, val_acc = evaluate(model, val_loader, criterion)
            scheduler.step(val_loss)
            if val_loss < best_val:
                best_val, best_step, bad_evals = val_loss, step, 0
                buf = io.BytesIO()
                torch.save(model.state_dict(), buf)
            else:
                bad_evals += 1
                if bad_evals >= patience and stopped_at is None:
                    stopped_at = step  # early stopping would stop here; keep going for a fixed step count

    if best_step >= 0:
        buf.seek(0)
        model.load_state_dict(torch.load(buf))
    test_loss, test_acc = evaluate(model, test_loader, criterion)
    return losses + [float(np.mean(accs)), best_val, test_loss, test_acc, optimizer.param_groups[0]["lr"]]


if __name__ == "__main__":
    torch.manual_seed(0)
    out = train(build_model(), 200)
    for step, loss in enumerate(out):
        print(f"step {step}: {loss:.4f}")
