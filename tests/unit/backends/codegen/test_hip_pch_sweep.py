"""The clang HIP path keeps its precompiled runtime header (~9 MB) in a folder named after its process; one left by a
process that is gone (killed with SIGKILL, its exit handler never ran) is removed by the next process that builds
one, and a live process's folder is kept (``compiler_hip._sweep_pch_dirs``)."""

from __future__ import annotations

import os
import subprocess
import sys

from tensorwire.backends.codegen import compiler_hip as H


def test_folders_of_gone_processes_are_swept_and_live_ones_kept(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()  # a pid that no process has now
    gone = tmp_path / f"tw-hip-pch-{p.pid}-abc"
    live = tmp_path / f"tw-hip-pch-{os.getppid()}-def"
    mine = tmp_path / f"tw-hip-pch-{os.getpid()}-ghi"
    other = tmp_path / "tw-hip-pch-notapid-jkl"
    for d in (gone, live, mine, other):
        d.mkdir()
        (d / "runtime1.pch").write_bytes(b"x" * 16)
    H._sweep_pch_dirs(str(tmp_path))
    assert not gone.exists()
    assert live.exists() and mine.exists() and other.exists()
