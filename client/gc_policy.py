"""The cyclic garbage collector's settings in a client process.

A recording client allocates a few small containers per op (its pending entry, the tensor, view steps); refcounting
frees almost all of them, and almost no garbage is cyclic. CPython's default thresholds (700, 10, 10) still run a
young collection every 700 net allocations and, now and then, a full one that walks every tracked object of the
process (in one that has imported torch or scipy: ~100k objects, tens of milliseconds each). Measured on the
bigram and char-RNN scripts of ``tests/programs``: 8-30% of the client's CPU.

So the first session a process opens, unless the process set its own thresholds (anything but the defaults) or
``TENSORWIRE_CLIENT_GC=0``:

* ``gc.freeze()``: what exists then (modules, classes, functions: imports) moves to the permanent generation, which
  full collections skip, as CPython's docs suggest for long-lived objects and as the services do
  (``protocol/service.tune_gc``);
* the young threshold rises to :data:`YOUNG_THRESHOLD` (the older ones stay): a collection every 20,000 net
  allocations. Cyclic garbage lives a little longer; everything else is freed by refcounting as before.
"""

from __future__ import annotations

import gc
import os

#: the young generation's threshold set in a client process
YOUNG_THRESHOLD = 20_000
_DEFAULTS = (700, 10, 10)
_done = False


def tune_client_gc() -> bool:
    """Apply the client's collector settings once per process; True when this call applied them."""
    global _done
    if _done:
        return False
    _done = True
    if os.environ.get("TENSORWIRE_CLIENT_GC", "1").strip() == "0" or gc.get_threshold() != _DEFAULTS:
        return False
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *_DEFAULTS[1:])
    return True


__all__ = ["YOUNG_THRESHOLD", "tune_client_gc"]
