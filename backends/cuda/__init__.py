"""The CUDA backend (``cuda:N``): fragments run as fused CUDA kernels (NVRTC) on NVIDIA GPUs, matmuls on cuBLAS.

Needs cuda-python, the NVRTC and cuBLAS wheels (``pip install -e ".[cuda]"``) and an NVIDIA driver. Without them the
plugin still loads: ``cuda:0`` is listed as not available, with the reason the bindings or the driver gave, and a
worker asked for it exits at once with that reason. See :mod:`.runtime` for discovery, memory and kernels.
"""

from __future__ import annotations

from tensorwire.backends import hookimpl, torch_flags


@hookimpl
def tensorwire_backends():
    """The CUDA backend (its devices say whether cuda-python, a driver and a GPU are there)."""
    return [__getattr__("CUDABackend")()]


def __getattr__(name: str):
    # the backend class, imported when asked for (the hook above asks)
    if name == "CUDABackend":
        # (tw.backends imports this package for torch.backends.cuda's names below, which need none of it)
        # lazy: the compiled-device machinery
        from .backend import CUDABackend

        return CUDABackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# -- torch.backends.cuda's names, for programs written for PyTorch (see tensorwire.backends.torch_flags) ----------

matmul = torch_flags.cuda_matmul


def is_built() -> bool:
    """True: the client needs no CUDA build of its own (the cluster's workers run the kernels)."""
    return True


def is_available() -> bool:
    """Whether the connected cluster has a ``cuda`` device."""
    return torch_flags.cluster_has("cuda")
