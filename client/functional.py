"""``tw.functional``: the module ``torch.functional`` is, whose functions torch also gives as ``torch.<name>``: here
each is tensorwire's own ``tw.<name>`` (the same function object), so ``torch.functional.einsum(...)`` of a program
runs what ``torch.einsum(...)`` does.

torch's ``__all__`` less ``istft``, which tensorwire does not have (``tw.stft`` is here). ``F`` is
``tw.nn.functional``, as torch's module imports it under that name.
"""

from __future__ import annotations

from .array_extras import (
    atleast_1d,
    atleast_2d,
    atleast_3d,
    block_diag,
    broadcast_shapes,
    broadcast_tensors,
    cartesian_prod,
    cdist,
    meshgrid,
    unique_consecutive,
)
from .fft import stft
from .functions import METHOD_FUNCTIONS as _METHOD_FUNCTIONS
from .functions import einsum, tensordot
from .index_functions import unravel_index
from .linalg_legacy import lu, pca_lowrank, svd_lowrank
from .nn import functional as F  # noqa: F401, N812  (torch.functional's own ``F`` and ``Tensor``, which programs reach)
from .tensor import Tensor  # noqa: F401
from .torch_namespace import chain_matmul

#: torch's ``torch.norm``, ``torch.split`` and ``torch.unique``: the Tensor methods as functions
norm = _METHOD_FUNCTIONS["norm"]
split = _METHOD_FUNCTIONS["split"]
unique = _METHOD_FUNCTIONS["unique"]

__all__ = [
    "atleast_1d", "atleast_2d", "atleast_3d", "broadcast_shapes", "broadcast_tensors", "cartesian_prod", "block_diag",
    "cdist", "chain_matmul", "einsum", "lu", "norm", "meshgrid", "pca_lowrank", "split", "stft", "svd_lowrank",
    "tensordot", "unique", "unique_consecutive", "unravel_index",
]
