"""Where the dashboard's figures come from: the dispatcher's ``stats`` answer, as ``tensorwire status`` reads it
(``Session.cluster_status`` over an admin session), polled every ``interval`` seconds on a thread of its own, plus
the hub's health (``tensorwire.status.hub_health``) and, when its metrics endpoint is given, its download counters.

Each poll is kept as a :class:`Snapshot`; the source also keeps what one answer alone does not hold: the task stream
(every worker reports its last batches, numbered, with their ages; the source places them on its own clock and keeps
them for ``window_s``) and a short history of each device's memory and throughput for the charts.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.request
from collections import deque
from dataclasses import dataclass, field

from tensorwire.protocol.metrics import prometheus
from tensorwire.session import Session
from tensorwire.status import hub_health

log = logging.getLogger("tensorwire.dashboard")

#: seconds of task stream and history the dashboard keeps
WINDOW_S = 60.0
#: the hub's download route (hub/metrics.py labels requests by route class)
HUB_DOWNLOAD_ROUTE = "resolve"


@dataclass
class Task:
    """One batch a worker ran: its number there, session (hex), start (wall clock, the dashboard's), seconds and
    steps."""

    device: str
    n: int
    session: str
    start: float
    dur: float
    steps: int


@dataclass
class Snapshot:
    """One poll: the ``stats`` answer (``status``), when it came, and the source's history up to then."""

    status: dict
    at: float
    tasks: list[Task] = field(default_factory=list)
    history: list[tuple[float, dict]] = field(default_factory=list)  # (at, {device: figures}) oldest first
    hub: dict | None = None
    error: str | None = None
    colors: dict[str, int] = field(default_factory=dict)  # session -> its order of first sight (its colour)


class TaskStream:
    """The batches workers reported, each once (by device and number), placed on this clock, for ``window_s``."""

    def __init__(self, window_s: float = WINDOW_S):
        self.window_s = window_s
        self.tasks: deque[Task] = deque()
        self.last: dict[str, int] = {}  # device -> highest batch number seen

    def add(self, device: str, recent: list, at: float) -> None:
        """Take a worker's ``recent`` list (``[number, session, started s ago, seconds, steps]``) received at
        ``at``. A number lower than the last seen means the worker restarted: its count starts again."""
        rows = [r for r in recent if isinstance(r, list) and len(r) == 5 and type(r[0]) is int]
        if rows and max(r[0] for r in rows) < self.last.get(device, -1):
            self.last[device] = -1
        seen = self.last.get(device, -1)
        for n, sid, ago, dur, steps in sorted(rows):
            if n > seen:
                self.tasks.append(Task(device, n, str(sid), at - float(ago), float(dur), int(steps or 0)))
                seen = n
        self.last[device] = seen

    def prune(self, now: float) -> None:
        while self.tasks and self.tasks[0].start + self.tasks[0].dur < now - self.window_s:
            self.tasks.popleft()


def hub_downloads(metrics_url: str, timeout: float = 2.0) -> dict:
    """The hub's download counters from its Prometheus endpoint: ``{"requests", "bytes"}`` of the download route
    (requests answered 2xx; bytes of every answer there)."""
    with urllib.request.urlopen(metrics_url, timeout=timeout) as r:  # noqa: S310 - the cluster's hub
        text = r.read(1 << 22).decode()
    out = {"requests": 0.0, "bytes": 0.0}
    for fam in prometheus().parser.text_string_to_metric_families(text):
        for s in fam.samples:
            if s.labels.get("route") != HUB_DOWNLOAD_ROUTE:
                continue
            if s.name == "tensorwire_hub_requests_total" and str(s.labels.get("status", "")).startswith("2"):
                out["requests"] += s.value
            elif s.name == "tensorwire_hub_bytes_sent_total":
                out["bytes"] += s.value
    return out


class ClusterSource:
    """Polls the cluster as an admin session and keeps the latest :class:`Snapshot` (thread-safe to read)."""

    def __init__(self, address: str, admin_token: str, *, keys: str | None = None, interval: float = 1.0,
                 hub_metrics_url: str | None = None, window_s: float = WINDOW_S, timeout: float = 5.0):
        self.address = address
        self.interval = interval
        self.hub_metrics_url = hub_metrics_url
        self.window_s = window_s
        self.stream = TaskStream(window_s)
        self.history: deque = deque()
        self._hub_prev: tuple[float, dict] | None = None
        self._batches: dict[str, tuple[float, int]] = {}  # device -> (when, batches its worker had run)
        self._colors: dict[str, int] = {}  # session -> order of first sight: neighbours get distinct colours
        self._hub_pulls: deque = deque(maxlen=64)  # (at, downloads, bytes) of polls that saw downloads
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._snapshot: Snapshot | None = None
        self._ready = threading.Event()
        self.session = Session(address, admin_token, timeout=timeout, keys=keys)
        self._thread = threading.Thread(target=self._run, name="tensorwire-dashboard-source", daemon=True)

    def start(self) -> ClusterSource:
        self._thread.start()
        return self

    def wait_ready(self, timeout: float) -> bool:
        """Whether the first poll came within ``timeout`` seconds."""
        return self._ready.wait(timeout)

    def snapshot(self) -> Snapshot | None:
        with self._lock:
            return self._snapshot

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
        self.session.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                self.poll()
            except Exception as e:  # noqa: BLE001 - the page says what went wrong; the next poll tries again
                log.warning("polling %s failed: %s", self.address, e)
                with self._lock:
                    old = self._snapshot
                    self._snapshot = Snapshot(old.status if old else {}, time.time(), list(self.stream.tasks),
                                              list(self.history), old.hub if old else None,
                                              f"{type(e).__name__}: {e}")
                self._ready.set()
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - t0)))

    def poll(self) -> Snapshot:
        """Ask the dispatcher once (and the hub), fold the answer into the history, and keep it as the latest."""
        st = self.session.cluster_status()
        now = time.time()
        hub = hub_health(st.get("hub_url"))
        if hub is not None:
            hub.update(self._hub_figures(now))
        figures = {}
        for d, ld in (st.get("load") or {}).items():
            self.stream.add(d, ld.get("recent") or [], now)
            mem = ld.get("memory") or {}
            figures[d] = {"used": ld.get("used_bytes") or 0, "allocated": mem.get("allocated_bytes"),
                          "reserved": mem.get("reserved_bytes"), "batches_per_s": self._rate(d, ld, now),
                          "compiles": ld.get("compiles") or 0, "queued": ld.get("queued") or 0}
        self.stream.prune(now)
        for sid in [*(st.get("sessions") or []), *(t.session for t in self.stream.tasks)]:
            self._colors.setdefault(sid, len(self._colors))
        self.history.append((now, figures))
        while self.history and self.history[0][0] < now - self.window_s:
            self.history.popleft()
        snap = Snapshot(st, now, list(self.stream.tasks), list(self.history), hub, colors=dict(self._colors))
        with self._lock:
            self._snapshot = snap
        self._ready.set()
        return snap

    def _rate(self, device: str, ld: dict, now: float) -> float:
        """Batches per second the device's worker ran since the last poll, by either path (its own count: the
        dispatcher's rate misses what clients send on direct channels)."""
        n = ld.get("batches")
        if type(n) is not int:
            return float(ld.get("batches_per_s") or 0.0)
        prev = self._batches.get(device)
        self._batches[device] = (now, n)
        if prev is None or n < prev[1]:  # (the first poll, or a restarted worker)
            return 0.0
        return (n - prev[1]) / max(now - prev[0], 1e-3)

    def _hub_figures(self, now: float) -> dict:
        """Downloads per second and bytes per second since the last poll, and the recent polls that saw downloads
        (``pulls``), from the hub's metrics; ``{"metrics": reason}`` where they are not available."""
        if not self.hub_metrics_url:
            return {"metrics": "not served (start the hub with --metrics, and give the dashboard --hub-metrics)"}
        try:
            cur = hub_downloads(self.hub_metrics_url)
        except (OSError, ValueError) as e:
            return {"metrics": f"not reachable: {e}"}
        out: dict = {"metrics": "ok", "downloads": cur["requests"], "bytes": cur["bytes"]}
        if self._hub_prev is not None:
            t, prev = self._hub_prev
            dn, db = cur["requests"] - prev["requests"], cur["bytes"] - prev["bytes"]
            if dn > 0:
                self._hub_pulls.append((now, dn, db))
            dt = max(now - t, 1e-3)
            out.update(downloads_per_s=max(dn, 0) / dt, bytes_per_s=max(db, 0) / dt)
        self._hub_prev = (now, cur)
        out["pulls"] = [{"at": a, "downloads": n, "bytes": b} for a, n, b in self._hub_pulls]
        return out
