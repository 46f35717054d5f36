"""Shared-memory files a worker lends to its collectives rank, reused once nothing maps them any more.

A collective's input is copied into a file under ``/dev/shm``; the rank maps the same file and runs MPI
on it in place; the worker then hands the result to the session as a read-only array *on that mapping*
(no copy back). The file returns to the pool when the last array viewing it dies (a finalizer on the
lease's root array), so a training loop reuses warm pages instead of faulting in fresh ones each step.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import logging
import mmap
import os
import re
import stat
import weakref

import numpy as np

from tensorwire.protocol.service import SHM_DIR
from tensorwire.protocol.shm_paths import shm_prefix

MAX_POOLED_BYTES = int(os.environ.get("TENSORWIRE_SHM_POOL_BYTES", str(2 << 30)))


class ShmFile:
    """One file and a writable mapping of it."""

    def __init__(self, path: str, size: int):
        self.path = path
        self.size = size
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, size)
            self.map = mmap.mmap(fd, size)
        finally:
            os.close(fd)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.map.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)


def sweep_stale(device: str, folder: str = SHM_DIR) -> list[str]:
    """Remove the files a previous worker of ``device`` left in ``folder`` when it died without cleaning up (a crash
    restart: ``LocalCluster`` removes a killed worker's files itself, but a container restarted by Docker or
    Kubernetes has nobody to, and its new worker often gets the same pid as the old). A file goes when its name is
    this device's (``tensorwire-<pid>-<device>-<n>``), it is a regular file of this user's, and its pid is this
    process's own (so a predecessor's: this worker has made none yet) or runs no longer (as this process sees pids).
    One worker serves a device in a cluster; clusters that share one shared-memory folder across PID namespaces
    must not reuse device names (give them ``TENSORWIRE_SHM_DIR``s apart). Returns the paths removed."""
    tag = device.replace(":", "-")
    name = re.compile(r"tensorwire-([0-9]{1,12})-" + re.escape(tag) + r"-[0-9]{1,12}")
    removed = []
    for path in glob.glob(os.path.join(glob.escape(folder), f"tensorwire-*-{glob.escape(tag)}-*")):
        m = name.fullmatch(os.path.basename(path))
        if m is None:
            continue
        pid = int(m.group(1))
        if pid != os.getpid() and _runs(pid):
            continue
        try:
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                continue
            os.unlink(path)
            removed.append(path)
        except OSError:
            continue
    return removed


def _runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # (another user's process: it runs)
        return True
    return True


class ShmPool:
    """Files by size; ``take`` one, ``lease`` a result view on it, and it comes back when the view dies."""

    def __init__(self, tag: str):
        self.prefix = shm_prefix(os.getpid(), tag)  # the names the dispatcher and the ranks accept
        swept = sweep_stale(tag)
        if swept:
            logging.getLogger("tensorwire.worker").warning(
                "removed %d shared-memory file(s) a previous worker of %s left behind (%s ...)", len(swept), tag,
                swept[0])
        self.counter = itertools.count()
        self.free: dict[int, list[ShmFile]] = {}
        self.pooled = 0
        self.all: dict[str, ShmFile] = {}

    def take(self, size: int) -> ShmFile:
        size = max(int(size), 1)
        lst = self.free.get(size)
        if lst:
            f = lst.pop()
            self.pooled -= f.size
            return f
        f = ShmFile(f"{self.prefix}-{next(self.counter)}", size)
        self.all[f.path] = f
        return f

    def give_back(self, f: ShmFile) -> None:
        if f.path not in self.all:
            return
        if self.pooled + f.size > MAX_POOLED_BYTES:
            del self.all[f.path]
            f.close()
            return
        self.free.setdefault(f.size, []).append(f)
        self.pooled += f.size

    def lease(self, f: ShmFile, offset: int, shape, dtype: np.dtype) -> np.ndarray:
        """A read-only array on ``f``'s bytes; ``f`` returns to the pool when the array and its views die."""
        n = int(np.prod(shape, dtype=np.int64))
        root = np.frombuffer(memoryview(f.map), dtype=dtype, count=n, offset=offset)
        root.flags.writeable = False
        weakref.finalize(root, self.give_back, f)
        return root.reshape(shape)

    def close(self) -> None:
        for f in list(self.all.values()):
            f.close()
        self.all.clear()
        self.free.clear()
