"""Download progress of ``hub_tensor`` loads: the message, its checks and its rate (docs/observability.md#progress).

A client that wants progress for a load puts a ``progress`` id (a positive int of its choosing) in the load's
``hub_tensor`` attributes. The worker that downloads the file then reports, for that session only::

    worker -> dispatcher  {"t": "progress", "s": <session id>, "id", "file", "done", "total", "end"?}
    dispatcher -> client  {"t": "progress", "id", "file", "done", "total", "end"?, "device"}

``file`` names the download (``repo/path@commit``), ``done``/``total`` are bytes, ``end`` (true) marks a download's
last report (``done < total`` then: it failed). The client's message has no ``q``, so a client that does not know it
ignores it. Reports are bounded (:class:`Reporter`): a download is reported only once it matters (``total`` of at
least ``TENSORWIRE_PROGRESS_MIN_BYTES``, default 8 MiB, or running for ``AFTER_S``), at most once per
``INTERVAL_S``, and its end always. Loads without an id, and files served from the worker's verified cache, send
nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

#: client: ``0`` never draws bars (it wins over ``progress=True``, as ``HF_HUB_DISABLE_PROGRESS_BARS`` does), ``1``
#: draws them even when stderr is not a terminal; unset: bars when stderr is a terminal
ENV = "TENSORWIRE_PROGRESS"
#: workers: a download at least this large is reported from its start
MIN_BYTES_ENV = "TENSORWIRE_PROGRESS_MIN_BYTES"
MIN_BYTES = 8 << 20
AFTER_S = 1.0  # a smaller download is reported once it has run this long
INTERVAL_S = 0.25  # at most one report per download per interval (its end is always reported)
MAX_ID = (1 << 53) - 1
MAX_FILE = 1024  # characters of a file name passed on
MAX_BYTES = 1 << 62


def min_bytes() -> int:
    """``$TENSORWIRE_PROGRESS_MIN_BYTES`` (bytes, ``>= 0``), else 8 MiB."""
    try:
        v = int(os.environ.get(MIN_BYTES_ENV) or MIN_BYTES)
    except ValueError:
        return MIN_BYTES
    return v if v >= 0 else MIN_BYTES


def valid_id(v: object) -> bool:
    """A progress id: a positive int (not a bool) that fits a double."""
    return type(v) is int and 0 < v <= MAX_ID


def check(h: dict) -> dict | None:
    """The report fields of a progress message (``id``, ``file``, ``done``, ``total`` and ``end`` when true), or None
    when any is malformed: the receiver drops the message."""
    pid, file, done, total, end = h.get("id"), h.get("file"), h.get("done"), h.get("total"), h.get("end", False)
    if not valid_id(pid) or type(file) is not str or not 0 < len(file) <= MAX_FILE or type(end) is not bool:
        return None
    if type(done) is not int or type(total) is not int or not 0 <= done <= total <= MAX_BYTES:
        return None
    out = {"id": pid, "file": file, "done": done, "total": total}
    if end:
        out["end"] = True
    return out


class Reporter:
    """Turns a download's ``(done, total)`` callbacks into at most one report per ``INTERVAL_S`` (worker side).

    ``emit(fields)`` gets ``{"id", "file", "done", "total"[, "end"]}``; nothing is emitted before the download
    matters (see the module's doc), and only :meth:`finish` emits the end. ``emit`` must not raise."""

    __slots__ = ("emit", "pid", "file", "min_bytes", "t0", "last", "started", "done", "total", "clock")

    def __init__(
        self,
        emit: Callable[[dict], None],
        pid: int,
        file: str,
        *,
        min_bytes_: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.emit, self.pid, self.file = emit, pid, file[:MAX_FILE]
        self.min_bytes = min_bytes() if min_bytes_ is None else min_bytes_
        self.clock = clock
        self.t0 = clock()
        self.last = 0.0
        self.started = False
        self.done = self.total = 0

    def update(self, done: int, total: int) -> None:
        """``done`` of ``total`` bytes are in (called per chunk received)."""
        self.done, self.total = done, total
        if done >= total and self.started:
            return  # the end is reported by finish(), once the bytes are verified
        now = self.clock()
        if not self.started:
            if total < self.min_bytes and now - self.t0 < AFTER_S:
                return
            self.started = True
        elif now - self.last < INTERVAL_S:
            return
        self.last = now
        self._send(False)

    def finish(self, ok: bool) -> None:
        """The download ended (``ok``: every byte arrived and was verified): its last report, if it was reported."""
        if self.started:
            self._send(True, self.total if ok else self.done)

    def _send(self, end: bool, done: int | None = None) -> None:
        fields = {"id": self.pid, "file": self.file, "done": self.done if done is None else done, "total": self.total}
        if end:
            fields["end"] = True
        self.emit(fields)
