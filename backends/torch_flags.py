"""PyTorch's ``torch.backends`` names for programs written for PyTorch (``import tensorwire as torch``).

``torch.backends.cuda.matmul.allow_tf32 = True``, ``torch.backends.cudnn.benchmark = True`` and the like are
accepted settings: tensorwire's kernels never use TF32 or reduced-precision reductions (results stay those of the
conformance suite), and there is no cuDNN to tune. ``torch.backends.mps.is_available()`` and
``torch.backends.cuda.is_built()`` answer from the connected cluster, like ``tw.cuda.is_available()``.

``cudnn``, ``mkldnn`` and ``opt_einsum`` are submodules of their own (``import torch.backends.cudnn as cudnn``), whose
settings are module attributes, as in torch; ``cuda`` and ``mps`` are the plugin packages, which take their settings
(``matmul``) from here.
"""

from __future__ import annotations

import contextlib


class Flags:
    """A namespace of settings a program may read and assign (``Flags(benchmark=False).benchmark = True``)."""

    def __init__(self, **defaults):
        self.__dict__.update(defaults)

    def __repr__(self) -> str:
        return f"Flags({', '.join(f'{k}={v!r}' for k, v in self.__dict__.items())})"


def cluster_has(kind: str) -> bool:
    """Whether the connected cluster has a ``kind`` device (asking connects, as any ``tw`` call does)."""
    # lazy: the client (accelerator -> session, tensor); every service imports this package (backends/__init__)
    from tensorwire.accelerator import device_indices

    return bool(device_indices(kind))


@contextlib.contextmanager
def flags_context(settings: dict, **values):
    """Set ``values`` in ``settings`` (a settings module's ``globals()``) inside the block, restore them after: the
    ``flags()`` context managers of :mod:`.cudnn`, :mod:`.mkldnn`, :mod:`.opt_einsum`."""
    saved = {k: settings[k] for k in values}
    settings.update(values)
    try:
        yield
    finally:
        settings.update(saved)


cuda_matmul = Flags(allow_tf32=False, allow_fp16_reduced_precision_reduction=True,
                    allow_bf16_reduced_precision_reduction=True)
