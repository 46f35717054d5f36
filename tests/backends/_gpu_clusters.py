"""The clusters the GPU backends' tests start (test_cuda.py, test_rocm.py), as module fixtures: one whose GPU worker
runs the backend on its API stand-in, and a session on one with this host's real GPU."""

from __future__ import annotations

import sys

import pytest


def standin_worker(standin: str, device: str, dispatcher: str, *extra: str) -> list[str]:
    """The command of a one-thread ``device`` worker that runs its backend on the stand-in script ``standin``."""
    return [sys.executable, standin, "worker", "--device", device, "--dispatcher", dispatcher, "--threads", "1", *extra]


def standin_cluster(standin: str, device: str, skip: str | None, **settings):
    """A module fixture: cpu:0 (``settings`` for ``LocalCluster``) and a ``device`` worker on the stand-in
    ``standin``, with no session quota (an out-of-memory test reaches the device's own limit, the stand-in's 1 GiB);
    skipped with the reason ``skip`` when that is given."""

    @pytest.fixture(scope="module")
    def cluster():
        import tensorwire as tw

        if skip:
            pytest.skip(skip)
        with tw.LocalCluster(devices=["cpu:0"], collectives=False, **settings) as c:
            c.start_service(device, standin_worker(standin, device, c.service_address, "--session-memory", "none"))
            yield c
    return cluster


def gpu_session(device: str, skip: str | None, **settings):
    """A module fixture: a session on a local cluster of cpu:0 and this host's real ``device`` (``settings`` for
    ``LocalCluster``); skipped with the reason ``skip`` when that is given (no such GPU here)."""

    @pytest.fixture(scope="module")
    def session():
        import tensorwire as tw

        if skip:
            pytest.skip(skip)
        with tw.LocalCluster(devices=["cpu:0", device], collectives=False, **settings) as c:
            s = tw.connect(c.address)
            yield s
            s.close()
            tw.set_session(None)
    return session
