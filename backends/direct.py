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

A malformed or unauthorised message is answered with ``error {q, error}`` and changes nothing.
"""

from __future__ import annotations

import logging
import os

import zmq

from tensorwire.dispatcher.plans import split_batch
from tensorwire.protocol.addresses import check_address
from tensorwire.protocol.capability import channel_key, verify
from tensorwire.protocol.curve import is_local_address
from tensorwire.protocol.errors import ProtocolError, TensorwireError, Unauthorized, error_to_wire
from tensorwire.protocol.graph import RECV, SEND
from tensorwire.protocol.liveness import set_zmq_heartbeats
from tensorwire.protocol.wire import MAX_MESSAGE, pack_header, send_parts, unpack_header

log = logging.getLogger("tensorwire.worker")

ADDRESS_ENV = "TENSORWIRE_DIRECT_ADDRESS"
DEFAULT_ADDRESS = "tcp://127.0.0.1:*"
_NOT_DIRECT = frozenset((SEND, RECV, "collective"))  # work that needs another device or the collectives service
MAX_CLOSED = 1 << 14


def _ints(h: dict, name: str) -> list:
    v = h.get(name)
    if v is None:
        return []
    if type(v) is not list or any(type(i) is not int for i in v):
        raise ProtocolError(f"'{name}' must be a list of ints")
    return v


def fragment(device: str, nodes, devs, n_ext: int) -> list:
    """The worker's fragment (``[op, refs, attrs]`` nodes) of a batch that runs on ``device`` alone; raises
    ProtocolError/DeviceError for anything else (another device, a transfer, a collective, a malformed node)."""
    split = split_batch(nodes, devs if isinstance(devs, list) else [], [device] * n_ext, (device,))
    if split.n_xfer or split.coll_groups or set(split.frags) - {device}:
        raise ProtocolError("a direct batch runs on its worker's device alone (transfers and collectives go through "
                            "the dispatcher)")
    for n in nodes:
        if n[0] in _NOT_DIRECT:
            raise ProtocolError(f"op {n[0]!r} cannot run on a direct channel")
    frag = split.frags.get(device)
    return frag.nodes if frag is not None else []


class DirectChannel:
    """The worker's direct socket and the checks every message on it passes (main thread only)."""

    def __init__(self, ctx: zmq.Context, device: str, instance: str, address: str | None, keys=None):
        self.device = device
        self.key = channel_key(instance)
        self.epoch: str | None = None  # the dispatcher's: set when the worker registers
        self.closed: dict = {}  # sessions dropped here: their capabilities are refused until they expire
        self.sock: zmq.Socket | None = None
        self.address: str | None = None
        self.why_not: str | None = None
        address = address if address is not None else os.environ.get(ADDRESS_ENV, DEFAULT_ADDRESS)
        if not address or address.lower() == "none":
            self.why_not = "direct channel turned off (--direct-address none)"
            return
        if keys is not None and not is_local_address(address.replace("*", "0")):
            # (CURVE on direct channels is not built yet: clients reach this worker through the relay)
            self.why_not = "direct channels over the network need CURVE, which they do not have yet: relay only"
            log.warning("not opening a direct channel on %s: %s", address, self.why_not)
            return
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
        set_zmq_heartbeats(sock)
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
        except (zmq.ZMQError, TensorwireError) as e:
            sock.close(0)
            self.why_not = f"cannot listen on {address}: {e}"
            log.warning("no direct channel: %s", self.why_not)
            return
        self.sock = sock

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close(0)
            self.sock = None

    def send(self, route: bytes, header: dict, frames=()) -> None:
        send_parts(self.sock, [route, pack_header(header), *frames])

    def forget(self, sid: bytes) -> None:
        """A session was dropped: refuse its capabilities from now on (bounded: the oldest are forgotten)."""
        self.closed[sid] = None
        if len(self.closed) > MAX_CLOSED:
            self.closed.pop(next(iter(self.closed)))

    def receive(self, executor) -> int:
        """Take what is waiting on the socket (at most 1000 messages) and hand it to ``executor``; returns the
        number taken."""
        n = 0
        for n in range(1, 1001):
            try:
                msg = self.sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return n - 1
            if len(msg) < 2:
                continue
            route = msg[0].bytes
            q = None
            try:
                h = unpack_header(msg[1].bytes)
                q = h.get("q")
                if q is not None and type(q) is not int:
                    q = None
                    raise ProtocolError("'q' must be an int")
                self._handle(executor, route, h, msg[2:], q)
            except TensorwireError as e:
                self.send(route, {"t": "error", "q": q, "error": e.to_wire()})
            except Exception as e:  # a malformed message never stops the worker
                log.warning("bad direct message: %s", e)
                self.send(route, {"t": "error", "q": q, "error": error_to_wire(
                    ProtocolError("the worker rejected a malformed message (see its log)"))})
        return n

    def _handle(self, executor, route: bytes, h: dict, frames: list, q) -> None:
        sid = verify(self.key, h.get("cap"), self.device, self.epoch)
        if sid in self.closed:
            raise Unauthorized("this session is closed")
        t = h.get("t")
        if t == "run":
            executor.handle(self.run_header(executor, sid, h, q), frames, route=route)
        elif t == "hello":
            self.send(route, {"t": "ok", "q": q, "device": self.device})
        elif t == "plan":
            plan = h.get("plan")
            if type(plan) is not int:
                raise ProtocolError("'plan' must be an int")
            nodes = fragment(self.device, h.get("nodes"), h.get("devs"), len(_ints(h, "ext")))
            executor.handle({"t": "plan", "s": sid, "plan": plan, "nodes": nodes}, [])
        elif t == "cancel":
            executor.handle({"t": "cancel", "s": sid}, [])
        else:
            raise ProtocolError(f"unknown direct message type {str(t)[:100]!r}")

    def run_header(self, executor, sid: bytes, h: dict, q) -> dict:
        """The executor's ``run`` for a direct batch, checked as the dispatcher checks a batch it routes."""
        run = {"t": "run", "s": sid, "q": q, "reply": q is not None}
        for k in ("ext", "fetch", "release"):
            run[k] = _ints(h, k)
        if "out_first" in h:
            if type(h["out_first"]) is not int or "outs" in h:
                raise ProtocolError("batch 'out_first' must be an int, and comes instead of 'outs'")
            run["out_first"] = h["out_first"]
        else:
            run["outs"] = _ints(h, "outs")
        plan = h.get("plan")
        if plan is not None and type(plan) is not int:
            raise ProtocolError("'plan' must be an int")
        nodes = h.get("nodes")
        if nodes is not None:
            run["nodes"] = fragment(self.device, nodes, h.get("devs"), len(run["ext"]))
            if "outs" in run and len(run["outs"]) != len(nodes):
                raise ProtocolError(f"batch has {len(nodes)} nodes but {len(run['outs'])} output ids")
        elif plan is None and (run.get("outs") or run["ext"]):
            raise ProtocolError("a batch with inputs or outputs needs 'nodes' or a 'plan'")
        if plan is not None:
            run["plan"] = plan
        dyn = h.get("dyn")
        if dyn is not None:
            if type(dyn) is not list or not all(type(d) is list and len(d) == 2 and type(d[0]) is int
                                                and isinstance(d[1], dict) for d in dyn):
                raise ProtocolError("'dyn' entries must be [node, attrs]")
            run["dyn"] = dyn
        if h.get("temps") is not None:
            run["temps"] = h["temps"]  # (checked against the plan's size when it is known: protocol.batch_ids)
        if h.get("prof") is not None:
            if type(h["prof"]) is not int:
                raise ProtocolError("'prof' must be an int (the batch's number in the client's profile)")
            run["prof"] = h["prof"]
        if h.get("sync"):
            run["sync"] = True
        if run["reply"] is False and (run["fetch"] or run.get("sync")):
            raise ProtocolError("a batch with a fetch or sync needs 'q'")
        return run
