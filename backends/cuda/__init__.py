"""The CUDA backend (``cuda:N``): fragments run as fused CUDA kernels (NVRTC) on NVIDIA GPUs, matmuls on cuBLAS.

Needs cuda-python, the NVRTC and cuBLAS wheels (``pip install -e ".[cuda]"``) and an NVIDIA driver. Without them the
plugin still loads: ``cuda:0`` is listed as not available, with the reason the bindings or the driver gave, and a
worker asked for it exits at once with that reason. See :mod:`.runtime` for discovery, memory and kernels.
"""

from __future__ import annotations

from tensorwire.backends import hookimpl, torch_flags
from tensorwire.backends.base import Backend, DeviceInfo
from tensorwire.protocol.errors import DeviceError
from tensorwire.protocol.ops import primitives


def _no_kernel(*args, **kwargs):  # pragma: no cover - the compiler runs every op; see CUDADevice.run_step
    raise DeviceError("cuda runs ops through its kernel compiler")


class CUDABackend(Backend):
    """NVIDIA GPUs through the CUDA driver API; every primitive op runs through the kernel compiler."""

    name = "cuda"

    def __init__(self):
        super().__init__()
        self.kernels.update({op: _no_kernel for op in primitives()})  # all of them, compiled

    @property
    def native(self) -> frozenset[str]:
        return frozenset()  # composites always run through their decompositions (and fuse)

    def devices(self) -> list[DeviceInfo]:
        from .runtime import discover

        found = discover()
        if not found.gpus:
            return [DeviceInfo(self.name, 0, False, found.reason)]
        return [DeviceInfo(self.name, g.index, True, "", f"{g.name} (sm_{g.capability[0]}{g.capability[1]})",
                           g.memory_bytes) for g in found.gpus]

    def open(self, index: int):
        from .runtime import CUDADevice, discover

        found = discover()
        if not found.gpus:
            raise DeviceError(f"{self.name}:{index} is not available: {found.reason}")
        if not 0 <= index < len(found.gpus):
            raise DeviceError(f"{self.name}:{index} does not exist; this host offers "
                              f"{', '.join(f'{self.name}:{g.index}' for g in found.gpus)}")
        return CUDADevice(self, found.gpus[index], found.driver)


@hookimpl
def tensorwire_backends():
    """The CUDA backend (its devices say whether cuda-python, a driver and a GPU are there)."""
    return [CUDABackend()]


# -- torch.backends.cuda's names, for programs written for PyTorch (see tensorwire.backends.torch_flags) ----------

matmul = torch_flags.cuda_matmul


def is_built() -> bool:
    """True: the client needs no CUDA build of its own (the cluster's workers run the kernels)."""
    return True


def is_available() -> bool:
    """Whether the connected cluster has a ``cuda`` device."""
    return torch_flags.cluster_has("cuda")
