"""The device worker: one process per device, a DEALER to the dispatcher's service socket.

The main thread owns the socket and all state (per-session buffers, cached plans, parked work): it
decodes messages and runs fragments in each session's order, round-robin across sessions; a session
waiting for a transfer from another device is parked while the others go on. Running kernels on the
thread that owns the socket keeps a round trip free of thread hand-offs. A second thread with a
socket of its own only sends heartbeats, so a long kernel does not make the worker look dead.
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
import time
from collections import deque

import numpy as np
import zmq

from tensorwire.protocol.errors import DeviceError, NotFound, ProtocolError, error_to_wire
from tensorwire.protocol.named_service import connect_service, drain, start_heartbeats
from tensorwire.protocol.service import (
    HEARTBEAT_S,
    LIVENESS,
    announce_ready,
    profiled,
    stop_event_on_signals,
    tune_gc,
)
from tensorwire.protocol.wire import array_from_frame, as_frame, pack_header, send_parts

from . import get_backend
from .executor import Fail, compile_plan, execute, meta_of, run_plan
from .shm import ShmPool

log = logging.getLogger("tensorwire.worker")
MAX_PLANS_PER_SESSION = 4096


def parse_device(text: str) -> tuple[str, int]:
    """``"cpu:0"`` -> ``("cpu", 0)``; ``"cpu"`` means index 0."""
    kind, _, idx = text.partition(":")
    if not kind or (idx and not idx.isdigit()):
        raise DeviceError(f"bad device {text!r}; expected TYPE:INDEX such as cpu:0")
    return kind, int(idx or 0)


class _Session:
    __slots__ = ("buffers", "plans", "jobs", "running", "errors")

    def __init__(self):
        self.buffers: dict[int, object] = {}
        self.plans: dict[int, object] = {}
        self.jobs: deque = deque()
        self.running = None  # (job, generator, pending recv key)
        self.errors: list[dict] = []


class Executor:
    """Owns the device and all session state; runs in its own thread, fed through ``inbox``."""

    def __init__(self, device, device_name: str, send):
        self.device = device
        self.name = device_name
        self.send = send  # callable(header, frames) -> None
        self.sessions: dict[bytes, _Session] = {}
        self.xfers: dict[int, object] = {}
        self.waiting: dict[int, bytes] = {}  # transfer key -> session parked on it
        self.ready: deque = deque()  # sessions with runnable work
        self.stats_requests: list = []
        self.colls: dict = {}  # ("coll", key) -> (shm file, output offset, shape, dtype) of pending collectives
        self.shm = ShmPool(device_name)

    # -- message handling (execution thread) -------------------------------------------------
    def _session(self, sid) -> _Session:
        s = self.sessions.get(sid)
        if s is None:
            s = self.sessions[sid] = _Session()
        return s

    def handle(self, h: dict, frames: list) -> None:
        t = h["t"]
        if t == "run":
            sid = h["s"]
            s = self._session(sid)
            s.jobs.append((h, frames))
            if s.running is None and len(s.jobs) == 1:
                self.ready.append(sid)
        elif t == "xfer":
            key = h["x"]
            if "err" in h:
                val = Fail(h["err"])
            else:
                try:
                    _, arr = array_from_frame([0, h["dtype"], h["shape"], 0], frames)
                    val = self.device.upload(arr)
                except Exception as e:
                    val = Fail(error_to_wire(e))
            self.xfers[key] = val
            sid = self.waiting.pop(key, None)
            if sid is not None:
                self.ready.append(sid)
        elif t == "coll_done":
            self._collective_done(h)
        elif t == "drop_session":
            s = self.sessions.pop(h["s"], None)
            if s is not None:
                for b in s.buffers.values():
                    if not isinstance(b, Fail):
                        self.device.free(b)
        elif t == "stats":  # answered after the work that arrived before it has run (see run_ready)
            self.stats_requests.append(h.get("q"))
        elif t == "drop_plans":
            s = self.sessions.get(h["s"])
            if s is not None:
                for p in h.get("plans", ()):
                    s.plans.pop(p, None)

    def stats(self) -> dict:
        out = {}
        for sid, s in self.sessions.items():
            live = [b for b in s.buffers.values() if not isinstance(b, Fail)]
            out[sid.hex() if isinstance(sid, bytes) else str(sid)] = {
                "buffers": len(live), "bytes": int(sum(self.device.nbytes(b) for b in live))}
        return out

    # -- running -----------------------------------------------------------------------------------
    def run_ready(self) -> None:
        """Advance every session that has runnable work (each until it blocks or runs dry)."""
        for _ in range(len(self.ready)):
            sid = self.ready.popleft()
            s = self.sessions.get(sid)
            if s is not None:
                self._advance(sid, s)
        while self.stats_requests:
            self.send({"t": "stats", "q": self.stats_requests.pop(0), "device": self.name, "sessions": self.stats(),
                       "memory": self.device.memory()}, [])

    def _safe_handle(self, h, frames):
        try:
            self.handle(h, frames)
        except Exception as e:  # a malformed message never stops the worker
            log.warning("bad message %s: %s", h.get("t"), e)
            if h.get("t") == "run" and h.get("reply"):
                self.send({"t": "done", "s": h.get("s"), "q": h.get("q"), "values": [],
                           "errors": [error_to_wire(ProtocolError(f"worker rejected the message: {e}"))]}, [])

    def _advance(self, sid, s: _Session) -> None:
        """Run the session's work until it blocks on a transfer or has none left."""
        while True:
            if s.running is None:
                if not s.jobs:
                    return
                h, frames = s.jobs.popleft()
                try:
                    gen = self._start(s, h, frames)
                except Exception as e:
                    s.errors.append(error_to_wire(e))
                    self._finish(sid, s, h, {})
                    continue
                if isinstance(gen, dict):  # ran to completion without transfers
                    self._finish(sid, s, h, gen)
                    continue
                s.running = (h, gen, None)
                send_val = None
            else:
                h, gen, key = s.running
                if key is not None:
                    if key not in self.xfers:
                        self.waiting[key] = sid
                        return
                    send_val = self.xfers.pop(key)
                else:
                    send_val = None
            try:
                while True:
                    ev = gen.send(send_val)
                    send_val = None
                    if ev[0] == "send":
                        self._send_xfer(sid, h, ev[1], ev[2])
                    else:  # recv, or a collective waiting for the collectives service
                        key = h["x"] + ev[1] if ev[0] == "recv" else self._start_collective(sid, h, *ev[1:])
                        if isinstance(key, Fail):
                            send_val = key
                            continue
                        if key in self.xfers:
                            send_val = self.xfers.pop(key)
                            continue
                        s.running = (h, gen, key)
                        self.waiting[key] = sid
                        return
            except StopIteration as stop:
                result = stop.value
            except Exception as e:  # an executor bug must not kill the worker
                s.errors.append(error_to_wire(e))
                result = {}
            s.running = None
            self._finish(sid, s, h, result)

    def _start(self, s: _Session, h: dict, frames: list):
        plan_no = h.get("plan")
        nodes = h.get("nodes")
        if nodes is None and plan_no is None:  # only releases, fetches or a sync
            return {}
        ext_ids = h.get("ext") or []
        ext = [s.buffers.get(i) for i in ext_ids]
        for k, b in enumerate(ext):
            if b is None:
                ext[k] = Fail(error_to_wire(NotFound(f"handle {ext_ids[k]} is not on {self.name}")))
        if nodes is not None:
            plan = compile_plan(self.device, nodes, [meta_of(self.device, b) for b in ext])
            if plan_no is not None:
                if len(s.plans) >= MAX_PLANS_PER_SESSION:
                    s.plans.pop(next(iter(s.plans)))
                s.plans[plan_no] = plan
        else:
            plan = s.plans.get(plan_no)
            if plan is None:
                raise NotFound(f"plan {plan_no} is not known on {self.name}")
            metas = [meta_of(self.device, b) for b in ext]
            if metas != plan.ext_metas:  # a replayed plan needs inputs shaped as when it was compiled
                for k, m in enumerate(metas):
                    if not isinstance(m, Fail) and not isinstance(plan.ext_metas[k], Fail) and m != plan.ext_metas[k]:
                        raise ProtocolError(f"plan {plan_no} replayed with input {ext_ids[k]} of a different "
                                            f"shape/dtype")
        outs = h.get("outs") or []
        release = set(h.get("release") or ())
        keep = {plan.node_slot[j] for j, i in enumerate(outs) if i not in release and j < len(plan.node_slot)}
        keep.discard(None)
        dyn = {j: a for j, a in (h.get("dyn") or ())}
        if not plan.has_transfers:
            return run_plan(self.device, plan, ext, outs, dyn, frames, keep)
        return execute(self.device, plan, ext, outs, dyn, frames, keep)

    def _start_collective(self, sid, h: dict, attrs: dict, value, step):
        """Put this device's input of a collective in shared memory and tell the collectives service."""
        if isinstance(value, Fail):
            return value.dependent(None)
        gk = (h.get("coll") or {}).get(attrs["key"])
        if gk is None:
            return Fail(error_to_wire(ProtocolError(f"collective {attrs['key']} was not announced")))
        try:
            arr = self.device.download(value)
            out_bytes = int(np.prod(step.shape, dtype=np.int64)) * step.dtype.itemsize
            in_place = attrs["kind"] in ("all_reduce", "broadcast")
            f = self.shm.take(arr.nbytes if in_place else arr.nbytes + out_bytes)
            if arr.nbytes:
                np.frombuffer(memoryview(f.map), np.uint8, arr.nbytes)[:] = arr.reshape(-1).view(np.uint8)
            path = f.path
        except Exception as e:
            return Fail(error_to_wire(e))
        key = ("coll", gk)
        self.colls[key] = (f, 0 if in_place else arr.nbytes, step.shape, step.dtype)
        self.send({"t": "coll_ready", "s": sid, "key": gk, "device": self.name, "path": path,
                   "dtype": step.dtype.name, "shape": list(arr.shape), "out_shape": list(step.shape),
                   "kind": attrs["kind"], "op": attrs.get("op"), "src": attrs.get("src", 0), "n": attrs["n"],
                   "rank": attrs["rank"]}, [])
        return key

    def _collective_done(self, h: dict) -> None:
        key = ("coll", h.get("key"))
        info = self.colls.pop(key, None)
        if info is None:
            return
        f, offset, shape, dt = info
        if h.get("err"):
            val = Fail(h["err"])
            self.shm.give_back(f)
        else:
            try:  # the result stays on the shared pages: no copy back
                val = self.device.upload(self.shm.lease(f, offset, shape, dt.np))
            except Exception as e:
                val = Fail(error_to_wire(e))
                self.shm.give_back(f)
        self.xfers[key] = val
        sid = self.waiting.pop(key, None)
        if sid is not None:
            self.ready.append(sid)

    def _send_xfer(self, sid, h, k, value) -> None:
        key = h["x"] + k
        if isinstance(value, Fail):
            self.send({"t": "xfer", "s": sid, "x": key, "err": value.dependent(None).err}, [])
            return
        arr = self.device.download(value)
        shape, dt = self.device.meta(value)
        self.send({"t": "xfer", "s": sid, "x": key, "dtype": dt.name, "shape": list(shape)}, [as_frame(arr)])

    def _finish(self, sid, s: _Session, h: dict, result: dict) -> None:
        bufs = s.buffers
        bufs.update(result)
        for v in result.values():
            if isinstance(v, Fail) and v.err.get("code") != "DependencyFailed":
                s.errors.append(v.err)
        for i in h.get("release") or ():
            b = s.buffers.pop(i, None)
            if b is not None and not isinstance(b, Fail):
                self.device.free(b)
        if not h.get("reply"):
            return
        values, frames, fetch_errors = [], [], []
        for i in h.get("fetch") or ():
            b = s.buffers.get(i)
            if b is None:
                fetch_errors.append(error_to_wire(NotFound(f"handle {i} does not exist on {self.name}"), i))
            elif isinstance(b, Fail):
                e = dict(b.err)
                e["fetched"] = i
                fetch_errors.append(e)
            else:
                try:
                    arr = self.device.download(b)
                except Exception as e:
                    fetch_errors.append(error_to_wire(e, i))
                    continue
                shape, dt = self.device.meta(b)
                values.append([i, dt.name, list(shape), len(frames)])
                frames.append(as_frame(arr))
        errors, s.errors = s.errors, []
        self.send({"t": "done", "s": sid, "q": h.get("q"), "values": values, "errors": errors,
                   "fetch_errors": fetch_errors}, frames)


class Worker:
    """The worker process: socket, state and execution on one thread, heartbeats on another."""

    def __init__(self, device: str, dispatcher: str, ctx: zmq.Context | None = None, token: str | None = None):
        self.device_name = device
        kind, index = parse_device(device)
        self.backend = get_backend(kind)
        infos = {d.index: d for d in self.backend.devices()}
        info = infos.get(index)
        if info is None:
            raise DeviceError(f"{device} does not exist; {kind} devices here: "
                              f"{', '.join(f'{kind}:{i}' for i in infos) or 'none'}")
        if not info.available:
            raise DeviceError(f"{device} is not available: {info.reason}")
        self.info = info
        self.device = self.backend.open(index)
        self.dispatcher = dispatcher
        self.token = token
        self.ctx = ctx or zmq.Context.instance()
        self.sock: zmq.Socket | None = None
        self.executor = Executor(self.device, device, self._send)
        self.stop = threading.Event()

    def _send(self, header: dict, frames: list) -> None:
        send_parts(self.sock, [pack_header(header), *frames])

    def _connect(self) -> zmq.Socket:
        return connect_service(self.ctx, self.dispatcher, {
            "service": "worker", "device": self.device_name, "backend": self.backend.name,
            "info": self.info.to_wire(), "token": self.token})

    def serve(self, ready_line: bool = True) -> None:
        start_heartbeats(self.ctx, self.dispatcher, self.device_name, self.stop)
        self.sock = sock = self._connect()
        ex = self.executor
        last_seen = time.monotonic()
        announced = False
        try:
            while not self.stop.is_set():
                if not sock.poll(0 if ex.ready else int(HEARTBEAT_S * 1000)):
                    ex.run_ready()
                    if time.monotonic() - last_seen > HEARTBEAT_S * LIVENESS:
                        log.warning("dispatcher silent; reconnecting and registering again")
                        sock.close(0)
                        self.sock = sock = self._connect()
                        last_seen = time.monotonic()
                    continue
                for h, frames in drain(sock):
                    last_seen = time.monotonic()
                    t = h["t"]
                    if t == "hb":
                        continue
                    if t == "registered":
                        if ready_line and not announced:
                            announce_ready("worker", device=self.device_name, pid=os.getpid())
                            announced = True
                    elif t == "refused":
                        raise DeviceError(h.get("message", "the dispatcher refused this worker"))
                    else:
                        ex._safe_handle(h, frames)
                ex.run_ready()
        finally:
            self.stop.set()
            sock.close(0)
            ex.shm.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tensorwire worker", description="Run a device worker.")
    p.add_argument("--device", default="cpu:0", help="device this worker owns, e.g. cpu:0 or cuda:1")
    p.add_argument("--dispatcher", default=os.environ.get("TENSORWIRE_SERVICE_ADDRESS", "tcp://127.0.0.1:5556"),
                   help="the dispatcher's service address")
    p.add_argument("--token", default=os.environ.get("TENSORWIRE_TOKEN"), help="the cluster's credential")
    p.add_argument("--threads", type=int, default=None,
                   help="BLAS/OpenMP threads for kernels (default: the library's own; give each worker its share "
                        "of the host's cores when several run on one host)")
    args = p.parse_args(argv)
    logging.basicConfig(level=os.environ.get("TENSORWIRE_LOG", "WARNING"))
    tune_gc()
    w = Worker(args.device, args.dispatcher, token=args.token)
    stop = stop_event_on_signals()
    threading.Thread(target=lambda: (stop.wait(), w.stop.set()), daemon=True).start()
    profiled("worker", w.serve)
    return 0

