"""``tw.nn.utils.skip_init``: a module made without running its parameters' initialisation."""

from __future__ import annotations

import inspect

from ..module import Module

__all__ = ["skip_init"]


def skip_init(module_cls: type, *args, **kwargs) -> Module:
    """``module_cls(*args, **kwargs)`` whose parameters and buffers are to be treated as uninitialised (torch's
    ``skip_init``: the class must take a ``device`` argument). tensorwire has no ``meta`` device to build on, so the
    module is built on ``device`` (default ``cpu``) directly: its initialisation still runs (the values are valid
    but, as torch says of its result, meant to be overwritten)."""
    if not (isinstance(module_cls, type) and issubclass(module_cls, Module)):
        raise RuntimeError(f"Expected a Module; got {module_cls}")
    if "device" not in inspect.signature(module_cls).parameters:
        raise RuntimeError("Module must support a 'device' arg to skip initialization")
    kwargs["device"] = kwargs.pop("device", "cpu")
    return module_cls(*args, **kwargs)
