"""Kernel errors checked when the host waits anyway, not after every kernel that can raise.

A kernel that checks its input (an index out of range, an integer division by zero) writes ``(code, detail)`` to an
error slot; the host reads the slot back to raise the error the code names (:func:`.codegen.program.kernel_error`).
On an asynchronous device (a GPU's stream, an OpenCL queue) that read waits for the device, so reading it after every
such launch puts a device sync in the middle of each fragment that gathers or divides. Instead each launch that can
raise takes its own slot, and the slots are read together once the fragment's run ends, or earlier where the run
hands a value to the host (an early answer), which waits for the device at that point in any case. The first failing
kernel in launch order is the error raised, so the message names the kernel that failed first, as a check after each
launch would; kernels after it computed on values it left unwritten, which no one reads: the fragment failed.

Slots are per thread: the worker's main thread and its pool's threads run fragments on one device at once, and a
fragment's run stays on its thread, so a thread's check sees its own launches only. A thread holds at most
:attr:`ErrorSlots.PER_THREAD` unchecked launches (the launcher checks first when they are used up).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from .codegen.program import kernel_error


class ThreadSlots:
    """One thread's error slots: ``device`` (what a launch addresses) and ``host`` (where a check reads them back),
    as the runtime made them, and the kernels that took slots since the last check, in launch order."""

    __slots__ = ("device", "host", "kernels")

    def __init__(self, device, host):
        self.device, self.host, self.kernels = device, host, []


class ErrorSlots:
    """Every thread's :class:`ThreadSlots` on one device; ``make()`` allocates a thread's pair of blocks (device and
    host) of :attr:`PER_THREAD` slots of two int64 words each, zeroed."""

    PER_THREAD = 128
    SLOT_BYTES = 16

    def __init__(self, make: Callable[[int], tuple]):
        self._make = make
        self._local = threading.local()

    def mine(self) -> ThreadSlots:
        """The calling thread's slots (made on its first use)."""
        m = getattr(self._local, "slots", None)
        if m is None:
            m = self._local.slots = ThreadSlots(*self._make(self.PER_THREAD * self.SLOT_BYTES))
        return m

    def pending(self) -> bool:
        """Whether the calling thread launched kernels that can raise since its last check."""
        m = getattr(self._local, "slots", None)
        return bool(m is not None and m.kernels)

    def take(self, k, check: Callable[[], None]) -> int:
        """The index, in the calling thread's slots (:meth:`mine`), of the slot kernel ``k``'s launch writes;
        ``check()`` (the runtime's check of them) runs first where they are used up."""
        mine = self.mine()
        if len(mine.kernels) == self.PER_THREAD:
            check()
        mine.kernels.append(k)
        return len(mine.kernels) - 1

    def check(self, read: Callable[[ThreadSlots, list], object], reset: Callable[[ThreadSlots, list], None]) -> None:
        """Raise the first error of the kernels the calling thread launched since its last check: ``read(slots,
        kernels)`` gives their slots' words (waiting for the device), ``reset(slots, kernels)`` zeroes the slots
        again before the error is raised."""
        if not self.pending():
            return
        mine = self.mine()
        kernels, mine.kernels = mine.kernels, []
        failed = self.first_error(kernels, read(mine, kernels))
        if failed is not None:
            reset(mine, kernels)
            raise failed[1]

    @staticmethod
    def first_error(kernels: list, words) -> tuple[int, Exception] | None:
        """``(slot, error)`` of the first of ``kernels`` (in launch order) whose slot in ``words`` (the slots read
        back, two int64 words each) holds an error, else None."""
        for i, k in enumerate(kernels):
            code = int(words[2 * i])
            if code:
                return i, kernel_error(k, code, int(words[2 * i + 1]))
        return None


__all__ = ["ErrorSlots", "ThreadSlots"]
