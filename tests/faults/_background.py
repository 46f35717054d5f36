"""Running a call on a thread while a test does something else (the fault tests' victims and slow batches)."""

from __future__ import annotations

import threading
import time


def in_background(fn) -> tuple[threading.Thread, dict]:
    """Start ``fn()`` on a daemon thread; the dict gets ``value`` or ``error``, then ``seconds`` (its duration)."""
    out: dict = {}

    def run():
        t0 = time.perf_counter()
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e
        out["seconds"] = time.perf_counter() - t0

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th, out
