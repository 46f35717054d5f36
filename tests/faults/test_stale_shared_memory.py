"""Issue 36, finding 9: a worker restarted by something other than ``LocalCluster`` (Docker's or Kubernetes'
restart policy) finds the shared-memory files its crashed predecessor left, and removes them; nothing else goes."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

import tensorwire as tw
from tensorwire.backends.shm import sweep_stale


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _plant(folder, pid: int, tag: str, n: int = 0) -> str:
    path = os.path.join(folder, f"tensorwire-{pid}-{tag}-{n}")
    with open(path, "wb") as f:
        f.write(b"\0" * 4096)
    return path


def test_the_sweep_removes_only_a_dead_or_earlier_self_of_this_device(tmp_path):
    dead = _dead_pid()
    stale = [_plant(tmp_path, dead, "cpu-0"), _plant(tmp_path, dead, "cpu-0", 7),
             _plant(tmp_path, os.getpid(), "cpu-0", 2)]  # same pid as a crashed predecessor (a restarted container)
    kept = [_plant(tmp_path, os.getppid(), "cpu-0"),  # a live process's
            _plant(tmp_path, dead, "cpu-1"),  # another device's
            _plant(tmp_path, dead, "cpu-0-io"),  # another pool's (the direct channel's files)
            _plant(tmp_path, dead, "cpu-10")]  # a device whose name starts alike
    os.symlink(stale[0] + ".target", os.path.join(tmp_path, f"tensorwire-{dead}-cpu-0-9"))  # a link: not a file
    removed = sweep_stale("cpu:0", str(tmp_path))
    assert sorted(removed) == sorted(stale)
    assert all(os.path.exists(p) for p in kept)
    assert os.path.islink(os.path.join(tmp_path, f"tensorwire-{dead}-cpu-0-9"))


def test_a_restarted_worker_sweeps_what_its_crashed_predecessor_left():
    with tw.LocalCluster(devices=["cpu:0"], autograd=False, collectives=False) as c:
        folder = c.env["TENSORWIRE_SHM_DIR"]
        left = _plant(folder, _dead_pid(), "cpu-0", 3)  # as a worker killed before it could clean up leaves them
        c.restart("cpu:0")
        assert not os.path.exists(left)
        s = tw.Session(c.address)
        try:
            np.testing.assert_array_equal((tw.arange(3.0, session=s) + 1).numpy(), [1, 2, 3])
        finally:
            s.close()


def test_a_worker_given_a_bad_dispatcher_address_says_so_before_it_takes_anything(tmp_path):
    # (the address is checked before the worker makes its shared-memory pools, whose first act is the sweep: a
    # predecessor's files are not this run's business, and the error stays the one line it is)
    left = _plant(tmp_path, _dead_pid(), "cpu-0-io")
    env = {**os.environ, "TENSORWIRE_SHM_DIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "tensorwire.cli", "worker", "--device", "cpu:0", "--dispatcher",
                        "localhost:5556"], capture_output=True, text=True, env=env, timeout=60)
    lines = r.stderr.strip().splitlines()
    assert r.returncode != 0 and len(lines) == 1 and "ConfigurationError" in lines[0], r.stderr
    assert os.path.exists(left)
