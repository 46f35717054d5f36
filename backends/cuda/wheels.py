"""The NVIDIA libraries the ``cuda`` extra installs as wheels (``nvidia-cublas-cu12``, ``nvidia-nccl-cu12``), found
by ``cuda.pathfinder`` (cuBLAS for :mod:`.cublas`, NCCL for :mod:`.nccl`)."""

from __future__ import annotations


def library_path(name: str) -> str:
    """The path of the wheel's shared library ``name`` (``"cublas"``, ``"nccl"``): ImportError without cuda-python,
    ``cuda.pathfinder``'s DynamicLibNotFoundError without the wheel."""
    import cuda.pathfinder as pathfinder  # lazy: cuda-python, the optional [cuda] extra (~60 ms to import)

    return pathfinder.load_nvidia_dynamic_lib(name).abs_path
