"""What the GPU backends' tests (test_cuda.py, test_rocm.py) share: this host's real GPU and the marks taken from it
(:class:`HostGPU`), the child process that runs the backend on its API stand-in (:data:`CHILD`), and the clusters they
start, as module fixtures: one whose GPU worker runs the backend on its stand-in, and a session on one with this
host's real GPU."""

from __future__ import annotations

import os
import sys

import pytest

#: the folder of the backend tests, where the stand-ins are
HERE = os.path.dirname(os.path.abspath(__file__))
#: the child process that runs a GPU backend on its stand-in (``_gpu_child.py BACKEND COMMAND ...``)
CHILD = os.path.join(HERE, "_gpu_child.py")


class HostGPU:
    """Device 0 of a GPU backend on this host (discovery for real: a GPU, or the reason there is none) and the marks
    its tests take from it."""

    def __init__(self, backend, vendor: str, has_gpu: str):
        #: discovery's record of the device
        self.found = backend.devices()[0]
        available = self.found.available
        #: why a test of the real GPU cannot run here (None where it can)
        self.no_gpu = None if available else f"no usable {vendor} GPU here: {self.found.reason}"
        #: why a test of the path without a GPU cannot run here (``has_gpu`` where there is one, else None)
        self.has_gpu = has_gpu if available else None
        self.needs_gpu = pytest.mark.skipif(not available, reason=str(self.no_gpu))
        self.needs_no_gpu = pytest.mark.skipif(available, reason=str(self.has_gpu))


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
