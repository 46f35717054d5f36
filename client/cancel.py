"""Letting another thread interrupt a session's wait for an answer (``tw.cancel()`` from a watchdog thread).

A zmq socket belongs to one thread at a time, so a thread that wants the cluster to cancel a session's work while
another thread waits on that session's socket cannot send the message itself: it raises a :class:`Waker`, whose
pipe is registered on the session's poller, and the waiting thread sends the cancel when its poll wakes.
"""

from __future__ import annotations

import os
import threading


class Waker:
    """A flag with a pipe a zmq poller can watch (``fd``); ``set`` from any thread, ``take`` on the waiting one."""

    def __init__(self):
        self.fd, self._w = os.pipe()
        os.set_blocking(self.fd, False)
        os.set_blocking(self._w, False)
        self._flag = False
        self._lock = threading.Lock()

    def set(self) -> None:
        with self._lock:
            self._flag = True
        try:
            os.write(self._w, b"!")
        except (BlockingIOError, OSError):  # full (already signalled) or closed
            pass

    @property
    def is_set(self) -> bool:
        """Whether it was set since the last ``take``, read without a system call (a waiting loop asks at each turn;
        it still calls ``take`` when a wake-up brought no message, which empties the pipe)."""
        return self._flag

    def take(self) -> bool:
        """Whether it was set since the last ``take`` (and clear it)."""
        try:
            while os.read(self.fd, 4096):
                pass
        except (BlockingIOError, OSError):
            pass
        with self._lock:
            flag, self._flag = self._flag, False
        return flag

    def close(self) -> None:
        """Close the pipe (idempotent: a closed descriptor number may already belong to someone else)."""
        fds, self.fd, self._w = (self.fd, self._w), -1, -1
        for fd in fds:
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
