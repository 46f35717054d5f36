"""A 2-layer graph convolutional network on a Cora-like citation graph, in the manner of Kipf and Welling's pygcn:
a ``GraphConvolution`` layer with its own ``Parameter`` weight and bias (uniform init in +-1/sqrt(out)) computing
``adj @ (x @ W) + b``, ReLU, dropout, a second layer, ``log_softmax``; Adam (lr 0.01, weight decay 5e-4),
``F.nll_loss`` on the training nodes, then the validation and test losses in ``eval()`` mode. Written for these
tests, not copied.

The graph is synthetic (no download), drawn from a seeded numpy RNG: 300 nodes in 7 classes, edges mostly within a
class, sparse bag-of-words features whose words lean towards the class; the adjacency gets self-loops and the
symmetric normalisation D^-1/2 (A + I) D^-1/2, held as a dense tensor (the original multiplies a sparse one with
``torch.spmm``). 70 training nodes, as Cora's 140 of 2708 scaled. Dropout 0.5 as the original; ``build_model(
dropout=0.0)`` gives the network that torch and tensorwire (whose dropout masks come from different generators)
train alike. As the original, it builds its tensors with the legacy constructors ``torch.FloatTensor(array)`` and
``torch.LongTensor(array)`` and initialises with ``self.weight.data.uniform_(-stdv, stdv)``. Run it on its own:
``python tests/programs/gcn.py``.
"""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

N_NODES, N_FEATURES, N_CLASSES, HIDDEN = 300, 200, 7, 16


class GraphConvolution(nn.Module):
    """Simple GCN layer, similar to https://arxiv.org/abs/1609.02907."""

    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.empty(in_features, out_features))
        if bias:
            self.bias = nn.Parameter(torch.empty(out_features))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.weight.size(1))
        self.weight.data.uniform_(-stdv, stdv)
        if self.bias is not None:
            self.bias.data.uniform_(-stdv, stdv)

    def forward(self, input, adj):
        support = torch.mm(input, self.weight)
        output = adj @ support
        if self.bias is not None:
            return output + self.bias
        return output


class GCN(nn.Module):
    def __init__(self, nfeat, nhid, nclass, dropout):
        super().__init__()
        self.gc1 = GraphConvolution(nfeat, nhid)
        self.gc2 = GraphConvolution(nhid, nclass)
        self.dropout = dropout

    def forward(self, x, adj):
        x = F.relu(self.gc1(x, adj))
        x = F.dropout(x, self.dropout, training=self.training)
        x = self.gc2(x, adj)
        return F.log_softmax(x, dim=1)


def build_model(dropout=0.5):
    return GCN(nfeat=N_FEATURES, nhid=HIDDEN, nclass=N_CLASSES, dropout=dropout)


def make_graph(seed=0):
    """Row-normalised features, the normalised adjacency (dense), labels and the train/val/test node indices."""
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, N_CLASSES, N_NODES)
    same = labels[:, None] == labels[None, :]
    p = np.where(same, 0.04, 0.002)
    a = np.triu(rng.rand(N_NODES, N_NODES) < p, 1)
    a = (a | a.T).astype(np.float32)
    words = rng.rand(N_CLASSES, N_FEATURES) ** 4  # each class favours a few words
    feats = (rng.rand(N_NODES, N_FEATURES) < 0.02 + 0.15 * words[labels]).astype(np.float32)
    feats /= np.maximum(feats.sum(1, keepdims=True), 1.0)  # row-normalise, as pygcn's normalize(features)
    a_hat = a + np.eye(N_NODES, dtype=np.float32)
    d = 1.0 / np.sqrt(a_hat.sum(1))
    adj = (d[:, None] * a_hat * d[None, :]).astype(np.float32)
    idx = rng.permutation(N_NODES)
    return feats, adj, labels, idx[:70], idx[70:140], idx[140:]


def train(model, steps, lr=0.01, weight_decay=5e-4):
    feats, adj, labels, idx_train, idx_val, idx_test = make_graph()
    features = torch.FloatTensor(feats)
    adj = torch.FloatTensor(adj)
    labels = torch.LongTensor(labels)
    idx_train, idx_val, idx_test = (torch.LongTensor(i) for i in (idx_train, idx_val, idx_test))
    optimizer = optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    losses = []
    for _ in range(steps):
        model.train()
        optimizer.zero_grad()
        output = model(features, adj)
        loss_train = F.nll_loss(output[idx_train], labels[idx_train])
        loss_train.backward()
        optimizer.step()
        losses.append(loss_train.detach())
    model.eval()
    with torch.no_grad():
        output = model(features, adj)
        losses.append(F.nll_loss(output[idx_val], labels[idx_val]))
        losses.append(F.nll_loss(output[idx_test], labels[idx_test]))
        preds = output[idx_test].max(1)[1]
        losses.append(1.0 - preds.eq(labels[idx_test]).double().mean())  # the test error rate
    return [float(v.item()) for v in losses]


if __name__ == "__main__":
    torch.manual_seed(42)
    for epoch, loss in enumerate(train(build_model(), 100)):
        print(f"step {epoch}: loss {loss:.4f}")
