"""What the dispatcher counts, and the Prometheus endpoint that shows it.

The dispatcher's loop keeps plain counters (:class:`Telemetry`: per device batches, ops and bytes; sessions; plan-cache
hits; errors by code; workers lost) and the last load each worker reported (queue depth, sessions, memory; asked for
every ``POLL_S`` while metrics are served, and with every ``stats`` request). ``tensorwire status`` and the metrics
read these same figures: one source of truth.

Metrics are opt-in (``tensorwire dispatcher --metrics-port PORT``, bound to 127.0.0.1 unless ``--metrics-host`` says
otherwise). :class:`DispatcherCollector` builds every sample at scrape time from the loop's state, on the HTTP
server's thread, reading only ints and snapshots (``list(dict.items())`` is atomic under the GIL), so the loop pays
nothing per scrape and nothing per message beyond its own counters. Each dispatcher has its own
``CollectorRegistry``: several in one process (tests) do not clash.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass

from tensorwire.protocol.metrics import prometheus

#: how often the dispatcher asks its workers for their load while metrics are served
POLL_S = 2.0
#: the window ``status`` computes recent throughput over
RATE_WINDOW_S = 10.0


@dataclass
class DeviceCounters:
    """Totals for one device since the dispatcher started."""

    batches: int = 0  # batch fragments routed to its worker
    ops: int = 0  # nodes in them
    bytes_in: int = 0  # buffer frames sent with them (uploads)
    bytes_out: int = 0  # result frames its worker sent back (fetches)


class Telemetry:
    """The dispatcher's counters and the workers' last reported load (main thread writes, anyone reads)."""

    def __init__(self):
        self.started = time.time()
        self.devices: dict[str, DeviceCounters] = {}
        self.sessions_opened = 0
        self.plan_hits = 0  # batches replayed by plan number
        self.plan_misses = 0  # batches that sent their structure
        self.errors: Counter = Counter()  # error code -> errors reported to clients
        self.workers_lost: Counter = Counter()  # device -> times its worker was lost
        self.load: dict[str, dict] = {}  # device -> the last load its worker reported (with "at": monotonic s)
        self._history: deque = deque()  # (monotonic s, {device: (batches, ops, bytes)}) samples for rates
        #: device -> (batches, ops, bytes) its worker ran for clients' direct channels, as it last reported them (the
        #: work the dispatcher never sees: :meth:`rates` adds it to what it routed)
        self.direct: dict[str, tuple[int, int, int]] = {}

    def note_direct(self, device: str, totals) -> None:
        """A worker's report of its direct-channel totals, ``[batches, ops, bytes]`` (a malformed one is dropped)."""
        if isinstance(totals, list) and len(totals) == 3 and all(type(v) is int and v >= 0 for v in totals):
            self.direct[device] = tuple(totals)

    def _totals(self) -> dict[str, tuple[int, int, int]]:
        """Per device: batches, ops and bytes so far, routed here and sent direct."""
        out = {d: (c.batches, c.ops, c.bytes_in + c.bytes_out) for d, c in self.devices.items()}
        for d, (b, o, n) in self.direct.items():
            rb, ro, rn = out.get(d, (0, 0, 0))
            out[d] = (rb + b, ro + o, rn + n)
        return out

    def device(self, name: str) -> DeviceCounters:
        c = self.devices.get(name)
        if c is None:
            c = self.devices[name] = DeviceCounters()
        return c

    def error(self, err) -> None:
        """Count an error sent to a client (a wire error map, or its code)."""
        code = err.get("code") if isinstance(err, dict) else err
        self.errors[str(code)[:64]] += 1

    def sample(self, now: float) -> None:
        """Remember the counters now (called every heartbeat), for :meth:`rates`."""
        self._history.append((now, self._totals()))
        while self._history and now - self._history[0][0] > RATE_WINDOW_S:
            self._history.popleft()

    def rates(self, now: float) -> dict[str, dict]:
        """Per device: batches, ops and bytes per second over the last ``RATE_WINDOW_S`` (since the oldest sample),
        the work routed here and the work clients sent its worker direct (as last reported) alike."""
        if not self._history:
            return {}
        t0, old = self._history[0]
        dt = max(now - t0, 1e-3)
        out = {}
        for d, (cb, co, cn) in self._totals().items():
            b, o, n = old.get(d, (0, 0, 0))
            out[d] = {
                "batches_per_s": (cb - b) / dt,
                "ops_per_s": (co - o) / dt,
                "bytes_per_s": (cn - n) / dt,
                "window_s": dt,
            }
        return out


def _num(d, key: str) -> int:
    """``d[key]`` when ``d`` is a worker's report and that is a count; 0 otherwise."""
    v = d.get(key) if isinstance(d, dict) else None
    return v if type(v) is int else 0


class DispatcherCollector:
    """A Prometheus collector over a live :class:`~tensorwire.dispatcher.server.Dispatcher`."""

    def __init__(self, dispatcher):
        self.d = dispatcher

    def collect(self):
        core = prometheus().core
        CounterMetricFamily, GaugeMetricFamily = core.CounterMetricFamily, core.GaugeMetricFamily
        d = self.d
        tel: Telemetry = d.telemetry
        now = time.monotonic()
        g = GaugeMetricFamily("tensorwire_sessions", "Live client sessions")
        g.add_metric([], len(d.sessions))
        yield g
        c = CounterMetricFamily("tensorwire_sessions_opened", "Sessions opened since the dispatcher started")
        c.add_metric([], tel.sessions_opened)
        yield c
        # what clients sent their workers on direct channels, as each worker last reported it (its load)
        direct = {dev: ld.get("direct") for dev, ld in list(tel.load.items()) if isinstance(ld.get("direct"), dict)}
        names = sorted(set(tel.devices) | set(direct))
        for name, attr, doc in (
            ("batches", "batches", "Batches run on a device's worker (routed by the dispatcher or sent on a direct "
                                   "channel)"),
            ("ops", "ops", "Ops (graph nodes) sent to a device's worker"),
        ):
            c = CounterMetricFamily(f"tensorwire_{name}", doc, labels=["device"])
            for dev in names:
                cnt = tel.devices.get(dev)
                c.add_metric([dev], (getattr(cnt, attr) if cnt else 0) + _num(direct.get(dev), attr))
            yield c
        c = CounterMetricFamily(
            "tensorwire_bytes",
            "Tensor bytes to a device (in: uploads) and back (out: fetched results), on either path",
            labels=["device", "direction"],
        )
        for dev in names:
            cnt = tel.devices.get(dev)
            c.add_metric([dev, "in"], (cnt.bytes_in if cnt else 0) + _num(direct.get(dev), "bytes_in"))
            c.add_metric([dev, "out"], (cnt.bytes_out if cnt else 0) + _num(direct.get(dev), "bytes_out"))
        yield c
        c = CounterMetricFamily(
            "tensorwire_plan_cache",
            "Batches by plan-cache outcome: replayed by number (hit) or sent with their structure (miss)",
            labels=["result"],
        )
        c.add_metric(["hit"], tel.plan_hits + sum(_num(v, "plan_hits") for v in direct.values()))
        c.add_metric(["miss"], tel.plan_misses + sum(_num(v, "plan_misses") for v in direct.values()))
        yield c
        c = CounterMetricFamily("tensorwire_errors", "Errors reported to clients, by error code", labels=["code"])
        errors = Counter(tel.errors)
        for v in direct.values():
            e = v.get("errors")
            if isinstance(e, dict):
                errors.update({str(k)[:64]: n for k, n in e.items() if type(n) is int})
        for code, n in list(errors.items()):
            c.add_metric([code], n)
        yield c
        answers = getattr(d, "answers", None)
        if answers is not None:  # (dispatcher/answers.py; read without pruning: the loop prunes every heartbeat)
            g = GaugeMetricFamily("tensorwire_answer_bytes", "Bytes of answers sent to clients that their connections "
                                  "have not taken yet (bounded by TENSORWIRE_ANSWER_BYTES per connection)")
            g.add_metric([], answers.held_bytes)
            yield g
            c = CounterMetricFamily("tensorwire_answers_dropped", "Answers to clients dropped at a bound (each "
                                    "client got an OutOfMemory error for it instead)")
            c.add_metric([], answers.dropped)
            yield c
        workers = list(d.workers.items())
        up = GaugeMetricFamily(
            "tensorwire_worker_up", "1 for each device with a registered, live worker", labels=["device"]
        )
        age = GaugeMetricFamily(
            "tensorwire_worker_heartbeat_age_seconds", "Seconds since the worker was last heard", labels=["device"]
        )
        for dev, w in workers:
            up.add_metric([dev], 1)
            age.add_metric([dev], max(0.0, now - w.last_seen))
        for dev in tel.workers_lost:
            if dev not in d.workers:
                up.add_metric([dev], 0)
        yield up
        yield age
        c = CounterMetricFamily("tensorwire_workers_lost", "Times a device's worker was lost", labels=["device"])
        for dev, n in list(tel.workers_lost.items()):
            c.add_metric([dev], n)
        yield c
        svc = GaugeMetricFamily(
            "tensorwire_service_up",
            "1 for each registered named service (autograd, collectives ranks)",
            labels=["service"],
        )
        for name in list(d.named):
            svc.add_metric([name], 1)
        yield svc
        loads = list(tel.load.items())
        q = GaugeMetricFamily(
            "tensorwire_queue_depth",
            "Batches queued or running on a device's worker (as last reported)",
            labels=["device"],
        )
        sess = GaugeMetricFamily("tensorwire_device_sessions", "Sessions holding state on a device", labels=["device"])
        mem = GaugeMetricFamily(
            "tensorwire_device_memory_bytes",
            "Device memory: held by sessions' tensors (used), "
            "the per-session limit, and the backend's own figures (allocated, reserved, total)",
            labels=["device", "kind"],
        )
        for dev, ld in loads:
            q.add_metric([dev], ld.get("queued", 0))
            sess.add_metric([dev], ld.get("sessions", 0))
            mem.add_metric([dev, "used"], ld.get("used_bytes", 0))
            if ld.get("session_limit"):
                mem.add_metric([dev, "session_limit"], ld["session_limit"])
            for k, v in (ld.get("memory") or {}).items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and k.endswith("_bytes"):
                    mem.add_metric([dev, k[: -len("_bytes")]], v)
        yield q
        yield sess
        yield mem
        g = GaugeMetricFamily("tensorwire_uptime_seconds", "Seconds since the dispatcher started")
        g.add_metric([], time.time() - tel.started)
        yield g
