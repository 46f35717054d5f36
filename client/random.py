"""The client's random generator: a seed and a counter offset (see ``tensorwire.protocol.random``).

Random ops carry ``seed`` and ``offset`` attributes; the backend computes the numbers from them, so
the same seed gives the same numbers on every device and backend, and nothing random is sent.
"""

from __future__ import annotations

import random as _pyrandom


class Generator:
    """Like ``torch.Generator``: ``manual_seed``, ``initial_seed``, ``get_state``/``set_state``."""

    def __init__(self, seed: int | None = None):
        self._seed = _pyrandom.SystemRandom().getrandbits(63) if seed is None else int(seed)
        self._offset = 0

    def manual_seed(self, seed: int) -> Generator:
        self._seed = int(seed) % (1 << 64)
        self._offset = 0
        return self

    def initial_seed(self) -> int:
        return self._seed

    def seed(self) -> int:
        self.manual_seed(_pyrandom.SystemRandom().getrandbits(63))
        return self._seed

    def get_state(self) -> tuple[int, int]:
        return (self._seed, self._offset)

    def set_state(self, state) -> None:
        self._seed, self._offset = int(state[0]), int(state[1])

    def take(self, counters: int) -> tuple[int, int]:
        """Reserve ``counters`` counters; returns the (seed, offset) attributes of the op."""
        off = self._offset
        self._offset += counters
        return self._seed, off


default_generator = Generator()


def manual_seed(seed: int) -> Generator:
    """Seed the default generator (as ``torch.manual_seed``)."""
    return default_generator.manual_seed(seed)


def initial_seed() -> int:
    return default_generator.initial_seed()


def seed() -> int:
    return default_generator.seed()
