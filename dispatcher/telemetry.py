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
from dataclasses import dataclass, field

from tensorwire.protocol.messages import DIRECT_TOTALS, DIRECT_TOTALS_MIN
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


@dataclass(frozen=True)
class DirectCounts:
    """What clients sent one device's worker on its direct channels so far, as the worker last reported it (its
    heartbeat: the counts of ``DIRECT_TOTALS``; its load: those and the errors by code)."""

    batches: int = 0
    ops: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    plan_hits: int = 0
    plan_misses: int = 0
    errors: dict = field(default_factory=dict)  # error code -> errors answered on its channels (load reports only)


@dataclass(frozen=True)
class PathTotals:
    """One device's totals by path: what the dispatcher routed to its worker (``relay``) and what clients sent that
    worker on direct channels (``direct``), and their sum (``both``): the one place the two are added, which
    ``status``'s rates and the metrics both read."""

    relay: DeviceCounters
    direct: DirectCounts
    both: DeviceCounters

    @classmethod
    def of(cls, relay: DeviceCounters | None, direct: DirectCounts | None) -> PathTotals:
        r, d = relay or DeviceCounters(), direct or DirectCounts()
        return cls(r, d, DeviceCounters(r.batches + d.batches, r.ops + d.ops, r.bytes_in + d.bytes_in,
                                        r.bytes_out + d.bytes_out))


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
        #: device -> what its worker ran for clients' direct channels, as it last reported it (the work the
        #: dispatcher never sees: :meth:`by_path` adds it to what it routed)
        self.direct: dict[str, DirectCounts] = {}

    def note_direct(self, device: str, report) -> None:
        """A worker's report of its direct-channel totals: its heartbeat's list (the counts of ``DIRECT_TOTALS``, in
        order; the errors stay as last reported) or its load's ``direct`` map (those counts and ``errors``). A
        malformed one is dropped. A shorter list (at least ``DIRECT_TOTALS_MIN``) is a worker of an earlier version
        during a rolling upgrade: the counts it does not send are zero (its third, the bytes both ways, counts as
        ``bytes_in``: the totals and rates stay right); a longer one, from a worker newer than this dispatcher, is
        malformed (docs/architecture.md, "Mixed versions")."""
        if isinstance(report, list):
            counts = report
            if DIRECT_TOTALS_MIN <= len(counts) < len(DIRECT_TOTALS):
                counts = [*counts, *(0,) * (len(DIRECT_TOTALS) - len(counts))]
            errors = self.direct[device].errors if device in self.direct else {}
        elif isinstance(report, dict):
            counts = [report.get(k) for k in DIRECT_TOTALS]
            e = report.get("errors")
            errors = {str(k)[:64]: n for k, n in e.items() if type(n) is int and n >= 0} if isinstance(e, dict) else {}
        else:
            return
        if len(counts) == len(DIRECT_TOTALS) and all(type(v) is int and v >= 0 for v in counts):
            self.direct[device] = DirectCounts(*counts, errors=errors)  # (a new record: readers see one report whole)

    def by_path(self) -> dict[str, PathTotals]:
        """Per device: its totals so far by path, and their sum (read from any thread: snapshots of the loop's
        dictionaries)."""
        devices, direct = dict(list(self.devices.items())), dict(list(self.direct.items()))
        return {d: PathTotals.of(devices.get(d), direct.get(d)) for d in devices.keys() | direct.keys()}

    def plan_totals(self) -> tuple[int, int]:
        """Batches replayed by plan number and batches that sent their structure, routed here and sent direct."""
        direct = list(self.direct.values())
        return (self.plan_hits + sum(d.plan_hits for d in direct),
                self.plan_misses + sum(d.plan_misses for d in direct))

    def error_totals(self) -> Counter:
        """Errors reported to clients by code, by the dispatcher and on direct channels (as last reported)."""
        errors = Counter(self.errors)
        for d in list(self.direct.values()):
            errors.update(d.errors)
        return errors

    def _totals(self) -> dict[str, tuple[int, int, int]]:
        """Per device: batches, ops and bytes so far, routed here and sent direct."""
        return {d: (t.both.batches, t.both.ops, t.both.bytes_in + t.both.bytes_out) for d, t in self.by_path().items()}

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
        # routed by the dispatcher and sent on direct channels (as each worker last reported it), added in one place
        totals = tel.by_path()
        names = sorted(totals)
        for name, attr, doc in (
            ("batches", "batches", "Batches run on a device's worker (routed by the dispatcher or sent on a direct "
                                   "channel)"),
            ("ops", "ops", "Ops (graph nodes) sent to a device's worker"),
        ):
            c = CounterMetricFamily(f"tensorwire_{name}", doc, labels=["device"])
            for dev in names:
                c.add_metric([dev], getattr(totals[dev].both, attr))
            yield c
        c = CounterMetricFamily(
            "tensorwire_bytes",
            "Tensor bytes to a device (in: uploads) and back (out: fetched results), on either path",
            labels=["device", "direction"],
        )
        for dev in names:
            c.add_metric([dev, "in"], totals[dev].both.bytes_in)
            c.add_metric([dev, "out"], totals[dev].both.bytes_out)
        yield c
        c = CounterMetricFamily(
            "tensorwire_plan_cache",
            "Batches by plan-cache outcome: replayed by number (hit) or sent with their structure (miss)",
            labels=["result"],
        )
        hits, misses = tel.plan_totals()
        c.add_metric(["hit"], hits)
        c.add_metric(["miss"], misses)
        yield c
        c = CounterMetricFamily("tensorwire_errors", "Errors reported to clients, by error code", labels=["code"])
        for code, n in tel.error_totals().items():
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
