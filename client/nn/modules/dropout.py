"""``torch.nn.modules.dropout``'s names (the classes are ``tensorwire.nn``'s)."""

from __future__ import annotations

from ..layers import AlphaDropout, Dropout, Dropout1d, Dropout2d, Dropout3d, FeatureAlphaDropout, _DropoutNd

__all__ = ["_DropoutNd", "AlphaDropout", "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "FeatureAlphaDropout"]
