"""``torch.nn.modules.sparse``'s names (the classes are ``tensorwire.nn``'s)."""

from __future__ import annotations

from ..embedding_bag import EmbeddingBag
from ..layers import Embedding

__all__ = ["EmbeddingBag", "Embedding"]
