"""``tw.profiler``: where the time goes, across the client, the dispatcher, the workers and the autograd service.

Shaped like ``torch.profiler``::

    with tw.profiler.profile() as prof:
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=10))
    prof.export_chrome_trace("trace.json")      # Perfetto / chrome://tracing: a track per process

What is recorded while the profile is open (every span in monotonic nanoseconds of the process that took it):

* client: each recorded op (``record``: shape inference and bookkeeping, named by the op), each upload
  (``transfer::upload``), each batch shipped (``client::ship``: building and sending it) and, for a batch that is
  answered (a fetch or a sync), the whole round trip (``client::batch``); requests to named services
  (``client::autograd.backward``); and ``tw.profiler.record_function`` ranges of your own.
* dispatcher: ``dispatcher::route`` (validating and splitting a batch, sending the fragments) and, for answered
  batches, ``dispatcher::batch`` from its arrival to the answer.
* each worker: ``worker::batch`` (a batch from the moment it starts running to its answer), ``worker::compile`` (a
  new plan), one span per kernel named by its op (a fused runner is one ``fused kernels`` span), and transfers
  (``transfer::send`` to another device, ``transfer::fetch`` of the values the client asked for).
* the autograd service: the request it served (``autograd::backward``).

Batches carry a number (``args["batch"]`` on every span) so one batch can be followed from process to process.
While a profile is open each batch header carries ``prof`` (that number); the dispatcher and the workers keep the
session's spans and hand them over on ``profile_collect``, which the profile sends when it closes, after a
synchronize. Clocks: each process's offset from the client's clock is estimated from a request/reply round trip,
NTP style (``offset = ((t1 - t0) + (t2 - t3)) / 2``, error at most half the round trip less the far side's own
time), composed through the dispatcher for the workers; ``prof.clock_offsets`` lists them.

Off, the profiler costs nothing per op: it swaps timed versions of the session's recording methods in on the
session instance while it is open (an instance attribute shadows the method), and the only check left on the
normal path is one ``is not None`` per shipped batch (see ``benchmarks/observability.py``).
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field

from .context import current_session

__all__ = ["profile", "record_function", "FunctionEvent", "FunctionEventAvg", "EventList"]

_clock = time.monotonic_ns
#: spans the client keeps per profile (the rest are counted in ``prof.dropped``)
MAX_CLIENT_SPANS = 1 << 20
_DEVICE_CATS = ("kernel",)  # spans that count as device time in the table


@dataclass
class FunctionEvent:
    """One span: ``name``, its category, the process it ran in, start and duration in microseconds on the client's
    clock (offsets applied), ``self_us`` (its time less its children's in the same process) and ``args``."""

    name: str
    cat: str
    process: str
    ts_us: float
    dur_us: float
    args: dict = field(default_factory=dict)
    self_us: float = 0.0

    @property
    def is_device(self) -> bool:
        """A kernel span (device time in the table), not host time."""
        return self.cat in _DEVICE_CATS

    @property
    def end_us(self) -> float:
        return self.ts_us + self.dur_us


@dataclass
class FunctionEventAvg:
    """The events of one key added up (``key_averages``); times in microseconds."""

    key: str
    count: int = 0
    cpu_time_total: float = 0.0
    self_cpu_time_total: float = 0.0
    device_time_total: float = 0.0
    self_device_time_total: float = 0.0
    processes: set = field(default_factory=set)

    @property
    def cpu_time(self) -> float:
        """Average host time per call."""
        return self.cpu_time_total / self.count if self.count else 0.0

    @property
    def device_time(self) -> float:
        """Average device (kernel) time per call."""
        return self.device_time_total / self.count if self.count else 0.0

    # torch's names, for code written against torch.profiler
    cuda_time_total = property(lambda self: self.device_time_total)
    self_cuda_time_total = property(lambda self: self.self_device_time_total)


_SORT_KEYS = {
    "cpu_time_total": "cpu_time_total",
    "self_cpu_time_total": "self_cpu_time_total",
    "cpu_time": "cpu_time",
    "device_time_total": "device_time_total",
    "self_device_time_total": "self_device_time_total",
    "device_time": "device_time",
    "cuda_time_total": "device_time_total",
    "self_cuda_time_total": "self_device_time_total",
    "cuda_time": "device_time",
    "count": "count",
}


class EventList(list):
    """A list of :class:`FunctionEventAvg` (from ``key_averages``) that prints as torch's table."""

    def table(self, sort_by: str | None = None, row_limit: int = 100, max_name_column_width: int = 55) -> str:
        """The table ``torch.profiler`` prints: one row per key, host (CPU) and device (kernel) time, calls.
        ``sort_by``: ``cpu_time_total``, ``self_cpu_time_total``, ``cpu_time``, ``device_time_total``,
        ``self_device_time_total``, ``device_time`` (``cuda_*`` are aliases), ``count``; descending."""
        rows = list(self)
        if sort_by is not None:
            attr = _SORT_KEYS.get(sort_by)
            if attr is None:
                raise ValueError(f"sort_by={sort_by!r}: use one of {', '.join(_SORT_KEYS)}")
            rows.sort(key=lambda r: getattr(r, attr), reverse=True)
        if row_limit is not None and row_limit >= 0:
            rows = rows[:row_limit]
        self_cpu = sum(r.self_cpu_time_total for r in self) or 1.0
        self_dev = sum(r.self_device_time_total for r in self) or 1.0
        w = max([len("Name")] + [min(len(r.key), max_name_column_width) for r in rows])
        cols = [
            "Self CPU %",
            "Self CPU",
            "CPU total %",
            "CPU total",
            "CPU time avg",
            "Self Device",
            "Self Device %",
            "Device total",
            "Device time avg",
            "# of Calls",
        ]
        head = f"{'Name':<{w}}  " + "  ".join(f"{c:>15}" for c in cols)
        rule = "-" * len(head)
        lines = [rule, head, rule]
        for r in rows:
            vals = [
                _pct(r.self_cpu_time_total, self_cpu),
                _us(r.self_cpu_time_total),
                _pct(r.cpu_time_total, self_cpu),
                _us(r.cpu_time_total),
                _us(r.cpu_time),
                _us(r.self_device_time_total),
                _pct(r.self_device_time_total, self_dev),
                _us(r.device_time_total),
                _us(r.device_time),
                str(r.count),
            ]
            lines.append(f"{r.key[:w]:<{w}}  " + "  ".join(f"{v:>15}" for v in vals))
        lines.append(rule)
        lines.append(f"Self CPU time total: {_us(sum(r.self_cpu_time_total for r in self))}")
        lines.append(f"Self Device time total: {_us(sum(r.self_device_time_total for r in self))}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _us(v: float) -> str:
    if v >= 1e6:
        return f"{v / 1e6:.3f}s"
    if v >= 1e3:
        return f"{v / 1e3:.3f}ms"
    return f"{v:.3f}us"


def _pct(v: float, total: float) -> str:
    return f"{100.0 * v / total:.2f}%"


class record_function:  # noqa: N801
    """``with tw.profiler.record_function("my block"):`` marks a range of your own in the client's track (as
    ``torch.profiler.record_function``); nothing is recorded when no profile is open on the current session."""

    def __init__(self, name: str):
        self.name = name
        self._prof = None
        self._t0 = 0

    def __enter__(self):
        self._prof = getattr(current_session(), "_prof", None)
        self._t0 = _clock()
        return self

    def __exit__(self, *exc):
        if self._prof is not None:
            self._prof._span(self.name, "user", self._t0, _clock() - self._t0, None)
        return False


class profile:  # noqa: N801
    """Profile everything the session does inside the ``with`` block, on every process it reaches.

    ``session``: the session to profile (default: the current one). ``record_shapes``: the client's op spans carry
    their input shapes. On exit the profile waits for the session's work (a synchronize: a deferred error raises
    there, after the spans are collected) and gathers the spans of the dispatcher, the workers and the autograd
    service. A session profiles one profile at a time.
    """

    def __init__(self, *, session=None, record_shapes: bool = False):
        self._session = session
        self.record_shapes = record_shapes
        self.session = None
        self._spans: list = []  # client spans: (name, cat, start ns, duration ns, args)
        self._remote: list = []  # (process name, pid, offset ns, rtt ns, spans)
        self._services: dict = {}  # service name -> (pid, [(offset ns, rtt ns)], spans)
        self._waiting: dict = {}  # request number q -> (batch number, start ns)
        self._batches = 0
        self._last_batch = None
        self.dropped = 0  # spans not kept (past the bounds), every process together
        self.clock_offsets: dict[str, dict] = {}  # process -> {"offset_us", "rtt_us"} (its clock minus the client's)
        self._events: list[FunctionEvent] | None = None
        self._t_start = 0
        self._saved: dict = {}

    # -- the session's timed methods (instance attributes while the profile is open) -------------------------
    def __enter__(self):
        s = self._session or current_session()
        if getattr(s, "_prof", None) is not None:
            raise RuntimeError("this session is already being profiled")
        self.session = s
        self._t_start = _clock()
        record, const, send_batch, wait, service_request = (
            s.record,
            s.const,
            s._send_batch,
            s._wait,
            s.service_request,
        )
        shapes = self.record_shapes

        def timed_record(op, inputs, attrs, device, *rest, **kw):  # (record's own arguments, positional or not)
            t0 = _clock()
            out = record(op, inputs, attrs, device, *rest, **kw)
            args = {"device": device}
            if shapes:
                args["input_shapes"] = [list(t.shape) for t in inputs]
            self._span(op, "record", t0, _clock() - t0, args)
            return out

        def timed_const(array, device, *rest, **kw):
            t0 = _clock()
            out = const(array, device, *rest, **kw)
            self._span("transfer::upload", "transfer", t0, _clock() - t0, {"device": device, "bytes": array.nbytes})
            return out

        def timed_send_batch(pending, fetch, sync, release, **kw):  # (its keywords passed on as they come)
            t0 = _clock()
            q = send_batch(pending, fetch, sync, release, **kw)
            self._span(
                "client::ship",
                "client",
                t0,
                _clock() - t0,
                {"batch": self._last_batch, "nodes": len(pending), "fetch": len(fetch), "sync": bool(sync)},
            )
            if q is not None:
                self._waiting[q] = (self._last_batch, t0)
            return q

        def timed_wait(q, *rest, **kw):
            out = wait(q, *rest, **kw)
            started = self._waiting.pop(q, None)
            if started is not None:
                self._span("client::batch", "client", started[1], _clock() - started[1], {"batch": started[0]})
            return out

        def timed_service_request(service, header, frames=(), timeout=None):
            t0 = _clock()
            h, rframes = service_request(service, {**header, "prof": 1}, frames, timeout)
            t3 = _clock()
            name = f"{service}.{header.get('op', 'request')}"
            self._span(f"client::{name}", "client", t0, t3 - t0, {"service": service})
            self._service_spans(service, t0, t3, h.get("prof"))
            return h, rframes

        self._saved = {
            "record": timed_record,
            "const": timed_const,
            "_send_batch": timed_send_batch,
            "_wait": timed_wait,
            "service_request": timed_service_request,
        }
        for k, v in self._saved.items():
            setattr(s, k, v)
        s._prof = self
        return self

    def __exit__(self, exc_type, exc, tb):
        s = self.session
        sync_error = None
        try:
            if not s.closed and exc_type is None:
                try:
                    s.synchronize()  # every batch of the profile has run: its spans are there to collect
                except Exception as e:  # raised after the spans are collected
                    sync_error = e
        finally:
            for k in self._saved:
                s.__dict__.pop(k, None)
            s._prof = None
        if not s.closed:
            self._collect()
        if sync_error is not None:
            raise sync_error
        return False

    def next_batch(self) -> int:
        """The number of the batch being shipped now (called by the session for the header's ``prof``)."""
        self._batches += 1
        self._last_batch = self._batches
        return self._batches

    def _span(self, name, cat, t0, dur, args) -> None:
        if len(self._spans) < MAX_CLIENT_SPANS:
            self._spans.append((name, cat, t0, dur, args))
        else:
            self.dropped += 1

    def _service_spans(self, service: str, t0: int, t3: int, info) -> None:
        """A named service's spans from its reply's ``prof``, with this round trip as an offset sample."""
        if not isinstance(info, dict) or type(info.get("t_recv")) is not int or type(info.get("t_send")) is not int:
            return
        t1, t2 = info["t_recv"], info["t_send"]
        pid, samples, spans = self._services.setdefault(service, (info.get("pid"), [], []))
        samples.append((((t1 - t0) + (t2 - t3)) // 2, (t3 - t0) - (t2 - t1)))
        if isinstance(info.get("spans"), list):
            spans.extend(info["spans"])

    def _collect(self) -> None:
        s = self.session
        with s._lock:
            s._sync_direct()  # (what went on channels has run, so its spans are there)
            t0 = _clock()
            h, _ = s._request({"t": "profile_collect", "devices": sorted(s._plane.used)})
            t3 = _clock()
        d_off = ((h["t_recv"] - t0) + (h["t_send"] - t3)) // 2  # the dispatcher's clock minus ours
        d_rtt = (t3 - t0) - (h["t_send"] - h["t_recv"])
        for p in h.get("processes") or ():
            # a worker's offset is composed through the dispatcher's: (worker - dispatcher) + (dispatcher - client),
            # and so are the bounds of their errors
            off = int(p.get("offset_ns") or 0) + d_off
            rtt = int(p.get("rtt_ns") or 0) + d_rtt
            self.dropped += int(p.get("dropped") or 0)
            self._remote.append((str(p.get("name")), p.get("pid"), off, rtt, p.get("spans") or []))
        for service, (pid, samples, spans) in self._services.items():
            off, rtt = min(samples, key=lambda x: x[1])  # the tightest round trip bounds the error best
            self._remote.append((service, pid, off, rtt, spans))

    # -- results ---------------------------------------------------------------------------------------------
    def events(self) -> list[FunctionEvent]:
        """Every span of every process, on the client's clock (microseconds since the profile began)."""
        if self._events is None:
            self._events = self._build_events()
        return self._events

    def _build_events(self) -> list[FunctionEvent]:
        base = self._t_start
        out: list[FunctionEvent] = []
        procs = [("client", os.getpid(), 0, 0, self._spans)] + self._remote
        self.clock_offsets = {
            name: {"offset_us": off / 1e3, "rtt_us": rtt / 1e3, "pid": pid} for name, pid, off, rtt, _ in procs
        }
        for name, _pid, off, _rtt, spans in procs:
            evs = []
            for sp in spans:
                if not (
                    isinstance(sp, (list, tuple))
                    and len(sp) == 5
                    and isinstance(sp[0], str)
                    and type(sp[2]) is int
                    and type(sp[3]) is int
                ):
                    continue
                args = sp[4] if isinstance(sp[4], dict) else {}
                evs.append(FunctionEvent(sp[0], str(sp[1]), name, (sp[2] - off - base) / 1e3, sp[3] / 1e3, args))
            _self_times(evs)
            out.extend(evs)
        out.sort(key=lambda e: (e.ts_us, -e.dur_us))
        return out

    def key_averages(self) -> EventList:
        """The events added up by name (host and device time, self time, calls), as ``torch.profiler``'s."""
        avgs: dict[str, FunctionEventAvg] = {}
        calls: dict[str, dict] = defaultdict(lambda: defaultdict(int))
        for e in self.events():
            a = avgs.get(e.name)
            if a is None:
                a = avgs[e.name] = FunctionEventAvg(e.name)
            a.processes.add(e.process)
            if e.is_device:
                a.device_time_total += e.dur_us
                a.self_device_time_total += e.self_us
            else:
                a.cpu_time_total += e.dur_us
                a.self_cpu_time_total += e.self_us
            calls[e.name][e.cat] += 1
        for k, a in avgs.items():
            # an op is recorded once on the client and may run as several steps: its calls are the client's
            c = calls[k]
            a.count = c["record"] if c.get("record") else max(c.values())
        return EventList(avgs.values())

    def export_chrome_trace(self, path: str | os.PathLike) -> None:
        """Write the trace as Chrome trace-event JSON (Perfetto, ``chrome://tracing``): one track per process, spans
        as complete events in microseconds on the client's clock, and a flow arrow from each batch's shipping to
        the worker that ran it."""
        events = self.events()
        pids: dict[str, int] = {}
        trace: list[dict] = []
        for name, pid, _off, _rtt, _ in [("client", os.getpid(), 0, 0, None)] + self._remote:
            p = pids[name] = len(pids) + 1
            label = f"{name} (pid {pid})" if pid is not None else name
            trace.append({"name": "process_name", "ph": "M", "pid": p, "tid": 1, "args": {"name": label}})
            trace.append({"name": "process_sort_index", "ph": "M", "pid": p, "tid": 1, "args": {"sort_index": p}})
            trace.append({"name": "thread_name", "ph": "M", "pid": p, "tid": 1, "args": {"name": name}})
        # each batch's shipping, found before the pairing: a worker's span may sort before the shipping that caused
        # it when the clock offset's estimate errs by more than the gap between them (under load, ~1 ms)
        ships = {e.args["batch"]: e for e in events if e.name == "client::ship" and e.args.get("batch") is not None}
        for e in events:
            trace.append(
                {
                    "name": e.name,
                    "cat": e.cat,
                    "ph": "X",
                    "ts": round(e.ts_us, 3),
                    "dur": round(e.dur_us, 3),
                    "pid": pids[e.process],
                    "tid": 1,
                    "args": _jsonable(e.args),
                }
            )
            b = e.args.get("batch")
            if b is not None and e.name == "worker::batch" and b in ships:
                src = ships[b]
                fid = f"{b}-{e.process}"
                trace.append(
                    {
                        "name": "batch",
                        "cat": "flow",
                        "ph": "s",
                        "id": fid,
                        "pid": pids[src.process],
                        "tid": 1,
                        "ts": round(src.ts_us, 3),
                    }
                )
                trace.append(
                    {
                        "name": "batch",
                        "cat": "flow",
                        "ph": "f",
                        "bp": "e",
                        "id": fid,
                        "pid": pids[e.process],
                        "tid": 1,
                        "ts": round(e.ts_us, 3),
                    }
                )
        with open(path, "w") as f:
            json.dump(
                {
                    "traceEvents": trace,
                    "displayTimeUnit": "ms",
                    "otherData": {"clock_offsets": self.clock_offsets, "dropped_spans": self.dropped},
                },
                f,
            )


def _self_times(evs: list[FunctionEvent]) -> None:
    """Each event's self time: its duration less its direct children's (events of one process nest in time)."""
    evs.sort(key=lambda e: (e.ts_us, -e.dur_us))
    stack: list[FunctionEvent] = []
    for e in evs:
        e.self_us = e.dur_us
        while stack and stack[-1].end_us <= e.ts_us:
            stack.pop()
        if stack and e.end_us <= stack[-1].end_us + 1e-3:
            stack[-1].self_us -= e.dur_us
        stack.append(e)
    for e in evs:
        e.self_us = max(0.0, e.self_us)


def _jsonable(args: dict) -> dict:
    return {
        str(k): (v if isinstance(v, (int, float, str, bool, type(None), list)) else str(v)) for k, v in args.items()
    }
