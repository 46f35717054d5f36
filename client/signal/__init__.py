"""``tw.signal``: torch.signal (its window functions, :mod:`.windows`)."""

from . import windows

__all__ = ["windows"]
