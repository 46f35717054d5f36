"""PyTorch's ``torch.backends`` names for programs written for PyTorch (``import tensorwire as torch``).

``torch.backends.cuda.matmul.allow_tf32 = True``, ``torch.backends.cudnn.benchmark = True`` and the like are
accepted settings: tensorwire's kernels never use TF32 or reduced-precision reductions (results stay those of the
conformance suite), and there is no cuDNN to tune. ``torch.backends.mps.is_available()`` and
``torch.backends.cuda.is_built()`` answer from the connected cluster, like ``tw.cuda.is_available()``
(:func:`tensorwire.backends.lazy_plugin.torch_availability`: this module, which ``tensorwire.backends`` imports for
every service, needs nothing of the client).

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
