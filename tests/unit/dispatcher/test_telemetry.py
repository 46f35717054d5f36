"""``dispatcher/telemetry.Telemetry``'s throughput: the work the dispatcher routed and the work clients sent a worker
on its direct channel (which the dispatcher never sees: the worker reports its totals) count alike, added in one
place (``Telemetry.by_path``) that ``status``'s rates and the Prometheus metrics both read."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tensorwire.dispatcher.telemetry import DirectCounts, DispatcherCollector, Telemetry
from tensorwire.protocol.messages import DIRECT_TOTALS


def _hb(batches: int, ops: int, bytes_in: int = 0, bytes_out: int = 0, hits: int = 0, misses: int = 0) -> list:
    """A worker heartbeat's ``direct`` list."""
    assert len(DIRECT_TOTALS) == 6
    return [batches, ops, bytes_in, bytes_out, hits, misses]


def test_rates_add_a_worker_s_direct_work_to_what_the_dispatcher_routed():
    t = Telemetry()
    t.device("cpu:0").batches = 4
    t.sample(0.0)
    t.device("cpu:0").batches += 2  # routed here
    t.note_direct("cpu:0", _hb(10, 30, 4000, 96))  # sent direct, as the worker's heartbeat reports it
    t.note_direct("cpu:1", _hb(5, 5))  # a device whose work went only direct
    r = t.rates(2.0)
    assert r["cpu:0"]["batches_per_s"] == (2 + 10) / 2 and r["cpu:0"]["bytes_per_s"] == 4096 / 2
    assert r["cpu:1"]["batches_per_s"] == 5 / 2 and r["cpu:1"]["ops_per_s"] == 5 / 2
    t.sample(2.0)
    t.note_direct("cpu:0", _hb(16, 30, 4000, 96))
    assert t.rates(3.0)["cpu:0"]["batches_per_s"] == (2 + 16) / 3  # (over the window, since the oldest sample)


def test_a_malformed_direct_report_is_dropped():
    """Too short for any version, too long (a worker newer than its dispatcher), or a count that is not a count."""
    t = Telemetry()
    for bad in (None, [], [1, 2], [*_hb(1, 2), 0], [1, 2, -3, 0, 0, 0], [1, "2", 3, 0, 0, 0], [1.0, 2, 3, 0, 0, 0],
                [1, 2, "3"], [1, 2, 3.0], [1, True, 3], {"batches": 1}, {**dict(zip(DIRECT_TOTALS, _hb(1, 2))),
                                                                         "ops": None}, 7):
        t.note_direct("cpu:0", bad)
    assert t.direct == {}


def test_an_earlier_worker_s_shorter_direct_list_counts_what_it_lacks_as_zero():
    """A rolling upgrade: a worker of the version before sends ``[batches, ops, bytes]`` (its bytes both ways); the
    dispatcher keeps it (the missing counts zero, the bytes as ``bytes_in``) instead of dropping its every report,
    so status's rates and the metrics' totals count that worker's direct work meanwhile."""
    t = Telemetry()
    t.sample(0.0)
    t.note_direct("cpu:0", [10, 30, 4096])
    assert t.direct["cpu:0"] == DirectCounts(10, 30, 4096, 0, 0, 0, {})
    assert t.rates(2.0)["cpu:0"]["bytes_per_s"] == 4096 / 2 and t.rates(2.0)["cpu:0"]["batches_per_s"] == 10 / 2
    t.note_direct("cpu:0", _hb(1, 2)[:-1])  # (any length in between: a version in between)
    assert t.direct["cpu:0"] == DirectCounts(1, 2, 0, 0, 0, 0, {})


def test_a_load_report_and_a_heartbeat_fill_one_record():
    """The load's ``direct`` map carries the counts and the errors; a later heartbeat's list renews the counts and
    keeps the errors."""
    t = Telemetry()
    t.note_direct("cpu:0", {**dict(zip(DIRECT_TOTALS, _hb(3, 9, 10, 20, 2, 1))), "errors": {"NotFound": 2, "x": -1}})
    assert t.direct["cpu:0"] == DirectCounts(3, 9, 10, 20, 2, 1, {"NotFound": 2})
    t.note_direct("cpu:0", _hb(4, 12, 10, 28, 3, 1))
    assert t.direct["cpu:0"] == DirectCounts(4, 12, 10, 28, 3, 1, {"NotFound": 2})


def _samples(collector) -> dict:
    out = {}
    for fam in collector.collect():
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_status_and_the_metrics_read_the_same_totals_by_path():
    pytest.importorskip("prometheus_client")
    t = Telemetry()
    r = t.device("cpu:0")
    r.batches, r.ops, r.bytes_in, r.bytes_out = 7, 14, 100, 50  # routed by the dispatcher
    t.plan_hits, t.plan_misses = 5, 2
    t.error("NotFound")
    t.note_direct("cpu:0", {**dict(zip(DIRECT_TOTALS, _hb(3, 6, 1000, 24, 2, 1))), "errors": {"NotFound": 1}})
    t.note_direct("cpu:1", _hb(4, 4, 0, 8, 4, 0))  # direct only
    both = {d: p.both for d, p in t.by_path().items()}
    assert (both["cpu:0"].batches, both["cpu:0"].ops, both["cpu:0"].bytes_in, both["cpu:0"].bytes_out) == (
        10, 20, 1100, 74)
    assert (both["cpu:1"].batches, both["cpu:1"].bytes_out) == (4, 8)
    assert t.by_path()["cpu:0"].relay is r and t.by_path()["cpu:1"].direct == t.direct["cpu:1"]
    t.sample(0.0)
    assert t._history[-1][1] == {"cpu:0": (10, 20, 1174), "cpu:1": (4, 4, 8)}  # (what the rates difference)
    d = SimpleNamespace(telemetry=t, sessions={}, workers={}, named={}, answers=None, gathers={}, coll_pending={})
    m = _samples(DispatcherCollector(d))
    assert m[("tensorwire_batches_total", (("device", "cpu:0"),))] == 10
    assert m[("tensorwire_ops_total", (("device", "cpu:1"),))] == 4
    assert m[("tensorwire_bytes_total", (("device", "cpu:0"), ("direction", "in")))] == 1100
    assert m[("tensorwire_bytes_total", (("device", "cpu:0"), ("direction", "out")))] == 74
    assert m[("tensorwire_plan_cache_total", (("result", "hit"),))] == 5 + 2 + 4
    assert m[("tensorwire_plan_cache_total", (("result", "miss"),))] == 2 + 1
    assert m[("tensorwire_errors_total", (("code", "NotFound"),))] == 2
