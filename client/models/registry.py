"""The model registry: ``tw.models.for_config(config)`` picks the class from ``architectures``/``model_type``."""

from __future__ import annotations

import json
import os

_BY_ARCH: dict[str, type] = {}
_BY_TYPE: dict[str, type] = {}


def register_model(cls=None, *, architectures: tuple[str, ...] = (), model_type: str | None = None):
    """Class decorator: make ``cls`` the model for config ``architectures`` names and ``model_type``."""
    def deco(c):
        for a in architectures or (c.__name__,):
            _BY_ARCH[a] = c
        mt = model_type or getattr(c, "model_type", None)
        if mt:
            _BY_TYPE[mt] = c
        return c
    return deco(cls) if cls is not None else deco


def model_class(config: dict) -> type:
    """The registered class for ``config`` (its first known ``architectures`` entry, else ``model_type``)."""
    for a in config.get("architectures") or ():
        if a in _BY_ARCH:
            return _BY_ARCH[a]
    mt = config.get("model_type")
    if mt in _BY_TYPE:
        return _BY_TYPE[mt]
    raise ValueError(f"no tensorwire model for architectures={config.get('architectures')!r}, "
                     f"model_type={mt!r}; known: {sorted(_BY_ARCH)}")


def for_config(config, **kwargs):
    """Build the model a config (a dict, a path to ``config.json`` or to a folder holding one) describes."""
    if isinstance(config, (str, os.PathLike)):
        p = os.fspath(config)
        if os.path.isdir(p):
            p = os.path.join(p, "config.json")
        with open(p) as f:
            config = json.load(f)
    return model_class(config).from_config(config, **kwargs)


def registered() -> dict[str, type]:
    return dict(_BY_ARCH)
