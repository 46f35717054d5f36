"""Issue 37: a client waiting behind work that is still progressing keeps waiting, and when nothing finishes within
the timeout the error says what the worker has been running. The timeout is made short here; the worker's
heartbeat reports each session's finished batches and the one running, and the client's pings read them."""

from __future__ import annotations

import time
import weakref

import numpy as np
import pytest

import tensorwire as tw
import tensorwire.session as session_module

TIMEOUT_S = 2.5


@pytest.fixture
def s(cluster, monkeypatch):
    """A session of its own per test, with a short timeout and pings every 0.2 s."""
    monkeypatch.setattr(session_module, "REQUEST_TIMEOUT_S", TIMEOUT_S)
    monkeypatch.setattr(session_module, "PING_AFTER_S", 0.2)
    sess = tw.Session(cluster.address)
    with tw.use_session(sess):
        yield sess
    sess.close()


def _matmuls(x, n: int):
    """``n`` products of ``x`` by a rotation (600 x 600, made once a session): values that stay of order 1. (Squaring
    ``x``, as this did, drove them to subnormals and then to zeros, whose products run ~10x faster: a batch sized
    from the first ones' time ran 0.7 s where it should have run 7.5.)"""
    q = _ROTATIONS.get(x._s)
    if q is None:
        rotation = np.linalg.qr(np.random.default_rng(0).standard_normal((600, 600)))[0].astype(np.float32)
        q = _ROTATIONS[x._s] = tw.tensor(rotation)
    for _ in range(n):
        x = x @ q
    return x


_ROTATIONS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # session -> its rotation


def _seconds_per_matmul() -> float:
    x = tw.randn(600, 600)
    _matmuls(x, 2).numpy()
    t0 = time.perf_counter()
    _matmuls(x, 10).numpy()
    return (time.perf_counter() - t0) / 10


def test_a_wait_behind_progressing_work_outlasts_the_timeout(s):
    per = _seconds_per_matmul()
    k = max(1, int(0.4 / per))  # a batch of ~0.4 s
    x = tw.randn(600, 600)
    t0 = time.perf_counter()
    x = _matmuls(x, k)
    x.numpy()
    per_batch = time.perf_counter() - t0
    waits = []
    # The work is sized from one batch's time, which a loaded machine (another test run beside this one) can
    # inflate: a wait that came in under the timeout proved nothing, so it runs again with twice the work (bounded)
    for scale in (2, 4, 8):
        for _ in range(int(scale * TIMEOUT_S / per_batch) + 1):  # shipped without waiting: ~scale x the timeout
            x = _matmuls(x, k)
            s.flush()
        t0 = time.monotonic()
        assert np.isfinite(x.numpy()).all()  # waits behind all of it, with no TimeoutError
        waits.append(time.monotonic() - t0)
        if waits[-1] > TIMEOUT_S:
            break
    assert waits[-1] > TIMEOUT_S, waits  # (a wait did outlast the timeout)


def test_a_batch_that_does_not_finish_is_named_in_the_timeout(s):
    per = _seconds_per_matmul()
    x = _matmuls(tw.randn(600, 600), int(3 * TIMEOUT_S / per) + 1)  # one batch, longer than the timeout
    with pytest.raises(TimeoutError) as info:  # (tensorwire's TimeoutError_ is one)
        x.numpy()
    msg = str(info.value)
    assert "no batch of this session finished meanwhile" in msg and "matmul x" in msg, msg
    assert "cpu:0 has been running a batch of" in msg, msg
