"""``tw.amp``: automatic mixed precision, as ``torch.amp`` (``autocast``, ``GradScaler``).

``tw.autocast`` is the same class as ``tw.amp.autocast``; ``tw.cuda.amp`` names both with torch's CUDA defaults.
"""

from . import autocast_mode, grad_scaler, policy
from .autocast_mode import (
    autocast,
    custom_bwd,
    custom_fwd,
    get_autocast_dtype,
    is_autocast_available,
    is_autocast_enabled,
)
from .grad_scaler import GradScaler

__all__ = [
    "autocast",
    "GradScaler",
    "custom_fwd",
    "custom_bwd",
    "is_autocast_available",
    "is_autocast_enabled",
    "get_autocast_dtype",
]
