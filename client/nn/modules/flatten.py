"""``torch.nn.modules.flatten``'s names (the classes are ``tensorwire.nn``'s)."""

from __future__ import annotations

from ..layers import Flatten, Unflatten

__all__ = ["Flatten", "Unflatten"]
