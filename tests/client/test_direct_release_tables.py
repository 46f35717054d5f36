"""The data plane's tables stay bounded on the direct path: a handle a batch makes and releases in the same message
(a step's temporaries, dead before the step's value is read) is one the dispatcher never knew, so it is not queued
for the dispatcher to forget (``DataPlane.forget``, sent with the next relayed message only) and it leaves the table
of handles made on channels (``DataPlane.direct_made``) with its release. Before, each such handle stayed in both for
good: a program that only ever used its direct channel grew both by its temporaries every step."""

from __future__ import annotations

import numpy as np

import tensorwire as tw


def _step(x, w) -> float:
    # (x * w and its sum's input are temporaries: made and released in the message that reads the loss)
    return ((x * w + 1.0) * 2.0).sum().item()


def test_a_direct_step_s_temporaries_leave_no_entry_in_the_plane_s_tables(session):
    x = tw.tensor(np.linspace(-1.0, 1.0, 64, dtype=np.float32))
    w = tw.tensor(np.float32(0.5))
    want = float(((np.linspace(-1.0, 1.0, 64, dtype=np.float32) * np.float32(0.5) + 1.0) * 2.0).sum())
    plane = session._plane
    for _ in range(5):  # (the channel opens and the step's structure is known: from here on each step is alike)
        _step(x, w)
    assert plane.direct, "the step is expected to go on the device's direct channel"
    made, forget = len(plane.direct_made), len(plane.forget)
    for _ in range(20):
        assert np.isclose(_step(x, w), want, rtol=1e-5)
    assert len(plane.direct_made) <= made + 2 and len(plane.forget) <= forget
