"""The ``mps`` backend's plugin class (:class:`MPSBackend`); the package's ``__init__`` registers it and holds
``torch.backends.mps``'s names, so that those names import no compiled-device machinery."""

from __future__ import annotations

from tensorwire.backends.compiled_device import DiscoveringBackend

from .runtime import discover, open_device


class MPSBackend(DiscoveringBackend):
    """Apple GPUs through MLX; composites run through their decompositions unless a plugin adds a kernel. Every
    primitive has an MLX kernel, put in ``kernels`` with MLX when the device opens (plugin import stays cheap)."""

    name = "mps"
    compiles_primitives = True

    def discover(self):
        return discover()

    def device(self, dev, driver):
        return open_device(self, dev)


__all__ = ["MPSBackend"]
