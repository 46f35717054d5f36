"""Helpers the tests share: polling for a condition, and the processes and key folders they make."""

from __future__ import annotations

import os
import select
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
