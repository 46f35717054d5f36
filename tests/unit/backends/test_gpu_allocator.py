"""The block-splitting caching allocator (``backends/gpu_allocator.py``) over a simulated driver.

:class:`AddressSpace` stands for the driver's ``cuMemAlloc``/``cuMemFree`` (first fit in a device address range of a
given capacity, :class:`DriverOutOfMemory` when no gap holds a request); the allocator under test is the real one.
After every step the segments are checked: each segment's blocks tile it exactly (no overlap, every byte accounted),
no two free blocks are neighbours (coalesced), and the counters agree with the blocks and with the driver.
"""

from __future__ import annotations

import bisect
import random

import pytest

from tensorwire.backends.gpu_allocator import (
    LARGE_SEGMENT,
    SMALL_SEGMENT,
    CachingAllocator,
    DriverOutOfMemory,
    round_size,
    segment_size,
)
from tensorwire.protocol.errors import OutOfMemory

MiB = 1 << 20
BASE = 0x7000_0000_0000


class AddressSpace:
    """A device's allocations: first fit in ``[BASE, BASE + capacity)``, 256-byte aligned, as a driver hands out."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.starts: list[int] = []
        self.sizes: dict[int, int] = {}
        self.allocs = self.releases = 0

    def in_use(self) -> int:
        return sum(self.sizes.values())

    def alloc(self, size: int) -> int:
        size = -(-size // 256) * 256
        at = BASE
        for s in self.starts:
            if s - at >= size:
                break
            at = s + self.sizes[s]
        if at + size > BASE + self.capacity:
            raise DriverOutOfMemory(f"no {size} bytes free (simulated driver)")
        bisect.insort(self.starts, at)
        self.sizes[at] = size
        self.allocs += 1
        return at

    def release(self, ptr: int) -> None:
        assert ptr in self.sizes, f"{ptr:#x} was not allocated"
        self.starts.remove(ptr)
        del self.sizes[ptr]
        self.releases += 1


def allocator(capacity: int = 1 << 34):
    space = AddressSpace(capacity)
    syncs = []
    pool = CachingAllocator(space.alloc, space.release, lambda: syncs.append(1), "the simulated GPU")
    return pool, space, syncs


def check(pool: CachingAllocator, space: AddressSpace, live: dict[int, tuple[int, int]]) -> None:
    """The invariants: segments tiled exactly by their blocks, free neighbours merged, counters consistent."""
    segments = pool.segments()
    assert sorted(chain[0].ptr for chain in segments) == space.starts
    allocated = 0
    for chain in segments:
        start = chain[0].ptr
        assert chain[0].prev is None and chain[-1].next is None
        at = start
        for i, b in enumerate(chain):
            assert b.ptr == at, f"gap or overlap at {at:#x}: {b}"
            at += b.size
            if i:
                assert not (b.allocated is False and chain[i - 1].allocated is False), f"free neighbours {chain}"
            assert b.small == chain[0].small
            if b.allocated:
                allocated += b.size
                assert live[b.ptr][1] == b.size, b
        assert at - start == pool._segments[start] <= space.sizes[start], "the blocks do not add up to the segment"
    assert allocated == pool.allocated == sum(size for _, size in live.values())
    assert pool.reserved == sum(pool._segments.values())
    assert pool.blocks == len(live)
    assert pool.cached_bytes() == pool._small.free_bytes() + pool._large.free_bytes()
    assert pool.driver_allocs - pool.driver_frees == len(space.starts)


def test_small_requests_share_a_2_mib_segment():
    pool, space, _ = allocator()
    live = {}
    for n in (100, 512, 513, 4000, 300 << 10):
        ptr, size = pool.malloc(n)
        assert size == round_size(n) and size % 512 == 0 and size >= n
        live[ptr] = (n, size)
    assert space.allocs == 1 and space.sizes[space.starts[0]] == SMALL_SEGMENT
    check(pool, space, live)
    assert pool.stats()["cache_hits"] == 4


def test_large_requests_split_20_mib_segments_and_big_ones_get_their_own():
    pool, space, _ = allocator()
    live = {}
    for n in (3 * MiB, 3 * MiB + 1, 5 * MiB):  # 1-10 MiB: carved from one 20 MiB segment
        ptr, size = pool.malloc(n)
        live[ptr] = (n, size)
    assert space.allocs == 1 and list(space.sizes.values()) == [LARGE_SEGMENT]
    ptr, size = pool.malloc(12 * MiB + 5)  # >= 10 MiB: a segment of its own, rounded to 2 MiB
    live[ptr] = (12 * MiB + 5, size)
    assert space.allocs == 2 and space.sizes[ptr] == 14 * MiB == segment_size(round_size(12 * MiB + 5))
    check(pool, space, live)
    # a request that leaves 1 MiB or less of a large block takes the whole block (no sliver is split off)
    n, s = live.pop(ptr)
    pool.free(ptr, s, n)
    ptr, size = pool.malloc(13 * MiB + 1)
    assert size == 14 * MiB and space.allocs == 2, size
    live[ptr] = (13 * MiB + 1, size)
    check(pool, space, live)


def test_freed_blocks_coalesce_and_empty_cache_returns_only_wholly_free_segments():
    pool, space, syncs = allocator()
    a, b, c = (pool.malloc(2 * MiB) for _ in range(3))
    keep = pool.malloc(100)  # its small segment stays in use
    live = {p: (2 * MiB, s) for p, s in (a, b, c)} | {keep[0]: (100, keep[1])}
    check(pool, space, live)
    for p, s in (a, c, b):  # the middle one last: it merges with both neighbours
        pool.free(p, s, 2 * MiB)
        del live[p]
        check(pool, space, live)
    large = [chain for chain in pool.segments() if not chain[0].small]
    assert len(large) == 1 and len(large[0]) == 1 and large[0][0].size == LARGE_SEGMENT, large
    pool.empty_cache()
    assert syncs == [1] and space.releases == 1 and list(space.sizes.values()) == [SMALL_SEGMENT]
    assert pool.reserved == SMALL_SEGMENT and pool.allocated == 512
    check(pool, space, live)
    pool.empty_cache()  # nothing wholly free: no sync, nothing released
    assert syncs == [1] and space.releases == 1


def test_a_mixed_workload_takes_few_segments_and_keeps_the_invariants():
    rng = random.Random(31)
    pool, space, _ = allocator()
    live: dict[int, tuple[int, int]] = {}
    sizes = ([rng.randrange(1, 1 << 20) for _ in range(40)] + [rng.randrange(1 << 20, 10 << 20) for _ in range(12)]
             + [rng.randrange(10 << 20, 40 << 20) for _ in range(3)])
    steps = 3000
    for step in range(steps):
        if live and (len(live) > 60 or rng.random() < 0.45):
            ptr = rng.choice(list(live))
            n, s = live.pop(ptr)
            pool.free(ptr, s, n)
        else:
            n = rng.choice(sizes)
            ptr, s = pool.malloc(n)
            assert ptr not in live
            live[ptr] = (n, s)
        if step % 50 == 0:
            check(pool, space, live)
    check(pool, space, live)
    stats = pool.stats()
    # thousands of requests of 55 distinct sizes; the old one-size-class-per-cuMemAlloc scheme made one driver call
    # for every large size class still live
    assert stats["driver_allocs"] <= 40 and stats["cache_hits"] > steps // 3, stats
    assert stats["peak_allocated_bytes"] >= stats["allocated_bytes"]
    assert stats["reserved_bytes"] <= 2 * stats["peak_allocated_bytes"] + 40 * MiB, stats
    for ptr, (n, s) in list(live.items()):
        pool.free(ptr, s, n)
        del live[ptr]
    check(pool, space, live)
    assert all(len(chain) == 1 for chain in pool.segments()), "a segment with nothing live is not one free block"
    pool.empty_cache()
    assert space.starts == [] and pool.reserved == 0 and pool.stats()["segments"] == 0


def test_a_refused_segment_falls_back_to_the_requests_own_size():
    pool, space, syncs = allocator(capacity=8 * MiB)
    ptr, size = pool.malloc(3 * MiB)  # 20 MiB does not fit: a 4 MiB segment does, without emptying the cache
    assert size == 4 * MiB and list(space.sizes.values()) == [4 * MiB] and syncs == []  # (1 MiB left: not split)
    check(pool, space, {ptr: (3 * MiB, size)})


def test_out_of_memory_empties_the_cache_once_and_retries():
    pool, space, syncs = allocator(capacity=24 * MiB)
    held = [pool.malloc(MiB) for _ in range(10)]  # five 2 MiB small segments
    for p, s in held:
        pool.free(p, s, MiB)
    assert len(space.starts) == 5 and pool.allocated == 0 and pool.reserved == 10 * MiB
    ptr, size = pool.malloc(16 * MiB)  # 16 + 10 > 24: fits once the cached segments went back
    assert syncs == [1] and space.releases == 5 and pool.reserved == 16 * MiB
    check(pool, space, {ptr: (16 * MiB, size)})
    with pytest.raises(OutOfMemory) as e:
        pool.malloc(9 * MiB)  # 16 + 10 > 24 even with nothing cached
    text = str(e.value)
    assert "the simulated GPU is out of memory: tried to allocate 9437184 bytes" in text, text
    assert f"{16 * MiB} bytes allocated by tensors, {16 * MiB} reserved by tensorwire (cache emptied)" in text, text
    small = pool.malloc(100)  # the allocator still works
    check(pool, space, {ptr: (16 * MiB, size), small[0]: (100, small[1])})
