"""The MPS backend (``mps:0``): Apple GPUs through MLX (``pip install -e ".[mps]"``), PyTorch's ``mps`` device.

On the Metal GPU, fused chains run as the kernel compiler's Metal kernels through ``mx.fast.metal_kernel``
(:mod:`.metal_runtime`) and the rest as MLX operations (:mod:`.kernels`); on MLX's CPU device every primitive op is
MLX operations. Either way a fragment is evaluated once, at its outputs (:mod:`.runtime`).
Importing this plugin never imports MLX and never fails: without MLX, or without a Metal GPU, ``mps:0`` is listed
as not available with the reason. ``TENSORWIRE_MPS_ON_CPU=1`` runs the backend on MLX's CPU device, for testing on
hosts without Metal (Linux: ``pip install "mlx[cpu]"``).
"""

from __future__ import annotations

from tensorwire.backends.lazy_plugin import lazy_backend, torch_availability

#: the plugin's hook (one MPSBackend: its device says whether MLX and a Metal GPU are there), and ``MPSBackend``
#: imported when asked for (see :mod:`tensorwire.backends.lazy_plugin`)
tensorwire_backends, __getattr__ = lazy_backend(__name__, "MPSBackend")

# -- torch.backends.mps's names, for programs written for PyTorch (see tensorwire.backends.torch_flags) -----------

is_built, is_available = torch_availability("mps")
