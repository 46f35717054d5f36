"""``torch.nn.modules.upsampling``'s names (the classes are ``tensorwire.nn``'s)."""

from __future__ import annotations

from ..shape_layers import Upsample, UpsamplingBilinear2d, UpsamplingNearest2d

__all__ = ["Upsample", "UpsamplingBilinear2d", "UpsamplingNearest2d"]
