"""``torch.nn.modules.container``'s names (the classes are ``tensorwire.nn``'s)."""

from __future__ import annotations

from ..container import Container, ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential

__all__ = ["Container", "ModuleDict", "ModuleList", "ParameterDict", "ParameterList", "Sequential"]
