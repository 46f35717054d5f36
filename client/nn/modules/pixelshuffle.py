"""``torch.nn.modules.pixelshuffle``'s names (the classes are ``tensorwire.nn``'s)."""

from __future__ import annotations

from ..shape_layers import PixelShuffle, PixelUnshuffle

__all__ = ["PixelShuffle", "PixelUnshuffle"]
