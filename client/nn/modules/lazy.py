"""``torch.nn.modules.lazy``'s names (the classes are ``tensorwire.nn``'s)."""

from __future__ import annotations

from ..lazy import LazyModuleMixin

__all__ = ["LazyModuleMixin"]
