"""The worker's job pool (backends/jobs.py): the thread idle last takes the next task, a task submitted while every
thread is busy waits for one, and closing ends the threads."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from tensorwire.backends.jobs import OFFLOAD_WORK, Pool, plan_work, reads_output_only

TIMEOUT = 30


def _run(pool: Pool, fn) -> None:
    done = threading.Event()

    def task():
        try:
            fn()
        finally:
            done.set()

    pool.submit(task)
    assert done.wait(TIMEOUT)


def test_one_task_at_a_time_runs_on_one_thread():
    """Tasks one after another all run on the same thread (its OpenMP team stays placed on the cores)."""
    pool = Pool(4)
    seen = []
    try:
        for _ in range(20):
            _run(pool, lambda: seen.append(threading.get_ident()))
        assert len(set(seen)) == 1 and len(pool.threads) == 1
    finally:
        pool.close()


def test_the_thread_idle_last_takes_the_next_task():
    """With two threads started, the one that finished last runs the next task."""
    pool = Pool(2)
    try:
        gate, first_in = threading.Event(), threading.Event()
        idents = {}

        def slow():
            idents["slow"] = threading.get_ident()
            first_in.set()
            assert gate.wait(TIMEOUT)

        done_slow = threading.Event()
        pool.submit(lambda: (slow(), done_slow.set()))
        assert first_in.wait(TIMEOUT)
        _run(pool, lambda: idents.__setitem__("fast", threading.get_ident()))  # a second thread: the first is busy
        assert idents["fast"] != idents["slow"]
        gate.set()
        assert done_slow.wait(TIMEOUT)
        for _ in range(50):  # the slow task's thread goes idle right after done_slow is set
            with pool._lock:
                if len(pool._idle) == 2:
                    break
            threading.Event().wait(0.01)
        _run(pool, lambda: idents.__setitem__("next", threading.get_ident()))
        assert idents["next"] == idents["slow"]
    finally:
        pool.close()


def test_tasks_beyond_the_pool_size_wait_for_a_thread():
    pool = Pool(2)
    try:
        gate = threading.Event()
        started = threading.Semaphore(0)
        order, finished = [], threading.Semaphore(0)

        def blocker():
            started.release()
            assert gate.wait(TIMEOUT)
            finished.release()

        pool.submit(blocker)
        pool.submit(blocker)
        assert started.acquire(timeout=TIMEOUT) and started.acquire(timeout=TIMEOUT)
        for i in range(5):
            pool.submit(lambda i=i: (order.append(i), finished.release()))
        assert order == []  # both threads are busy: the five wait
        gate.set()
        for _ in range(7):
            assert finished.acquire(timeout=TIMEOUT)
        assert len(pool.threads) == 2
        assert sorted(order) == list(range(5))
    finally:
        pool.close()


def test_a_failing_task_does_not_end_its_thread():
    pool = Pool(1)
    try:
        def boom():
            raise RuntimeError("boom")

        pool.submit(boom)
        out = []
        _run(pool, lambda: out.append(1))
        assert out == [1] and len(pool.threads) == 1
    finally:
        pool.close()


def test_close_ends_the_threads():
    pool = Pool(3)
    for _ in range(3):
        _run(pool, lambda: None)
    pool.close()
    for t in pool.threads:
        t.join(TIMEOUT)
        assert not t.is_alive()


def _step(op: str, shape: tuple, *ins: tuple):
    from tensorwire.protocol import dtypes as D

    return SimpleNamespace(op=op, shape=shape, in_meta=tuple((s, D.float32) for s in ins))


def test_plan_work_counts_what_a_gather_or_a_view_reads_not_its_whole_source():
    """A loader's windows of a large text (an ``index`` of 256 rows by a 256-element index, a slice of it) touch what
    they output and their indices: a million-element source does not make the batch large work (which would send
    it to a pool thread, a thread hand-off in every round trip); a reduction or an elementwise op reads its inputs
    whole."""
    text = (1 << 22,)
    assert plan_work([_step("index", (256,), text, (256,))]) == 256 + 64
    assert plan_work([_step("gather", (4, 8), text, (4, 8))]) == 32 + 64
    assert plan_work([_step("slice", (8,), text)]) == 8 + 64
    assert plan_work([_step("sum", (), text)]) == (1 << 22) + 64
    assert plan_work([_step("add", text, text, ())]) == (1 << 22) + 64
    assert plan_work([_step("index_put", text, text, (4,), (4,))]) == (1 << 22) + 64  # (a copy of its input)
    assert plan_work([_step("matmul", (64, 64), (64, 32), (32, 64))]) == 64 * 64 * 32 + 64
    assert reads_output_only("reshape") and reads_output_only("index") and not reads_output_only("scatter")
    assert plan_work([_step("index", (256,), text, (256,))]) < OFFLOAD_WORK <= plan_work([_step("sum", (), text)])
