"""Helpers for the fault tests: bounded waits, the cluster's buffer counts, leftovers of killed processes."""

from __future__ import annotations

import glob
import os
import threading
import time
from pathlib import Path

import pytest

from tensorwire.protocol.service import SHM_DIR
from tests.conftest import _two_cpus

#: modules of this folder that leave their cluster as they found it (they kill, stop, restart and flood nothing, and
#: close every session they open): they share one cluster, kept apart from the rest of the run's (its work may be slow
#: or cancelled). Every other module here starts its own (``cluster`` in tests/conftest.py, or its own fixture).
SHARED_CLUSTER_MODULES = ("test_slow_work.py", "test_worker_fairness.py", "test_worker_transfer.py")


@pytest.fixture(scope="module")
def cluster(request, shared_clusters):
    """cpu:0 and cpu:1 (and the autograd and collectives services): the folder's shared one for the modules of
    :data:`SHARED_CLUSTER_MODULES` (one found with a service down is replaced, see ``SharedClusters``), else the
    module's own."""
    if Path(str(request.node.path)).name in SHARED_CLUSTER_MODULES:
        yield shared_clusters.get("faults", _two_cpus)
    else:
        with _two_cpus() as c:
            yield c


@pytest.fixture(scope="module")
def session(cluster):
    """The module's default session, as the cluster's admin: the fault tests count every session's buffers."""
    import tensorwire as tw

    s = tw.connect(cluster.address, token=cluster.admin_token)
    assert s.admin
    yield s
    s.close()
    tw.set_session(None)


def wait_until(pred, timeout: float, what: str):
    """Poll ``pred()`` (a cheap query of the cluster) until it is truthy; its value. Bounded by ``timeout``."""
    deadline = time.monotonic() + timeout
    tick = threading.Event()
    for _ in range(1 << 20):
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g}s")
        tick.wait(0.05)
    raise AssertionError(f"{what}: gave up")


def buffers(status: dict, sid: str | None = None) -> int:
    """Live buffers on every worker, of session ``sid`` (its hex id) or of all sessions, from ``cluster_status()``."""
    return sum(
        v["buffers"] for per in status.get("devices", {}).values() for k, v in per.items() if sid is None or k == sid
    )


def shm_of(pid: int, cluster=None) -> list[str]:
    """Shared-memory files a worker process ``pid`` made (named ``tensorwire-<pid>-*``), in the cluster's own
    shared-memory folder (``LocalCluster`` makes one) or the default one."""
    folder = (cluster.env.get("TENSORWIRE_SHM_DIR") if cluster is not None else None) or SHM_DIR
    return glob.glob(os.path.join(folder, f"tensorwire-{pid}-*"))


def rss_mb(pid: int) -> float:
    """Resident memory of process ``pid`` in MiB (Linux /proc)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
