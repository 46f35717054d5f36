"""Light windows (``views.basic_view``, issue 37): ``x[a:b]`` of rows of ``x`` outside autograd records nothing and
pins nothing; ``stack``/``cat`` of light windows of one root is ONE gather of the root's rows, and anything else that
reads a light window materializes it first, in program order, so every value is torch's. Counted, not timed: the
nodes recorded, the handles pinned and released; and the values against PyTorch's, for each way a window is read
(printing, ``.numpy()``, an in-place write to it or its root, a view of it, another op, a compiled function) and
for the bounds torch takes (negative, past the end) or refuses."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import tensorwire as tw
from tensorwire.known_values import LIGHT
from tensorwire.protocol.errors import ShapeError

from ._calls import device_value

try:
    import torch
except ImportError:  # pragma: no cover - torch is a test dependency
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is the reference here (pip install torch==2.13.0)")

TEXT = np.random.default_rng(0).integers(0, 28, 200)
OFFSETS = [3, 17, 150, 0, 190 - 9, 42]


def _recorded(session, fn):
    """``(fn's result, the ops of the nodes it left recorded and not shipped)``."""
    session.flush()
    out = fn()
    session.end_writes()
    return out, [e[1] for e in session._pending]


def _pair():
    """The same text as a tensorwire and a torch tensor, and each one's first 190 characters (a view: a split)."""
    data, ref = tw.tensor(TEXT, dtype=tw.long), torch.tensor(TEXT, dtype=torch.long)
    return data, ref, data[:190], ref[:190]


def _same(ours, theirs):
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    assert ours.shape == tuple(theirs.shape) and str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]


def test_a_window_records_and_pins_nothing_and_its_handle_never_reaches_a_device(session):
    data = tw.tensor(TEXT, dtype=tw.long)
    train = data[:190]
    train + 0  # (train materialized: its windows are light)
    ix = tw.tensor(OFFSETS)
    session.flush()
    pins = dict(session._pins)
    ws, ops = _recorded(session, lambda: [train[i:i + 8] for i in ix])
    assert ops == [] and all(w._base is data and w._base_version == LIGHT for w in ws)
    assert session._pins == pins  # (no lazy node reads data or train)
    ids = {w._id for w in ws}
    taken = []
    take = session._take_release
    session._take_release = lambda: taken.append(take()) or taken[-1]
    try:
        del ws
        gc.collect()
        session.flush()
    finally:
        del session._take_release
    assert not ids & {h for out, _ in taken for h in out}  # (dropped as unrecorded lazy nodes, not sent)
    assert ids <= {h for _, dropped in taken for h in dropped} and not ids & session._lazy.keys()


@needs_torch
def test_stacked_windows_are_one_gather_contiguous_of_torch_s_values(session):
    data, ref, train, rtrain = _pair()
    train + 0
    session.flush()
    (x, y), ops = _recorded(session, lambda: (tw.stack([train[i:i + 8] for i in tw.tensor(OFFSETS)]),
                                              tw.cat([train[i + 1:i + 9] for i in OFFSETS])))
    assert [o for o in ops if o != "const"] == ["index", "index"], ops
    _same(x, torch.stack([rtrain[i:i + 8] for i in torch.tensor(OFFSETS)]))
    _same(y, torch.cat([rtrain[i + 1:i + 9] for i in OFFSETS]))
    assert x.is_contiguous() and x._base is None


@needs_torch
def test_an_in_place_write_to_the_root_before_the_stack_shows_in_it(session):
    data, ref, train, rtrain = _pair()
    ws, rws = [train[i:i + 8] for i in OFFSETS], [rtrain[i:i + 8] for i in OFFSETS]
    for d in (data, ref):
        d[5:20] = 99  # (the root changes after the windows were taken: torch's views show it)
        d.mul_(2)
    _same(tw.stack(ws), torch.stack(rws))
    _same(tw.cat(ws[:2]), torch.cat(rws[:2]))


@needs_torch
def test_an_in_place_write_through_the_split_before_the_stack_shows_in_it(session):
    data, ref, train, rtrain = _pair()
    ws, rws = [train[i:i + 4] for i in OFFSETS], [rtrain[i:i + 4] for i in OFFSETS]
    train.add_(1000)
    rtrain.add_(1000)
    _same(tw.stack(ws), torch.stack(rws))
    _same(data, ref)


@needs_torch
@pytest.mark.parametrize("read", ["numpy", "repr", "tolist", "op", "view", "reshape", "clone", "cat of one",
                                  "data", "index", "sum", "compiled"])
@pytest.mark.parametrize("changed", [False, True])
def test_a_window_read_otherwise_is_torch_s_before_and_after_its_root_changed(session, read, changed):
    data, ref, train, rtrain = _pair()
    w, rw = train[17:25], rtrain[17:25]
    if changed:
        data[20] = -7
        ref[20] = -7
        data.add_(3)
        ref.add_(3)

    times3 = tw.compile(lambda a: a * 3)  # (traced on the first read, replayed on the second)

    def value(t, lib):
        if read == "numpy":
            return np.asarray(t.numpy())
        if read == "repr":
            return repr(t).replace("tensor", "").strip()
        if read == "tolist":
            return t.tolist()
        if read == "op":
            return (t * 2 + 1).numpy()
        if read == "view":
            return t[2:5].numpy()
        if read == "reshape":
            return t.reshape(2, 4).numpy()
        if read == "clone":
            return t.clone().numpy()
        if read == "cat of one":
            return lib.cat([t]).numpy()
        if read == "data":
            return t.data.numpy()
        if read == "index":
            return t[lib.tensor([0, 7, 3])].numpy()
        if read == "sum":
            return t.sum().item()
        return (times3(t) if lib is tw else t * 3).numpy()

    ours, theirs = value(w, tw), value(rw, torch)
    if read == "repr":
        assert ours == theirs
    else:
        np.testing.assert_array_equal(ours, theirs)
    data.add_(1)  # (and read again once the root changed after the first read)
    ref.add_(1)
    ours, theirs = value(w, tw), value(rw, torch)
    if read != "repr":
        np.testing.assert_array_equal(ours, theirs)


@needs_torch
@pytest.mark.parametrize("write", ["add_", "setitem", "element", "fill_"])
def test_an_in_place_write_to_a_window_reaches_its_root_and_other_windows(session, write):
    data, ref, train, rtrain = _pair()
    ws, rws = [train[i:i + 8] for i in (10, 14, 30)], [rtrain[i:i + 8] for i in (10, 14, 30)]
    for w in (ws[0], rws[0]):
        if write == "add_":
            w.add_(100)
        elif write == "setitem":
            w[1:3] = 55
        elif write == "element":
            w[5] = -1
        else:
            w.fill_(9)
    _same(data, ref)
    _same(tw.stack(ws), torch.stack(rws))  # (the second window overlaps the first)


@needs_torch
def test_windows_of_two_roots_in_one_stack(session):
    data, ref, train, rtrain = _pair()
    # (cloned: a value on the device, not one the client holds and would join itself: known_values.HELD_OPS)
    other, rother = device_value(tw.tensor(TEXT[::-1].copy())), torch.tensor(TEXT[::-1].copy())
    parts = lambda a, b: [a[3:9], b[0:6], a[100:106], b[7:13]]  # noqa: E731
    s, ops = _recorded(session, lambda: tw.stack(parts(train, other)))
    assert "index" not in ops and "cat" in ops, ops
    _same(s, torch.stack(parts(rtrain, rother)))
    _same(tw.cat(parts(train, other)), torch.cat(parts(rtrain, rother)))


@needs_torch
def test_windows_of_parents_that_share_their_last_step_keep_each_parent_s_offset(session):
    # (``r[2:10][0:5]`` and ``r[3:11][0:5]``: two parents whose last step is one shared object, ``row_view``'s step
    # of rows 0:5 of a length-8 tensor; their windows are rows of the root at different offsets)
    data, ref, train, rtrain = _pair()
    parts = lambda r: [r[2:10][0:5][1:3], r[3:11][0:5][1:3], r[40:48][0:5][0:2]]  # noqa: E731
    s, ops = _recorded(session, lambda: tw.stack(parts(train)))
    assert "index" in ops, ops
    _same(s, torch.stack(parts(rtrain)))
    _same(tw.cat(parts(data)), torch.cat(parts(ref)))


@needs_torch
@pytest.mark.parametrize("bounds", [(-8, None), (-300, 5), (185, 400), (-5, -1), (50, 10), (0, 190), (400, 500)])
def test_negative_and_out_of_range_bounds_are_torch_s(session, bounds):
    data, ref, train, rtrain = _pair()
    a, b = bounds
    w, rw = train[a:b], rtrain[a:b]
    assert w.shape == tuple(rw.shape)
    _same(w, rw)
    if rw.shape[0]:
        _same(tw.stack([train[a:b], train[a:b]]), torch.stack([rtrain[a:b], rtrain[a:b]]))


@needs_torch
def test_what_torch_refuses_raises_torch_s_errors(session):
    data, ref, train, rtrain = _pair()
    with pytest.raises(IndexError):
        train[190]
    with pytest.raises(IndexError):
        rtrain[190]
    with pytest.raises(ValueError):
        train[::-1]
    with pytest.raises(ValueError):
        rtrain[::-1]
    with pytest.raises(ShapeError, match="stack expects each tensor to be equal size"):  # (torch's RuntimeError:
        tw.stack([train[185:200], train[0:8]])  # tensorwire's shape errors are ValueErrors) (clamped to 5 rows)
    with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size"):
        torch.stack([rtrain[185:200], rtrain[0:8]])


@needs_torch
def test_a_window_of_a_root_that_requires_grad_is_tracked_by_autograd(session):
    w = tw.tensor(np.arange(10, dtype=np.float32), requires_grad=True)
    rw = torch.tensor(np.arange(10, dtype=np.float32), requires_grad=True)
    parts = [w[1:4], w[5:8]]
    assert all(p.requires_grad and p._base_version != LIGHT for p in parts)
    (tw.stack(parts) * tw.tensor([[1.0], [2.0]])).sum().backward()
    (torch.stack([rw[1:4], rw[5:8]]) * torch.tensor([[1.0], [2.0]])).sum().backward()
    _same(w.grad, rw.grad)


def test_a_window_read_by_an_op_records_the_slice_a_view_would(session):
    data = tw.tensor(np.arange(20000.0))
    session.flush()
    w = data[7:15]
    assert w._base_version == LIGHT
    r, ops = _recorded(session, lambda: w * 2)
    assert [o for o in ops if o != "full"] == ["slice", "mul"], ops  # (full: the cached scalar 2)
    assert w._base_version == data._version and not w._s._pins.get(data._id)
    np.testing.assert_array_equal(r.numpy(), np.arange(7.0, 15.0) * 2)


def test_a_compiled_function_takes_light_windows_traced_and_replayed(session):
    data = tw.tensor(np.arange(50, dtype=np.int64))
    stats = []
    for light in (True, False):
        f = tw.compile(lambda a, b: tw.stack([a, b]) * 3 + a)
        for k in range(6):  # (the first calls trace, the others replay: each with new windows)
            a, b = data[k:k + 5], data[2 * k:2 * k + 5]
            assert a._base_version == LIGHT
            if not light:
                a + 0, b + 0  # (read once: no longer light)
                assert a._base_version == data._version
            np.testing.assert_array_equal(f(a, b).numpy(), np.stack([np.arange(k, k + 5), np.arange(2 * k, 2 * k + 5)])
                                          * 3 + np.arange(k, k + 5))
        stats.append(dict(f.stats))
    assert stats[0] == stats[1] and stats[0]["replays"] > 0, stats  # (one graph, whatever rows the windows take)


@needs_torch
def test_windows_of_the_same_rows_share_their_step_and_each_still_shows_its_own_root(session):
    a_np, b_np = TEXT[:40].copy(), TEXT[40:80].copy()
    a, b, ra, rb = tw.tensor(a_np), tw.tensor(b_np), torch.tensor(a_np), torch.tensor(b_np)
    wa, wb, wa2 = a[3:11], b[3:11], a[3:11]
    assert wb._vsteps[-1] is wa2._vsteps[-1]  # (views.row_view: kept for rows 3:11 of 40 from their second window
    # on, memos.remember_again, and shared)
    assert all(w._base_version == LIGHT for w in (wa, wb, wa2))
    a.mul_(3)  # (a window's parent and version are its handle's, not its shared step's)
    ra.mul_(3)
    _same(wa + 0, ra[3:11] + 0)
    _same(wb, rb[3:11])
    b[5] = -4
    rb[5] = -4
    _same(tw.stack([wb, wa2]), torch.stack([rb[3:11], ra[3:11]]))
    c = a[1:35]  # (a view of another shape: rows 3:11 of it, another step)
    assert c[3:11]._vsteps[-1] is not wa._vsteps[-1]
    _same(c[3:11], ra[1:35][3:11])


@needs_torch
def test_a_stale_view_argument_of_a_compiled_function_is_read_as_a_replay_reads_it(session):
    data, ref = tw.tensor(np.arange(24.0).reshape(6, 4)), torch.tensor(np.arange(24.0).reshape(6, 4))
    f = tw.compile(lambda v: v * 2 + 1)
    for k in range(5):  # (traced, then replayed: each call after the root changed in place)
        v, rv = data[:, 1:3], ref[:, 1:3]  # (not rows: an ordinary view)
        data.add_(k)
        ref.add_(k)
        _same(f(v), rv * 2 + 1)
    assert f.stats["replays"] > 0, f.stats


@needs_torch
def test_a_light_window_read_by_autograd_is_brought_up_to_date_as_any_view(session):
    w = tw.tensor(np.arange(10, dtype=np.float32), requires_grad=True)
    rw = torch.tensor(np.arange(10, dtype=np.float32), requires_grad=True)
    with tw.no_grad():
        part = w[2:6]
        w.mul_(2)  # (after the window was taken: it shows the new value)
    with torch.no_grad():
        rpart = rw[2:6]
        rw.mul_(2)
    assert part._base_version == LIGHT
    x, rx = tw.tensor(np.ones(4, dtype=np.float32), requires_grad=True), torch.ones(4, requires_grad=True)
    with tw.no_grad():
        y = part * x  # (read under no_grad: no graph)
    with torch.no_grad():
        ry = rpart * rx
    _same(y, ry)
    (part.detach() * x).sum().backward()
    (rpart.detach() * rx).sum().backward()
    _same(x.grad, rx.grad)


def test_random_windows_leave_few_objects_for_the_collector(session):
    """A loader of random offsets (Karpathy's ``get_batch``: ``torch.randint`` bounds) never takes a window of the
    same rows again: the view steps the client memoizes are kept from their second sighting only
    (``memos.remember_again``), and a slice bound's node is made of what the cyclic collector stops tracking, so the
    collector does not walk thousands of kept steps at every young collection (16,384 were kept: ~90 us of a ~1.1 ms
    evaluation batch). Windows taken again (a small corpus's offsets) are kept and found."""
    from tensorwire import known_values, views

    text = device_value(tw.randint(0, 65, (200_000,)))
    for _ in range(3):
        tw.stack([text[i:i + 8] for i in tw.randint(0, 199_000, (32,))])
    session.flush()
    gc.collect()
    before = len(gc.get_objects())
    steps = len(views._ROW_STEPS)
    for _ in range(200):  # 6,400 windows at fresh offsets, each bound and its + 8 a fresh 0-d value
        ix = tw.randint(0, 199_000, (32,))
        x = tw.stack([text[i:i + 8] for i in ix])
        y = tw.stack([text[i + 1:i + 9] for i in ix])
    session.flush()
    gc.collect()  # (a tuple of ints is untracked at its first collection: what is left is kept containers)
    grown = len(gc.get_objects()) - before
    assert grown < 15_000, grown  # (60,000 when every step was kept: a Slice and its lists, ~4 objects a window)
    assert len(views._ROW_STEPS) - steps < 600  # (offsets drawn twice by chance)
    assert len(known_values._INT64_NODES) <= known_values._MAX_INT64_VALUES
    want = text.numpy()
    np.testing.assert_array_equal(x.numpy(), np.stack([want[i:i + 8] for i in ix.tolist()]))
    np.testing.assert_array_equal(y.numpy(), np.stack([want[i + 1:i + 9] for i in ix.tolist()]))
    again = [views.row_view(text, 17, 25) for _ in range(3)]
    assert again[1]._vsteps[-1] is again[2]._vsteps[-1] and views._ROW_STEPS[((200_000,), 17, 25)] is \
        again[2]._vsteps[-1]  # (a window taken again: its step kept, and found)
