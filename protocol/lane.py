"""The same-host lane: a direct channel's messages over a Unix socket, with no ZeroMQ in between.

On one host a ZeroMQ message crosses four threads (the sender, its context's I/O thread, the receiver's I/O thread,
the receiver): on this project's 2-core test machine a worker's small answer took ~75 us from its ``send`` to the
client's read, ~43 us of it inside the worker's ``send`` (preempted while its I/O thread ran), where a Unix socket
written and read by the two processes themselves took ~30 us for the same exchange. A worker therefore also listens
on a Unix socket in a folder of its own (mode 0700) inside the host's shared-memory folder, which only the processes
that share its shared memory, under its user, can open (``backends/direct.py``), and a client on that host moves its
channel there after the usual hello (``client/channels.py`` ``Channel.to_lane``): the same messages (msgpack header
and raw frames, the capability in every one), in the same order, through the same checks.

Framing. A message is ``<Q body bytes><I frames>`` (12 bytes), then the body: one ``<Q`` length per frame, then the
frames' bytes back to back. Each side reads exactly one message at a time (the prefix, then its body), so that a
descriptor is readable exactly when a message (or the end of the connection) waits on it: a poll that watches the
socket never misses a message read ahead into a buffer.

- :class:`LaneSocket` is the client's end: it answers the calls the client's channel code makes on a ZeroMQ
  DEALER (``getsockopt(EVENTS)``, ``poll``, ``fileno`` for a ``zmq.Poller``; :func:`protocol.wire.recv_frames` and
  ``send_parts`` dispatch to it), blocking on its own sends (back-pressure), with a bounded wait for the rest of a
  message once its first bytes came. The end of the connection raises :class:`LaneClosed` (the worker is gone).
- :class:`LaneListener` is the worker's: non-blocking throughout (a client that sends half a message or stops
  reading never stalls it). Each connection's answers are queued when its socket is full, within the bounds of
  ``dispatcher/answers.py`` (``TENSORWIRE_ANSWER_BYTES``, ``TENSORWIRE_ANSWER_HWM``): an answer past them is dropped
  and an ``OutOfMemory`` error with its ``q`` goes in its place; a connection that leaves even those unread is
  closed. Each connection has a routing id that no ZeroMQ peer can have (``LANE_ROUTE``).
"""

from __future__ import annotations

import collections
import itertools
import os
import select
import selectors
import shutil
import socket
import struct
import tempfile

import zmq

from .errors import OutOfMemory, ProtocolError

#: use the lane where a worker offers it (``TENSORWIRE_LANE``; 0 turns it off on either side)
LANE_ENABLED = os.environ.get("TENSORWIRE_LANE", "1").lower() not in ("0", "false", "no", "off")
_PREFIX = struct.Struct("<QI")
_LEN = struct.Struct("<Q")
#: queued answers' frames smaller than this are copied (``dispatcher/answers.py`` ``TRACK_MIN``: ZeroMQ's rule)
COPY_BELOW = 64 << 10
#: frames in one message at most
MAX_FRAMES = 1 << 16
#: how long a reader waits for the rest of a message whose first bytes came (seconds): the writer is mid-message
REST_WAIT_S = 60.0
#: a lane connection's routing id starts with this: a ZeroMQ ROUTER's own ids are 5 bytes starting with 0, and a
#: peer's chosen id may not start with 0 at all
LANE_ROUTE = b"\x00\xffL"
#: zmq's flag and option as plain ints (``protocol.wire`` imports them from here): a caller's ``getsockopt(EVENTS) &
#: POLLIN`` of an ``enum.Flag`` member builds a new member, about a microsecond, at every answer waited for
POLLIN = int(zmq.POLLIN)
EVENTS = int(zmq.EVENTS)


def is_lane_route(route: bytes) -> bool:
    """Whether ``route`` is a lane connection's routing id (``LANE_ROUTE`` and its 8-byte number)."""
    return len(route) == len(LANE_ROUTE) + 8 and route.startswith(LANE_ROUTE)


class LaneClosed(ConnectionError):
    """The other end of a lane closed it (a worker that exited, or closed a connection that broke its bounds).
    ``device``: the device whose channel the lane was."""

    def __init__(self, message: str, device: str | None = None):
        super().__init__(message)
        self.device = device


class LaneFrame:
    """A received header frame: what the channel code reads of a ``zmq.Frame`` (``bytes``, ``buffer``)."""

    __slots__ = ("bytes",)

    def __init__(self, data: bytes):
        self.bytes = data

    @property
    def buffer(self) -> memoryview:
        return memoryview(self.bytes)


def _view(frame) -> memoryview:
    buf = frame.buffer if isinstance(frame, (zmq.Frame, LaneFrame)) else frame
    mv = buf if type(buf) is memoryview else memoryview(buf)
    return mv.cast("B") if mv.ndim != 1 or mv.format != "B" else mv


#: the prefix and frame table of a message of n frames, for the common small n
_HEADS = [None, *(struct.Struct(f"<QI{n}Q") for n in range(1, 9))]
_TABLES = [None, *(struct.Struct(f"<{n}Q") for n in range(1, 9))]  # (... and its frame table alone)


def encode(parts) -> tuple[list, int]:
    """The buffers of one message (``parts``: its frames, the header first) for one ``sendmsg`` (bytes as they are,
    anything else as a flat memoryview), and their bytes in all."""
    views = [p if type(p) is bytes else _view(p) for p in parts]
    sizes = [len(v) if type(v) is bytes else v.nbytes for v in views]
    n = len(views)
    body = 8 * n + sum(sizes)
    head = (_HEADS[n] if n < len(_HEADS) else struct.Struct(f"<QI{n}Q")).pack(body, n, *sizes)
    return [head, *views], body + _PREFIX.size


def _split(body: bytearray, n: int) -> list:
    """The frames of a message's body: the header frame as a ``LaneFrame``, the others as memoryviews of ``body``."""
    if n < 1 or n > MAX_FRAMES or len(body) < 8 * n:
        raise ProtocolError(f"a lane message declares {n} frames in a body of {len(body)} bytes")
    sizes = (_TABLES[n] if n < len(_TABLES) else struct.Struct(f"<{n}Q")).unpack_from(body)
    if 8 * n + sum(sizes) != len(body):
        raise ProtocolError("a lane message's frame sizes do not add up to its length")
    mv = memoryview(body)
    at = 8 * n
    out = []
    for k in sizes:
        out.append(mv[at:at + k])
        at += k
    out[0] = LaneFrame(bytes(out[0]))
    return out


def _drain(sock: socket.socket, rest: collections.deque) -> None:
    """Write the buffers of ``rest``, taking each off once written (a blocking socket: within its timeout). Its state
    holds between system calls: a send interrupted (Ctrl-C) leaves the unwritten part in ``rest``, for the next."""
    while rest:
        _skip(rest, sock.sendmsg(list(itertools.islice(rest, 512))))  # (sendmsg takes at most IOV_MAX buffers)


def _skip(rest: collections.deque, n: int) -> None:
    """Take ``n`` written bytes off the front of ``rest`` (memoryviews)."""
    while rest and n >= rest[0].nbytes:
        n -= rest.popleft().nbytes
    if n:
        rest[0] = rest[0][n:]


class LaneSocket:
    """The client's end of a lane (see the module docstring): used where the channel code uses its DEALER."""

    def __init__(self, path: str, rcvtimeo_ms: int, device: str | None = None, connect_timeout: float = 2.0):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(connect_timeout)
        try:
            sock.connect(path)
        except OSError:
            sock.close()
            raise
        sock.settimeout(REST_WAIT_S)
        self.sock = sock
        self.rcvtimeo_ms = rcvtimeo_ms
        self._poll = select.poll()
        self._poll.register(sock.fileno(), select.POLLIN)
        self._prefix = bytearray(_PREFIX.size)
        self._got = 0  # bytes of the message being read that came (of its prefix while _body is None)
        self._body: bytearray | None = None
        self._n = 0  # its frames
        self._rest: collections.deque = collections.deque()  # what is left to write of the message being sent
        self.device = device
        self.closed = False  # the connection ended (the descriptor stays open until close: a poll may watch it)

    def fileno(self) -> int:
        return self.sock.fileno()

    def getsockopt(self, opt: int) -> int:
        """``EVENTS``: ``POLLIN`` when a message (or the connection's end: the read raises ``LaneClosed``) waits."""
        if opt != EVENTS:
            raise ValueError("a lane answers EVENTS only")
        return POLLIN if self.closed or self._poll.poll(0) else 0

    def poll(self, timeout_ms: int = 0) -> int:
        return POLLIN if self.closed or self._poll.poll(timeout_ms) else 0

    def send_message(self, parts) -> None:
        """Send one message, whole: what a send interrupted (Ctrl-C) left unwritten goes first. A lane that broke
        takes it without a word, as ZeroMQ queues a message for a peer that died: the next read of this lane raises
        ``LaneClosed``, and that is where the channel's loss is handled."""
        if self.closed:
            return
        bufs, size = encode(parts)
        rest = self._rest
        try:
            if not rest and len(bufs) <= 512:  # (the commonest: all of it in one call)
                n = self.sock.sendmsg(bufs)
                if n == size:
                    return
                rest.extend(map(memoryview, bufs))
                _skip(rest, n)
            else:
                rest.extend(map(memoryview, bufs))
            _drain(self.sock, rest)
        except OSError:
            self.closed = True
            rest.clear()

    def recv_message(self, flags: int = 0) -> list:
        """One message's frames; ``zmq.Again`` when none comes at once (``NOBLOCK``) or within ``rcvtimeo_ms``;
        ``LaneClosed`` when the connection ended. Once a message's first bytes came, the rest is waited for (up to
        ``REST_WAIT_S`` a read); a read interrupted (Ctrl-C) keeps what it read, and the next goes on from there."""
        if self.closed:
            raise LaneClosed("the lane is closed", self.device)
        if self._body is None and not self._got and not self._poll.poll(
                0 if flags & zmq.NOBLOCK else self.rcvtimeo_ms):
            raise zmq.Again()
        sock = self.sock
        try:
            if self._body is None:
                view = memoryview(self._prefix)
                while self._got < _PREFIX.size:
                    n = sock.recv_into(view[self._got:])
                    if not n:
                        raise LaneClosed("the lane's other end closed it")
                    self._got += n
                size, self._n = _PREFIX.unpack(self._prefix)
                self._body, self._got = bytearray(size), 0
            body = self._body
            view = memoryview(body)
            while self._got < len(body):
                n = sock.recv_into(view[self._got:])
                if not n:
                    raise LaneClosed("the lane's other end closed it")
                self._got += n
        except OSError as e:  # (LaneClosed included: the worker is gone, or a read timed out mid-message)
            self.closed = True
            raise LaneClosed(str(e) or "the lane broke while reading", self.device) from None
        self._body, self._got = None, 0
        return _split(body, self._n)

    def close(self, linger=None) -> None:
        self.closed = True
        self.sock.close()


class _Conn:
    """One client's connection at the worker: its read state and its unwritten answers."""

    __slots__ = ("sock", "route", "prefix", "body", "got", "n", "out", "held", "queued", "writing")

    def __init__(self, sock: socket.socket, route: bytes):
        self.sock = sock
        self.route = route
        self.prefix = bytearray(_PREFIX.size)
        self.body: bytearray | None = None  # the body being read (None: the prefix is)
        self.got = 0
        self.n = 0
        self.out: collections.deque = collections.deque()  # buffers not written yet
        self.held = 0  # their bytes
        self.queued = 0  # messages among them
        self.writing = False  # the selector watches it for room to write


class LaneListener:
    """The worker's end of lanes: a listening Unix socket in a private folder, its connections, one selector for
    all of them (whose descriptor the worker's poll watches as one). Main thread only."""

    def __init__(self, tag: str, byte_bound: int, hwm: int, max_message: int, folder: str | None = None,
                 pack=None):
        """``folder``: where the lane's private folder is made: the host's shared-memory folder, so that the
        processes that share the worker's shared memory, and only they, find it. ``pack``: the header packer
        (``protocol.wire.pack_header``, which imports this module), for the errors sent in place of dropped answers."""
        self.pack = pack
        self.dir = tempfile.mkdtemp(prefix="tensorwire-lane-", dir=folder)  # (0700: only this user can connect)
        self.path = os.path.join(self.dir, "s")
        if len(self.path.encode()) > 100:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise OSError(f"the lane's socket path {self.path!r} is too long for a Unix socket")
        self.tag = tag
        self.byte_bound, self.hwm, self.max_message = byte_bound, hwm, max_message
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(64)
        self.listener.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, None)
        self.conns: dict[bytes, _Conn] = {}
        self._ids = itertools.count(1)
        self._ready = select.poll()
        self._ready.register(self.selector.fileno(), select.POLLIN)
        self.nonce = os.urandom(16).hex()
        self.dropped = 0

    def fileno(self) -> int:
        return self.selector.fileno()

    def ready(self) -> bool:
        """Whether anything waits (a message, a connection, room to write): one system call."""
        return bool(self._ready.poll(0))

    def close(self) -> None:
        for c in list(self.conns.values()):
            self._close(c)
        self.selector.close()
        self.listener.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- reading ---------------------------------------------------------------------------------
    def take(self, limit: int = 1000) -> list:
        """The messages waiting, as ``[route, header, *frames]`` (at most ``limit``); accepts new connections and
        writes queued answers on the way. A malformed message closes its connection (its framing is lost)."""
        out: list = []
        for key, mask in self.selector.select(0):
            c = key.data
            if c is None:
                self._accept()
                continue
            if mask & selectors.EVENT_WRITE:
                self._write(c)
            if mask & selectors.EVENT_READ and c.route in self.conns:
                for _ in range(limit - len(out)):
                    msg = self._read(c)
                    if msg is None:
                        break
                    out.append(msg)
            if len(out) >= limit:
                break
        return out

    def _accept(self) -> None:
        for _ in range(64):
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            sock.setblocking(False)
            c = _Conn(sock, LANE_ROUTE + next(self._ids).to_bytes(8, "big"))  # (see is_lane_route)
            self.conns[c.route] = c
            self.selector.register(sock, selectors.EVENT_READ, c)

    def _read(self, c: _Conn) -> list | None:
        """One whole message of ``c``, or None: not all of it came yet (what came is kept), or ``c`` ended."""
        try:
            if c.body is None:
                n = c.sock.recv_into(memoryview(c.prefix)[c.got:])
                if not n:
                    self._close(c)
                    return None
                c.got += n
                if c.got < _PREFIX.size:
                    return None
                size, c.n = _PREFIX.unpack(c.prefix)
                if size > self.max_message or not 0 < c.n <= MAX_FRAMES:
                    raise ProtocolError(f"a lane message of {size} bytes in {c.n} frames")
                c.body, c.got = bytearray(size), 0
                if not size:
                    raise ProtocolError("an empty lane message")
            n = c.sock.recv_into(memoryview(c.body)[c.got:])
            if not n:
                self._close(c)
                return None
            c.got += n
            if c.got < len(c.body):
                return None
            body, c.body, c.got = c.body, None, 0
            return [LaneFrame(c.route), *_split(body, c.n)]
        except (BlockingIOError, InterruptedError):
            return None
        except (OSError, ProtocolError):
            self._close(c)
            return None

    # -- writing ---------------------------------------------------------------------------------
    def send(self, route: bytes, parts: list, q) -> bool:
        """Send one message (its frames, the header first) to ``route``'s connection within the bounds; False when
        it was dropped (the connection is gone, or its error went in its place). ``q``: the request it answers."""
        c = self.conns.get(route)
        if c is None:
            return False
        bufs, size = encode(parts)
        if c.out and (c.held + size > self.byte_bound or c.queued >= self.hwm):
            self.dropped += 1
            if type(q) is not int or q < 0:
                return False
            if c.queued >= 2 * self.hwm:  # (not even its errors read: the connection goes)
                self._close(c)
                return False
            err = OutOfMemory(f"the worker for {self.tag} dropped the answer to request {q}: this client left "
                              f"{c.held} bytes in {c.queued} answers unread on its lane (bounds: "
                              f"TENSORWIRE_ANSWER_BYTES, TENSORWIRE_ANSWER_HWM). Read answers before asking for more")
            bufs, size = encode([self.pack({"t": "error", "q": q, "error": err.to_wire()})])
            ok = False
        else:
            ok = True
        out = c.out
        waiting = len(out)
        out.extend(memoryview(b) if type(b) is not memoryview else b for b in bufs)
        c.held += size
        c.queued += 1
        if not waiting:  # (nothing was waiting: write now)
            self._write(c)
            waiting = len(out) - len(bufs)  # (negative: part of this message went)
        if len(out) > max(waiting, 0):
            # what stays queued of this message: small frames copied, as ZeroMQ copies them (the tensors they view may
            # change before the client reads); large ones are held as they are, as ZeroMQ holds them (zero-copy)
            for i in range(max(waiting, 0), len(out)):
                if out[i].nbytes < COPY_BELOW:
                    out[i] = memoryview(bytes(out[i]))
        return ok

    def _write(self, c: _Conn) -> None:
        out = c.out
        try:
            _drain(c.sock, out)
        except (BlockingIOError, InterruptedError):  # (the socket is full: the rest when it has room)
            pass
        except OSError:
            self._close(c)
            return
        if out:
            c.held = sum(v.nbytes for v in out)
        else:
            c.held = c.queued = 0
        if c.writing != bool(out):  # (watched for room only while something waits: a system call when it changes)
            c.writing = bool(out)
            self.selector.modify(c.sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if out else 0), c)

    def end(self, route: bytes) -> None:
        """Close ``route``'s connection when answers wait unwritten on it (its session ended: they go with it; a
        client that connects again hears that its session is gone, as on a ZeroMQ channel)."""
        c = self.conns.get(route)
        if c is not None and c.out:
            self._close(c)

    def _close(self, c: _Conn) -> None:
        if self.conns.pop(c.route, None) is None:
            return
        try:
            self.selector.unregister(c.sock)
        except (KeyError, ValueError, OSError):
            pass
        c.sock.close()
        c.out.clear()

