"""A character-level GPT in the style of minGPT/nanoGPT: token and position embeddings, causal self-attention with
a ``tril`` mask, a pre-norm block, AdamW with weight decay, ``cross_entropy`` over the flattened logits; then
generation with top-k filtering (``topk``) and ``multinomial`` sampling. Training losses must match PyTorch's
from the same weights; generation draws from each library's own generator, so only its shape and range are
checked."""

from __future__ import annotations

import numpy as np
import pytest

from ._harness import reference, run_both

pytestmark = pytest.mark.usefixtures("session")

TEXT = ("the quick brown fox jumps over the lazy dog. a stitch in time saves nine. "
        "all that glitters is not gold. ") * 4
CHARS = sorted(set(TEXT))
VOCAB, BLOCK, EMBD, STEPS, BATCH = len(CHARS), 16, 24, 15, 8


def build(torch):
    """The model, written as for PyTorch, built from ``torch`` (PyTorch or tensorwire)."""
    nn, F = torch.nn, torch.nn.functional

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.key = nn.Linear(EMBD, EMBD, bias=False)
            self.query = nn.Linear(EMBD, EMBD, bias=False)
            self.value = nn.Linear(EMBD, EMBD, bias=False)
            self.register_buffer("tril", torch.tril(torch.ones(BLOCK, BLOCK)))

        def forward(self, x):
            B, T, C = x.shape
            k, q = self.key(x), self.query(x)
            wei = q @ k.transpose(-2, -1) * C ** -0.5
            wei = wei.masked_fill(self.tril[:T, :T] == 0, float("-inf"))
            wei = F.softmax(wei, dim=-1)
            return wei @ self.value(x)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.sa = Head()
            self.ffwd = nn.Sequential(nn.Linear(EMBD, 4 * EMBD), nn.GELU(), nn.Linear(4 * EMBD, EMBD))
            self.ln1, self.ln2 = nn.LayerNorm(EMBD), nn.LayerNorm(EMBD)

        def forward(self, x):
            x = x + self.sa(self.ln1(x))
            return x + self.ffwd(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(VOCAB, EMBD)
            self.pos = nn.Embedding(BLOCK, EMBD)
            self.block = Block()
            self.ln_f = nn.LayerNorm(EMBD)
            self.head = nn.Linear(EMBD, VOCAB)

        def forward(self, idx, targets=None):
            B, T = idx.shape
            x = self.tok(idx) + self.pos(torch.arange(T))
            logits = self.head(self.ln_f(self.block(x)))
            if targets is None:
                return logits, None
            return logits, F.cross_entropy(logits.view(B * T, VOCAB), targets.view(B * T))

        @torch.no_grad()
        def generate(self, idx, max_new_tokens, top_k=5):
            for _ in range(max_new_tokens):
                logits, _ = self(idx[:, -BLOCK:])
                logits = logits[:, -1, :]
                v, _ = torch.topk(logits, top_k)
                logits[logits < v[:, [-1]]] = -float("inf")
                probs = F.softmax(logits, dim=-1)
                idx = torch.cat((idx, torch.multinomial(probs, num_samples=1)), dim=1)
            return idx

    return GPT()


def gpt(torch, init, generate: int = 0):
    model = build(torch)
    model.load_state_dict({k: torch.tensor(v) for k, v in init["weights"].items()})
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    data = torch.tensor(init["data"])
    losses = []
    for step in range(STEPS):
        ix = torch.tensor(init["starts"][step])
        xb = torch.stack([data[i:i + BLOCK] for i in ix.tolist()])
        yb = torch.stack([data[i + 1:i + BLOCK + 1] for i in ix.tolist()])
        _, loss = model(xb, yb)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    if generate:
        model.eval()
        return model.generate(torch.zeros((2, 1), dtype=torch.long), generate)
    return losses


def _init():
    torch = reference()
    torch.manual_seed(0)
    data = np.array([CHARS.index(c) for c in TEXT], np.int64)
    starts = np.random.default_rng(0).integers(0, len(data) - BLOCK - 1, (STEPS, BATCH))
    weights = {k: v.detach().numpy().copy() for k, v in build(torch).state_dict().items()}  # PyTorch's init
    return {"data": data, "starts": starts, "weights": weights}


def test_char_gpt_trains_like_torch_and_generates():
    init = _init()
    got, _ = run_both(gpt, init, rtol=2e-4, atol=1e-5)
    assert got[-1] < got[0]
    import tensorwire as tw

    tw.manual_seed(0)
    out = gpt(tw, init, generate=12)
    assert out.shape == (2, 13) and out.dtype is tw.int64
    assert 0 <= int(out.min()) and int(out.max()) < VOCAB
