"""A batch that numbers its outputs from one id and names its temporaries (``protocol.batch_ids``), over the raw
protocol: temporaries get no handle anywhere, kept outputs work as listed ones do, on one device and across two."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

import tensorwire as tw

from .test_robustness import _keyed, _raw, _reply


def _full(value: float, dev: int = 0) -> list:
    return ["full", [], {"shape": [2], "dtype": "float32", "value": value}, dev]


@pytest.fixture()
def raw(cluster):
    s = _raw(cluster.address)
    yield s
    s.close(0)


def _batch(s, **h) -> dict:
    s.send_multipart(_keyed(s, [msgpack.packb({"t": "batch", "q": 1, "ext": [], "fetch": [], **h})]))
    return _reply(s)


def _value(s, hid: int):
    """The value of handle ``hid``, or the error fetching it gave."""
    h = _batch(s, fetch=[hid])
    if h.get("fetch_errors"):
        return h["fetch_errors"][0]
    return h["values"]


def test_temporaries_get_no_handles_and_kept_outputs_work_as_listed_ones(cluster, raw):
    nodes = [_full(1.5), ["add", [0, 0], None, 0], ["mul", [1, 1], None, 0], ["add", [2, 0], None, 0]]
    h = _batch(raw, nodes=nodes, devs=["cpu:0"], out_first=7000, temps=[[0, 2]], sync=True)
    assert not h.get("errors"), h
    (hid, dtype, shape, _), = _value(raw, 7002)
    assert (hid, dtype, shape) == (7002, "float32", [2])
    assert _value(raw, 7003)[0][0] == 7003
    for temp in (7000, 7001):  # computed, consumed and gone: no handle on the dispatcher
        err = _value(raw, temp)
        assert err["code"] == "NotFound", err
    # a later batch reads a kept output as an input; a temporary's id is not a handle to read
    h = _batch(raw, nodes=[["neg", [-1], None, 0]], devs=["cpu:0"], ext=[7002], outs=[7004], fetch=[7004])
    assert not h.get("fetch_errors"), h
    h = _batch(raw, nodes=[["neg", [-1], None, 0]], devs=["cpu:0"], ext=[7000], outs=[7005], fetch=[7005])
    assert h["fetch_errors"][0]["code"] in ("NotFound", "DependencyFailed"), h


def test_temporaries_across_two_devices_are_released_where_they_were_made(cluster, raw):
    nodes = [_full(2.0, 0), ["copy", [0], {"shape": [2], "dtype": "float32"}, 1], ["neg", [1], None, 1],
             ["add", [2, 2], None, 1]]
    h = _batch(raw, nodes=nodes, devs=["cpu:0", "cpu:1"], out_first=8000, temps=[[0, 3]], fetch=[8003])
    assert not h.get("fetch_errors") and not h.get("errors"), h
    assert [v[0] for v in h["values"]] == [8003]
    for temp in (8000, 8001, 8002):
        assert _value(raw, temp)["code"] == "NotFound"


def test_a_batch_that_fails_marks_only_its_kept_outputs_failed(cluster, raw):
    # an input that is not a handle: the batch is refused, its kept output fails with that error at its next read
    nodes = [["exp", [-1], None, 0], ["neg", [0], None, 0]]
    h = _batch(raw, nodes=nodes, devs=["cpu:0"], ext=[123456], out_first=9000, temps=[[0, 1]], sync=True)
    assert h["errors"][0]["code"] == "NotFound", h
    assert "123456" in _value(raw, 9001)["message"]  # the batch's own error
    assert "123456" not in _value(raw, 9000)["message"]  # a temporary was never anything: just not a handle


@pytest.mark.parametrize("bad", [
    {"out_first": "7"}, {"out_first": 7, "outs": [7]}, {"out_first": 7, "temps": [[0, 2]]},
    {"out_first": 7, "temps": [[0]]}, {"outs": [7], "temps": 3},
])
def test_malformed_ids_or_temporaries_are_refused_whole(cluster, session, raw, bad):
    v = tw.arange(4, dtype=tw.float32)
    v.numpy()
    h = _batch(raw, nodes=[_full(1.0)], devs=["cpu:0"], sync=True, **bad)
    assert h["errors"][0]["code"] == "ProtocolError", h
    raw.send(msgpack.packb({"t": "ping", "q": 9}))
    assert _reply(raw)["t"] == "pong"
    np.testing.assert_array_equal(v.numpy(), np.arange(4, dtype=np.float32))


def test_a_replayed_loop_leaves_only_its_result_on_the_device(session):
    x = tw.ones(4)

    @tw.compile
    def loop(y):
        for _ in range(50):
            y = y * 1.5 - 0.25
        return y

    first = [loop(x) for _ in range(4)]  # recorded until two calls agree (its scalars get cached on the way)
    first[-1].numpy()
    before = tw.memory_stats()["devices"]["cpu:0"]["buffers"]
    outs = [loop(x) for _ in range(6)]
    assert loop.stats["replays"] >= 6
    np.testing.assert_allclose(outs[-1].numpy(), first[0].numpy())
    # each call keeps its one result; none of the 99 temporaries a call makes is left behind
    assert tw.memory_stats()["devices"]["cpu:0"]["buffers"] - before == len(outs)
