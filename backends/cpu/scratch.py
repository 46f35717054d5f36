"""Per-thread scratch buffers for the CPU kernels' temporaries (im2col columns, padded copies, gemm results that are
copied out again).

A temporary of a few hundred KiB or more taken with ``np.empty`` comes from glibc's ``mmap`` (or a heap top it trims
back) and is given back when the kernel returns, so the next kernel's touches its pages anew: one minor page fault
per 4 KiB page, each zeroed by the kernel. A DCGAN step's convolutions took ~7,000 such faults, a third of the
worker's CPU time as system time (issue 37). A kernel that takes its temporaries here instead reuses the same pages
call after call, as oneDNN's scratchpad does for torch's convolutions.

A buffer belongs to one thread (kernels of different sessions run on different threads at once) and one named
*slot*: a kernel that needs several temporaries at once takes each from its own slot, and a slot's buffer is valid
until that thread next takes the same slot, so nothing taken here may be returned as a kernel's result. Buffers grow
to the largest request a slot has seen, up to :data:`SCRATCH_MAX` bytes; a larger request gets a fresh array.
"""

from __future__ import annotations

import math
import threading

import numpy as np

#: bytes a thread keeps in one slot at most; a larger temporary is allocated for its call only
SCRATCH_MAX = 1 << 24

_LOCAL = threading.local()


def scratch(slot: str, shape: tuple | int, dtype) -> np.ndarray:
    """An uninitialised C-contiguous array of ``shape`` and ``dtype`` in this thread's buffer ``slot`` (see the
    module's docstring: valid until this thread takes ``slot`` again; never a kernel's result)."""
    dtype = np.dtype(dtype)
    count = shape if isinstance(shape, int) else math.prod(shape)  # (np.prod costs ~10x more a call)
    nbytes = count * dtype.itemsize
    if nbytes > SCRATCH_MAX:
        return np.empty(shape, dtype)
    bufs = getattr(_LOCAL, "bufs", None)
    if bufs is None:
        bufs = _LOCAL.bufs = {}
    buf = bufs.get(slot)
    if buf is None or buf.nbytes < nbytes:
        buf = bufs[slot] = np.empty(max(nbytes, 1), np.uint8)
    return buf[:nbytes].view(dtype).reshape(shape)


def scratch_zeros(slot: str, shape: tuple | int, dtype) -> np.ndarray:
    """:func:`scratch`, zero-filled."""
    out = scratch(slot, shape, dtype)
    out.fill(0)
    return out


def scratch_copy(slot: str, x: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``x`` in ``slot`` (``np.ascontiguousarray``'s, without a fresh allocation)."""
    out = scratch(slot, x.shape, x.dtype)
    np.copyto(out, x)
    return out
