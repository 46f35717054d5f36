"""Known 0-d int64 scalars (issue 37, the bigram's slice bounds): the elements of an iterated known 1-d int64 tensor
(``for i in ix``: ``indexing.iter_known``) and ``+``, ``-``, ``*`` of one with a Python int (``i + 8``:
``known_values.known_int_op``, computed on the client with torch's dtype rule, int64, and int64's wrap-around) are
made by ``Session.known_int64``: one shared lazy ``full`` node of the value, never recorded unless a recorded node
reads it. Everything a program does with them behaves as in PyTorch, checked against PyTorch here: ``__index__``,
``int()``, ``.item()``, slicing, printing, autograd, ``tw.compile``'s capture and in-place updates (an element is a
view of ``ix``: ``i += 1`` writes through to ``ix``, as torch's ``unbind`` views do; a computed ``j = i + 8`` is a
tensor of its own). Counted, not timed: the nodes recorded and the handles that reach a device."""

from __future__ import annotations

import operator

import numpy as np
import pytest

import tensorwire as tw

try:
    import torch
except ImportError:  # pragma: no cover - torch is a test dependency
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is the reference here (pip install torch==2.13.0)")

OFFSETS = [3, 17, 150, 0, 181, 42]
TEXT = np.random.default_rng(1).integers(0, 28, 200)
BIG = 2**62


def _pair(values=OFFSETS):
    return tw.tensor(values), torch.tensor(values)


def _same(ours, theirs):
    assert ours.shape == tuple(theirs.shape) and str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@needs_torch
@pytest.mark.parametrize("op", [operator.add, operator.sub, operator.mul])
@pytest.mark.parametrize("other", [8, -3, 0, 2**40, 2**63 - 1, -2**63])
def test_arithmetic_with_a_python_int_is_torchs_value_and_dtype_either_way_round(session, op, other):
    ix, rx = _pair([5, -7, BIG, -BIG, 2**63 - 1])
    for i, r in zip(ix, rx):
        for ours, theirs in ((op(i, other), op(r, other)), (op(other, i), op(other, r))):
            _same(ours, theirs)  # (int64, wrapped as torch's int64 arithmetic wraps)
            assert int(ours) == int(theirs) and ours.item() == theirs.item() and not ours.requires_grad
            assert session._lazy[ours._id][0] == "full" and session._known.peek(ours._id) is not None


@needs_torch
def test_index_int_item_float_bool_and_printing_are_torchs(session):
    ix, rx = _pair()
    for i, r in zip(ix, rx):
        for ours, theirs in ((i, r), (i + 8, r + 8), (3 - i, 3 - r), (i * 2 + 1, r * 2 + 1)):
            assert operator.index(ours) == operator.index(theirs) and int(ours) == int(theirs)
            assert ours.item() == theirs.item() and type(ours.item()) is int
            assert float(ours) == float(theirs) and bool(ours) == bool(theirs)
            assert repr(ours) == repr(theirs) and str(ours) == str(theirs)
            assert f"{ours:>6d}" == f"{theirs:>6d}" and ours.tolist() == theirs.tolist()
            assert ours.shape == theirs.shape == () and ours.dim() == 0 and ours.dtype == tw.int64
            assert list(range(10))[ours] == list(range(10))[theirs] if 0 <= int(theirs) < 10 else True


@needs_torch
def test_slicing_with_them_is_torchs(session):
    data, ref = tw.tensor(TEXT, dtype=tw.long), torch.tensor(TEXT, dtype=torch.long)
    ix, rx = _pair()
    for key in (lambda d, i: d[i:i + 8], lambda d, i: d[i + 1:i + 8 + 1], lambda d, i: d[i],
                lambda d, i: d[i - 190:], lambda d, i: d[:i * 2], lambda d, i: d[i:i + 300],
                lambda d, i: d[2 * i - i:1 + i], lambda d, i: d[i:i + 8:2]):
        for i, r in zip(ix, rx):
            _same(key(data, i), key(ref, r))
    x = tw.stack([data[i:i + 8] for i in ix])
    y = tw.stack([data[i + 1:i + 8 + 1] for i in ix])
    _same(x, torch.stack([ref[r:r + 8] for r in rx]))
    _same(y, torch.stack([ref[r + 1:r + 8 + 1] for r in rx]))


def test_a_loader_step_records_only_its_gathers_and_no_bound_reaches_a_device(session):
    data = tw.tensor(TEXT, dtype=tw.long)
    ix = tw.tensor(OFFSETS)
    session.flush()
    before = len(session._pending)
    bounds = []

    def take(i):
        bounds.extend((i, i + 8, i + 1, i + 8 + 1))
        return i

    x = tw.stack([data[take(i):i + 8] for i in ix])
    y = tw.stack([data[i + 1:i + 8 + 1] for i in ix])
    ops = [e[1] for e in session._pending[before:]]
    # (the text's upload, held until now, and the two gathers' nodes; no bound recorded)
    assert len(ops) <= 5 and "full" not in ops and "add" not in ops
    ids = {b._id for b in bounds}
    assert ids <= session._lazy.keys() and all(session._lazy[h][0] == "full" for h in ids)
    bounds.clear()
    taken = []
    take_release = session._take_release
    session._take_release = lambda: taken.append(take_release()) or taken[-1]
    try:
        session.flush()
    finally:
        del session._take_release
    out, dropped = taken[0]
    assert ids <= set(dropped) and not ids & set(out)  # (dropped unrecorded: never sent to a device)
    assert not ids & session._known._values.keys()  # (and their values forgotten)
    np.testing.assert_array_equal(x.numpy(), np.stack([TEXT[k:k + 8] for k in OFFSETS]))
    np.testing.assert_array_equal(y.numpy(), np.stack([TEXT[k + 1:k + 9] for k in OFFSETS]))


@needs_torch
def test_read_by_a_device_op_it_is_recorded_with_its_value(session):
    ix, rx = _pair()
    w, rw = tw.arange(6.0), torch.arange(6.0)
    for i, r in zip(ix, rx):
        j, rj = i + 2, r + 2
        _same(tw.stack([j, i, j * 3]), torch.stack([rj, r, rj * 3]))
        _same(w * j, rw * rj)
        _same(j.float() / 4, rj.float() / 4)
        _same(tw.where(w > 2, j, i), torch.where(rw > 2, rj, r))
        _same((i + 1) // 2, (r + 1) // 2)
        assert j._id not in session._lazy  # (recorded now: its handle is a device's)


@needs_torch
def test_autograd_they_never_require_grad_and_gradients_through_them_are_torchs(session):
    ix, rx = _pair([1, 2, 3])
    w = tw.tensor([0.5, -1.0, 2.0, 4.0], requires_grad=True)
    rw = torch.tensor([0.5, -1.0, 2.0, 4.0], requires_grad=True)
    loss = sum((w[i:i + 1] * (i + 1)).sum() for i in ix)
    rloss = sum((rw[r:r + 1] * (r + 1)).sum() for r in rx)
    loss.backward()
    rloss.backward()
    np.testing.assert_allclose(w.grad.numpy(), rw.grad.numpy())
    assert float(loss.detach()) == float(rloss.detach())
    i = next(iter(ix))
    for t in (i, i + 1, 2 * i):
        assert not t.requires_grad and t.grad_fn is None and t.is_leaf
        with pytest.raises((RuntimeError, TypeError)):
            t.requires_grad_()
    with tw.no_grad():
        _same(i + 1, rx[0] + 1)


@needs_torch
def test_in_place_on_an_element_writes_through_to_ix_and_on_a_result_changes_only_it(session):
    ix, rx = _pair()
    for i, r in zip(ix, rx):
        i += 1  # (an element is a view of ix: torch's unbind views share its storage)
        r += 1
    _same(ix, rx)
    ix, rx = _pair()
    els, rels = list(ix), list(rx)
    outs, routs = [], []
    for i, r in zip(els, rels):
        j, rj = i + 8, r + 8
        j += 1
        rj += 1
        j.mul_(3)
        rj.mul_(3)
        outs.append(j)
        routs.append(rj)
        _same(i, r)
    _same(ix, rx)  # (a result is a tensor of its own)
    for j, rj in zip(outs, routs):
        _same(j, rj)
    els[2].sub_(100)
    rels[2].sub_(100)
    _same(ix, rx)
    ix.add_(10)  # (the elements are views: they see ix's update, and what is computed from them after does too)
    rx.add_(10)
    for i, r in zip(els, rels):
        _same(i, r)
        _same(i + 1, r + 1)
        assert operator.index(i - 1) == operator.index(r - 1)


@needs_torch
def test_elements_of_a_changed_ix_and_of_a_2d_ix_are_torchs(session):
    ix, rx = _pair()
    it, rit = iter(ix), iter(rx)
    first, rfirst = next(it), next(rit)
    ix[3] = 99  # (changed in place halfway through the loop)
    rx[3] = 99
    for i, r in zip(it, rit):
        _same(i + 1, r + 1)
    _same(first * 2, rfirst * 2)
    m, rm = tw.tensor([[1, 2], [3, 4]]), torch.tensor([[1, 2], [3, 4]])
    for row, rrow in zip(m, rm):
        for e, re in zip(row, rrow):
            _same(e + 5, re + 5)
            assert int(e - 1) == int(re - 1)


@needs_torch
def test_an_indexed_element_is_a_known_scalar_and_a_view_as_torchs(session):
    """``ix[k]`` of a known 1-d int64 (a loader's ``int(targets[index])``) is made as ``iter(ix)``'s elements are:
    reading it is a look-up (no node recorded), and it is a view of ``ix`` as in torch."""
    ix, rx = _pair()
    session.flush()
    before = len(session._pending)
    els = [ix[k] for k in (0, 3, -1, 5)]
    rels = [rx[k] for k in (0, 3, -1, 5)]
    assert [int(e) for e in els] == [int(r) for r in rels] and els[1].item() == rels[1].item()
    assert len(session._pending) == before and all(session._lazy[e._id][0] == "full" for e in els)
    _same(els[2] * 2 + 1, rels[2] * 2 + 1)
    els[0] += 5  # (a view: written through to ix)
    rels[0] += 5
    _same(ix, rx)
    ix.mul_(2)  # (and it sees ix's later updates)
    rx.mul_(2)
    for e, r in zip(els, rels):
        _same(e, r)
    sub, rsub = ix[1:5], rx[1:5]  # (an element of a view of ix: the same, through the view's steps)
    e, r = sub[2], rsub[2]
    assert int(e) == int(r)
    e.fill_(-7)
    r.fill_(-7)
    _same(ix, rx)
    _same(sub, rsub)


@needs_torch
def test_a_known_scalar_argument_of_a_compiled_function_traces_as_any_tensor(session):
    data, ref = tw.tensor(TEXT, dtype=tw.long), torch.tensor(TEXT, dtype=torch.long)

    @tw.compile
    def f(d, i):
        return d[i + 1] * (i + 2) - i

    @tw.compile
    def g(d, ix):
        return tw.stack([d[i] + i * 3 for i in ix])

    for offsets in ([4, 9, 30], [7, 1, 2], [100, 5, 6]):
        ix, rx = _pair(offsets)
        for i, r in zip(ix, rx):
            _same(f(data, i), ref[r + 1] * (r + 2) - r)
            _same(f(data, i + 3), ref[r + 3 + 1] * (r + 3 + 2) - (r + 3))
        _same(g(data, ix), torch.stack([ref[r] + r * 3 for r in rx]))
    assert f.stats["traces"] >= 1 and g.stats["traces"] >= 1


def test_values_the_client_does_not_have_take_the_general_path(session):
    x = tw.tensor([3, 1, 2])
    i = x.argmax()  # (a 0-d int64 the client has not read: the device's)
    assert session._known.peek(i._id) is None
    j = i + 1
    assert session._lazy.get(j._id, ("add",))[0] != "full"
    assert int(j) == 1 and int(i * 4) == 0 and int(5 - i) == 5


@needs_torch
def test_under_autocast_they_are_torchs(session):
    ix, rx = _pair()
    w, rw = tw.arange(4.0), torch.arange(4.0)
    with tw.autocast("cpu", dtype=tw.bfloat16), torch.autocast("cpu", dtype=torch.bfloat16):
        for i, r in zip(ix, rx):
            _same(i + 8, r + 8)
            _same(w[i % 4:] * (i - 1), rw[r % 4:] * (r - 1))
