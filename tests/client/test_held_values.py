"""Values the client holds (``Session.holds``/``hold``, ``known_values.HELD_OPS``): a small ``tw.tensor`` upload and a
small ``zeros``/``full`` stay on the client until a device reads them, and writes, joins and views of such values
are worked out on the client by the CPU worker's own kernels. A dataset's ``__getitem__`` that fills rows from
Python data (makemore's ``CharDataset``, the char-RNN tutorial's one-hot letters) and the ``stack`` that batches the
rows then record nothing: the batch reaches the device as one upload, and every step's batch has the same structure
whatever the rows' lengths (one plan for the worker, not one compiled a step). Counted, not timed; values against
numpy, and PyTorch where installed. (The char-RNN tutorial's one-hot rows: ``tests/client/test_lazy_nodes.py``.)"""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw
from tensorwire import session as S
from tensorwire.utils.data._utils.collate import default_collate

from ._calls import device_value
from .test_known_values import round_trips

WORDS = ["emma", "olivia", "ava", "isabella", "sophia", "mia", "charlotte", "amelia"]
STOI = {c: i + 1 for i, c in enumerate(sorted(set("".join(WORDS))))}
LONGEST = max(map(len, WORDS))


def _recorded(session, fn):
    """``(fn's result, the ops of the nodes it left recorded and not shipped)``."""
    session.flush()
    out = fn()
    session.end_writes()
    return out, [e[1] for e in session._pending]


def _item(lib, word):
    """makemore's ``CharDataset.__getitem__``, written against ``lib`` (tensorwire or torch)."""
    ix = lib.tensor([STOI[c] for c in word], dtype=lib.long)
    x = lib.zeros(LONGEST + 1, dtype=lib.long)
    y = lib.zeros(LONGEST + 1, dtype=lib.long)
    x[1:1 + len(ix)] = ix
    y[:len(ix)] = ix
    y[len(ix) + 1:] = -1
    return x, y


def _want(word):
    x = np.zeros(LONGEST + 1, np.int64)
    y = np.zeros(LONGEST + 1, np.int64)
    ix = [STOI[c] for c in word]
    x[1:1 + len(ix)] = ix
    y[:len(ix)] = ix
    y[len(ix) + 1:] = -1
    return x, y


def test_a_dataset_batch_is_built_on_the_client_and_reaches_the_device_as_one_upload(session):
    words = WORDS[:4]
    with round_trips(session) as n:
        (x, y), ops = _recorded(session, lambda: default_collate([_item(tw, w) for w in words]))
        assert ops == [], ops  # nothing recorded: every row, write and the stack are the client's
        assert session.holds(x) and session.holds(y)
        emb = tw.nn.Embedding(len(STOI) + 1, 3)
        session.flush()
        out, ops = _recorded(session, lambda: emb(x))
    assert ops.count("const") == 1 and "setslice" not in ops and "cat" not in ops and "full" not in ops, ops
    assert n[0] == 3  # (the flushes above: no value was read from a device)
    want_x, want_y = map(np.stack, zip(*map(_want, words)))
    np.testing.assert_array_equal(x.numpy(), want_x)
    np.testing.assert_array_equal(y.numpy(), want_y)
    np.testing.assert_allclose(out.detach().numpy(), emb.weight.detach().numpy()[want_x], rtol=0)


def test_every_step_ships_the_same_structure_whatever_the_rows_lengths(session):
    emb = tw.nn.Embedding(len(STOI) + 1, 3)
    keys = []
    for words in (WORDS[:4], WORDS[4:]):  # (different lengths: different slice bounds in every row)
        session.flush()
        x, y = default_collate([_item(tw, w) for w in words])
        emb(x).sum()
        keys.append(S.encode_batch(session._pending).skey)
    assert keys[0] == keys[1]


@pytest.mark.parametrize("case", ["scalar", "float into int", "int into float", "broadcast row", "stepped",
                                  "negative", "ellipsis", "none", "element", "bool", "lone slice", "lone int",
                                  "lone negative int", "lone stepped slice", "lone slice past the end",
                                  "lone empty slice", "lone slice, a leading 1 dropped"])
def test_writes_worked_out_on_the_client_give_what_the_device_gives(session, case):
    dtype, key, value = {
        "scalar": (tw.int64, (slice(2, None),), -1),
        "float into int": (tw.int64, (slice(1, 3),), 2.75),
        "int into float": (tw.float32, (slice(None), 1), tw.tensor([7, 8, 9])),
        "broadcast row": (tw.float32, (slice(0, 2),), tw.tensor([1.5, 2.5, 3.5, 4.5])),
        "stepped": (tw.int32, (slice(None, None, 2),), tw.tensor([[1], [2]], dtype=tw.int32)),
        "negative": (tw.float64, (-1, slice(-3, -1)), tw.tensor([5.0, 6.0], dtype=tw.float64)),
        "ellipsis": (tw.int64, (Ellipsis, 0), 4),
        "none": (tw.float32, (None, 1), tw.tensor([0.5, 0.25, 0.125, 1.0])),
        "element": (tw.int64, (1, 2), 9),
        "bool": (tw.bool, (slice(1, 2),), True),
        # a lone int or slice (not a tuple): numpy's own indexing on the client (``indexing._held_write``)
        "lone slice": (tw.int64, slice(1, 3), tw.tensor([1, 2, 3, 4])),
        "lone int": (tw.float32, 1, tw.tensor([0.5, 1.5, 2.5, 3.5])),
        "lone negative int": (tw.int64, -1, -7),
        "lone stepped slice": (tw.float32, slice(None, None, 2), 2.5),
        "lone slice past the end": (tw.int32, slice(2, 10), tw.tensor([[4, 5, 6, 7]], dtype=tw.int32)),
        "lone empty slice": (tw.int64, slice(3, 1), 5),
        "lone slice, a leading 1 dropped": (tw.float32, slice(0, 1), tw.tensor([[[1.0, 2.0, 3.0, 4.0]]])),
    }[case]
    shape = (3, 4)
    held = tw.zeros(*shape, dtype=dtype)
    device = device_value(tw.zeros(*shape, dtype=dtype))  # (a value on the device, written there)
    assert session.holds(held) and not session.holds(device)
    for t in (held, device):
        t[key] = value
    assert session.holds(held)
    np.testing.assert_array_equal(held.numpy(), device.numpy())
    assert held.numpy().dtype == device.numpy().dtype


def test_a_write_that_cannot_be_made_raises_what_the_device_path_raises(session):
    held = tw.zeros(2, 3)
    with pytest.raises(tw.TensorwireError) as on_client:
        held[0] = tw.tensor([1.0, 2.0])
    device = device_value(tw.zeros(2, 3))
    with pytest.raises(tw.TensorwireError) as on_device:
        device[0] = tw.tensor([1.0, 2.0])
    assert type(on_client.value) is type(on_device.value) and str(on_client.value) == str(on_device.value)
    np.testing.assert_array_equal(held.numpy(), np.zeros((2, 3), np.float32))  # (unchanged)


@pytest.mark.parametrize("key, value", [(5, 1.0), (-4, 1.0), (slice(None, None, -1), 1.0), (slice(None, None, 0), 1.0),
                                        (slice(0, 2), tw.tensor([1.0, 2.0])), (0, tw.tensor([[1.0, 2.0, 3.0]] * 2))],
                         ids=["int past the end", "int before the start", "negative step", "zero step",
                              "a value of another shape", "a value with more rows"])
def test_a_lone_key_the_client_cannot_write_raises_what_the_device_path_raises(session, key, value):
    held = tw.zeros(3, 3)
    device = device_value(tw.zeros(3, 3))
    errors = []
    for t in (held, device):
        with pytest.raises(Exception) as e:
            t[key] = value
        errors.append(e.value)
    assert type(errors[0]) is type(errors[1]) and str(errors[0]) == str(errors[1])
    np.testing.assert_array_equal(held.numpy(), np.zeros((3, 3), np.float32))  # (unchanged)


def test_what_autograd_tracks_or_a_device_has_is_not_held(session):
    w = tw.zeros(3, requires_grad=True)
    assert not session.holds(w)
    _, ops = _recorded(session, lambda: w[1:].sum().backward())
    np.testing.assert_array_equal(w.grad.numpy(), [0.0, 1.0, 1.0])
    device = device_value(tw.arange(6))
    rows, ops = _recorded(session, lambda: tw.stack([device[0:3], device[3:6]]))
    assert ops and not session.holds(rows)
    big = tw.zeros(100, 100)  # (more elements than the client computes: known_values.HOST_ELEMENTS)
    assert not session.holds(big)
    np.testing.assert_array_equal(rows.numpy(), np.arange(6).reshape(2, 3))


def test_a_corpus_joined_from_a_tensor_a_line_is_held_and_reaches_the_device_as_one_upload(session):
    """pytorch/examples' word_language_model tokenizes a file into ``torch.tensor(ids)`` a line and ``torch.cat`` s
    them: a join of held values, past ``HOST_ELEMENTS`` and past ``MAX_INPUTS`` tensors, is worked out on the client
    up to ``MADE_BYTES`` (it only copies what the client holds) and reaches the device as one upload, not a node of
    thousands of inputs (which the worker refuses). A fill or a repeat that large is left to the device."""
    from tensorwire.protocol.graph import MAX_INPUTS

    lines = [[(7 * k + j) % 50 for j in range(k % 9 + 1)] for k in range(MAX_INPUTS + 700)]
    corpus, ops = _recorded(session, lambda: tw.cat([tw.tensor(ids).type(tw.int64) for ids in lines]))
    assert ops == [] and session.holds(corpus)
    want = np.concatenate([np.array(ids) for ids in lines])
    with round_trips(session) as n:
        assert corpus.sum().item() == want.sum()
    assert n[0] == 1
    np.testing.assert_array_equal(corpus.numpy(), want)
    fill = tw.zeros(1 << 17)
    wide = tw.tensor([1.0, 2.0]).repeat(1 << 16)
    assert not session.holds(fill) and not session.holds(wide)
    np.testing.assert_array_equal(wide[-2:].numpy(), [1.0, 2.0])


def test_a_cat_of_more_tensors_than_a_node_takes_is_a_chain_of_cats(session):
    """``cat`` of more device tensors than one node may read (``protocol.graph.MAX_INPUTS``) records a left-to-right
    chain of cats: the values and the gradients of a single one."""
    from tensorwire.protocol.graph import MAX_INPUTS

    x = tw.arange(3.0, requires_grad=True)
    parts = [x * (k % 5) for k in range(MAX_INPUTS + 3)]
    joined = tw.cat(parts)
    joined.sum().backward()
    want = np.concatenate([np.arange(3.0) * (k % 5) for k in range(MAX_INPUTS + 3)])
    np.testing.assert_array_equal(joined.detach().numpy(), want)
    np.testing.assert_array_equal(x.grad.numpy(), [sum(k % 5 for k in range(MAX_INPUTS + 3))] * 3)
    stacked = tw.stack([p.detach() for p in parts])
    np.testing.assert_array_equal(stacked.numpy(), want.reshape(-1, 3))


def test_held_values_nobody_reads_never_reach_a_device(session):
    taken = []
    take = session._take_release
    session._take_release = lambda: taken.append(take()) or taken[-1]
    try:
        x, y = default_collate([_item(tw, w) for w in WORDS[:3]])
        ids = {x._id, y._id}
        del x, y
        session.flush()
    finally:
        del session._take_release
    released = {h for out, _ in taken for h in out}
    dropped = {h for _, d in taken for h in d}
    assert ids <= dropped and not ids & released
    assert not any(session._known.follows(h) for h in ids)


def test_the_same_batch_as_torch(session):
    torch = pytest.importorskip("torch", reason="PyTorch is the reference here (pip install torch==2.13.0)")
    from torch.utils.data._utils.collate import default_collate as torch_collate

    x, y = default_collate([_item(tw, w) for w in WORDS])
    tx, ty = torch_collate([_item(torch, w) for w in WORDS])
    np.testing.assert_array_equal(x.numpy(), tx.numpy())
    np.testing.assert_array_equal(y.numpy(), ty.numpy())


def test_a_small_randint_is_known_to_the_client_and_the_same_on_the_device(session):
    """nanoGPT's ``get_batch``: ``ix = torch.randint(len(data) - block_size, (batch_size,))``, each element a slice
    bound into a numpy array. The counter-based generator's integers are the same bits on every device
    (``protocol/random.py``), so the client computes a small draw itself: no value is read back for the bounds."""
    data = np.arange(1000, dtype=np.uint16)
    tw.manual_seed(7)
    with round_trips(session) as n:
        ix = tw.randint(len(data) - 8, (12,))
        x = tw.stack([tw.from_numpy(data[i:i + 8].astype(np.int64)) for i in ix])
        assert n[0] == 0
    tw.manual_seed(7)
    on_device = device_value(tw.randint(len(data) - 8, (12,)))  # (the device's)
    assert ix.tolist() == on_device.tolist()
    np.testing.assert_array_equal(x.numpy(), np.stack([data[i:i + 8] for i in ix.tolist()]).astype(np.int64))
    big = tw.randint(10, (100, 100))  # (more elements than the client computes)
    assert not session._known.has(big._id)


def test_a_value_read_while_a_run_of_writes_is_open_stays_as_it_was_read(session):
    """A run of element writes into a value the client holds writes its own copy in place; a read of the tensor (or
    a view of it) while the run is open ends the run first, so what was read never changes under the reader."""
    t = tw.zeros(5)
    t[0] = 1.0
    first = t.numpy()
    t[1] = 2.0
    window = t[0:3]
    t[2] = 3.0
    seen = window.tolist()
    t[3] = 4.0
    assert first.tolist() == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert seen == [1.0, 2.0, 3.0] and t.tolist() == [1.0, 2.0, 3.0, 4.0, 0.0]
    assert session.holds(t)
    fetched = device_value(tw.arange(5.0))  # (a value on the device, read once: the client knows it)
    fetched.numpy()
    fetched[4] = -1.0
    assert fetched.tolist() == [0.0, 1.0, 2.0, 3.0, -1.0] and not session.holds(fetched)


def test_dead_held_values_go_before_thousands_pile_up(session, monkeypatch):
    """Values the client holds die with their tensors; their handles are released at the next flush, and a run of
    held values with no flush in between (a dataset's samples worked out before a step) flushes them itself past
    ``MAX_HELD_RELEASES``, so the values of the dead ones do not pile up."""
    monkeypatch.setattr(S, "MAX_HELD_RELEASES", 256)
    session.flush()
    x = tw.tensor(np.arange(100, dtype=np.float32))
    for k in range(2000):
        y = tw.cat([x[k % 7:], x[:k % 7]])  # (a rotation: a join of views of a held value, held)
    assert session.holds(y) and len(session._release) < 256 + 8
    assert len(session._lazy) < 2 * 256 + 16 and session._known.bytes < 600 * 400
    np.testing.assert_array_equal(y.numpy(), np.roll(np.arange(100, dtype=np.float32), -(1999 % 7)))
