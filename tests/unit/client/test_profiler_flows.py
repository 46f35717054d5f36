"""The Chrome trace's flow arrows (``profile.export_chrome_trace``) pair each batch's shipping with the worker span
that ran it whatever order the two sort in: a worker's clock offset is an estimate (within half a round trip plus
scheduling noise), so under load the worker's span can land before the shipping on the client's clock. The pairing
went through the spans in time order and lost such a batch's arrow (the README's test run found a profile without
any)."""

from __future__ import annotations

import json

from tensorwire.profiler import profile


def _flows(tmp_path, ship_ns: int, batch_ns: int) -> list[dict]:
    p = profile()
    p._spans = [("client::ship", "client", ship_ns, 10_000, {"batch": 1})]
    p._remote = [("worker cpu:0", 4242, 0, 0, [("worker::batch", "worker", batch_ns, 50_000, {"batch": 1})])]
    path = tmp_path / "trace.json"
    p.export_chrome_trace(path)
    return [e for e in json.loads(path.read_text())["traceEvents"] if e["ph"] in ("s", "f")]


def test_the_arrow_is_drawn_when_the_worker_span_sorts_after_the_shipping(tmp_path):
    flows = _flows(tmp_path, 1_000_000, 1_040_000)
    assert [e["ph"] for e in flows] == ["s", "f"] and flows[0]["id"] == flows[1]["id"]


def test_the_arrow_is_drawn_when_the_offsets_error_puts_the_worker_span_first(tmp_path):
    flows = _flows(tmp_path, 1_000_000, 999_000)
    assert sorted(e["ph"] for e in flows) == ["f", "s"] and flows[0]["id"] == flows[1]["id"]
