"""A bigram character language model in the manner of Karpathy's "let's build GPT" bigram.py: one ``nn.Embedding``
lookup gives the next character's logits, ``F.cross_entropy`` over the flattened batch, AdamW, and an
``estimate_loss`` under ``torch.no_grad`` on the train and validation splits at the end. Written for these tests,
not copied.

The loader is the original's: the whole text is one ``torch.long`` tensor, and each batch is
``torch.stack([data[i:i + block_size] for i in ix])`` over the elements of a tensor ``ix`` of random offsets (each
``i`` a 0-d tensor used as a slice bound). The original draws ``ix = torch.randint(...)``, and so does this program
with ``train(..., same_draws=False)``; by default the offsets come from a seeded numpy RNG instead
(``torch.from_numpy(rng.randint(...))``, still a tensor), so that torch and tensorwire, whose generators differ,
see the same batches. The text comes from a seeded character-level Markov chain (no download). Run it on its own:
``python tests/programs/bigram_stacked.py``.
"""

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

batch_size = 32  # how many independent sequences will we process in parallel?
block_size = 8  # what is the maximum context length for predictions?
learning_rate = 1e-2
eval_iters = 4


def make_text(n=4000, seed=0):
    """Characters from a random Markov chain whose rows favour a few successors each."""
    rng = np.random.RandomState(seed)
    alphabet = list("abcdefghijklmnopqrstuvwxyz .")
    k = len(alphabet)
    probs = rng.dirichlet(np.full(k, 0.1), size=k)
    out = [0]
    for _ in range(n - 1):
        out.append(rng.choice(k, p=probs[out[-1]]))
    return "".join(alphabet[i] for i in out)


text = make_text()
chars = sorted(list(set(text)))
vocab_size = len(chars)
stoi = {ch: i for i, ch in enumerate(chars)}
itos = {i: ch for i, ch in enumerate(chars)}


def encode(s):
    return [stoi[c] for c in s]


def decode(idx):
    return "".join([itos[i] for i in idx])


class BigramLanguageModel(nn.Module):
    def __init__(self, vocab_size):
        super().__init__()
        # each token directly reads off the logits for the next token from a lookup table
        self.token_embedding_table = nn.Embedding(vocab_size, vocab_size)

    def forward(self, idx, targets=None):
        logits = self.token_embedding_table(idx)  # (B, T, C)
        if targets is None:
            loss = None
        else:
            B, T, C = logits.shape
            logits = logits.view(B * T, C)
            targets = targets.view(B * T)
            loss = F.cross_entropy(logits, targets)
        return logits, loss


def build_model():
    return BigramLanguageModel(vocab_size)


def train(model, steps, same_draws=True):
    data = torch.tensor(encode(text), dtype=torch.long)
    n = int(0.9 * len(data))  # first 90% will be train, rest val
    train_data = data[:n]
    val_data = data[n:]
    rng = np.random.RandomState(1)

    def get_batch(split):
        data = train_data if split == "train" else val_data
        if same_draws:
            ix = torch.from_numpy(rng.randint(0, len(data) - block_size, (batch_size,)))
        else:
            ix = torch.randint(len(data) - block_size, (batch_size,))
        x = torch.stack([data[i : i + block_size] for i in ix])
        y = torch.stack([data[i + 1 : i + block_size + 1] for i in ix])
        return x, y

    @torch.no_grad()
    def estimate_loss():
        out = {}
        model.eval()
        for split in ["train", "val"]:
            losses = torch.zeros(eval_iters)
            for k in range(eval_iters):
                X, Y = get_batch(split)
                logits, loss = model(X, Y)
                losses[k] = loss.item()
            out[split] = losses.mean()
        model.train()
        return out

    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    losses = []
    for _ in range(steps):
        xb, yb = get_batch("train")
        logits, loss = model(xb, yb)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    final = estimate_loss()
    return [float(v.item()) for v in losses] + [float(final["train"].item()), float(final["val"].item())]


if __name__ == "__main__":
    torch.manual_seed(1337)
    for step, loss in enumerate(train(build_model(), 100)):
        print(f"step {step}: loss {loss:.4f}")
