"""The CPU backend: numpy kernels, zero-copy buffers, registered through the ``tensorwire`` entry point."""

from __future__ import annotations

import os

import numpy as np

from tensorwire.backends import hookimpl
from tensorwire.backends.base import Backend, Device, DeviceInfo
from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DeviceError

from . import pooling  # noqa: F401  (registers the pooling kernels)
from .kernels import KERNELS, specialize

#: how many ``cpu:N`` devices a host offers (they share the host's memory and cores)
CPU_DEVICES = int(os.environ.get("TENSORWIRE_CPU_DEVICES", "8"))


class NumpyDevice(Device):
    """A CPU device: buffers are numpy arrays (read-only views of received frames where possible)."""

    def __init__(self, backend: Backend, index: int):
        self.backend = backend
        self.index = index

    def upload(self, array: np.ndarray) -> np.ndarray:
        return array

    def download(self, buf: np.ndarray) -> np.ndarray:
        if not isinstance(buf, np.ndarray):  # a numpy scalar from a full reduction
            return np.asarray(buf)
        return buf if buf.flags.c_contiguous else np.array(buf, order="C")  # (ascontiguousarray makes 0-d 1-d)

    def nbytes(self, buf: np.ndarray) -> int:
        return int(buf.nbytes)

    def meta(self, buf: np.ndarray):
        return tuple(buf.shape), D.from_numpy(buf.dtype)

    def specialize(self, step):
        if step.kernel is KERNELS.get(step.op):  # not replaced by a plugin kernel
            f = specialize(step)
            if f is not None:
                return f
        return super().specialize(step)


class NumpyBackend(Backend):
    """Interprets fragments with numpy. Subclass it to build a numpy-based plugin backend."""

    name = "cpu"

    def __init__(self):
        super().__init__()
        self.kernels.update(KERNELS)

    def devices(self) -> list[DeviceInfo]:
        return [DeviceInfo(self.name, i, True, "", f"numpy {np.__version__}") for i in range(CPU_DEVICES)]

    def open(self, index: int) -> NumpyDevice:
        if not 0 <= index < CPU_DEVICES:
            raise DeviceError(f"{self.name}:{index} does not exist; this host offers {self.name}:0 .. "
                              f"{self.name}:{CPU_DEVICES - 1} (TENSORWIRE_CPU_DEVICES)")
        return NumpyDevice(self, index)


@hookimpl
def tensorwire_backends():
    """The built-in CPU backend."""
    return [NumpyBackend()]
