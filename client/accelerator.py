"""Device idioms PyTorch programs start with, answered from the connected cluster's devices.

``tw.cuda.is_available()`` is true when the cluster has a ``cuda`` worker (not when this host has a GPU: the
tensors live on the cluster), ``tw.backends.mps.is_available()`` likewise for ``mps``, and ``tw.accelerator``
names the first accelerator type the cluster offers (CUDA, then ROCm, MPS, OpenCL). Asking connects, as any
``tw`` call does (starting the embedded local cluster when ``TENSORWIRE_ADDRESS`` is not set).
"""

from __future__ import annotations

from .context import current_session
from .functions import memory_stats as _memory_stats
from .functions import synchronize as _synchronize
from .random import manual_seed as _manual_seed
from .tensor import device

#: accelerator device types, in the order ``current_accelerator`` prefers them
ACCELERATORS = ("cuda", "rocm", "mps", "opencl")


def device_indices(kind: str, session=None) -> list[int]:
    """The indices of the cluster's ``kind`` devices (``[0, 1]`` for ``cuda:0`` and ``cuda:1``)."""
    s = session or current_session()
    return sorted(int(d.partition(":")[2] or 0) for d in s.devices() if d.partition(":")[0] == kind)


class DeviceType:
    """The ``torch.cuda``-shaped functions of one device type (``tw.cuda``, ``tw.mps``)."""

    def __init__(self, kind: str):
        self.kind = kind
        self._current = 0

    def is_available(self) -> bool:
        """Whether the connected cluster has a device of this type."""
        return bool(device_indices(self.kind))

    def is_built(self) -> bool:
        """Always true: the client needs no build of its own for a device type (the workers do)."""
        return True

    def device_count(self) -> int:
        return len(device_indices(self.kind))

    def current_device(self) -> int:
        return self._current

    def _index(self, d) -> int:
        """The index ``d`` names: an int, ``"cuda:1"`` (``"cuda"``: the current device) or a ``tw.device``; None is
        the current device."""
        if d is None:
            return self._current
        if isinstance(d, str):
            d = device(d)
        if isinstance(d, device):
            return self._current if d.index is None else d.index
        return int(d)

    def set_device(self, device) -> None:  # noqa: A002 - torch's name
        """Make ``device`` (an index, ``"cuda:1"`` or a ``tw.device``) the device ``tw.device(kind)`` without an index
        means for ``current_device()``."""
        i = self._index(device)
        if i not in device_indices(self.kind):
            raise ValueError(f"{self.kind}:{i} is not one of the cluster's devices: {current_session().devices()}")
        self._current = i

    def get_device_name(self, device=None) -> str:  # noqa: A002 - torch's name
        """The name the worker of ``device`` (None: the current device) reports."""
        i = self._index(device)
        for info in current_session().device_info():
            if info.get("device") == f"{self.kind}:{i}":
                return info.get("name") or f"{self.kind}:{i}"
        raise ValueError(f"{self.kind}:{i} is not one of the cluster's devices")

    def synchronize(self, device=None) -> None:  # noqa: A002 - torch's name
        """Wait for the session's queued work (every device: one barrier serves them all)."""
        _synchronize()

    def manual_seed(self, seed: int) -> None:
        """Seed the generator (one counter-based generator serves every device)."""
        _manual_seed(seed)

    manual_seed_all = manual_seed

    def empty_cache(self) -> None:
        """Nothing to do on the client: workers return freed buffers themselves."""

    def memory_allocated(self, device=None) -> int:  # noqa: A002
        """Bytes this session holds on the device (``tw.memory_stats``)."""
        i = self._current if device is None else (device.index if hasattr(device, "index") else int(device))
        return int(_memory_stats().get("devices", {}).get(f"{self.kind}:{i}", {}).get("bytes", 0))

    def is_bf16_supported(self, including_emulation: bool = True) -> bool:
        """Whether the cluster has a device of this type: its workers run bfloat16 (``including_emulation`` is
        accepted and changes nothing: a worker emulates what its hardware lacks)."""
        return self.is_available()

    def __repr__(self) -> str:
        return f"<tensorwire {self.kind} device type>"


#: the functions a device-type module (``tw.cuda``, ``tw.mps``) exports, torch.cuda's names
MODULE_FUNCTIONS = ("is_available", "is_built", "device_count", "current_device", "set_device", "get_device_name",
                    "synchronize", "manual_seed", "manual_seed_all", "empty_cache", "memory_allocated",
                    "is_bf16_supported")


def module_functions(kind: str) -> dict:
    """``{name: function}`` of :data:`MODULE_FUNCTIONS` for device type ``kind`` (one :class:`DeviceType`)."""
    t = DeviceType(kind)
    return {name: getattr(t, name) for name in MODULE_FUNCTIONS}


def is_available() -> bool:
    """Whether the cluster has any accelerator (a device that is not ``cpu``)."""
    return current_accelerator() is not None


def current_accelerator(check_available: bool = False):
    """The cluster's accelerator type as a ``tw.device`` (``device(type='cuda', index=0)``), or None."""
    kinds = {d.partition(":")[0] for d in current_session().devices()}
    for k in ACCELERATORS:
        if k in kinds:
            return device(k, min(device_indices(k)))
    return None


def device_count() -> int:
    acc = current_accelerator()
    return 0 if acc is None else len(device_indices(acc.type))
