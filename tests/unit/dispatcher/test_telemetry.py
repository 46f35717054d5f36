"""``dispatcher/telemetry.Telemetry``'s throughput: the work the dispatcher routed and the work clients sent a worker
on its direct channel (which the dispatcher never sees: the worker reports its totals) count alike."""

from __future__ import annotations

from tensorwire.dispatcher.telemetry import Telemetry


def test_rates_add_a_worker_s_direct_work_to_what_the_dispatcher_routed():
    t = Telemetry()
    t.device("cpu:0").batches = 4
    t.sample(0.0)
    t.device("cpu:0").batches += 2  # routed here
    t.note_direct("cpu:0", [10, 30, 4096])  # sent direct, as the worker's heartbeat reports it
    t.note_direct("cpu:1", [5, 5, 0])  # a device whose work went only direct
    r = t.rates(2.0)
    assert r["cpu:0"]["batches_per_s"] == (2 + 10) / 2 and r["cpu:0"]["bytes_per_s"] == 4096 / 2
    assert r["cpu:1"]["batches_per_s"] == 5 / 2 and r["cpu:1"]["ops_per_s"] == 5 / 2
    t.sample(2.0)
    t.note_direct("cpu:0", [16, 30, 4096])
    assert t.rates(3.0)["cpu:0"]["batches_per_s"] == (2 + 16) / 3  # (over the window, since the oldest sample)


def test_a_malformed_direct_report_is_dropped():
    t = Telemetry()
    for bad in (None, [1, 2], [1, 2, -3], [1, "2", 3], [1.0, 2, 3], {"batches": 1}):
        t.note_direct("cpu:0", bad)
    assert t.direct == {}
