"""Per-session memory quotas on a device: the limit, each session's ledger, and a plan's memory estimate.

Every session may hold at most ``limit`` bytes on each device (``--session-memory`` of ``tensorwire worker``, the
``TENSORWIRE_SESSION_MEMORY`` environment variable, or ``LocalCluster(session_memory=...)``; by default half the
device's memory, and for CPU devices half the host's). A batch is refused with :class:`QuotaExceeded` *before* it
runs when the session's holdings plus the batch's estimated peak (:func:`peak_bytes`) would pass the limit, and
its results are taken back (freed, and failed with the same error) when what they really hold passes it
after it ran. The session stays usable: freeing tensors makes room again.

What a session holds is counted by allocation, not by tensor: views of one allocation (reshapes, expands,
slices...) count once, through :meth:`Device.storage`.
"""

from __future__ import annotations

import os
import re

from tensorwire.protocol.errors import QuotaExceeded

ENV = "TENSORWIRE_SESSION_MEMORY"
DEFAULT = "50%"
#: ops whose output views its input on the numpy-based backends (no new allocation); the estimate counts them as 0
VIEW_OPS = frozenset({"reshape", "permute", "expand", "slice", "flip", "send"})

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 10**3,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mb": 10**6,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gb": 10**9,
    "gib": 1 << 30,
    "t": 1 << 40,
    "tb": 10**12,
    "tib": 1 << 40,
}


def host_memory() -> int:
    """The host's physical memory in bytes (what the CPU devices share)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 16 << 30


def parse_limit(text: str | int | None, device_bytes: int) -> int | None:
    """The per-session limit in bytes for ``text``: ``"50%"`` (of ``device_bytes``), ``"4GiB"``, ``"512MB"``,
    a plain byte count, or ``"none"``/``"0"`` for no limit (returns None). Raises ValueError on anything else."""
    if text is None:
        text = DEFAULT
    t = str(text).strip().lower().replace(" ", "")
    if t in ("none", "unlimited", "off", "0"):
        return None
    if t.endswith("%"):
        share = float(t[:-1])
        if not 0 < share <= 100:
            raise ValueError(f"session memory share {text!r} must be in (0, 100]%")
        return int(device_bytes * share / 100)
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)([a-z]*)", t)
    if m is None or m.group(2) not in _UNITS:
        raise ValueError(f"bad session memory limit {text!r}; use e.g. 50%, 4GiB, 512MB or none")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def fmt_bytes(n: int) -> str:
    """``1536`` -> ``"1.5 KiB"``."""
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(x) < 1024 or unit == "TiB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    return f"{n} B"  # pragma: no cover


class Ledger:
    """What one session holds on a device: its buffers' allocations, each counted once however many handles
    (or views) share it."""

    __slots__ = ("device", "owners", "used", "_storage")

    def __init__(self, device):
        self.device = device
        self._storage = device.storage
        self.owners: dict = {}  # allocation key -> [handles on it, bytes]
        self.used = 0

    def add(self, buf) -> None:
        key, n = self._storage(buf)
        entry = self.owners.get(key)
        if entry is None:
            self.owners[key] = [1, n]
            self.used += n
        else:
            entry[0] += 1

    def remove(self, buf) -> None:
        key, _ = self._storage(buf)
        entry = self.owners.get(key)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] <= 0:
            del self.owners[key]
            self.used -= entry[1]


def peak_bytes(steps, keep) -> int:
    """An upper estimate of the memory a run of ``steps`` allocates at its peak: every step's output is taken as
    a new allocation (except views), live from the step that makes it to its last use (or to the end, for the
    kept slots ``keep``). A compiling backend that fuses steps allocates less, never more."""
    live: dict[int, int] = {}
    cur = peak = 0
    for s in steps:
        if s.out >= 0 and s.op not in VIEW_OPS and s.dtype is not None:
            n = s.dtype.itemsize
            for d in s.shape:
                n *= d
            live[s.out] = n
            cur += n
            peak = max(peak, cur)
        for f in s.frees:
            if f not in keep:
                cur -= live.pop(f, 0)
    return peak


def quota_error(device: str, limit: int, used: int, need: int, after: bool = False) -> QuotaExceeded:
    what = f"its results hold {fmt_bytes(need)}" if after else f"this batch needs about {fmt_bytes(need)} more"
    return QuotaExceeded(
        f"session memory quota exceeded on {device}: {what}, the session holds {fmt_bytes(used)} "
        f"of its {fmt_bytes(limit)} limit (set by --session-memory / {ENV}); free tensors "
        f"(del) and retry"
    )
