"""Issue 36, finding 1: Ctrl-C in a terminal reaches the user's program only. The services an embedded cluster starts
run in a session of their own, so the terminal's SIGINT (sent to its foreground process group) does not stop them:
the interrupted wait is cancelled, the session and the tensors made before stay, and the next op runs. Done as a
user would: a program on a pseudo-terminal, and a Ctrl-C typed into it."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

PROGRAM = r"""
import numpy as np
import tensorwire as tw
s = tw.connect()  # the embedded local cluster
kept = tw.tensor(np.arange(4.0))
kept.sum().item()  # made before the interrupted batch (that batch's own outputs fail with Cancelled, as documented)
for attempt in range(5):  # (a Ctrl-C that lands after the batch finished is typed again at the next one)
    x = tw.randn(500, 500)
    for _ in range(2000):  # a long batch (seconds)
        x = (x @ x) * 0.002
    try:  # (a Ctrl-C typed while this prints interrupts the print: inside the try too)
        print("waiting", attempt, flush=True)
        x.numpy()
        print("finished before the interrupt", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        break
print("after:", kept.sum().item(), (tw.ones(3) * 2).sum().item(), flush=True)
s.close()
"""


def _read_until(fd: int, marker: bytes | tuple, deadline: float) -> bytes:
    markers = marker if isinstance(marker, tuple) else (marker,)
    out = b""
    while not any(m in out for m in markers) and time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not r:
            break
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the program exited and the pty closed
            break
        if not chunk:
            break
        out += chunk
    return out


def _until_waiting_in_poll(pid: int, deadline: float) -> None:
    """Return once the program's main thread sleeps in poll(2), its wait for the answer (past the client's short
    spin), or at ``deadline``. A Ctrl-C typed right after "waiting" is printed, on a loaded machine, could land
    before ``x.numpy()`` shipped the batch: it then stops nothing, and the long batch, still pending, runs with the
    next op (the test's wait for "after:" timed out that way in a loaded run). A bounded poll of /proc, never a
    sleep: it proves the Ctrl-C lands where the test says it does."""
    wchan = Path(f"/proc/{pid}/task/{pid}/wchan")
    tick = threading.Event()
    for _ in range(1 << 20):  # bounded by the deadline
        try:
            if "poll" in wchan.read_text() or time.monotonic() > deadline:
                return
        except OSError:  # the program exited: what it printed says why
            return
        tick.wait(0.005)


def _as_a_terminal_program() -> None:
    """In the child: the pty becomes its controlling terminal, and SIGINT has its default action (a test run that
    was started in the background of a non-interactive shell inherits SIGINT ignored, and Python then installs no
    KeyboardInterrupt handler)."""
    import fcntl
    import signal
    import termios

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def test_ctrl_c_in_a_terminal_cancels_the_wait_and_keeps_the_cluster():
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM], stdin=slave, stdout=slave, stderr=slave,
                            start_new_session=True,  # the pty is its controlling terminal, as a shell's would be
                            preexec_fn=_as_a_terminal_program)
    os.close(slave)
    try:
        out = b""
        deadline = time.monotonic() + 240
        for attempt in range(5):
            out += _read_until(master, f"waiting {attempt}".encode(), deadline)
            assert f"waiting {attempt}".encode() in out, out.decode(errors="replace")
            _until_waiting_in_poll(proc.pid, time.monotonic() + 60)
            os.write(master, b"\x03")  # Ctrl-C, typed: the terminal sends SIGINT to its foreground process group
            out += _read_until(master, (b"interrupted", b"finished before"), time.monotonic() + 60)
            if b"interrupted" in out:
                out += _read_until(master, b"after:", time.monotonic() + 60)
                break
        out += _read_until(master, b"\n", time.monotonic() + 5)
        text = out.decode(errors="replace")
        assert "interrupted" in text and "after: 6.0 6.0" in text, text
        assert proc.wait(60) == 0, text
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
