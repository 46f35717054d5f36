"""The ``cuda`` backend's plugin class (:class:`CUDABackend`); the package's ``__init__`` registers it and holds
``torch.backends.cuda``'s names, so that those names import no compiled-device machinery."""

from __future__ import annotations

from tensorwire.backends.compiled_device import CompilingBackend


class CUDABackend(CompilingBackend):
    """NVIDIA GPUs through the CUDA driver API; every primitive op runs through the kernel compiler."""

    name = "cuda"

    def describe(self, gpu) -> str:
        return f"{gpu.name} (sm_{gpu.capability[0]}{gpu.capability[1]})"

    def device(self, gpu, driver):
        return self.runtime_module().CUDADevice(self, gpu, driver)


__all__ = ["CUDABackend"]
