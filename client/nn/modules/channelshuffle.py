"""``torch.nn.modules.channelshuffle``'s names (the classes are ``tensorwire.nn``'s)."""

from __future__ import annotations

from ..shape_layers import ChannelShuffle

__all__ = ["ChannelShuffle"]
