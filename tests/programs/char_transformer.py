"""A character-level transformer in the manner of nanoGPT's shakespeare_char run, scaled down: token and position
embeddings, 2 pre-norm blocks of causal self-attention (one fused ``c_attn`` projection split into q, k, v, 4 heads,
a ``tril`` mask buffer) and a GELU MLP, a final LayerNorm, a head tied to the token embedding, AdamW with weight
decay on the matrices only, and gradient clipping. Written for these tests, not copied.

The batch loader is the part that matters: every step draws a random number of sequences of a random length, and
fills each row of a fresh ``(n, T)`` tensor with slice writes (``x[j, 1:1 + len(chunk)] = chunk``, a BOS token in
column 0), so the shapes change from step to step: the pattern that set off compile storms. The text is built in;
the draws come from a seeded numpy RNG so torch and tensorwire see the same batches. Dropout is 0 (the two
libraries' dropout masks come from different generators). Run it on its own:
``python tests/programs/char_transformer.py``.
"""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

TEXT = (
    "a small corpus for a small model. the model reads one character at a time and guesses the next. "
    "when the batch grows or shrinks the shapes change, and a compiler that keys on shapes sees a new program. "
    "so we keep the text short, the model narrow, and the steps quick, and we watch the loss fall. "
    "the cat sat on the mat. the dog sat on the log. the bird sat on the wire and sang to the wind. "
)
CHARS = ["<bos>"] + sorted(set(TEXT))
STOI = {c: i for i, c in enumerate(CHARS)}
BOS = 0
VOCAB, BLOCK, N_LAYER, N_HEAD, N_EMBD = len(CHARS), 32, 2, 4, 64


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(N_EMBD, 3 * N_EMBD)
        self.c_proj = nn.Linear(N_EMBD, N_EMBD)
        self.register_buffer("bias", torch.tril(torch.ones(BLOCK, BLOCK)).view(1, 1, BLOCK, BLOCK))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(N_EMBD, dim=2)
        k = k.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
        v = v.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # re-assemble the heads side by side
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(N_EMBD, 4 * N_EMBD)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * N_EMBD, N_EMBD)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(N_EMBD)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(N_EMBD)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(VOCAB, N_EMBD),
            wpe=nn.Embedding(BLOCK, N_EMBD),
            h=nn.ModuleList([Block() for _ in range(N_LAYER)]),
            ln_f=nn.LayerNorm(N_EMBD),
        ))
        self.lm_head = nn.Linear(N_EMBD, VOCAB, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():  # scaled init of the residual projections, per GPT-2
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * N_LAYER))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas):
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        nodecay = [p for p in params if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": weight_decay}, {"params": nodecay, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas)


def build_model():
    return GPT()


def get_batch(data, rng):
    """A batch of a random number of sequences of a random length: BOS, then a chunk of the text."""
    n = int(rng.randint(4, 13))
    t = int(rng.randint(BLOCK // 2, BLOCK + 1))
    starts = rng.randint(0, len(data) - t, n)
    x = torch.full((n, t), BOS, dtype=torch.long)
    y = torch.zeros(n, t, dtype=torch.long)
    for j, i in enumerate(starts):
        chunk = data[i : i + t - 1]
        x[j, 1 : 1 + len(chunk)] = chunk
        y[j] = data[i : i + t]
    return x, y


def train(model, steps, lr=3e-3):
    data = torch.tensor([STOI[c] for c in TEXT], dtype=torch.long)
    rng = np.random.RandomState(1337)
    optimizer = model.configure_optimizers(weight_decay=0.1, learning_rate=lr, betas=(0.9, 0.99))
    model.train()
    losses = []
    for _ in range(steps):
        X, Y = get_batch(data, rng)
        logits, loss = model(X, Y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.detach())
    return [float(v.item()) for v in losses]


if __name__ == "__main__":
    torch.manual_seed(0)
    for step, loss in enumerate(train(build_model(), 60)):
        print(f"step {step}: loss {loss:.4f}")
