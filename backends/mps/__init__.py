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


@hookimpl
def tensorwire_backends():
    """The MPS backend (its device says whether MLX and a Metal GPU are there)."""
    return [__getattr__("MPSBackend")()]


def __getattr__(name: str):
    # the backend class, imported when asked for (the hook above asks)
    if name == "MPSBackend":
        # (tw.backends imports this package for torch.backends.mps's names below, which need none of it)
        # lazy: the compiled-device machinery
        from .backend import MPSBackend

        return MPSBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# -- torch.backends.mps's names, for programs written for PyTorch (see tensorwire.backends.torch_flags) -----------

def is_built() -> bool:
    """True: the client needs no MPS build of its own (the cluster's workers run the kernels)."""
    return True


def is_available() -> bool:
    """Whether the connected cluster has an ``mps`` device."""
    return torch_flags.cluster_has("mps")
