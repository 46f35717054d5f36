"""Issue 15, finding 4 (MPI): the collectives' launcher and ranks listen on loopback only (checked with ``ss``).

During the test the MPI job is alive (it serves collectives until the cluster stops); every TCP socket that any
process of the job listens on must be bound to 127.0.0.1 or ::1.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

import tensorwire as tw
from tensorwire.session import Session

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None, reason="mpi4py/mpich not installed"),
    pytest.mark.skipif(shutil.which("ss") is None, reason="needs iproute2's ss"),
]


def _descendants(root: int) -> set[int]:
    """``root`` and every process below it, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = set(), [root]
    while todo:  # bounded: each pid is visited once
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo.extend(children.get(pid, ()))
    return out


def _listeners(pids: set[int]) -> list[str]:
    """Local addresses of the TCP and UDP sockets these processes listen on."""
    found = []
    for flags in ("-ltnpH", "-lunpH"):
        out = subprocess.run(["ss", flags], capture_output=True, text=True, timeout=30).stdout
        for line in out.splitlines():
            owners = {int(p) for p in re.findall(r"pid=(\d+)", line)}
            if owners & pids:
                found.append(line.split()[3])
    return found


def test_mpi_job_listens_on_loopback_only():
    with tw.LocalCluster(devices=["cpu:0", "cpu:1"], autograd=False, collectives=True) as c:
        s = Session(c.address)
        try:
            with tw.use_session(s):
                xs = [tw.ones(4, device=d) for d in ("cpu:0", "cpu:1")]
                tw.distributed.all_reduce(xs)
                np.testing.assert_array_equal(xs[1].numpy(), np.full(4, 2.0, np.float32))
            pids = _descendants(c.services["collectives"].proc.pid)
            assert len(pids) >= 3  # the launcher and two ranks
            addrs = _listeners(pids)
            bad = [a for a in addrs if not (a.startswith("127.") or a.startswith("[::1]"))]
            assert not bad, f"MPI sockets listen beyond loopback: {bad} (all: {addrs})"
        finally:
            s.close()
