"""A fetch takes the 0-d results not read yet along (``Session._take_along``), so a list of losses read after a loop
costs one round trip; values taken along that keep dying unread stop being taken (``KnownValues.bring``), and are
taken again once a read comes that taking them would have saved."""

from __future__ import annotations

import contextlib

import tensorwire as tw

from ._calls import counted


@contextlib.contextmanager
def taken_along(session):
    """The handles each fetch takes along while the block runs, one list a fetch."""
    rounds = []
    orig = session._take_along

    def wrapper(t):
        out = orig(t)
        rounds.append(list(out))
        return out

    session._take_along = wrapper
    try:
        yield rounds
    finally:
        del session._take_along


def _step(w, k: float, kept: list | None = None):
    """A step in polyfit's manner: 0-d results made before the loss and alive when it is read, not read themselves
    (they die after the read, unless ``kept`` keeps them), and the loss read."""
    unread = [w * (k + j) for j in range(3)]
    loss = (w * k).sum()
    value = loss.item()
    if kept is not None:
        kept += unread
    return value


def test_values_taken_along_that_die_unread_stop_being_taken_then_come_back(session):
    w = tw.full((), 2.0)  # (a device's value: an op of a value the client holds would be the client's)
    with taken_along(session) as rounds:
        got = [_step(w, float(k)) for k in range(1, 9)]
    assert got == [2.0 * k for k in range(1, 9)]
    assert [len(r) for r in rounds[:2]] == [3, 3]  # (taken along while it may pay ...)
    assert all(not r for r in rounds[-4:])  # (... not once they kept dying unread)
    # a read that taking along would have saved: taken along again, the rest of the list with it
    kept = []
    assert _step(w, 10.0, kept) == 20.0  # (passes them over)
    with counted(session, "_wait") as (n, _), taken_along(session) as rounds:
        assert [x.item() for x in kept] == [20.0, 22.0, 24.0]
    assert n[0] == 1 and [len(r) for r in rounds] == [2]


def test_a_list_read_after_a_loop_is_one_round_trip_while_taking_along_is_off(session):
    w = tw.full((), 3.0)
    with taken_along(session) as rounds:
        for k in range(6):  # (turns taking along off, as above)
            _step(w, float(k))
    assert rounds[-1] == []
    losses = [(w * float(k)).sum() for k in range(12)]
    session.flush()
    with counted(session, "_wait") as (n, _):
        got = [lv.item() for lv in losses]
    assert got == [3.0 * k for k in range(12)] and n[0] == 1  # (more values than the steps brought: taken along)
