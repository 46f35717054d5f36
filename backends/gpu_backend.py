"""The plugin side the CUDA and ROCm backends share: every primitive compiled, discovery, opening a device.

A subclass names its backend and says how to discover its GPUs (:meth:`GPUBackend.discover`, returning a
:class:`Found`), how to describe one (:meth:`GPUBackend.describe`) and how to open one (:meth:`GPUBackend.device`).
Nothing here imports a GPU binding: the plugin imports on any host, and a host without the bindings, the runtime or
a GPU lists device 0 as unavailable with the reason discovery gave.
"""

from __future__ import annotations

from tensorwire.protocol.errors import DeviceError
from tensorwire.protocol.ops import primitives

from .base import Backend, DeviceInfo


class Found:
    """The result of discovery: the GPUs, or why there are none (``driver``: the binding module the GPUs need)."""

    def __init__(self, gpus: list, reason: str, driver=None):
        self.gpus, self.reason, self.driver = gpus, reason, driver


def _no_kernel(*args, **kwargs):  # pragma: no cover - the compiler runs every op; see GPUDevice.run_step
    raise DeviceError("GPU backends run ops through their kernel compiler")


class GPUBackend(Backend):
    """A GPU backend whose every primitive op runs through the kernel compiler."""

    def __init__(self):
        super().__init__()
        self.kernels.update({op: _no_kernel for op in primitives()})  # all of them, compiled

    @property
    def native(self) -> frozenset[str]:
        return frozenset()  # composites always run through their decompositions (and fuse)

    def discover(self) -> Found:
        """This host's GPUs of the backend's kind (cached by the runtime module)."""
        raise NotImplementedError

    def describe(self, gpu) -> str:
        """The name ``devices()`` shows for ``gpu``."""
        raise NotImplementedError

    def device(self, gpu, driver):
        """Open ``gpu`` (a :class:`~.gpu_runtime.GPUDevice`)."""
        raise NotImplementedError

    def devices(self) -> list[DeviceInfo]:
        found = self.discover()
        if not found.gpus:
            return [DeviceInfo(self.name, 0, False, found.reason)]
        return [DeviceInfo(self.name, g.index, True, "", self.describe(g), g.memory_bytes) for g in found.gpus]

    def open(self, index: int):
        found = self.discover()
        if not found.gpus:
            raise DeviceError(f"{self.name}:{index} is not available: {found.reason}")
        if not 0 <= index < len(found.gpus):
            raise DeviceError(f"{self.name}:{index} does not exist; this host offers "
                              f"{', '.join(f'{self.name}:{g.index}' for g in found.gpus)}")
        return self.device(found.gpus[index], found.driver)


__all__ = ["Found", "GPUBackend"]
