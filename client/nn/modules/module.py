"""``torch.nn.modules.module``'s names (the classes are ``tensorwire.nn``'s)."""

from __future__ import annotations

from ..module import Module, RemovableHandle

__all__ = ["Module", "RemovableHandle"]
