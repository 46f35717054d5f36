"""``client/channels.RelayWindow``: the bound on a session's relayed batches that no answer has covered (the counting;
the waits themselves, with a stopped worker, are in ``tests/faults/test_relay_backlog.py``)."""

from __future__ import annotations

from tensorwire.channels import RELAY_MARKS, RelayWindow


def _send(w: RelayWindow, q: int, nbytes: int = 0) -> bool:
    """One relayed batch as ``Session._post`` sends it: a mark (numbered ``q``) when the window says so."""
    mark = w.send(nbytes)
    if mark:
        w.marked(q)
    return mark


def test_a_mark_every_quarter_of_the_window_and_full_at_the_bound():
    w = RelayWindow(max_batches=16, max_bytes=1 << 30)
    marks = [q for q in range(1, 17) if _send(w, q)]
    assert marks == list(range(1, 17, 16 // RELAY_MARKS))  # the first batch, then every 4th
    assert w.unanswered == 16 and w.full() and w.oldest() == 1 and w.peak == 16


def test_an_answer_covers_its_mark_and_every_batch_before_it():
    w = RelayWindow(max_batches=16, max_bytes=1 << 30)
    for q in range(1, 17):
        _send(w, q)
    w.answered(9)  # (the third mark: the two before it are covered too)
    assert w.unanswered == 7 and not w.full() and list(w.marks) == [13]
    w.answered(5)  # (an older mark answered late, or already covered: no change)
    assert w.unanswered == 7 and list(w.marks) == [13]
    w.answered(13)
    assert w.unanswered == 3 and not w.marks and not w.full()


def test_bytes_bound_and_one_batch_always_goes():
    w = RelayWindow(max_batches=1000, max_bytes=8 << 20)
    assert _send(w, 1, 64 << 20)  # (larger than the window: it goes, as a mark)
    assert w.full()  # ... and the next waits for its answer
    w.answered(1)
    assert not w.full() and w.unanswered == 0
    for q in range(2, 10):
        _send(w, q, 1 << 20)
    assert w.full() and w.sent_bytes - w.done_bytes == 8 << 20
    assert list(w.marks) == [3, 5, 7, 9]  # (a mark every 2 MiB after the last one)


def test_never_full_without_a_mark_to_wait_for():
    """Batches that no mark covers (the marks' answers came while other answers were awaited, or were lost to an
    interrupted wait) never make the session wait for an answer that will not come."""
    w = RelayWindow(max_batches=4, max_bytes=1 << 30)
    for _ in range(10):
        w.send(0)  # (counted, never marked)
    assert w.unanswered == 10 and not w.full()
