"""Small values the client has are read again without a round trip (``client/known_values.py``; issue 37): a
fetched or uploaded small tensor, the views of it made by indexing, and the integer results of elementwise ops on
them. Round trips are counted at the session's one way out (``_flush``)."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import tensorwire as tw

from ._calls import counted, device_value


@contextlib.contextmanager
def round_trips(session):
    """Counts the batches the session ships while the block runs (``n[0]``)."""
    with counted(session, "_flush") as (n, _):
        yield n


def test_iterating_a_fetched_small_tensor_makes_no_round_trip(session):
    t = tw.randint(0, 100, (50,))
    want = t.tolist()  # one round trip
    with round_trips(session) as n:
        got = [int(e) for e in t]
        assert [e.item() for e in t] == want and t[3:7].tolist() == want[3:7] and float(t[-1]) == want[-1]
    assert got == want and n[0] == 0


def test_slices_bounded_by_a_remote_index_cost_one_round_trip(session):
    data = tw.arange(1000)
    ix = device_value(tw.randint(0, 990, (64,)))  # (a value only the device has; a small randint is the client's)
    with round_trips(session) as n:
        x = tw.stack([data[i:i + 8] for i in ix])  # torch's stacked-slices batch loader
    assert n[0] == 1  # ix, fetched once when its first element is read
    want = np.stack([np.arange(1000)[i:i + 8] for i in ix.numpy()])
    np.testing.assert_array_equal(x.numpy(), want)


def test_python_data_and_integer_arithmetic_on_it_answer_from_the_client(session):
    y = tw.tensor([5, 6, 7])
    with round_trips(session) as n:
        assert int(y[0]) == 5 and (y + 1).tolist() == [6, 7, 8]
        assert ((y * 2 - 1) % 4).tolist() == [1, 3, 1] and bool((y > 5)[1]) and (y // 2).tolist() == [2, 3, 3]
    assert n[0] == 0
    with round_trips(session) as n:  # a floating result is the device's (a fused kernel may round differently)
        assert (tw.tensor([1.5]) * 2).item() == 3.0
    assert n[0] == 1


def test_values_stay_right_after_in_place_updates(session):
    t = tw.tensor([1, 2, 3])
    assert t.tolist() == [1, 2, 3]
    e = t[1]
    assert int(e) == 2
    t[0] = 10
    t.add_(1)
    assert t.tolist() == [11, 3, 4] and int(e) == 3  # e is a view: it follows its base, as in torch
    t.mul_(2)
    assert [int(v) for v in t] == [22, 6, 8] and int(e) == 6
    u = t.clone()
    u.zero_()
    assert u.tolist() == [0, 0, 0] and t.tolist() == [22, 6, 8]


def test_a_failing_index_still_fails_as_the_device_says(session):
    t = tw.tensor([1, 2, 3])
    t.tolist()
    with pytest.raises(IndexError):
        t[5]


def test_large_values_are_not_kept_and_released_handles_are_forgotten(session):
    big = tw.zeros(100_000)
    with round_trips(session) as n:
        big.numpy()
        big.numpy()
    assert n[0] == 2
    known = session._known
    small = tw.tensor(np.arange(1000))
    small.tolist()
    held = known.bytes
    del small
    session.flush()
    assert known.bytes <= held - 8000


def test_compile_capture_neither_reads_nor_keeps_values(session):
    @tw.compile
    def f(x):
        return x * 2 + 1

    x = tw.tensor([1, 2, 3])
    x.tolist()
    assert f(x).tolist() == [3, 5, 7]
    x2 = tw.tensor([4, 5, 6])
    assert f(x2).tolist() == [9, 11, 13]  # a replay computes afresh


def test_long_chains_of_derived_values_stay_right(session):
    ix = tw.randint(0, 10, (8,))
    i = ix[0]
    for _ in range(300):  # longer than the recipes kept: the far end is the device's to give
        i = i + 1
    assert int(i) - int(ix[0]) == 300


def test_windows_of_a_slice_of_a_known_text_are_read_from_the_client(session):
    # the loader's windows ``train[i:i + 8]`` of ``train = data[:n]``: a view of a view of a kept value (each window's
    # recipe keeps its view step, and is followed only when the window is read), and ``window + 1`` of them
    text = np.arange(100, 300)
    data = tw.tensor(text)
    train = data[:150]
    ix = tw.tensor([3, 40, 141])
    with round_trips(session) as n:
        wins = [train[i:i + 8] for i in ix]
        assert [w.tolist() for w in wins] == [text[i:i + 8].tolist() for i in (3, 40, 141)]
        assert train[2:4].tolist() == [102, 103] and (wins[1] + 1).tolist() == (text[40:48] + 1).tolist()
        assert int(wins[2][-1]) == text[148] and int(data[:3][1]) == 101
    assert n[0] == 0
    data.add_(1000)  # the windows see their base's update, as torch's do
    assert wins[0].tolist() == (text[3:11] + 1000).tolist()
    wins[1][0] = -5  # and writes through a window reach the base
    assert int(data[40]) == -5 and train[40:42].tolist() == [-5, text[41] + 1000]


def test_a_view_of_a_small_root_keeps_no_recipe_and_is_worked_out_from_the_root_when_read(session):
    # (``views.derive_view``: the loader's windows, made every step and never read, keep nothing;
    # ``KnownValues.view_recipe`` works a read one out from its root's value)
    data = tw.tensor(np.arange(100, 300))
    train = data[:150]
    wins = [train[i:i + 8] for i in tw.tensor([3, 40])]
    known = session._known
    assert not any(w._id in known._recipes for w in wins + [train]) and all(known.gives(w) for w in wins)
    with round_trips(session) as n:
        assert wins[1].tolist() == list(range(140, 148)) and wins[0][1:3].reshape(2, 1).tolist() == [[104], [105]]
    assert n[0] == 0
    dev = tw.arange(1000)  # a small root the client has not: read once, for all its views
    with round_trips(session) as n:
        assert dev[10:20][2:4].tolist() == [12, 13] and dev[500:502].tolist() == [500, 501]
    assert n[0] == 1
    big = tw.arange(20000)  # too big to keep: a view of a view whose value the client has is read from that value
    part = big[:50]
    part.tolist()
    with round_trips(session) as n:
        assert part[2:4].tolist() == [2, 3] and part.reshape(5, 10)[1].tolist() == list(range(10, 20))
    assert n[0] == 0
    data.add_(1)  # (a window made before the update reads the root's new value, as torch's do)
    assert wins[1].tolist() == list(range(141, 149))


def test_a_permutation_the_client_made_is_read_element_by_element_from_the_client(session):
    """``randperm`` is computed on the client (the keys a ``rand`` would draw, the same numbers) and kept, though
    larger than a fetched value would be (``MADE_BYTES``): minGPT's adder dataset reads ``self.ixes[idx].item()``
    of a 9,500-index slice of one in every ``__getitem__``, which made a round trip per item. Python data the
    client uploads is kept alike."""
    with round_trips(session) as n:
        perm = tw.randperm(10_000)
        ixes = perm[500:]
        got = [ixes[i].item() for i in range(0, 9_500, 97)] + [int(ixes[-1])]
        lst = tw.tensor(list(range(20_000)))  # (160 KB, from Python data)
        assert [int(lst[i]) for i in (0, 7, 19_999)] == [0, 7, 19_999]
    assert n[0] == 0
    want = perm.numpy()
    assert sorted(want.tolist()) == list(range(10_000))
    assert got == want[500:][::97].tolist() + [want[-1]]
    tw.manual_seed(5)
    keys = tw.rand(10_000, dtype=tw.float64).numpy()  # (the keys it sorts: the draw it stands for)
    tw.manual_seed(5)
    assert tw.randperm(10_000).tolist() == np.argsort(keys, kind="stable").tolist()
    assert tw.randperm(4, dtype=tw.float32).dtype == tw.float32
