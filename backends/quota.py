"""Per-session memory quotas on a device: the limit, each session's ledger, and a plan's memory estimate.

Every session may hold at most ``limit`` bytes on each device (``--session-memory`` of ``tensorwire worker``, the
``TENSORWIRE_SESSION_MEMORY`` environment variable, or ``LocalCluster(session_memory=...)``; by default half the
device's memory, and for CPU devices half of what the worker may use of the host's, :func:`host_memory`: its
container's or cgroup's limit and its address-space rlimit included). A batch is refused with
:class:`QuotaExceeded` *before* it runs when the session's holdings plus the batch's estimated peak
(:func:`peak_bytes`) would pass the limit, and its results are taken back (freed, and failed with the same error)
when what they really hold passes it after it ran. The session stays usable: freeing tensors makes room again.

What a session holds is counted by allocation, not by tensor: views of one allocation (reshapes, expands,
slices...) count once, through :meth:`Device.storage`.
"""

from __future__ import annotations

import os
import re
from itertools import repeat
from operator import itemgetter

try:
    import resource
except ImportError:  # pragma: no cover - not POSIX
    resource = None

from tensorwire.protocol.errors import QuotaExceeded

ENV = "TENSORWIRE_SESSION_MEMORY"
#: states the memory a worker may use on the host (its CPU devices' memory), for limits it cannot see itself
MEMORY_ENV = "TENSORWIRE_WORKER_MEMORY"
#: cgroup v1 writes "no limit" as a number near 2**63 (PAGE_COUNTER_MAX pages); anything from here up is none
V1_UNLIMITED = 1 << 62
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


def physical_memory() -> int:
    """The host's physical memory in bytes."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 16 << 30


def host_memory() -> int:
    """The memory in bytes this process may use on the host (what a CPU worker's sessions share): the least of the
    physical memory, its cgroup's limit (:func:`cgroup_memory_limit`: a container's ``memory.max``) and the room its
    ``RLIMIT_AS`` leaves (:func:`rlimit_memory`). ``TENSORWIRE_WORKER_MEMORY`` (``"3GiB"``, ``"512MB"``, bytes)
    states the figure instead, for limits the process cannot see."""
    text = os.environ.get(MEMORY_ENV, "").strip()
    if text:
        n = parse_limit(text, physical_memory())
        if n is None or n <= 0:
            raise ValueError(f"{MEMORY_ENV}={text!r} must be a size such as 3GiB, 512MB or a byte count")
        return n
    return min(n for n in (physical_memory(), cgroup_memory_limit(), rlimit_memory()) if n is not None)


def _read_limit(path: str) -> int | None:
    """The number in a cgroup limit file; None for ``max`` (no limit) or no readable file."""
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _ancestors(path: str) -> list[str]:
    """``/a/b`` -> ``["a/b", "a", ""]``: a cgroup and those above it, relative to the hierarchy's mount."""
    parts = [p for p in path.split("/") if p and p not in (".", "..")]
    return ["/".join(parts[:i]) for i in range(len(parts), -1, -1)]


def cgroup_memory_limit(root: str = "/") -> int | None:
    """The memory limit in bytes of this process's cgroup, or None without one. ``root`` is where ``proc`` and
    ``sys`` are found (``"/"``; a test passes a fake tree).

    ``proc/self/cgroup`` names the process's cgroup in each hierarchy: ``0::<path>`` for cgroup v2 (whose
    ``memory.max`` is read, ``max`` meaning none) and ``N:...memory...:<path>`` for v1's memory controller (its
    ``memory.limit_in_bytes``). A limit set on a cgroup above binds the ones below, so the least limit found on the
    path and its ancestors counts; in a container the hierarchy's mount shows the container's own cgroup at its top
    (whatever path ``proc/self/cgroup`` gives), which the walk up reaches as well."""
    try:
        with open(os.path.join(root, "proc/self/cgroup")) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    fs = os.path.join(root, "sys/fs/cgroup")
    found: list[int] = []
    for line in lines:
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hid == "0" and controllers == "":  # cgroup v2 (mounted at /sys/fs/cgroup, or .../unified when hybrid)
            places = [(os.path.join(fs, "unified"), "memory.max"), (fs, "memory.max")]
        elif "memory" in controllers.split(","):  # cgroup v1's memory controller
            places = [(os.path.join(fs, d), "memory.limit_in_bytes") for d in dict.fromkeys((controllers, "memory"))]
        else:
            continue
        for base, name in places:
            for rel in _ancestors(path):
                n = _read_limit(os.path.join(base, rel, name))
                if n is not None and n < V1_UNLIMITED:
                    found.append(n)
    return min(found) if found else None


def _address_space_used() -> int:
    """The virtual memory this process has mapped (``VmSize``), in bytes; 0 where unknown."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) << 10
    except (OSError, ValueError, IndexError):
        pass
    return 0


def rlimit_memory() -> int | None:
    """What this process's soft ``RLIMIT_AS`` leaves for new allocations: the limit less the address space mapped
    already (code, libraries, thread stacks: ~0.25 GiB when a CPU worker asks, and its threads' stacks and malloc
    arenas map ~0.45 GiB more once it runs); None when it is unlimited."""
    if resource is None:  # pragma: no cover - not POSIX
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    return max(0, soft - _address_space_used())


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


_key = itemgetter(0)  # (an allocation's key, of a device's ``(key, bytes)``)


class Ledger:
    """What one session holds on a device: its buffers' allocations, each counted once however many handles
    (or views) share it."""

    __slots__ = ("device", "sizes", "shared", "used", "_storages", "_handles")

    def __init__(self, device):
        self.device = device
        # (a device may answer for many buffers at once: ``storages(bufs)``, the list of their ``storage``)
        many = getattr(device, "storages", None)
        self._storages = many if many is not None else (lambda bufs: list(map(device.storage, bufs)))
        # (the counts as two maps, no list per allocation: the commonest batch, fresh allocations under one handle
        # each, is counted without one and taken off in a pass in C, not a Python loop per buffer: issue 37)
        self.sizes: dict = {}  # allocation key -> its bytes, for each allocation a handle is on
        self.shared: dict = {}  # allocation key -> the handles on it, where there are more than one
        self.used = 0
        self._handles: dict = {}  # handle id -> its allocation key, for what :meth:`hold` counted

    @property
    def owners(self) -> dict:
        """Allocation key -> ``[handles on it, bytes]`` for each allocation counted (made on demand)."""
        shared = self.shared
        return {key: [shared.get(key, 1), n] for key, n in self.sizes.items()}

    def hold(self, bufs: dict) -> None:
        """Count the buffers of ``bufs`` (handle id -> buffer, as a session holds them), as :meth:`add_all` does,
        and remember each handle's allocation, so that :meth:`drop` takes them off by id without asking the device
        again (issue 37: a replay releases a few dozen handles a batch). A handle held again is counted again."""
        pairs = self._storages(bufs.values())
        self._handles.update(zip(bufs, map(_key, pairs)))
        self._count(pairs)

    def drop(self, ids) -> None:
        """Stop counting the handles ``ids`` that :meth:`hold` counted (any other id is passed over: a failed
        output's, or one dropped already); an allocation's bytes go with the last handle on it."""
        self._uncount(list(map(self._handles.pop, ids, repeat(None))))  # (None for an id not held: no allocation)

    def add(self, buf) -> None:
        """Count ``buf`` (its storage, once however many buffers share it)."""
        self.add_all((buf,))

    def remove(self, buf) -> None:
        """Stop counting ``buf``; its storage's bytes go with the last buffer that shares it."""
        self.remove_all((buf,))

    def add_all(self, bufs) -> None:
        """:meth:`add` each of ``bufs`` (a batch's buffers at a time)."""
        self._count(self._storages(bufs))

    def remove_all(self, bufs) -> None:
        """:meth:`remove` each of ``bufs`` (a batch's buffers at a time)."""
        self._uncount(list(map(_key, self._storages(bufs))))

    def _count(self, pairs) -> None:
        """Count each ``(allocation key, bytes)`` of ``pairs``: an allocation's bytes once, its handles each."""
        sizes = self.sizes
        shared, used = self.shared, self.used
        for key, n in pairs:
            if key in sizes:
                shared[key] = shared.get(key, 1) + 1
            else:
                sizes[key] = n
                used += n
        self.used = used

    def _uncount(self, keys: list) -> None:
        """Take one handle off each allocation of ``keys``; its bytes go with its last handle (unknown keys pass)."""
        sizes, shared = self.sizes, self.shared
        if not shared or shared.keys().isdisjoint(keys):  # (one handle on each: all go; a key named again, or
            self.used -= sum(map(sizes.pop, keys, repeat(0)))  # unknown, is gone already and takes 0 off)
            return
        used = self.used
        for key in keys:
            n = shared.get(key)
            if n is None:
                used -= sizes.pop(key, 0)
            elif n > 2:
                shared[key] = n - 1
            else:
                del shared[key]
        self.used = used


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


def upload_quota_error(device: str, limit: int, held: int, incoming: int) -> QuotaExceeded:
    """The error of a batch whose upload frames, with those the session's earlier batches still hold on the device,
    would pass its limit (counted as they arrive, before the batch starts: ``Executor._hold_uploads``)."""
    return QuotaExceeded(
        f"session memory quota exceeded on {device}: this batch uploads {fmt_bytes(incoming)} while the session's "
        f"queued batches hold {fmt_bytes(held)} of uploads, past its {fmt_bytes(limit)} limit (set by "
        f"--session-memory / {ENV}); the uploads were dropped. Upload less per batch, or wait for the batches "
        f"before (a sync) and retry"
    )
