"""The command line: `tensorwire up` prints its address, serves, and stops cleanly on Ctrl-C; `status` reports."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time

import numpy as np

import tensorwire as tw
from tensorwire.protocol.service import free_port
from tests._liveness import FAST_HEARTBEAT
from tests._processes import stderr_until


def _read_until(proc, needle: str, timeout: float = 120.0, stream=None) -> str:
    stream = proc.stdout if stream is None else stream
    sel = selectors.DefaultSelector()
    sel.register(stream, selectors.EVENT_READ)
    out = ""
    deadline = time.monotonic() + timeout
    while needle not in out and time.monotonic() < deadline:
        if sel.select(timeout=deadline - time.monotonic()):
            chunk = os.read(stream.fileno(), 4096).decode()
            if not chunk:
                break
            out += chunk
    sel.close()
    return out


def _run_all(commands: list[list[str]], timeout: float = 60) -> list[subprocess.CompletedProcess]:
    """Run ``commands`` side by side; each one's completed process (text output), in order."""
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in commands]
    done = []
    try:
        for c, p in zip(commands, procs):
            out, err = p.communicate(timeout=timeout)
            done.append(subprocess.CompletedProcess(c, p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return done


def test_up_status_and_ctrl_c():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tensorwire.cli", "up", "--devices", "cpu:0,cpu:1", "--port",
                             str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        out = _read_until(proc, "Ctrl-C")
        address = f"tcp://127.0.0.1:{port}"
        assert address in out, out
        s = tw.Session(address)
        with tw.use_session(s):
            x = tw.arange(4.0, device="cpu:1")
            np.testing.assert_array_equal((x * 2).numpy(), [0, 2, 4, 6])
            keep = x  # noqa: F841 - holds one buffer on cpu:1 for status to show
            # another session's buffers show only with the admin token, which `up` wrote to a file of its own
            admin_file = out.split("--admin-token-file ", 1)[1].split()[0]
            status = [sys.executable, "-m", "tensorwire.cli", "status", "--address", address]
            # the three asks at once (each is a Python start): plain, --json, --json with the admin token
            admin = [*status, "--json", "--admin-token-file", admin_file]
            st, plain, js = _run_all([status, [*status, "--json"], admin])
            assert st.returncode == 0, st.stderr
            assert "cpu:0" in st.stdout and "cpu:1" in st.stdout and "autograd" in st.stdout
            assert os.stat(admin_file).st_mode & 0o077 == 0  # readable by its owner only
            assert plain.returncode == 0 and s.session_id not in plain.stdout, plain.stderr
            mine = json.loads(js.stdout)["devices"]["cpu:1"][s.session_id]
            assert mine["buffers"] >= 1 and mine["bytes"] >= 32
        s.close()
        proc.send_signal(signal.SIGINT)
        rest = proc.communicate(timeout=60)[0].decode()
        assert proc.returncode == 0, rest
        assert "stopped" in rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # everything it started is gone: the port is free again
    s2 = None
    try:
        s2 = tw.Session(f"tcp://127.0.0.1:{port}", timeout=1.0)
        raise AssertionError("the dispatcher is still up")
    except tw.ConnectionFailed:
        pass
    finally:
        if s2 is not None:
            s2.close()


def test_status_unreachable_is_clear():
    r = subprocess.run([sys.executable, "-m", "tensorwire.cli", "status", "--address", "tcp://127.0.0.1:1",
                        "--timeout", "1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "ConnectionFailed" in r.stderr and "127.0.0.1:1" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_worker_without_its_dispatcher_says_so():
    """Issue 36, finding 3: a worker that cannot reach its dispatcher (a dead port, or CURVE keys missing) says what
    it waits for at the default log level, instead of waiting in silence."""

    port = free_port()  # nobody listens there
    p = subprocess.Popen([sys.executable, "-m", "tensorwire.cli", "worker", "--device", "cpu:0", "--dispatcher",
                          f"tcp://127.0.0.1:{port}"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                         env={**os.environ, **FAST_HEARTBEAT})  # (it says so after one liveness period: 2.5 s)
    try:
        text = stderr_until(p, b"no answer from the dispatcher", 60)
        assert f"no answer from the dispatcher at tcp://127.0.0.1:{port} after" in text, text
        assert "Is it running there? A dispatcher with CURVE keys needs --keys here too." in text, text
    finally:
        p.kill()
        p.wait()


def test_up_piped_into_a_reader_that_ctrl_c_also_stopped_exits_0():
    """Issue 36, finding 10: ``tensorwire up | tee log`` and Ctrl-C: the signal stops tee too, so the farewell line
    meets a closed pipe. The cluster still stops cleanly and the exit status is 0."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tensorwire.cli", "up", "--devices", "cpu:0", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert f"tcp://127.0.0.1:{port}" in _read_until(proc, "Ctrl-C")
        proc.stdout.close()  # the reader (tee) is gone
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
        err = _read_until(proc, "\0", timeout=5.0, stream=proc.stderr)  # what it wrote before it exited
        assert code == 0 and "Traceback" not in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
