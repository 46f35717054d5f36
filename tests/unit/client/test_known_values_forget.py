"""``KnownValues.forget``: released handles leave the kept values and recipes, and the byte count follows."""

from __future__ import annotations

import numpy as np

from tensorwire.known_values import KnownValues, int64_value
from tensorwire.protocol import dtypes as D


class _Parent:
    """What ``KnownValues.derive`` reads of a parent tensor: its handle, shape and dtype."""

    def __init__(self, hid: int, shape: tuple):
        self._id, self._shape, self.dtype = hid, shape, D.int64


def test_forget_drops_released_values_and_recipes_and_their_bytes():
    known = KnownValues()
    known.put(1, np.arange(10, dtype=np.int64))
    known.put(2, np.arange(3, dtype=np.int64))
    known.put(3, int64_value(7))
    known.derive(4, _Parent(1, (10,)), lambda v: v[2:5])  # (a view of a kept value: a recipe)
    assert known.bytes == 80 + 24 + 8 and known.follows(4)
    # a handle given twice, handles never known, and both kinds of entry in one call
    known.forget([2, 99, 4, 2, 3, 100])
    assert not known.has(2) and not known.has(3) and not known.follows(4)
    assert known.has(1) and known.bytes == 80
    known.forget([])
    known.forget([1])
    assert known.bytes == 0 and not known.follows(1)


def test_past_the_limit_the_least_recently_read_values_go_first():
    known = KnownValues(limit=24)
    for hid in (1, 2, 3):
        known.put(hid, int64_value(hid))
    assert known.get(1) == 1 and known.hits == 1  # (1 read: 2 is now the least recently read)
    assert known.peek(2) == 2 and known.has(3)  # (neither counts as a read)
    known.put(4, int64_value(4))
    assert not known.has(2) and [h for h in (1, 3, 4) if known.has(h)] == [1, 3, 4] and known.bytes == 24
    known.put_int64(5, 5, "cpu:0")  # (a slice bound's value: kept as any value)
    assert not known.has(3) and known.get(5) == 5 and known.bytes == 24
    known.put(6, int64_value(6))
    assert not known.has(1) and known.has(4) and known.has(5) and known.has(6)


def test_forget_takes_a_set_of_handles_as_a_list_of_them():
    # (a flush passes one set of its releases, which meets the kept tables by walking the smaller of the two)
    def kept(hids):
        known = KnownValues()
        for hid in (1, 2, 3):
            known.put(hid, int64_value(hid))
        known.derive(4, _Parent(1, (10,)), lambda v: v)
        known.forget(hids)
        return [known.has(h) or known.follows(h) for h in (1, 2, 3, 4)], known.bytes

    assert kept({2, 4, *range(100, 200)}) == kept([2, 4, *range(100, 200)]) == ([True, False, True, False], 16)
