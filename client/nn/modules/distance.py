"""``torch.nn.modules.distance``'s names (the classes are ``tensorwire.nn``'s)."""

from __future__ import annotations

from ..distance import CosineSimilarity, PairwiseDistance

__all__ = ["CosineSimilarity", "PairwiseDistance"]
