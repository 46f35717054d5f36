"""Helpers the tests share: polling for a condition, and the processes and key folders they make."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from pathlib import Path


def stderr_until(p: subprocess.Popen, needle: bytes, timeout_s: float) -> str:
    """Read ``p``'s stderr until ``needle`` appears, the stream ends or ``timeout_s`` passes; the text read."""
    err, deadline = b"", time.monotonic() + timeout_s
    while needle not in err and time.monotonic() < deadline:
        if select.select([p.stderr], [], [], 1)[0]:
            chunk = os.read(p.stderr.fileno(), 4096)
            if not chunk:
                break
            err += chunk
    return err.decode(errors="replace")


def mixed_keys(keys: Path, tmp_path: Path, case: str, make_keys) -> Path:
    """A client keys folder that is wrong in one way: ``case`` "wrong-dispatcher-key" pins another dispatcher's public
    key, "unknown-client-key" holds a client key the dispatcher of ``keys`` never authorised. ``make_keys(folder)``
    makes a fresh set (``tensorwire keys --dir``)."""
    other = tmp_path / "other"
    make_keys(other)
    use = tmp_path / "mixed"
    use.mkdir()
    pin = keys if case == "unknown-client-key" else other  # the right dispatcher key, or an impostor's
    own = other if case == "unknown-client-key" else keys  # a client key the dispatcher never authorised
    (use / "dispatcher.key").write_bytes((pin / "dispatcher.key").read_bytes())
    (use / "client.key_secret").write_bytes((own / "client.key_secret").read_bytes())
    return use


def wait_for(predicate, timeout: float = 20.0, step: float = 0.1):
    """Poll ``predicate`` until it returns something truthy (bounded); returns it or the last falsy value."""
    deadline = time.monotonic() + timeout
    value = predicate()
    while not value and time.monotonic() < deadline:
        time.sleep(step)
        value = predicate()
    return value


#: services stopped in a second round, after the rest (as ``LocalCluster.close`` orders them): the others may say
#: goodbye to them as they stop
LAST_TO_STOP = ("dispatcher", "hub")


def stop_together(services, timeout: float = 5.0) -> None:
    """Stop ``services`` (``tensorwire.cluster.Service``) side by side, in two rounds: every one but the dispatcher
    and the hub (:data:`LAST_TO_STOP`, by name prefix), then those. Each round does what ``Service.stop`` does to
    each service, side by side: SIGTERM to each running one, one wait for them all, ``timeout`` from the signals,
    then SIGKILL to any still running. ``Service.stop`` one after another waits for each shutdown in turn (an MPI
    job's takes seconds)."""
    services = list(services)
    last = [s for s in services if s.name.startswith(LAST_TO_STOP)]
    for group in ([s for s in services if s not in last], last):
        for svc in group:
            if svc.proc.poll() is None:
                svc.ended_by_us = True  # (as Service.stop marks it: the exit is ours, not a failure)
                svc.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for svc in group:
            try:
                svc.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                svc.proc.kill()
                svc.proc.wait()
            svc.stop()  # (it exited: closes its output and log)
