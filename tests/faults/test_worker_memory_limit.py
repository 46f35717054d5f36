"""Issue 34, finding 9: a CPU worker's memory figure honours the limits it runs under, not only the host's RAM.

A worker in a container (compose.yaml, Kubernetes) may use what its cgroup's ``memory.max`` allows; one started under
``ulimit -v`` what its ``RLIMIT_AS`` leaves. Its per-session share (50% by default) was computed from the host's
physical memory, so under a 3 GiB limit one session could take all of it and the next session's 256 MiB failed with
``OutOfMemory``. The cluster test runs a real worker under an address-space limit; the cgroup tests read fake
``/proc`` and ``/sys`` trees through the same function the worker calls.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tensorwire as tw
from tensorwire.backends import quota
from tensorwire.backends.cpu import NumpyBackend
from tensorwire.cluster import Service

MIB = 1 << 20
GIB = 1 << 30
#: the worker's address-space limit: it maps ~0.25 GiB before it computes its memory figure, ~0.7 GiB once its
#: threads run (code, libraries, stacks, malloc arenas), so a session's 50% share leaves the next one ~0.4 GiB
AS_LIMIT = 2 * GIB
CHUNK = 256 * MIB
START_S = 60.0
#: runs the rest of argv as a Python program under RLIMIT_AS = argv[1] (what ``ulimit -v`` / ``prlimit --as`` do)
UNDER_RLIMIT = ("import os, resource, sys; n = int(sys.argv[1]); resource.setrlimit(resource.RLIMIT_AS, (n, n)); "
                "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])")


# ------------------------------------------------------------------ a real worker under RLIMIT_AS

@pytest.fixture(scope="module")
def limited():
    """A cluster whose only worker (cpu:0) runs under a 2 GiB RLIMIT_AS, started the way LocalCluster starts one."""
    with tw.LocalCluster(devices=[], autograd=False, collectives=False) as c:
        argv = [sys.executable, "-c", UNDER_RLIMIT, str(AS_LIMIT), "-m", "tensorwire.cli", "worker", "--device",
                "cpu:0", "--dispatcher", c.service_address, "--threads", "1", "--direct-address", "none"]
        env = {k: v for k, v in c.env.items() if k not in (quota.ENV, quota.MEMORY_ENV)}
        svc = Service("cpu:0", argv, Path(c.log_dir) / "cpu-0-limited.log", env)
        try:
            svc.wait_ready(time.monotonic() + START_S)
            yield c
        finally:
            svc.proc.terminate()
            try:
                svc.proc.wait(10)
            except Exception:  # noqa: BLE001 - it must not outlive the test
                svc.proc.kill()
                svc.proc.wait(10)


def _grab_until_refused(s: tw.Session) -> tuple[list, Exception]:
    """What a greedy session does: allocate 256 MiB chunks on cpu:0 until the worker says no (bounded)."""
    held = []
    for _ in range(4 * AS_LIMIT // CHUNK):
        t = tw.ones(CHUNK // 4, device="cpu:0", session=s)
        try:
            t.sum().item()
        except tw.OutOfMemory as e:
            return held, e
        held.append(t)
    raise AssertionError(f"a session held {len(held) * CHUNK // MIB} MiB under a {AS_LIMIT // MIB} MiB limit")


def test_a_greedy_session_leaves_the_next_one_its_share_under_an_address_space_limit(limited):
    greedy = tw.Session(limited.address)
    other = tw.Session(limited.address)
    try:
        held, err = _grab_until_refused(greedy)
        # refused by its quota, not by the process running out of address space
        assert type(err) is tw.QuotaExceeded, f"{type(err).__name__}: {err}"
        assert len(held) * CHUNK <= AS_LIMIT // 2, len(held)
        # the next session's small allocation is served while the first still holds its share
        small = tw.ones(256 * MIB // 4, device="cpu:0", session=other)
        assert small.sum().item() == 256 * MIB // 4
        # what the worker reports is the limited figure, and the share is half of it
        st = other.cluster_status()
        w = next(w for w in st["workers"] if w["device"] == "cpu:0")
        assert 0 < w["memory_bytes"] <= AS_LIMIT, w
        limit = st["load"]["cpu:0"]["session_limit"]
        assert limit == w["memory_bytes"] // 2, (limit, w["memory_bytes"])
        assert f"of its {quota.fmt_bytes(limit)} limit" in str(err), str(err)
        del held, small
    finally:
        greedy.close()
        other.close()
        tw.set_session(None)


# ------------------------------------------------------------------ the figure, from fake /proc and /sys trees

def _tree(root: Path, cgroup: str, files: dict[str, str]) -> str:
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/cgroup").write_text(cgroup)
    for rel, text in files.items():
        p = root / "sys/fs/cgroup" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text + "\n")
    return str(root)


def test_a_v2_container_limit_set_above_the_process_cgroup_binds_it(tmp_path):
    """A Kubernetes pod: the limit is on the pod's cgroup, the worker runs in a container cgroup below it."""
    root = _tree(tmp_path, "0::/kubepods/pod1/ctr\n", {
        "kubepods/pod1/ctr/memory.max": "max",
        "kubepods/pod1/memory.max": str(3 * GIB),
        "kubepods/memory.max": str(64 * GIB),
    })
    assert quota.cgroup_memory_limit(root) == 3 * GIB


def test_a_v2_cgroup_namespace_shows_the_containers_limit_at_the_top(tmp_path):
    """docker/compose with a cgroup namespace: /proc/self/cgroup says ``0::/``, the limit is at the mount's top."""
    assert quota.cgroup_memory_limit(_tree(tmp_path, "0::/\n", {"memory.max": str(3 * GIB)})) == 3 * GIB


def test_max_means_no_limit(tmp_path):
    assert quota.cgroup_memory_limit(_tree(tmp_path, "0::/a\n", {"a/memory.max": "max", "memory.max": "max"})) is None


def test_a_v1_memory_controller_limit_is_read_and_its_unlimited_value_is_none(tmp_path):
    """cgroup v1 (and hybrid: v2 mounted at .../unified); the container's path is not under the mount (no cgroup
    namespace), the mount's top is the container's cgroup."""
    cg = "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/docker/abc\n"
    root = _tree(tmp_path / "a", cg, {"memory/memory.limit_in_bytes": str(2 * GIB)})
    assert quota.cgroup_memory_limit(root) == 2 * GIB
    root = _tree(tmp_path / "b", cg, {"memory/memory.limit_in_bytes": "9223372036854771712",
                                      "unified/docker/abc/memory.max": "max"})
    assert quota.cgroup_memory_limit(root) is None
    root = _tree(tmp_path / "c", cg, {"memory/docker/abc/memory.limit_in_bytes": str(5 * GIB),
                                      "unified/docker/abc/memory.max": str(4 * GIB)})
    assert quota.cgroup_memory_limit(root) == 4 * GIB


def test_no_cgroup_files_is_no_limit(tmp_path):
    assert quota.cgroup_memory_limit(str(tmp_path)) is None
    assert quota.cgroup_memory_limit(_tree(tmp_path / "x", "garbage\n1:cpu:/\n", {})) is None


def test_the_override_states_the_figure_and_a_bad_one_is_refused(monkeypatch):
    monkeypatch.setenv(quota.MEMORY_ENV, "3GiB")
    assert quota.host_memory() == 3 * GIB
    assert NumpyBackend().devices()[0].memory_bytes == 3 * GIB  # what the worker reports and shares out
    monkeypatch.setenv(quota.MEMORY_ENV, "none")
    with pytest.raises(ValueError, match=quota.MEMORY_ENV):
        quota.host_memory()
    monkeypatch.delenv(quota.MEMORY_ENV)
    assert quota.host_memory() <= quota.physical_memory()


def test_the_rlimit_figure_is_what_the_limit_leaves():
    """In a child under RLIMIT_AS: the figure is the limit less what the process has mapped, and host_memory() is
    no more than it."""
    code = ("import resource; from tensorwire.backends import quota as q; "
            f"resource.setrlimit(resource.RLIMIT_AS, ({AS_LIMIT}, {AS_LIMIT})); "
            "r = q.rlimit_memory(); print(r, q.host_memory(), q._address_space_used())")
    env = {k: v for k, v in os.environ.items() if k != quota.MEMORY_ENV}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    r, host, used = map(int, out.stdout.split())
    assert 0 < used < AS_LIMIT and r == AS_LIMIT - used and host <= r
    if resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY:
        assert quota.rlimit_memory() is None
