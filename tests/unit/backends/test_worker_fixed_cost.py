"""The worker's per-batch bookkeeping done in fewer calls (issue 37) answers as the one-by-one checks did: the CPU
device's batch storage lookup, a direct batch's ``dyn`` check, and a replay's input check."""

from __future__ import annotations

import numpy as np
import pytest

from tensorwire.backends.cpu import NumpyBackend
from tensorwire.backends.direct import _is_dyn
from tensorwire.backends.executor import Fail, compile_plan
from tensorwire.backends.worker import Executor
from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import ProtocolError


def test_the_batch_storage_lookup_answers_as_storage_does_for_every_kind_of_buffer():
    dev = NumpyBackend().open(0)
    owner = np.arange(24, dtype=np.float32)
    view = owner.reshape(4, 6)
    wire = np.frombuffer(bytearray(owner.tobytes()), np.float32)  # (a received frame: its base is not an array)
    strided = np.lib.stride_tricks.as_strided(owner, (3, 24), (0, 4))  # (its base is numpy's DummyArray)
    bufs = [owner, view, view[1:, ::2], view.T, wire, wire.reshape(2, 12), wire[3:], strided, strided[1:],
            np.float32(2.5), np.ones((2, 2))[0]]
    assert dev.storages(bufs) == list(map(dev.storage, bufs))
    assert dev.storages(bufs)[1] == (id(owner), owner.nbytes)  # (a view counts as the array it views)
    fresh = [owner, np.ones((2, 3)), np.float32(2.5)]  # (no views: every one its own allocation)
    assert dev.storages(fresh) == list(map(dev.storage, fresh)) == [(id(b), b.nbytes) for b in fresh]
    assert dev.storages(iter(bufs)) == list(map(dev.storage, bufs)) and dev.storages([]) == []


def test_the_batch_meta_lookup_answers_as_meta_does():
    dev = NumpyBackend().open(0)
    bufs = [np.ones((2, 3), np.float32), np.float32(2.5), np.arange(3), np.ones(2, np.complex64),
            np.zeros((0, 4), np.bool_), np.ones(3, np.float16)[::2]]
    assert dev.metas(bufs) == list(map(dev.meta, bufs))
    assert dev.metas(bufs)[0] == ((2, 3), D.float32)
    with pytest.raises(Exception):  # noqa: B017,PT011 - (not a buffer: meta's own error, as one by one)
        dev.metas([bufs[0], Fail({"code": "ExecutionError", "message": "x"})])


@pytest.mark.parametrize("dyn, ok", [
    ([[1, {}]], True),
    ([[1, {"starts": [0]}], [4, {"value": 2}]], True),
    ([[1, {}], [2]], False),
    ([[True, {}]], False),  # (a bool is not a node index)
    ([[1, []]], False),
    ([[1, {}, 3]], False),
    ([["ab"]], False),
    ([[1, {}], "ab"], False),
    ("ab", False),
    ([[1.0, {}]], False),
])
def test_a_direct_batch_dyn_is_a_list_of_node_and_attrs(dyn, ok):
    assert _is_dyn(dyn) is ok


def test_a_replay_with_inputs_shaped_otherwise_than_planned_is_refused_and_a_failed_one_passes():
    dev = NumpyBackend().open(0)
    ex = Executor(dev, "cpu:0", lambda h, f: None)
    try:
        plan = compile_plan(dev, [["add", [-1, -2], None]], [((3,), D.float32), ((3,), D.float32)])
        a, b = np.ones(3, np.float32), np.zeros(3, np.float32)
        ex._check_inputs(plan, [a, b], [1, 2], 7)
        failed = Fail({"code": "ExecutionError", "message": "x"})
        ex._check_inputs(plan, [a, failed], [1, 2], 7)  # (its dependent outputs fail with it instead)
        with pytest.raises(ProtocolError, match="input 2 of a different shape"):
            ex._check_inputs(plan, [a, np.zeros(4, np.float32)], [1, 2], 7)
        with pytest.raises(ProtocolError, match="input 1 of a different shape"):
            ex._check_inputs(plan, [np.ones(3, np.float64), b], [1, 2], 7)
        with pytest.raises(ProtocolError, match="with 1 inputs"):
            ex._check_inputs(plan, [a], [1], 7)
    finally:
        ex.close()
