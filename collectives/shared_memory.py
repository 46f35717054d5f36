"""Collectives among ranks of one host, on the workers' shared memory itself.

Each worker puts its input in a shared-memory file and its rank maps it (``service.Rank._map``). When every rank of a
group is on the same host (the same :func:`host_id` and shared-memory folder, asked once per group), the ranks map
each other's files too and do the collective there, each rank a share of the elements, with MPI carrying only the
handshakes: an ``allgather`` of the files' names (it also tells every rank that every input is in place) and a
``Barrier`` at the end (no worker takes its result, or reuses its file, while a peer still reads or writes it).

For an ``all_reduce`` of ``n`` elements over ``k`` ranks, rank ``r`` reduces elements ``[r*n/k, (r+1)*n/k)`` of all
inputs, in rank order, block by block (a block stays in cache between reading the inputs and writing the result back
into every rank's file): every rank gets the same bits, and the bytes cross memory about twice, where MPI's
shared-memory ``Allreduce`` of a large buffer copies it through its own cells several times. ``broadcast``,
``all_gather`` and ``reduce_scatter`` work the same way. Across hosts, MPI does the work (``service.Rank._collective``).

Dtypes MPI has no type for (float16, bfloat16, bool) are reduced in float32 or int64 and rounded once at the end, as
the MPI path does; ``mean`` divides the sum (integers: floor division).
"""

from __future__ import annotations

import os

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import ProtocolError
from tensorwire.protocol.service import SHM_DIR
from tensorwire.protocol.shm_paths import host_id

#: elements a rank reduces at a time (a block of every input stays in the cache until the result is written back)
BLOCK = 1 << 17
#: set to 0 to send every collective through MPI, as across hosts (tests of that path; comparisons)
ENV = "TENSORWIRE_COLLECTIVES_SHARED_MEMORY"
#: the reduction of each op
UFUNCS = {"sum": np.add, "mean": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}


def on_one_host(comm) -> bool:
    """Whether every rank of ``comm`` shares this host and its shared-memory folder (a collective call: every rank
    of ``comm`` must make it, in the same order)."""
    here = (host_id(), SHM_DIR) if os.environ.get(ENV, "1") != "0" else None
    theirs = comm.allgather(here)  # (every rank asks, even one that would say no)
    return here is not None and all(there == here for there in theirs)


def work_dtype(dt: D.DType) -> np.dtype:
    """The numpy dtype a reduction of ``dt`` accumulates in."""
    if dt in (D.float16, D.bfloat16):
        return np.dtype(np.float32)
    if dt == D.bool_:
        return np.dtype(np.int64)
    return dt.np


def share(n: int, size: int, rank: int) -> tuple[int, int]:
    """Rank ``rank``'s elements ``[lo, hi)`` of ``n`` split ``size`` ways (as even as can be)."""
    base, extra = divmod(n, size)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (rank < extra)


def reduce_into(inputs: list[np.ndarray], outputs: list[np.ndarray], op: str, dt: D.DType) -> None:
    """``outputs[k][:] = op over inputs`` for every k, in rank order, block by block; ``mean`` divides by the
    number of inputs. All arrays are 1-d of one length and of ``dt``'s numpy dtype."""
    ufunc = UFUNCS.get(op)
    if ufunc is None:
        raise ProtocolError(f"unknown reduction {op!r}")
    n = len(inputs[0])
    wdt = work_dtype(dt)
    acc = np.empty(min(n, BLOCK), wdt)
    for lo in range(0, n, BLOCK):
        hi = min(n, lo + BLOCK)
        a = acc[: hi - lo]
        if wdt == dt.np:
            ufunc(inputs[0][lo:hi], inputs[1][lo:hi], out=a) if len(inputs) > 1 else np.copyto(a, inputs[0][lo:hi])
            rest = inputs[2:]
        else:
            np.copyto(a, inputs[0][lo:hi], casting="unsafe")
            rest = inputs[1:]
        for x in rest:
            ufunc(a, x[lo:hi], out=a)
        if op == "mean":
            if a.dtype.kind == "f":
                a /= len(inputs)
            else:
                a //= len(inputs)
        for out in outputs:
            np.copyto(out[lo:hi], a, casting="unsafe")


def all_reduce(comm, bufs: list[np.ndarray], op: str, dt: D.DType) -> None:
    """Every rank's buffer (``bufs[k]``: rank k's input, overwritten with the result) reduced; this rank does its
    share."""
    lo, hi = share(len(bufs[0]), comm.size, comm.rank)
    part = [b[lo:hi] for b in bufs]
    reduce_into(part, part, op, dt)


def broadcast(comm, bufs: list[np.ndarray], src: int) -> None:
    """Rank ``src``'s buffer copied into every other rank's; this rank copies its share."""
    lo, hi = share(len(bufs[0]), comm.size, comm.rank)
    for k, b in enumerate(bufs):
        if k != src:
            b[lo:hi] = bufs[src][lo:hi]


def all_gather(comm, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
    """Every rank's output gets all inputs side by side, rank order; this rank writes its own input everywhere."""
    mine = inputs[comm.rank]
    n = len(mine)
    for out in outputs:
        out[comm.rank * n:(comm.rank + 1) * n] = mine


def reduce_scatter(comm, inputs: list[np.ndarray], out: np.ndarray, counts: list[int], op: str, dt: D.DType) -> None:
    """This rank's output: its share (``counts``, rank order) of the reduction of every input."""
    lo = sum(counts[: comm.rank])
    hi = lo + counts[comm.rank]
    reduce_into([x[lo:hi] for x in inputs], [out], op, dt)
