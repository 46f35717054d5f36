"""Issue 2's benchmarks: round trip, recorded ops, bulk transfer, matmul."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import zmq

import tensorwire as tw

from .harness import Result, interleaved

ECHO = r"""
import sys, zmq
ctx = zmq.Context()
s = ctx.socket(zmq.ROUTER)
s.setsockopt(zmq.MAXMSGSIZE, -1)
if len(sys.argv) > 1:
    s.bind(sys.argv[1])
    print(sys.argv[1], flush=True)
else:
    print("tcp://127.0.0.1:%d" % s.bind_to_random_port("tcp://127.0.0.1"), flush=True)
while True:
    m = s.recv_multipart(copy=False)
    if m[1].bytes == b"stop":
        break
    s.send_multipart(m, copy=False)
"""


class Echo:
    """A raw pyzmq ROUTER echo in another process: the peer for the wire benchmarks."""

    def __init__(self, address: str | None = None, script: str = ECHO, args: tuple[str, ...] = ()):
        """``address``: where the echo listens (default a TCP port on loopback; ``ipc://PATH`` for a unix socket);
        ``script`` and ``args``: the echo process's program (``ECHO``) and its arguments after the address."""
        self.proc = subprocess.Popen([sys.executable, "-c", script, *([address] if address else []), *args],
                                     stdout=subprocess.PIPE)
        self.address = self.proc.stdout.readline().decode().strip()
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(self.address)

    def roundtrip(self, payload) -> None:
        self.sock.send(payload, copy=len(payload) < 65536)
        self.sock.recv(copy=False)

    def close(self) -> None:
        self.sock.send(b"stop")
        self.proc.wait(10)
        self.sock.close(0)


BROKER = r"""
import sys, zmq
ctx = zmq.Context()
front = ctx.socket(zmq.ROUTER); back = ctx.socket(zmq.ROUTER)
port = front.bind_to_random_port("tcp://127.0.0.1"); bport = back.bind_to_random_port("tcp://127.0.0.1")
print(port, bport, flush=True)
worker = back.recv_multipart()[0]
poller = zmq.Poller(); poller.register(front, zmq.POLLIN); poller.register(back, zmq.POLLIN)
while True:
    ev = dict(poller.poll())
    if front in ev:
        m = front.recv_multipart()
        if m[1] == b"stop":
            back.send_multipart([worker, b"stop"]); break
        back.send_multipart([worker] + m)
    if back in ev:
        front.send_multipart(back.recv_multipart()[1:])
"""

BROKER_WORKER = r"""
import sys, zmq
s = zmq.Context().socket(zmq.DEALER); s.connect(f"tcp://127.0.0.1:{sys.argv[1]}"); s.send(b"ready")
while True:
    m = s.recv_multipart()
    if m[-1] == b"stop":
        break
    s.send_multipart(m)
"""


def bench_broker_floor(echo: Echo) -> Result:
    """The floor a brokered design sets: the same 16-byte echo through a minimal pyzmq broker process."""
    broker = subprocess.Popen([sys.executable, "-c", BROKER], stdout=subprocess.PIPE)
    port, bport = broker.stdout.readline().split()
    worker = subprocess.Popen([sys.executable, "-c", BROKER_WORKER, bport.decode()])
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(f"tcp://127.0.0.1:{int(port)}")
    payload = b"x" * 16

    def via_broker():
        sock.send(payload)
        sock.recv()

    try:
        for _ in range(200):
            via_broker()
        ours, peer = interleaved(via_broker, lambda: echo.roundtrip(payload), rounds=9, number=300)
    finally:
        sock.send(b"stop")
        broker.wait(10)
        worker.wait(10)
        sock.close(0)
    return Result("(floor) the same echo through a minimal pyzmq broker process, vs direct echo", ours * 1e6,
                  peer * 1e6, "us", ours / peer, "reference", True,
                  "client -> broker -> worker and back, no work at all: the least any brokered design pays")


def bench_roundtrip(echo: Echo) -> Result:
    x = tw.ones(4)
    x.numpy()
    payload = b"x" * 16
    for _ in range(200):
        (x + 1).numpy()
        echo.roundtrip(payload)
    ours, peer = interleaved(lambda: (x + 1).numpy(), lambda: echo.roundtrip(payload), rounds=9, number=300)
    r = ours / peer
    return Result("round trip `(x + 1).numpy()`, 4 elements, vs pyzmq echo of 16 B", ours * 1e6, peer * 1e6,
                  "us", r, "<= 3x", r <= 3)


def bench_recorded_ops(n: int = 10_000) -> tuple[Result, Result]:
    x = tw.ones(4)
    xn = np.ones(4, np.float32)

    def ours():
        y = x
        for _ in range(n):
            y = y + 1
        y.numpy()

    def peer():
        y = xn
        for _ in range(n):
            y = y + np.float32(1)
        return y

    ours()  # first time: the plan is compiled on the worker
    first_x = tw.full((4,), 2.0)  # a different input id, same structure

    def first():
        y = first_x
        for _ in range(n):
            y = y * 1.0001
        y.numpy()

    t_first, t_peer0 = interleaved(first, peer, rounds=1)
    t_ours, t_peer = interleaved(ours, peer, rounds=5)
    r1 = t_first / t_peer0
    r2 = t_ours / t_peer
    return (Result(f"{n:,} recorded elementwise ops then one numpy(), first run, per op vs numpy eager",
                   t_first / n * 1e6, t_peer0 / n * 1e6, "us/op", r1, "<= 2x", r1 <= 2,
                   "includes compiling the plan on the worker"),
            Result(f"the same {n:,}-op loop repeated (plan replay), per op vs numpy eager",
                   t_ours / n * 1e6, t_peer / n * 1e6, "us/op", r2, "< first run", r2 < r1))


def bench_bulk(echo: Echo, mib: int = 256) -> Result:
    a = np.random.default_rng(0).standard_normal(mib * (1 << 20) // 4).astype(np.float32)

    def ours():
        t = tw.from_numpy(a)
        t.numpy()

    def peer():
        echo.roundtrip(memoryview(a))

    ours()
    peer()
    t_ours, t_peer = interleaved(ours, peer, rounds=3)
    gb = 2 * a.nbytes / 1e9  # upload + download
    r = (gb / t_ours) / (gb / t_peer)
    return Result(f"upload + download of {mib} MiB float32 vs pyzmq echo of the buffer (throughput)",
                  gb / t_ours, gb / t_peer, "GB/s", r, ">= 0.7x", r >= 0.7)


def bench_matmul(n: int = 1024) -> Result:
    rng = np.random.default_rng(0)
    an = rng.standard_normal((n, n)).astype(np.float32)
    bn = rng.standard_normal((n, n)).astype(np.float32)
    a, b = tw.from_numpy(an), tw.from_numpy(bn)
    out = None

    def ours():
        nonlocal out
        out = a @ b
        tw.synchronize()

    def peer():
        return an @ bn

    ours()
    peer()
    t_ours, t_peer = interleaved(ours, peer, rounds=7, number=3)
    np.testing.assert_allclose(out.numpy(), an @ bn, rtol=1e-3, atol=1e-3)
    r = t_peer / t_ours
    return Result(f"{n}x{n} float32 matmul (incl. sync) vs numpy in-process (speed)", t_ours * 1e3, t_peer * 1e3,
                  "ms", r, ">= 0.9x", r >= 0.9)


def run_all() -> list[Result]:
    results = []
    echo = Echo()
    try:
        with tw.LocalCluster(devices=["cpu:0"]) as c:
            s = tw.connect(c.address)
            results.append(bench_roundtrip(echo))
            results.append(bench_broker_floor(echo))
            results.extend(bench_recorded_ops())
            results.append(bench_matmul())
            results.append(bench_bulk(echo))
            s.close()
    finally:
        echo.close()
    return results
