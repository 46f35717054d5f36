"""A block-splitting caching allocator for device memory, in the manner of PyTorch's CUDA caching allocator
(``c10/cuda/CUDACachingAllocator.cpp``).

The driver's allocation calls (``cuMemAlloc``/``cuMemFree``, ``hipMalloc``/``hipFree``) synchronise the device and cost
tens of microseconds, so memory is taken from the driver in *segments* and handed out as *blocks* carved from them:

* A request is rounded up to a multiple of 512 bytes. Requests up to 1 MiB come from the *small* pool, whose segments
  are 2 MiB; larger ones from the *large* pool, whose segments are 20 MiB for requests under 10 MiB (many such
  tensors share one) and the request rounded up to 2 MiB from 10 MiB on.
* A request takes the smallest free block of its pool that holds it (best fit; the lowest address among equals). A
  block larger than the request is split when the rest is worth keeping (at least 512 bytes in the small pool, more
  than 1 MiB in the large one); the rest is a free block of its own.
* A freed block is merged with its free neighbours in the segment, so the segment's free space stays in few blocks and
  a wholly free segment is one block again. :meth:`CachingAllocator.empty_cache` gives the driver back only such
  wholly free segments (a segment with a live block stays).
* When the driver refuses a segment, the request tries the smallest segment that holds it instead (its own size);
  then the cache is emptied once (after ``before_release`` waits for the stream) and the allocation tried again; if
  it still fails, :class:`OutOfMemory` names the request and the allocated and reserved bytes.

All work runs on one stream, so a block freed while kernels queued earlier still read it can be handed to later work
at once: stream order keeps them apart (PyTorch's same-stream rule). The CUDA and ROCm backends share this allocator
(through :mod:`.gpu_runtime`). A tensor's buffer, :class:`GPUBuffer`, holds one block and gives it back when it dies
(it lives here, below both the runtime and :mod:`.gpu_graphs`, which capture on such buffers).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import OutOfMemory

MIN_BLOCK = 512                # requests are rounded up to multiples of this; the small pool's smallest split
SMALL = 1 << 20                # requests up to this size come from the small pool...
SMALL_SEGMENT = 2 << 20        # ...whose segments are this large
LARGE_SEGMENT = 20 << 20       # large requests under MIN_LARGE_ALLOC share segments of this size...
MIN_LARGE_ALLOC = 10 << 20
LARGE_ROUND = 2 << 20          # ...larger ones get a segment of their own size rounded to this

SMALL_ROUND = MIN_BLOCK        # (the names the pinned staging blocks' size classes use)


class DriverOutOfMemory(Exception):
    """Raised by an ``alloc`` callable when the driver has no memory for the request."""


def size_class(nbytes: int) -> int:
    """``nbytes`` rounded to a multiple of 512 bytes up to 1 MiB, else of 2 MiB (at least 512, even for 0 bytes): the
    size classes of the runtime's pinned staging blocks, which are reused whole."""
    n = max(int(nbytes), 1)
    step = SMALL_ROUND if n <= SMALL else LARGE_ROUND
    return -(-n // step) * step


def round_size(nbytes: int) -> int:
    """The block size a request of ``nbytes`` gets: a multiple of 512 bytes (512 even for 0 bytes)."""
    return -(-max(int(nbytes), 1) // MIN_BLOCK) * MIN_BLOCK


def segment_size(size: int) -> int:
    """The segment the driver is asked for when no cached block holds a block of ``size`` (from :func:`round_size`)."""
    if size <= SMALL:
        return SMALL_SEGMENT
    if size < MIN_LARGE_ALLOC:
        return LARGE_SEGMENT
    return -(-size // LARGE_ROUND) * LARGE_ROUND


class Block:
    """``size`` bytes at ``ptr`` of a segment: handed out (``allocated``) or free; ``prev``/``next`` are its
    neighbours in the segment (None at the segment's ends)."""

    __slots__ = ("ptr", "size", "small", "allocated", "prev", "next")

    def __init__(self, ptr: int, size: int, small: bool, prev: Block | None = None, nxt: Block | None = None):
        self.ptr, self.size, self.small, self.allocated, self.prev, self.next = ptr, size, small, False, prev, nxt

    @property
    def whole_segment(self) -> bool:
        return self.prev is None and self.next is None

    def __repr__(self) -> str:
        flags = (" small" if self.small else "") + (" allocated" if self.allocated else "")
        return f"Block({self.ptr:#x}+{self.size}{flags})"


class _Pool:
    """The free blocks of one pool, ordered by ``(size, ptr)`` for best fit."""

    __slots__ = ("keys", "blocks")

    def __init__(self):
        self.keys: list[tuple[int, int]] = []
        self.blocks: dict[int, Block] = {}  # ptr -> free block

    def add(self, b: Block) -> None:
        bisect.insort(self.keys, (b.size, b.ptr))
        self.blocks[b.ptr] = b

    def remove(self, b: Block) -> None:
        i = bisect.bisect_left(self.keys, (b.size, b.ptr))
        del self.keys[i]
        del self.blocks[b.ptr]

    def best_fit(self, size: int) -> Block | None:
        """The smallest free block of at least ``size`` bytes, taken out of the pool (None when none holds it)."""
        i = bisect.bisect_left(self.keys, (size, -1))
        if i == len(self.keys):
            return None
        b = self.blocks.pop(self.keys.pop(i)[1])
        return b

    def free_bytes(self) -> int:
        return sum(size for size, _ in self.keys)


class CachingAllocator:
    """Device blocks carved from segments that ``alloc(nbytes) -> address`` takes from the driver and
    ``release(address)`` gives back (see the module's doc).

    ``allocated`` counts the bytes of blocks handed out (their rounded sizes), ``reserved`` those of the segments the
    driver holds for us (handed out plus cached), ``requested`` the bytes asked for. Every call holds ``guard`` (the
    runtime's :class:`~.gpu_runtime.ThreadBinding`: a block is freed on whichever thread drops its last reference, and
    an allocation may call the driver)."""

    def __init__(self, alloc: Callable[[int], int], release: Callable[[int], None],
                 before_release: Callable[[], None] = lambda: None, what: str = "the device",
                 guard: AbstractContextManager | None = None):
        self._alloc, self._release, self._before_release, self.what = alloc, release, before_release, what
        self._guard = guard if guard is not None else threading.RLock()
        self._small, self._large = _Pool(), _Pool()
        self._active: dict[int, Block] = {}  # ptr -> block handed out
        self._segments: dict[int, int] = {}  # segment address -> its size
        self.allocated = self.reserved = self.requested = 0
        self.blocks = 0          # blocks handed out
        self.driver_allocs = 0   # segments taken from the driver (for tests and stats)
        self.driver_frees = 0    # segments given back
        self.cache_hits = 0      # requests served from a cached block (no driver call)
        self.peak_allocated = 0
        self.peak_reserved = 0   # (``torch.cuda.max_memory_reserved``)

    # -- allocation -----------------------------------------------------------------------------------------------
    def malloc(self, nbytes: int) -> tuple[int, int]:
        """``(address, block size)`` of a block for ``nbytes``; raises :class:`OutOfMemory`."""
        with self._guard:
            return self._malloc(nbytes)

    def _malloc(self, nbytes: int) -> tuple[int, int]:
        size = round_size(nbytes)
        small = size <= SMALL
        pool = self._small if small else self._large
        block = pool.best_fit(size)
        if block is not None:
            self.cache_hits += 1
        else:
            block = self._new_segment(nbytes, size, small)
        rest = block.size - size
        if (rest >= MIN_BLOCK) if small else (rest > SMALL):  # split: the rest is a free block of its own
            tail = Block(block.ptr + size, rest, small, block, block.next)
            if block.next is not None:
                block.next.prev = tail
            block.next, block.size = tail, size
            pool.add(tail)
        block.allocated = True
        self._active[block.ptr] = block
        self.allocated += block.size
        self.requested += nbytes
        self.blocks += 1
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return block.ptr, block.size

    def _new_segment(self, nbytes: int, size: int, small: bool) -> Block:
        """A free block spanning a new segment for a block of ``size``: the pool's segment size, else (large) the
        smallest segment that holds it, else both again after emptying the cache; :class:`OutOfMemory` when even
        that fails."""
        sizes = list(dict.fromkeys([segment_size(size), size if small else -(-size // LARGE_ROUND) * LARGE_ROUND]))
        try:
            return self._segment(sizes, small)
        except DriverOutOfMemory:
            self.empty_cache()
            try:
                return self._segment(sizes, small)
            except DriverOutOfMemory as e:
                raise OutOfMemory(
                    f"{self.what} is out of memory: tried to allocate {nbytes} bytes ({size} with rounding); "
                    f"{self.allocated} bytes allocated by tensors, {self.reserved} reserved by tensorwire "
                    f"(cache emptied) ({e})") from None

    def _segment(self, sizes: list[int], small: bool) -> Block:
        for i, seg in enumerate(sizes):
            try:
                ptr = self._alloc(seg)
            except DriverOutOfMemory:
                if i == len(sizes) - 1:
                    raise
                continue
            self.driver_allocs += 1
            self.reserved += seg
            self.peak_reserved = max(self.peak_reserved, self.reserved)
            self._segments[ptr] = seg
            return Block(ptr, seg, small)
        raise AssertionError("unreachable")

    # -- freeing ----------------------------------------------------------------------------------------------------
    def free(self, ptr: int, size: int, nbytes: int) -> None:
        """Return a block (from :meth:`malloc`): it is merged with its free neighbours and cached."""
        with self._guard:
            block = self._active.pop(ptr)
            assert block.size == size, (block, size)
            block.allocated = False
            self.allocated -= block.size
            self.requested -= nbytes
            self.blocks -= 1
            pool = self._small if block.small else self._large
            prev, nxt = block.prev, block.next
            if prev is not None and not prev.allocated:  # prev absorbs block
                pool.remove(prev)
                prev.size += block.size
                prev.next = nxt
                if nxt is not None:
                    nxt.prev = prev
                block = prev
            if nxt is not None and not nxt.allocated:  # block absorbs next
                pool.remove(nxt)
                block.size += nxt.size
                block.next = nxt.next
                if nxt.next is not None:
                    nxt.next.prev = block
            pool.add(block)

    def cached_bytes(self) -> int:
        return self.reserved - self.allocated

    def empty_cache(self) -> None:
        """Give every wholly free segment back to the driver (after the queued work that may still use it); a segment
        with a block handed out stays."""
        with self._guard:
            whole = [b for pool in (self._small, self._large) for b in pool.blocks.values() if b.whole_segment]
            if not whole:
                return
            self._before_release()
            for b in whole:
                (self._small if b.small else self._large).remove(b)
                self._release(b.ptr)
                self.reserved -= self._segments.pop(b.ptr)
                self.driver_frees += 1

    # -- inspection -------------------------------------------------------------------------------------------------
    def segments(self) -> list[list[Block]]:
        """Every segment's blocks in address order (for tests and debugging)."""
        with self._guard:
            heads = [b for b in (*self._active.values(), *self._small.blocks.values(), *self._large.blocks.values())
                     if b.prev is None]
            out = []
            for head in sorted(heads, key=lambda b: b.ptr):
                chain, b = [], head
                while b is not None:
                    chain.append(b)
                    b = b.next
                out.append(chain)
            return out

    def stats(self) -> dict:
        return {"allocated_bytes": self.allocated, "reserved_bytes": self.reserved,
                "requested_bytes": self.requested, "cached_bytes": self.cached_bytes(),
                "peak_allocated_bytes": self.peak_allocated, "peak_reserved_bytes": self.peak_reserved,
                "buffers": self.blocks, "segments": len(self._segments),
                "driver_allocs": self.driver_allocs, "driver_frees": self.driver_frees,
                "cache_hits": self.cache_hits}


# -- buffers --------------------------------------------------------------------------------------------------------

class GPUBuffer:
    """A device buffer: an allocator block (``ptr``, ``size``) holding a tensor of ``shape`` and ``dtype``."""

    __slots__ = ("ptr", "size", "shape", "dtype", "nbytes", "_pool", "__weakref__")

    def __init__(self, ptr: int, size: int, shape: tuple, dtype: D.DType, nbytes: int, pool):
        self.ptr, self.size, self.shape, self.dtype, self.nbytes, self._pool = ptr, size, shape, dtype, nbytes, pool

    def __del__(self):
        if self._pool is not None:
            self._pool.free(self.ptr, self.size, self.nbytes)

    def __repr__(self) -> str:
        return f"GPUBuffer({self.dtype.name}{list(self.shape)} at {self.ptr:#x})"
