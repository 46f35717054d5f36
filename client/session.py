"""A client session: one DEALER socket to the dispatcher, the pending batch, ids, releases, plans.

Recording an op appends a node to the pending batch (no round trip). The batch is shipped when a
value is needed (a fetch), at :meth:`Session.synchronize`, when the first op after a step's end
(:meth:`Session.mark_step`, called by ``optimizer.step()``) is recorded, or when it grows past
``MAX_PENDING_NODES``/``MAX_PENDING_BYTES``. Handle ids are chosen here, so batches are pipelined:
only fetches and syncs wait for an answer, and a fetch goes out ahead of the work recorded after the
fetched value. A batch whose structure was sent before goes out as its plan number plus fresh ids.
"""

from __future__ import annotations

import atexit
import collections
import itertools
import logging
import os
import threading
import time
import weakref
from itertools import chain, compress, filterfalse, repeat
from operator import call, getitem, itemgetter

import numpy as np
import zmq

from tensorwire.protocol import PROTOCOL_VERSION
from tensorwire.protocol import dtypes as D
from tensorwire.protocol.addresses import check_address
from tensorwire.protocol.batch_ids import kept_nodes
from tensorwire.protocol.curve import apply_peer, keys_dir
from tensorwire.protocol.errors import (
    Cancelled,
    ConnectionFailed,
    DependencyFailed,
    DeviceError,
    ProtocolError,
    TensorwireError,
    TimeoutError_,
    WorkerLost,
    error_from_wire,
)
from tensorwire.protocol.graph import attrs_key, freeze
from tensorwire.protocol.handshake import FirstAnswer
from tensorwire.protocol.lane import LANE_ENABLED, LaneClosed
from tensorwire.protocol.liveness import RENEWALS_PER_LEASE, SESSION_LEASE_S, set_zmq_heartbeats
from tensorwire.protocol.ops import OPS, infer
from tensorwire.protocol.progress import check as check_progress
from tensorwire.protocol.service import spare_core, spin_wait
from tensorwire.protocol.shapes import numel
from tensorwire.protocol.shm_paths import host_id
from tensorwire.protocol.wire import (
    EVENTS,
    MAX_MESSAGE,
    NOBLOCK,
    POLLIN,
    ZERO_COPY_MIN,
    array_from_frame,
    as_frame,
    frame_nbytes,
    pack_header,
    recv_frames,
    send_parts,
    unpack_header,
)

from . import leases
from ._frames import _user_frame, user_line
from .autograd_hooks import requires_grad_of
from .cancel import Waker
from .channels import (
    DIRECT_CONNECT_S,
    HELLO_WAIT_S,
    MAX_RELAY_RELEASES,
    RENEW_BEFORE_S,
    RETRY_AFTER_S,
    SHM_MIN,
    DataPlane,
    RelayWindow,
    batch_device,
)
from .gc_policy import tune_client_gc
from .known_values import BUY_BYTES, HELD_OPS, HOST_OPS, MADE_BYTES, SMALL_BYTES, SMALL_DATA_NUMBERS, KnownValues
from .tensor import Tensor

_new_tensor = object.__new__
_INT64 = D.int64
_first = itemgetter(0)  # (a pending entry's handle)
_inputs = itemgetter(2)  # (... and its input handles)
_op = itemgetter(1)  # (a pending entry's op)
_where_field = itemgetter(5)  # (a pending entry's user's line)

MAX_PENDING_NODES = 8192
#: view ops whose attrs key is their attributes whole (no dynamic ones), by name: True
_STATIC_VIEWS = {name: not o.dynamic for name, o in OPS.items() if o.kind == "movement"}
#: the most tensors of small Python data, and views of them, kept for reuse (:meth:`Session.small_data`; the oldest
#: go first), each of at most ``known_values.SMALL_DATA_NUMBERS`` elements
MAX_SMALL_DATA = 256
#: ... and the most keys of small Python data seen once (kept from their second sighting; emptied when full)
MAX_SMALL_SEEN = 1024
#: the most released handles kept until the next flush while values the client holds are being made: past it, the
#: next held value flushes them (a dataset's samples worked out on the client, thousands between two steps, or a list
#: of them built before training, would otherwise keep every dead sample's value until the next batch shipped)
MAX_HELD_RELEASES = 8192
#: ``loss.backward()`` ships the pending batch first, without waiting for an answer, when it holds at least this
#: many nodes (TENSORWIRE_SHIP_FORWARD_NODES; 0 turns it off): the devices run the forward pass while the client
#: records the backward pass and the update (see :meth:`Session.ship_forward`). A count of the program's own nodes,
#: so the split is the same every time the same step runs (each side is one plan, cached like any batch's). 8, not
#: 32 since session 36: on the lane a message costs the client ~10 us, and a forward that waits for the read costs
#: it a round trip (the char-RNN classifier's names under six letters, a fifth of its steps: a step 614-630 -> 558-584
#: us)
SHIP_FORWARD_NODES = int(os.environ.get("TENSORWIRE_SHIP_FORWARD_NODES", "8"))
#: ... and at least this many where the loop reads none of the values it asks back (see :meth:`Session.ship_forward`)
SHIP_UNREAD_NODES = 32
MAX_PENDING_BYTES = 64 << 20
#: a backward pass whose batches were this many new structures is shipped on its own (:meth:`Session.ship_backward`)
SPLIT_AFTER_PLANS = 3
#: the most backward passes (by their ops) counted so (a char-RNN's: one a name length); past it the counts start over
MAX_BACKWARD_KINDS = 64
MAX_PLANS = 1024
MAX_WHERE = 1 << 16
#: 0-d results the session remembers as worth fetching along with a fetched value (see :meth:`Session.fetch`)...
MAX_SCALARS_TRACKED = 4096
#: the host ops whose integer or bool result the client knows or can follow are deferred (lazy nodes, see
#: ``Session._defer``): those that cannot fail once inference passed (so deferring one defers no error)
LAZY_HOST_OPS = HOST_OPS - {"floor_divide", "remainder"}
#: ... and the most of them one fetch takes along
MAX_PREFETCH = 1024
#: the most reads of dropped lazy nodes unpinned one at a time (``Session._take_release``); more are counted first
UNPIN_ONE_BY_ONE = 32
#: answers of batches shipped ahead (``Session.ship_forward``) not read yet, at most: past them a forward asks for
#: nothing back (the loop reads none of their values; they would pile up unread at the worker, whose answer bounds
#: then drop answers that are waited for)
MAX_AHEAD = 4
#: how long a client busy-waits for an answer before it blocks (TENSORWIRE_CLIENT_SPIN_MS). A blocked process on a
#: virtual machine wakes slowly (an idle vCPU halts: hundreds of microseconds per message); the client has nothing else
#: to do while it waits, and yields its core between checks, so the services run as soon as they are ready.
CLIENT_SPIN_S = float(os.environ.get("TENSORWIRE_CLIENT_SPIN_MS", "3")) * 1e-3
#: ... unless more batches than this went out unanswered before the awaited message: the devices then have that work
#: to do first (a training loop that reads its loss every 10 steps), and a spinning client would only take a core
#: from them
SPIN_AHEAD_MAX = 2
PING_AFTER_S = 2.0  # while waiting for an answer, ping the dispatcher after this long...
LIVENESS_S = float(os.environ.get("TENSORWIRE_LIVENESS", "10"))  # ...and give up if pings go unanswered
_PING = -1
_LOST_AT = "@"  # (``Session._raised``'s key of a lost worker's device)
CONNECT_TIMEOUT_S = float(os.environ.get("TENSORWIRE_CONNECT_TIMEOUT", "10"))
REQUEST_TIMEOUT_S = float(os.environ.get("TENSORWIRE_REQUEST_TIMEOUT", "600"))
#: how long ``close()`` waits for the dispatcher to confirm (TENSORWIRE_CLOSE_TIMEOUT): a process that exits right
#: after ``close()`` (``os._exit``, as multiprocessing's children do) would otherwise lose the message
CLOSE_TIMEOUT_S = float(os.environ.get("TENSORWIRE_CLOSE_TIMEOUT", "2"))
MAX_PROGRESS_SINKS = 64  # hub loads whose progress a session passes on at once (the oldest is dropped)
#: while ``tw.use_deterministic_algorithms(True)`` is on, ``check(op, attrs, device, dtype)``: called for each op
#: recorded (its output's dtype), it raises, or warns, for an op whose kernel on that device is not deterministic
#: (``client/torch_settings.py`` installs it); None otherwise (one lookup an op)
deterministic_check = None
_log = logging.getLogger("tensorwire.client")


class Session:
    """A connection to a dispatcher and everything recorded through it.

    Most users never touch this class: ``tw.connect()`` makes one the default and the module-level
    functions (``tw.randn`` ...) use it. Code that drives several clusters holds several sessions
    and calls the same functions on them (``s.randn(3)``).
    """

    def __init__(self, address: str, token: str | None = None, *, timeout: float | None = None,
                 cluster=None, keys: str | os.PathLike | None = None):
        """``token``: the cluster's client token (or its admin token, for a session that sees every session in
        stats); ``keys``: a CURVE keys directory holding ``client.key_secret`` and the dispatcher's public
        ``dispatcher.key``, which the connection pins (default ``$TENSORWIRE_KEYS``; none: plain ZMTP, for
        loopback and ipc clusters)."""
        self.address = check_address(address, "the dispatcher address (tw.connect, TENSORWIRE_ADDRESS)")
        self._cluster = cluster
        self._ctx = zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
        self._keys = keys_dir(keys)
        if self._keys is not None:
            try:
                apply_peer(self._sock, self._keys, "client")
            except BaseException:
                self._sock.close(0)
                raise
        set_zmq_heartbeats(self._sock)
        self._poller = zmq.Poller()
        self._poller.register(self._sock, zmq.POLLIN)
        self._waker = Waker()  # another thread's tw.cancel() wakes a wait (see cancel())
        self._poller.register(self._waker.fd, zmq.POLLIN)
        weakref.finalize(self, self._waker.close)
        self._lock = threading.RLock()
        self._ids = itertools.count(1)
        self._seq = itertools.count(1)
        self._pending: list = []  # [id, op, input ids, attrs, device, where, input metas, attrs_key]
        self._pending_bytes = 0
        self._mark = False  # a step ended: ship what is pending when the next op is recorded
        self._writes = None  # a run of element writes not recorded yet (client/element_writes.py)
        self._lazy: dict[int, tuple] = {}  # nodes not recorded yet, by handle (see _defer)
        self._pins: dict[int, int] = {}  # handle -> how many lazy nodes read it
        self._held: set[int] = set()  # pinned handles whose tensors are gone: released once unpinned
        self._consts: list = []
        self._release: list[int] = []
        self._known = KnownValues()  # small values the client has, by handle (see known_values)
        self._scalars_made: dict[int, str] = {}  # live 0-d results not read yet: handle -> device (see fetch)
        self._plans: dict = {}
        self._live_plans: set[int] = set()  # the plan numbers in _plans (a compiled graph checks its own is live)
        self._plan_ids = itertools.count(1)
        self._drop_plans: list[int] = []
        # (per batch sent, newest last: its output ids and each node's user's line, for errors; at most about
        # MAX_WHERE nodes: a list appended per batch, searched only when an error names a node)
        self._where: collections.deque = collections.deque()
        self._where_n = 0
        self._replayed: collections.deque = collections.deque(maxlen=64)  # (first id, where list) per replay
        self._deferred = None  # a compiled graph's replay message, sent with the next message (see replay())
        self._n_async = 0  # batches sent without an answer to wait for
        self._n_async_done = 0  # ... of which those sent before the last answered message (so run by now)
        self._async_before = (None, 0)  # (q, _n_async) when the last numbered message went out
        self._capture = None  # the tw.compile trace recording this session's ops, if any (tensorwire.jit)
        self._along: frozenset = frozenset()  # the handles the fetch in progress takes along (see _take_along)
        self._ahead: dict[int, int] = {}  # live 0-d results whose values an answer not read yet brings: handle -> q
        self._ahead_q: dict[int, list[int]] = {}  # ... and per such answer, its handles (see ship_forward)
        #: by a backward pass's ops (the pending batch's when it was recorded): how many batches that held it the
        #: session sent as structures new to it (plans the worker made); whether one has come to SPLIT_AFTER_PLANS;
        #: and the backward pass the next batch sent holds, as ``(pending list, its length then, its ops or None)``
        #: (see ship_backward)
        self._backward_plans: dict[tuple, int] = {}
        self._backward_splits = False
        self._backward_pending: tuple | None = None
        self._scalars: dict = {}  # Python scalar operand's key -> its 0-d tensor (see scalar)
        self._scalar_attrs: dict = {}  # ... and the attributes of the `full` node that makes it (see _forget_cached)
        self._small_data: dict = {}  # small Python data's key -> (its tensor, its aliases' lazy node) (small_data)
        self._small_roots: dict = {}  # ... those tensors by handle
        self._small_seen: dict = {}  # ... the keys seen once (see small_data)
        self._raised: dict = {}  # (code, message) of errors raised lately, oldest first
        self._lost = False  # the dispatcher stopped answering (close() does not wait for it then)
        self._prof = None  # the open tw.profiler.profile, if any (see profiler.py: it times this session's methods)
        self._progress: dict[int, object] = {}  # progress id -> the sink of a hub load's reports (see progress.py)
        self._progress_ids = itertools.count(1)
        self.closed = False
        timeout = CONNECT_TIMEOUT_S if timeout is None else timeout
        hint = ("is it running, and do its keys match this client's?" if self._keys is not None else
                "is it running? start one with `tensorwire up`; a dispatcher with CURVE keys needs keys= or "
                "TENSORWIRE_KEYS here")
        try:  # (every zmq call here is bounded: a handshake that fails says why at once, see protocol.handshake)
            first = FirstAnswer(self._sock, address)
            first.send([pack_header({"t": "hello", "v": PROTOCOL_VERSION, "token": token,
                                     "client": f"python pid {os.getpid()}", "host": host_id()})],
                       keys=self._keys is not None)
            first.wait(timeout, keys=self._keys is not None, hint=hint)
            h, _ = self._recv_raw()
            if h["t"] == "error":
                raise error_from_wire(h["error"])
            if h["t"] != "welcome":
                raise ProtocolError(f"unexpected answer to hello: {h['t']!r}")
        except BaseException:
            self._sock.close(0)
            self.closed = True
            raise
        self.session_id = h["session"]  # public: what `tensorwire status` shows an admin
        self._key = h["key"]  # the session's secret key: every message carries it
        self.admin = bool(h.get("admin"))
        self.hub_url = h.get("hub_url")
        self._devices = [d["device"] for d in h.get("devices", [])]
        #: the named services (autograd, collectives@DEVICE ...) registered when this session opened
        self.services_at_open = [str(n) for n in h.get("services") or []]
        self.default_device = self._devices[0] if self._devices else "cpu:0"
        self._plane = DataPlane(h.get("channels"), self._keys)
        self._relay = RelayWindow()  # the bound on relayed batches not answered yet (back-pressure, see channels.py)
        self._q_dev: dict[int, str] = {}  # numbered messages sent on a channel, waiting: q -> device
        self._carried: list = []  # errors a fence's answer brought, raised with the next answer
        self._finalizer = weakref.finalize(self, Session._close_socket, self._sock, self._key)
        atexit.register(self._atexit)
        self._renew_every = float(h.get("lease_s") or SESSION_LEASE_S) / RENEWALS_PER_LEASE
        self._renewed = time.monotonic()
        leases.keep(self)
        tune_client_gc()  # (once a process: gc_policy)

    # ------------------------------------------------------------------ plumbing
    @staticmethod
    def _close_socket(sock, key):
        try:
            sock.send_multipart([pack_header({"t": "close", "k": key})], zmq.NOBLOCK)
        except Exception:
            pass
        sock.close(linger=1000)  # the process lives on: libzmq delivers the close in the background

    def _atexit(self):
        try:
            self.close()
        except Exception:
            pass

    def renew_lease(self, now: float) -> None:
        """Tell the dispatcher this client is alive, when a renewal is due and nobody else uses the socket (called
        by the lease thread, ``tensorwire.leases``)."""
        if now - self._renewed < self._renew_every or not self._lock.acquire(blocking=False):
            return
        try:
            self._renew_if_due(now)
        finally:
            self._lock.release()

    def _renew_if_due(self, now: float) -> None:
        """Send the lease message (with the handles released on channels that the dispatcher knows) when a renewal
        is due. The caller holds the lock: the lease thread when it could take it, else its holder, whose direct
        sends and waits may say nothing to the dispatcher for longer than a lease."""
        if now - self._renewed < self._renew_every:
            return
        try:
            if not self.closed:
                msg = {"t": "lease", "k": self._key}
                if self._plane.forget:
                    msg["forget"], self._plane.forget = self._plane.forget, []
                self._sock.send(pack_header(msg), zmq.NOBLOCK)
                self._renewed = now
        except zmq.ZMQError:
            pass

    def _recv_raw(self):
        msg = recv_frames(self._sock)
        return unpack_header(msg[0].bytes), msg[1:]

    def _request(self, header: dict, frames=(), timeout: float | None = None):
        """Send a message and wait for the answer with the same ``q``."""
        return self._wait(self._send_numbered(header, frames), timeout)

    def _send_numbered(self, header: dict, frames=(), wait_sent: bool = False) -> int:
        """Send a message that will be answered; returns the number ``q`` its answer carries."""
        q = header["q"] = next(self._seq)
        header["k"] = self._key
        send_parts(self._sock, [pack_header(header), *frames], wait_sent=wait_sent)
        self._async_before = (q, self._n_async)
        return q

    def _send_async(self, header: dict, frames=(), wait_sent: bool = False) -> None:
        """Send a batch that no answer follows (its errors surface at the next message answered)."""
        send_parts(self._sock, [pack_header(header), *frames], wait_sent=wait_sent)
        self._n_async += 1

    def _wait(self, q: int, timeout: float | None = None, spin: bool = True):
        """Wait for the answer ``q``, from the dispatcher or from a worker's direct channel. While waiting, ping the
        dispatcher now and then: a dispatcher that stops answering pings is reported within ``LIVENESS_S``, however
        long the work itself takes, and a worker that a direct answer waits on is reported lost (``WorkerLost``) as
        soon as the dispatcher knows it is gone. ``timeout`` counts time without progress: a ping's answer that shows
        one of the session's batches finished since the last one starts it again (work still running is not a
        timeout), and the error names what a worker has been running when nothing finished. ``spin``: False for a
        wait known to be long (the relay's window), which blocks at once rather than busy-wait."""
        timeout = REQUEST_TIMEOUT_S if timeout is None else timeout
        start = time.monotonic()
        ping_sent = None
        finished = progress = None  # the last pong's batches finished per device, and its whole report
        before = self._async_before[1] if self._async_before[0] == q else self._n_async
        # (spare_core reads the load average: not asked when spinning is off)
        spin = CLIENT_SPIN_S if spin and CLIENT_SPIN_S > 0 and before - self._n_async_done <= SPIN_AHEAD_MAX \
            and spare_core(start) else 0.0
        alone = True  # an answer due on a channel is waited for on that channel alone first (Channel.wait_answer)
        for _ in range(1 << 24):
            now = time.monotonic()
            if now - start > timeout:
                raise TimeoutError_(self._timeout_message(timeout, progress))
            # this thread holds the lock the lease thread needs, and a channel's messages (answers to other
            # batches) may keep the poll below from ever timing out into a ping
            self._renew_if_due(now)
            if ping_sent is not None and now - ping_sent > LIVENESS_S:
                self._lost = True
                raise ConnectionFailed(f"lost the dispatcher at {self.address}: it stopped answering "
                                       f"(no reply to a ping within {LIVENESS_S:g}s)")
            held = None  # the message a read of the awaited channel alone brought
            ch = self._plane.channels.get(self._q_dev.get(q)) if alone else None
            if ch is not None and ch.ok and ch.sock is not None:  # (an answer due on one channel: watch it alone)
                try:
                    held = ch.wait_answer(spin, self._others_waiting)
                except LaneClosed as e:
                    self._lane_closed(e.device, q)
                    continue
                if held is False:  # (nothing within its bounds: from now on every socket, at once)
                    alone, spin = False, 0.0
                    continue
            elif not spin_wait(self._poller.poll, spin) and not self._poller.poll(int(PING_AFTER_S * 1000)):
                if ping_sent is None:
                    ping = {"t": "ping", "q": _PING, "k": self._key}
                    if self._q_dev:  # answers due on direct channels: ask whether their workers still live
                        ping["w"] = [[d, self._plane.channels[d].wid] for d in set(self._q_dev.values())
                                     if d in self._plane.channels]
                    try:  # (never blocks: a queue too full to take a ping is a dispatcher not reading, which the
                        self._sock.send(pack_header(ping), zmq.NOBLOCK)  # liveness bound above then reports)
                    except zmq.Again:
                        pass
                    ping_sent = time.monotonic()
                continue
            if self._waker.is_set and self._waker.take():  # tw.cancel() from another thread: this thread owns the
                self._send_cancel()  # socket
            for k in range(64):  # what is waiting on every socket (bounded: then poll again)
                try:
                    got = self._next_message(self._q_dev.get(q) if k == 0 else None, held if k == 0 else None)
                except LaneClosed as e:
                    self._lane_closed(e.device, q)
                    continue
                if got is None:
                    if k == 0 and self._waker.take():  # (woken by the waker's pipe alone: drained here)
                        self._send_cancel()
                    break
                h, frames, dev = got
                t, hq = h.get("t"), h.get("q")
                if t == "done" and hq == q:  # (the commonest: the awaited answer of a worker)
                    self._n_async_done = max(self._n_async_done, before)
                    self._q_dev.pop(q, None)
                    return h, frames
                if type(hq) is int and hq != q and hq in self._ahead_q:  # (values asked back ahead: kept for reads)
                    self._q_dev.pop(hq, None)
                    self._take_ahead(h, frames)
                    continue
                if t == "progress":  # a worker's download for one of this session's hub loads
                    self._on_progress(h)
                    continue
                if hq == _PING and dev is None:
                    ping_sent = None
                    if isinstance(h.get("error"), dict):  # the session is gone: nothing it waits for will come
                        self._q_dev.pop(q, None)
                        raise self._error(h["error"])
                    if h.get("lost"):
                        self._workers_lost(h["lost"], q)
                    if isinstance(h.get("progress"), dict):
                        counts = {d: v[0] for d, v in h["progress"].items() if isinstance(v, list) and v}
                        if finished is not None and counts != finished:
                            start = time.monotonic()  # the session's work is moving: the timeout counts from here
                        finished, progress = counts, h["progress"]
                    continue
                if dev is not None and t == "need_plan":  # the worker evicted a plan it was sent
                    self._resend_plan(dev, h.get("plan"))
                    continue
                if dev is not None and t == "error" and (h.get("error") or {}).get("code") == "Unauthorized":
                    self._q_dev.pop(q, None)
                    raise self._refused(dev, h["error"])
                if hq == q:
                    self._n_async_done = max(self._n_async_done, before)  # (a session's messages run in order)
                    self._q_dev.pop(q, None)
                    if self._relay.marks:  # (a relayed sync: it covers the relayed batches before it)
                        self._relay.answered(q)
                    if t == "error":
                        raise self._error(h["error"])
                    return h, frames
                if dev is None and type(hq) is int and hq in self._relay.marks:  # a mark's answer (RelayWindow)
                    self._relay.answered(hq)
                    self._carry_answer(h)
                    continue
                if t == "error" and hq is None:
                    raise self._error(h["error"])
        raise ProtocolError("too many unrelated messages")

    def _lane_closed(self, dev: str | None, q: int) -> None:
        """``dev``'s worker closed this session's same-host lane (``protocol/lane.py``): it exited, or dropped the
        session. As :meth:`_workers_lost` (a ZeroMQ channel learns the same from the dispatcher's next pong, later)."""
        if dev is not None:
            self._workers_lost([dev], q, "its worker closed the same-host lane (the worker exited, or dropped this "
                               "session)", "the worker for {dev} closed this session's lane while it waited for it")

    def _others_waiting(self) -> bool:
        """Whether a wait on one channel alone must look elsewhere: a cancel from another thread, or a message on the
        dispatcher's socket (no system call for the first)."""
        return self._waker.is_set or bool(self._sock.getsockopt(EVENTS) & POLLIN)

    def _next_message(self, likely: str | None = None, held=None):
        """One message waiting on the dispatcher's socket or a channel: ``(header, frames, device)`` (device None:
        the dispatcher's), or None when nothing is waiting. ``likely``: the device whose channel the awaited answer
        comes on, read first, without asking its socket whether a message is there (a wait woke: it usually is);
        ``held``: that channel's message when the wait read it already (a list of frames)."""
        if likely is not None:
            ch = self._plane.channels.get(likely)
            if ch is not None and ch.sock is not None:
                msg = held if type(held) is list else None
                if msg is None:
                    try:
                        msg = recv_frames(ch.sock, NOBLOCK)
                    except zmq.Again:
                        pass
                if msg is not None:
                    got = self._from_channel(likely, ch, msg)
                    if got is not None:
                        return got
        if self._sock.getsockopt(EVENTS) & POLLIN:
            h, frames = self._recv_raw()
            return h, frames, None
        for dev, ch in self._plane.channels.items():
            sock = ch.sock
            if sock is not None and ch.ok and sock.getsockopt(EVENTS) & POLLIN:  # (a hello's answer: _ready_channel)
                got = self._from_channel(dev, ch, recv_frames(sock))
                if got is not None:
                    return got
        return None

    @staticmethod
    def _from_channel(dev: str, ch, msg: list):
        """``(header, frames, dev)`` of a message read from ``dev``'s channel; None (logged) when it is malformed."""
        try:
            h = unpack_header(msg[0].bytes)
        except ProtocolError:
            _log.warning("dropped a malformed message from the worker for %s", dev)
            return None
        ch.answered(h.get("q"))
        return h, msg[1:], dev

    def _workers_lost(self, lost: list, q: int, why: str = "its worker was lost",
                      waited_why: str = "the worker for {dev} was lost while this session waited for it") -> None:
        """The workers of the devices ``lost`` are gone (the dispatcher says so, or another process serves the device
        now): their channels go, with the tensors made on them; the answer ``q``, when it was due on one of them,
        fails with ``WorkerLost`` (``waited_why``, of that ``dev``, says how)."""
        waited = self._q_dev.get(q)
        for dev in lost:
            if isinstance(dev, str) and dev in self._plane.channels and dev != waited:
                self._drop_channel(dev, why, lost=True)
        if waited in lost:
            self._q_dev.pop(q, None)
            raise self._channel_lost(waited, why, f"{waited_why.format(dev=waited)}; tensors on {waited} are lost")

    def _refused(self, dev: str, err: dict) -> TensorwireError:
        """A worker refused this session's capability: another worker process serves the device now (a restart on
        the same address), or that worker registered with a new dispatcher. Either way this session's tensors there
        are gone: the channel is dropped (a new grant comes at the next use) and the wait fails with WorkerLost. A
        worker that says the session is closed heard so from the dispatcher (a lease that ran out, a close): the
        dispatcher's own answer to a sync says why, and is the error."""
        if err.get("message") == "this session is closed":
            self._drop_channel(dev, "its session is closed")
            try:
                self._relay_sync()
            except TensorwireError as e:
                return e
        return self._channel_lost(dev, f"its worker refused the capability: {str(err.get('message'))[:200]}",
                                  f"the worker for {dev} restarted or changed: tensors on {dev} are lost")

    def _channel_lost(self, dev: str, why: str, message: str) -> TensorwireError:
        """``dev``'s worker is gone with this session's tensors: drop its channel (and those tensors, reported to the
        dispatcher as lost) and forget the cached scalars there; the ``WorkerLost`` to raise."""
        self._drop_channel(dev, why, lost=True)
        err = WorkerLost(message, device=dev).to_wire()
        self._forget_lost([err])
        self._note_raised(err)
        # (the dispatcher's own notice of this loss, worded its way, comes with a later answer: not raised again)
        self._raised[(WorkerLost.code, _LOST_AT, dev)] = None
        return self._error(err)

    def _drop_channel(self, dev: str, why: str, lost: bool = False) -> None:
        ch = self._plane.channels.get(dev)
        if ch is not None and ch.sock is not None and ch.ok:
            self._poller.unregister(ch.sock)
        self._plane.drop(dev, why, lost)
        for k in [k for k, d in self._q_dev.items() if d == dev]:
            del self._q_dev[k]

    def watch_progress(self, sink) -> int:
        """Register ``sink`` (a callable taking a :class:`tensorwire.progress.DownloadProgress`) for the reports of
        one hub load; returns the id its ``hub_tensor`` ops carry as ``progress``. Reports reach the sink while this
        session waits for an answer. The newest ``MAX_PROGRESS_SINKS`` loads are kept."""
        pid = next(self._progress_ids)
        self._progress[pid] = sink
        if len(self._progress) > MAX_PROGRESS_SINKS:
            _close_sink(self._progress.pop(next(iter(self._progress))))
        return pid

    def _on_progress(self, h: dict) -> None:
        """Hand a progress report to its load's sink; a malformed one, or one for no load of ours, is dropped."""
        fields = check_progress(h)
        device = h.get("device")
        if fields is None or type(device) is not str:
            _log.warning("dropped a malformed progress report from the dispatcher")
            return
        sink = self._progress.get(fields["id"])
        if sink is None:
            return
        try:
            sink(_progress_event(device, fields))
        except Exception:  # the user's callback never breaks the wait for an answer
            _log.warning("a progress callback raised; it gets no more reports", exc_info=True)
            self._progress.pop(fields["id"], None)

    def _error(self, err: dict) -> TensorwireError:
        self._forget_lost([err])
        node = err.get("node")
        where = self._where_of(node)
        origin = err.get("origin")
        e = error_from_wire(err, where=_fmt_where(where))
        if origin is not None and origin != node and self._where_of(origin):
            e.message = f"{e.message} [failing op recorded at {_fmt_where(self._where_of(origin))}]"
            e.args = (e._text(),)
        return e

    def _where_of(self, node: int | None):
        """The user's (file, line) that recorded ``node``: a batch's node, or a node of a compiled graph's replay."""
        if node is None:
            return None
        where = None
        for outs, lines in reversed(self._where):
            if node in outs:
                where = lines[outs.index(node)]
                break
        if where is None:
            for first, lines in self._replayed:
                if first <= node < first + len(lines):
                    return lines[node - first]
        return where

    def _check_open(self):
        if self.closed:
            raise TensorwireError("this session is closed")

    # ------------------------------------------------------------------ recording
    def record(self, op: str, inputs, attrs: dict | None, device: str, known=None, where=None, hid=None, up=1,
               lazy: bool = False, then: tuple | None = None, akey=None):
        """Record one op; returns the output Tensor (shape and dtype inferred here).

        ``known``: ``(attrs_key, (shape, dtype))`` of a node whose inference the caller has done before for inputs
        of the same shapes (a replayed backward graph); ``where``: the user's (file, line) it comes from, when the
        caller knows it; ``up``: where the search for that line starts, in frames above this method (1: its caller;
        only frames of the client's own functions may be skipped, see :func:`_user_frame`); ``akey``: the attrs key
        of ``attrs``, when the caller made it once for many nodes (an optimizer's updates, a clipping's), without
        ``known`` (the output's meta is then inferred, memoised, checking the inputs' shapes). All four only save
        work. ``hid``: the output's handle, taken before (a run of element writes, ``client/element_writes.py``).

        ``lazy``: the node may stay unrecorded until something needs it (a view step without autograd, see
        :meth:`_defer`); an integer or bool result of :data:`LAZY_HOST_OPS` the client can compute is deferred too.
        ``then``: ``(op, attrs, known)`` of a second node that reads this one's result and gives the returned tensor
        (a slice then its reshape, ``x[i]``): while lazy the two are one deferred node (one tensor, one handle), the
        first one's handle made only when they are recorded; otherwise two nodes recorded one after the other."""
        if then is not None and (not lazy or self._capture is not None):
            first = self.record(op, inputs, attrs, device, known, where, up=up + 1, lazy=lazy)
            return self.record(then[0], [first], then[1], device, then[2], where, up=up + 1, lazy=lazy)
        metas = []
        ids = []
        for t in inputs:
            b = t._base
            if b is not None and b._version != t._base_version:  # (a view whose base changed: recomputed)
                t._refresh()
            if t._s is not self or (t._dev != device and op != "copy"):
                _input_error(self, t, device)
            metas.append((t._shape, t.dtype))
            ids.append(t._id)
        if known is None:
            if akey is None and attrs:
                akey = attrs_key(op, attrs)
            shape, dtype = infer(op, metas, attrs, akey)
        else:
            akey, (shape, dtype) = known
        if deterministic_check is not None:
            deterministic_check(op, attrs, device, dtype)
        if hid is None:
            hid = next(self._ids)
        capture = self._capture
        if capture is None:
            # small integer values the client knows: their results too (known_values); and a constant or a copy of
            # values it holds, of any dtype (HELD_OPS: a row it fills; not a floating 0-d ``full``, a scalar operand)
            if op in HOST_OPS and not dtype.is_floating_point or op in HELD_OPS and then is None \
                    and (op != "full" or shape) and all(map(self.holds, inputs)):
                if self._known.compute(hid, op, inputs, attrs, shape, dtype):
                    if op in LAZY_HOST_OPS:
                        lazy = True  # (its value is the client's to give: deferred)
                    elif op in HELD_OPS and not lazy:
                        value = self._known.peek(hid)
                        if value is not None:  # (a row written or joined from held values: an upload if ever read)
                            return self._hold(hid, value, shape, dtype, device)
            if lazy:
                return self._defer(hid, op, ids, attrs, device, metas, akey, shape, dtype, then)
        if where is None:
            where = _user_frame(up + 1)
        run = self._writes
        if run is not None:  # (end_writes, given this op's line: the run's nodes name it, found once)
            self._writes = None
            run.record(where)
        if self._mark:
            self._ship_marked()
        lazy_nodes = self._lazy
        if lazy_nodes and not lazy_nodes.keys().isdisjoint(ids):
            ids = self._resolve(ids, where)
        # (the input ids as a tuple: of ints only, the collector stops tracking it, so a batch's entries that outlive
        # a young collection hold fewer tracked containers; the full collections they would set off cost more than
        # a recorded op)
        entry = (hid, op, tuple(ids), attrs, device, where, metas, akey)
        pending = self._pending
        pending.append(entry)
        t = _new_tensor(Tensor)
        t._init(self, hid, shape, dtype, device)
        if capture is not None:
            capture.on_record(entry, t, inputs)
        elif not shape and op != "full":  # a 0-d result: read along with the next value read (see fetch)
            self._scalar_made(hid, device)
        if len(pending) >= MAX_PENDING_NODES:
            self.flush()
        return t

    def record_graph(self, nodes, vals: list, devs: list, known: list, keep, host, where, plan=None) -> list:
        """Record a graph whose every node's attrs key and output meta are known (a replayed backward graph,
        ``autograd_engine._phase``): ``nodes`` as ``[op, refs, attrs, device index]`` (``refs``: ``j >= 0`` the output
        of node ``j``, ``-(k + 1)`` tensor ``k`` of ``vals``), ``known`` one ``(attrs key, (shape, dtype))`` per node,
        all from the user's line ``where``. Returns per node its output tensor when its index is in ``keep``, else None:
        the other outputs are only read by later nodes of the graph and released once it is recorded.

        It records what ``record(op, ins, attrs, devs[d], known[k], where)`` for each node in turn records, with the
        work that cannot change between the nodes done once, and no tensor made for an output nobody keeps. The
        nodes in ``host`` (``autograd_engine.host_nodes``: their values may be the client's) go through :meth:`record`,
        and must be in ``keep`` with their inputs; in ``tw.compile``'s capture every node does (all outputs then get
        tensors). ``plan``: :meth:`graph_plan` of the graph, which a caller that records it again keeps (made here
        when not given)."""
        if self._capture is not None:
            out: list = []
            for (op, refs, attrs, d), kn in zip(nodes, known):
                out.append(self.record(op, [out[r] if r >= 0 else vals[-r - 1] for r in refs], attrs, devs[d], kn,
                                       where))
            return out
        if deterministic_check is not None:
            for (op, _, attrs, d), (_, (_, dtype)) in zip(nodes, known):
                deterministic_check(op, attrs, devs[d], dtype)
        if self._writes is not None:
            self.end_writes()
        if self._mark:
            self._ship_marked()
        if plan is None:
            plan = self.graph_plan(nodes, devs, known, keep, host)
        if plan.whole:
            tensors = self._record_whole(plan, nodes, vals, devs, known, where)
            if tensors is not None:
                return tensors
        out_ids: list[int] = []  # per node: its output's handle
        tensors: list = []
        pending = self._pending
        lazy_nodes = self._lazy
        counter = self._ids
        for j, p in enumerate(plan.steps):
            if p is not None:  # (inputs all made here, no check to make: the node's entry as it is planned)
                op, attrs, device, akey, meta, metas, getter, r0, kept = p
                hid = next(counter)
                pending.append((hid, op, getter(out_ids) if getter is not None else (out_ids[r0],), attrs, device,
                                where, metas, akey))
                out_ids.append(hid)
            else:
                op, refs, attrs, d = nodes[j]
                device = devs[d]
                if j in host:
                    t = self.record(op, [tensors[r] if r >= 0 else vals[-r - 1] for r in refs], attrs, device,
                                    known[j], where)
                    out_ids.append(t._id)
                    tensors.append(t)
                    pending = self._pending
                    continue
                akey, meta = known[j]
                metas = []
                ids = []
                for r in refs:
                    if r >= 0:  # (a handle made here, on its node's device)
                        rdev = devs[nodes[r][3]]
                        if rdev != device and op != "copy":
                            raise _devices_differ(device, rdev)
                        metas.append(known[r][1])
                        ids.append(out_ids[r])
                        continue
                    t = vals[-r - 1]  # (record's checks of an input tensor)
                    b = t._base
                    if b is not None and b._version != t._base_version:
                        t._refresh()
                    if t._s is not self or (t._dev != device and op != "copy"):
                        _input_error(self, t, device)
                    metas.append((t._shape, t.dtype))
                    ids.append(t._id)
                hid = next(counter)
                if lazy_nodes and not lazy_nodes.keys().isdisjoint(ids):
                    ids = self._resolve(ids, where)
                pending.append((hid, op, tuple(ids), attrs, device, where, metas, akey))
                out_ids.append(hid)
                kept = j in keep
            if kept:
                shape, dtype = meta
                t = _new_tensor(Tensor)
                t._init(self, hid, shape, dtype, device)
                tensors.append(t)
                if not shape and op != "full":  # (record's: a 0-d result read along with the next value read)
                    self._scalar_made(hid, device)
            else:
                tensors.append(None)
            if len(pending) >= MAX_PENDING_NODES:
                self.flush()
                pending = self._pending
        if not self.closed:  # (the outputs no tensor holds: released as their tensors would be)
            self._release += [h for h, t in zip(out_ids, tensors) if t is None]
        return tensors

    def _record_whole(self, plan: GraphPlan, nodes, vals: list, devs: list, known: list, where) -> list | None:
        """:meth:`record_graph`'s recording in one pass, when the node-by-node one would find nothing to check,
        resolve or flush on the way: every tensor of ``vals`` is this session's, on the device its readers need, no
        view behind its base, no lazy node, and of the meta it had when ``plan.entries`` were made (then the graph's
        entries are its templates with the handles filled in, numbered as one after the other, and the pending batch
        has room for them all). None, having recorded nothing, otherwise."""
        n = len(nodes)
        pending = self._pending
        if len(pending) + n >= MAX_PENDING_NODES:
            return None
        vids = []
        for t in vals:
            b = t._base
            if t._s is not self or (b is not None and b._version != t._base_version):
                return None
            vids.append(t._id)
        lazy_nodes = self._lazy
        if lazy_nodes and not lazy_nodes.keys().isdisjoint(vids):
            return None
        if plan.entries is None:
            plan.make_entries(nodes, vals, devs, known)
        vmeta = plan.vmeta
        if len(vals) != len(vmeta):
            return None
        for t, (shape, dtype, dev) in zip(vals, vmeta):
            if t._shape != shape or t.dtype is not dtype or (dev is not None and t._dev != dev):
                return None
        first = self.take_ids(n)
        hids = (*range(first, first + n), *reversed(vids))  # (``hids[r]``: node ``r``'s handle, or ``vals[-r - 1]``'s)
        ops, getters, attrs, devices, metas, akeys = plan.entries
        # (the entries made by zip, each node's input handles by its getter: no bytecode runs per node)
        pending += zip(range(first, first + n), ops, map(call, getters, repeat(hids, n)), attrs, devices,
                       repeat(where, n), metas, akeys)
        tensors: list = [None] * n
        for j, op, shape, dtype, device in plan.kept:
            hid = first + j
            t = _new_tensor(Tensor)
            t._init(self, hid, shape, dtype, device)
            tensors[j] = t
            if not shape and op != "full":  # (record's: a 0-d result read along with the next value read)
                self._scalar_made(hid, device)
        if not self.closed:  # (the outputs no tensor holds: released as their tensors would be)
            self._release += [first + j for j in plan.drop]
        return tensors

    @staticmethod
    def graph_plan(nodes, devs: list, known: list, keep, host) -> GraphPlan:
        """What :meth:`record_graph` does for each node of a graph that the graph alone fixes (its arguments but
        ``vals`` and ``where``), as a :class:`GraphPlan`. Its ``steps``: per node ``(op, attrs, device, attrs key, meta,
        input metas, getter, ref, kept)`` when every input is the output of an earlier node of the graph on the node's
        device (or the node is a ``copy``) that is not in ``host`` (so never a lazy handle): its entry needs the input
        handles alone (``getter(handles)``, or the handle of ``ref`` for one input), and ``kept``: whether it is in
        ``keep``. None for the other nodes, recorded with :meth:`record`'s checks. (The input metas list is shared by
        the entries of every recording of the graph: an entry's fields are never changed.)"""
        steps: list = []
        for j, ((op, refs, attrs, d), (akey, meta)) in enumerate(zip(nodes, known)):
            device = devs[d]
            if j in host or not refs or any(r < 0 or r in host or (devs[nodes[r][3]] != device and op != "copy")
                                            for r in refs):
                steps.append(None)
                continue
            getter = itemgetter(*refs) if len(refs) > 1 else None
            steps.append((op, attrs, device, akey, meta, [known[r][1] for r in refs], getter, refs[0], j in keep))
        return GraphPlan(steps, nodes, devs, known, keep, host)

    # (lazy nodes: a node made by :meth:`record` with ``lazy`` or a known integer result is kept here, unrecorded, and
    # recorded only when a recorded node reads it (:meth:`_resolve`), its value is fetched from a device, or a compiled
    # graph reads it; one never needed is dropped when its handle is released. The handles it reads are pinned: their
    # releases wait in ``_held`` until no lazy node reads them, so a node recorded late still finds its inputs.)
    def _defer(self, hid: int, op: str, ids: list, attrs, device: str, metas: list, akey, shape: tuple, dtype,
               then: tuple | None = None):
        """Keep node ``hid`` unrecorded (see above); returns its tensor. ``then``: :meth:`record`'s (a second node
        on this one's result, whose result ``hid`` and the tensor are; its inference given by its ``known``)."""
        pins = self._pins
        for i in ids:
            pins[i] = pins.get(i, 0) + 1
        if then is not None:
            op2, attrs2, (akey2, (shape2, dtype2)) = then
            then = (op2, attrs2, akey2, [(shape, dtype)])
            shape, dtype, alias = shape2, dtype2, None
        else:
            alias = ids[0] if op == "reshape" and metas[0][0] == shape else None  # (an alias: read as its input)
        self._lazy[hid] = (op, tuple(ids), attrs, device, metas, akey, alias, then)
        t = _new_tensor(Tensor)
        t._init(self, hid, shape, dtype, device)
        return t

    def holds(self, t) -> bool:
        """Whether the client holds tensor ``t``'s value and no device has it yet: ``t`` is a lazy node (an upload
        :meth:`hold` keeps, a ``full``, a view of such a value) of a root no device has either, that autograd does
        not track. An op of such values that only copies elements (``known_values.HELD_OPS``) is worked out here;
        one that reads a value a device has already is the device's to run (nothing to upload)."""
        lazy = self._lazy
        b = t._base
        return t._id in lazy and (b is None or b._id in lazy) and not requires_grad_of(t)

    def hold(self, array: np.ndarray, dtype, device: str):
        """A new tensor of ``array`` (of ``dtype``'s numpy type; small: at most ``known_values.SMALL_BYTES``, the
        session's own from now on) on ``device``, which the client holds (see :meth:`_hold`). Outside ``tw.compile``'s
        capture only (a trace records its constants)."""
        hid = next(self._ids)
        self._known.put(hid, array)
        value = self._known.peek(hid)
        if value is None:  # (too large to hold: an upload now)
            return self.const(array, device, dtype)
        return self._hold(hid, value, tuple(array.shape), dtype, device)

    def _hold(self, hid: int, value: np.ndarray, shape: tuple, dtype, device: str):
        """Tensor ``hid`` of ``value`` (read-only, the session's own; ``known_values`` keeps it), which the client
        holds: a lazy upload (a ``const`` node), sent with the first batch that reads it and never if none does (the
        ``zeros`` rows a dataset fills, and the ``stack`` that batches them, go as one upload of the batch)."""
        if value.ndim and not value.flags.c_contiguous:
            value = np.ascontiguousarray(value)
        if len(self._release) >= MAX_HELD_RELEASES:  # (the dead ones' values go: see MAX_HELD_RELEASES)
            self.flush()
        self._lazy[hid] = ("const", (), {"shape": list(shape), "dtype": dtype.name, "frame": value}, device, (), None,
                           None, None)
        t = _new_tensor(Tensor)
        t._init(self, hid, shape, dtype, device)
        return t

    def defer(self, op: str, inputs, attrs, device: str, known: tuple, then: tuple | None = None, value=None):
        """The lazy node ``record(op, inputs, attrs, device, known, lazy=True, then=then)`` makes outside
        ``tw.compile``'s capture, for a caller that has checked what ``record`` checks (every input is this session's,
        on ``device``, and no input is a view whose base changed) and, for a :data:`HOST_OPS` op, computed its value:
        ``value`` (kept by ``known_values``). The fast paths of basic indexing, iteration and integer arithmetic on
        known values (``client/indexing.py``, ``client/known_values.py``) make their nodes here."""
        hid = next(self._ids)
        if value is not None:
            self._known.put(hid, value)
        akey, (shape, dtype) = known
        ids, metas = [], []
        for t in inputs:
            ids.append(t._id)
            metas.append((t._shape, t.dtype))
        return self._defer(hid, op, ids, attrs, device, metas, akey, shape, dtype, then)

    def defer_view(self, op: str, x, attrs, known: tuple, then: tuple | None = None):
        """:meth:`defer` of a node of one input ``x`` (a view of ``x``, ``client/views.py``'s shortcuts): the same
        lazy node, made in one step. A view of a tensor of :meth:`small_data` (``as_tensor(mean).view(-1, 1, 1)``)
        is a constant too: kept and aliased as that one is, so no node is recorded for it after the first."""
        xid = x._id
        if self._small_roots and self._capture is None:
            node = self._lazy.get(xid)
            if node is not None and node[6] in self._small_roots:
                t = self._small_view(node[6], op, attrs, known, then)
                if t is not None:
                    return t
        hid = next(self._ids)
        pins = self._pins
        pins[xid] = pins.get(xid, 0) + 1
        akey, (shape, dtype) = known
        metas = [(x._shape, x.dtype)]
        if then is not None:
            op2, attrs2, (akey2, (shape2, dtype2)) = then
            then = (op2, attrs2, akey2, [(shape, dtype)])
            shape, dtype, alias = shape2, dtype2, None
        else:
            alias = xid if op == "reshape" and x._shape == shape else None  # (an alias: read as its input)
        device = x._dev
        self._lazy[hid] = (op, (xid,), attrs, device, metas, akey, alias, then)
        t = _new_tensor(Tensor)
        t._init(self, hid, shape, dtype, device)
        return t

    def known_int64(self, value: int, device: str):
        """A new 0-d int64 tensor of ``value`` (an int in int64's range) on ``device`` whose value the client knows:
        ONE lazy ``full`` node (the node :meth:`scalar` makes for a Python int; ``known_values.int64_node``), never
        recorded unless a recorded node reads it, and then it gives ``value``; no input pinned. The 0-d int64 values
        the client computes or reads off a known tensor (``i + 8``, the elements of an iterated ``ix``:
        ``known_values.known_int_op``, ``indexing.iter_known``) are made here, outside ``tw.compile``'s capture:
        :meth:`defer`'s node and the known value, in one step (``KnownValues.put_int64``: a loader makes a few hundred
        a step)."""
        hid = next(self._ids)
        self._lazy[hid] = self._known.put_int64(hid, value, device)
        t = _new_tensor(Tensor)
        t._init(self, hid, (), _INT64, device)
        return t

    def _resolve(self, ids: list, where=None) -> list:
        """``ids`` (inputs of a node about to be recorded) with each lazy one recorded, or, for an alias (``t.data``,
        a reshape to the same shape), replaced by the handle it aliases (no node at all) outside ``tw.compile``.
        ``where``: the reading node's line, which the nodes recorded now name too (the line that needed them)."""
        lazy = self._lazy
        out = None
        for k, i in enumerate(ids):
            node = lazy.get(i)
            if node is None:
                continue
            if out is None:
                out = list(ids)
            while node is not None and node[6] is not None and self._capture is None:  # (an alias of an alias ...)
                i = node[6]
                node = lazy.get(i)
            if node is not None:
                self._materialize(i, where)
            out[k] = i
        return ids if out is None else out

    def _materialize(self, hid: int, where=None) -> None:
        """Record lazy node ``hid`` (and the lazy nodes it reads) now, naming line ``where`` (default: the caller's
        user's line)."""
        op, ids, attrs, device, metas, akey, _, then = self._lazy.pop(hid)
        if self._writes is not None:  # (a run of element writes makes a handle it may read: recorded first)
            self.end_writes()
        if where is None:
            where = _user_frame()
        lazy = self._lazy
        rids = self._resolve(ids, where) if lazy and not lazy.keys().isdisjoint(ids) else ids  # (record's test)
        if op == "const":  # (a held value: its bytes travel now)
            self._pending_bytes += attrs["frame"].nbytes
        if then is None:
            self._pending.append((hid, op, tuple(rids), attrs, device, where, metas, akey))
        else:  # (a pair: the first node's result gets a handle of its own, released once the second has read it)
            mid = next(self._ids)
            op2, attrs2, akey2, metas2 = then
            self._pending.append((mid, op, tuple(rids), attrs, device, where, metas, akey))
            self._pending.append((hid, op2, (mid,), attrs2, device, where, metas2, akey2))
            self._release.append(mid)
        self._unpin(zip(ids, repeat(1)))  # (pairs made by zip: no generator's frame run per input)

    def _unpin(self, counts) -> None:
        """Lazy nodes that read handles were recorded or dropped: ``counts`` gives ``(handle, how many of them read
        it)`` pairs (a handle may come more than once); a pinned handle whose tensor is gone goes now."""
        pins, held = self._pins, self._held
        for i, k in counts:
            n = pins[i] - k
            if n:
                pins[i] = n
                continue
            del pins[i]
            if i in held:
                held.discard(i)
                self._release.append(i)

    def _take_release(self) -> tuple[list[int], list[int]]:
        """The handles to release with the next message, and the lazy nodes dropped unrecorded (the handles of both
        are gone: ``known_values`` forgets them); a handle a lazy node still reads is held back (see above). A
        step's few hundred handles (a loader's slice bounds and windows, never recorded) are sorted out by set
        operations, not one at a time."""
        release, self._release = self._release, []
        pins, held, lazy = self._pins, self._held, self._lazy
        if not pins and not lazy:
            return release, []
        out, dropped = [], []
        while release:
            kept = pins.keys() & release if pins else None  # (pinned: held until no lazy node reads them)
            gone = lazy.keys() & release  # (lazy nodes never recorded: dropped)
            if kept:
                held.update(kept)
                gone -= kept
                kept |= gone
            else:
                kept = gone
            out += filterfalse(kept.__contains__, release) if kept else release
            if gone:
                dropped += gone
                # (the inputs of the nodes dropped in this round, unpinned together, after: a few one read at a
                # time, many counted first (a loader's hundreds of aliases read a few kept tensors: the MNIST
                # script's ~600 a step); a held handle this frees is in _release: the next round takes it)
                reads = list(chain.from_iterable(map(_ids_field, map(lazy.pop, gone))))
                if reads:
                    self._unpin(collections.Counter(reads).items() if len(reads) > UNPIN_ONE_BY_ONE
                                else zip(reads, repeat(1)))
            release, self._release = self._release, []
        return out, dropped

    def const(self, array: np.ndarray, device: str, dtype: D.DType | None = None, *, borrowed: bool = False,
              where=None, keep: bool = True):
        """Record a tensor whose bytes travel with the next batch (an upload).

        ``borrowed``: the array belongs to the caller, who may change it after this returns. A small one is
        copied; a large one is sent at once without a copy, and this returns once zmq has handed its bytes
        to the kernel (the upload is then synchronous, like torch's ``.to(device)``). ``where``: the user's line, when
        the caller has it (:meth:`record`'s). ``keep``: False when the client need not keep the value
        (``known_values``): a caller's operand that no host computation will read.
        """
        if self._writes is not None:
            self.end_writes()
        if self._mark:
            self._ship_marked()
        dt = D.from_numpy(array.dtype) if dtype is None else dtype
        if array.dtype != dt.np:
            array = array.astype(dt.np)
            borrowed = False
        if not array.flags.c_contiguous:
            array = np.array(array, order="C")  # (np.ascontiguousarray would make a 0-d array 1-d)
            borrowed = False
        send_now = borrowed and array.nbytes >= ZERO_COPY_MIN
        if borrowed and not send_now:
            array = array.copy()
        if keep and not send_now and self._capture is None and array.nbytes <= SMALL_BYTES:  # (the session's own)
            return self.hold(array, dt, device)
        hid = next(self._ids)
        entry = (hid, "const", [], {"shape": list(array.shape), "dtype": dt.name, "frame": array}, device,
                 _user_frame() if where is None else where, (), None)
        self._pending.append(entry)
        self._pending_bytes += array.nbytes
        t = Tensor.__new__(Tensor)
        t._init(self, hid, tuple(array.shape), dt, device)
        if self._capture is not None:
            self._capture.on_record(entry, t, ())
        elif keep and not send_now:  # (the array is the session's own: copied, or made for this call)
            self._known.put(hid, array, MADE_BYTES)
        if send_now:
            with self._lock:
                self._flush([], False, wait_sent=True)
        elif self._pending_bytes >= MAX_PENDING_BYTES:
            self.flush()
        return t

    def scalar(self, value, dtype: D.DType, device: str):
        """A cached 0-d tensor for a Python scalar operand (so ``x + 1`` in a loop reuses it); keyed by
        :func:`~tensorwire.protocol.graph.freeze`, so ``-0.0`` and ``0.0`` are two tensors and a NaN is found again."""
        key = (type(value), value if type(value) is int else freeze(value), dtype.name, device)  # (freeze's own form)
        t = self._scalars.get(key)
        if t is None or t._s is not self:
            v = [value.real, value.imag] if isinstance(value, complex) else value  # (a complex attribute's form)
            attrs = {"shape": [], "dtype": dtype.name, "value": v}
            t = self.record("full", [], attrs, device)
            if len(self._scalars) >= 512:
                old = next(iter(self._scalars))
                del self._scalars[old], self._scalar_attrs[old]
            self._scalars[key] = t
            self._scalar_attrs[key] = dict(attrs)
        return t

    def small_data(self, key: tuple, make):
        """A new tensor of a small constant made from Python data, ``make()``'s value, or None the first time ``key``
        (the data frozen, the dtype asked for, the device) is asked for. Torchvision's ``Normalize`` makes
        ``as_tensor(mean)`` and ``as_tensor(std)``, and their views, for every image, and each was an upload of its
        own (a ``const`` and a ``reshape`` node, the bytes in a frame of their own: ~40 us a sample of the MNIST
        loader's ~110). From its second sighting (as ``memos.remember_again`` keeps a view step) the tensor is made
        and kept, as :meth:`scalar` keeps a Python scalar's, and every call returns a new tensor that aliases it
        (:meth:`_alias`); a view of such a tensor is kept and aliased the same way (:meth:`defer_view`). A key seen
        once is only noted (the most recent :data:`MAX_SMALL_SEEN`): a dataset that makes a tensor of each name's
        letter ids (``names_mlp.py``, thousands of different rows) kept, aliased and evicted one a sample, ~15%
        slower. Outside ``tw.compile``'s capture only (a trace records its constants)."""
        entry = self._small_data.get(key)
        if entry is None:
            seen = self._small_seen
            if key not in seen:
                if len(seen) >= MAX_SMALL_SEEN:
                    seen.clear()
                seen[key] = None
                return None
            del seen[key]
            entry = self._keep(key, make())
        return self._alias(entry)

    def _small_view(self, kid: int, op: str, attrs, known: tuple, then):
        """:meth:`defer_view`'s view of a tensor that aliases kept tensor ``kid`` (:meth:`small_data`): a new tensor
        aliasing the same view of the kept one, kept too, when it has at most ``SMALL_DATA_NUMBERS`` elements; else
        None (a view made as any other)."""
        key = (kid, op, known[0] if _STATIC_VIEWS.get(op) else freeze(attrs), then and (then[0], freeze(then[1])))
        entry = self._small_data.get(key)
        if entry is None:
            if numel((then[2] if then else known)[1][0]) > SMALL_DATA_NUMBERS:
                return None
            entry = self._keep(key, self.defer_view(op, self._small_roots[kid], attrs, known, then))
        return self._alias(entry)

    def _keep(self, key: tuple, kept) -> tuple:
        """Keep tensor ``kept`` for ``key`` (:meth:`small_data`; the oldest kept goes past :data:`MAX_SMALL_DATA`);
        returns its entry: the tensor and its aliases' lazy node."""
        shape = kept._shape
        attrs = {"shape": list(shape)}
        # (the aliases' lazy node, made once and shared by all of them: nothing changes a lazy node's fields)
        node = ("reshape", (kept._id,), attrs, kept._dev, [(shape, kept.dtype)], attrs_key("reshape", attrs), kept._id,
                None)
        entry = (kept, node)
        cache = self._small_data
        if len(cache) >= MAX_SMALL_DATA:
            self._small_roots.pop(cache.pop(next(iter(cache)))[0]._id, None)
        cache[key] = entry
        self._small_roots[kept._id] = kept
        return entry

    def _alias(self, entry: tuple):
        """A new tensor aliasing a kept tensor (``entry``: :meth:`_keep`'s): a lazy ``reshape`` to its own shape, read
        as the kept tensor (:meth:`_resolve`), so what it holds is uploaded or computed once, and an in-place update
        of one result (a new handle, as every in-place update) touches no other. The client knows its value when it
        knows the kept one's (``known_values``)."""
        kept, node = entry
        kid = kept._id
        hid = next(self._ids)
        pins = self._pins
        pins[kid] = pins.get(kid, 0) + 1
        meta = node[4][0]  # (the kept tensor's, the aliases' too)
        self._lazy[hid] = node
        t = _new_tensor(Tensor)
        t._init(self, hid, meta[0], meta[1], kept._dev)
        value = self._known.peek(kid)
        if value is not None:
            self._known.put(hid, value)
        return t

    def release(self, hid: int) -> None:
        """Called when a client tensor dies; the id travels with the next message."""
        if not self.closed:
            self._release.append(hid)

    # ------------------------------------------------------------------ shipping
    def flush(self, fetch: list[int] = (), sync: bool = False):
        """Ship the pending batch; with ``fetch`` or ``sync`` wait for and return the answer."""
        self._check_open()
        if fetch and self._capture is not None:
            self._capture.on_read(user_line(_user_frame()))  # (a value read while tw.compile records: data-dependent)
        with self._lock:
            if self._lazy:  # (a value read from a device: its node is recorded now)
                for i in fetch:
                    if i in self._lazy:
                        self._materialize(i)
            try:
                return self._flush(list(fetch), sync)
            except KeyboardInterrupt:  # Ctrl-C while waiting stops the work too, not only the wait
                self._send_cancel()
                raise

    def ship_forward(self) -> None:
        """Ship the pending batch now, without waiting, when it holds at least :data:`SHIP_FORWARD_NODES` nodes and
        ``tw.compile`` is not recording: ``Tensor.backward`` calls this before it records the backward pass, so the
        devices run the forward pass while the client records the rest of the step, instead of receiving the whole
        step when its loss is read (``loss.item()``, then answered as soon as the forward batch has run: the value
        is made before the batch that asks for it, ``Executor._early_slots``). Errors of the shipped nodes surface
        at the next answer, as for any batch shipped without one. Smaller batches wait: a short forward pass is
        not worth a message of its own.

        The batch asks back for its live 0-d results (a loss, the commonest value read after ``backward()``): the
        worker answers with them as soon as they are made, and nobody waits for that answer. The value read later
        (``loss.item()`` after ``backward()`` and the update) is then the client's: the work recorded since goes out
        without waiting, and the read waits only for the forward's answer, which has usually come meanwhile
        (:meth:`_value_ahead`), instead of a round trip behind the backward pass.

        With :data:`MAX_AHEAD` such answers unread, the loop does not read its values after each step (it reads its
        losses after the loop, or every so many steps): the forward asks for nothing and nothing waits for those
        answers, and only a forward of :data:`SHIP_UNREAD_NODES` nodes or more goes ahead, which the devices gain by
        starting early; a shorter one stays with the rest of its step, one message (a step in two messages costs
        the devices a message more and a plan split in two: the GCN script, which reads its losses after its loop,
        ran ~30% slower with its 12-node forward shipped ahead, whether or not it waited for the unread answers;
        the bidirectional LSTM's, hundreds of nodes, ~4% faster)."""
        n = len(self._pending)
        if n < SHIP_FORWARD_NODES or SHIP_FORWARD_NODES <= 0 or self._capture is not None or self.closed:
            return
        ask = len(self._ahead_q) < MAX_AHEAD
        if not ask and n < SHIP_UNREAD_NODES:
            return
        with self._lock:
            self._flush([], False, ahead=ask)

    def ship_backward(self) -> None:
        """Called by ``Tensor.backward`` once the backward pass is recorded: where batches holding this backward pass
        (the same ops) have been new structures :data:`SPLIT_AFTER_PLANS` times or more (a loop whose batches change
        shape, whose worker makes a plan for every step), the pending batch is shipped now, so that what the step
        records next (a gradient's clipping, the optimizer's update: the parameters' shapes, the same every step)
        goes as a batch of its own, whose plan is replayed rather than made again with the backward pass's (a
        char-level transformer's step: 157 nodes of backward pass, then 158 of clipping and AdamW). A loop of fixed
        shapes makes one or two such plans (Adam's first step makes its state), and keeps one message a step; the
        count only grows, so a loop that splits its steps splits every one of them, and its plans are the same from
        run to run. Its ops are taken only where a count may grow or may split it: a loop of fixed shapes, once its
        plans are made, pays nothing here. Not while ``tw.compile`` records."""
        pending = self._pending
        if self._capture is not None or self.closed or not pending:
            return
        ops = tuple(map(_op, pending)) if self._backward_splits else None
        # (the next batch sent holds this backward pass: _count_backward counts it if new)
        self._backward_pending = (pending, len(pending), ops)
        if ops is not None and self._backward_plans.get(ops, 0) >= SPLIT_AFTER_PLANS:
            with self._lock:
                self._flush([], False)

    def _count_backward(self, new: bool) -> None:
        """Count the backward pass the batch being sent holds (:meth:`ship_backward`'s) when the batch is a structure
        new to the session (``new``: a plan the worker makes)."""
        held, self._backward_pending = self._backward_pending, None
        if held is None or not new:
            return
        pending, n, ops = held
        if ops is None:
            ops = tuple(map(_op, pending[:n]))  # (the list the flush took: what followed the backward pass comes after)
        counts = self._backward_plans
        if len(counts) >= MAX_BACKWARD_KINDS and ops not in counts:
            counts.clear()
            self._backward_splits = False
        counts[ops] = count = counts.get(ops, 0) + 1
        if count >= SPLIT_AFTER_PLANS:
            self._backward_splits = True

    def mark_step(self) -> None:
        """Mark the end of a step (``optimizer.step()`` calls this): everything recorded so far is shipped, without
        waiting, as soon as the next op is recorded, so the devices run this step while the client records the
        next. The shipping waits for the next op rather than happening here so that a value fetched right after
        the step (``loss.item()``) can still go out ahead of the work recorded after it (see :meth:`_flush`)."""
        self._mark = True

    def _ship_marked(self) -> None:
        self._mark = False
        if self.closed:  # the next flush says so
            return
        with self._lock:
            self._flush([], False)

    def end_writes(self) -> None:
        """Record the run of element writes in progress, if any (``client/element_writes.py``)."""
        run, self._writes = self._writes, None
        if run is not None:
            run.record()

    def _flush(self, fetch: list[int], sync: bool, wait_sent: bool = False, ahead: bool = False):
        """Ship the pending batch, with the fetch or sync if any. A fetch of a value recorded before the end of the
        batch is answered as soon as the devices made it (``Executor._early_slots`` in the worker): they run the
        rest of the batch while the caller goes on with the value, and errors of that rest surface at the next sync
        point, as for any batch shipped without an answer. A compiled graph's replay waiting to go (:meth:`replay`)
        goes first, carrying the fetch or sync itself when nothing was recorded after it (one message for
        ``step(x); loss.item()``). While the relay's window is full (:class:`RelayWindow`) it first waits for answers,
        before it takes anything pending: a wait that ends in an error (a cancel, Ctrl-C) loses nothing. ``ahead``
        (without fetch or sync): the batch asks back for its live 0-d results, an answer nobody waits for
        (:meth:`ship_forward`)."""
        if self._relay.marks and self._relay.full():  # (back-pressure: too much relayed and not answered yet)
            self._relay_wait()
        if self._writes is not None:
            self.end_writes()
        self._mark = False
        pending, self._pending = self._pending, []
        self._pending_bytes = 0
        release, dropped = self._take_release()
        b = None  # (the batch's encoding, when made here)
        if release:
            # (one set of the released handles for every look-up below: each then walks the smaller of it and its own
            # table, a few entries, rather than the whole release list once per table)
            gone = set(release)
            self._known.forget(gone)
            if self._ahead:
                for hid in self._ahead.keys() & gone:
                    del self._ahead[hid]
            if self._scalars_made:
                self._forget_scalars(gone)
            if pending and self._capture is None:
                # (a structure seen before says from its unread nodes alone whether a node may be left out; another
                # is pruned first, and encoded as what is left)
                b = find_known(pending)
                if b is None or may_prune(b, gone):
                    kept, release = prune_dead(pending, release, gone)
                    if kept is not pending:
                        pending, b = kept, None
        if dropped:
            self._known.forget(dropped)
        if self._deferred is not None:
            ((part, ext, first, dyn, temps, frames), extra), self._deferred = self._deferred, None
            header = self._replay_header(part, ext, first, dyn, extra + release, temps)
            route = _replay_route(part, temps)
            made = {first + j: dev for j, dev in route[1]}
            release = []  # (applied after the replay's work, like every release)
            if not pending and (fetch or sync):
                header["fetch"], header["sync"] = fetch, sync
                return self._answered(self._post(header, frames, route[0], made, ext, fetch, reply=True), fetch, sync)
            self._post(header, frames, route[0], made, ext, ())
        if not pending and not fetch and not release:
            if not sync:
                return None
            if self._plane.direct and not self._plane.relay_unsynced:  # (nothing went through the dispatcher)
                self._sync_paths()
                return self._result({}, [], ())
        if not (fetch or sync):
            ids = self._ahead_ids(pending) if ahead else None
            if ids:
                q = self._send_batch(pending, ids, False, release, reply=True, wait_sent=wait_sent, b=b)
                self._ahead_q[q] = ids
                self._ahead.update(dict.fromkeys(ids, q))
                return None
            self._send_batch(pending, fetch, False, release, wait_sent=wait_sent, b=b)
            return None
        return self._answered(self._send_batch(pending, fetch, sync, release, reply=True, b=b), fetch, sync)

    def _answered(self, q: int, fetch: list[int], sync: bool):
        """Wait for the answer ``q`` of a message with a fetch or a sync. A sync rode with that message on its own
        path; the other paths the session used since their last sync are synced now (``_sync_paths``). Then the
        values, or the first error any of it reported."""
        direct = q in self._q_dev
        h, rframes = self._wait(q)
        if sync:
            if not direct:
                self._plane.relay_unsynced = False
            self._sync_paths()
        return self._result(h, rframes, fetch)

    def _send_batch(self, pending: list, fetch: list[int], sync: bool, release: list[int], *,
                    reply: bool = False, wait_sent: bool = False, b: Batch | None = None) -> int | None:
        """Send ``pending`` as one batch message (as a plan replay when its structure was sent before);
        with ``reply``, number it and return the number the answer will carry. ``b``: its encoding, when the caller
        made it."""
        if b is None:
            b = encode_known(pending)
        device = b.device  # (the structure's: kept if the nodes are made again below)
        where = self._where  # (each node's line, kept as the batch's two lists: no entry a node)
        where.append((b.outs, b.lines if b.nodes is None else list(map(_where_field, pending))))
        self._where_n += len(pending)
        while self._where_n > MAX_WHERE:
            self._where_n -= len(where.popleft()[0])
        header = {"t": "batch", "k": self._key, "ext": b.ext, "outs": b.outs, "fetch": fetch, "release": release,
                  "sync": sync}
        if self._prof is not None:  # a profile is open: number the batch, so every process's spans name it
            header["prof"] = self._prof.next_batch()
        if b.skey is not None:
            plan, new = self.plan_number(b.skey)
            if self._backward_pending is not None:
                self._count_backward(new)
            if new:
                if b.nodes is None:  # (a structure seen before whose plan was evicted since: its nodes travel again)
                    b = encode_batch(pending)
                header["nodes"] = b.nodes
                header["devs"] = b.devs
                self._plane.plan_nodes[plan] = (b.nodes, b.devs, len(b.ext))
            else:
                header["dyn"] = b.dyn
            header["plan"] = plan
        if self._drop_plans:
            header["drop_plans"], self._drop_plans = self._drop_plans, []
        size = sum(map(frame_nbytes, b.frames)) if b.frames else 0
        if size > MAX_MESSAGE:
            raise ProtocolError(f"a batch of {size} bytes exceeds the maximum message size of {MAX_MESSAGE} bytes "
                                f"(TENSORWIRE_MAX_MESSAGE); upload the data in smaller tensors")
        devs = b.devs
        made = dict.fromkeys(b.outs, devs[0]) if len(devs) == 1 else dict(zip(b.outs, map(_device_field, pending)))
        return self._post(header, b.frames, device, made, b.ext, fetch, reply=reply, wait_sent=wait_sent)

    # ------------------------------------------------------------------ paths (see channels.py)
    def _post(self, header: dict, frames, batch_dev: str | None, made: list, ext, fetch, *, reply: bool = False,
              wait_sent: bool = False) -> int | None:
        """Send a batch message (in the dispatcher's form) by the path its handles allow: the direct channel of
        the one device it touches, else the relay; fence first where the path of a device changes. ``made``: the
        handles it keeps, and their devices (a dict: merged into the plane's tables whole, no pass of Python calls a
        handle). With ``reply``, returns the number its answer carries."""
        plane = self._plane
        plane.made(made)
        dev = plane.direct_device(batch_dev, ext, fetch, header["release"])
        ch = self._ready_channel(dev) if dev is not None else None
        if ch is not None and dev not in plane.direct:  # relayed work may still be on its way to this worker: sync it
            if plane.relay_unsynced:
                self._relay_sync()
            if plane.channels.get(dev) is ch:
                plane.direct.add(dev)
            else:  # (the sync's wait heard that the worker is gone and dropped its channel: the relay reports it)
                ch = None
        if ch is not None:
            plane.used.add(dev)
        else:
            touched: set | None = set(made.values())  # (the devices it touches: None, any)
            loc = plane.loc
            for i in itertools.chain(ext, fetch, header["release"]):
                d = loc.get(i)
                if d is not None:
                    touched.add(d)
                elif i in ext or i in fetch:
                    touched = None
                    break
            for d in plane.touched_by_relay(touched):
                self._direct_sync(d)
        if ch is not None:
            # (before the releases: a handle this message makes and releases is then one the dispatcher never knew,
            # not a handle for it to forget, and leaves the table of channel-made handles with its release)
            plane.direct_made.update(made)
        plane.route_releases(header["release"])
        if ch is not None:
            msg = header.copy()  # (the dispatcher's fields dropped, in C)
            del msg["t"], msg["k"], msg["release"]
            msg.pop("drop_plans", None)
            msg["t"] = "run"
            msg["release"], ch.releases = ch.releases, []
            if not msg.get("sync"):
                msg.pop("sync", None)
            self._attach_plan(msg, dev)
            if ch.shm is not None:  # this host's shared memory: large values skip the socket
                if fetch:
                    msg["shm"] = SHM_MIN
                big = [k for k, f in enumerate(frames) if frame_nbytes(f) >= SHM_MIN] if frames else None
                if big:
                    frames = list(frames)
                    paths = self._shm_take(dev, ch, [frame_nbytes(frames[k]) for k in big])
                    msg["shm_frames"] = ch.write_frames(frames, paths, big)
            q = None
            if reply:
                q = msg["q"] = next(self._seq)
                self._q_dev[q] = dev
                self._async_before = (q, self._n_async)
            else:
                self._n_async += 1
            ch.send(msg, frames, wait_sent=wait_sent)
            # work on a channel says nothing to the dispatcher, and a program that sends it back to back holds the
            # lock the lease thread needs: the dispatcher expired such a busy session (a run of small direct batches
            # for over one lease period did)
            self._renew_if_due(time.monotonic())
            if header.get("drop_plans"):  # (the dispatcher's plans: it hears with the next relayed message)
                self._drop_plans = header["drop_plans"] + self._drop_plans
        else:
            rel, rlocs = plane.take_relay_releases()
            header["release"] = rel
            locs = plane.relay_locs(itertools.chain(ext, fetch))
            if rlocs:
                locs = locs or {}
                for d, ids in rlocs.items():
                    locs.setdefault(d, []).extend(ids)
            if locs:
                header["locs"] = locs
            if plane.forget:
                header["forget"], plane.forget = plane.forget, []
            if plane.lost:
                header["lost"], plane.lost = plane.lost, {}
            self._attach_plan(header, "relay")
            plane.relay_unsynced = True
            relay = self._relay
            if reply:  # (waited for now: counted only when it covers the batches before it, a sync)
                q = self._send_numbered(header, frames)
                if header.get("sync"):
                    relay.send(0)
                    relay.marked(q)
            else:
                q = None
                if relay.send(sum(map(frame_nbytes, frames)) if frames else 0):  # a mark (see RelayWindow): numbered,
                    header["sync"] = True  # answered once it ran; nobody waits for it now
                    relay.marked(self._send_numbered(header, frames, wait_sent=wait_sent))
                else:
                    self._send_async(header, frames, wait_sent=wait_sent)
        self._send_channel_releases(dev if ch is not None else None)
        if len(plane.relay_releases) > MAX_RELAY_RELEASES:
            self._post({"t": "batch", "k": self._key, "ext": [], "outs": [], "fetch": [], "release": [],
                        "sync": False}, (), "", {}, (), ())
        return q

    def _attach_plan(self, msg: dict, path: str) -> None:
        """A replay on a path that has not seen its plan (it went the other way so far) carries the plan's nodes."""
        plan = msg.get("plan")
        if plan is None:
            return
        paths = self._plane.plan_paths.setdefault(plan, set())
        if "nodes" in msg:
            paths.clear()
            if path == "relay":  # (its worker gets these nodes as they are: its channel need not carry them again)
                dev = self._plane.whole_on(msg)
                if dev is not None:
                    paths.add(dev)
        elif path not in paths:
            known = self._plane.plan_nodes.get(plan)
            if known is not None:
                msg["nodes"], msg["devs"] = known[0], known[1]
        paths.add(path)

    def _send_channel_releases(self, skip: str | None) -> None:
        """Releases of handles on direct-mode devices that this message did not go to: each goes now, alone."""
        for d, ch in self._plane.channels.items():
            if ch.releases and d != skip and d in self._plane.direct:
                rel, ch.releases = ch.releases, []
                ch.send({"t": "run", "release": rel})
                self._n_async += 1

    def _resend_plan(self, dev: str, plan) -> None:
        """A worker asked for a plan's nodes again (it evicted the plan): send them on its channel."""
        known = self._plane.plan_nodes.get(plan) if type(plan) is int else None
        ch = self._plane.channels.get(dev)
        if ch is None:
            return
        if known is None:  # (evicted here too: the waiting batch fails with NotFound, and says so)
            ch.send({"t": "plan", "plan": plan if type(plan) is int else -1, "nodes": [], "devs": []})
            return
        ch.send({"t": "plan", "plan": plan, "nodes": known[0], "devs": known[1], "ext": [0] * known[2]})

    def _ready_channel(self, dev: str, batch: bool = True):
        """``dev``'s channel, connected and with a capability good for a while; None: ``dev``'s work goes through
        the relay (no channel granted, its worker refused it, or has not answered its hello yet). A worker that
        does not answer within ``DIRECT_CONNECT_S`` keeps its channel: it may be busy (its main thread running
        work queued before the hello), and its answer, when it comes, is picked up here at a later batch, which
        then goes direct (behind ``_post``'s fence); one that has not answered within ``HELLO_WAIT_S`` is given up
        and tried again after ``RETRY_AFTER_S``. ``batch``: a batch for ``dev`` asks (counted when it is relayed)."""
        plane = self._plane
        ch = plane.channels.get(dev)
        if ch is not None and ch.ok and ch.expires - time.time() >= RENEW_BEFORE_S:
            return ch
        now = time.monotonic()
        if ch is None:  # none granted, or its worker was lost: ask again, now and then (a successor may serve it)
            if plane.dead_time(dev, now) or not plane.enabled:
                return None
            plane.retry_at[dev] = now + RETRY_AFTER_S  # (a grant is asked for this often at most)
        if ch is None or ch.expires - time.time() < RENEW_BEFORE_S:  # (about to run out: renewed)
            asked = ch is None
            h, _ = self._request({"t": "channel"})
            plane.grant(h.get("channels"))
            ch = plane.channels.get(dev)
            if ch is None:
                return None
            if asked:  # granted: its hello goes now
                plane.retry_at.pop(dev, None)
        if ch.ok:
            return ch
        wait = 0.0
        if ch.hello_q is None:
            if plane.dead_time(dev, now):  # (granted again with another device's renewal: not yet)
                return None
            ch.open(self._ctx)
            ch.hello_q, ch.hello_at = next(self._seq), now
            ch.send({"t": "hello", "q": ch.hello_q, "shm": SHM_MIN > 0, "lane": LANE_ENABLED})
            wait = DIRECT_CONNECT_S
        h = ch.hello_answer(wait)
        if h is not None and h.get("t") == "ok":
            ch.ok = True
            ch.check_shm(h.get("shm"))
            ch.unanswered = False
            ch.to_lane(h.get("lane"), next(self._seq), DIRECT_CONNECT_S)
            self._poller.register(ch.sock, zmq.POLLIN)
            if plane.why_relay.pop(dev, None) is not None:
                _log.info("%s goes direct: its worker answered after %.1fs", dev, time.monotonic() - ch.hello_at)
            return ch
        if h is not None:
            why = f"its worker refused the channel: {(h.get('error') or {}).get('message', h.get('t'))}"
        elif time.monotonic() - ch.hello_at > HELLO_WAIT_S:
            why = f"no answer from its worker's direct address {ch.address} within {HELLO_WAIT_S:g}s"
        else:  # (late: the worker may be busy; the channel waits for its answer)
            if batch:
                plane.relayed[dev] = plane.relayed.get(dev, 0) + 1
            if dev not in plane.why_relay:
                plane.why_relay[dev] = (f"waiting for its worker to answer on its direct address {ch.address} (no "
                                        f"answer within {DIRECT_CONNECT_S:g}s; a busy worker answers late): its "
                                        f"work goes through the dispatcher until it does")
                _log.info("%s goes through the dispatcher until its worker answers on %s", dev, ch.address)
            return None
        _log.warning("%s goes through the dispatcher: %s", dev, why)
        plane.drop(dev, why)
        plane.retry_at[dev] = time.monotonic() + RETRY_AFTER_S
        return None

    def _shm_take(self, dev: str, ch, sizes: list[int]) -> list[str]:
        """Files of these sizes, lent by ``dev``'s worker for an upload through shared memory."""
        h, _ = self._ask(dev, ch, {"t": "shm_take", "sizes": sizes})
        paths = h.get("paths")
        if not (isinstance(paths, list) and len(paths) == len(sizes)):
            raise ProtocolError(f"the worker for {dev} answered a shared-memory request with no files")
        return paths

    def _relay_sync(self) -> None:
        """Fence: wait until every batch relayed so far has run (their errors come with the next answer)."""
        rel, locs = self._plane.take_relay_releases()
        header = {"t": "batch", "k": self._key, "ext": [], "outs": [], "fetch": [], "release": rel, "sync": True}
        if locs:
            header["locs"] = locs
        self._relay.send(0)
        q = self._send_numbered(header)
        self._relay.marked(q)
        h, _ = self._wait(q)
        self._plane.relay_unsynced = False
        self._carry(h)

    def _relay_wait(self) -> None:
        """Back-pressure (:class:`RelayWindow`): wait for the oldest marks' answers until the next relayed batch may
        go (at the start of :meth:`_flush`, so the batch stays pending if it raises). It is a wait like any other
        (``_wait``): Ctrl-C stops it (and the work, see :meth:`flush`), a dispatcher that stops answering, a lost
        worker and the request timeout end it with their errors. The marks' errors are the next answer's, as a
        fence's; a cancel's is raised here, the wait being where the program is."""
        relay = self._relay
        relay.waits += 1
        while relay.full():
            h, _ = self._wait(relay.oldest(), spin=False)  # (behind a quarter of a window at least: no busy-wait)
            if any(type(e) is dict and e.get("code") == Cancelled.code for e in h.get("errors") or ()):
                self._result(h, [], ())
            self._carry(h)

    def _carry_answer(self, h: dict) -> None:
        """Keep the errors of an answer nobody waits for (a mark's: :class:`RelayWindow`) for the next answer."""
        if h.get("t") == "error":
            if isinstance(h.get("error"), dict):
                self._carried.append(h["error"])
        else:
            self._carry(h)

    def _direct_sync(self, dev: str) -> None:
        """Fence: wait until everything sent on ``dev``'s channel has run (its errors come with the next answer)."""
        ch = self._plane.channels.get(dev)
        if ch is None or ch.sock is None or not (ch.unanswered or ch.releases):
            return
        rel, ch.releases = ch.releases, []
        h, _ = self._ask(dev, ch, {"t": "run", "sync": True, "release": rel})
        self._carry(h)

    def _ask(self, dev: str, ch, msg: dict):
        """Send ``msg`` on ``dev``'s channel, numbered, and wait for its answer."""
        q = msg["q"] = next(self._seq)
        self._q_dev[q] = dev
        ch.send(msg)
        return self._wait(q)

    def _carry(self, h: dict) -> None:
        """Keep a fence's errors for the next answer the user waits for."""
        for k in ("errors", "fetch_errors"):
            for e in h.get(k) or ():
                self._carried.append(e)

    def _sync_paths(self) -> None:
        """For ``synchronize()``: everything sent on every path has run (each channel with messages not answered
        yet, and the relay when relayed batches went out since its last sync); their errors are carried to the
        answer the caller raises from."""
        self._sync_direct()
        if self._plane.relay_unsynced or self._plane.relay_releases:
            self._relay_sync()

    def _sync_direct(self) -> None:
        """Every channel's messages have arrived and run (before a request the dispatcher answers from the
        workers' state: stats, profiles)."""
        for d in sorted(self._plane.direct):
            self._direct_sync(d)

    def plan_number(self, skey) -> tuple[int, bool]:
        """The plan number of a batch structure (``Batch.skey``), and whether it is new (then its nodes must travel
        with this batch). The cache is bounded: the oldest plan is evicted, and the dispatcher told so."""
        plan = self._plans.get(skey)
        if plan is not None:
            return plan, False
        plan = next(self._plan_ids)
        if len(self._plans) >= MAX_PLANS:
            old = self._plans.pop(next(iter(self._plans)))
            self._live_plans.discard(old)
            self._drop_plans.append(old)
            self._plane.plan_nodes.pop(old, None)
            self._plane.plan_paths.pop(old, None)
        self._plans[skey] = plan
        self._live_plans.add(plan)
        return plan, True

    def take_ids(self, n: int) -> int:
        """Reserve ``n`` consecutive handle ids; returns the first."""
        first = next(self._ids)
        self._ids = itertools.count(first + n)
        return first

    def replay(self, spec: tuple, first_id: int, where: list) -> None:
        """Send a compiled graph (``tensorwire.jit``) whose outputs are numbered from ``first_id`` (reserved with
        :meth:`take_ids`). ``spec``: ``(part, ext ids, first output id, dynamic attributes, temporaries, frames)``
        (see :meth:`_replay_header` for ``part``). The message is held until the session next sends (so a
        ``loss.item()`` right after rides with it); ``where`` is each node's recording line, for errors."""
        self._check_open()
        with self._lock:
            if self._pending or self._deferred is not None:
                self._flush([], False)  # what was recorded before the call runs first
            if self._lazy:  # (the graph reads its arguments by handle: a lazy one is recorded first)
                ext = spec[1]
                for i in ext:
                    if i in self._lazy:
                        self._materialize(i)
                if self._pending:
                    self._flush([], False)
            extra, dropped = self._take_release()  # (nothing this graph reads: a released id is one no tensor holds)
            self._known.forget(extra)
            self._known.forget(dropped)
            self._replayed.append((first_id, where))
            self._deferred = (spec, extra)
            self._mark = True  # the next op recorded ships it (as after optimizer.step())

    def _replay_header(self, part, ext: list[int], out_first: int, dyn: list, release: list[int],
                       temps: list[list[int]]) -> dict:
        """The batch message of one plan of a compiled graph: ``part.batch`` encoded once, ``part.plan`` the number
        it went under last time (updated here). When that plan is no longer live (evicted, or never sent) its nodes
        travel, with this call's dynamic attributes in place of the recorded call's. Its outputs are numbered from
        ``out_first``; ``temps``: the nodes only the graph reads (``protocol.batch_ids``)."""
        header = {"t": "batch", "k": self._key, "ext": ext, "out_first": out_first, "fetch": [], "release": release,
                  "sync": False}
        if temps:
            header["temps"] = temps
        batch, plan = part.batch, part.plan
        if plan is None or plan not in self._live_plans:
            plan, new = self.plan_number(batch.skey)
            part.plan = plan
        else:
            new = False
        if new:
            nodes = list(batch.nodes)
            for j, attrs in dyn:
                op, refs, old, di = nodes[j]
                nodes[j] = [op, refs, {**old, **attrs}, di]
            header["nodes"] = nodes
            header["devs"] = batch.devs
            self._plane.plan_nodes[plan] = (batch.nodes, batch.devs, len(ext))
        else:
            header["dyn"] = dyn
        header["plan"] = plan
        if self._drop_plans:
            header["drop_plans"], self._drop_plans = self._drop_plans, []
        return header

    def _value(self, desc, frames) -> tuple[int, np.ndarray]:
        """``(handle, value)`` of one value descriptor of an answer: in a frame of it, in its header, or in a
        shared-memory file of the worker's (five fields, see channels.py)."""
        if isinstance(desc, list) and len(desc) == 5:
            return self._shm_value(desc)
        return array_from_frame(desc, frames)

    def _result(self, h: dict, frames, fetch):
        values = dict(self._value(desc, frames) for desc in h.get("values") or ())
        errs = h.get("errors") or []
        if self._carried:  # what the fences reported meanwhile
            errs, self._carried = self._carried + list(errs), []
        ferrs = h.get("fetch_errors") or []
        if ferrs and self._along:  # (a value fetched along that failed is the error of whoever reads it)
            ferrs = [e for e in ferrs if e.get("fetched", e.get("node")) not in self._along]
        if errs or ferrs:
            self._forget_lost(errs)
            self._forget_lost(ferrs)
        if ferrs:
            err = ferrs[0]
            if err.get("code") == DependencyFailed.code:  # prefer the failure it stems from, if reported here
                err = next((e for e in errs if e.get("code") != DependencyFailed.code), err)
            self._note_raised(err)
            raise self._error(err)
        if not errs:  # (the commonest answer)
            return values
        roots = [e for e in errs if e.get("code") != DependencyFailed.code] or errs
        # one failure seen by several devices (a collective, a lost worker) is raised once, not once per device
        raised = self._raised
        roots = [e for e in roots if (e.get("code"), e.get("message")) not in raised and not self._reported_loss(e)]
        if roots:
            self._note_raised(roots[0])
            raise self._error(roots[0])
        return values

    def _shm_value(self, desc: list):
        path = desc[4]
        for ch in self._plane.channels.values():
            if ch.shm is not None and isinstance(path, str) and path.startswith(ch.shm + "-"):
                return ch.read_value(desc)
        raise ProtocolError("an answer named a shared-memory file of no worker this session talks to")

    def _forget_lost(self, errs: list) -> None:
        """A worker was lost (an error of ``errs`` says so): what the client cached on its device is gone
        (:meth:`_forget_cached`), so the session works again as soon as a worker serves the device."""
        for err in errs:
            dev = err.get("device") if err.get("code") == WorkerLost.code else None
            if dev is not None:
                self._forget_cached(dev)

    def _forget_cached(self, device: str | None = None) -> None:
        """The one place where values the client cached on the cluster for itself are given up when they may be gone:
        the tensors of Python scalars (:meth:`scalar`) on ``device`` (on every device when None), after their worker
        was lost (:meth:`_forget_lost`) or a cancel that may have stopped the batches that made them
        (:meth:`_send_cancel`). Kept, each would fail every op that reads it with ``DependencyFailed`` for the rest
        of the session. Each such tensor object is given a new, lazy ``full`` node of its value instead (recorded
        when something reads it; its old handle released as a dead tensor's), so whatever holds the object, the
        cache or a compiled graph that reads it as an input, reads a value that exists. A scalar still lazy (never
        sent) made nothing on a device yet and stays. During ``tw.compile``'s capture the trace knows these objects
        by their handles: they are only forgotten then (the next use makes new ones)."""
        small = self._small_data
        for key in [k for k, (t, _) in small.items() if device is None or t._dev == device]:
            self._small_roots.pop(small.pop(key)[0]._id, None)  # (made again when next asked for)
        lazy = self._lazy
        scalars = self._scalars
        if not scalars:
            return
        gone = [k for k, t in scalars.items() if (device is None or k[3] == device) and t._id not in lazy]
        if self._capture is not None:
            for key in gone:
                del scalars[key], self._scalar_attrs[key]
            return
        for key in gone:
            t = scalars[key]
            fresh = self.record("full", [], self._scalar_attrs[key], key[3], lazy=True)
            t._id, fresh._id = fresh._id, t._id  # (``fresh`` dies with the old handle: released with the next batch)

    def _note_raised(self, err: dict) -> None:
        """Remember an error raised to the user, by its code and message, so the same failure reported again (by
        another device, or a later answer) is not raised twice."""
        raised = self._raised
        raised[(err.get("code"), err.get("message"))] = None
        while len(raised) > 64:
            raised.pop(next(iter(raised)))

    def _reported_loss(self, err: dict) -> bool:
        """Whether ``err`` is the dispatcher's notice of a worker's loss that this session reported already, having
        seen it first on the worker's channel (:meth:`_channel_lost`): that one notice is dropped (and its wording
        noted), so a later loss of the device, another worker's, is raised."""
        if err.get("code") != WorkerLost.code:
            return False
        key = (WorkerLost.code, _LOST_AT, err.get("device"))
        if key not in self._raised:
            return False
        del self._raised[key]
        self._note_raised(err)
        return True

    def fetch(self, t) -> np.ndarray:
        """Tensor ``t``'s value as a read-only numpy array: from the client when it has it (a small value fetched
        or uploaded before, or one that follows from such a value by a view: ``known_values``), else shipping the
        pending work and waiting for the value."""
        known = self._known if self._capture is None else None
        run = self._writes
        if run is not None and (t._id == run.hid or t._base is not None and t._base._id == run.hid):
            self.end_writes()  # (a read of a tensor a run of element writes is writing: the run ends first)
        if known is not None:
            v = known.get(t._id)
            if v is not None:
                return v
            r = known.recipe(t._id)
            if r is None and t._base is not None:  # (a view of a small root keeps no recipe: follows from the root)
                r = known.view_recipe(t)
                if r is None and known.rent(t):  # (a larger root read a view at a time: fetched whole, once)
                    root = t._base
                    known.put(root._id, self.fetch(root), BUY_BYTES)
                    r = known.view_recipe(t)
            if r is not None:
                inputs, fn = r
                try:
                    v = fn([self.fetch(i) for i in inputs])
                except (IndexError, ValueError):  # (not what the worker would make: ask it)
                    v = None
                if v is not None and v.shape == t._shape:
                    known.put(t._id, v)
                    return v
            q = self._ahead.get(t._id) if self._ahead else None
            if q is not None:  # (its value comes with the answer of a batch shipped ahead: ship_forward)
                v = self._value_ahead(t, q)
                if v is not None:
                    return v
        extra = self._take_along(t) if known is not None else ()
        return self._fetched([t._id], extra, known)[t._id]

    def fetch_all(self, ts: list) -> list[np.ndarray]:
        """The values of tensors ``ts`` (as :meth:`fetch` gives each) in at most one round trip: those the client
        keeps from here, the others fetched together, with the 0-d results :meth:`fetch` takes along (read later
        without a round trip: a distribution's validation flag, recorded before the value it checks is used). One
        tensor to fetch is :meth:`fetch`'s (which may follow it from values the client has)."""
        known = self._known if self._capture is None else None
        need = list({t._id: t for t in ts if known is None or not known.has(t._id)}.values())
        if len(need) < 2:
            return [self.fetch(t) for t in ts]
        run = self._writes
        if run is not None and any(t._id == run.hid or t._base is not None and t._base._id == run.hid for t in need):
            self.end_writes()
        extra = ()
        if known is not None:
            self._forget_scalars({t._id for t in need})
            extra = self._take_along(max(need, key=lambda t: t._id))
        got = self._fetched([t._id for t in need], extra, known)
        return [got[t._id] if t._id in got else self.fetch(t) for t in ts]

    def _fetched(self, ids: list, extra, known) -> dict:
        """The values of handles ``ids`` by id, in one round trip that brings the 0-d results ``extra`` along
        (:meth:`_take_along`'s); with ``known`` (the client's values), all of them kept there, and each of ``ids``
        given as the kept read-only view where it is kept: a write to the array given (a received frame's bytes are
        writable) cannot change what the client knows of the tensor."""
        try:
            vals = self.flush(fetch=[*ids, *extra])
        finally:
            self._along = frozenset()
        got = {i: vals[i] for i in ids}
        if known is not None:
            for hid, v in vals.items():
                known.put(hid, v)
            for hid in ids:
                kept = known.peek(hid)
                if kept is not None:
                    got[hid] = kept
            known.brought(list(extra))
        return got

    def _scalar_made(self, hid: int, device: str) -> None:
        """A 0-d result ``hid`` was recorded on ``device``: a fetch takes it along until it is read (:meth:`fetch`;
        the newest :data:`MAX_SCALARS_TRACKED` are remembered)."""
        made = self._scalars_made
        made[hid] = device
        if len(made) > MAX_SCALARS_TRACKED:
            del made[next(iter(made))]

    def _forget_scalars(self, hids) -> None:
        """Handles ``hids`` (any iterable; best a set) leave the 0-d results not read yet."""
        made = self._scalars_made
        # (few of the handles are such results: a set of them and the results remembered (up to 4096) meet by walking
        # the smaller, a list by walking the list, at C speed)
        for hid in made.keys() & hids:
            del made[hid]

    def _take_along(self, t) -> list[int]:
        """The 0-d results to fetch along with ``t`` (and forget here): the live ones on its device not read yet
        that were made before it or have gone out already (so the answer does not wait for work recorded after
        ``t``), at most :data:`MAX_PREFETCH`. Reading a list of per-step losses after a loop
        (``[l.item() for l in losses]``) then costs one round trip, not one a step: each is a few bytes. None while
        the values taken along keep dying unread (polyfit's 0-d parameters, new each step): ``KnownValues.bring``."""
        made = self._scalars_made
        if not made:
            return []
        dev, tid, known = t._dev, t._id, self._known
        if made.pop(tid, None) is not None:  # (a 0-d result not read yet, read on its own: see KnownValues.bring)
            known.missed(tid)
        self._forget_scalars(self._release)  # (dead: their releases go with this fetch)
        first_pending = self._pending[0][0] if self._pending else None
        out = []
        for hid, d in made.items():
            if d == dev and (first_pending is None or hid < first_pending or hid < tid) and not known.has(hid):
                out.append(hid)
                if len(out) >= MAX_PREFETCH:
                    break
        if not out or not known.bring(out):  # (passed over: kept as results not read yet)
            return []
        self._forget_scalars(out)
        self._along = frozenset(out)
        return out

    def _ahead_ids(self, pending: list) -> list[int]:
        """The live 0-d results among ``pending``'s outputs not read yet (at most :data:`MAX_PREFETCH`), taken off
        the ones a later fetch would take along: a batch shipped ahead asks for them back (:meth:`ship_forward`)."""
        made = self._scalars_made
        if not made:
            return []
        outs = {e[0] for e in pending}
        ids = [hid for hid in made if hid in outs][:MAX_PREFETCH]
        self._forget_scalars(ids)
        return ids

    def _take_ahead(self, h: dict, frames) -> None:
        """The answer of a batch shipped ahead (:meth:`ship_forward`), read now: the values of its handles still
        alive become the client's (``known_values``); errors of its batch go with the next answer, as a batch's
        shipped without one do (a value that did not come is fetched, and its error raised, when it is read)."""
        hids = self._ahead_q.pop(h.get("q"), ())
        ahead = self._ahead
        live = [hid for hid in hids if ahead.pop(hid, None) is not None]
        if h.get("t") != "done":
            self._carry_answer(h)
            return
        if h.get("errors"):
            self._carried.extend(h["errors"])
        if not live:
            return
        live = set(live)
        known = self._known
        for desc in h.get("values") or ():
            if isinstance(desc, list) and desc and desc[0] in live:
                known.put(*self._value(desc, frames))

    def _value_ahead(self, t, q: int) -> np.ndarray | None:
        """``t``'s value, which the answer ``q`` of a batch shipped ahead brings: what was recorded since goes out
        without waiting (it runs while the value comes), then that answer is waited for, unless a wait read it
        already. None when it did not bring the value (the caller fetches it, and raises its error)."""
        self._check_open()
        with self._lock:
            try:
                if q in self._ahead_q:
                    self._flush([], False)
                self._await_ahead(q)
            except KeyboardInterrupt:  # Ctrl-C while waiting stops the work too, not only the wait
                self._send_cancel()
                raise
        return self._known.get(t._id)

    def _await_ahead(self, q: int) -> None:
        """Take the answer ``q`` of a batch shipped ahead, waiting for it unless a wait read it already. A wait that
        fails (its error is the caller's) leaves it not waited for again."""
        if q not in self._ahead_q:
            return
        try:
            h, frames = self._wait(q)
        except BaseException:
            for hid in self._ahead_q.pop(q, ()):
                self._ahead.pop(hid, None)
            raise
        self._take_ahead(h, frames)

    def synchronize(self) -> None:
        """Wait until everything submitted has run; raise any deferred error."""
        self.flush(sync=True)

    def service_request(self, service: str, header: dict, frames=(), timeout: float | None = None):
        """Send a request to a named service (``autograd`` ...) through the dispatcher; returns its reply.

        Pending work is shipped first, so the service sees the session in program order. Raises the
        error the service (or the dispatcher, for a service that is down) answered with.
        """
        self._check_open()
        with self._lock:
            self._flush([], False)
            h, rframes = self._request({**header, "t": "service", "service": service}, frames, timeout)
        if h.get("error"):
            raise self._error(h["error"])
        return h, rframes

    # ------------------------------------------------------------------ queries
    def devices(self) -> list[str]:
        """The devices the cluster offers (refreshed from the dispatcher)."""
        self._check_open()
        with self._lock:
            h, _ = self._request({"t": "devices"})
        self._devices = [d["device"] for d in h["devices"]]
        return list(self._devices)

    def device_info(self) -> list[dict]:
        self._check_open()
        with self._lock:
            h, _ = self._request({"t": "devices"})
        return h["devices"]

    def memory_stats(self) -> dict:
        """Live buffers and bytes per device, for this session; the ``cluster_*`` figures cover every session
        only for a session opened with the admin token (otherwise they are this session's too). Each device's own
        memory figures come too where its backend keeps them (``allocated_bytes`` held by tensors and
        ``reserved_bytes`` held by the caching allocator, as ``torch.cuda.memory_allocated``/``memory_reserved``;
        ``total_bytes``)."""
        self._check_open()
        with self._lock:
            self._flush([], False)
            self._sync_direct()  # (the workers answer stats after the work queued before it, on either path)
            h, _ = self._request({"t": "stats"})
        me = h["session"]
        out = {"session": me, "devices": {}, "sessions": len(h.get("sessions", []))}
        for dev, sessions in h.get("devices", {}).items():
            mine = sessions.get(me, {"buffers": 0, "bytes": 0})
            entry = out["devices"][dev] = {"buffers": mine["buffers"], "bytes": mine["bytes"],
                                           "cluster_buffers": sum(v["buffers"] for v in sessions.values()),
                                           "cluster_bytes": sum(v["bytes"] for v in sessions.values())}
            for k, v in ((h.get("memory") or {}).get(dev) or {}).items():
                entry.setdefault(k, v)  # the device's own figures (the session's counts keep their names)
        return out

    def cluster_status(self) -> dict:
        """Devices, services, uptime and live buffers; every session's buffers only for an admin session."""
        self._check_open()
        with self._lock:
            self._sync_direct()
            h, _ = self._request({"t": "stats"})
        h["data_plane"] = self._plane.status()
        return h

    def probe_channels(self) -> dict:
        """Open a direct channel to every worker that grants one, and say which path each device's work takes from
        this process (``tensorwire status``): ``{device: {"path": "direct" | "relay", ...}}``, with the reason for a
        relay."""
        self._check_open()
        with self._lock:
            for dev in self.devices():
                ch = self._ready_channel(dev, batch=False)
                if ch is None and dev not in self._plane.why_relay:
                    self._plane.why_relay[dev] = "its worker offers no direct channel (--direct-address none)"
            return self._plane.status()

    def check_device(self, device: str) -> str:
        if device not in self._devices:
            self.devices()
            if device not in self._devices:
                raise DeviceError(f"unknown device {device!r}; the cluster has: {', '.join(self._devices) or 'none'}")
        return device

    def cancel(self) -> None:
        """Cancel the work this session submitted that the cluster has not finished (see :func:`tensorwire.cancel`).

        Safe to call from any thread: a thread waiting for an answer of this session is woken to send it."""
        if self.closed:
            return
        if self._lock.acquire(blocking=False):
            try:
                self._send_cancel()
            finally:
                self._lock.release()
        else:
            self._waker.set()

    def _send_cancel(self) -> None:
        """Tell the dispatcher and each worker with a channel to stop this session's submitted work. The cancel may
        stop batches whose results the client cached (a scalar's tensor): those get new nodes here
        (:meth:`_forget_cached`), before any op recorded after the cancel reads them (its batch ships after the
        cancel, so it runs)."""
        self._forget_cached()
        try:
            self._sock.send(pack_header({"t": "cancel", "k": self._key}), zmq.NOBLOCK)
            for ch in self._plane.channels.values():  # the work sent on channels: each worker hears it directly
                if ch.ok:
                    ch.send({"t": "cancel"})
        except zmq.ZMQError:
            pass

    def close(self) -> None:
        """Close the session: the cluster frees every buffer it held.

        Waits (up to ``TENSORWIRE_CLOSE_TIMEOUT``, 2 s) for the dispatcher to confirm, so the close is delivered
        even when the process ends right after (``os._exit``). A session never closed is closed at exit; one whose
        process is killed is released when its lease runs out."""
        if self.closed:
            return
        with self._lock:
            self.closed = True
            self._finalizer.detach()
            try:
                q = next(self._seq)
                self._sock.send(pack_header({"t": "close", "q": q, "k": self._key}), zmq.NOBLOCK)
                if not self._lost:
                    self._wait_closed(q, time.monotonic() + CLOSE_TIMEOUT_S)
            except zmq.ZMQError:
                pass
            self._sock.close(linger=0)
            self._plane.close()
            self._waker.close()
            for sink in self._progress.values():
                _close_sink(sink)
            self._progress.clear()
        atexit.unregister(self._atexit)

    def _timeout_message(self, timeout: float, progress: dict | None) -> str:
        msg = f"no answer from the dispatcher at {self.address} within {timeout:g}s"
        for dev, report in sorted((progress or {}).items()):
            if isinstance(report, list) and len(report) == 3 and report[1] is not None:
                return (f"{msg}, and no batch of this session finished meanwhile: {dev} has been running {report[2]} "
                        f"for {report[1]:g}s (TENSORWIRE_REQUEST_TIMEOUT sets the limit)")
        return msg

    def _wait_closed(self, q: int, deadline: float) -> None:
        """Read answers until the dispatcher's ``closed`` for ``q`` arrives or ``deadline`` passes."""
        for _ in range(1 << 20):  # bounded by the deadline
            left = deadline - time.monotonic()
            if left <= 0 or not self._sock.poll(int(left * 1000) + 1):
                return
            msg = self._sock.recv_multipart(zmq.NOBLOCK, copy=False)
            try:
                h = unpack_header(msg[0].bytes)
            except ProtocolError:
                continue
            if h.get("q") == q:
                return

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class GraphPlan:
    """What :meth:`Session.record_graph` does for a graph that the graph alone fixes (:meth:`Session.graph_plan`; its
    caller keeps it with the graph). ``steps``: the node-by-node recording's, per node (see ``graph_plan``). ``whole``:
    whether the graph can be recorded in one pass (:meth:`Session._record_whole`): no node in ``host``, and no node
    reading another's output from another device but a ``copy``. ``kept``: ``(index, op, shape, dtype, device)`` of
    each node in ``keep``, ``drop`` the other indices. ``entries``: the nodes' pending entries but for their handles,
    as columns ``(ops, getters, attrs, devices, input metas, attrs keys)`` (a node's input handles: its getter
    applied to the tuple of the graph's handles then ``vals``' in reverse), made at the first whole recording for the
    metas its ``vals`` had then: ``vmeta``, ``(shape, dtype, device)`` per tensor of ``vals`` (device: the one the
    nodes reading it need, None when only ``copy`` nodes do)."""

    __slots__ = ("steps", "whole", "kept", "drop", "vdev", "vmeta", "entries")

    def __init__(self, steps: list, nodes, devs: list, known: list, keep, host):
        self.steps = steps
        vdev: dict = {}
        whole = not host
        for op, refs, _, d in nodes if whole else ():
            device = devs[d]
            for r in refs:
                if r >= 0:
                    if devs[nodes[r][3]] != device and op != "copy":
                        whole = False
                elif op != "copy" and vdev.setdefault(-r - 1, device) != device:
                    whole = False
        self.whole = whole
        self.vdev = vdev
        self.kept = [(j, nodes[j][0], *known[j][1], devs[nodes[j][3]]) for j in range(len(nodes)) if j in keep]
        self.drop = [j for j in range(len(nodes)) if j not in keep]
        self.vmeta = None
        self.entries = None

    def make_entries(self, nodes, vals: list, devs: list, known: list) -> None:
        """The entries' templates, for the metas of ``vals``."""
        vdev = self.vdev
        vmeta = self.vmeta = [(t._shape, t.dtype, vdev.get(k)) for k, t in enumerate(vals)]
        size = len(nodes) + len(vals)  # (of the handles: a ref made an index into them, ``vals``' from the end)
        getters, metas = [], []
        for _, refs, _, _ in nodes:
            at = [r if r >= 0 else size + r for r in refs]
            # (one input: a slice, so that the handle comes as a 1-tuple, as the entries' input handles all do)
            getters.append(itemgetter(*at) if len(at) > 1 else itemgetter(slice(at[0], at[0] + 1) if at else
                                                                          slice(0, 0)))
            metas.append([known[r][1] if r >= 0 else vmeta[-r - 1][:2] for r in refs])
        self.entries = ([n[0] for n in nodes], getters, [n[2] for n in nodes], [devs[n[3]] for n in nodes], metas,
                        [k[0] for k in known])

class Batch:
    """A pending batch in wire form: ``nodes`` (``[op, refs, attrs, device index]``), ``devs``, the external input
    ids ``ext`` and their metas, the output ids ``outs``, ``dyn`` (``[node, dynamic attrs]``), the raw ``frames``
    of uploads and ``skey``, the structure a plan is keyed by; :func:`encode_known`'s also ``device``, the one device
    its nodes run on (``channels.batch_device``'s), and :func:`find_known`'s ``shape``, the structure it matched, and
    ``lines``, each node's user's line."""

    __slots__ = ("nodes", "devs", "ext", "ext_meta", "outs", "dyn", "frames", "skey", "device", "shape", "lines")


def _dynamic_attrs(attrs: dict, dynamic) -> dict:
    """The attributes of ``attrs`` among an op's ``dynamic`` ones: what a replay of its node carries."""
    d = {}
    for k in dynamic:
        if k in attrs:
            d[k] = attrs[k]
    return d


def encode_batch(pending: list, where: dict | None = None) -> Batch:
    """Encode pending entries (``[id, op, input ids, attrs, device, where, input metas, attrs key]``) as a batch;
    each node's recording line goes into ``where`` (by output id) when given.

    One pass over the entries, using what :meth:`Session.record` computed (the attrs key, the input metas): a node's
    refs are looked up in C (``map``), and only a node reading a handle no earlier node made (an external input, the
    first time it is read) takes the slower path; its structure key is :func:`structure_key`'s, built inline."""
    refs_of: dict[int, int] = {}  # handle -> its ref: j >= 0 the output of node j, -(k + 1) external input k
    ext: list[int] = []
    ext_meta: list = []
    devs: list[str] = []
    nodes = []
    key = []
    dyn = []
    frames = []
    outs = list(map(_first, pending))
    last_dev, di = None, 0
    ref_of = refs_of.get
    j = 0
    for hid, op, ins, attrs, device, _, metas, akey in pending:
        refs = list(map(ref_of, ins))
        if None in refs:  # (an external input read for the first time)
            for k, r in enumerate(refs):
                if r is None:
                    i = ins[k]
                    r = ref_of(i)  # (read twice by this node: the first read made its ref)
                    if r is None:
                        ext.append(i)
                        ext_meta.append(metas[k])
                        r = refs_of[i] = -len(ext)
                    refs[k] = r
        if device != last_dev:
            if device in devs:
                di = devs.index(device)
            else:
                di = len(devs)
                devs.append(device)
            last_dev = device
        if attrs:
            if op == "const":
                arr = attrs["frame"]
                attrs = {"shape": attrs["shape"], "dtype": attrs["dtype"], "frame": len(frames)}
                frames.append(as_frame(arr))
                akey = attrs_key(op, attrs)
            dynamic = OPS[op].dynamic
            if dynamic:
                dyn.append([j, _dynamic_attrs(attrs, dynamic)])
        refs_of[hid] = j
        nodes.append([op, refs, attrs, di])
        key.append((op, tuple(refs), di) if akey is None else (op, tuple(refs), akey, di))  # (structure_key's)
        j += 1
    if where is not None:  # (each node's line, but None: a node with no user's line is not kept)
        locs = list(map(_where_field, pending))
        where.update(compress(zip(outs, locs), locs))
    b = Batch()
    b.nodes, b.devs, b.ext, b.ext_meta, b.outs, b.dyn, b.frames = nodes, devs, ext, ext_meta, outs, dyn, frames
    b.skey = (tuple(key), tuple(devs), tuple(ext_meta)) if nodes else None
    return b


_device_field = itemgetter(4)  # (a pending entry's device)
_metas_field = itemgetter(6)  # (... its input metas)
_akey_field = itemgetter(7)  # (... its attrs key)
_ids_field = itemgetter(1)  # (a lazy node's input handles)
#: batch structures seen: what :func:`encode_batch` derived from one (:class:`_Shape`), by the tuple of its nodes' ops,
#: a few shapes a key at most; bounded as the plans are. A pure function of the structure, shared by sessions
MAX_SHAPES = MAX_PLANS
MAX_SHAPES_PER_OPS = 8
_shapes: dict = {}
_n_shapes = 0
_shapes_lock = threading.Lock()


class _StructureKey(tuple):
    """A ``Batch.skey`` that hashes once: the one object of a structure seen before is the session's plan key
    (``Session.plan_number`` looks it up each batch; a plain tuple's hash walks every node's key each time)."""

    def __hash__(self) -> int:
        h = self.__dict__.get("h")
        if h is None:
            h = self.__dict__["h"] = tuple.__hash__(self)
        return h


class _Shape(tuple):
    """A batch structure seen before, as :func:`find_known` checks a batch against it: ``refs`` (each input's ref,
    flat: ``j >= 0`` node j's output, ``-(k + 1)`` external input k), ``counts``: the input counts its ops do not
    fix (``(picker of those nodes' inputs, their counts)``: a variadic op's, or a count other than its op's), each
    node's attrs key and device, the flat places of the external inputs' first reads; and what it derived:
    ``skey``, ``devs``, the batch device (``channels.batch_device``), the dynamic attributes' ``spec`` (``(node,
    their names, whether it is an upload)`` for each node of an op that has some), the first reads as ``(nodes,
    places among their inputs)``, the uploads' ``(nodes, keys)``, the pickers of ``refs`` and of ``first_at``
    (:func:`_picker`) and ``unread``: the nodes no node of the batch reads whose op :data:`PRUNABLE` names, the only
    ones :func:`prune_dead` may start from."""

    __slots__ = ()
    refs, counts, akeys, devices, first_at, skey, devs, device, spec, first_reads, consts, pick_refs, pick_first, \
        unread = (property(itemgetter(k)) for k in range(14))


def _picker(places) -> object:
    """A function of a sequence that returns its items at ``places``, as a tuple, in one C call
    (``operator.itemgetter``, whose one-place form returns the item itself, not a tuple of it)."""
    if len(places) > 1:
        return itemgetter(*places)
    if places:
        k = places[0]
        return lambda seq: (seq[k],)
    return lambda seq: ()


def _matches(shape: _Shape, outs: list, ins: tuple, ext: list) -> bool:
    """Whether a batch whose nodes have ``shape``'s ops, input counts, attrs keys and devices, making ``outs`` and
    reading ``ins`` (flat), with ``ext`` the handles at ``shape``'s first reads, has ``shape``'s refs: each input is
    the output or the external input its ref names (one C call: a ref indexes ``outs + ext`` reversed, a negative
    ref counting from its end), and the external inputs are distinct handles no node of the batch makes (so each is
    numbered by its first read, as :func:`encode_batch` numbers them)."""
    if shape.pick_refs(outs + ext[::-1]) != ins:
        return False
    if not ext:
        return True
    distinct = set(ext)
    return len(distinct) == len(ext) and distinct.isdisjoint(outs)


def encode_known(pending: list) -> Batch:
    """:func:`encode_batch`'s batch for the session's send path, with ``device`` (``channels.batch_device``'s): a
    structure seen before reuses what was derived from it (:func:`find_known`), and its batch has no ``nodes`` (None:
    a replay of its plan needs none; :func:`encode_batch` makes them when its plan is gone). ``ext``, ``dyn`` and
    ``frames`` are this batch's. A structure not seen before is remembered."""
    b = find_known(pending) if pending else None
    if b is not None:
        return b
    if not pending:
        b = encode_batch(pending)
        b.device = batch_device(pending, b.devs, _op)
        return b
    ops = tuple(map(_op, pending))
    counts = tuple(map(len, map(_inputs, pending)))
    akeys = tuple(map(_akey_field, pending))
    devices = tuple(map(_device_field, pending))
    b = encode_batch(pending)
    b.skey = _StructureKey(b.skey)
    b.device = batch_device(pending, b.devs, _op)
    _remember(ops, _shape_of(b, pending, counts, akeys, devices))
    return b


def find_known(pending: list) -> Batch | None:
    """The batch of ``pending`` (not empty) when its structure was seen before (the same ops, input counts, attrs
    keys, devices and refs, and equal metas of the external inputs), else None, with nothing derived or remembered
    (the session's flush then leaves out dead nodes first, :func:`prune_dead`, and encodes what is left). A batch is
    checked against the structures of its ops in a few C passes over its entries, with no key built and hashed from
    all of them (the entries' fields are taken apart in one: ``zip``). The input count of a node whose op fixes it
    (``OpDef.nin``) is the op's: inference checked it when the node was recorded, so the ops say it and only the
    others are compared (a pass over every node's inputs less)."""
    hids, ops, inputs, attrs, devices, lines, metas, akeys = zip(*pending)
    shapes = _shapes.get(ops)
    if not shapes:
        return None
    outs = list(hids)
    ins = tuple(chain.from_iterable(inputs))  # (a tuple: what the shape's picker returns, compared as it comes)
    for shape in shapes:
        if shape.devices != devices or shape.akeys != akeys:
            continue
        pick, want = shape.counts
        if want and tuple(map(len, pick(inputs))) != want:
            continue
        ext = list(shape.pick_first(ins))
        if not _matches(shape, outs, ins, ext):
            continue
        js, ks = shape.first_reads
        # (each external input's meta where it is first read: the node, and its place among that node's inputs)
        ext_meta = tuple(map(getitem, map(metas.__getitem__, js), ks))
        consts = shape.consts
        if ext_meta == shape.skey[2] and (not consts[0] or _const_keys(pending, consts[0]) == consts[1]):
            return _known_batch(attrs, lines, shape, outs, ext, list(ext_meta))
    return None


def may_prune(b: Batch, gone: set) -> bool:
    """Whether :func:`prune_dead` may leave a node out of ``b`` (a batch :func:`find_known` made) when the handles
    ``gone`` are released with it: one of its unread nodes of a prunable op is among them. False: it would keep the
    batch whole, and need not look."""
    unread = b.shape.unread
    return bool(unread) and not gone.isdisjoint(map(b.outs.__getitem__, unread))


def _shape_of(b: Batch, pending: list, counts: tuple, akeys: tuple, devices: tuple) -> _Shape:
    """The :class:`_Shape` of a batch :func:`encode_batch` made (``b``, with its ``device``) of ``pending``."""
    # (the nodes whose dynamic attributes a replay carries: any with attrs, of an op that has dynamic ones)
    spec = [(j, OPS[n[0]].dynamic, n[0] == "const") for j, n in enumerate(b.nodes) if OPS[n[0]].dynamic]
    refs = list(chain.from_iterable(n[1] for n in b.nodes))
    seen, js, ks, first_at = set(), [], [], []
    at = 0
    for j, n in enumerate(b.nodes):
        for k, r in enumerate(n[1]):
            if r < 0 and r not in seen:
                seen.add(r)
                js.append(j)
                ks.append(k)
                first_at.append(at)
            at += 1
    const_js = [j for j, n in enumerate(b.nodes) if n[0] == "const"]
    read = {r for r in refs if r >= 0}
    unread = tuple(j for j, n in enumerate(b.nodes) if j not in read and n[0] in PRUNABLE)
    # (the nodes whose input count their op does not fix: find_known compares only theirs)
    varied = [j for j, n in enumerate(b.nodes) if getattr(OPS.get(n[0]), "nin", None) != counts[j]]
    return _Shape((tuple(refs), (_picker(varied), tuple(counts[j] for j in varied)), akeys, devices, tuple(first_at),
                   b.skey, b.devs, b.device, spec, (js, ks), (const_js, _const_keys(pending, const_js)), _picker(refs),
                   _picker(first_at), unread))


def _remember(ops: tuple, shape: _Shape) -> None:
    """Keep ``shape`` under its ops: the newest first, at most :data:`MAX_SHAPES_PER_OPS` of them (a structure of
    these ops seen again with other input metas, or another wiring, replaces the oldest); past :data:`MAX_SHAPES`
    in all, the ops seen first go. The lists are replaced, never changed in place: a reader in another thread walks
    the one it took."""
    global _n_shapes
    with _shapes_lock:  # (sessions of several threads share it: one changes it at a time)
        old = _shapes.pop(ops, ())
        _n_shapes -= len(old)
        while _shapes and _n_shapes >= MAX_SHAPES:
            _n_shapes -= len(_shapes.pop(next(iter(_shapes))))
        kept = [shape, *old[:MAX_SHAPES_PER_OPS - 1]]
        _shapes[ops] = kept
        _n_shapes += len(kept)


def _const_keys(pending: list, js) -> list:
    """The shape and dtype of each upload (const node) at ``js``: with the structure, they make its key."""
    out = []
    for j in js:
        a = pending[j][3]
        out.append((tuple(a["shape"]), a["dtype"]) if a else None)
    return out


def _known_batch(attrs: tuple, lines: tuple, shape: _Shape, outs, ext, ext_meta) -> Batch:
    """The batch of a structure seen before, whose nodes have ``attrs`` and were recorded at ``lines``: this batch's
    dynamic attributes and uploads, at the places its spec says, and no nodes."""
    dyn, frames = [], []
    for j, dynamic, upload in shape.spec:
        a = attrs[j]
        if not a:
            continue
        if upload and "frame" in a:  # (an upload: its bytes become a frame of the message, its one dynamic attr)
            frames.append(as_frame(a["frame"]))
            dyn.append([j, {"frame": len(frames) - 1}])
        else:
            dyn.append([j, _dynamic_attrs(a, dynamic)])
    b = Batch()
    b.nodes, b.devs, b.ext, b.ext_meta, b.outs, b.dyn, b.frames, b.skey = None, shape.devs, ext, ext_meta, outs, \
        dyn, frames, shape.skey
    b.device, b.shape, b.lines = shape.device, shape, lines
    return b


#: ops whose result a batch may leave out when nobody reads it: they cannot fail once inference passed on the client
#: (so leaving one out loses no error) and change nothing but their result
PRUNABLE = frozenset((HOST_OPS - {"floor_divide", "remainder"}) | {"const"}
                     | {name for name, o in OPS.items() if o.kind == "movement"})


def prune_dead(pending: list, release: list[int], gone: set | None = None) -> tuple[list, list[int]]:
    """``pending`` without the nodes whose results were released before they shipped and that no kept node reads
    (the ``i`` and ``i + 8`` of ``data[i:i + 8] for i in ix``, whose values the client knew: known_values), and
    ``release`` without their handles, which the devices then never make. ``gone``: ``set(release)``, when the
    caller has it."""
    dead = (set(release) if gone is None else gone).intersection(map(_first, pending))  # (released, made here)
    if not dead:
        return pending, release
    # the node dropped last is read by no node (its readers, after it, would be dropped too): without an unread
    # released node of a prunable op, nothing is dropped
    unread = dead.difference(chain.from_iterable(map(_inputs, pending)))
    if not unread or PRUNABLE.isdisjoint(map(_op, compress(pending, map(unread.__contains__, map(_first, pending))))):
        return pending, release
    needed: set[int] = set()
    kept = []
    dropped = set()
    for e in reversed(pending):
        hid = e[0]
        if hid in dead and hid not in needed and e[1] in PRUNABLE:
            dropped.add(hid)
            continue
        kept.append(e)
        needed.update(e[2])
    if not dropped:
        return pending, release
    kept.reverse()
    return kept, [h for h in release if h not in dropped]


def _replay_route(part, temps) -> tuple:
    """``(batch device, [(node, device) for each kept node])`` of a compiled graph's plan with these temporaries,
    worked out once per graph (``Part.route``)."""
    key = tuple(map(tuple, temps)) if temps else ()
    cached = part.route
    if cached is not None and cached[0] == key:
        return cached[1]
    b = part.batch
    n = len(b.nodes)
    kept = kept_nodes(n, temps) if temps else range(n)
    devs = b.devs
    route = (batch_device(b.nodes, devs), [(j, devs[b.nodes[j][3]]) for j in kept])
    part.route = (key, route)
    return route


def _input_error(s: Session, t, device: str):
    if t._s is not s:
        raise DeviceError("tensors from different sessions cannot be mixed")
    raise _devices_differ(device, t._dev)


def _devices_differ(device: str, other: str) -> DeviceError:
    return DeviceError(f"Expected all tensors to be on the same device, but found at least two devices, "
                       f"{device} and {other}!")


def _progress_event(device: str, fields: dict):
    from .progress import DownloadProgress  # lazy: its dataclass costs ~1 ms of every import; hub loads only

    return DownloadProgress(device, fields["file"], fields["done"], fields["total"], fields.get("end", False))


def _close_sink(sink) -> None:
    close = getattr(sink, "close", None)
    if callable(close):
        try:
            close()
        except Exception:
            _log.debug("closing a progress sink failed", exc_info=True)


def _fmt_where(where) -> str | None:
    if not where:
        return None
    file, line = user_line(where)
    return f"{file}:{line}"
