"""The client's side of the data plane: direct channels to workers, and which path each message takes.

The dispatcher grants each session a channel to every worker that listens for one (``welcome``'s ``channels``,
renewed with ``channel`` before they expire): the worker's address, its public id and a capability the worker
checks by itself (``protocol/capability.py``, ``backends/direct.py``). A batch whose nodes, inputs, fetches and
releases all live on one device goes to that device's worker directly: one hop each way instead of two, and
nothing for the dispatcher to do. Everything else (batches over several devices, transfers, collectives,
requests to services) goes through the dispatcher as before, the *relay*.

Order. A session's messages to one worker must arrive in program order whatever path each took. Each device is
in one of two modes: *direct* (its work goes on its channel) or *relay*. A message switches a device's mode only
behind a fence: before relayed work touches a device whose channel has messages not yet answered, the client
synchronises that channel; before direct work goes to a device after relayed batches that no relayed sync has
covered, the client synchronises through the relay. A loop that stays on one device never fences; one that keeps
switching stays on the relay for a while (``SWITCH_BACK``) rather than fence every step.

Where handles live. The client knows each live handle's device (``loc``): that is how it routes releases and
fetches and tells which path a batch can take. The dispatcher never sees handles made on channels; a relayed
batch that reads them says where they live (``locs``), and releases on a channel of handles the dispatcher does
know are reported to it (``forget``) so its table does not grow.
"""

from __future__ import annotations

import itertools
import logging
import operator
import os
import re
import weakref

import numpy as np
import zmq

from tensorwire.protocol.curve import apply_pinned
from tensorwire.protocol.errors import ProtocolError
from tensorwire.protocol.lane import LANE_ENABLED, LaneClosed, LaneSocket
from tensorwire.protocol.liveness import set_zmq_heartbeats
from tensorwire.protocol.service import spin_wait
from tensorwire.protocol.shm_paths import MappedFiles
from tensorwire.protocol.wire import (
    EVENTS,
    MAX_MESSAGE,
    POLLIN,
    array_from_frame,
    pack_header,
    recv_frames,
    send_parts,
    unpack_header,
)

log = logging.getLogger("tensorwire.client")

#: turn direct channels off for this process (``TENSORWIRE_DIRECT=0``): everything goes through the dispatcher
DIRECT_ENABLED = os.environ.get("TENSORWIRE_DIRECT", "1").lower() not in ("0", "false", "no", "off")
#: how long the first message on a channel waits for the worker to answer before the device falls back to the relay
DIRECT_CONNECT_S = float(os.environ.get("TENSORWIRE_DIRECT_CONNECT_S", "2"))
#: a grant is renewed when it has less than this left
RENEW_BEFORE_S = 60.0
#: after a device fell back to the relay, the single-device batches it takes there before it goes direct again
SWITCH_BACK = 8
#: a device whose channel failed to answer is tried again after this long
RETRY_AFTER_S = 60.0
#: how long a channel whose worker has not answered its hello within DIRECT_CONNECT_S is kept waiting for that answer
#: (its device's work goes through the relay meanwhile, and direct from the answer on) before it is given up: a worker
#: busy on its main thread answers late, not never
HELLO_WAIT_S = float(os.environ.get("TENSORWIRE_DIRECT_HELLO_WAIT_S", "60"))
#: releases waiting for the relay are sent on their own once there are this many
MAX_RELAY_RELEASES = 4096
NOT_DIRECT_OPS = frozenset(("collective", "send", "recv"))
_node_op = operator.itemgetter(0)  # (a wire node's op)
#: how long a wait for an answer due on a channel blocks on that channel alone before it watches every socket of the
#: session: a cancel from another thread, or a message of the dispatcher, is seen within this (Ctrl-C at once: the
#: read is interrupted)
CHANNEL_BLOCK_S = 0.02
#: while spinning on a channel alone, the dispatcher's socket is looked at every this many checks
OTHERS_EVERY = 16
#: uploads and fetched values of this many bytes or more go through shared memory when the worker shares this host
#: (``TENSORWIRE_SHM_MIN_BYTES``; 0 turns it off)
SHM_MIN = int(os.environ.get("TENSORWIRE_SHM_MIN_BYTES", str(1 << 20)))
#: the mappings of a worker's shared-memory files a channel keeps for reuse (warm pages, no new page faults)
MAX_MAPPED_BYTES = int(os.environ.get("TENSORWIRE_SHM_MAPPED_BYTES", str(2 << 30)))
#: relayed batches a session may have sent that no answer has covered yet (``TENSORWIRE_RELAY_MAX_BATCHES``): past it
#: the next relayed batch waits for answers (back-pressure, see :class:`RelayWindow`)
RELAY_MAX_BATCHES = int(os.environ.get("TENSORWIRE_RELAY_MAX_BATCHES", "256"))
#: ... and their frames' bytes (``TENSORWIRE_RELAY_MAX_BYTES``); one batch goes whatever its size when none is waiting
RELAY_MAX_BYTES = int(os.environ.get("TENSORWIRE_RELAY_MAX_BYTES", str(256 << 20)))
#: marks per window: a relayed batch is sent as a mark (numbered, with a sync) every 1/RELAY_MARKS of either bound,
#: so a full window frees a quarter of itself at a time, not all of it at once
RELAY_MARKS = 4


class Channel:
    """One granted channel: a DEALER to a worker's direct socket, connected on first use."""

    __slots__ = ("device", "address", "wid", "cap", "expires", "key", "sock", "ok", "unanswered", "releases", "sent",
                 "last_q", "shm", "maps", "give", "hello_q", "hello_at", "__weakref__")

    def __init__(self, grant: dict):
        self.device: str = grant["device"]
        self.address: str = grant["address"]
        self.wid: str = grant["wid"]
        self.cap: bytes = grant["cap"]
        self.expires: float = float(grant["expires"])
        self.key: str | None = grant.get("key") if isinstance(grant.get("key"), str) else None  # the worker's CURVE key
        self.sock: zmq.Socket | None = None
        self.ok = False  # the worker answered our hello
        self.unanswered = False  # messages went out that no answer on this channel has followed yet
        self.releases: list[int] = []  # releases of handles on this device, for its next message
        self.sent = 0  # messages sent on it (status)
        self.last_q = None  # the number of the last message sent, when that one is answered (None: it is not)
        self.shm: str | None = None  # the worker's shared-memory file prefix, when it shares this host
        self.maps = MappedFiles(MAX_MAPPED_BYTES)  # the worker's files mapped here, kept for reuse
        self.give: list[str] = []  # files lent to us for fetched values whose arrays died: back with the next message
        self.hello_q: int | None = None  # the number of the hello sent on it (None: not sent yet)
        self.hello_at = 0.0  # when (monotonic) that hello went

    def open(self, ctx: zmq.Context) -> zmq.Socket:
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVTIMEO, max(1, int(CHANNEL_BLOCK_S * 1000)))  # (the bound of wait_answer's read)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
        set_zmq_heartbeats(sock)
        if self.key is not None:  # encrypted, pinning the key the dispatcher vouched for
            apply_pinned(sock, self.key)
        sock.connect(self.address)
        self.sock = sock
        return sock

    def send(self, header: dict, frames=(), wait_sent: bool = False) -> None:
        header["cap"] = self.cap
        if self.give:
            header["shm_give"], self.give = self.give, []
        send_parts(self.sock, [pack_header(header), *frames], wait_sent=wait_sent)
        self.unanswered = True
        self.last_q = header.get("q")
        self.sent += 1

    def wait_answer(self, spin_s: float, others) -> list | bool:
        """Wait for the next message on this channel alone (:func:`wait_alone`)."""
        return wait_alone(self.sock, spin_s, others)

    def hello_answer(self, wait_s: float) -> dict | None:
        """The worker's answer to this channel's hello (``ok`` or ``error``), waiting up to ``wait_s`` for it (0: a
        look, one system call); None when it has not come. Nothing else comes on a channel before that answer:
        anything else read is dropped."""
        sock = self.sock
        if sock is None or self.hello_q is None:
            return None
        if wait_s > 0:
            if not sock.poll(int(wait_s * 1000)):
                return None
        elif not sock.getsockopt(EVENTS) & POLLIN:
            return None
        for _ in range(64):  # (bounded: what is waiting)
            try:
                msg = recv_frames(sock, zmq.NOBLOCK)
            except zmq.Again:
                return None
            try:
                h = unpack_header(msg[0].bytes)
            except ProtocolError:
                log.warning("dropped a malformed message from the worker for %s", self.device)
                continue
            if h.get("q") == self.hello_q and h.get("t") in ("ok", "error"):
                return h
        return None

    def to_lane(self, info, q: int, wait_s: float) -> bool:
        """Move this channel onto the worker's same-host lane (``protocol/lane.py``), named in its hello's answer
        (``info``: ``{path, nonce}``): connect, say hello there with the capability, and check that the answer
        carries the nonce the channel was told (the worker's own socket, on this host). Then the lane replaces the
        DEALER (no answer is pending on it: the hello was answered). False, and the DEALER kept, when any of it
        fails."""
        if not (LANE_ENABLED and isinstance(info, dict) and isinstance(info.get("path"), str)
                and isinstance(info.get("nonce"), str)):
            return False
        try:
            lane = LaneSocket(info["path"], max(1, int(CHANNEL_BLOCK_S * 1000)), self.device)
        except OSError as e:  # (another host's path, or the worker went: the DEALER serves)
            log.debug("no same-host lane to %s: %s", self.device, e)
            return False
        try:
            lane.send_message([pack_header({"t": "hello", "q": q, "cap": self.cap})])
            if lane.poll(int(wait_s * 1000)):
                h = unpack_header(lane.recv_message()[0].bytes)
                if h.get("t") == "ok" and h.get("q") == q and h.get("nonce") == info["nonce"]:
                    self.sock.close(0)
                    self.sock = lane
                    return True
            log.info("the same-host lane to %s did not answer as its worker: the channel stays on %s", self.device,
                     self.address)
        except (OSError, zmq.ZMQError, ProtocolError, LaneClosed) as e:
            log.info("the same-host lane to %s failed (%s): the channel stays on %s", self.device, e, self.address)
        lane.close()
        return False

    @property
    def on_lane(self) -> bool:
        return type(self.sock) is LaneSocket

    def answered(self, q) -> None:
        """An answer to ``q`` came: every message sent up to ``q`` is in the worker's queue."""
        if q is not None and q == self.last_q:
            self.unanswered = False

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close(0)
            self.sock = None
        self.maps.clear()  # (an mmap a fetched array still views lives until that array dies)

    # -- shared memory -----------------------------------------------------------------------------
    def check_shm(self, info) -> None:
        """Use shared memory with this worker when its probe file (``ok``'s ``shm``) is readable here and holds
        the nonce it said: then this process sees the worker's shared memory."""
        if SHM_MIN <= 0 or not isinstance(info, dict):
            return
        probe, nonce, prefix = info.get("probe"), info.get("nonce"), info.get("prefix")
        if not (isinstance(probe, str) and isinstance(nonce, str) and isinstance(prefix, str)
                and probe.startswith(prefix + "-")):
            return
        try:
            with open(probe, "rb") as f:
                seen = f.read(len(nonce)).decode("ascii", "replace")
        except OSError:
            return
        if seen == nonce:
            self.shm = prefix

    def mapping(self, path):
        """A writable mapping of one of the worker's shared-memory files (``path`` checked against its prefix)."""
        if path not in self.maps.maps and (self.shm is None or not isinstance(path, str) or not re.fullmatch(
                re.escape(self.shm) + r"-[0-9]{1,12}", path)):
            raise ProtocolError(f"the worker for {self.device} named a shared-memory file that is not its own")
        return self.maps.get(path)

    def write_frames(self, frames: list, paths: list[str], which: list[int]) -> list:
        """Copy ``frames[k]`` for each ``k`` of ``which`` into the file at the matching path (lent by the worker for
        this upload); returns ``[[k, path], ...]`` for the message, and empties those frames."""
        spec = []
        for k, path in zip(which, paths):
            src = np.frombuffer(frames[k], np.uint8)  # (memoryviews and bytes: what encode_batch makes)
            m = self.mapping(path)
            if len(m) != src.nbytes:
                raise ProtocolError(f"the worker for {self.device} lent a file of {len(m)} bytes for {src.nbytes}")
            np.copyto(np.frombuffer(m, np.uint8), src)
            frames[k] = b""
            spec.append([k, path])
        return spec

    def read_value(self, desc: list) -> tuple[int, np.ndarray]:
        """A fetched value the worker put in a file lent to this session (``[id, dtype, shape, -1, path]``): a
        read-only array on the file's pages (no copy); the file goes back when the array and its views die."""
        m = self.mapping(desc[4])
        hid, arr = array_from_frame([desc[0], desc[1], desc[2], 0], [m])
        root = arr.base if isinstance(arr.base, np.ndarray) else arr
        arr.flags.writeable = False
        weakref.finalize(root, _give_back, weakref.ref(self), desc[4])
        return hid, arr


def wait_alone(sock: zmq.Socket, spin_s: float, others) -> list | bool:
    """Wait for the next message on one socket alone, as a raw echo's caller does: spin on the socket's
    ``ZMQ_EVENTS`` for up to ``spin_s`` (yielding the core between checks), then block in one read for up to its
    ``RCVTIMEO`` (a channel's: ``CHANNEL_BLOCK_S``). ``others()`` says whether anything else wants the waiter (a
    cancel from another thread, the dispatcher's socket): asked every ``OTHERS_EVERY`` checks of the spin and before
    the read. Returns the message read (its frames), True when ``others()`` did or the socket has a message, False
    when nothing came within the bounds (a session then watches every socket). Polling a session's three sockets
    for an answer due on one costs ~11 system calls; this read ~5."""
    checks = itertools.count(1)

    def ready(_timeout) -> bool:  # (the spin's poll: this socket, and every OTHERS_EVERY checks the others)
        return bool(sock.getsockopt(EVENTS) & POLLIN) or (next(checks) % OTHERS_EVERY == 0 and others())

    if spin_wait(ready, spin_s) or others():
        return True
    try:
        return recv_frames(sock)  # (a signal ends the read at once, Ctrl-C raising)
    except zmq.Again:
        return False


def _give_back(ref, path: str) -> None:
    ch = ref()
    if ch is not None:
        ch.give.append(path)


class DataPlane:
    """A session's channels and the state that keeps its messages in order across the two paths (see the module
    docstring). The session owns the sockets' thread; this class holds no lock of its own."""

    def __init__(self, grants, keys):
        self.channels: dict[str, Channel] = {}
        self.why_relay: dict[str, str] = {}  # device -> why its work goes through the dispatcher
        self.retry_at: dict[str, float] = {}
        self.direct: set[str] = set()  # devices in direct mode
        self.used: set[str] = set()  # devices that ran work sent on their channel (their spans are the profiler's)
        self.cooldown: dict[str, int] = {}  # device -> single-device batches left on the relay before going direct
        self.relay_unsynced = False  # relayed batches went out that no relayed sync has covered
        self.loc: dict[int, str] = {}  # live handle -> its device
        self.released_loc: dict[int, str | None] = {}  # the devices of the handles the last relayed message releases
        self.direct_made: set[int] = set()  # live handles made on channels (the dispatcher has not seen them)
        self.forget: list[int] = []  # handles the dispatcher knows that were released on channels
        self.relay_releases: list[int] = []  # releases waiting for the next relayed message
        self.lost: dict[str, list[int]] = {}  # handles made on channels whose worker died, for the dispatcher
        self.plan_nodes: dict[int, tuple] = {}  # plan -> (nodes, devs, n_ext): sent again to a path lacking it
        self.plan_paths: dict[int, set] = {}  # plan -> the paths that have it ("relay" or a device)
        self.relayed: dict[str, int] = {}  # device -> its batches relayed while its channel was not answering (status)
        self.enabled = DIRECT_ENABLED
        self.why_off = "" if self.enabled else "turned off (TENSORWIRE_DIRECT=0)"
        self.curve = keys is not None  # this client speaks CURVE: it takes encrypted channels only
        self.grant(grants)

    # -- grants ------------------------------------------------------------------------------------
    def grant(self, grants) -> None:
        """Take the dispatcher's grants: new channels, renewed capabilities; a worker that changed (another
        process now serves the device) gets a new channel."""
        for g in grants or ():
            if not (isinstance(g, dict) and isinstance(g.get("device"), str) and isinstance(g.get("address"), str)
                    and isinstance(g.get("cap"), bytes) and isinstance(g.get("wid"), str)):
                continue
            if self.curve and not isinstance(g.get("key"), str):
                self.why_relay[g["device"]] = "its worker's direct channel is not encrypted and this client uses CURVE"
                continue
            ch = self.channels.get(g["device"])
            if ch is not None and ch.wid == g["wid"] and ch.address == g["address"]:
                ch.cap, ch.expires = g["cap"], float(g["expires"])
                continue
            if ch is not None:
                self.drop(ch.device, "its worker changed")
            self.channels[g["device"]] = Channel(g)

    def drop(self, device: str, why: str, lost: bool = False) -> None:
        """Forget a device's channel (its worker is gone or does not answer): its work goes through the relay.
        ``lost``: the worker died, and with it the handles made on its channel; the dispatcher, which never saw
        them, hears of them with the next relayed message (``lost``), so using one fails with ``WorkerLost``."""
        ch = self.channels.pop(device, None)
        if ch is not None:
            ch.close()
            if not lost:
                self.relay_releases.extend(ch.releases)
        self.direct.discard(device)
        self.why_relay[device] = why
        if lost:
            gone = [i for i in self.direct_made if self.loc.get(i) == device]
            for i in gone:
                self.direct_made.discard(i)
                del self.loc[i]
            self.lost.setdefault(device, []).extend(gone)
            self.retry_at.pop(device, None)  # (a successor may register soon: ask for its grant at the next use)

    def close(self) -> None:
        for ch in self.channels.values():
            ch.close()
        self.channels.clear()

    # -- handles -----------------------------------------------------------------------------------
    def made(self, ids_devs: dict) -> None:
        """Handles a batch keeps (id -> device), whichever path it takes."""
        self.loc.update(ids_devs)

    def route_releases(self, release: list[int]) -> None:
        """Send each released id where its device's work goes now: its channel's next message, or the relay's."""
        loc, direct_made, direct = self.loc, self.direct_made, self.direct
        if len(direct) == 1 and release:
            (d,) = direct
            devs = list(map(loc.pop, release, itertools.repeat(None)))
            if devs.count(d) == len(release):
                # (all on the one direct device, none twice (a second pop finds none): what the loop below does, a
                # pass at a time; the handles made on the channel, the commonest, tell the dispatcher nothing)
                self.channels[d].releases += release
                if not direct_made.issuperset(release):
                    self.forget += itertools.filterfalse(direct_made.__contains__, release)
                direct_made.difference_update(release)
                return
            loc.update(itertools.compress(zip(release, devs), devs))  # (put back: the loop below sorts them out)
        for i in release:
            d = loc.get(i)
            if d is not None and d in direct:
                del loc[i]
                self.channels[d].releases.append(i)
                if i in direct_made:
                    direct_made.discard(i)
                else:
                    self.forget.append(i)
            else:  # (its loc stays until it goes, for the relayed message's locs)
                self.relay_releases.append(i)

    def relay_locs(self, ids) -> dict | None:
        """``locs`` for a relayed message: where the handles among ``ids`` that were made on channels live."""
        out: dict[str, list[int]] = {}
        dm, loc = self.direct_made, self.loc
        for i in ids:
            if i in dm:
                out.setdefault(loc[i], []).append(i)
        return out or None

    def take_relay_releases(self) -> tuple[list[int], dict | None]:
        """The releases that go with a relayed message now, and their ``locs``."""
        rel, self.relay_releases = self.relay_releases, []
        locs = self.relay_locs(rel)
        gone = self.released_loc = {}  # (the message may read them before they go: whole_on)
        pop = self.loc.pop
        for i in rel:
            gone[i] = pop(i, None)
            self.direct_made.discard(i)
        return rel, locs

    # -- paths -------------------------------------------------------------------------------------
    def direct_device(self, batch_dev: str | None, ext, fetch, release=()) -> str | None:
        """The device a message may go to directly, or None: ``batch_dev`` is the one device of its nodes ("" when
        it has none, None when it spans several or holds work only the relay does); its inputs and fetched values
        must all live there. A message of releases alone (no nodes, inputs or fetches: the flush before a service
        request) goes to the device its ``release`` ids all live on: relayed, it took that device back to the relay
        for :data:`SWITCH_BACK` batches (issue 37: 371 of the char-level transformer's 575 batches of a cold run)."""
        if not self.enabled or batch_dev is None:
            return None
        dev = batch_dev or None
        # (the devices of its handles, in one C pass: one device, known, and the nodes' own if they have one)
        found = set(map(self.loc.get, itertools.chain(ext, fetch) if (ext or fetch or dev is not None) else release))
        if found:
            if len(found) != 1:
                return None
            d = found.pop()
            if d is None or (dev is not None and d != dev):
                return None
            dev = d
        if dev is None or dev not in self.channels:
            return None
        left = self.cooldown.get(dev)
        if left:
            self.cooldown[dev] = left - 1
            return None
        return dev

    def whole_on(self, msg: dict) -> str | None:
        """The device whose worker a relayed message carrying a plan's nodes reaches with those nodes unchanged (the
        dispatcher's fragment is the whole batch: one device, every input there, inputs numbered as first read),
        or None. That worker then holds the plan under the session's own number (its cache is per session, on
        either path): a replay of it on the device's channel needs no nodes."""
        devs, nodes = msg.get("devs"), msg.get("nodes")
        if not devs or len(devs) != 1 or batch_device(nodes, devs) is None:
            return None
        dev, loc, gone = devs[0], self.loc, self.released_loc
        for i in msg.get("ext") or ():
            if loc.get(i, gone.get(i)) != dev:
                return None
        return dev

    def touched_by_relay(self, devs: set) -> list[str]:
        """The devices in direct mode that a relayed message touching ``devs`` (None: it may touch any) takes back
        to the relay mode; the caller fences each first."""
        hit = sorted(self.direct if devs is None else self.direct & devs)
        for d in hit:
            self.direct.discard(d)
            self.cooldown[d] = SWITCH_BACK
            ch = self.channels.get(d)
            if ch is not None and ch.releases:  # its releases go with the relay from now on
                self.relay_releases.extend(ch.releases)
                ch.releases = []
        return hit

    def status(self) -> dict:
        """What ``tensorwire status`` shows of this session's data plane."""
        out = {}
        for d, ch in self.channels.items():
            out[d] = {"path": "direct" if d in self.direct or (ch.ok and not self.cooldown.get(d)) else "relay",
                      "address": ch.address, "connected": ch.ok, "messages": ch.sent,
                      "shared_memory": ch.shm is not None, "encrypted": ch.key is not None, "lane": ch.on_lane,
                      "relayed_waiting": self.relayed.get(d, 0)}
            if not ch.ok and d in self.why_relay:
                out[d]["why"] = self.why_relay[d]
        for d, why in self.why_relay.items():
            if d not in out:
                out[d] = {"path": "relay", "why": why}
        if not self.enabled:
            out["*"] = {"path": "relay", "why": self.why_off}
        return out

    def dead_time(self, device: str, now: float) -> bool:
        """A device whose channel did not answer is tried again only after RETRY_AFTER_S."""
        t = self.retry_at.get(device)
        return t is not None and now < t


class RelayWindow:
    """A bound on a session's relayed batches that no answer has covered yet (back-pressure, as a bounded queue).

    Relayed batches shipped without waiting (``Session._send_async``) get no answer of their own, and the dispatcher
    keeps what it relays to a worker until the worker reads it (``dispatcher/answers.py``, ``SERVICE_HWM``): a client
    that relays faster than the worker runs would grow the dispatcher's memory without end. So every
    ``1/RELAY_MARKS`` of the window one such batch goes as a *mark*: numbered, with ``sync``, so the dispatcher
    answers it once it and everything relayed before it has run (the session's work runs in order). A relayed sync
    or fence the session waits for anyway is a mark too. While ``max_batches`` batches or ``max_bytes`` bytes are
    unanswered, the session's next shipment (``Session._flush``, before it takes what is pending) waits for the
    oldest mark (``Session._wait``: pings, cancellation, the lease and the liveness bound as for any answer); a
    mark's answer covers every batch sent before it. Nothing is dropped and nothing fails for being behind. The
    counts are cumulative; ``marks`` maps a mark's number to the counts at its send."""

    __slots__ = ("max_batches", "max_bytes", "sent", "sent_bytes", "done", "done_bytes", "marks", "next_mark",
                 "next_mark_bytes", "waits", "peak")

    def __init__(self, max_batches: int = RELAY_MAX_BATCHES, max_bytes: int = RELAY_MAX_BYTES):
        self.max_batches = max(1, max_batches)
        self.max_bytes = max(1, max_bytes)
        self.sent = self.sent_bytes = 0  # relayed batches (and their frames' bytes) sent so far
        self.done = self.done_bytes = 0  # ... of which an answer covered this many
        self.marks: dict[int, tuple[int, int]] = {}  # q of a mark not answered yet -> (sent, sent_bytes) after it
        self.next_mark = self.next_mark_bytes = 0  # the next batch past these counts goes as a mark
        self.waits = 0  # times a relayed batch waited for answers (status)
        self.peak = 0  # the most batches unanswered at once (status, tests)

    @property
    def unanswered(self) -> int:
        """Relayed batches sent that no answer has covered yet."""
        return self.sent - self.done

    def full(self) -> bool:
        """Whether the next relayed batch must wait for an answer first (never when every mark is answered)."""
        return bool(self.marks) and (self.sent - self.done >= self.max_batches
                                     or self.sent_bytes - self.done_bytes >= self.max_bytes)

    def send(self, nbytes: int) -> bool:
        """Count one relayed batch about to go; True: send it as a mark (numbered, with ``sync``)."""
        self.sent += 1
        self.sent_bytes += nbytes
        if self.sent - self.done > self.peak:
            self.peak = self.sent - self.done
        return self.sent >= self.next_mark or self.sent_bytes >= self.next_mark_bytes

    def marked(self, q: int) -> None:
        """The batch just counted went numbered as ``q``, with a sync: its answer covers it and all before it."""
        self.marks[q] = (self.sent, self.sent_bytes)
        self.next_mark = self.sent + max(1, self.max_batches // RELAY_MARKS)
        self.next_mark_bytes = self.sent_bytes + max(1, self.max_bytes // RELAY_MARKS)

    def answered(self, q: int) -> None:
        """Mark ``q`` was answered (or its wait ended): it and every older mark are covered."""
        counts = self.marks.pop(q, None)
        if counts is None:
            return
        for k in [k for k in self.marks if k < q]:
            del self.marks[k]
        self.done = max(self.done, counts[0])
        self.done_bytes = max(self.done_bytes, counts[1])

    def oldest(self) -> int:
        """The number of the oldest mark not answered yet (``full`` says there is one)."""
        return next(iter(self.marks))

    def status(self) -> dict:
        return {"unanswered": self.unanswered, "unanswered_bytes": self.sent_bytes - self.done_bytes,
                "max_batches": self.max_batches, "max_bytes": self.max_bytes, "waits": self.waits, "peak": self.peak}


def batch_device(nodes, devs, op=_node_op) -> str | None:
    """The one device a batch's nodes run on ("" for no nodes), or None when they span several or include work
    that only the relay carries (collectives). ``op``: a node's op (wire nodes by default; the session passes its
    pending entries' getter)."""
    if not nodes:
        return ""
    if len(devs) != 1 or not NOT_DIRECT_OPS.isdisjoint(map(op, nodes)):
        return None
    return devs[0]

