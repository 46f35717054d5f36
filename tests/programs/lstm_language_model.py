"""A word-level LSTM language model (in the style of pytorch/examples' word_language_model): embedding, a 2-layer
LSTM, a decoder tied to the embedding, truncated backpropagation through time with the hidden state carried over
(and detached) between batches, gradient clipping. The example's SGD at lr 20 needs its large corpus; on this small
one Adam learns in a few dozen steps, so the program uses Adam.

The corpus is synthetic (a small stochastic grammar) so the program needs no download. Dropout is 0 so that torch
and tensorwire (whose dropout masks come from different generators) see the same network. Run it on its own:
``python tests/programs/lstm_language_model.py``.
"""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

NTOKEN, NINP, NHID, NLAYERS = 20, 16, 16, 2
BPTT, BATCH = 6, 4


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.0, tie_weights=True):
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:
            self.decoder.weight = self.encoder.weight
        self.init_weights()
        self.nhid = nhid
        self.nlayers = nlayers

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output)
        decoded = decoded.view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))


def corpus(n=4 * 60, seed=0):
    """Token ids from a little grammar: each token usually predicts its successor."""
    rng = np.random.RandomState(seed)
    ids = [0]
    for _ in range(n - 1):
        ids.append((ids[-1] * 3 + 1) % NTOKEN if rng.rand() < 0.8 else rng.randint(NTOKEN))
    return torch.tensor(ids, dtype=torch.long)


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous()


def get_batch(source, i):
    seq_len = min(BPTT, len(source) - 1 - i)
    data = source[i : i + seq_len]
    target = source[i + 1 : i + 1 + seq_len].view(-1)
    return data, target


def repackage_hidden(h):
    """Wraps hidden states in new Tensors, to detach them from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def build_model():
    return RNNModel(NTOKEN, NINP, NHID, NLAYERS)


def train(model, steps, lr=0.03, clip=0.25):
    train_data = batchify(corpus(), BATCH)
    criterion = nn.NLLLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    hidden = model.init_hidden(BATCH)
    losses = []
    i = 0
    for _ in range(steps):
        if i >= train_data.size(0) - 1:
            i, hidden = 0, model.init_hidden(BATCH)
        data, targets = get_batch(train_data, i)
        hidden = repackage_hidden(hidden)
        model.zero_grad()
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        losses.append(loss)
        i += BPTT
    model.eval()
    with torch.no_grad():  # evaluate on the first batches again, the hidden state carried along
        hidden = model.init_hidden(BATCH)
        total = 0.0
        for j in range(0, 3 * BPTT, BPTT):
            data, targets = get_batch(train_data, j)
            output, hidden = model(data, hidden)
            total += len(data) * criterion(output, targets)
        losses.append(total / (3 * BPTT))
    return [float(v.item()) for v in losses]


if __name__ == "__main__":
    torch.manual_seed(0)
    for step, loss in enumerate(train(build_model(), 40)):
        print(f"step {step}: loss {loss:.4f} (ppl {np.exp(loss):.2f})")
