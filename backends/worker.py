"""The device worker: one process per device, a DEALER to the dispatcher's service socket.

The main thread owns the socket and all state (per-session buffers, cached plans, parked work): it
decodes messages and runs fragments in each session's order, round-robin across sessions; a session
waiting for a transfer from another device is parked while the others go on. Small batches run on the
thread that owns the socket, which keeps a round trip free of thread hand-offs; larger ones, and those that
build a compiled runner first (gcc, bounded by :mod:`.codegen.compiler`), run on a small pool (:mod:`.jobs`), so
one session's long op or slow compile does not hold the others, and can be cancelled between steps. Each
session's memory on the device is bounded (:mod:`.quota`), and so are the compiled plans (:mod:`.plancache`).
A second thread with a socket of its own only sends heartbeats, so a long kernel does not make the worker look
dead. After work the loop busy-waits briefly for the next message before it blocks (:mod:`.idle_spin`).
"""

from __future__ import annotations

import argparse
import collections
import contextvars
import ctypes
import functools
import itertools
import logging
import os
import platform
import sys
import threading
import time
from collections import deque
from types import NoneType

import numpy as np
import zmq

from tensorwire.dispatcher.liveness import RESTARTED_ENV, RESTARTED_INFO
from tensorwire.protocol.addresses import check_address
from tensorwire.protocol.batch_ids import check_temps, kept_nodes, out_ids
from tensorwire.protocol.credentials import service_token
from tensorwire.protocol.curve import keys_dir
from tensorwire.protocol.errors import (
    Cancelled,
    DeviceError,
    ExecutionError,
    NotFound,
    ProtocolError,
    TensorwireError,
    error_to_wire,
)
from tensorwire.protocol.graph import RECV, SEND
from tensorwire.protocol.logs import configure as configure_logging
from tensorwire.protocol.messages import DIRECT_TOTALS, WORKER, check
from tensorwire.protocol.named_service import (
    add_service_credential_args,
    drain,
    new_instance,
    refusal_error,
    register_service,
    say_goodbye,
    start_heartbeats,
)
from tensorwire.protocol.service import (
    HEARTBEAT_S,
    LIVENESS,
    SHM_DIR,
    StopEvent,
    announce_ready,
    profiled,
    stop_event_on_signals,
    tune_gc,
)
from tensorwire.protocol.shm_paths import host_id
from tensorwire.protocol.wire import INLINE_MAX, array_from_frame, as_frame, frame_nbytes, pack_header, send_parts

from . import get_backend, hot, hub_loader
from .base import Device
from .direct import ADDRESS_ENV, DirectChannel
from .executor import Fail, Kept, builds_runner, compile_plan, execute, meta_of, run_plan
from .idle_spin import IdleSpin, spin_from_env
from .jobs import OFFLOAD_WORK, CancelScope, Interrupt, Pool
from .plancache import PlanCache
from .quota import DEFAULT as QUOTA_DEFAULT
from .quota import ENV as QUOTA_ENV
from .quota import Ledger, host_memory, parse_limit, quota_error, upload_quota_error
from .shm import ShmPool

log = logging.getLogger("tensorwire.worker")


def parse_device(text: str) -> tuple[str, int]:
    """``"cpu:0"`` -> ``("cpu", 0)``; ``"cpu"`` means index 0."""
    kind, _, idx = text.partition(":")
    if not kind or (idx and not idx.isdigit()):
        raise DeviceError(f"bad device {text!r}; expected TYPE:INDEX such as cpu:0")
    return kind, int(idx or 0)


def describe_job(job) -> str:
    """A batch in a few words, for a client that waits on it: its ops (the most frequent first) and node count, or
    the plan it replays."""
    nodes = job.h.get("nodes")
    if isinstance(nodes, list) and nodes:
        counts = collections.Counter(n[0] for n in nodes if isinstance(n, list) and n and isinstance(n[0], str))
        ops = ", ".join(f"{op} x{c}" if c > 1 else op for op, c in counts.most_common(4))
        return f"a batch of {len(nodes)} nodes ({ops}{', ...' if len(counts) > 4 else ''})"
    plan = job.plan
    steps = f", {len(plan.program.steps)} steps" if plan is not None else ""
    return f"a replay of plan {job.h.get('plan')}{steps}"



def _inline_nbytes(values: list) -> int:
    """The bytes of the fetched values an answer carries in its header (``Executor._fetched``'s ``inline``)."""
    return sum(len(v[3]) for v in values if type(v[3]) is bytes)

class _Job:
    """One ``run`` message of a session, from its arrival to its answer."""

    __slots__ = ("h", "frames", "seq", "plan", "ext", "outs", "kept", "keep", "dyn", "gen", "wait", "value", "offload",
                 "pooled", "scope", "sent", "recvd", "cancelled", "ctx", "started", "spans", "answered", "route",
                 "uploads", "refused", "keeping")

    def __init__(self, h: dict, frames: list, seq: int, route: bytes | None = None):
        self.h = h
        self.route = route  # the client's routing id on the direct channel (None: it came through the dispatcher)
        self.frames = frames
        self.seq = seq  # arrival order on this worker
        self.plan = None
        self.ext: list = []
        self.outs: list | range = []  # each node's output id
        self.kept: list[int] | None = None  # the nodes that are not temporaries (None: all; protocol.batch_ids)
        self.keep: frozenset = frozenset()
        self.keeping: Kept | None = None  # what replays of its plan keeping ``keep`` share (set by _admit)
        self.dyn: dict = {}
        self.gen = None  # the interpreter, for plans with transfers or collectives
        self.ctx: contextvars.Context | None = None  # the context the interpreter runs in
        self.wait = None  # key of the transfer, collective or plan it waits for
        self.value = None  # what it waited for
        self.offload = False
        self.pooled = False  # a pool thread runs it now
        self.scope: CancelScope | None = None
        self.sent: set = set()  # transfers it sent
        self.recvd: set = set()  # transfer keys it received
        self.cancelled = False
        self.started = 0  # monotonic ns when it started running
        # the profiler is on for this batch ("prof": its batch number): its spans, handed to the session at the end
        self.spans: list | None = [] if h.get("prof") is not None else None
        self.answered = False  # its answer went out (early, see Executor._early_slots, or when it finished)
        self.uploads = 0  # bytes of its upload frames, counted on its session until it finishes
        self.refused: Exception | None = None  # its uploads would pass the session's quota: it fails with this


class _Session:
    __slots__ = ("buffers", "jobs", "running", "errors", "ledger", "cancel_before", "draining", "spans",
                 "spans_dropped", "hot_plans", "hot_slower", "uploads")

    def __init__(self, device):
        self.buffers: dict[int, object] = {}
        self.jobs: deque = deque()
        self.running: _Job | None = None
        self.errors: list[dict] = []
        self.ledger = Ledger(device)
        self.cancel_before = 0  # jobs that arrived before this sequence number are cancelled
        self.draining: _Job | None = None  # a cancelled job whose pool thread has not returned yet
        self.spans: list = []  # profiler spans of its profiled batches, until the client collects them
        self.spans_dropped = 0  # spans past MAX_SPANS, not kept
        self.hot_plans = 0  # plans compiled because they ran often (see hot.py)
        self.hot_slower = 0  # hot plans kept interpreted: their compiled plan measured slower (see hot.py)
        self.uploads = 0  # bytes of upload frames its queued and running batches hold (see Executor._hold_uploads)


class Executor:
    """Owns the device and all session state on the main thread; a pool runs the larger batches (see
    :mod:`.jobs`) and hands their outcomes back through ``completed`` and the ``wake_fd`` pipe."""

    def __init__(self, device, device_name: str, send, *, session_limit: int | None = None,
                 plan_cache: PlanCache | None = None, pool: Pool | None = None):
        self.device = device
        #: whether the device does anything to free a buffer (a numpy one lets its references go: ~75 calls a step
        #: of a small training loop saved)
        self._frees = type(device).free is not Device.free
        #: the metas of a list of buffers (a device may answer for many at once: ``metas(bufs)``)
        self._metas = getattr(device, "metas", None) or (lambda bufs: list(map(device.meta, bufs)))
        self.name = device_name
        self.send = send  # callable(header, frames) -> None
        self.limit = session_limit  # bytes a session may hold on this device (None: no limit)
        self.plans = plan_cache or PlanCache()
        self.pool = pool or Pool()
        self.sessions: dict[bytes, _Session] = {}
        self.xfers: dict = {}
        self.waiting: dict = {}  # transfer key -> session parked on it
        self.abandoned: dict = {}  # keys whose job is gone: what arrives for them is dropped (bounded)
        self.ready: deque = deque()  # sessions with runnable work
        self.stats_requests: list = []  # (q, arrival seq, answer by)
        self.colls: dict = {}  # ("coll", key) -> (shm file, output offset, shape, dtype) of pending collectives
        self.shm = ShmPool(device_name)
        self.transport = device.collective_transport()  # device-to-device collectives (NCCL), or None
        self.direct: dict = {}  # ("coll", key) -> (input buffer, attrs, step) of pending collectives over transport
        self.seq = 0
        self.pooled_seqs: set[int] = set()
        self.completed: deque = deque()  # from pool threads: ("send" | "progress" | "outcome", ...) in order
        self.progress: dict = {}  # sid -> [batches finished, the job running or None] (heartbeats report it)
        # what came on direct channels, which the dispatcher never sees: it reads these with the load (metrics)
        self.direct_counts = {"batches": 0, "ops": 0, "bytes_in": 0, "bytes_out": 0, "plan_hits": 0,
                              "plan_misses": 0, "errors": {}}
        self.batches_run = 0  # batches finished since the worker started
        self.busy_ns = 0  # ... and the time they took, from start to answer
        self.recent: deque = deque(maxlen=RECENT_BATCHES)  # (number, sid, started ns, took ns, steps): the dashboard's
        self.compiles = 0  # plans compiled since the worker started ...
        self.compile_ns = 0  # ... and the time that took
        self.channel = None  # the worker's direct channel (backends.direct), which answers its own jobs
        self.wake_fd, self._wake_w = os.pipe()
        os.set_blocking(self.wake_fd, False)
        os.set_blocking(self._wake_w, False)

    # -- message handling (main thread) -------------------------------------------------------
    def _session(self, sid) -> _Session:
        s = self.sessions.get(sid)
        if s is None:
            s = self.sessions[sid] = _Session(self.device)
        return s

    def handle(self, h: dict, frames: list, route: bytes | None = None) -> None:
        """Take one message from the dispatcher (``protocol.messages.WORKER``), or a ``run`` from a client's direct
        channel (``route``: where its answer goes), through ``WORKER_HANDLERS``. A session's jobs queue in arrival
        order whichever path they took."""
        getattr(self, WORKER_HANDLERS[h["t"]])(h, frames, route)

    def _on_run(self, h: dict, frames: list, route: bytes | None) -> None:
        sid = h["s"]
        s = self._session(sid)
        self.seq += 1
        release = h.get("release")
        if release and type(release) is not set:  # (as a direct batch's: DirectChannel.run_header)
            h["release"] = set(release)
        job = _Job(h, frames, self.seq, route)
        if frames:
            self._hold_uploads(s, job)
        s.jobs.append(job)
        if route is not None:
            c = self.direct_counts
            c["batches"] += 1
            c["bytes_in"] += sum(map(frame_nbytes, frames))
            if h.get("plan") is not None:
                c["plan_misses" if h.get("nodes") is not None else "plan_hits"] += 1
            c["ops"] += len(h.get("nodes") or ())
        if s.running is None and s.draining is None and len(s.jobs) == 1:
            self.ready.append(sid)

    def _hold_uploads(self, s: _Session, job: _Job) -> None:
        """Count the job's upload frames against its session's quota as they arrive, before the batch starts: once
        the uploads its session holds (queued and running batches) would pass the limit, the frames are let go at
        once and the batch fails with ``QuotaExceeded`` when its turn comes (``_bind_outputs``)."""
        n = sum(map(frame_nbytes, job.frames))
        if self.limit is not None and s.uploads + n > self.limit:
            job.frames = []
            job.refused = upload_quota_error(self.name, self.limit, s.uploads, n)
            return
        job.uploads = n
        s.uploads += n

    def _on_xfer(self, h: dict, frames: list, route=None) -> None:
        """A value from another device's worker (relayed, or straight from it: ``backends.direct``)."""
        key = h["x"]
        if "err" in h:  # the source's value failed (or its worker was lost): that error is this value's
            val = (Fail({**h["err"], "moved": True}) if isinstance(h["err"], dict)
                   else Fail(error_to_wire(ProtocolError("a transfer carried a malformed error"))))
        else:
            try:
                _, arr = array_from_frame([0, h["dtype"], h["shape"], 0], frames)
                val = self.device.upload(arr)
            except Exception as e:
                val = Fail(error_to_wire(e))
        self._arrived(key, val)

    def _on_plan(self, h: dict, frames: list, route=None) -> None:
        """The fragment of a plan this worker had evicted, from whoever sent the batch waiting for it."""
        err = h.get("err")
        nodes = h.get("nodes")
        self._arrived(("plan", h["s"], h["plan"]), nodes if isinstance(nodes, list) and not err else Fail(
            err if isinstance(err, dict) else error_to_wire(NotFound(f"plan {h['plan']} is not known"))))

    def _on_coll_done(self, h: dict, frames: list, route=None) -> None:
        self._collective_done(h)

    def _on_cancel(self, h: dict, frames: list, route=None) -> None:
        self._cancel(h["s"])

    def _on_drop_session(self, h: dict, frames: list, route=None) -> None:
        self._drop_session(h["s"])

    def _on_profile_collect(self, h: dict, frames: list, route=None) -> None:
        """The profiler's spans of a session, with this clock's readings for the offset."""
        t_recv = time.monotonic_ns()
        s = self.sessions.get(h["s"])
        spans, dropped = (s.spans, s.spans_dropped) if s is not None else ([], 0)
        if s is not None:
            s.spans, s.spans_dropped = [], 0
        self.send({"t": "profile", "q": h.get("q"), "pid": os.getpid(), "spans": spans, "dropped": dropped,
                   "t_recv": t_recv, "t_send": time.monotonic_ns()}, [])

    def _on_stats(self, h: dict, frames: list, route=None) -> None:
        """Answered after the work that arrived before it has run (see run_ready)."""
        self.stats_requests.append((h.get("q"), self.seq, time.monotonic() + STATS_WAIT_S))

    def _on_drop_plans(self, h: dict, frames: list, route=None) -> None:
        for p in h.get("plans") or ():
            self.plans.drop(h["s"], p)

    def _arrived(self, key, val) -> None:
        if key in self.abandoned:  # its job was cancelled or its session closed
            del self.abandoned[key]
            return
        self.xfers[key] = val
        sid = self.waiting.pop(key, None)
        if sid is not None:
            self.ready.append(sid)

    def _abandon_key(self, key) -> None:
        self.waiting.pop(key, None)
        if self.xfers.pop(key, None) is None:
            if len(self.abandoned) >= MAX_ABANDONED:
                self.abandoned.pop(next(iter(self.abandoned)))
            self.abandoned[key] = None

    def forget_sessions(self) -> None:
        """Drop every session's buffers, plans and parked work: they belonged to a dispatcher that is gone (the
        worker registered with one of a new epoch, which knows none of them and may hand their ids out again)."""
        for s in self.sessions.values():
            for b in s.buffers.values():
                if not isinstance(b, Fail):
                    self.device.free(b)
        if self.channel is not None:
            for sid in list(self.channel.lent):
                self.channel.drop(sid)
        self.sessions.clear()
        self.ready.clear()
        self.waiting.clear()
        self.xfers.clear()
        self.stats_requests.clear()
        for f, *_ in self.colls.values():
            self.shm.give_back(f)
        self.colls.clear()
        self.direct.clear()

    def load(self) -> dict:
        """What ``tensorwire status``, the metrics and the dashboard show for this device: queued and running
        batches, sessions holding state, bytes they hold and the per-session limit, the batches run so far and their
        time, the last ``RECENT_BATCHES`` batches (``recent``: ``[number, session, started s ago, seconds, steps]``,
        ages on this worker's clock so no clocks need agree), plans compiled and the plan cache's size."""
        queued = sum(len(s.jobs) + (s.running is not None) for s in self.sessions.values())
        now = time.monotonic_ns()
        recent = [[n, _sid_text(sid), (now - t0) / 1e9, took / 1e9, steps] for n, sid, t0, took, steps in self.recent]
        return {"queued": queued, "sessions": len(self.sessions), "used_bytes": int(sum(s.ledger.used for s in
                self.sessions.values())), "session_limit": self.limit, "batches": self.batches_run,
                "busy_s": self.busy_ns / 1e9, "direct": {**self.direct_counts,
                                                          "errors": dict(self.direct_counts["errors"])},
                "recent": recent, "compiles": self.compiles, "compile_s": self.compile_ns / 1e9,
                "plan_cache": {"plans": len(self.plans.lru), "bytes": self.plans.used,
                               "max_bytes": self.plans.max_bytes}}

    def direct_totals(self) -> list[int]:
        """The counts of ``DIRECT_TOTALS`` (batches, ops, bytes in and out, plan hits and misses) clients sent this
        worker on direct channels so far, for its heartbeat (the dispatcher's throughput figures and metrics add
        them to the work it routed itself: ``dispatcher/telemetry.py``)."""
        c = self.direct_counts
        return [c[k] for k in DIRECT_TOTALS]

    def busy_report(self, limit: int = 64) -> list:
        """``[[sid, batches finished, seconds the running batch has run or None, what it is or None], ...]``: what
        the heartbeat thread tells the dispatcher, so a client waiting behind long work sees it progress (and, when
        it does not, what it is stuck in). Read from the heartbeat thread: a snapshot of plain values."""
        now = time.monotonic_ns()
        out = []
        for sid, (done, job) in list(self.progress.items())[:limit]:
            if job is None:
                out.append([sid, done, None, None])
            else:
                out.append([sid, done, round((now - job.started) / 1e9, 1), describe_job(job)])
        return out

    def stats(self) -> dict:
        out = {}
        for sid, s in self.sessions.items():
            live = sum(1 for b in s.buffers.values() if not isinstance(b, Fail))
            out[sid.hex() if isinstance(sid, bytes) else str(sid)] = {
                "buffers": live, "bytes": int(s.ledger.used), "plans": self.plans.session_plans(sid),
                "plan_bytes": self.plans.session_used.get(sid, 0), "hot_plans": s.hot_plans,
                "hot_slower": s.hot_slower, "queued": len(s.jobs), "running": int(s.running is not None)}
        return out

    # -- cancelling -------------------------------------------------------------------------------
    def _cancel(self, sid) -> None:
        """Stop everything the session submitted so far: the running batch between two steps, the queued ones
        before they start. Their outputs fail with ``Cancelled``; later batches run as usual."""
        s = self.sessions.get(sid)
        if s is None:
            return
        s.cancel_before = self.seq + 1
        for job in s.jobs:
            job.cancelled = True
        job = s.running
        if job is None:
            return
        job.cancelled = True
        if job.scope is not None:
            job.scope.cancel()
        if job.plan is None:  # waiting for its plan: it settles its transfers once it has it
            return
        if job.wait is not None:
            self._abandon_key(job.wait)
            job.wait = None
        if job.gen is not None and not job.pooled:
            job.ctx.run(job.gen.close)
        if job.pooled:  # its thread stops after the kernel it is in; the session's next batch waits for that
            s.draining = job
            self.pooled_seqs.discard(job.seq)
        self._finish(sid, s, job, self._failed_outputs(job, _cancelled_err()), report=False)
        if s.draining is None:
            self.ready.append(sid)

    def _drop_session(self, sid) -> None:
        self.progress.pop(sid, None)
        if self.channel is not None:
            self.channel.forget(sid)
        s = self.sessions.pop(sid, None)
        if s is None:
            return
        job = s.running
        if job is not None:
            job.cancelled = True
            if job.scope is not None:
                job.scope.cancel()
            if job.wait is not None:
                self._abandon_key(job.wait)
            if job.gen is not None and not job.pooled:
                job.ctx.run(job.gen.close)
            self.pooled_seqs.discard(job.seq)
            self._settle(sid, job)
        for b in s.buffers.values():
            if not isinstance(b, Fail):
                self.device.free(b)
        s.buffers.clear()
        self.plans.drop_session(sid)

    # -- the direct channel's replay fast path -----------------------------------------------------
    def replay_now(self, sid: bytes, run: dict, route: bytes, frames: list | tuple = ()) -> bool:
        """Run a direct message that replays a known plan (the commonest on a direct channel: ``(x + 1).numpy()``, a
        compiled step with its ``loss.item()``, or a step's forward pass sent unanswered before its backward) at
        once, on this thread, without queueing it: what ``_on_run``, ``_advance`` and ``_prepare`` do for it, in one
        pass; an unanswered one reports its errors with the session's next answer, as a queued one does. ``run``: the
        message as ``DirectChannel.run_header`` checked it (the general path's header); ``frames``: its upload
        frames (a step's new inputs, its ``const`` nodes read them), ``REPLAY_UPLOADS_MAX`` bytes at most. Only when
        nothing else waits and nothing else is needed: the session idle and no other one runnable, no profiler, the
        plan cached here with no transfers, no hub load and no node that failed to plan, run inline (small, its
        runner built) within the session's quota (its uploads too, as ``_hold_uploads`` counts them), and the
        message well formed against it, by the checks ``_prepare`` makes (``_bind_outputs``, ``_inputs``,
        ``_check_inputs``, ``_outputs_fresh``, ``_admit``). Otherwise False, with nothing of the session's changed:
        the message takes the general path, which queues it and says what is wrong with it."""
        plan_no = run.get("plan")
        if plan_no is None or "nodes" in run or "prof" in run:
            return False
        s = self.sessions.get(sid)
        if s is None or s.running is not None or s.jobs or s.draining is not None or self.ready:
            return False
        plan = self.plans.get(sid, plan_no)
        if plan is None or plan.has_transfers or plan.reads_hub or plan.failed_nodes:
            return False
        uploads = sum(map(frame_nbytes, frames)) if frames else 0
        if uploads and (uploads > REPLAY_UPLOADS_MAX
                        or (self.limit is not None and s.uploads + uploads > self.limit)):
            return False  # (the general path refuses uploads past the quota: _hold_uploads)
        self._warm(sid, s, plan_no, plan)
        job = _Job(run, frames, 0, route)
        try:
            self._bind_outputs(job, plan)
            ext_ids = run["ext"]
            ext = list(map(s.buffers.get, ext_ids))
            kinds = set(map(type, ext))
            if NoneType in kinds or Fail in kinds:  # (a missing or failed input: the general path fails the
                return False  # outputs that depend on it)
            self._check_inputs(plan, ext, ext_ids, plan_no)
            if not self._outputs_fresh(s, job):
                return False
            job.plan, job.ext = plan, ext
            self._admit(s, job)
        except TensorwireError:  # (the general path reports it)
            return False
        if job.offload:
            return False
        # taken: from here on as the general path runs it
        self.seq = job.seq = self.seq + 1
        c = self.direct_counts
        c["batches"] += 1
        c["plan_hits"] += 1
        if uploads:  # (held until the batch finishes, as _hold_uploads holds a queued batch's)
            c["bytes_in"] += uploads
            job.uploads = uploads
            s.uploads += uploads
        if run["release"]:  # what the client let go before this batch makes room for it
            self._release_early(s, run)
        job.started = time.monotonic_ns()
        s.running = job
        p = self.progress.get(sid)
        if p is None:
            p = self.progress[sid] = [0, None]
        p[1] = job
        early = self._early_slots(job)
        answer = None if early is None else (early.values(), lambda env: self._answer(sid, job, early, env, None))
        try:
            result = run_plan(self.device, plan, ext, job.outs, job.dyn, job.frames, job.keep, None, answer)
        except Exception as e:  # an executor bug must not kill the worker
            log.exception("running a batch failed")
            s.errors.append(error_to_wire(e))
            result = {}
        self._finish(sid, s, job, result)
        return True

    # -- running -----------------------------------------------------------------------------------
    def run_ready(self) -> None:
        """Advance every session that has runnable work (each until it blocks, runs dry or is handed to the pool, or
        for ``RUN_SLICE_NS`` at most: then the worker's loop looks at its sockets before it runs more, so a hello on
        the direct channel, a cancel or a ping is not kept waiting behind a long queue of batches)."""
        until = time.monotonic_ns() + RUN_SLICE_NS
        for _ in range(len(self.ready)):
            sid = self.ready.popleft()
            s = self.sessions.get(sid)
            if s is not None:
                self._advance(sid, s, until)
        if self.stats_requests:  # after the batches that arrived before them (on the pool: STATS_WAIT_S at most)
            oldest = min(self.pooled_seqs, default=None)
            queued = None  # the oldest batch of a session the slice cut short: it runs before the answer, as before
            for sid in self.ready:
                s = self.sessions.get(sid)
                if s is not None and s.running is None and s.jobs and (queued is None or s.jobs[0].seq < queued):
                    queued = s.jobs[0].seq
            now = time.monotonic()
            keep = []
            for q, seq, deadline in self.stats_requests:
                if (queued is not None and queued <= seq) or (oldest is not None and oldest <= seq and now < deadline):
                    keep.append((q, seq, deadline))
                else:
                    self.send({"t": "stats", "q": q, "device": self.name, "sessions": self.stats(),
                               "memory": self.device.memory(), "load": self.load()}, [])
            self.stats_requests = keep

    def _safe_handle(self, h, frames):
        try:
            check(WORKER, h)
            self.handle(h, frames)
        except Exception as e:  # a malformed message never stops the worker
            log.warning("bad message %s: %s", h.get("t"), e)
            if h.get("t") == "run" and h.get("reply"):  # (the details stay in this log, not on the wire)
                self.send({"t": "done", "s": h.get("s"), "q": h.get("q"), "values": [],
                           "errors": [error_to_wire(ProtocolError("the worker rejected a malformed message"))]}, [])

    def _advance(self, sid, s: _Session, until: int) -> None:
        """Run the session's work until it blocks on a transfer, runs dry or is handed to the pool; past ``until``
        (monotonic ns), once it ran something, the rest waits for the next ``run_ready`` (the session is ready)."""
        for i in range(1 << 30):  # bounded by the session's queue
            job = s.running
            if job is None:
                if s.draining is not None or not s.jobs:
                    return
                now = time.monotonic_ns()
                if i and now > until:
                    self.ready.append(sid)
                    return
                job = s.running = s.jobs.popleft()
                job.started = now
                self.progress.setdefault(sid, [0, None])[1] = job
                if job.seq < s.cancel_before:
                    job.cancelled = True
            if job.pooled:
                return
            if job.wait is not None:
                if job.wait not in self.xfers:
                    self.waiting[job.wait] = sid
                    return
                job.value = self.xfers.pop(job.wait)
                job.recvd.add(job.wait)
                job.wait = None
            if job.plan is None and not self._prepare(sid, s, job):
                continue  # parked for its plan, or finished
            if job.cancelled:
                self._finish(sid, s, job, self._failed_outputs(job, _cancelled_err()), report=False)
                continue
            if job.offload:
                job.pooled = True
                job.scope = job.scope or CancelScope()
                self.pooled_seqs.add(job.seq)
                self.pool.submit(lambda sid=sid, job=job: self._run_pooled(sid, job))
                return
            try:
                outcome = self._compute(sid, job, None)
            except Exception as e:  # an executor bug must not kill the worker
                log.exception("running a batch failed")
                outcome = ("error", error_to_wire(e))
            self._apply(sid, s, job, outcome)

    def _prepare(self, sid, s: _Session, job: _Job) -> bool:
        """Find or compile the job's plan and admit it under the session's quota. False when the job is parked
        (for its plan, see ``need_plan``) or already finished (no plan to run, or it failed)."""
        h = job.h
        plan_no = h.get("plan")
        nodes = h.get("nodes")
        if h.get("release") and job.value is None:  # what the client let go before this batch makes room for it
            self._release_early(s, h)
        if nodes is None and plan_no is None:  # only releases, fetches or a sync
            self._finish(sid, s, job, {})
            return False
        try:
            if nodes is None and job.value is not None:  # the fragment the dispatcher sent again
                nodes, job.value = job.value, None
                if isinstance(nodes, Fail):
                    raise NotFound(f"plan {plan_no} is not known on {self.name} or to the dispatcher: "
                                   f"{nodes.err.get('message')}")
            ext_ids = h.get("ext") or []
            ext = self._inputs(s, ext_ids)
            if nodes is not None:
                t0 = time.monotonic_ns()
                plan = compile_plan(self.device, nodes, [meta_of(self.device, b) for b in ext])
                self._bind_outputs(job, plan)
                if plan_no is not None:
                    self.plans.put(sid, plan_no, plan)
                took = time.monotonic_ns() - t0
                self.compiles += 1
                self.compile_ns += took
                if log.isEnabledFor(logging.INFO):
                    log.info("plan %s of session %s compiled: %d nodes, %d steps, %.1f ms", plan_no,
                             _sid_text(sid), len(nodes), len(plan.program.steps), took / 1e6)
                if job.spans is not None:
                    job.spans.append(("worker::compile", "worker", t0, took, {"batch": h["prof"],
                                                                              "nodes": len(nodes)}))
            else:
                plan = self.plans.get(sid, plan_no)
                if plan is None:  # evicted (see plancache): ask whoever sent it (dispatcher or client) again
                    job.wait = ("plan", sid, plan_no)
                    self._reply(job, {"t": "need_plan", "s": sid, "q": h.get("q"), "plan": plan_no}, [])
                    return False
                self._warm(sid, s, plan_no, plan)
                self._bind_outputs(job, plan)
                self._check_inputs(plan, ext, ext_ids, plan_no)
            if job.route is not None and not self._outputs_fresh(s, job):  # (the dispatcher checks the batches it
                s.errors.append(error_to_wire(ProtocolError(  # routes; the outputs do not fail: that would
                    "an output id is already a live handle of this session")))  # replace the live handles, and
                job.outs, job.kept = [], None  # the batch runs nothing)
                self._finish(sid, s, job, {}, report=False)
                return False
            job.plan, job.ext = plan, ext
            self._admit(s, job)
            return True
        except Exception as e:
            err = error_to_wire(e)
            s.errors.append(err)
            self._finish(sid, s, job, self._failed_outputs(job, err), report=False)
            return False

    # -- the checks a batch passes before it runs (``_prepare``; ``replay_now`` makes the same) ---------------------
    def _warm(self, sid, s: _Session, plan_no: int, plan) -> None:
        """A replayed plan that has become hot is compiled now, if its trial found the compiled plan no slower (see
        hot.py); the session counts the verdicts."""
        tier = plan.tier
        if tier is None:
            return
        if tier.take(plan):
            self.plans.put(sid, plan_no, plan)  # (its size changed)
            s.hot_plans += 1
        elif tier.verdict == "slower":
            s.hot_slower += 1

    def _inputs(self, s: _Session, ext_ids: list):
        """The session's buffers for the batch's inputs ``ext_ids``; one it does not hold is a ``NotFound`` Fail (the
        batch's dependent outputs fail with it)."""
        ext = list(map(s.buffers.get, ext_ids))
        for k, b in enumerate(ext):
            if b is None:
                ext[k] = Fail(error_to_wire(NotFound(f"handle {ext_ids[k]} is not on {self.name}")))
        return ext

    def _check_inputs(self, plan, ext: list, ext_ids: list, plan_no) -> None:
        """ProtocolError unless a replay's inputs are as many as the plan's and shaped as when it was compiled
        (a failed input passes: the outputs that depend on it fail with it)."""
        metas = plan.ext_metas
        if len(ext) != len(metas):
            raise ProtocolError(f"plan {plan_no} replayed with {len(ext)} inputs, it was made for {len(metas)}")
        meta = self.device.meta
        try:
            if self._metas(ext) == metas:  # (the common case, in one pass: every input as planned)
                return
        except Exception:  # noqa: BLE001 - a failed input: the pass below tells which
            pass
        for k, (b, m) in enumerate(zip(ext, metas)):
            if type(b) is not Fail and type(m) is not Fail and meta(b) != m:
                raise ProtocolError(f"plan {plan_no} replayed with input {ext_ids[k]} of a different shape/dtype")

    @staticmethod
    def _outputs_fresh(s: _Session, job: _Job) -> bool:
        """Whether none of the ids the job makes is a live handle of its session already (a direct batch's: the
        dispatcher checks this for the batches it routes)."""
        outs = job.outs
        return s.buffers.keys().isdisjoint(outs if job.kept is None else [outs[j] for j in job.kept])

    def _admit(self, s: _Session, job: _Job) -> None:
        """The job's kept slots, dynamic attributes (checked against its plan) and where it runs; ``QuotaExceeded``
        when its estimated peak would pass the session's quota."""
        plan, h = job.plan, job.h
        keeping = job.keeping = plan.kept(job.outs, job.kept, h.get("release"))
        job.keep = keeping.keep
        dyn = h.get("dyn")
        if dyn:
            job.dyn = dict(dyn)  # ([node, attrs] pairs)
        if plan.dyn_checks and job.dyn:
            plan.check_dynamic(job.dyn)
        # large work, or a compile (seconds of gcc) first: off the main thread, which serves the other sessions
        job.offload = plan.work >= OFFLOAD_WORK or builds_runner(self.device, plan, job.keep)
        if self.limit is not None and not job.cancelled:
            need = keeping.peak(plan)
            if s.ledger.used + need > self.limit:
                raise quota_error(self.name, self.limit, s.ledger.used, need)

    @staticmethod
    def _bind_outputs(job: _Job, plan) -> None:
        """The job's output ids and the nodes that are not temporaries, now that its node count is known."""
        n = len(plan.node_slot)
        h = job.h
        outs = job.outs = out_ids(h, n) if "out_first" in h else (h.get("outs") or [])
        if len(outs) != n:
            raise ProtocolError(f"batch has {n} nodes but {len(outs)} output ids")
        temps = h.get("temps")
        job.kept = kept_nodes(n, temps) if temps is not None and check_temps(temps, n) else None
        if job.refused is not None:  # (its outputs are known now: they fail with it)
            raise job.refused

    def _release_early(self, s: _Session, h: dict) -> None:
        """Free the released buffers this batch does not read now rather than after it (the others, and the
        batch's own outputs it names, go when it finishes)."""
        bufs = s.buffers
        # the released handles it holds (a training step also releases its own temporaries, by the hundred: those it
        # never held cost nothing here)
        ids = bufs.keys() & h["release"]
        ext = h.get("ext")
        if ext:
            ids.difference_update(ext)
        self._free(s, ids)

    def _free(self, s: _Session, ids: set) -> None:
        """Let go of the session's handles ``ids`` (it holds each; the client released them): off its buffers and
        its ledger (by id: what ``_finish`` held), and freed."""
        s.ledger.drop(ids)
        gone = list(map(s.buffers.pop, ids))
        if self._frees:
            free = self.device.free
            for b in gone:
                if type(b) is not Fail:
                    free(b)

    def _compute(self, sid, job: _Job, scope):
        """Run the job's plan until it finishes or must wait: ``("done", result)``, ``("recv", k)`` or
        ``("coll", attrs, value, step)``. Runs on the main thread, or on a pool thread inside ``scope``. Downloads
        from the hub it starts report their progress to the job's session (``hub_loader.reports``)."""
        reports = hub_loader.reports
        prev = getattr(reports, "to", None)
        report = self.report_progress if job.route is None else functools.partial(self.report_progress,
                                                                                  route=job.route)
        reports.to = (report, sid, scope is not None)
        try:
            return self._run_steps(sid, job, scope)
        finally:
            reports.to = prev

    def report_progress(self, sid, pooled: bool, fields: dict, route: bytes | None = None) -> None:
        """Send session ``sid`` a download's progress (``tensorwire.protocol.progress``): through the dispatcher, or
        on the client's direct channel (``route``) for work that came that way; from a pool thread (``pooled``)
        through the main thread, which owns the sockets."""
        msg = {"t": "progress", "s": sid, **fields}
        if pooled:
            self.completed.append(("progress", sid, route, msg))
            self._wake()
        else:
            self._send_progress(route, msg)

    def _send_progress(self, route: bytes | None, msg: dict) -> None:
        if route is None:
            self.send(msg, [])
        elif self.channel is not None:
            msg["device"] = self.name  # (the dispatcher adds it to the reports it passes on)
            del msg["s"]
            self.channel.send(route, msg)

    def _run_steps(self, sid, job: _Job, scope):
        plan = job.plan
        if job.gen is None:
            early = self._early_slots(job)  # fetched id -> slot, when the fetch can be answered before the end
            if not plan.has_transfers:
                answer = None if early is None else (
                    early.values(), lambda env: self._answer(sid, job, early, env, scope))
                return ("done", run_plan(self.device, plan, job.ext, job.outs, job.dyn, job.frames, job.keep,
                                         job.spans, answer))
            after = None
            if early is not None:
                made = plan.slot_steps()
                after = max((made.get(slot, -1) for slot in early.values()), default=-1)
            job.gen = execute(self.device, plan, job.ext, job.outs, job.dyn, job.frames, job.keep, job.spans, after)
            # the interpreter sets context variables (numpy's errstate) and may resume on another thread: it always
            # runs in a context of its own
            job.ctx = contextvars.Context()
            val = None
        else:
            val, job.value = job.value, None
        for _ in range(1 << 30):  # bounded by the plan's steps
            try:
                ev = job.ctx.run(job.gen.send, val)
            except StopIteration as stop:
                return ("done", stop.value)
            val = None
            if ev[0] == "answer":
                self._answer(sid, job, self._early_slots(job) or {}, ev[1], scope)
                continue
            if ev[0] != "send":
                return ev
            if scope is None:
                self._send_xfer(sid, job, ev[1], ev[2])
            else:  # the socket is the main thread's
                self.completed.append(("send", sid, job, ev[1], ev[2]))
                self._wake()
        raise ProtocolError("a plan yielded too many events")

    def _run_pooled(self, sid, job: _Job) -> None:
        """A pool thread's part: run the job inside its cancel scope, hand the outcome to the main thread."""
        try:
            with job.scope:
                outcome = self._compute(sid, job, job.scope)
        except Interrupt:
            outcome = ("cancelled",)
        except Exception as e:  # an executor bug must not kill the worker
            log.exception("running a batch failed")
            outcome = ("error", error_to_wire(e))
        self.completed.append(("outcome", sid, job, outcome))
        self._wake()

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"!")
        except BlockingIOError:  # the pipe is full: the main thread is awake already
            pass

    def collect(self) -> None:
        """Take what the pool threads handed back (main thread)."""
        try:
            while os.read(self.wake_fd, 4096):
                pass
        except BlockingIOError:
            pass
        for _ in range(len(self.completed)):
            item = self.completed.popleft()
            sid, job = item[1], item[2]
            s = self.sessions.get(sid)
            if item[0] == "progress":
                if s is not None:  # (a session dropped meanwhile has nobody waiting)
                    self._send_progress(item[2], item[3])
                continue
            if item[0] == "send":
                if s is not None and not job.cancelled:
                    self._send_xfer(sid, job, item[3], item[4])
                continue
            if item[0] == "answer":  # unless a cancel answered the batch meanwhile (the main thread decides which)
                if s is not None and not job.answered:
                    self._send_answer(s, job, item[3], item[4])
                continue
            job.pooled = False
            self.pooled_seqs.discard(job.seq)
            if s is None:
                continue
            if s.draining is job:  # cancelled while it ran: its answer went out already
                s.draining = None
                self.ready.append(sid)
                continue
            if s.running is job:
                self._apply(sid, s, job, item[3])
                self.ready.append(sid)

    def _apply(self, sid, s: _Session, job: _Job, outcome: tuple) -> None:
        kind = outcome[0]
        if kind == "done":
            self._finish(sid, s, job, outcome[1])
        elif kind == "recv":
            job.wait = job.h["x"] + outcome[1]
        elif kind == "coll":
            key = self._start_collective(sid, job.h, *outcome[1:])
            if isinstance(key, Fail):
                job.value = key
            else:
                job.wait = key
        elif kind == "cancelled":
            self._finish(sid, s, job, self._failed_outputs(job, _cancelled_err()), report=False)
        else:  # "error"
            s.errors.append(outcome[1])
            self._finish(sid, s, job, {})

    def _failed_outputs(self, job: _Job, err: dict) -> dict:
        """Every output the client still holds, failed with ``err`` (named by its handle id)."""
        release = set(job.h.get("release") or ())
        outs = job.outs or job.h.get("outs") or []
        if job.kept is not None:
            outs = [outs[j] for j in job.kept]
        return {i: Fail({**err, "node": i}) for i in outs if isinstance(i, int) and i not in release}

    def _start_collective(self, sid, h: dict, attrs: dict, value, step):
        """Put this device's input of a collective in shared memory and tell the collectives service."""
        gk = (h.get("coll") or {}).get(attrs["key"])
        if isinstance(value, Fail):
            if gk is not None:  # the other parts would wait for this one: the collective fails with this error
                self.send({"t": "coll_abort", "s": sid, "key": gk, "device": self.name, "err": value.err}, [])
            return value.dependent(None)
        if gk is None:
            return Fail(error_to_wire(ProtocolError(f"collective {attrs['key']} was not announced")))
        if gk in (h.get("coll_direct") or ()) and self.transport is not None:
            shape, dt = self.device.meta(value)
            if self.transport.supports(attrs["kind"], attrs.get("op"), dt, tuple(shape), attrs["n"], step.dtype):
                return self._start_direct(sid, gk, attrs, value, step)
        try:
            arr = self.device.download(value)
            out_bytes = int(np.prod(step.shape, dtype=np.int64)) * step.dtype.itemsize
            in_place = attrs["kind"] in ("all_reduce", "broadcast")
            f = self.shm.take(arr.nbytes if in_place else arr.nbytes + out_bytes)
            if arr.nbytes:
                np.frombuffer(memoryview(f.map), np.uint8, arr.nbytes)[:] = arr.reshape(-1).view(np.uint8)
            path = f.path
        except Exception as e:
            return Fail(error_to_wire(e))
        key = ("coll", gk)
        self.colls[key] = (f, 0 if in_place else arr.nbytes, step.shape, step.dtype)
        self.send({"t": "coll_ready", "s": sid, "key": gk, "device": self.name, "path": path,
                   "dtype": step.dtype.name, "shape": list(arr.shape), "out_shape": list(step.shape),
                   "kind": attrs["kind"], "op": attrs.get("op"), "src": attrs.get("src", 0), "n": attrs["n"],
                   "rank": attrs["rank"]}, [])
        return key

    def _start_direct(self, sid, gk: int, attrs: dict, value, step):
        """This device's part of a collective over the device transport (NCCL): the input stays on the device; the
        collectives service answers with the group's communicator id when every part is ready."""
        shape, dt = self.device.meta(value)
        key = ("coll", gk)
        self.direct[key] = (value, attrs, step)
        self.send({"t": "coll_ready", "s": sid, "key": gk, "device": self.name, "direct": True,
                   "broken": list(self.transport.broken), "dtype": dt.name, "shape": list(shape),
                   "out_shape": list(step.shape), "kind": attrs["kind"], "op": attrs.get("op"),
                   "src": attrs.get("src", 0), "n": attrs["n"], "rank": attrs["rank"]}, [])
        return key

    def _direct_done(self, key, part: tuple, h: dict) -> None:
        """Run a released collective on the device transport. It runs even when its job was cancelled meanwhile:
        the peers' parts wait for this one inside the collective."""
        value, attrs, step = part
        d = h.get("direct")
        if h.get("err"):
            val = Fail(h["err"])
        else:
            try:
                if not (isinstance(d, dict) and isinstance(d.get("uid"), bytes) and type(d.get("rank")) is int
                        and isinstance(d.get("devices"), list) and 0 <= d["rank"] < len(d["devices"])
                        and d["devices"][d["rank"]] == self.name):
                    raise ProtocolError(f"collective {h.get('key')}: the collectives service's answer names no "
                                        f"communicator for {self.name}")
                val = self.transport.run(attrs["kind"], attrs.get("op"), attrs.get("src", 0), value,
                                         tuple(d["devices"]), d["uid"], d["rank"], tuple(step.shape))
            except Exception as e:
                val = Fail(error_to_wire(e))
        self._arrived(key, val)

    def _collective_done(self, h: dict) -> None:
        key = ("coll", h.get("key"))
        part = self.direct.pop(key, None)
        if part is not None:
            self._direct_done(key, part, h)
            return
        info = self.colls.pop(key, None)
        if info is None:
            return
        f, offset, shape, dt = info
        if key in self.abandoned:
            del self.abandoned[key]
            self.shm.give_back(f)
            return
        if h.get("err"):
            val = Fail(h["err"])
            self.shm.give_back(f)
        else:
            try:  # the result stays on the shared pages: no copy back
                val = self.device.upload(self.shm.lease(f, offset, shape, dt.np))
            except Exception as e:
                val = Fail(error_to_wire(e))
                self.shm.give_back(f)
        self._arrived(key, val)

    def _send_xfer(self, sid, job: _Job, k, value) -> None:
        key = job.h["x"] + k
        job.sent.add(k)
        peer = None  # the destination worker's direct channel, when the dispatcher named it (backends.direct)
        xto = job.h.get("xto")
        if xto and self.channel is not None:
            peer = next((e for e in xto if type(e) is list and len(e) == 4 and e[0] == k), None)
        t0 = time.monotonic_ns()
        if isinstance(value, Fail):  # the failure travels as it is: the destination raises the same error
            arr, dtype, shape, err = None, "", [], {a: b for a, b in value.err.items() if a != "moved"}
        else:
            arr, (shape, dt), err = self.device.download(value), self.device.meta(value), None
            dtype, shape = dt.name, list(shape)
        if peer is not None:
            self.channel.send_xfer(peer, sid, key, arr, dtype, shape, err)
        elif err is not None:
            self.send({"t": "xfer", "s": sid, "x": key, "err": err}, [])
        else:
            self.send({"t": "xfer", "s": sid, "x": key, "dtype": dtype, "shape": shape}, [as_frame(arr)])
        if job.spans is not None and arr is not None:
            job.spans.append(("transfer::send", "transfer", t0, time.monotonic_ns() - t0, {"batch": job.h["prof"],
                              "bytes": arr.nbytes, "transfer": key}))

    def _settle(self, sid, job: _Job) -> None:
        """A job that ends leaves no device waiting: transfers it did not send go out as its error, and transfers
        still on their way to it are dropped when they arrive."""
        x = job.h.get("x")
        if not isinstance(x, int):
            return
        if job.plan is not None:
            if not job.plan.has_transfers:
                return
            sends, recvs = job.plan.send_keys, job.plan.recv_keys
        else:
            sends, recvs = _transfer_keys(job.h.get("nodes"))
        unsent = [k for k in sends if k not in job.sent]
        if unsent:
            err = _cancelled_err() if job.cancelled else error_to_wire(
                ExecutionError(f"the batch on {self.name} ended before it sent this value"))
            for k in unsent:
                self._send_xfer(sid, job, k, Fail(err))
        for k in recvs:
            if x + k not in job.recvd:
                self._abandon_key(x + k)

    def _finish(self, sid, s: _Session, job: _Job, result: dict, report: bool = True) -> None:
        h = job.h
        s.uploads -= job.uploads  # (what the batch kept of its uploads is on the ledger now)
        job.uploads, job.frames = 0, []
        if s.running is job:
            s.running = None
        if h.get("x") is not None:  # (a batch with transfers)
            self._settle(sid, job)
        bufs = s.buffers
        ledger = s.ledger
        dropped = []  # what the batch made for itself only (temporaries): reported, never kept
        if job.kept is not None:
            outs = job.outs
            kept_ids = {outs[j] for j in job.kept}
            if not kept_ids.issuperset(result):
                dropped = [v for i, v in result.items() if i not in kept_ids]
                # (a temporary's buffer is in the result only where a kept node shares its slot: that one holds it)
                result = {i: v for i, v in result.items() if i in kept_ids}
        failed = Fail in map(type, result.values())  # (a pass in C: Fail has no subclasses)
        made = {i: v for i, v in result.items() if type(v) is not Fail} if failed else result  # (its buffers, by id)
        ledger.hold(made)
        if self.limit is not None and made and ledger.used > self.limit:  # the estimate fell short: take it back
            before = ledger.used
            ledger.drop(made)
            err = quota_error(self.name, self.limit, ledger.used, before - ledger.used, after=True).to_wire()
            for i, v in list(made.items()):
                self.device.free(v)
                result[i] = Fail({**err, "node": i})
            s.errors.append(err)
            report = False
        bufs.update(result)
        if report and (failed or dropped):
            for v in itertools.chain(result.values(), dropped):
                if isinstance(v, Fail) and v.err.get("code") not in _NOT_REPORTED and not v.err.get("moved"):
                    s.errors.append(v.err)
        elif job.cancelled and not any(e.get("code") == Cancelled.code for e in s.errors):
            s.errors.append(_cancelled_err())
        release = h.get("release")
        if release:
            self._free(s, bufs.keys() & release)  # (the handles it holds of those released)
        if not h.get("reply") or job.answered:
            self._done(s, job)
            return
        if h.get("sync"):  # the session's work has run on the device, not only been queued (a GPU runs it later)
            try:
                self.device.synchronize()
            except Exception as e:  # (a GPU's asynchronous error surfaces at the wait)
                s.errors.append(error_to_wire(e))
        t0 = time.monotonic_ns() if job.spans is not None and h.get("fetch") else 0
        fetch = h.get("fetch") or ()
        values, frames, fetch_errors = self._fetched(fetch, list(map(bufs.get, fetch)),
                                                     INLINE_MAX if job.route is not None else 0)
        if t0:
            job.spans.append(("transfer::fetch", "transfer", t0, time.monotonic_ns() - t0, {
                "batch": h["prof"], "bytes": sum(len(f) if isinstance(f, bytes) else f.nbytes for f in frames)
                + _inline_nbytes(values)}))
        errors, s.errors = s.errors, []
        job.answered = True
        self._done(s, job)
        self._reply(job, {"t": "done", "s": sid, "q": h.get("q"), "values": values, "errors": errors,
                          "fetch_errors": fetch_errors}, frames)

    def _reply(self, job: _Job, msg: dict, frames: list) -> None:
        """Send ``msg`` about ``job`` back the way the job came: the client's direct channel or the dispatcher."""
        if job.route is None:
            self.send(msg, frames)
        elif self.channel is not None:
            c = self.direct_counts
            errors, fetch_errors = msg.get("errors"), msg.get("fetch_errors")
            if errors or fetch_errors:
                for e in itertools.chain(errors or (), fetch_errors or ()):
                    code = str(e.get("code"))[:64]
                    c["errors"][code] = c["errors"].get(code, 0) + 1
            sizes = None
            values = msg.get("values")
            if values and len(values) > len(frames):  # (values carried in the header: their bytes count too)
                c["bytes_out"] += _inline_nbytes(values)
            if frames:
                sizes = list(map(frame_nbytes, frames))
                c["bytes_out"] += sum(sizes)
                shm = job.h.get("shm")
                if shm and max(sizes) >= shm and msg.get("values"):  # the client shares this host: large values
                    frames = self.channel.values_to_shm(job.h["s"], msg["values"], frames, shm)  # go in files
                    sizes = None
            self.channel.send(job.route, msg, frames, sizes)

    def _fetched(self, fetch, bufs: list, inline: int = 0) -> tuple[list, list, list]:
        """The answer to a fetch: ``(values, frames, fetch_errors)`` for the ids ``fetch``, whose buffers are ``bufs``
        (None: not held); a value of at most ``inline`` bytes goes in its descriptor (``protocol.wire.INLINE_MAX``),
        not a frame."""
        values: list = []
        frames: list = []
        fetch_errors: list = []
        download, meta = self.device.download, self.device.meta  # (looked up once: a step fetches several values)
        for i, b in zip(fetch, bufs):
            if b is None:
                fetch_errors.append(error_to_wire(NotFound(f"handle {i} does not exist on {self.name}"), i))
            elif type(b) is Fail:  # (Fail has no subclasses)
                e = dict(b.err)
                e["fetched"] = i
                fetch_errors.append(e)
            else:
                try:
                    arr = download(b)
                except Exception as e:
                    fetch_errors.append(error_to_wire(e, i))
                    continue
                shape, dt = meta(b)
                if inline and arr.nbytes <= inline:
                    values.append([i, dt.name, list(shape), arr.tobytes()])
                else:
                    values.append([i, dt.name, list(shape), len(frames)])
                    frames.append(as_frame(arr))
        return values, frames, fetch_errors

    def _early_slots(self, job: _Job) -> dict | None:
        """The fetched ids the job makes itself, each with its slot, when the job may answer its fetch as soon as
        those are made and run the rest of its plan after the answer (a training step's loss comes back while the
        device runs the backward pass and the optimizer); None: it answers when it finishes.

        It answers early when the batch asks for values and nothing else (no ``sync``, which waits for all of the
        session's work) and the profiler is off (a profiled batch's spans end with its answer). Errors of the
        nodes that run after the answer surface at the session's next answer, as for any batch sent without one."""
        h = job.h
        fetch = h.get("fetch")
        if not fetch or not h.get("reply") or h.get("sync") or job.spans is not None or job.answered:
            return None
        outs, slot_of = job.outs, job.keeping.slot_of
        made = {}
        for i in fetch:
            try:
                j = outs.index(i)
            except ValueError:  # made before this batch: answered from the session's buffers
                continue
            slot = slot_of.get(j)  # (None: not kept, released by this very batch: the answer at the end says so)
            if slot is None:
                return None
            made[i] = slot
        return made

    def _answer(self, sid, job: _Job, made: dict, env: list, scope) -> None:
        """Answer the job's fetch now (``made``: the fetched ids it made, with their slots in ``env``), while the
        rest of its plan runs. On a pool thread the main thread sends it (it owns the socket), unless a cancel has
        answered the batch by then."""
        s = self.sessions.get(sid)
        if s is None:
            return
        fetch = job.h["fetch"]
        if len(made) == len(fetch):  # (all made by this batch, the commonest: ``made`` lists them in fetch order)
            got = list(map(env.__getitem__, made.values()))
        else:
            bufs = s.buffers
            got = [env[made[i]] if i in made else bufs.get(i) for i in fetch]
        values, frames, fetch_errors = self._fetched(fetch, got, INLINE_MAX if job.route is not None else 0)
        msg = {"t": "done", "s": sid, "q": job.h.get("q"), "values": values, "fetch_errors": fetch_errors}
        if scope is None:
            self._send_answer(s, job, msg, frames)
        else:
            self.completed.append(("answer", sid, job, msg, frames))
            self._wake()

    def _send_answer(self, s: _Session, job: _Job, msg: dict, frames: list) -> None:
        """Send ``job``'s early answer with the errors the session has gathered so far, and mark the job answered
        (main thread)."""
        job.answered = True
        msg["errors"], s.errors = s.errors, []
        self._reply(job, msg, frames)

    def _done(self, s: _Session, job: _Job) -> None:
        """A batch is over: count it, log it when slow, and keep its profiler spans for the session."""
        if not job.started:  # it never ran (dropped before it started)
            return
        now = time.monotonic_ns()
        took = now - job.started
        self.batches_run += 1
        p = self.progress.get(job.h.get("s"))
        if p is not None:
            p[0] += 1
            if p[1] is job:
                p[1] = None
        self.busy_ns += took
        self.recent.append((self.batches_run, job.h.get("s"), job.started, took,
                            len(job.plan.program.steps) if job.plan is not None else 0))
        if took > SLOW_BATCH_NS:
            steps = len(job.plan.program.steps) if job.plan is not None else 0
            log.info("slow batch on %s: %.0f ms (plan %s, %d steps, %s)", self.name, took / 1e6, job.h.get("plan"),
                     steps, "on the pool" if job.offload else "inline")
        if job.spans is not None:
            job.spans.append(("worker::batch", "worker", job.started, took, {
                "batch": job.h["prof"], "plan": job.h.get("plan"), "device": self.name}))
            room = MAX_SPANS - len(s.spans)
            s.spans.extend(job.spans[:room])
            s.spans_dropped += max(0, len(job.spans) - room)

    def close(self) -> None:
        self.pool.close()
        hot.stop()
        self.shm.close()
        for fd in (self.wake_fd, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass


#: the most upload bytes a replay may carry and still take the direct channel's fast path (``replay_now``): a step's
#: new small inputs (a name's one-hot letters, a label); larger uploads go the general way
REPLAY_UPLOADS_MAX = 1 << 20
STATS_WAIT_S = 1.0  # a stats request waits this long at most for batches running on the pool
#: how long ``run_ready`` runs queued batches before the worker's loop looks at its sockets again (ns)
RUN_SLICE_NS = 20_000_000
#: what the executor does with each kind of ``protocol.messages.WORKER`` (the worker's loop takes ``registered``,
#: ``refused`` and ``hb`` itself)
WORKER_HANDLERS = {
    "run": "_on_run",
    "xfer": "_on_xfer",
    "plan": "_on_plan",
    "coll_done": "_on_coll_done",
    "cancel": "_on_cancel",
    "drop_session": "_on_drop_session",
    "profile_collect": "_on_profile_collect",
    "stats": "_on_stats",
    "drop_plans": "_on_drop_plans",
}
#: batches each worker remembers for the dashboard's task stream (``load()["recent"]``)
RECENT_BATCHES = 128
SLOW_BATCH_ENV = "TENSORWIRE_SLOW_BATCH_MS"
#: a batch that runs longer than this on the worker is logged at info (``TENSORWIRE_SLOW_BATCH_MS``, default 1000)
SLOW_BATCH_S = float(os.environ.get(SLOW_BATCH_ENV, "1000")) / 1e3
SLOW_BATCH_NS = SLOW_BATCH_S * 1e9


#: freed heap memory (bytes) a worker keeps for its next allocations instead of giving it back to the OS (glibc's
#: ``M_TRIM_THRESHOLD``; ``TENSORWIRE_WORKER_TRIM_THRESHOLD``, 0: glibc's 128 KiB). With the mmap threshold fixed
#: (:func:`~tensorwire.protocol.service.fix_mmap_threshold`), glibc gave back the top of the heap whenever more
#: than 128 KiB of it was free: a step's numpy temporaries were freed at its end, given back, and faulted in again
#: the next step (issue 37: a DCGAN worker took ~2,000 page faults a step, ~17 with this)
TRIM_ENV = "TENSORWIRE_WORKER_TRIM_THRESHOLD"
TRIM_THRESHOLD = 512 << 20
_M_TRIM_THRESHOLD = -1  # (glibc's malloc.h)


def tune_malloc() -> bool:
    """Set glibc's trim threshold for this worker to ``TENSORWIRE_WORKER_TRIM_THRESHOLD`` bytes (default
    :data:`TRIM_THRESHOLD`): the worker then holds freed heap memory up to that much and reuses it, rather than
    return it to the OS and fault it in again. It keeps blocks under the services' mmap threshold
    (:data:`~tensorwire.protocol.service.MMAP_THRESHOLD`); setting it also stops glibc's mmap threshold
    from moving, so with ``TENSORWIRE_MMAP_THRESHOLD=0`` a worker's stays at glibc's 128 KiB. False where there is
    no glibc, or it is turned off (0) or malformed."""
    raw = os.environ.get(TRIM_ENV, "").strip()
    try:
        n = int(raw) if raw else TRIM_THRESHOLD
    except ValueError:
        log.warning("%s=%r is not a number of bytes; glibc's trim threshold is left as it is", TRIM_ENV, raw)
        return False
    if n <= 0 or not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return False
    try:
        return bool(ctypes.CDLL("libc.so.6").mallopt(_M_TRIM_THRESHOLD, min(n, (1 << 31) - 1)))
    except (OSError, AttributeError):
        return False


def _sid_text(sid) -> str:
    return sid.hex() if isinstance(sid, bytes) else str(sid)
#: profiler spans a session's profiled batches keep on this worker until collected (the rest are counted, not kept)
MAX_SPANS = 1 << 17
_NOT_REPORTED = ("DependencyFailed", "Cancelled")  # a dependent's failure is its origin's; a cancel is reported once
MAX_ABANDONED = 1 << 16


def _cancelled_err() -> dict:
    return Cancelled("the session cancelled this work (tw.cancel(), an interrupted wait, or the session closed)"
                     ).to_wire()


def _transfer_keys(nodes) -> tuple[set, set]:
    """Transfer numbers a raw fragment sends and receives (for a job whose plan never compiled)."""
    sends, recvs = set(), set()
    for n in nodes if isinstance(nodes, list) else ():
        if isinstance(n, list) and len(n) >= 3 and n[0] in (SEND, RECV) and isinstance(n[2], dict):
            k = n[2].get("xfer")
            if isinstance(k, int) and not isinstance(k, bool):
                (sends if n[0] == SEND else recvs).add(k)
    return sends, recvs


class Worker:
    """The worker process: socket, state and execution on one thread, heartbeats on another."""

    def __init__(self, device: str, dispatcher: str, ctx: zmq.Context | None = None, token: str | None = None,
                 keys=None, session_memory: str | int | None = None, direct_address: str | None = None,
                 local_index: int | None = None):
        """``direct_address``: where clients' direct channels connect (``backends.direct``; None: the default,
        ``TENSORWIRE_DIRECT_ADDRESS`` or an ephemeral port on 127.0.0.1; ``"none"``: relay only). ``local_index``:
        the device's index on this host where it differs from the cluster-wide name's (a job's node 1 serves its
        first GPU as ``cuda:4``); None: the name's index."""
        self.device_name = device
        kind, index = parse_device(device)
        here = f"{kind}:{local_index} on this host" if local_index is not None else device
        if local_index is not None:
            index = local_index
        self.backend = get_backend(kind)
        infos = {d.index: d for d in self.backend.devices()}
        info = infos.get(index)
        if info is None:
            raise DeviceError(f"{here} does not exist; {kind} devices here: "
                              f"{', '.join(f'{kind}:{i}' for i in infos) or 'none'}")
        if not info.available:
            raise DeviceError(f"{here} is not available: {info.reason}")
        self.info = info
        self.device = self.backend.open(index)
        self.dispatcher = dispatcher
        self.token = token  # the service credential
        self.keys = keys  # CURVE keys directory (None: plain ZMTP, loopback/ipc only)
        self.instance = new_instance()
        self.ctx = ctx or zmq.Context.instance()
        self.sock: zmq.Socket | None = None
        limit_text = session_memory if session_memory is not None else os.environ.get(QUOTA_ENV)
        self.session_limit = parse_limit(limit_text, info.memory_bytes or host_memory())
        self.executor = Executor(self.device, device, self._send, session_limit=self.session_limit)
        self.channel = DirectChannel(self.ctx, device, self.instance, direct_address, keys, token, dispatcher)
        if self.channel.sock is not None:
            self.executor.channel = self.channel
        self.stop = StopEvent()  # (set: the serve loop's wait for a message returns at once)
        self.epoch: str | None = None  # the epoch of the dispatcher this worker's sessions belong to
        self.spin = IdleSpin(spin_from_env())  # the main loop's busy-wait after work (TENSORWIRE_WORKER_SPIN_US)

    def _send(self, header: dict, frames: list) -> None:
        send_parts(self.sock, [pack_header(header), *frames])

    def _connect(self) -> zmq.Socket:
        return register_service(self.ctx, self.dispatcher, {
            "service": "worker", "device": self.device_name, "backend": self.backend.name,
            "info": self._info(), "token": self.token, "instance": self.instance}, keys=self.keys,
            stop=self.stop, on_registered=self._registered)

    def _info(self) -> dict:
        """The device's description, and the transport its collectives can take directly (``collectives``)."""
        info = self.info.to_wire()
        if info["device"] != self.device_name:  # (served under a cluster-wide name: --local-index)
            info["device"], info["local_device"] = self.device_name, info["device"]
        info["host"] = host_id()  # (workers on one host, with one shared-memory folder, move tensors through it)
        info["shm_dir"] = os.path.realpath(SHM_DIR)
        if self.channel.address is not None:
            info["direct"] = self.channel.address
            if self.channel.public_key:
                info["direct_key"] = self.channel.public_key
        elif self.channel.why_not:
            info["direct_off"] = self.channel.why_not
        if self.executor.transport is not None:
            info["collectives"] = self.executor.transport.name
        if os.environ.get(RESTARTED_ENV):  # its supervisor restarted it: how the previous worker ended
            info[RESTARTED_INFO] = os.environ[RESTARTED_ENV][:300]
        return info

    def _registered(self, h: dict) -> None:
        """The dispatcher accepted us: a new epoch means a restarted dispatcher, whose sessions are not ours."""
        epoch = h.get("epoch")
        self.channel.epoch = epoch if isinstance(epoch, str) else None
        if epoch != self.epoch:
            if self.epoch is not None:  # the old sessions are orphans
                log.warning("registered with a new dispatcher (epoch %s): dropping the %d sessions of the old one",
                            epoch, len(self.executor.sessions))
                self.executor.forget_sessions()
            self.epoch = epoch

    def serve(self, ready_line: bool = True) -> None:
        start_heartbeats(self.ctx, self.dispatcher, self.device_name, self.stop, self.instance, self.keys,
                         extra=lambda: {"busy": self.executor.busy_report(), "direct": self.executor.direct_totals()})
        self.sock = sock = None
        try:
            self.sock = sock = self._connect()
        finally:
            if sock is None:
                self.executor.shm.close()
        ex = self.executor
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(ex.wake_fd, zmq.POLLIN)  # the pool threads' outcomes
        poller.register(self.stop, zmq.POLLIN)  # a stop
        direct = self.channel.sock
        if direct is not None:
            poller.register(direct, zmq.POLLIN)  # clients' direct channels
        lane = self.channel.lane.fileno() if self.channel.lane is not None else None
        if lane is not None:
            poller.register(lane, zmq.POLLIN)  # ... and their same-host lanes (protocol/lane.py; polled by descriptor)
        last_seen = time.monotonic()
        spin = self.spin
        alone = False  # the last turn took direct messages only: wait on the direct socket alone first
        if ready_line and not self.stop.is_set():
            announce_ready("worker", device=self.device_name, pid=os.getpid())
        try:
            while not self.stop.is_set():
                if alone and not (ex.ready or ex.pooled_seqs or ex.completed or self.channel.peer_give) and (
                        time.monotonic() - last_seen <= HEARTBEAT_S * LIVENESS):
                    # a client in a round-trip loop: its next message read as a raw echo reads it (the dispatcher's
                    # socket checked first; a spin after work on the direct socket alone, then one bounded read)
                    msg = self.channel.read_alone(spin, sock)
                    if msg is not None:
                        self.channel.take(ex, msg)
                        spin.worked()
                        self.channel.answers.tick(0.1)
                        ex.run_ready()
                        continue
                alone = False
                # after work, busy-wait briefly for the next message rather than pay a wake-up (backends/idle_spin.py)
                got = None if ex.ready or ex.pooled_seqs else spin.wait(poller.poll)
                events = dict(got or poller.poll(0 if ex.ready else int(HEARTBEAT_S * 1000)))
                if ex.wake_fd in events or ex.completed:
                    ex.collect()
                    spin.worked()
                if direct is not None and direct in events:
                    self.channel.receive(ex)
                    spin.worked()
                    alone = sock not in events and ex.wake_fd not in events
                if lane is not None and lane in events:
                    if self.channel.receive_lane(ex):
                        spin.worked()
                        alone = sock not in events and ex.wake_fd not in events
                if self.channel.peer_give:  # other workers' files our arrays no longer use
                    self.channel.flush_gives()
                if direct is not None:  # answers its clients' connections took; errors owed to full ones
                    self.channel.answers.tick(0.1)
                if sock not in events:
                    ex.run_ready()
                    # (messages may have come while the batches ran: silence is judged on an empty socket only)
                    if time.monotonic() - last_seen > HEARTBEAT_S * LIVENESS and not sock.poll(0):
                        log.warning("dispatcher silent; reconnecting and registering again")
                        poller.unregister(sock)
                        sock.close(0)
                        self.sock = sock = self._connect()
                        poller.register(sock, zmq.POLLIN)
                        last_seen = time.monotonic()
                    continue
                for h, frames in drain(sock):
                    last_seen = time.monotonic()
                    t = h["t"]
                    if t == "hb":
                        continue
                    spin.worked()
                    if t == "registered":
                        self._registered(h)
                    elif t == "refused":
                        raise refusal_error(h)
                    else:
                        ex._safe_handle(h, frames)
                ex.run_ready()
        finally:
            self.stop.set()
            say_goodbye(sock)
            sock.close(0)
            self.channel.close()
            ex.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tensorwire worker", description="Run a device worker.")
    p.add_argument("--device", default="cpu:0", help="device this worker owns, e.g. cpu:0 or cuda:1")
    p.add_argument("--local-index", type=int, default=None,
                   help="the device's index on this host, where the cluster-wide name's differs (one GPU of a "
                        "multi-node job: --device cuda:5 --local-index 1); default: the name's index")
    p.add_argument("--dispatcher", default=os.environ.get("TENSORWIRE_SERVICE_ADDRESS", "tcp://127.0.0.1:5556"),
                   help="the dispatcher's service address")
    add_service_credential_args(p)
    p.add_argument("--threads", type=int, default=None,
                   help="BLAS/OpenMP threads for kernels (default: the library's own; give each worker its share "
                        "of the host's cores when several run on one host)")
    p.add_argument("--hub-url", default=os.environ.get("TENSORWIRE_HUB_URL"),
                   help="the cluster's model hub, the only one this worker fetches from (default $TENSORWIRE_HUB_URL)")
    p.add_argument("--hub-token-file", default=os.environ.get("TENSORWIRE_HUB_TOKEN_FILE"),
                   help="file holding this worker's own hub token, used when a client sends none (default "
                        "$TENSORWIRE_HUB_TOKEN_FILE, else the token in $TENSORWIRE_HUB_TOKEN)")
    p.add_argument("--session-memory", default=os.environ.get(QUOTA_ENV, QUOTA_DEFAULT),
                   help=f"most memory one session may hold on this device: a share of the device's memory (50%%), "
                        f"a size (4GiB, 512MB) or none (default {QUOTA_DEFAULT.replace('%', '%%')}, or ${QUOTA_ENV})")
    p.add_argument("--direct-address", default=None,
                   help=f"where clients' direct channels connect (default ${ADDRESS_ENV}, else an ephemeral port on "
                        f"127.0.0.1; 'none': clients reach this worker through the dispatcher only)")
    args = p.parse_args(argv)
    configure_logging()
    tune_gc()
    tune_malloc()
    hub_loader.configure(args.hub_url, token=None if args.hub_token_file else os.environ.get("TENSORWIRE_HUB_TOKEN"),
                         token_file=args.hub_token_file)
    keys = keys_dir(args.keys)
    check_address(args.dispatcher, "--dispatcher")  # (before the worker takes anything: its shared-memory files)
    try:
        w = Worker(args.device, args.dispatcher, token=service_token(args.service_token_file, keys), keys=keys,
                   session_memory=args.session_memory, direct_address=args.direct_address,
                   local_index=args.local_index)
    except ValueError as e:
        p.error(str(e))
    stop = stop_event_on_signals()
    threading.Thread(target=lambda: (stop.wait(), w.stop.set()), daemon=True).start()
    profiled("worker", w.serve)
    return 0

