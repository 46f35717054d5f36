"""Work relayed to a worker that is behind is never lost: the dispatcher's ROUTER dropped messages to a worker past
its send high-water mark (libzmq's default, 1000 messages) without a word, so a worker whose main thread fell that
far behind (a session's long queue of small relayed batches on a loaded host) never saw some batches, and the next
batch that read their outputs failed with ``NotFound`` (the flaky ``test_direct_late_hello.py`` busy test). The
dispatcher's socket for services now has no send high-water mark (``dispatcher/answers.py``, "Messages").

Stopping the worker (SIGSTOP, well inside its liveness bound) makes "behind" deterministic: nothing of the backlog
is read until it continues.
"""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

import tensorwire as tw

#: relayed batches queued while the worker is stopped: past the ~1000 messages a ROUTER held for it before dropping
BACKLOG = 1500


@pytest.fixture(scope="module")
def cluster():
    with tw.LocalCluster(devices=["cpu:0"], autograd=False, collectives=False) as c:
        yield c


def test_batches_relayed_to_a_stopped_worker_all_run_once_it_continues(cluster):
    s = tw.Session(cluster.address)
    try:
        s._plane.enabled = False  # (as TENSORWIRE_DIRECT=0 for this session: every batch through the dispatcher)
        y = s.const(np.zeros(4, np.float32), "cpu:0")
        np.testing.assert_array_equal(y.numpy(), np.zeros(4))
        pid = cluster.services["cpu:0"].proc.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            for _ in range(BACKLOG):
                y = y + 1
                s.flush()
            s.devices()  # answered by the dispatcher after it read (and sent on) every batch before it
        finally:
            os.kill(pid, signal.SIGCONT)
        np.testing.assert_array_equal(y.numpy(), np.full(4, BACKLOG, np.float32))
    finally:
        s.close()
