"""RNN / LSTM / GRU and their cells against torch with copied weights: parameter names and shapes, outputs, final
states and every gradient (float32 tolerances), initial states, batch_first, bidirectional layouts, projections,
dropout between layers only in training, initialisation statistics, finite differences and errors."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import tensorwire as tw
from tensorwire import nn
from tensorwire.protocol.errors import DTypeError, ShapeError

from ._util import close, copy_weights, needs_autograd, needs_torch, torch

pytestmark = [needs_torch, needs_autograd]

RTOL, ATOL = 1e-4, 1e-5


def _pair(make):
    torch.manual_seed(0)
    ref, mine = make(torch.nn), make(nn)
    assert [(n, tuple(p.shape)) for n, p in mine.named_parameters()] == [
        (n, tuple(p.shape)) for n, p in ref.named_parameters()
    ]
    copy_weights(mine, ref)
    return ref, mine


def _leaf(a):
    return tw.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)


def _flat(out):
    """(output, h_n) or (output, (h_n, c_n)) -> [output, h_n(, c_n)]."""
    o, h = out
    return [o, *h] if isinstance(h, tuple) else [o, h]


# (constructor, input shape, initial state shapes or None): the unbatched case feeds [L, H_in] and [D*layers, H]
CASES = {
    "lstm_2layer_bidir": (lambda m: m.LSTM(5, 6, num_layers=2, bidirectional=True), (4, 3, 5), None),
    "lstm_batch_first_h0c0": (
        lambda m: m.LSTM(5, 6, num_layers=2, batch_first=True),
        (3, 4, 5),
        [(2, 3, 6), (2, 3, 6)],
    ),
    "lstm_proj_bidir_h0c0": (
        lambda m: m.LSTM(5, 6, proj_size=3, bidirectional=True, batch_first=True),
        (2, 4, 5),
        [(2, 2, 3), (2, 2, 6)],
    ),
    "lstm_unbatched_nobias": (lambda m: m.LSTM(5, 6, bias=False), (4, 5), [(1, 6), (1, 6)]),
    "gru_2layer_bidir_h0": (lambda m: m.GRU(5, 6, num_layers=2, bidirectional=True), (4, 3, 5), [(4, 3, 6)]),
    "gru_batch_first_unbatched": (lambda m: m.GRU(5, 6, batch_first=True), (4, 5), None),
    "rnn_tanh_3layer_h0": (lambda m: m.RNN(5, 6, num_layers=3), (4, 3, 5), [(3, 3, 6)]),
    "rnn_relu_bidir_nobias": (
        lambda m: m.RNN(5, 6, nonlinearity="relu", bias=False, bidirectional=True, batch_first=True),
        (3, 4, 5),
        None,
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_recurrent_layers_match_torch(session, name):
    """Outputs, h_n (and c_n) and the gradients of input, initial states and every parameter equal torch's."""
    make, shape, state_shapes = CASES[name]
    ref, mine = _pair(make)
    rng = np.random.default_rng(1)
    x, tx = _leaf(rng.standard_normal(shape).astype(np.float32))
    states = [_leaf(rng.standard_normal(s).astype(np.float32)) for s in state_shapes or []]
    hx = tx_hx = None
    if states:
        hx = tuple(s for s, _ in states) if len(states) == 2 else states[0][0]
        tx_hx = tuple(t for _, t in states) if len(states) == 2 else states[0][1]
    got, want = _flat(mine(x, hx)), _flat(ref(tx, tx_hx))
    assert [tuple(g.shape) for g in got] == [tuple(w.shape) for w in want]
    for g, w in zip(got, want):
        close(g, w, RTOL, ATOL)
    ups = [rng.standard_normal(tuple(w.shape)).astype(np.float32) for w in want]
    sum((g * tw.tensor(u)).sum() for g, u in zip(got, ups)).backward()
    sum((w * torch.tensor(u)).sum() for w, u in zip(want, ups)).backward()
    close(x.grad, tx.grad, RTOL, ATOL)
    for s, t in states:
        close(s.grad, t.grad, RTOL, ATOL)
    for (n, p), q in zip(mine.named_parameters(), ref.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=RTOL, atol=ATOL, err_msg=n)
    assert str(mine) == str(ref)


@pytest.mark.parametrize(
    "kind,batched,with_state",
    [
        ("RNNCell", True, True),
        ("RNNCell_relu", False, False),
        ("LSTMCell", True, True),
        ("LSTMCell", False, True),
        ("GRUCell", True, False),
        ("GRUCell", False, True),
    ],
)
def test_cells_match_torch(session, kind, batched, with_state):
    make = {
        "RNNCell": lambda m: m.RNNCell(5, 6),
        "RNNCell_relu": lambda m: m.RNNCell(5, 6, nonlinearity="relu"),
        "LSTMCell": lambda m: m.LSTMCell(5, 6),
        "GRUCell": lambda m: m.GRUCell(5, 6, bias=False),
    }[kind]
    ref, mine = _pair(make)
    rng = np.random.default_rng(2)
    lead = (3,) if batched else ()
    x, tx = _leaf(rng.standard_normal((*lead, 5)).astype(np.float32))
    n_states = 2 if kind == "LSTMCell" else 1
    states = [_leaf(rng.standard_normal((*lead, 6)).astype(np.float32)) for _ in range(n_states)] if with_state else []
    hx = tx_hx = None
    if states:
        hx = tuple(s for s, _ in states) if n_states == 2 else states[0][0]
        tx_hx = tuple(t for _, t in states) if n_states == 2 else states[0][1]
    got, want = mine(x, hx), ref(tx, tx_hx)
    got, want = (list(got), list(want)) if n_states == 2 else ([got], [want])
    for g, w in zip(got, want):
        assert tuple(g.shape) == tuple(w.shape)
        close(g, w, RTOL, ATOL)
    sum((g * (i + 1)).sum() for i, g in enumerate(got)).backward()
    sum((w * (i + 1)).sum() for i, w in enumerate(want)).backward()
    close(x.grad, tx.grad, RTOL, ATOL)
    for s, t in states:
        close(s.grad, t.grad, RTOL, ATOL)
    for (n, p), q in zip(mine.named_parameters(), ref.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=RTOL, atol=ATOL, err_msg=n)
    assert str(mine) == str(ref)


def test_finite_differences(session):
    """Gradients of a tiny bidirectional LSTM, a GRU and their cells against central differences (float64)."""
    tw.manual_seed(0)
    lstm = nn.LSTM(2, 3, bidirectional=True, batch_first=True).double()
    gru = nn.GRU(2, 3, num_layers=2).double()
    cell = nn.GRUCell(2, 3).double()
    rng = np.random.default_rng(3)

    def leaf(*shape):
        return tw.tensor(rng.standard_normal(shape), dtype=tw.float64, requires_grad=True)

    x, h0, c0 = leaf(1, 3, 2), leaf(2, 1, 3), leaf(2, 1, 3)
    assert tw.autograd.gradcheck(lambda a, h, c: _flat(lstm(a, (h, c))), (x, h0, c0))
    assert tw.autograd.gradcheck(lambda a, h: gru(a, h)[0], (leaf(3, 1, 2), leaf(2, 1, 3)))
    assert tw.autograd.gradcheck(lambda a, h: cell(a, h), (leaf(2, 2), leaf(2, 3)))


def test_dropout_between_layers_only_in_training(session):
    """dropout acts on every layer's output but the last, only in training: with p=1 the second layer sees zeros,
    deterministically, so train mode matches torch's train mode exactly; eval mode matches torch's eval mode; a
    one-layer LSTM warns (as torch) and drops nothing."""
    ref, mine = _pair(lambda m: m.LSTM(4, 5, num_layers=2, dropout=1.0))
    x = np.random.default_rng(4).standard_normal((3, 2, 4)).astype(np.float32)
    for train in (True, False):
        ref.train(train)
        mine.train(train)
        for g, w in zip(_flat(mine(tw.tensor(x))), _flat(ref(torch.tensor(x)))):
            close(g, w, RTOL, ATOL)
    mine.train()
    o_train = mine(tw.tensor(x))[0].detach().numpy()
    mine.eval()
    assert not np.allclose(o_train, mine(tw.tensor(x))[0].detach().numpy())  # the dropout did act in training
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        one = nn.GRU(4, 5, dropout=0.5)
    tw.manual_seed(1)
    a = one(tw.tensor(x))[0].detach().numpy()
    one.eval()
    np.testing.assert_array_equal(a, one(tw.tensor(x))[0].detach().numpy())


def test_initialisation_has_torchs_distribution(session):
    """Every parameter uniform in +-1/sqrt(hidden_size), seeded by tw.manual_seed; the cells too."""
    tw.manual_seed(5)
    a = nn.LSTM(64, 256, num_layers=2, bidirectional=True)
    tw.manual_seed(5)
    b = nn.LSTM(64, 256, num_layers=2, bidirectional=True)
    bound = 1 / math.sqrt(256)
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        v = p.detach().numpy()
        np.testing.assert_array_equal(v, q.detach().numpy(), err_msg=n)
        assert v.min() >= -bound and v.max() <= bound, n
        if v.size > 10000:
            assert abs(v.std() - bound / math.sqrt(3)) < 0.02 * bound, n
    assert not np.array_equal(a.weight_ih_l0.detach().numpy()[:4], a.weight_ih_l0_reverse.detach().numpy()[:4])
    c = nn.GRUCell(32, 400)
    assert abs(c.weight_hh.detach().numpy().std() - (1 / math.sqrt(400)) / math.sqrt(3)) < 0.02 / math.sqrt(400)
    assert [len(w) for w in a.all_weights] == [4, 4, 4, 4] and a.all_weights[1][0] is a.weight_ih_l0_reverse
    a.flatten_parameters()  # accepted, as torch programs call it


def test_state_dict_from_torch_loads_and_trains(session):
    """A torch LSTM's state_dict loads by name, and an Adam step from it gives torch's parameters."""
    ref, mine = _pair(lambda m: m.LSTM(3, 4, num_layers=2, batch_first=True))
    x = np.random.default_rng(6).standard_normal((2, 5, 3)).astype(np.float32)
    opt, topt = tw.optim.Adam(mine.parameters(), lr=0.01), torch.optim.Adam(ref.parameters(), lr=0.01)
    for _ in range(2):
        loss, tloss = mine(tw.tensor(x))[0].square().mean(), ref(torch.tensor(x))[0].square().mean()
        opt.zero_grad()
        topt.zero_grad()
        loss.backward()
        tloss.backward()
        opt.step()
        topt.step()
    for (n, p), q in zip(mine.named_parameters(), ref.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-4, atol=1e-5, err_msg=n)


def test_errors(session):
    lstm, gru = nn.LSTM(4, 5, num_layers=2), nn.GRU(4, 5)
    x = tw.zeros(3, 2, 4)
    with pytest.raises(ValueError, match="Expected input to be 2D or 3D, got 4D"):
        lstm(tw.zeros(1, 3, 2, 4))
    with pytest.raises(ShapeError, match="input.size\\(-1\\) must be equal to input_size. Expected 4, got 3"):
        gru(tw.zeros(3, 2, 3))
    with pytest.raises(ShapeError, match="Expected hidden size \\(2, 2, 5\\), got \\[2, 3, 5\\]"):
        lstm(x, (tw.zeros(2, 3, 5), tw.zeros(2, 2, 5)))
    with pytest.raises(ShapeError, match="Expected hidden\\[1\\] size \\(2, 2, 5\\), got \\[1, 2, 5\\]"):
        lstm(x, (tw.zeros(2, 2, 5), tw.zeros(1, 2, 5)))
    with pytest.raises(ShapeError, match="For unbatched 2-D input, hx should also be 2-D but got 3-D tensor"):
        gru(tw.zeros(3, 4), tw.zeros(1, 1, 5))
    with pytest.raises(DTypeError, match="does not match weight dtype"):
        gru(tw.zeros(3, 2, 4, dtype=tw.float64))
    with pytest.raises(ShapeError, match="hx and cx should also be 3-D but got \\(2-D, 2-D\\) tensors"):
        lstm(x, tw.zeros(2, 2, 5))  # one tensor for (h_0, c_0): unpacked along dim 0, as torch does
    with pytest.raises(TypeError, match="GRU: hx should be a Tensor"):
        gru(x, (tw.zeros(1, 2, 5),))
    with pytest.raises(ValueError, match="dropout should be a number in range"):
        nn.LSTM(4, 5, dropout=1.5)
    with pytest.raises(ValueError, match="hidden_size must be greater than zero"):
        nn.GRU(4, 0)
    with pytest.raises(TypeError, match="input_size should be of type int"):
        nn.RNN(4.0, 5)
    with pytest.raises(ValueError, match="proj_size has to be smaller than hidden_size"):
        nn.LSTM(4, 5, proj_size=5)
    with pytest.raises(ValueError, match="Unknown nonlinearity 'gelu'"):
        nn.RNN(4, 5, nonlinearity="gelu")
    with pytest.raises(ValueError, match="LSTMCell: Expected input to be 1D or 2D, got 3D"):
        nn.LSTMCell(4, 5)(x)
    with pytest.raises(ShapeError, match="Expected hidden size"):
        nn.GRUCell(4, 5)(tw.zeros(2, 4), tw.zeros(3, 5))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nn.LSTM(4, 5, num_layers=2, dropout=0.3)  # no warning with more than one layer
    # a failed call leaves the module usable
    assert tuple(lstm(x)[0].shape) == (3, 2, 5)
