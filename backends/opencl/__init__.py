"""The OpenCL backend (``opencl:N``): fragments run as fused OpenCL C kernels on any OpenCL 1.2 device.

Needs pyopencl (``pip install -e ".[opencl]"``) and an OpenCL driver (a GPU vendor's, or on a CPU PoCL:
``apt-get install pocl-opencl-icd``). Without them the plugin still loads: ``opencl:0`` is listed as not
available, with the reason. See :mod:`.discovery` for discovery and :mod:`.runtime` for buffers and kernels.
"""

from __future__ import annotations

from tensorwire.backends.compiled_device import CompilingBackend
from tensorwire.backends.hookspecs import hookimpl

from .discovery import discover


class OpenCLBackend(CompilingBackend):
    """OpenCL devices; every primitive op runs through the kernel compiler (composites fuse)."""

    name = "opencl"

    def discover(self):
        return discover()

    def device(self, dev, driver):
        return self.runtime_module().OpenCLDevice(self, dev.index, dev.platform, dev.device)


@hookimpl
def tensorwire_backends():
    """The OpenCL backend (its devices say whether pyopencl and a driver are there)."""
    return [OpenCLBackend()]
