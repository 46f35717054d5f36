"""``nn.PairwiseDistance`` and ``nn.CosineSimilarity`` (issue 33): the modules over ``F.pairwise_distance`` and
``F.cosine_similarity``, with torch's attribute names (``norm``, ``eps``, ``keepdim``, ``dim``)."""

from __future__ import annotations

from tensorwire.tensor import Tensor

from . import functional as F
from .module import Module


class PairwiseDistance(Module):
    """The ``p``-norm of ``x1 - x2 + eps`` along the last dim (torch's ``nn.PairwiseDistance``)."""

    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


class CosineSimilarity(Module):
    """The cosine of the angle between ``x1`` and ``x2`` along ``dim`` (torch's ``nn.CosineSimilarity``)."""

    def __init__(self, dim: int = 1, eps: float = 1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return F.cosine_similarity(x1, x2, self.dim, self.eps)
