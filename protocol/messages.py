"""Every message kind on the wire, in one place: who sends it to whom, what it is for, and its fields' types.

A message is a msgpack header (a map whose ``t`` names its kind) followed by raw buffer frames
(``protocol/wire.py``). This module is the one list of the kinds and their fields. Each receiving end checks an
incoming header against its plane here (:func:`check`: a known kind, and each field it carries of the listed
type) before it dispatches it through a handler table keyed by the same kinds, and the tests check that every
table handles exactly its plane's kinds (``tests/unit/protocol/test_messages.py``). What a field means, and the checks
that need more than a type (ids that must be live handles, plans that must exist), are the handlers' business.

The planes, with their sockets:

- ``CLIENT``: client -> dispatcher (the dispatcher's client ROUTER);
- ``SERVICE``: a service (worker, autograd, collectives rank) -> dispatcher (its service ROUTER);
- ``WORKER``: dispatcher -> worker (the worker's DEALER);
- ``DIRECT``: client -> worker and worker -> worker, on a worker's direct channel (``backends/direct.py``).

Answers (``welcome``, ``result``, ``done``, ``error`` ...) are listed too, for the reader; they are read by the
side that asked, which matches them by ``q``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import ProtocolError

# field types: a tuple of the Python types msgpack gives for it (None where the field may be null)
INT = (int,)
STR = (str,)
BYTES = (bytes,)
BOOL = (bool,)
LIST = (list,)
MAP = (dict,)
ANY = None  # any msgpack value: the handler checks it


def opt(types: tuple) -> tuple:
    """The same types, or None."""
    return (*types, type(None))


@dataclass(frozen=True)
class Kind:
    """One message kind: what it is for, and its fields (name -> allowed types, ``ANY`` for unchecked)."""

    doc: str
    fields: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Plane:
    """The kinds one socket receives."""

    name: str
    kinds: dict

    def __contains__(self, kind: str) -> bool:
        return kind in self.kinds


_Q = {"q": opt(INT)}  # the request number an answer carries back
_K = {"k": ANY}  # the session key every client message but hello and ping proves (no key: Unauthorized, not malformed)
_BATCH = {
    "ext": opt(LIST), "outs": opt(LIST), "out_first": opt(INT), "temps": opt(LIST), "fetch": opt(LIST),
    "release": opt(LIST), "sync": opt(BOOL), "plan": opt(INT), "nodes": opt(LIST), "devs": opt(LIST),
    "dyn": opt(LIST), "prof": opt(INT),
}

CLIENT = Plane("client -> dispatcher", {
    "hello": Kind("open a session: the protocol version, a token, a client name and the client's host id",
                  {**_Q, "v": ANY, "token": opt(STR), "client": opt(STR), "host": opt(STR)}),
    "ping": Kind("are you there (renews the lease); `w`: the direct channels a wait depends on -> pong {lost, "
                 "progress}",
                 {**_Q, "k": opt(BYTES), "w": opt(LIST)}),
    "lease": Kind("the session is alive; `forget`: handles released on direct channels", {**_K, "forget": opt(LIST)}),
    # (a batch's own fields are checked by the router, which fails a malformed batch as a whole: its outputs fail
    # with the error, so later batches that read them fail too, instead of the message just being refused)
    "batch": Kind("a graph batch to route (the relay); `locs`/`lost`: where direct-made handles live, which died",
                  {**_Q, **_K, **{f: ANY for f in _BATCH}, "drop_plans": ANY, "locs": ANY, "lost": ANY,
                   "forget": opt(LIST)}),
    "channel": Kind("a fresh grant of direct channels -> channels {channels}", {**_Q, **_K}),
    "close": Kind("end the session: every worker frees its buffers -> closed", {**_Q, **_K}),
    "cancel": Kind("stop the work the session submitted so far", {**_K}),
    "devices": Kind("the devices and their workers -> devices {devices}", {**_Q, **_K}),
    "stats": Kind("the cluster's state as this session may see it -> stats", {**_Q, **_K}),
    "profile_collect": Kind("the profiler's spans of every process -> profile; `devices`: those used directly",
                            {**_Q, **_K, "devices": opt(LIST)}),
    "service": Kind("a request for a named service (autograd ...) -> service_reply", {**_Q, **_K, "service": STR}),
})

#: what a worker's heartbeat ``direct`` list counts, in order: the work clients sent it on direct channels so far
#: (the dispatcher never sees it; ``dispatcher/telemetry.py`` adds it to the work it routed)
DIRECT_TOTALS = ("batches", "ops", "bytes_in", "bytes_out", "plan_hits", "plan_misses")
#: the shortest ``direct`` list a worker may send: a worker of an earlier version, during a rolling upgrade, sends the
#: counts of its version (the oldest: ``[batches, ops, bytes]``); the counts it lacks are zero. The tuple only ever
#: grows at its end; a longer list (a worker newer than its dispatcher) is refused: upgrade the dispatcher first
DIRECT_TOTALS_MIN = 3

SERVICE = Plane("service -> dispatcher", {
    "register": Kind("register a worker (a device) or a named service with the service credential",
                     {"v": ANY, "service": ANY, "device": ANY, "name": ANY, "info": ANY, "token": ANY,
                      "instance": ANY, "pid": ANY}),
    "hb": Kind("a heartbeat (`of`, `i`: a service's heartbeat thread, signed with its instance; `busy`: a worker's "
               "[sid, batches finished, seconds running, what] per session; `direct`: a worker's totals of the work "
               "clients sent it on direct channels, the counts of DIRECT_TOTALS in order)",
               {"of": opt(STR), "i": opt(STR), "busy": opt(LIST), "direct": opt(LIST)}),
    "bye": Kind("the service stops: its name is free at once", {}),
    "done": Kind("a worker's answer to a run: values (with frames), errors, fetch errors",
                 {"s": ANY, "q": ANY, "values": opt(LIST), "errors": opt(LIST), "fetch_errors": opt(LIST)}),
    "xfer": Kind("a cross-device value (or its error) for the relay to the destination worker",
                 {"s": ANY, "x": ANY}),
    "xfer_got": Kind("a transfer arrived straight from its source's worker: forget its route", {"s": ANY, "x": ANY}),
    "coll_ready": Kind("a worker's part of a collective is ready (in shared memory, or on the device)",
                       {"s": ANY, "key": ANY, "device": ANY}),
    "coll_abort": Kind("a worker's input of a collective failed", {"s": ANY, "key": ANY, "err": ANY}),
    "coll_done": Kind("a collectives rank finished (or failed) its part", {"key": ANY, "err": ANY, "direct": ANY}),
    "progress": Kind("a worker's download progress for one session's hub load", {"s": ANY}),
    "need_plan": Kind("a worker evicted a plan: send its fragment again", {"s": ANY, "plan": ANY, "q": ANY}),
    "stats": Kind("a worker's answer to a gathered stats request", {"q": ANY}),
    "profile": Kind("a worker's profiler spans, with its clock's readings", {"q": ANY}),
    "reply": Kind("a named service's answer to a forwarded request", {"q": ANY}),
})

WORKER = Plane("dispatcher -> worker", {
    "registered": Kind("the registration is accepted; `epoch`: the dispatcher process", {"epoch": opt(STR)}),
    "refused": Kind("the registration is refused (`retry`: the holder may be dead)", {"error": ANY}),
    "hb": Kind("a heartbeat", {}),
    "run": Kind("a fragment of a batch, with the fetches, releases and transfers that go with it",
                {"s": BYTES, **_Q, **_BATCH, "x": opt(INT), "reply": opt(BOOL), "coll": ANY, "coll_direct": ANY,
                 "xto": opt(LIST)}),
    "xfer": Kind("a value relayed from its source's worker", {"s": BYTES, "x": INT}),
    "plan": Kind("a plan's fragment again (after need_plan)", {"s": BYTES, "plan": ANY}),
    "coll_done": Kind("a collective this worker takes part in is done (or failed)", {"key": ANY}),
    "cancel": Kind("stop the session's work so far", {"s": BYTES}),
    "drop_session": Kind("the session ended: free its buffers and plans", {"s": BYTES}),
    "profile_collect": Kind("hand over the session's profiler spans", {"s": BYTES, **_Q}),
    "stats": Kind("the sessions, memory and load of this worker", {**_Q}),
    "drop_plans": Kind("the session's client evicted these plans", {"s": BYTES, "plans": opt(LIST)}),
})

DIRECT = Plane("client or worker -> worker (direct channel)", {
    "hello": Kind("check the channel (`shm`: ask for the same-host probe; `lane`: for the same-host lane's path) -> "
                  "ok {device, shm, lane}; on the lane itself -> ok {device, nonce}",
                  {**_Q, "cap": ANY, "shm": opt(BOOL), "lane": opt(BOOL)}),
    "run": Kind("a batch on this device alone -> done (with `q`); `shm`: fetch large values through files",
                {**_Q, "cap": ANY, **_BATCH, "shm": opt(INT), "shm_frames": opt(LIST), "shm_give": opt(LIST)}),
    "plan": Kind("a plan's nodes again, after need_plan", {"cap": ANY, "plan": ANY, "nodes": ANY, "devs": ANY}),
    "cancel": Kind("stop the session's work so far", {"cap": ANY}),
    "shm_take": Kind("lend files for uploads -> shm {paths}", {**_Q, "cap": ANY, "sizes": ANY}),
    "xfer": Kind("a value from another worker (signed with the service credential's key)",
                 {"s": ANY, "x": ANY, "mac": ANY}),
    "xfer_give": Kind("another worker's arrays on these files of ours died (signed)", {"paths": ANY, "mac": ANY}),
})

#: the answers, matched by ``q`` by the side that asked (listed for the reader; not dispatched through a table)
ANSWERS = {
    "welcome": "hello's answer: the session key, devices, services, the lease, the direct channels' grants",
    "pong": "ping's answer (`lost`: devices whose worker is gone or another process; `error`: the session is gone)",
    "result": "the dispatcher's answer to a relayed batch: values, errors, fetch errors",
    "done": "a worker's answer to a direct run (or, through the dispatcher, to a routed one)",
    "channels": "channel's answer: fresh grants",
    "closed": "close's answer",
    "devices": "devices' answer",
    "stats": "stats' answer",
    "profile": "profile_collect's answer",
    "service_reply": "a named service's answer",
    "ok": "a direct hello's answer",
    "shm": "shm_take's answer: the lent files",
    "need_plan": "a worker asks the client for a plan's nodes again",
    "progress": "a hub download's progress, for the session's progress bars",
    "error": "a refused message: a typed error (`q` names the message when it had one)",
}


def check(plane: Plane, h: dict) -> str:
    """The kind of header ``h`` on ``plane``; ProtocolError when the kind is unknown there or a field it carries has
    the wrong type (fields not listed are ignored: a newer peer may send more)."""
    t = h.get("t")
    kind = plane.kinds.get(t) if isinstance(t, str) else None
    if kind is None:
        raise ProtocolError(f"unknown message type {str(t)[:100]!r} on the {plane.name} socket")
    fields = kind.fields
    for name, v in h.items():  # (the header's fields, fewer than the kind's: absent ones are not checked)
        types = fields.get(name)
        if types is not None and type(v) not in types:  # (exact types: a bool is not an int here)
            raise ProtocolError(f"{t}: field {name!r} must be {' or '.join(_NAMES.get(x, x.__name__) for x in types)}")
    return t


_NAMES = {int: "an int", str: "a string", bytes: "bytes", bool: "a bool", list: "a list", dict: "a map",
          type(None): "null"}
