"""The CUDA backend (``cuda:N``): fragments run as fused CUDA kernels (NVRTC) on NVIDIA GPUs, matmuls on cuBLAS.

Needs cuda-python, the NVRTC and cuBLAS wheels (``pip install -e ".[cuda]"``) and an NVIDIA driver. Without them the
plugin still loads: ``cuda:0`` is listed as not available, with the reason the bindings or the driver gave, and a
worker asked for it exits at once with that reason. See :mod:`.runtime` for discovery, memory and kernels.
"""

from __future__ import annotations

from tensorwire.backends import torch_flags
from tensorwire.backends.lazy_plugin import lazy_backend, torch_availability

#: the plugin's hook (one CUDABackend: its devices say whether cuda-python, a driver and a GPU are there), and
#: ``CUDABackend`` imported when asked for (see :mod:`tensorwire.backends.lazy_plugin`)
tensorwire_backends, __getattr__ = lazy_backend(__name__, "CUDABackend")

# -- torch.backends.cuda's names, for programs written for PyTorch (see tensorwire.backends.torch_flags) ----------

matmul = torch_flags.cuda_matmul
is_built, is_available = torch_availability("cuda")
