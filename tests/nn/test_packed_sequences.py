"""``tw.nn.utils.rnn`` against torch's: ``PackedSequence`` and the pad/pack/unpack functions (layouts, indices,
lengths, gradients, errors), and ``RNN``/``LSTM``/``GRU`` given a ``PackedSequence`` (torch's weights copied): the
packed output, each sequence's final states (from its own last step, both directions) and every gradient."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw
from tensorwire import nn
from tensorwire.nn import rnn as rnn_module
from tensorwire.nn.utils import clip_grad_norm_, parameters_to_vector
from tensorwire.nn.utils import rnn as R

from ._util import close, copy_weights

pytestmark = pytest.mark.usefixtures("session")


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch", reason="PyTorch is not installed (reference tests need it)")


def _same_ints(got, want) -> None:
    assert got.dtype is tw.int64 and str(want.dtype) == "torch.int64"
    assert got.tolist() == want.tolist()


def _same_packed(got, want) -> None:
    assert isinstance(got, R.PackedSequence) and type(got).__name__ == "PackedSequence"
    close(got.data, want.data, 0, 0)
    _same_ints(got.batch_sizes, want.batch_sizes)
    assert got.batch_sizes.device.type == "cpu"
    for g, w in ((got.sorted_indices, want.sorted_indices), (got.unsorted_indices, want.unsorted_indices)):
        assert (g is None) == (w is None)
        if g is not None:
            _same_ints(g, w)


def _padded(torch, T, lengths, feat, batch_first, seed=0):
    """A padded batch ([T, B, feat] or [B, T, feat], float64) as (ours, torch's), both leaves."""
    B = len(lengths)
    a = np.random.default_rng(seed).standard_normal((B, T, feat) if batch_first else (T, B, feat))
    return tw.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("enforce_sorted", [True, False])
def test_pack_and_pad_round_trip(torch, batch_first, enforce_sorted):
    """pack_padded_sequence's data, batch_sizes and indices are torch's (lengths a list or a tensor, ties among
    them); pad_packed_sequence gives torch's padded batch and lengths (padding_value, total_length, either layout);
    the gradient reaches only the valid steps."""
    lengths = [4, 3, 3, 1] if enforce_sorted else [2, 4, 1, 2]
    x, tx = _padded(torch, 5, lengths, 3, batch_first)
    got = R.pack_padded_sequence(x, tw.tensor(lengths) if enforce_sorted else lengths, batch_first, enforce_sorted)
    want = torch.nn.utils.rnn.pack_padded_sequence(tx, lengths, batch_first, enforce_sorted)
    _same_packed(got, want)
    for bf in (False, True):
        for total, value in ((None, 0.0), (6, -2.5)):
            out, lens = R.pad_packed_sequence(got, bf, value, total)
            t_out, t_lens = torch.nn.utils.rnn.pad_packed_sequence(want, bf, value, total)
            assert tuple(out.shape) == tuple(t_out.shape)
            close(out, t_out, 0, 0)
            _same_ints(lens, t_lens)
            assert lens.device.type == "cpu"
    w = np.random.default_rng(1).standard_normal(tuple(want.data.shape))
    (got.data * tw.tensor(w)).sum().backward()
    (want.data * torch.tensor(w)).sum().backward()
    close(x.grad, tx.grad, 0, 0)
    # and back: the gradient of a padded output reaches the packed data
    d = got.data.detach().requires_grad_()
    td = want.data.detach().requires_grad_()
    out, _ = R.pad_packed_sequence(R.PackedSequence(d, got.batch_sizes, got.sorted_indices), batch_first, 7.0, 6)
    t_out, _ = torch.nn.utils.rnn.pad_packed_sequence(
        torch.nn.utils.rnn.PackedSequence(td, want.batch_sizes, want.sorted_indices), batch_first, 7.0, 6)
    g = np.random.default_rng(2).standard_normal(tuple(t_out.shape))
    (out * tw.tensor(g)).sum().backward()
    (t_out * torch.tensor(g)).sum().backward()
    close(d.grad, td.grad, 1e-12, 1e-12)


@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_pad_pack_unpack_sequences(torch, padding_side):
    """pad_sequence (either side, either layout, the first sequence's dtype), pack_sequence (sorted or not),
    unpack_sequence and unpad_sequence give torch's values; gradients through pad_sequence and pack_sequence reach
    each sequence."""
    rng = np.random.default_rng(3)
    arrs = [rng.standard_normal((n, 2)) for n in (2, 4, 1, 4)]
    seqs = [tw.tensor(a, requires_grad=True) for a in arrs]
    tseqs = [torch.tensor(a, requires_grad=True) for a in arrs]
    for bf in (False, True):
        got = R.pad_sequence(seqs, bf, -1.0, padding_side)
        want = torch.nn.utils.rnn.pad_sequence(tseqs, bf, -1.0, padding_side)
        assert tuple(got.shape) == tuple(want.shape)
        close(got, want, 0, 0)
    g = rng.standard_normal(tuple(want.shape))
    (got * tw.tensor(g)).sum().backward()
    (want * torch.tensor(g)).sum().backward()
    for s, t in zip(seqs, tseqs):
        close(s.grad, t.grad, 0, 0)
    same = R.pad_sequence([tw.ones(3, dtype=tw.int64), tw.tensor([1.5, 2.5, 3.5])], padding_value=9)
    assert same.dtype is tw.int64 and same.tolist() == [[1, 1], [1, 2], [1, 3]]  # (all of one length: a stack)

    packed = R.pack_sequence(seqs, enforce_sorted=False)
    t_packed = torch.nn.utils.rnn.pack_sequence(tseqs, enforce_sorted=False)
    _same_packed(packed, t_packed)
    for u, t in zip(R.unpack_sequence(packed), torch.nn.utils.rnn.unpack_sequence(t_packed)):
        close(u, t, 0, 0)
    ordered = sorted(arrs, key=len, reverse=True)
    _same_packed(R.pack_sequence([tw.tensor(a) for a in ordered]),
                 torch.nn.utils.rnn.pack_sequence([torch.tensor(a) for a in ordered]))
    one = R.pack_sequence([tw.tensor(arrs[0])])
    assert one.batch_sizes.tolist() == [1, 1] and one.data.tolist() == arrs[0].tolist()
    padded = R.pad_sequence(seqs, batch_first=True)
    lens = [a.shape[0] for a in arrs]
    for u, a in zip(R.unpad_sequence(padded, tw.tensor(lens), batch_first=True), arrs):
        close(u, a, 0, 0)
    for u, a in zip(R.unpad_sequence(R.pad_sequence(seqs), lens), arrs):
        close(u, a, 0, 0)


def test_packed_sequence_api(torch):
    """The namedtuple's fields and unpacking, torch's constructor forms, unsorted_indices made from sorted_indices,
    to()/double()/cpu() moving the data and keeping self when nothing changes, is_cuda, invert_permutation, and
    the names torch programs import."""
    p = R.pack_padded_sequence(tw.randn(3, 2, 4), [3, 1])
    data, batch_sizes, sorted_indices, unsorted_indices = p
    assert data is p.data and batch_sizes is p.batch_sizes and sorted_indices is None and unsorted_indices is None
    assert repr(p).startswith("PackedSequence(data=") and p._fields == torch.nn.utils.rnn.PackedSequence._fields
    q = R.PackedSequence((p.data, p.batch_sizes))
    assert q.data is p.data and q.batch_sizes is p.batch_sizes
    with pytest.raises(AssertionError, match="Expected data to be a list or tuple of length 2"):
        R.PackedSequence(p.data)
    r = R.PackedSequence(p.data, p.batch_sizes, tw.tensor([1, 0]))
    assert r.unsorted_indices.tolist() == [1, 0]
    assert R.invert_permutation(tw.tensor([2, 0, 3, 1])).tolist() == [1, 3, 0, 2] and R.invert_permutation(None) is None
    assert p.to(tw.float32) is p and p.cpu() is p and not p.is_cuda and not p.is_pinned()
    d = r.double()
    assert d.data.dtype is tw.float64 and d.batch_sizes is r.batch_sizes and d.sorted_indices.tolist() == [1, 0]
    assert r.to(dtype=tw.float64).data.dtype is tw.float64
    assert tw.nn.utils.rnn is R and nn.utils.rnn.pack_sequence is R.pack_sequence
    assert set(R.__all__) == set(torch.nn.utils.rnn.__all__)
    assert callable(clip_grad_norm_) and callable(parameters_to_vector)  # (the package keeps its names)


def test_errors_are_torchs(torch):
    """Unsorted lengths with enforce_sorted, a zero length, a count that is not the batch's, empty inputs, a bad
    padding side, a total_length below the longest: torch's exceptions and messages."""
    x = tw.randn(3, 4, 2)
    with pytest.raises(RuntimeError, match="must be sorted in decreasing order when `enforce_sorted` is True"):
        R.pack_padded_sequence(x, [3, 1, 2, 2])
    with pytest.raises(RuntimeError, match="must be sorted in decreasing order"):
        R.pack_sequence([tw.ones(1), tw.ones(2)])
    for es in (True, False):
        with pytest.raises(RuntimeError, match="Length of all samples has to be greater than 0"):
            R.pack_padded_sequence(x, [3, 2, 1, 0], enforce_sorted=es)
    with pytest.raises(RuntimeError, match=r"Expected `len\(lengths\)` to be equal to batch_size, but got 3 "
                                           r"\(batch_size=4\)"):
        R.pack_padded_sequence(x, [3, 2, 1])
    with pytest.raises(RuntimeError, match="'lengths' argument should be a 1D CPU int64 tensor"):
        R.pack_padded_sequence(x, tw.tensor([[3, 2, 1, 1]]))
    with pytest.raises(RuntimeError, match="Cannot pack empty tensors."):
        R.pack_padded_sequence(tw.zeros(0, 2), [])
    with pytest.raises(RuntimeError, match="received an empty list of sequences"):
        R.pad_sequence([])
    with pytest.raises(RuntimeError, match="Expected padding_side to be one of left or right, but got up."):
        R.pad_sequence([tw.ones(2)], padding_side="up")
    with pytest.raises(RuntimeError, match="Expected iterable for input sequences"):
        R.pad_sequence(3)
    p = R.pack_padded_sequence(x, [3, 2, 2, 1])
    with pytest.raises(ValueError, match="Expected total_length to be at least the length of the longest sequence "
                                         "in input, but got total_length=2 and max sequence length being 3"):
        R.pad_packed_sequence(p, total_length=2)
    with pytest.raises(TypeError, match="expected a Tensor or a PackedSequence input"):
        nn.GRU(2, 3)([x])
    with pytest.raises(ValueError, match="Expected hidden size"):
        nn.GRU(2, 3)(p, tw.zeros(1, 3, 3))  # (the packed batch is 4 sequences)


# (constructor, lengths (the caller's order), batch_first, with initial states, dtype)
CASES = {
    "lstm": (lambda m: m.LSTM(3, 4), [5, 3, 3, 1], False, False, "float64"),
    "lstm_2layer_bidir_unsorted_h0c0": (lambda m: m.LSTM(3, 4, num_layers=2, bidirectional=True), [2, 5, 1, 3],
                                        False, True, "float64"),
    "lstm_bidir_batch_first_f32": (lambda m: m.LSTM(3, 4, bidirectional=True, batch_first=True), [4, 2, 2],
                                   True, False, "float32"),
    "lstm_proj_bidir_unsorted_h0c0": (lambda m: m.LSTM(3, 5, proj_size=2, bidirectional=True), [1, 4, 2],
                                      False, True, "float64"),
    "gru_2layer_bidir_batch_first_unsorted_h0": (
        lambda m: m.GRU(3, 4, num_layers=2, bidirectional=True, batch_first=True), [3, 1, 4, 4], True, True,
        "float64"),
    "gru_one_length": (lambda m: m.GRU(3, 4, bidirectional=True), [3, 3, 3], False, True, "float64"),
    "rnn_tanh_2layer": (lambda m: m.RNN(3, 4, num_layers=2), [4, 4, 2, 1], False, False, "float64"),
    "rnn_relu_bidir_unsorted": (lambda m: m.RNN(3, 4, nonlinearity="relu", bidirectional=True), [2, 4, 3],
                                False, False, "float64"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_recurrent_layers_take_packed_sequences(torch, name):
    """A packed batch through RNN/LSTM/GRU: the packed output, its padded form, h_n (and c_n) from each
    sequence's own last step (the backward direction's from its first), in the caller's order, and the gradients
    of the input, the initial states and every parameter equal torch's."""
    make, lengths, batch_first, with_state, dtype = CASES[name]
    torch.manual_seed(0)
    ref, mine = make(torch.nn), make(nn)
    ref = ref.to(getattr(torch, dtype))
    mine = mine.to(getattr(tw, dtype))
    copy_weights(mine, ref)
    T, B = max(lengths), len(lengths)
    rng = np.random.default_rng(4)
    a = rng.standard_normal((B, T, 3) if batch_first else (T, B, 3)).astype(dtype)
    x, tx = tw.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    enforce = lengths == sorted(lengths, reverse=True)
    packed = R.pack_padded_sequence(x, lengths, batch_first, enforce)
    t_packed = torch.nn.utils.rnn.pack_padded_sequence(tx, lengths, batch_first, enforce)
    states = []
    if with_state:
        n = 2 if isinstance(ref, torch.nn.LSTM) else 1
        shapes = [(ref.num_layers * (2 if ref.bidirectional else 1), B, ref.proj_size or ref.hidden_size),
                  (ref.num_layers * (2 if ref.bidirectional else 1), B, ref.hidden_size)][:n]
        states = [rng.standard_normal(s).astype(dtype) for s in shapes]
    hs = [tw.tensor(s, requires_grad=True) for s in states]
    ths = [torch.tensor(s, requires_grad=True) for s in states]
    hx = (tuple(hs) if len(hs) == 2 else hs[0]) if hs else None
    t_hx = (tuple(ths) if len(ths) == 2 else ths[0]) if ths else None
    out, h = mine(packed, hx)
    t_out, t_h = ref(t_packed, t_hx)
    assert isinstance(out, R.PackedSequence)
    assert out.batch_sizes is packed.batch_sizes and out.sorted_indices is packed.sorted_indices
    rtol, atol = (1e-10, 1e-12) if dtype == "float64" else (1e-5, 1e-6)
    close(out.data, t_out.data, rtol, atol)
    padded, lens = R.pad_packed_sequence(out, batch_first)
    t_padded, t_lens = torch.nn.utils.rnn.pad_packed_sequence(t_out, batch_first)
    close(padded, t_padded, rtol, atol)
    assert lens.tolist() == t_lens.tolist() == lengths
    got = list(h) if isinstance(h, tuple) else [h]
    want = list(t_h) if isinstance(t_h, tuple) else [t_h]
    for g, w in zip(got, want):
        assert tuple(g.shape) == tuple(w.shape)
        close(g, w, rtol, atol)
    ups = [rng.standard_normal(tuple(w.shape)).astype(dtype) for w in [t_padded, *want]]
    sum((v * tw.tensor(u)).sum() for v, u in zip([padded, *got], ups)).backward()
    sum((v * torch.tensor(u)).sum() for v, u in zip([t_padded, *want], ups)).backward()
    close(x.grad, tx.grad, rtol, atol)
    for s, t in zip(hs, ths):
        close(s.grad, t.grad, rtol, atol)
    for (n, p), q in zip(mine.named_parameters(), ref.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=rtol, atol=atol, err_msg=n)


def test_packed_layer_scans_once_per_direction(monkeypatch):
    """A packed bidirectional LSTM runs one scan per layer and direction, whatever its lengths (no step by step
    recurrence), and its gradients are finite."""
    scans = []
    real = rnn_module._packed
    monkeypatch.setattr(rnn_module, "_packed", lambda *a: scans.append(a[0]) or real(*a))
    lstm = nn.LSTM(3, 4, num_layers=2, bidirectional=True)
    seqs = [tw.randn(n, 3) for n in (6, 1, 4, 4, 2)]
    out, (h, c) = lstm(R.pack_sequence(seqs, enforce_sorted=False))
    assert scans == ["LSTM"] * 4
    (out.data.sum() + h.sum() + c.sum()).backward()
    assert all(np.isfinite(p.grad.numpy()).all() for p in lstm.parameters())
