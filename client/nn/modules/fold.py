"""``torch.nn.modules.fold``'s names (the classes are ``tensorwire.nn``'s)."""

from __future__ import annotations

from ..shape_layers import Fold, Unfold

__all__ = ["Fold", "Unfold"]
