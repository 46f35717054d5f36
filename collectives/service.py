"""One rank of the collectives service.

Rank ``i`` serves the worker of device ``devices[i]``. For every collective the dispatcher announces
(in one global order, the same for every rank), the rank waits until its worker has put its input in
shared memory (``coll_ready``), runs the collective on that memory in place with the other ranks of the group
(a sub-communicator per group of devices): on one host directly on each other's files (``shared_memory``), across
hosts by MPI; and answers ``coll_done``; the worker maps the result. Tensor data moves worker -> shared memory ->
(MPI) -> shared memory -> worker: never through the dispatcher or the client.

Collectives whose devices all have a transport of their own (NCCL among CUDA devices, which the dispatcher chooses
and marks ``direct``) move no data here: rank 0 of the group makes the group's NCCL unique id (once, and again after
a worker of the group was lost or aborted its communicator) and broadcasts it over MPI; every rank answers
``coll_done`` with it, and the workers run the collective on their devices (``backends/cuda/nccl.py``). Failing to
make the id fails that collective on every rank alike, and the service keeps serving.

Faults: if a worker dies while its rank has work announced, the rank aborts the MPI job (an MPI
collective cannot be cancelled; this is what NCCL's communicator abort does too). The dispatcher sees
the ranks go and answers every waiting worker with an error, so clients never hang; restart the service
to serve collectives again.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import signal
import sys
import threading
from collections import deque

import numpy as np
import zmq

from tensorwire.backends.cuda.nccl import TRANSPORT, UNIQUE_ID_BYTES, id_tag, load_nccl
from tensorwire.protocol import dtypes as D
from tensorwire.protocol.credentials import service_token
from tensorwire.protocol.curve import keys_dir
from tensorwire.protocol.errors import DeviceError, ProtocolError, TensorwireError, error_to_wire
from tensorwire.protocol.logs import configure as configure_logging
from tensorwire.protocol.named_service import (
    add_service_credential_args,
    drain,
    new_instance,
    register_service,
    say_goodbye,
    start_heartbeats,
)
from tensorwire.protocol.ops import split_sizes
from tensorwire.protocol.service import HEARTBEAT_S, StopEvent, announce_ready, stop_event_on_signals
from tensorwire.protocol.shm_paths import check_shm_path, map_shm_file
from tensorwire.protocol.wire import pack_header

from . import shared_memory
from .network import bind_env

log = logging.getLogger("tensorwire.collectives")

ID_ERROR_BYTES = 1024  # the error text rank 0 broadcasts when it cannot make a group's NCCL id
MAX_GROUP_IDS = 256  # NCCL ids kept (one per group of devices); an evicted group gets a new one


def _mpi():
    bind_env()  # before MPI initialises: its listeners bind loopback or the configured interface only
    from mpi4py import MPI  # lazy: importing MPI initialises it; bind_env() comes first

    return MPI


class Rank:
    """The collectives rank for one device."""

    def __init__(self, dispatcher: str, devices: list[str], token: str | None = None, keys=None):
        self.MPI = _mpi()
        self.world = self.MPI.COMM_WORLD
        if self.world.size != len(devices):
            raise ProtocolError(f"the MPI job has {self.world.size} ranks but {len(devices)} devices were given: "
                                f"run one rank per device worker (mpiexec -n {len(devices)})")
        self.rank = self.world.rank
        self.devices = devices
        self.device = devices[self.rank]
        self.name = f"collectives@{self.device}"
        self.dispatcher = dispatcher
        self.token = token  # the service credential
        self.keys = keys
        self.instance = new_instance()
        self.ctx = zmq.Context.instance()
        self.stop = StopEvent()  # (set: the serve loop's wait for a message returns at once)
        self.announced: deque = deque()  # (key, devices) in the dispatcher's order
        self.ready: dict[int, dict] = {}
        self.comms: dict[tuple, object] = {}
        self.one_host: dict[tuple, bool] = {}  # group devices -> whether its ranks share this host's memory
        self.maps: dict[str, np.ndarray] = {}  # shared-memory files mapped lately, oldest first
        self.transports = _transports(devices)  # device transports this rank can make ids for ("nccl")
        self.nccl_ids: dict[tuple, bytes] = {}  # group devices -> its NCCL unique id (rank 0 of the group only)
        self.ops = {"sum": self.MPI.SUM, "mean": self.MPI.SUM, "max": self.MPI.MAX, "min": self.MPI.MIN,
                    "prod": self.MPI.PROD}

    # -- plumbing ---------------------------------------------------------------------------------
    def _connect(self) -> zmq.Socket:
        return register_service(self.ctx, self.dispatcher, {
            "service": "collectives", "name": self.name, "token": self.token, "instance": self.instance,
            "info": {"device": self.device, "rank": self.rank, "size": len(self.devices),
                     "transports": self.transports}}, keys=self.keys,
            stop=self.stop)

    def serve(self) -> None:
        start_heartbeats(self.ctx, self.dispatcher, self.name, self.stop, self.instance, self.keys)
        self.sock = sock = self._connect()
        self.world.Barrier()  # every rank is registered
        if self.rank == 0:
            announce_ready("collectives", devices=self.devices, pid=os.getpid())
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(self.stop, zmq.POLLIN)  # (a stop ends the wait at once)
        while not self.stop.is_set():  # liveness: the heartbeat thread
            if poller.poll(int(HEARTBEAT_S * 1000)):
                for h, _ in drain(sock):
                    try:
                        self._on_message(h)
                    except (ProtocolError, KeyError, TypeError) as e:
                        log.warning("bad message: %s", e)
            self._run_ready()
        say_goodbye(sock)

    def _on_message(self, h: dict) -> None:
        t = h["t"]
        if t == "coll_announce":
            self.announced.append((h["key"], list(h["devices"])))
        elif t == "coll_ready":
            self.ready[h["key"]] = h
        elif t == "coll_cancel":  # the dispatcher failed it before releasing any rank: skip it
            key = h.get("key")
            self.announced = deque(a for a in self.announced if a[0] != key)
            self.ready.pop(key, None)
        elif t == "worker_lost":
            for group in [g for g in self.nccl_ids if h.get("device") in g]:  # its communicators went with it
                del self.nccl_ids[group]
            if h.get("device") == self.device and self.announced:
                log.error("worker %s died with %d collectives pending: aborting the MPI job", self.device,
                          len(self.announced))
                self.world.Abort(3)

    def _run_ready(self) -> None:
        while self.announced:
            key, devs = self.announced[0]
            if self.device not in devs:  # not ours (announcements go to the group only; be safe)
                self.announced.popleft()
                continue
            req = self.ready.pop(key, None)
            if req is None:
                return  # our worker has not reached this collective yet: keep the order, wait
            self.announced.popleft()
            err = direct = None
            try:
                if req.get("direct") is True:
                    direct = self._direct(req, devs)
                else:
                    self._collective(req, devs)
            except Exception as e:  # a local error: report it (peers may then hang: abort as on worker loss)
                err = error_to_wire(e)
                log.exception("collective %s failed", key)
            reply = {"t": "coll_done", "key": key, "device": self.device}
            if err:
                reply["err"] = err
            elif direct:
                reply["direct"] = direct
            self.sock.send(pack_header(reply))
            if err and req.get("direct") is not True:  # (a direct one fails on every rank alike: nobody waits)
                self.world.Abort(4)

    # -- the collectives -----------------------------------------------------------------------------
    def _map(self, path, pid, device: str | None = None) -> np.ndarray:
        """Map a worker's shared-memory file (kept mapped: workers reuse their files for later collectives).

        Only a file the worker serving this rank's device (or ``device``, a peer rank's, whose rank checked it
        already) created is mapped: its name is checked against the pid the worker registered with (the dispatcher
        checked it too), and the file must be a regular file of this user's, not a link."""
        path = check_shm_path(path, pid, device or self.device)
        mm = self.maps.pop(path, None)
        if mm is None or not os.path.exists(path):
            mm = np.frombuffer(map_shm_file(path), dtype=np.uint8)
        self.maps[path] = mm
        while len(self.maps) > 32 * len(self.devices):
            self.maps.pop(next(iter(self.maps)))
        return mm

    def _comm(self, devs: list[str]):
        ranks = tuple(self.devices.index(d) for d in devs)
        if ranks == tuple(range(self.world.size)):
            return self.world
        comm = self.comms.get(ranks)
        if comm is None:
            group = self.world.Get_group().Incl(list(ranks))
            comm = self.comms[ranks] = self.world.Create_group(group)
        return comm

    def _direct(self, req: dict, devs: list[str]) -> dict:
        """A collective over NCCL: rank 0 of the group makes (or reuses) the group's unique id and broadcasts it,
        or its error, over MPI, so every rank answers alike. Returns the worker's part of the answer."""
        comm = self._comm(devs)
        group = tuple(devs)
        buf = np.zeros(1 + UNIQUE_ID_BYTES + ID_ERROR_BYTES, np.uint8)  # ok flag, id, error text
        if comm.rank == 0:
            uid = self.nccl_ids.get(group)
            broken = req.get("broken") if isinstance(req.get("broken"), list) else []
            if uid is not None and id_tag(uid) in broken:
                uid = None  # a worker aborted that communicator
            try:
                if uid is None:
                    uid = load_nccl().unique_id()
                    self.nccl_ids.pop(group, None)
                    self.nccl_ids[group] = uid
                    while len(self.nccl_ids) > MAX_GROUP_IDS:
                        self.nccl_ids.pop(next(iter(self.nccl_ids)))
                buf[0] = 1
                buf[1:1 + UNIQUE_ID_BYTES] = np.frombuffer(uid, np.uint8)
            except Exception as e:  # noqa: BLE001 - every rank reports it
                text = (e.message if isinstance(e, TensorwireError) else f"{type(e).__name__}: {e}").encode()
                buf[1 + UNIQUE_ID_BYTES:1 + UNIQUE_ID_BYTES + len(text[:ID_ERROR_BYTES])] = np.frombuffer(
                    text[:ID_ERROR_BYTES], np.uint8)
        comm.Bcast(buf, root=0)
        if not buf[0]:
            why = buf[1 + UNIQUE_ID_BYTES:].tobytes().rstrip(b"\0").decode(errors="replace")
            raise DeviceError(f"NCCL for {', '.join(devs)}: the collectives service could not make the group's "
                              f"unique id ({why})")
        return {"uid": buf[1:1 + UNIQUE_ID_BYTES].tobytes(), "rank": comm.rank, "devices": list(devs)}

    def _one_host(self, comm, devs: list[str]) -> bool:
        """Whether the group's ranks share this host's memory (asked once per group, collectively)."""
        key = tuple(devs)
        one = self.one_host.get(key)
        if one is None:
            one = self.one_host[key] = shared_memory.on_one_host(comm)
        return one

    def _collective(self, req: dict, devs: list[str]) -> None:
        comm = self._comm(devs)
        dt = D.BY_NAME[req["dtype"]]
        shape = tuple(req["shape"])
        n_in = int(np.prod(shape, dtype=np.int64))
        mm = self._map(req.get("path"), req.get("pid"))
        if req["kind"] not in ("all_reduce", "broadcast", "all_gather", "reduce_scatter"):
            raise ProtocolError(f"unknown collective {req['kind']!r}")
        if self._one_host(comm, devs):
            self._on_shared_memory(comm, devs, req, mm, dt, shape, n_in)
        else:
            self._over_mpi(comm, req, mm, dt, shape, n_in)

    def _on_shared_memory(self, comm, devs: list[str], req: dict, mm: np.ndarray, dt: D.DType, shape: tuple,
                          n_in: int) -> None:
        """The collective on the group's shared-memory files themselves (``shared_memory``): the ranks swap the
        files' names (every input is then in place), each does its share, and a barrier ends it."""
        peers = comm.allgather((req.get("path"), req.get("pid")))
        mms = [mm if k == comm.rank else self._map(path, pid, devs[k]) for k, (path, pid) in enumerate(peers)]
        size, isz = n_in * dt.itemsize, dt.itemsize
        ins = [m[:size].view(dt.np) for m in mms]
        kind, opname = req["kind"], req.get("op")
        try:
            if kind == "all_reduce":
                shared_memory.all_reduce(comm, ins, opname, dt)
            elif kind == "broadcast":
                shared_memory.broadcast(comm, ins, int(req.get("src", 0)))
            elif kind == "all_gather":
                outs = [m[size: size * (comm.size + 1)].view(dt.np) for m in mms]
                shared_memory.all_gather(comm, ins, outs)
            else:
                row = n_in // shape[0] if shape[0] else 0
                counts = [r * row for r in split_sizes(shape[0], comm.size)]
                out = mm[size: size + counts[comm.rank] * isz].view(dt.np)
                shared_memory.reduce_scatter(comm, ins, out, counts, opname, dt)
        finally:
            comm.Barrier()

    def _over_mpi(self, comm, req: dict, mm: np.ndarray, dt: D.DType, shape: tuple, n_in: int) -> None:
        """The collective by MPI, in place on this rank's shared-memory file (ranks on several hosts)."""
        MPI = self.MPI
        data = mm[: n_in * dt.itemsize].view(dt.np)
        kind, opname = req["kind"], req.get("op")
        wide = dt in (D.float16, D.bfloat16, D.bool_)  # no MPI datatype: reduce in a wider type
        work = data.astype(np.float32 if dt.is_floating_point else np.int64) if wide else data
        if kind == "all_reduce":
            comm.Allreduce(MPI.IN_PLACE, work, op=self.ops[opname])
            if opname == "mean":
                work /= comm.size if work.dtype.kind == "f" else 1
                if work.dtype.kind != "f":
                    work //= comm.size
            if wide:
                data[:] = work.astype(dt.np)
        elif kind == "broadcast":
            comm.Bcast(work, root=int(req.get("src", 0)))
            if wide:
                data[:] = work.astype(dt.np)
        elif kind == "all_gather":
            out = mm[n_in * dt.itemsize: n_in * dt.itemsize * (comm.size + 1)].view(dt.np)
            if wide:
                tmp = np.empty(n_in * comm.size, work.dtype)
                comm.Allgather(work, tmp)
                out[:] = tmp.astype(dt.np)
            else:
                comm.Allgather(work, out)
        elif kind == "reduce_scatter":
            rows = split_sizes(shape[0], comm.size)
            row = n_in // shape[0] if shape[0] else 0
            counts = [r * row for r in rows]
            mine = counts[comm.rank]
            out = mm[n_in * dt.itemsize: n_in * dt.itemsize + mine * dt.itemsize].view(dt.np)
            tmp = np.empty(mine, work.dtype)
            if n_in:
                comm.Reduce_scatter(work, tmp, recvcounts=counts, op=self.ops[opname])
            if opname == "mean":
                tmp = tmp / comm.size if tmp.dtype.kind == "f" else tmp // comm.size
            out[:] = tmp.astype(dt.np)


def _transports(devices: list[str]) -> list[str]:
    """The device transports this job's ranks can make communicator ids for: ``["nccl"]`` when the job serves CUDA
    devices and NCCL loads (a job without them does not load the library)."""
    if not any(d.partition(":")[0] == "cuda" for d in devices):
        return []
    try:
        load_nccl().version()
    except TensorwireError as e:
        log.info("no NCCL: collectives among CUDA devices go through shared memory (%s)", e.message)
        return []
    return [TRANSPORT]


def _die_with_launcher() -> None:
    """Die when the launcher that forked this rank dies, as Hydra's ranks do: MPICH's single-host launcher
    (``mpiexec.gforker``, which listens on no port) does not take its ranks down with it when it is killed."""
    if sys.platform != "linux":
        return
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the launcher died before prctl: go too
        os._exit(1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tensorwire collectives",
                                description="One rank of the collectives service; run under mpiexec, one rank per "
                                            "device worker: mpiexec -n 2 tensorwire collectives --devices cpu:0,cpu:1")
    p.add_argument("--dispatcher", default=os.environ.get("TENSORWIRE_SERVICE_ADDRESS", "tcp://127.0.0.1:5556"))
    p.add_argument("--devices", required=True, help="comma-separated devices; rank i serves devices[i]")
    add_service_credential_args(p)
    args = p.parse_args(argv)
    configure_logging()
    _die_with_launcher()
    keys = keys_dir(args.keys)
    rank = Rank(args.dispatcher, [d.strip() for d in args.devices.split(",") if d.strip()],
                token=service_token(args.service_token_file, keys), keys=keys)
    stop = stop_event_on_signals()
    threading.Thread(target=lambda: (stop.wait(), rank.stop.set()), daemon=True).start()
    rank.serve()
    finalize(rank.MPI, FINALIZE_S)
    _exit_finalized()
    return 0


def _exit_finalized() -> None:
    """Exit through the C library's ``exit``: it runs the exit handlers MPICH registered, one of which tells the
    launcher this rank finalized (``os._exit`` skips them: the launcher would take the exit for a failure), and skips
    the interpreter's own shutdown (~0.3 s, and nothing of ours needs it: sockets do not linger)."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        ctypes.CDLL(None).exit(0)
    except (OSError, AttributeError):  # (no C library to call: the interpreter's exit runs them too)
        pass


#: how long a stopping rank waits in MPI_Finalize for its peers before it exits without it
FINALIZE_S = 2.0


def finalize(MPI, within_s: float) -> None:
    """``MPI_Finalize``, or exit after ``within_s`` seconds when it does not return (a peer gone or blocked in a
    collective). A rank that exits without finalizing is an abnormal end to the launcher: MPICH's
    ``mpiexec.gforker`` then stops the other ranks with SIGINT, a second's sleep, SIGQUIT and another second's
    sleep before it exits itself (2 s of every cluster's close); a finalized rank's exit is a normal one."""
    watchdog = threading.Timer(within_s, os._exit, (0,))
    watchdog.daemon = True
    watchdog.start()
    MPI.Finalize()
    watchdog.cancel()
