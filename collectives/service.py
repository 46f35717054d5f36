"""One rank of the collectives service.

Rank ``i`` serves the worker of device ``devices[i]``. For every collective the dispatcher announces
(in one global order, the same for every rank), the rank waits until its worker has put its input in
shared memory (``coll_ready``), runs the MPI collective on that memory in place with the other ranks
of the group (a sub-communicator per group of devices), and answers ``coll_done``; the worker maps the
result. Tensor data moves worker -> shared memory -> MPI -> shared memory -> worker: never through the
dispatcher or the client.

Faults: if a worker dies while its rank has work announced, the rank aborts the MPI job (an MPI
collective cannot be cancelled; this is what NCCL's communicator abort does too). The dispatcher sees
the ranks go and answers every waiting worker with an error, so clients never hang; restart the service
to serve collectives again.
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
from collections import deque

import numpy as np
import zmq

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.credentials import service_token
from tensorwire.protocol.curve import keys_dir
from tensorwire.protocol.errors import ProtocolError, error_to_wire
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
from tensorwire.protocol.service import HEARTBEAT_S, announce_ready, stop_event_on_signals
from tensorwire.protocol.shm_paths import check_shm_path, map_shm_file
from tensorwire.protocol.wire import pack_header

log = logging.getLogger("tensorwire.collectives")


def _mpi():
    from .network import bind_env

    bind_env()  # before MPI initialises: its listeners bind loopback or the configured interface only
    from mpi4py import MPI

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
        self.stop = threading.Event()
        self.announced: deque = deque()  # (key, devices) in the dispatcher's order
        self.ready: dict[int, dict] = {}
        self.comms: dict[tuple, object] = {}
        self.maps: dict[str, np.ndarray] = {}  # shared-memory files mapped lately, oldest first
        self.ops = {"sum": self.MPI.SUM, "mean": self.MPI.SUM, "max": self.MPI.MAX, "min": self.MPI.MIN,
                    "prod": self.MPI.PROD}

    # -- plumbing ---------------------------------------------------------------------------------
    def _connect(self) -> zmq.Socket:
        return register_service(self.ctx, self.dispatcher, {
            "service": "collectives", "name": self.name, "token": self.token, "instance": self.instance,
            "info": {"device": self.device, "rank": self.rank, "size": len(self.devices)}}, keys=self.keys,
            stop=self.stop)

    def serve(self) -> None:
        start_heartbeats(self.ctx, self.dispatcher, self.name, self.stop, self.instance, self.keys)
        self.sock = sock = self._connect()
        self.world.Barrier()  # every rank is registered
        if self.rank == 0:
            announce_ready("collectives", devices=self.devices, pid=os.getpid())
        while not self.stop.is_set():  # liveness: the heartbeat thread
            if sock.poll(int(HEARTBEAT_S * 1000)):
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
            err = None
            try:
                self._collective(req, devs)
            except Exception as e:  # a local error: report it (peers may then hang: abort as on worker loss)
                err = error_to_wire(e)
                log.exception("collective %s failed", key)
            reply = {"t": "coll_done", "key": key, "device": self.device}
            if err:
                reply["err"] = err
            self.sock.send(pack_header(reply))
            if err:
                self.world.Abort(4)

    # -- the collectives -----------------------------------------------------------------------------
    def _map(self, path, pid) -> np.ndarray:
        """Map a worker's shared-memory file (kept mapped: workers reuse their files for later collectives).

        Only a file the worker serving this rank's device created is mapped: its name is checked against the
        pid the worker registered with (the dispatcher checked it too), and the file must be a regular file of
        this user's, not a link."""
        path = check_shm_path(path, pid, self.device)
        mm = self.maps.pop(path, None)
        if mm is None or not os.path.exists(path):
            mm = np.frombuffer(map_shm_file(path), dtype=np.uint8)
        self.maps[path] = mm
        while len(self.maps) > 32:
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

    def _collective(self, req: dict, devs: list[str]) -> None:
        MPI = self.MPI
        comm = self._comm(devs)
        dt = D.BY_NAME[req["dtype"]]
        shape = tuple(req["shape"])
        n_in = int(np.prod(shape, dtype=np.int64))
        mm = self._map(req.get("path"), req.get("pid"))
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
        else:
            raise ProtocolError(f"unknown collective {kind!r}")


def _die_with_launcher() -> None:
    """Die when the launcher that forked this rank dies, as Hydra's ranks do: MPICH's single-host launcher
    (``mpiexec.gforker``, which listens on no port) does not take its ranks down with it when it is killed."""
    import signal
    import sys

    if sys.platform != "linux":
        return
    try:
        import ctypes

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
    os._exit(0)  # skip MPI_Finalize: peers may be gone or blocked; the job is ending anyway
