"""The MPS backend (``mps:0``): Apple GPUs through MLX (``pip install -e ".[mps]"``), PyTorch's ``mps`` device.

On the Metal GPU, fused chains run as the kernel compiler's Metal kernels through ``mx.fast.metal_kernel``
(:mod:`.metal_runtime`) and the rest as MLX operations (:mod:`.kernels`); on MLX's CPU device every primitive op is
MLX operations. Either way a fragment is evaluated once, at its outputs (:mod:`.runtime`).
Importing this plugin never imports MLX and never fails: without MLX, or without a Metal GPU, ``mps:0`` is listed
as not available with the reason. ``TENSORWIRE_MPS_ON_CPU=1`` runs the backend on MLX's CPU device, for testing on
hosts without Metal (Linux: ``pip install "mlx[cpu]"``).
"""

from __future__ import annotations

from tensorwire.backends import hookimpl, torch_flags
from tensorwire.backends.compiled_device import DiscoveringBackend


class MPSBackend(DiscoveringBackend):
    """Apple GPUs through MLX; composites run through their decompositions unless a plugin adds a kernel. Every
    primitive has an MLX kernel, put in ``kernels`` with MLX when the device opens (plugin import stays cheap)."""

    name = "mps"
    compiles_primitives = True

    def discover(self):
        from .runtime import discover

        return discover()

    def device(self, dev, driver):
        from .runtime import open_device

        return open_device(self, dev)


@hookimpl
def tensorwire_backends():
    """The MPS backend (its device says whether MLX and a Metal GPU are there)."""
    return [MPSBackend()]


# -- torch.backends.mps's names, for programs written for PyTorch (see tensorwire.backends.torch_flags) -----------

def is_built() -> bool:
    """True: the client needs no MPS build of its own (the cluster's workers run the kernels)."""
    return True


def is_available() -> bool:
    """Whether the connected cluster has an ``mps`` device."""
    return torch_flags.cluster_has("mps")
