"""What the dispatcher keeps: its records of services, sessions, pending answers and gathered requests, and the
small helpers its parts share."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tensorwire.protocol.batch_ids import is_int_list
from tensorwire.protocol.curve import is_local_address
from tensorwire.protocol.errors import DependencyFailed, ProtocolError, TensorwireError, WorkerLost

MAX_PLANS = 4096
#: profiler spans the dispatcher keeps per session until its client collects them (the rest are counted, not kept)
MAX_SPANS = 1 << 17
#: collectives that failed before all their parts started, remembered to answer the late parts (oldest go first)
MAX_FAILED_COLLECTIVES = 4096
SID_BYTES, SECRET_BYTES = 8, 32  # a session key is its public id followed by its secret
NAME_RE = re.compile(r"[A-Za-z0-9_.@:-]{1,128}")  # service and device names


@dataclass
class ServiceInfo:
    ident: bytes
    kind: str  # "worker", "autograd", "collectives", ...
    name: str  # device name for workers, service name otherwise
    info: dict
    last_seen: float
    instance: str = ""  # the per-process secret it registered with (signs its heartbeats)
    plans: set = field(default_factory=set)  # (session, plan) pairs this worker has compiled
    busy: dict = field(default_factory=dict)  # a worker's last heartbeat: sid -> [finished, running s, what]



@dataclass
class Pending:
    expect: set
    values: list = field(default_factory=list)
    frames: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    fetch_errors: list = field(default_factory=list)
    prof: tuple | None = None  # (profiler batch number, monotonic ns it arrived) of a profiled batch



@dataclass
class Gather:
    """A request the dispatcher sent to several workers (``stats``, ``profile_collect``) and the answers so far."""

    kind: str  # "stats" (a client's), "poll" (the dispatcher's own, for metrics) or "profile"
    sid: bytes | None  # the session that asked (None: the dispatcher itself)
    cq: object  # the client's request number
    expect: set  # devices not answered yet
    data: dict = field(default_factory=dict)



@dataclass
class Session:
    sid: bytes  # public id: what workers and admins see (stats), never enough to act as the session
    secret: bytes  # issued at hello; every message of the session proves it
    ident: bytes  # the routing id answers go to: the last connection that proved the secret
    client: str
    admin: bool = False  # opened with the admin credential: stats shows every session
    handles: dict = field(default_factory=dict)  # client id -> device
    failed: dict = field(default_factory=dict)  # client id -> wire error (never reached a worker)
    plans: dict = field(default_factory=dict)  # plan no -> Split
    pending: dict = field(default_factory=dict)  # seq -> Pending
    errors: list = field(default_factory=list)
    touched: set = field(default_factory=set)  # devices holding state of this session
    last_seen: float = 0.0
    spans: list | None = None  # profiler spans of its profiled batches, until collected
    spans_dropped: int = 0
    host: str = ""  # the client's host id (protocol.shm_paths.host_id): who can reach a worker's loopback address
    conn: tuple | None = None  # (fd, inode) of the connection ``ident`` names (dispatcher/answers.py)




def wire_error(err, keep=("node", "origin")) -> dict:
    """A service's error as it may go to a client: a string code and message (and the ids in ``keep``), nothing
    else; anything malformed becomes a ProtocolError."""
    if isinstance(err, dict) and isinstance(err.get("code"), str) and isinstance(err.get("message"), str):
        return {"code": err["code"], "message": err["message"],
                **{k: err[k] for k in keep if type(err.get(k)) is int}}
    return ProtocolError("a service sent a malformed error").to_wire()



#: the longest root-cause message a derived error repeats (a longer one is cut, marked with "..."): the message of a
#: batch that failed with its input stays short however long the chain of failures behind it
MAX_CAUSE_CHARS = 1000


class InputLost(WorkerLost):
    """``WorkerLost`` for a batch whose input was lost before reaching a worker: its wire form also carries
    ``cause``, the first failure's ``{"code", "message"}``, so the next batch that reads one of its outputs names that
    root, not this error (``input_failed``: the messages of a chain of failures do not nest)."""

    def __init__(self, message: str, *, device: str | None, cause: dict):
        self.cause = cause
        super().__init__(message, device=device)

    def to_wire(self) -> dict:
        return {**super().to_wire(), "cause": self.cause}


class InputFailed(DependencyFailed):
    """``DependencyFailed`` for a batch whose input failed before reaching a worker; its wire form carries ``cause``
    as :class:`InputLost`'s does."""

    def __init__(self, message: str, *, cause: dict):
        self.cause = cause
        super().__init__(message)

    def to_wire(self) -> dict:
        return {**super().to_wire(), "cause": self.cause}


def root_cause(err: dict) -> dict:
    """The first failure behind the wire error ``err``: its ``cause`` when the dispatcher derived it from an earlier
    failure (:func:`input_failed`), else ``err``'s own code and message; the message cut to ``MAX_CAUSE_CHARS``."""
    cause = err.get("cause")
    if not (isinstance(cause, dict) and isinstance(cause.get("code"), str) and isinstance(cause.get("message"), str)):
        cause = err
    code, message = str(cause.get("code"))[:64], str(cause.get("message"))
    if len(message) > MAX_CAUSE_CHARS:
        message = message[:MAX_CAUSE_CHARS - 3] + "..."
    return {"code": code, "message": message}


def input_failed(ext: list[int], failed_ext: dict) -> TensorwireError:
    """The error of a batch with an input that failed before reaching a worker: a lost input is lost again
    (``WorkerLost``, naming its device); any other failure becomes ``DependencyFailed``. The message names the input
    this batch lacked and the first failure behind it (:func:`root_cause`) once: after a lost worker, the thousandth
    batch of a chain reads as the first one does, not as a thousand nested messages."""
    k, err = next(iter(failed_ext.items()))
    cause = root_cause(err)
    if err.get("code") == WorkerLost.code:
        device = err.get("device")
        return InputLost(f"input {ext[k]} was lost: {cause['message']}",
                         device=device if isinstance(device, str) else None, cause=cause)
    return InputFailed(f"input {ext[k]} failed earlier ({cause['code']}: {cause['message']})", cause=cause)



def device_sort_key(name: str):
    kind, _, idx = name.partition(":")
    return (kind != "cpu", kind, int(idx) if idx.isdigit() else 0)


def device_ids(value, name: str):
    """``(device, [ids])`` pairs of a message's ``{device: [ids]}`` field ``name`` (``locs``, ``lost``); none for an
    absent one; ProtocolError for anything else."""
    if not value:
        return []
    if not isinstance(value, dict) or not all(isinstance(d, str) and is_int_list(ids) for d, ids in value.items()):
        raise ProtocolError(f"'{name}' must map device names to lists of ids")
    return value.items()


def reachable(worker: ServiceInfo, host) -> bool:
    """Whether a process on ``host`` (``protocol.shm_paths.host_id``) can reach ``worker``'s direct channel: any
    process, when it listens on the network; only one of its own host, when on loopback or a unix socket."""
    addr = worker.info.get("direct")
    return isinstance(addr, str) and (not is_local_address(addr) or (isinstance(host, str) and
                                                                       host == worker.info.get("host")))
