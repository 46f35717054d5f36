"""Bounded answers to clients (issue 34, finding 5): what a ROUTER socket holds for a peer that does not read.

A ROUTER socket queues each peer's messages until the peer's connection takes them, and by default holds up to
1000 messages per peer, whatever their size: a client that asks for many large fetches and never reads them made the
dispatcher hold them all. Both sockets that answer clients (the dispatcher's client socket, a worker's direct
channel: ``backends.direct``) are bounded here, per connection (routing id):

- **Bytes.** Large frames (``TRACK_MIN`` and up) are sent without a copy and tracked until libzmq has written them
  to the connection (``zmq.MessageTracker``). An answer that would take the bytes held for one connection past
  ``TENSORWIRE_ANSWER_BYTES`` (default 256 MiB), or for all connections past ``TENSORWIRE_ANSWER_BYTES_TOTAL``
  (default 1 GiB), is dropped and a small ``error`` with the same ``q`` and ``OutOfMemory`` goes in its place: the
  client raises it when it reads that far. One answer always goes when nothing is held for its connection, however
  large (a single fetch of a large tensor still works).
- **Messages.** ``ZMQ_SNDHWM`` is ``TENSORWIRE_ANSWER_HWM`` (default 1000) per connection, with
  ``ZMQ_ROUTER_MANDATORY``, and every send is non-blocking: a message to a full connection is dropped; if it answered
  a numbered request, its ``OutOfMemory`` error is owed (at most ``MAX_OWED`` per connection) and sent, in order,
  as soon as the connection has room (at the client's next message, or the next heartbeat). A message to a
  connection that is gone is dropped, as before. The dispatcher's socket for services has no send high-water mark
  (``SERVICE_HWM``): a ROUTER past it drops a peer's messages without a word, and a worker whose main thread fell
  more than ~1000 messages behind (a session's long queue of small relayed batches on a loaded host) lost batches,
  whose outputs a later batch then did not find (``NotFound``); the messages wait in the dispatcher instead, as
  long as the worker's connection lives (libzmq's heartbeats close the connection of a process that stopped
  answering, and what waited for it goes with it).
- **Read-ahead.** ``ZMQ_RCVHWM`` is ``RECV_HWM`` (16) per connection: libzmq reads that many messages of one
  connection ahead of the service's loop and then stops reading it (TCP pushes back), so a peer that sends faster
  than a busy service reads keeps the excess in its own send queue, not in the service. With libzmq's default
  (1000 messages, whatever their size) a client's 2 MiB uploads queued behind a slow batch were read into the worker
  before its quota could refuse them (``backends.worker.Executor._hold_uploads``), and a worker's relayed 1 MiB
  answers piled up in the dispatcher before their bound could drop them (``tests/faults/test_bounded_queues.py``).
  The dispatcher's socket for services is bounded the same way.
- **Connections of dead sessions.** libzmq cannot drop one peer's queue, so :meth:`Answers.release` shuts the
  connection down (its socket, found by the file descriptor its messages came from, checked by inode so a reused
  descriptor is never touched): libzmq then frees everything queued for it. The dispatcher does this when a session's
  lease ends with answers still unwritten; the client reconnects and hears that its session expired.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import time
from collections import deque

import zmq

from tensorwire.protocol.errors import OutOfMemory
from tensorwire.protocol.wire import NOBLOCK, SNDMORE, frame_nbytes, pack_header

log = logging.getLogger("tensorwire.dispatcher")

#: bytes of answers held for one connection (sent, not yet written to it) past which answers are dropped
ANSWER_BYTES = int(os.environ.get("TENSORWIRE_ANSWER_BYTES", str(256 << 20)))
#: ... and for all connections of one socket together
ANSWER_BYTES_TOTAL = int(os.environ.get("TENSORWIRE_ANSWER_BYTES_TOTAL", str(1 << 30)))
#: messages queued for one connection (``ZMQ_SNDHWM``) past which messages are dropped
ANSWER_HWM = int(os.environ.get("TENSORWIRE_ANSWER_HWM", "1000"))
#: messages libzmq reads ahead from one connection before the service's loop takes them (``ZMQ_RCVHWM``)
RECV_HWM = 16
#: the dispatcher's send high-water mark toward services (``ZMQ_SNDHWM``; 0: none): work relayed to a worker is never
#: dropped (see the module doc, "Messages")
SERVICE_HWM = 0
#: frames from this size on are sent without a copy and tracked; smaller ones count against the HWM only
TRACK_MIN = 64 << 10
_MORE = NOBLOCK | SNDMORE
#: error answers owed to one connection (its queue was full); past it they are dropped (the client's wait times out)
MAX_OWED = 256
#: connections with answers owed at once
MAX_OWED_CONNECTIONS = 4096


def bound_socket(sock: zmq.Socket, hwm: int = ANSWER_HWM) -> None:
    """Give a ROUTER socket that answers clients its message bounds (before it binds): a full or vanished peer
    raises (``EAGAIN``, ``EHOSTUNREACH``) instead of silently swallowing the message, so :class:`Answers` can say
    so; and libzmq reads at most ``RECV_HWM`` messages of one connection ahead of the service."""
    sock.setsockopt(zmq.SNDHWM, hwm)
    sock.setsockopt(zmq.RCVHWM, RECV_HWM)
    sock.setsockopt(zmq.ROUTER_MANDATORY, 1)


def connection_of(frame) -> tuple[int, int] | None:
    """``(file descriptor, inode)`` of the connection a received ``zmq.Frame`` came from (None: not a socket file,
    e.g. inproc)."""
    try:
        fd = frame.get(zmq.SRCFD)
        return (fd, os.fstat(fd).st_ino) if fd >= 0 else None
    except (zmq.ZMQError, OSError, TypeError, AttributeError):
        return None


class Answers:
    """Sends on a client-facing ROUTER socket (set up by :func:`bound_socket`), within the bounds above."""

    def __init__(self, sock: zmq.Socket, who: str, *, byte_bound: int = ANSWER_BYTES,
                 total_bound: int = ANSWER_BYTES_TOTAL):
        """``who`` names the sender in errors ("the dispatcher", "the worker for cpu:0")."""
        self.sock = sock
        self.who = who
        self.byte_bound = byte_bound
        self.total_bound = total_bound
        self._flight: dict[bytes, list] = {}  # routing id -> [[tracker, bytes], ...] not known written yet
        self._total = 0  # bytes in _flight (an over-estimate until pruned)
        self._owed: dict[bytes, deque] = {}  # routing id -> error answers owed, oldest first
        self.dropped = 0  # answers dropped since start
        self._next_tick = 0.0

    # -- accounting ------------------------------------------------------------------------------
    def held(self, ident: bytes) -> int:
        """Bytes of answers to ``ident`` that libzmq still holds (sent, not yet written to the connection)."""
        fl = self._flight.get(ident)
        if not fl:
            return 0
        live = [x for x in fl if not x[0].done]
        self._total -= sum(x[1] for x in fl) - sum(x[1] for x in live)
        if live:
            self._flight[ident] = live
        else:
            del self._flight[ident]
        return sum(x[1] for x in live)

    def total(self) -> int:
        """Bytes of answers held for every connection (pruned now)."""
        for ident in list(self._flight):
            self.held(ident)
        return self._total

    @property
    def held_bytes(self) -> int:
        """Bytes of answers held for every connection, as of the last pruning (safe to read from another thread)."""
        return self._total

    def owed(self, ident: bytes) -> int:
        """Error answers owed to ``ident``."""
        return len(self._owed.get(ident, ()))

    def tick(self, every: float = 0.0) -> None:
        """Forget written answers, and send what is owed where there is room now (at most once per ``every``
        seconds: a loop may call this at each turn)."""
        if not (self._flight or self._owed):
            return
        now = time.monotonic()
        if now < self._next_tick:
            return
        self._next_tick = now + every
        self.total()
        for ident in list(self._owed):
            self.flush(ident)

    # -- sending ---------------------------------------------------------------------------------
    def send(self, ident: bytes, header: dict, frames=(), sizes: list | None = None) -> bool:
        """Send one message to ``ident`` within the bounds; False when it was dropped (its error sent or owed in its
        place, where it answers a numbered request). ``sizes``: the frames' sizes in bytes, where the caller knows
        them (``frame_nbytes`` of each otherwise)."""
        if self._owed and ident in self._owed and not self.flush(ident):  # owed answers go first; the queue is
            self._drop(ident, header, self._hwm_error(header))  # still full
            return False
        n = 0
        if frames:
            if sizes is None:
                sizes = list(map(frame_nbytes, frames))
            for k in sizes:
                if k >= TRACK_MIN:
                    n += k
            if n and not self._room(ident, n):
                self._drop(ident, header, self._bytes_error(header, ident, n))
                return False
        try:
            self._send(ident, header, frames, sizes if n else None)
        except zmq.Again:
            self._drop(ident, header, self._hwm_error(header))
            return False
        except zmq.ZMQError as e:
            if e.errno == errno.EHOSTUNREACH:  # the peer is gone: nobody to answer
                return False
            raise
        return True

    def _room(self, ident: bytes, n: int) -> bool:
        """Whether ``n`` more bytes to ``ident`` stay within the bounds (always, when nothing is held)."""
        held = self.held(ident)
        if held and held + n > self.byte_bound:
            return False
        total = self._total if self._total + n <= self.total_bound else self.total()  # (prunes only when needed)
        return not total or total + n <= self.total_bound

    def _send(self, ident: bytes, header: dict, frames, sizes: list | None = ()) -> None:
        """``sizes``: the frames' sizes (None: every frame is smaller than ``TRACK_MIN``; ``()``: not known)."""
        sock = self.sock
        sock.send(ident, _MORE)  # (a full or unknown peer raises here, before anything is queued)
        if not frames:  # (the commonest answer: its header alone)
            sock.send(pack_header(header), NOBLOCK, copy=True)
            return
        parts = [pack_header(header), *frames]
        last = len(parts) - 1
        for i, p in enumerate(parts):
            flags = _MORE if i < last else NOBLOCK
            # (the header, and every frame when sizes is None, the commonest answer, are small: copied)
            k = 0 if i == 0 or sizes is None else sizes[i - 1] if sizes else frame_nbytes(p)
            if k < TRACK_MIN:
                sock.send(p, flags, copy=True)
                continue
            # (a received Frame is wrapped: the new one's tracker fires once libzmq let go of the bytes)
            frame = zmq.Frame(p.buffer if isinstance(p, zmq.Frame) else p, track=True)
            tracker = sock.send(frame, flags, copy=False, track=True)
            self._flight.setdefault(ident, []).append([tracker, k])
            self._total += k

    def flush(self, ident: bytes) -> bool:
        """Send the error answers owed to ``ident`` while its queue has room; True when none is left."""
        owed = self._owed.get(ident)
        while owed:
            try:
                self._send(ident, owed[0], ())
            except zmq.Again:
                return False
            except zmq.ZMQError as e:
                if e.errno != errno.EHOSTUNREACH:
                    raise
                owed.clear()  # (the peer is gone)
                break
            owed.popleft()
        self._owed.pop(ident, None)
        return True

    def _drop(self, ident: bytes, header: dict, err: OutOfMemory) -> None:
        """``header``'s message is not sent: its client gets ``err`` for it instead (now if there is room, else
        when there is)."""
        self.dropped += 1
        q = header.get("q")
        if type(q) is not int or q < 0 or header.get("t") == "pong":  # (nothing waits for it by number)
            return
        msg = {"t": "error", "q": q, "error": err.to_wire()}
        if ident not in self._owed:
            try:
                self._send(ident, msg, ())
                return
            except zmq.Again:
                pass
            except zmq.ZMQError as e:
                if e.errno == errno.EHOSTUNREACH:
                    return
                raise
            if len(self._owed) >= MAX_OWED_CONNECTIONS:
                log.warning("%s dropped an answer to a client and cannot owe it the error (too many full connections)",
                            self.who)
                return
        owed = self._owed.setdefault(ident, deque())
        if len(owed) < MAX_OWED:
            owed.append(msg)

    def _bytes_error(self, header: dict, ident: bytes, n: int) -> OutOfMemory:
        mib = 1 << 20
        return OutOfMemory(
            f"{self.who} dropped the answer to request {header.get('q')} ({n / mib:.1f} MiB): this client has "
            f"{self.held(ident) / mib:.1f} MiB of answers it has not read yet (bound: TENSORWIRE_ANSWER_BYTES = "
            f"{self.byte_bound / mib:.0f} MiB per connection, TENSORWIRE_ANSWER_BYTES_TOTAL = "
            f"{self.total_bound / mib:.0f} MiB in all). Read answers before asking for more (fetch fewer large values "
            f"at once), then fetch this one again")

    def _hwm_error(self, header: dict) -> OutOfMemory:
        return OutOfMemory(
            f"{self.who} dropped the answer to request {header.get('q')}: this client left "
            f"{self.sock.getsockopt(zmq.SNDHWM)} messages unread (bound: TENSORWIRE_ANSWER_HWM). Read answers before "
            f"sending more requests, then ask again")

    # -- connections -------------------------------------------------------------------------------
    def release(self, ident: bytes, conn: tuple[int, int] | None) -> bool:
        """Free what is queued for ``ident`` (a session of it ended with answers unwritten): shut its connection
        down, so that libzmq drops the queue (the peer may connect again). ``conn``: its ``connection_of``. True
        when a connection was shut down."""
        self._owed.pop(ident, None)
        if not self.held(ident) or conn is None:
            return False
        fd, ino = conn
        try:
            if os.fstat(fd).st_ino != ino:  # the descriptor is another file now: that connection is gone already
                return False
            dup = socket.socket(fileno=os.dup(fd))
        except OSError:
            return False
        with contextlib.closing(dup), contextlib.suppress(OSError):
            dup.shutdown(socket.SHUT_RDWR)  # (on the connection libzmq holds: its engine ends and frees the queue)
        log.info("%s shut down a connection with %d bytes of unread answers", self.who, self.held(ident))
        return True
