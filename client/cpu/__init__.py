"""``tw.cpu``: ``torch.cpu``'s device-agnostic functions, and ``torch.cpu.amp`` (deprecated spellings of ``tw.amp``'s
autocast and GradScaler for ``cpu``).

As torch's, these exist so that ``getattr(torch, device.type).synchronize()`` works for ``cpu`` too: there is one
``cpu`` device type, which is always available (a client can always make tensors on the cluster's CPU workers).
"""

from __future__ import annotations

from tensorwire.functions import synchronize as _synchronize

from . import amp

__all__ = ["amp", "current_device", "device_count", "is_available", "set_device", "synchronize"]


def is_available() -> bool:
    """True, as torch's."""
    return True


def device_count() -> int:
    """1, as torch's (the CPU is one device type; the cluster's ``cpu:N`` workers are listed by ``tw.devices()``)."""
    return 1


def current_device() -> str:
    """``"cpu"``, as torch's."""
    return "cpu"


def set_device(device) -> None:  # noqa: A002 - torch's name
    """Accepted and ignored, as torch's (there is one CPU device type)."""


def synchronize(device=None) -> None:  # noqa: A002 - torch's name
    """Wait for the session's queued work (one barrier serves every device; ``device`` is ignored, as torch's)."""
    _synchronize()
