"""A caching allocator for device memory, in the manner of PyTorch's CUDA caching allocator.

Blocks are rounded up to a size class: multiples of 512 bytes up to 1 MiB (small tensors share few classes), then
multiples of 2 MiB. A freed block goes back to its class's free list instead of to the driver, so a training loop
that allocates the same shapes every step reuses the same blocks without a driver call (``cuMemAlloc``/``cuMemFree``,
``hipMalloc``/``hipFree`` synchronise the device and cost tens of microseconds). The CUDA and ROCm backends share it
(through :mod:`.gpu_runtime`). All work runs on one stream, so a block freed while kernels
queued earlier still read it can be handed to later work at once: stream order keeps them apart (PyTorch's
same-stream rule).

When the driver refuses an allocation, the cache is emptied once (every cached block returned to the driver, after
``before_release`` waits for the stream) and the allocation tried again; if it still fails, :class:`OutOfMemory`
names the request and the allocated and reserved bytes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager

from tensorwire.protocol.errors import OutOfMemory

SMALL = 1 << 20        # blocks up to this size are rounded to...
SMALL_ROUND = 512      # ...multiples of 512 bytes
LARGE_ROUND = 2 << 20  # larger ones to multiples of 2 MiB


class DriverOutOfMemory(Exception):
    """Raised by an ``alloc`` callable when the driver has no memory for the request."""


def size_class(nbytes: int) -> int:
    """The block size a request of ``nbytes`` gets (at least one small block, even for 0 bytes)."""
    n = max(int(nbytes), 1)
    step = SMALL_ROUND if n <= SMALL else LARGE_ROUND
    return -(-n // step) * step


class CachingAllocator:
    """Device blocks from ``alloc(nbytes) -> address`` / ``release(address)``, cached by size class.

    ``allocated`` counts the bytes of blocks handed out (rounded sizes), ``reserved`` those the driver holds for us
    (handed out plus cached), ``requested`` the bytes asked for. Every call holds ``guard`` (the runtime's
    :class:`~.gpu_runtime.ThreadBinding`: a block is freed on whichever thread drops its last reference, and an
    allocation may call the driver)."""

    def __init__(self, alloc: Callable[[int], int], release: Callable[[int], None],
                 before_release: Callable[[], None] = lambda: None, what: str = "the device",
                 guard: AbstractContextManager | None = None):
        self._alloc, self._release, self._before_release, self.what = alloc, release, before_release, what
        self._guard = guard if guard is not None else threading.RLock()
        self._free: dict[int, list[int]] = {}  # size class -> cached block addresses
        self.allocated = self.reserved = self.requested = 0
        self.blocks = 0        # blocks handed out
        self.driver_allocs = 0  # calls that reached the driver (for tests and stats)
        self.cache_hits = 0
        self.peak_allocated = 0

    def malloc(self, nbytes: int) -> tuple[int, int]:
        """``(address, block size)`` of a block for ``nbytes``; raises :class:`OutOfMemory`."""
        with self._guard:
            return self._malloc(nbytes)

    def _malloc(self, nbytes: int) -> tuple[int, int]:
        size = size_class(nbytes)
        cached = self._free.get(size)
        if cached:
            ptr = cached.pop()
            self.cache_hits += 1
        else:
            try:
                ptr = self._alloc(size)
            except DriverOutOfMemory:
                self.empty_cache()
                try:
                    ptr = self._alloc(size)
                except DriverOutOfMemory as e:
                    raise OutOfMemory(
                        f"{self.what} is out of memory: tried to allocate {nbytes} bytes ({size} with rounding); "
                        f"{self.allocated} bytes allocated by tensors, {self.reserved} reserved by tensorwire "
                        f"(cache emptied) ({e})") from None
            self.driver_allocs += 1
            self.reserved += size
        self.allocated += size
        self.requested += nbytes
        self.blocks += 1
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return ptr, size

    def free(self, ptr: int, size: int, nbytes: int) -> None:
        """Return a block (from :meth:`malloc`) to its size class."""
        with self._guard:
            self._free.setdefault(size, []).append(ptr)
            self.allocated -= size
            self.requested -= nbytes
            self.blocks -= 1

    def cached_bytes(self) -> int:
        return self.reserved - self.allocated

    def empty_cache(self) -> None:
        """Give every cached block back to the driver (after the queued work that may still use them)."""
        with self._guard:
            if not any(self._free.values()):
                return
            self._before_release()
            for size, ptrs in self._free.items():
                for ptr in ptrs:
                    self._release(ptr)
                    self.reserved -= size
            self._free.clear()

    def stats(self) -> dict:
        return {"allocated_bytes": self.allocated, "reserved_bytes": self.reserved,
                "requested_bytes": self.requested, "cached_bytes": self.cached_bytes(),
                "peak_allocated_bytes": self.peak_allocated, "buffers": self.blocks,
                "driver_allocs": self.driver_allocs, "cache_hits": self.cache_hits}
