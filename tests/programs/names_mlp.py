"""A character-level name generator in the manner of Karpathy's makemore with its ``--type mlp`` model (Bengio et
al. 2003): a ``Dataset`` whose ``__getitem__`` builds each name's input and target rows as torch tensors (a
``torch.tensor`` of the letters' ids written into ``torch.zeros`` rows by slice assignment, the target's tail set to
-1, which ``cross_entropy(ignore_index=-1)`` skips), a ``DataLoader`` that batches them with its default collate
(``torch.stack``), an MLP over the embeddings of the previous ``block_size`` characters (rolled in one position at a
time, the first set to a blank token), AdamW with weight decay, and an evaluation under ``torch.inference_mode`` on a
held-out split at the end. Written for these tests, not copied.

The names come from a seeded syllable generator (no download), of varying lengths, so every batch's rows are written
with different slice bounds. The loader samples with a seeded numpy permutation (``sampler=``) so that torch and
tensorwire, whose generators differ, see the same batches. Run it on its own: ``python tests/programs/names_mlp.py``.
"""

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

batch_size = 32
n_embd = 24
n_hidden = 64
learning_rate = 5e-3


def make_names(n=2000, seed=0):
    """Names of 2-5 syllables from a fixed table of onsets and vowels, with a few endings."""
    rng = np.random.RandomState(seed)
    onsets = ["", "b", "br", "ch", "d", "el", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "sh", "t", "v",
              "w", "z"]
    vowels = ["a", "e", "i", "o", "u", "ae", "ia", "y"]
    endings = ["", "", "n", "h", "s", "lyn", "ra", "tte"]
    out = []
    for _ in range(n):
        k = rng.randint(1, 4)
        name = "".join(onsets[rng.randint(len(onsets))] + vowels[rng.randint(len(vowels))] for _ in range(k))
        out.append(name + endings[rng.randint(len(endings))])
    return out


class CharDataset(Dataset):
    def __init__(self, words, chars, max_word_length):
        self.words = words
        self.max_word_length = max_word_length
        self.stoi = {ch: i + 1 for i, ch in enumerate(chars)}  # 0: the blank that starts and ends every name

    def __len__(self):
        return len(self.words)

    def encode(self, word):
        return torch.tensor([self.stoi[w] for w in word], dtype=torch.long)

    def __getitem__(self, idx):
        word = self.words[idx]
        ix = self.encode(word)
        x = torch.zeros(self.max_word_length + 1, dtype=torch.long)
        y = torch.zeros(self.max_word_length + 1, dtype=torch.long)
        x[1:1 + len(ix)] = ix
        y[:len(ix)] = ix
        y[len(ix) + 1:] = -1  # no loss past the end of the name
        return x, y


words = make_names()
chars = sorted(set("".join(words)))
vocab_size = len(chars) + 1
block_size = max(len(w) for w in words) + 1


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(vocab_size + 1, n_embd)  # +1: the blank before the start of the input
        self.mlp = nn.Sequential(nn.Linear(block_size * n_embd, n_hidden), nn.Tanh(), nn.Linear(n_hidden, vocab_size))

    def forward(self, idx, targets=None):
        embs = []
        for _ in range(block_size):
            embs.append(self.wte(idx))
            idx = torch.roll(idx, 1, 1)
            idx[:, 0] = vocab_size  # the blank token
        logits = self.mlp(torch.cat(embs, -1))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss


def build_model():
    return MLP()


def train(model, steps):
    n_test = min(200, len(words) // 10)
    train_set = CharDataset(words[n_test:], chars, block_size - 1)
    test_set = CharDataset(words[:n_test], chars, block_size - 1)
    order = np.random.RandomState(1).permutation(len(train_set)).tolist()
    loader = DataLoader(train_set, batch_size=batch_size, sampler=order * (1 + steps * batch_size // len(order)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.01, betas=(0.9, 0.99),
                                  eps=1e-8)

    @torch.inference_mode()
    def evaluate(dataset):
        model.eval()
        losses = [model(X, Y)[1].item() for X, Y in DataLoader(dataset, batch_size=100)]
        model.train()
        return sum(losses) / len(losses)

    losses = []
    batches = iter(loader)
    for _ in range(steps):
        X, Y = next(batches)
        logits, loss = model(X, Y)
        model.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return [float(v.item()) for v in losses] + [evaluate(test_set)]


if __name__ == "__main__":
    torch.manual_seed(1337)
    for step, loss in enumerate(train(build_model(), 200)):
        print(f"step {step}: loss {loss:.4f}")
