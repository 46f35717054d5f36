"""The client's random generator: a seed and a counter offset (see ``tensorwire.protocol.random``).

Random ops carry ``seed`` and ``offset`` attributes; the backend computes the numbers from them, so
the same seed gives the same numbers on every device and backend, and nothing random is sent.

The state is those two numbers: ``Generator.get_state()`` gives them as a tuple, ``tw.get_rng_state()`` as torch's
kind of state, a uint8 tensor on ``cpu:0`` (:data:`STATE_MAGIC`, then the seed and the offset, 8 bytes each, little
endian), which ``tw.set_rng_state`` and ``Generator.set_state`` take back. A state from torch (its CPU generator's
5056 bytes of Mersenne Twister, or a CUDA generator's 16) is another algorithm's and is refused.
"""

from __future__ import annotations

import contextlib
import random as _pyrandom

# (the package, for tw.tensor and tw.uint8 at call time: the client core imports this module as it loads)
import tensorwire as _tw

#: the first bytes of a state from :func:`get_rng_state`
STATE_MAGIC = b"twrg"
STATE_BYTES = len(STATE_MAGIC) + 16


def encode_state(seed: int, offset: int) -> bytes:
    """A generator's (seed, offset) as :func:`get_rng_state`'s bytes (both modulo 2**64: what the counters use)."""
    return STATE_MAGIC + (seed % (1 << 64)).to_bytes(8, "little") + (offset % (1 << 64)).to_bytes(8, "little")


def decode_state(state) -> tuple[int, int]:
    """(seed, offset) from a state :func:`get_rng_state` made (a uint8 tensor, or its bytes) or from
    ``Generator.get_state()``'s tuple; TypeError or RuntimeError, saying why, for anything else (a torch state)."""
    if isinstance(state, (tuple, list)) and len(state) == 2:
        return int(state[0]), int(state[1])
    if type(state).__module__.startswith("torch"):
        raise TypeError("set_rng_state: got a torch generator state; tensorwire's generator is counter-based (a seed "
                        "and an offset, tw.get_rng_state()) and cannot take another algorithm's state: seed it with "
                        "tw.manual_seed instead")
    if isinstance(state, (bytes, bytearray)):
        data = bytes(state)
    elif isinstance(state, _tw.Tensor):
        if state.dtype is not _tw.uint8:
            raise TypeError(f"RNG state must be a uint8 tensor (tensorwire.ByteTensor), got {state.dtype}")
        data = bytes(state.reshape(-1).tolist())
    else:
        raise TypeError(f"expected a uint8 tensor from tw.get_rng_state(), but got {type(state).__name__}")
    if len(data) != STATE_BYTES or not data.startswith(STATE_MAGIC):
        torchs = {5056: " (the size of torch's CPU generator state: Mersenne Twister's, another algorithm)",
                  16: " (the size of torch's CUDA generator state, whose Philox numbers differ from tensorwire's)"}
        raise RuntimeError(f"expected a tensorwire generator state of {STATE_BYTES} bytes from tw.get_rng_state() "
                           f"(starting {STATE_MAGIC!r}), but got {len(data)} bytes{torchs.get(len(data), '')}: "
                           f"tensorwire's generator is counter-based (a seed and an offset) and takes no other state")
    n = len(STATE_MAGIC)
    return int.from_bytes(data[n:n + 8], "little"), int.from_bytes(data[n + 8:], "little")


class Generator:
    """Like ``torch.Generator(device="cpu")``: ``manual_seed``, ``initial_seed``, ``get_state``/``set_state``,
    ``device``.

    ``device`` (a name such as ``"cpu"``, ``"cuda:1"``, or a device object) may be any device of the cluster: the
    numbers depend on the seed and offset only, so one generator serves every device, and ``device`` is recorded for
    torch's code that reads it. An int in its place is a seed (tensorwire's older ``Generator(seed)``, kept);
    ``seed=`` seeds it too (without either the seed is random, as torch's)."""

    def __init__(self, device=None, seed: int | None = None):
        if isinstance(device, int) and not isinstance(device, bool):
            if seed is not None:
                raise TypeError("Generator() got a seed twice (an int device and seed=)")
            device, seed = None, device
        self._device_name = _device_name("cpu" if device is None else device)
        self._device = None
        self._seed = _pyrandom.SystemRandom().getrandbits(63) if seed is None else int(seed)
        self._offset = 0

    @property
    def device(self):
        """The device named at construction, as a ``tw.device`` (``cpu:0`` by default)."""
        if self._device is None:
            self._device = _tw.device(self._device_name)
        return self._device

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
        """The state: ``(seed, offset)`` (``tw.get_rng_state()`` gives the default generator's as torch's uint8
        tensor)."""
        return (self._seed, self._offset)

    def set_state(self, state) -> None:
        """Restore a state: :meth:`get_state`'s tuple, or a uint8 tensor from ``tw.get_rng_state()``."""
        self._seed, self._offset = decode_state(state)

    def take(self, counters: int) -> tuple[int, int]:
        """Reserve ``counters`` counters; returns the (seed, offset) attributes of the op."""
        off = self._offset
        self._offset += counters
        return self._seed, off


def _device_name(d) -> str:
    """``"type:index"`` for a device name (``"cpu"``, ``"cuda:1"``) or a device object (tensorwire's or torch's);
    ``RuntimeError`` for a string that names none, ``TypeError`` for anything else."""
    if isinstance(d, str):
        kind, sep, idx = d.partition(":")
        if not kind.isidentifier() or (sep and not idx.isdigit()):
            raise RuntimeError(f"Invalid device string: '{d}'")
        return f"{kind}:{int(idx) if sep else 0}"
    kind, idx = getattr(d, "type", None), getattr(d, "index", 0)
    if not isinstance(kind, str) or not (idx is None or isinstance(idx, int)):
        raise TypeError(f"Generator(): device must be a device name or a device, not {type(d).__name__}")
    return f"{kind}:{idx or 0}"


default_generator = Generator()


def manual_seed(seed: int) -> Generator:
    """Seed the default generator (as ``torch.manual_seed``)."""
    return default_generator.manual_seed(seed)


def initial_seed() -> int:
    return default_generator.initial_seed()


def seed() -> int:
    return default_generator.seed()


def get_rng_state():
    """The default generator's state as a uint8 tensor on ``cpu:0`` (torch.get_rng_state; 20 bytes: see this
    module's docstring), for :func:`set_rng_state`."""
    return _tw.tensor(list(encode_state(*default_generator.get_state())), dtype=_tw.uint8, device="cpu:0")


def set_rng_state(new_state) -> None:
    """Restore the default generator's state from :func:`get_rng_state`'s tensor (torch.set_rng_state): the numbers
    drawn after it are those drawn after that call. A torch state (another algorithm) is refused, saying so."""
    default_generator.set_state(new_state)


@contextlib.contextmanager
def fork_rng(devices=None, enabled: bool = True, _caller: str = "fork_rng", _devices_kw: str = "devices",
             device_type: str | None = None):
    """torch.random.fork_rng: the default generator's state is saved on entry and restored on exit (exception or
    not), so the numbers drawn inside leave those drawn after unchanged; ``enabled=False``: nothing is forked.

    tensorwire has one generator for every device (its numbers depend on the seed and offset only, not on the
    device), so forking it forks every device's: ``devices`` and ``device_type`` are accepted for torch's signature
    and change nothing, and torch's warning for ``devices=None`` with several devices (each device's generator forked
    in turn, slow) has no cause here and is not given. ``device_type="meta"``: nothing is forked, as torch's."""
    if device_type == "meta" or not enabled:
        yield
        return
    if devices is not None:
        devices = list(devices)  # (torch's: a generator passed in is consumed once)
    state = default_generator.get_state()
    try:
        yield
    finally:
        default_generator.set_state(state)
