"""A worker's direct channel: clients send it single-device work without passing through the dispatcher.

The worker binds a ROUTER socket of its own (``--direct-address``, ``TENSORWIRE_DIRECT_ADDRESS``; default an
ephemeral port on 127.0.0.1, ``none`` turns it off) and registers its address with the dispatcher, which grants
sessions channels to it (``protocol.capability``). Every message on this socket carries the capability; the
worker checks it itself, reads the session id out of it, and turns the message into the same ``run`` the
dispatcher would have sent, so one executor serves both paths and a session's work on this worker keeps one
order (the client fences when it switches paths: ``client/channels.py``).

Messages (msgpack header + raw frames, as everywhere):

- ``hello {cap, q}`` -> ``ok {q, device}``: the client's check that the channel works.
- ``run {cap, q?, ext, outs | out_first (+temps), plan?, nodes?, devs?, dyn?, fetch, release, sync, prof?}``:
  a batch on this device alone, in the client's batch form (nodes ``[op, refs, attrs, device index]``). With
  ``q`` it is answered (``done``) on this socket; errors of batches sent without ``q`` come with the next answer.
- ``plan {cap, plan, nodes, devs}``: a plan's nodes again, after this worker asked for them (``need_plan {q,
  plan}``: it evicted the plan; the batch waits for them).
- ``cancel {cap}``: as the dispatcher's ``cancel``.

Shared memory on one host. A client that asks for it in its ``hello`` (``shm: true``) gets the name of a small
file this worker made, holding a random nonce (``ok``'s ``shm``): a client that can read it shares this host's
shared memory, and moves large tensors through files of the worker's own (``ShmPool``, under ``SHM_DIR``, never a
path a client chose):

- ``shm_take {cap, q, sizes}`` -> ``shm {q, paths}``: files lent to the session, for the client to write uploads
  into; a ``run`` names them in ``shm_frames: [[frame, path], ...]`` (that frame is empty on the wire), and the
  tensor it makes lives on the file's pages (no copy); the file returns to the pool when the tensor dies.
- a ``run`` with ``shm: N`` gets each fetched value of N bytes or more in a file lent to the session (its value
  descriptor names the path instead of a frame); the client gives it back (``shm_give: [paths]`` on any later
  message) when its array dies. Files still lent when the session closes go back then.

A malformed or unauthorised message is answered with ``error {q, error}`` and changes nothing.

Worker to worker. A tensor moved between devices (a cross-device ``copy``: ``send`` on the source, ``recv`` on the
destination) goes from the source worker straight to the destination's direct socket when the dispatcher names
the destination's address in the source's ``run`` (``xto``); otherwise through the dispatcher as before. These
messages carry no capability but a signature under the service credential (``protocol.capability.peer_mac``):

- ``xfer {s, x, dtype, shape | err, shm?, from, mac}``: the value (a frame, or on one host a file of the source's
  pool, mapped by the destination without a copy), and the source's direct address. The destination tells the
  dispatcher ``xfer_got`` (it forgets the route; a route still open when a source dies is failed as before).
- ``xfer_give {paths, mac}``: the destination's arrays on those files died: the source reuses them.
"""

from __future__ import annotations

import collections
import logging
import os
import re
import socket
import time
import weakref

import numpy as np
import zmq

from tensorwire.dispatcher.answers import ANSWER_BYTES, ANSWER_HWM, Answers, bound_socket, connection_of
from tensorwire.protocol.addresses import check_address
from tensorwire.protocol.batch_ids import is_int_list
from tensorwire.protocol.capability import DIRECT_ADDRESS_ENV, channel_key, check_peer, peer_key, peer_mac, verify
from tensorwire.protocol.curve import apply_pinned, is_local_address, load_key_pair
from tensorwire.protocol.errors import DeviceError, ProtocolError, TensorwireError, Unauthorized, error_to_wire
from tensorwire.protocol.graph import MAX_INPUTS, RECV, SEND
from tensorwire.protocol.lane import LANE_ENABLED, LaneListener, is_lane_route
from tensorwire.protocol.liveness import set_zmq_heartbeats
from tensorwire.protocol.messages import DIRECT, check
from tensorwire.protocol.ops import OPS
from tensorwire.protocol.service import SHM_DIR
from tensorwire.protocol.shm_paths import MappedFiles
from tensorwire.protocol.wire import (
    EVENTS,
    MAX_MESSAGE,
    NOBLOCK,
    POLLIN,
    as_frame,
    frame_nbytes,
    pack_header,
    recv_frames,
    send_parts,
    unpack_header,
)

from .shm import ShmPool

log = logging.getLogger("tensorwire.worker")

ADDRESS_ENV = DIRECT_ADDRESS_ENV
DEFAULT_ADDRESS = "tcp://127.0.0.1:*"
_NOT_DIRECT = frozenset((SEND, RECV, "collective"))  # work that needs another device or the collectives service
MAX_CLOSED = 1 << 14
MAX_LENT_FILES = 256  # shared-memory files one session may hold on loan at once
MAX_PEER_FILES = 256  # files lent to other workers (transfers) at once; past it, transfers go as frames
SHM_MIN = 1 << 20  # a transfer this large goes through shared memory between workers on one host
MAX_PEER_MAPPED = 2 << 30  # mappings of other workers' files kept for reuse
#: what each kind of ``protocol.messages.DIRECT`` does: a client's, under its capability...
DIRECT_HANDLERS = {"hello": "_hello", "run": "_run", "plan": "_plan", "cancel": "_cancel", "shm_take": "_shm_take"}
#: ...and another worker's, signed with the service credential's key
PEER_KINDS = {"xfer": "_peer_xfer", "xfer_give": "_peer_give"}
_PEER_FILE = re.compile(r"tensorwire-[0-9]{1,10}-[A-Za-z0-9_.-]{1,140}-io-[0-9]{1,12}")
#: how long the worker's loop blocks on its direct socket alone after a turn that took only direct messages (a
#: client in a round-trip loop sends its next one a hundred-odd microseconds after our answer), before it watches
#: every socket again: what the dispatcher sends meanwhile waits at most this (milliseconds, zmq's RCVTIMEO)
ALONE_READ_MS = 1
#: after a read alone that timed out, the next 1, 2, 4 ... this many chances to read alone are skipped (a hit resets)
MAX_ALONE_SKIP = 64


_ID_LISTS = ("ext", "fetch", "release")  # a batch's lists of handle ids (and ``outs``, unless ``out_first``)


def _ints(h: dict, name: str) -> list:
    v = h.get(name)
    if v is None:
        return []
    if not is_int_list(v):
        raise ProtocolError(f"'{name}' must be a list of ints")
    return v


def _is_dyn(dyn) -> bool:
    """Whether a batch's ``dyn`` is a non-empty list of ``[node, attrs]`` (an int and a map). A plain loop: passes in
    C (``set(map(type, ...))`` over the entries, their nodes and their attrs) cost ~0.9 us for one entry against
    0.15 us, and more at every length measured (up to 50 entries)."""
    if type(dyn) is not list or not dyn:
        return False
    for e in dyn:
        if type(e) is not list or len(e) != 2 or type(e[0]) is not int or type(e[1]) is not dict:
            return False
    return True


def advertised(bound: str, dispatcher: str | None) -> str:
    """The address to tell clients for a socket bound to ``bound``: a wildcard host (``0.0.0.0``, ``*``) becomes this
    host's address on the interface that reaches the dispatcher (a UDP ``connect`` picks it; nothing is sent)."""
    if not bound.startswith("tcp://"):
        return bound
    host, _, port = bound[len("tcp://"):].rpartition(":")
    if host not in ("0.0.0.0", "*", "[::]", "::"):
        return bound
    peer = "127.0.0.1"
    if dispatcher and dispatcher.startswith("tcp://"):
        peer = dispatcher[len("tcp://"):].rpartition(":")[0].strip("[]") or peer
    try:
        with socket.socket(socket.AF_INET6 if ":" in peer else socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.connect((peer, 9))
            ip = u.getsockname()[0]
    except OSError:
        ip = socket.gethostname()
    return f"tcp://{'[' + ip + ']' if ':' in ip else ip}:{port}"


def fragment(device: str, nodes, devs, n_ext: int) -> list:
    """The worker's fragment (``[op, refs, attrs]`` nodes) of a batch that runs on ``device`` alone; raises
    ProtocolError/DeviceError for anything else (another device, a transfer, a collective, a malformed node). The
    checks are ``split_batch``'s for a batch on one device, made in one pass (no fragments to build)."""
    if not isinstance(nodes, list) or not isinstance(devs, list):
        raise ProtocolError("batch 'nodes' and 'devs' must be lists")
    for d in devs:
        if not isinstance(d, str):
            raise ProtocolError("device names must be strings")
        if d != device:
            raise DeviceError(f"unknown device {d!r}; the cluster has: {device}")
    n_devs = len(devs)
    out = []
    for j, node in enumerate(nodes):
        if type(node) is not list or len(node) != 4:
            raise ProtocolError(f"node {j}: expected [op, refs, attrs, dev]")
        op, refs, attrs, di = node
        if type(op) is not str or op not in OPS:
            raise ProtocolError(f"node {j}: unknown op {op!r}")
        if op in _NOT_DIRECT:
            raise ProtocolError(f"op {op!r} cannot run on a direct channel (transfers and collectives go through "
                                "the dispatcher)")
        if type(refs) is not list or len(refs) > MAX_INPUTS:
            raise ProtocolError(f"node {j}: refs must be a list of at most {MAX_INPUTS} inputs")
        if attrs is not None and type(attrs) is not dict:
            raise ProtocolError(f"node {j}: attrs must be a map")
        if type(di) is not int or not 0 <= di < n_devs:
            raise ProtocolError(f"node {j}: device index {di!r} out of range")
        for r in refs:
            if type(r) is not int or not -n_ext <= r < j:
                raise ProtocolError(f"node {j}: bad input reference {r!r}")
        out.append([op, refs, attrs])
    return out


class DirectChannel:
    """The worker's direct socket and the checks every message on it passes (main thread only)."""

    def __init__(self, ctx: zmq.Context, device: str, instance: str, address: str | None, keys=None,
                 service_token: str | None = None, dispatcher: str | None = None):
        self.device = device
        self.key = channel_key(instance)
        self.ctx = ctx
        self.peer_key = peer_key(service_token) if service_token else None  # signs worker-to-worker messages
        self.peers: dict[str, zmq.Socket] = {}  # other workers' direct addresses -> a DEALER to each
        self.peer_lent: dict[str, object] = {}  # path -> file of ours another worker holds a tensor on
        self.peer_maps = MappedFiles(MAX_PEER_MAPPED)  # other workers' files we mapped
        self.peer_give: collections.deque = collections.deque()  # (source address, path) whose arrays died
        self.epoch: str | None = None  # the dispatcher's: set when the worker registers
        self.closed: dict = {}  # sessions dropped here: their capabilities are refused until they expire
        self.caps: dict = {}  # capabilities checked already -> (epoch, session, expiry)
        self.sock: zmq.Socket | None = None
        self.address: str | None = None
        self.why_not: str | None = None
        self.public_key = None  # the CURVE key clients pin (None: plain, loopback only)
        self.io = ShmPool(f"{device}-io")  # files for uploads and downloads on this host
        self.lent: dict[bytes, dict] = {}  # session -> {path: ShmFile} on loan to it
        self.routes: dict[bytes, tuple] = {}  # session -> (routing id, connection) of its channel, while it lives
        self.probe: tuple[str, str] | None = None  # (path, nonce) of the same-host probe
        self.lane: LaneListener | None = None  # the same-host lane (protocol/lane.py), for clients on this host
        self.alone_skip = 0  # chances to read alone skipped after the last read alone that timed out ...
        self.alone_skip_next = 1  # ... and how many the next such read skips
        address = address if address is not None else os.environ.get(ADDRESS_ENV, DEFAULT_ADDRESS)
        if not address or address.lower() == "none":
            self.why_not = "direct channel turned off (--direct-address none)"
            return
        if keys is None and not is_local_address(address.replace("*", "0")):
            self.why_not = (f"a direct channel on {address} would carry tensors in clear: give the worker CURVE keys "
                            f"(--keys) or a loopback address")
            log.warning("not opening a direct channel: %s", self.why_not)
            return
        self.public_key: str | None = None
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
        bound_socket(sock)  # what a client that does not read, or sends ahead of us, may cost (dispatcher/answers.py)
        sock.setsockopt(zmq.RCVTIMEO, ALONE_READ_MS)  # (read_alone's bound; every other read is NOBLOCK)
        set_zmq_heartbeats(sock)
        if keys is not None:  # encrypted with the service key pair; the capability, not the client key, authorises
            public, secret = load_key_pair(keys, "service")
            sock.curve_secretkey = secret
            sock.curve_publickey = public
            sock.curve_server = True
            self.public_key = public.decode()
        try:
            if address.endswith(":*") or address.endswith(":0"):
                base = address[: address.rindex(":")]
                check_address(base + ":1", "--direct-address", bind=True)
                port = sock.bind_to_random_port(base)
                self.address = f"{base}:{port}"
            else:
                check_address(address, "--direct-address", bind=True)
                sock.bind(address)
                self.address = address
            self.address = advertised(self.address, dispatcher)
        except (zmq.ZMQError, TensorwireError) as e:
            sock.close(0)
            self.why_not = f"cannot listen on {address}: {e}"
            log.warning("no direct channel: %s", self.why_not)
            return
        self.answers = Answers(sock, f"the worker for {self.device}")
        self.sock = sock
        if LANE_ENABLED:
            try:
                self.lane = LaneListener(device, ANSWER_BYTES, ANSWER_HWM, MAX_MESSAGE, SHM_DIR, pack_header)
                self._both = zmq.Poller()  # (read_alone's wait on the channel and the lane together)
                self._both.register(sock, zmq.POLLIN)
                self._both.register(self.lane, zmq.POLLIN)
            except OSError as e:
                log.warning("no same-host lane for the direct channel: %s", e)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close(0)
            self.sock = None
        if self.lane is not None:
            self.lane.close()
            self.lane = None
        for p in self.peers.values():
            p.close(0)
        self.peers.clear()
        self.peer_maps.clear()
        self.io.close()

    # -- worker to worker --------------------------------------------------------------------------
    def _peer(self, address: str, key: str | None) -> zmq.Socket:
        sock = self.peers.get(address)
        if sock is None:
            sock = self.ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 1000)
            sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
            if key:
                apply_pinned(sock, key)
            sock.connect(address)
            self.peers[address] = sock
        return sock

    def send_xfer(self, peer: list, sid: bytes, x: int, arr, dtype: str, shape: list, err: dict | None) -> None:
        """Send transfer ``x`` of session ``sid`` straight to the destination worker ``peer`` (``[k, address, key,
        same host]``): the value ``arr`` (through a file of ours on one host), or the error ``err``."""
        _, address, key, same_host = peer
        shm = ""
        frames = []
        if err is None:
            if (same_host and self.address is not None and arr.nbytes >= SHM_MIN
                    and len(self.peer_lent) < MAX_PEER_FILES):
                try:
                    f = self.io.take(arr.nbytes)
                    np.copyto(np.frombuffer(memoryview(f.map), np.uint8, arr.nbytes),
                              np.ascontiguousarray(arr).reshape(-1).view(np.uint8))
                    self.peer_lent[f.path] = f
                    shm = f.path
                except Exception as e:  # (shared memory full: a frame it is)
                    log.info("a transfer goes as a frame, not through shared memory: %s", e)
            if not shm:
                frames = [as_frame(arr)]
        frm = self.address or ""
        h = {"t": "xfer", "s": sid, "x": x, "dtype": dtype, "shape": shape, "shm": shm, "from": frm, "err": err,
             "mac": peer_mac(self.peer_key, "xfer", sid, x, dtype, shape, shm, frm, err)}
        send_parts(self._peer(address, key), [pack_header(h), *frames])

    def _xfer(self, executor, h: dict, frames: list) -> None:
        """A transfer from another worker: checked, mapped (a file of the source's) or taken as a frame, and handed
        to the executor as the dispatcher would have; the dispatcher hears that it arrived."""
        sid, x, dtype, shape, shm, frm, err = (h.get(k) for k in ("s", "x", "dtype", "shape", "shm", "from", "err"))
        check_peer(self.peer_key, h.get("mac"), "xfer", sid, x, dtype, shape, shm, frm, err)
        if type(sid) is not bytes or type(x) is not int:
            raise ProtocolError("a transfer names its session and key")
        msg = {"t": "xfer", "s": sid, "x": x}
        if err is not None:
            msg["err"] = err
        else:
            msg["dtype"], msg["shape"] = dtype, shape
            if shm:
                frames = [self._peer_view(shm, frm)]
        executor.handle(msg, frames)
        executor.send({"t": "xfer_got", "s": sid, "x": x}, [])

    def _peer_view(self, path, source: str) -> memoryview:
        """A read-only view of another worker's file (``path`` checked: in the cluster's folder, named as a
        worker's pool names them, a regular file of this user); the source reuses it once the view's arrays die."""
        if not (isinstance(path, str) and os.path.dirname(path) == SHM_DIR and _PEER_FILE.fullmatch(
                os.path.basename(path)) and isinstance(source, str) and source):
            raise ProtocolError("a transfer named a file that is not a worker's shared memory")
        root = np.frombuffer(self.peer_maps.get(path), np.uint8)
        root.flags.writeable = False
        weakref.finalize(root, self.peer_give.append, (source, path))
        return memoryview(root)

    def flush_gives(self) -> None:
        """Tell each source worker which of its files our arrays no longer use (main thread)."""
        by: dict[str, list[str]] = {}
        for _ in range(len(self.peer_give)):
            address, path = self.peer_give.popleft()
            by.setdefault(address, []).append(path)
        for address, paths in by.items():
            sock = self.peers.get(address)
            if sock is None:
                sock = self._peer(address, None)  # (a source we never sent to: it reached us with no key)
            send_parts(sock, [pack_header({"t": "xfer_give", "paths": paths,
                                           "mac": peer_mac(self.peer_key, "xfer_give", paths)})])

    def _xfer_give(self, h: dict) -> None:
        paths = h.get("paths")
        check_peer(self.peer_key, h.get("mac"), "xfer_give", paths)
        for p in paths if isinstance(paths, list) else ():
            f = self.peer_lent.pop(p, None) if isinstance(p, str) else None
            if f is not None:
                self.io.give_back(f)

    # -- shared memory -----------------------------------------------------------------------------
    def _probe(self) -> dict:
        """The same-host probe a client reads to learn that it shares this worker's shared memory."""
        if self.probe is None:
            f = self.io.take(32)
            nonce = os.urandom(16).hex()
            f.map[:32] = nonce.encode()
            self.probe = (f.path, nonce)
        return {"probe": self.probe[0], "nonce": self.probe[1], "prefix": self.io.prefix}

    def lend(self, sid: bytes, size: int):
        """A file of ``size`` bytes from the pool, on loan to session ``sid``."""
        lent = self.lent.setdefault(sid, {})
        if len(lent) >= MAX_LENT_FILES:
            raise ProtocolError(f"a session may hold {MAX_LENT_FILES} shared-memory files at once; give some back")
        f = self.io.take(size)
        lent[f.path] = f
        return f

    def take_back(self, sid: bytes, path) -> object:
        """The file at ``path`` that session ``sid`` holds on loan, no longer lent; ProtocolError if it holds none."""
        f = self.lent.get(sid, {}).pop(path, None) if isinstance(path, str) else None
        if f is None:
            raise ProtocolError("a shared-memory file this session does not hold was named")
        return f

    def give_back(self, sid: bytes, paths) -> None:
        if type(paths) is not list:
            raise ProtocolError("'shm_give' must be a list of paths")
        for p in paths:
            self.io.give_back(self.take_back(sid, p))

    def drop(self, sid: bytes) -> None:
        """Session ``sid`` is gone: every file it held on loan goes back."""
        for f in self.lent.pop(sid, {}).values():
            self.io.give_back(f)

    def frames_from_shm(self, sid: bytes, frames: list, spec) -> list:
        """``frames`` with each ``[frame, path]`` of ``spec`` replaced by the file's bytes (a read-only view that
        gives the file back to the pool when the tensor made from it dies)."""
        if type(spec) is not list:
            raise ProtocolError("'shm_frames' must be a list of [frame, path]")
        frames = list(frames)
        for item in spec:
            if not (type(item) is list and len(item) == 2 and type(item[0]) is int and 0 <= item[0] < len(frames)):
                raise ProtocolError("'shm_frames' must be a list of [frame, path] naming the message's frames")
            f = self.take_back(sid, item[1])
            frames[item[0]] = memoryview(self.io.lease(f, 0, (f.size,), np.dtype(np.uint8)))
        return frames

    def values_to_shm(self, sid: bytes, values: list, frames: list, threshold: int) -> list:
        """Move each fetched value of ``threshold`` bytes or more out of ``frames`` into a file lent to the session:
        its descriptor becomes ``[id, dtype, shape, -1, path]``. Returns the frames left (renumbered). A value
        that cannot go that way (too many files on loan, the shared memory full) stays a frame."""
        for f in frames:
            if frame_nbytes(f) >= threshold:
                break
        else:  # (the common case: every value is small)
            return frames
        keep, index = [], {}
        for k, f in enumerate(frames):
            mv = f if isinstance(f, memoryview) else memoryview(f)
            if mv.nbytes >= threshold:
                try:
                    file = self.lend(sid, mv.nbytes)
                    np.copyto(np.frombuffer(memoryview(file.map), np.uint8, mv.nbytes), np.frombuffer(mv, np.uint8))
                    index[k] = file.path
                    continue
                except Exception as e:
                    log.info("a fetched value goes as a frame, not through shared memory: %s", e)
            index[k] = len(keep)
            keep.append(f)
        for v in values:
            if type(v[3]) is not int:  # (carried in the header: protocol.wire.INLINE_MAX)
                continue
            where = index[v[3]]
            if isinstance(where, str):
                v[3:] = [-1, where]
            else:
                v[3] = where
        return keep

    def _verified(self, cap) -> bytes:
        """The session a capability acts for (``protocol.capability.verify``); a capability checked before is not
        checked again while it lasts (a session sends the same one with every message: the MAC is the costly part)."""
        hit = self.caps.get(cap) if type(cap) is bytes else None
        if hit is not None and hit[0] == self.epoch and hit[2] >= time.time():
            return hit[1]
        sid = verify(self.key, cap, self.device, self.epoch)
        if len(self.caps) >= MAX_CLOSED:
            self.caps.pop(next(iter(self.caps)))
        self.caps[cap] = (self.epoch, sid, int.from_bytes(cap[8:16], "big"))
        return sid

    def _refuse(self, route: bytes, q, err: dict) -> None:
        try:
            self.send(route, {"t": "error", "q": q, "error": err})
        except Exception:  # (a peer gone already: nobody to tell)
            log.exception("could not answer a refused direct message")

    def send(self, route: bytes, header: dict, frames=(), sizes: list | None = None) -> None:
        """Answer a client on its channel, within the bounds of ``dispatcher/answers.py``: an answer dropped at a
        bound reaches the client as an ``OutOfMemory`` error with its ``q``. ``sizes``: the frames' sizes in bytes,
        where the caller knows them. An answer to a lane's connection goes on the lane, within the same bounds."""
        if is_lane_route(route):
            if self.lane is not None:
                self.lane.send(route, [pack_header(header), *frames], header.get("q"))
            return
        self.answers.send(route, header, frames, sizes)

    def forget(self, sid: bytes) -> None:
        """A session was dropped: refuse its capabilities from now on (bounded: the oldest are forgotten)."""
        self.closed[sid] = None
        if len(self.closed) > MAX_CLOSED:
            self.closed.pop(next(iter(self.closed)))
        self.drop(sid)
        route = self.routes.pop(sid, None)
        if route is not None and route[0] not in {r[0] for r in self.routes.values()}:  # its unread answers go too
            if is_lane_route(route[0]):
                if self.lane is not None:
                    self.lane.end(route[0])
            else:
                self.answers.release(*route)

    def receive_lane(self, executor) -> int:
        """Take what waits on the same-host lane (at most 1000 messages: new connections accepted, queued answers
        written on the way) and hand it to ``executor``; returns the number taken."""
        msgs = self.lane.take()
        for msg in msgs:
            self.take(executor, msg)
        return len(msgs)

    def receive(self, executor) -> int:
        """Take what is waiting on the socket (at most 1000 messages) and hand it to ``executor``; returns the
        number taken."""
        n = 0
        sock = self.sock
        for n in range(1, 1001):
            if n > 1 and not sock.getsockopt(EVENTS) & POLLIN:  # (cheaper than the zmq.Again a recv raises)
                return n - 1
            try:  # (the first: the worker polled the socket, so a message is there but for a spurious wake-up)
                msg = recv_frames(sock, NOBLOCK)
            except zmq.Again:
                return n - 1
            self.take(executor, msg)
        return n

    def read_alone(self, spin, other) -> list | None:
        """The next message on this socket, waiting on it alone as a raw echo does (``spin``: the loop's
        ``IdleSpin``, whose busy-wait asks this socket's ``ZMQ_EVENTS`` alone; then one read blocking up to
        ``ALONE_READ_MS``), or None: nothing came, or ``other`` (the dispatcher's socket) has a message: the caller
        then polls every socket. Two system calls for ``other``, ~5 for the read, where a poll of the worker's three
        sockets and the drain's look for more cost ~13. A read that timed out costs its calls on top of the poll,
        so it backs off as the spin does: the next 1, 2, 4 ... ``MAX_ALONE_SKIP`` chances are skipped (None at
        once), and a read that caught a message resets that."""
        if self.alone_skip:
            self.alone_skip -= 1
            return None
        if other.getsockopt(EVENTS) & POLLIN:
            return None
        sock, lane = self.sock, self.lane
        if lane is not None and lane.conns:  # (clients on the lane: both watched, in one poll once the spin ends)
            if spin.wait(lambda _timeout: lane.ready() or sock.getsockopt(EVENTS) & POLLIN) or \
                    self._both.poll(ALONE_READ_MS):
                msgs = lane.take(1)
                if msgs:
                    self.alone_skip_next = 1
                    return msgs[0]
                try:
                    msg = recv_frames(sock, NOBLOCK)
                    self.alone_skip_next = 1
                    return msg
                except zmq.Again:
                    return None  # (a connection, a write, part of a message: the loop's poll sees what follows)
            self.alone_skip = self.alone_skip_next
            self.alone_skip_next = min(self.alone_skip_next * 2, MAX_ALONE_SKIP)
            return None
        if spin.wait(lambda _timeout: sock.getsockopt(EVENTS) & POLLIN):
            flags = NOBLOCK  # (a message is there)
        else:
            flags = 0  # (RCVTIMEO: ALONE_READ_MS)
        try:
            msg = recv_frames(sock, flags)
        except zmq.Again:
            self.alone_skip = self.alone_skip_next
            self.alone_skip_next = min(self.alone_skip_next * 2, MAX_ALONE_SKIP)
            return None
        self.alone_skip_next = 1
        return msg

    def take(self, executor, msg: list) -> None:
        """Hand one message read from the socket to ``executor``; a malformed or refused one is answered with an
        error and changes nothing."""
        if len(msg) < 2:
            return
        route = msg[0].bytes
        q = None
        h = {}
        try:
            h = unpack_header(msg[1].bytes)
            q = h.get("q")
            if q is not None and type(q) is not int:
                q = None
                raise ProtocolError("'q' must be an int")
            self._handle(executor, route, h, msg[2:], q, msg[1])
        except TensorwireError as e:
            if h.get("t") in ("xfer", "xfer_give"):  # (a worker's message: nobody reads answers to it)
                log.warning("refused a worker-to-worker message: %s", e.message)
                return
            self._refuse(route, q, e.to_wire())
        except Exception as e:  # a malformed message never stops the worker
            log.warning("bad direct message: %s", e)
            self._refuse(route, q, error_to_wire(
                ProtocolError("the worker rejected a malformed message (see its log)")))

    def _handle(self, executor, route: bytes, h: dict, frames: list, q, hframe=None) -> None:
        """One message of ``protocol.messages.DIRECT``: a worker's (signed) or a client's (under a capability),
        each kind to its handler (``DIRECT_HANDLERS``)."""
        t = check(DIRECT, h)
        if t in PEER_KINDS:  # from another worker: signed, not capability-bearing
            getattr(self, PEER_KINDS[t])(executor, h, frames)
            return
        sid = self._verified(h.get("cap"))
        if sid in self.closed:
            raise Unauthorized("this session is closed")
        if self.answers.owed(route):  # errors for answers dropped while its queue was full: room now?
            self.answers.flush(route)
        known = self.routes.get(sid)
        if known is None or known[0] != route:  # (where its answers go, and the connection Answers.release ends)
            self.routes[sid] = (route, connection_of(hframe))
        if h.get("shm_give"):
            self.give_back(sid, h["shm_give"])
        getattr(self, DIRECT_HANDLERS[t])(executor, route, sid, h, frames, q)

    def _run(self, executor, route: bytes, sid: bytes, h: dict, frames: list, q) -> None:
        run = self.run_header(executor, sid, h, q)
        if not h.get("shm_frames") and executor.replay_now(sid, run, route, frames):  # a known plan's replay,
            return  # answered at once (its uploads, if small, with it)
        if h.get("shm_frames"):
            frames = self.frames_from_shm(sid, frames, h["shm_frames"])
        executor.handle(run, frames, route=route)

    def _hello(self, executor, route: bytes, sid: bytes, h: dict, frames: list, q) -> None:
        ok = {"t": "ok", "q": q, "device": self.device}
        if h.get("shm") is True:
            ok["shm"] = self._probe()
        lane = self.lane
        if lane is not None:
            if route in lane.conns:  # (on the lane: the nonce its client was told on the channel, as proof)
                ok["nonce"] = lane.nonce
            elif h.get("lane") is True:
                ok["lane"] = {"path": lane.path, "nonce": lane.nonce}
        self.send(route, ok)

    def _shm_take(self, executor, route: bytes, sid: bytes, h: dict, frames: list, q) -> None:
        sizes = h.get("sizes")
        if not (type(sizes) is list and sizes and all(type(n) is int and 0 < n <= MAX_MESSAGE for n in sizes)):
            raise ProtocolError("'sizes' must be a list of positive ints")
        limit = executor.limit
        if limit is not None and sum(sizes) > limit:
            raise ProtocolError(f"{sum(sizes)} bytes of shared memory asked at once, over the session's "
                                f"{limit}-byte quota on {self.device}")
        self.send(route, {"t": "shm", "q": q, "paths": [self.lend(sid, n).path for n in sizes]})

    def _plan(self, executor, route: bytes, sid: bytes, h: dict, frames: list, q) -> None:
        plan = h.get("plan")
        if type(plan) is not int:
            raise ProtocolError("'plan' must be an int")
        nodes = fragment(self.device, h.get("nodes"), h.get("devs"), len(_ints(h, "ext")))
        executor.handle({"t": "plan", "s": sid, "plan": plan, "nodes": nodes}, [])

    def _cancel(self, executor, route: bytes, sid: bytes, h: dict, frames: list, q) -> None:
        executor.handle({"t": "cancel", "s": sid}, [])

    def _peer_xfer(self, executor, h: dict, frames: list) -> None:
        self._xfer(executor, h, frames)

    def _peer_give(self, executor, h: dict, frames: list) -> None:
        self._xfer_give(h)

    def run_header(self, executor, sid: bytes, h: dict, q) -> dict:
        """The executor's ``run`` for a direct batch, checked as the dispatcher checks a batch it routes."""
        get = h.get
        run = {"t": "run", "s": sid, "q": q, "reply": q is not None}
        for k in _ID_LISTS:
            v = get(k)
            if v is None:
                v = []
            elif not is_int_list(v):
                raise ProtocolError(f"'{k}' must be a list of ints")
            run[k] = v
        # (a set: the worker looks each of its outputs up in it, and it up in the session's handles, twice a batch)
        run["release"] = set(run["release"])
        if "out_first" in h:
            first = h["out_first"]
            if type(first) is not int or "outs" in h:
                raise ProtocolError("batch 'out_first' must be an int, and comes instead of 'outs'")
            run["out_first"] = first
        else:
            run["outs"] = _ints(h, "outs")
        plan = get("plan")
        if plan is not None and type(plan) is not int:
            raise ProtocolError("'plan' must be an int")
        nodes = get("nodes")
        if nodes is not None:
            run["nodes"] = fragment(self.device, nodes, get("devs"), len(run["ext"]))
            if "outs" in run and len(run["outs"]) != len(nodes):
                raise ProtocolError(f"batch has {len(nodes)} nodes but {len(run['outs'])} output ids")
        elif plan is None and (run.get("outs") or run["ext"]):
            raise ProtocolError("a batch with inputs or outputs needs 'nodes' or a 'plan'")
        if plan is not None:
            run["plan"] = plan
        dyn = get("dyn")
        if dyn:  # (an empty list: no dynamic attributes, as absent)
            if not _is_dyn(dyn):
                raise ProtocolError("'dyn' entries must be [node, attrs]")
            run["dyn"] = dyn
        elif dyn is not None and type(dyn) is not list:
            raise ProtocolError("'dyn' entries must be [node, attrs]")
        temps = get("temps")
        if temps is not None:
            run["temps"] = temps  # (checked against the plan's size when it is known: protocol.batch_ids)
        prof = get("prof")
        if prof is not None:
            if type(prof) is not int:
                raise ProtocolError("'prof' must be an int (the batch's number in the client's profile)")
            run["prof"] = prof
        if get("sync"):
            run["sync"] = True
        shm = get("shm")
        if shm is not None:
            if type(shm) is not int or shm < 1:
                raise ProtocolError("'shm' must be a positive int (the smallest value to fetch through a file)")
            run["shm"] = shm
        if q is None and (run["fetch"] or "sync" in run):
            raise ProtocolError("a batch with a fetch or sync needs 'q'")
        return run
