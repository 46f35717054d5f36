"""Issue 15, finding 4 (CLI): ``tensorwire up`` never prints the hub's write token; it writes it to a 0600 file."""

from __future__ import annotations

import os
import re
import selectors
import signal
import stat
import subprocess
import sys
import time

from tensorwire import hub as twhub

START_S = 120.0


def test_up_prints_the_token_file_not_the_token(tmp_path):
    log_dir = tmp_path / "cluster"
    cmd = [
        sys.executable,
        "-m",
        "tensorwire.cli",
        "up",
        "--devices",
        "cpu:0",
        "--port",
        "0",
        "--hub-root",
        str(tmp_path / "hub"),
        "--hub-port",
        "0",  # (the default, 8700, may be taken on a shared machine)
        "--log-dir",
        str(log_dir),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = b""
    try:
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + START_S
        while b"logs:" not in out and time.monotonic() < deadline:  # wait for the banner, never sleep-poll
            if not sel.select(timeout=deadline - time.monotonic()):
                break
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            out += chunk
        sel.close()
        text = out.decode()
        assert "logs:" in text, (text, proc.stderr.read1(65536) if proc.poll() is not None else b"")
        m = re.search(r"hub: (\S+)\s+write token in: (\S+)", text)
        assert m, text
        url, path = m.group(1), m.group(2)
        token = open(path).read().strip()
        assert token.startswith("tw_") and token not in text  # the path is printed, never the token
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert len(twhub.push_files("acme/up", {"a.txt": b"1"}, endpoint=url, token=token)) == 40
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            rest, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            rest, err = proc.communicate()
    assert b"tw_" not in out + rest + err
