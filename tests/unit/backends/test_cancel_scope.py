"""``backends/jobs.py``'s cancellation: :class:`CancelScope` interrupts the thread running in it, and
:func:`uninterrupted` holds a cancel back until its block ends (a thread started in a scope: CPython 3.11 gives the
new thread's state its creator's ident until it runs, so an interrupt sent then killed the new thread before it had
started, and its creator waited for it forever: a worker hung so in the README's test run of session 39)."""

from __future__ import annotations

import threading
import time

import pytest

from tensorwire.backends import jobs


def _run_in_scope(scope: jobs.CancelScope, body) -> dict:
    """Run ``body()`` in ``scope`` on a thread; returns what happened (``"raised"``: the exception's type name)."""
    out: dict = {}

    def run():
        try:
            with scope:
                body(out)
        except jobs.Interrupt:
            out["raised"] = "Interrupt"

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return out, t


def test_cancel_interrupts_the_scope():
    scope = jobs.CancelScope()
    entered = threading.Event()

    def body(out):
        entered.set()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # (bounded: the interrupt ends it at the next bytecode)
            pass
        out["finished"] = True

    out, t = _run_in_scope(scope, body)
    assert entered.wait(10)
    scope.cancel()
    t.join(10)
    assert not t.is_alive() and out == {"raised": "Interrupt"}


def test_uninterrupted_defers_a_cancel_to_its_end(monkeypatch):
    """A cancel while the block runs sends nothing (no async exception is set while shielded); the block finishes,
    and Interrupt is raised at its end."""
    sent = []
    real = jobs._set_async_exc
    monkeypatch.setattr(jobs, "_set_async_exc", lambda ident, exc: sent.append(exc) or real(ident, exc))
    scope = jobs.CancelScope()
    inside, cancelled = threading.Event(), threading.Event()

    def body(out):
        with jobs.uninterrupted():
            inside.set()
            assert cancelled.wait(10)
            time.sleep(0.05)  # (Python steps after the cancel: an async exception would have arrived here)
            out["block done"] = True
        out["after block"] = True

    out, t = _run_in_scope(scope, body)
    assert inside.wait(10)
    scope.cancel()
    cancelled.set()
    t.join(10)
    assert out == {"block done": True, "raised": "Interrupt"}
    assert jobs.Interrupt not in sent


def test_uninterrupted_outside_a_scope_does_nothing():
    with jobs.uninterrupted():
        x = 1
    assert x == 1


@pytest.mark.parametrize("rounds", [300])
def test_threads_started_uninterrupted_survive_cancels(rounds):
    """Cancel a scope while it starts a thread, many times over: every started thread runs and is joined (before
    the fix, an interrupt could kill the new thread before it started and hang ``Thread.start``)."""
    for _ in range(rounds):
        scope = jobs.CancelScope()

        def body(out):
            with jobs.uninterrupted():
                child = threading.Thread(target=lambda: None, daemon=True)
                child.start()
            child.join(10)
            out["child"] = child

        out, t = _run_in_scope(scope, body)
        scope.cancel()
        t.join(10)
        assert not t.is_alive(), "a thread started in a cancelled scope hung"
        child = out.get("child")
        if child is not None:
            assert not child.is_alive()
