"""Names of the shared-memory files a worker lends to its collectives rank, and the checks on them.

A service message that names a file (``coll_ready``'s ``path``) is trusted only if the file is where the
cluster's own processes create them: directly in ``SHM_DIR`` (``LocalCluster`` gives each cluster a private
0700 directory there), named after the pid and device of the worker that registered for that device, a regular
file (not a link) owned by this user. The dispatcher checks the name against the registered worker before it
forwards the message; the rank checks the name again and the file itself when it opens it.
"""

from __future__ import annotations

import collections
import hashlib
import mmap
import os
import re
import socket
import stat

from .errors import ProtocolError
from .service import SHM_DIR


def shm_prefix(pid: int, device: str) -> str:
    """The path prefix of the files worker ``pid`` of ``device`` creates (``<prefix>-<n>``)."""
    return os.path.join(SHM_DIR, f"tensorwire-{int(pid)}-{device.replace(':', '-')}")


def check_shm_path(path, pid, device: str) -> str:
    """``path`` if it names a file that worker ``pid`` of ``device`` may have created; ProtocolError otherwise."""
    if not isinstance(path, str) or not isinstance(pid, int) or isinstance(pid, bool):
        raise ProtocolError("a shared-memory path must be a string and the worker's pid an int")
    prefix = shm_prefix(pid, device)
    rest = path[len(prefix) :] if path.startswith(prefix) else ""
    if not re.fullmatch(r"-[0-9]{1,12}", rest) or os.path.dirname(path) != SHM_DIR:
        raise ProtocolError(f"shared-memory path {path[:200]!r} is not one of the worker's own files ({prefix}-N)")
    return path


def map_shm_file(path: str) -> mmap.mmap:
    """Map a checked path read-write, refusing links and anything but a regular file of this user's."""
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise ProtocolError(f"cannot open shared-memory file {path}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink != 1:
            raise ProtocolError(f"{path} is not a shared-memory file of this cluster")
        if st.st_size == 0:
            raise ProtocolError(f"shared-memory file {path} is empty")
        return mmap.mmap(fd, st.st_size)
    finally:
        os.close(fd)


class MappedFiles:
    """Mappings of shared-memory files kept for reuse (their pages stay warm: no new page faults), the least recently
    used dropped past ``limit`` bytes. A dropped mapping is not closed: an array may still view it, and it is
    unmapped when the last one dies."""

    def __init__(self, limit: int):
        self.limit = limit
        self.maps: collections.OrderedDict = collections.OrderedDict()  # path -> mmap, most recent last
        self.bytes = 0

    def get(self, path: str) -> mmap.mmap:
        """The mapping of ``path`` (a path the caller has checked), made with :func:`map_shm_file` the first time."""
        m = self.maps.get(path)
        if m is not None:
            self.maps.move_to_end(path)
            return m
        m = self.maps[path] = map_shm_file(path)
        self.bytes += len(m)
        while self.bytes > self.limit and len(self.maps) > 1:
            _, old = self.maps.popitem(last=False)
            self.bytes -= len(old)
        return m

    def clear(self) -> None:
        self.maps.clear()
        self.bytes = 0


def host_id() -> str:
    """What two processes compare to know they are on one host as far as the cluster is concerned: they reach each
    other's loopback addresses and unix sockets, and see the same files (this boot of this host, one network and
    one mount namespace). Containers and network namespaces count as hosts. (Whether two workers share their
    shared-memory folder is their ``SHM_DIR``, compared besides.)"""
    parts = [socket.gethostname()]
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            parts.append(f.read().strip())
    except OSError:
        parts.append("")
    for ns in ("/proc/self/ns/net", "/proc/self/ns/mnt"):
        try:
            parts.append(str(os.stat(ns).st_ino))
        except OSError:
            parts.append("")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]
