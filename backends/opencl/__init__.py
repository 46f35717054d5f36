"""The OpenCL backend (``opencl:N``): fragments run as fused OpenCL C kernels on any OpenCL 1.2 device.

Needs pyopencl (``pip install -e ".[opencl]"``) and an OpenCL driver (a GPU vendor's, or on a CPU PoCL:
``apt-get install pocl-opencl-icd``). Without them the plugin still loads: ``opencl:0`` is listed as not
available, with the reason. See :mod:`.runtime` for discovery, buffers and kernels.
"""

from __future__ import annotations

from tensorwire.backends import hookimpl
from tensorwire.backends.base import Backend, DeviceInfo
from tensorwire.protocol.errors import DeviceError
from tensorwire.protocol.ops import primitives


def _no_kernel(*args, **kwargs):  # pragma: no cover - the compiler runs every op; see OpenCLDevice.run_step
    raise DeviceError("opencl runs ops through its kernel compiler")


class OpenCLBackend(Backend):
    """OpenCL devices; every primitive op runs through the kernel compiler (composites fuse)."""

    name = "opencl"

    def __init__(self):
        super().__init__()
        self.kernels.update({op: _no_kernel for op in primitives()})  # all of them, compiled

    @property
    def native(self) -> frozenset[str]:
        return frozenset()  # composites always run through their decompositions (and fuse)

    def devices(self) -> list[DeviceInfo]:
        from .runtime import discover

        found = discover()
        if not found.devices:
            return [DeviceInfo(self.name, 0, False, found.reason)]
        return [DeviceInfo(self.name, i, True, "", d.name.strip(), int(d.global_mem_size))
                for i, (_p, d) in enumerate(found.devices)]

    def open(self, index: int):
        from .runtime import OpenCLDevice, discover

        found = discover()
        if not found.devices:
            raise DeviceError(f"{self.name}:{index} is not available: {found.reason}")
        if not 0 <= index < len(found.devices):
            raise DeviceError(f"{self.name}:{index} does not exist; this host offers "
                              f"{', '.join(f'{self.name}:{i}' for i in range(len(found.devices)))}")
        platform, device = found.devices[index]
        return OpenCLDevice(self, index, platform, device)


@hookimpl
def tensorwire_backends():
    """The OpenCL backend (its devices say whether pyopencl and a driver are there)."""
    return [OpenCLBackend()]
