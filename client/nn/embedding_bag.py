"""``nn.functional.embedding``'s options and ``embedding_bag`` (issue 33), composed of tensor methods: the rows of
``weight`` at ``input``, renormalised in place where ``max_norm`` says (torch's ``embedding_renorm_``), their
gradient scaled by each index's frequency in the batch (``scale_grad_by_freq``), and reduced by bag (``sum``,
``mean``, ``max``) for ``embedding_bag``. Re-exported by :mod:`tensorwire.nn.functional`. The module
:class:`EmbeddingBag` (torch's, over ``embedding_bag``) lives here too.
"""

from __future__ import annotations

from tensorwire.array_extras import searchsorted
from tensorwire.autograd_engine import no_grad
from tensorwire.creation import arange, empty
from tensorwire.functions import where
from tensorwire.protocol.errors import ShapeError
from tensorwire.tensor import Tensor

from . import init
from .module import Module
from .parameter import Parameter

__all__ = ["embedding_rows", "embedding_bag", "EmbeddingBag"]


def _renorm_(weight: Tensor, idx: Tensor, max_norm: float, norm_type: float) -> None:
    """Scale, in place and outside autograd, the rows of ``weight`` that ``idx`` names whose ``norm_type``-norm is
    above ``max_norm`` down to ``max_norm`` (torch's factor ``max_norm / (norm + 1e-7)``)."""
    if not idx.numel():
        return
    with no_grad():
        data = weight.data
        rows = data.index_select(0, idx)
        norm = rows.norm(p=norm_type, dim=1, keepdim=True)
        scale = where(norm > max_norm, max_norm / (norm + 1e-7), norm.new_ones(()))
        data.copy_(data.index_copy(0, idx, rows * scale))  # (a repeated index writes the same row twice)


def _by_freq(out: Tensor, idx: Tensor) -> Tensor:
    """``out`` (rows picked by ``idx``) whose gradient is divided by how often each row's index occurs in ``idx``
    (torch's ``scale_grad_by_freq``): the value is ``out``'s, the gradient ``g / count``."""
    if not out.requires_grad or not idx.numel():
        return out
    count = (idx.unsqueeze(1) == idx.unsqueeze(0)).sum(1).to(out.dtype).unsqueeze(1)
    fixed = out.detach()
    return fixed + (out - fixed) / count


def embedding_rows(idx: Tensor, weight: Tensor, padding_idx: int | None, max_norm, norm_type: float,
                   scale_grad_by_freq: bool) -> Tensor:
    """The rows of ``weight`` at the flat indices ``idx`` (``(len(idx), dim)``), with ``embedding``'s options: no
    gradient at ``padding_idx``, ``max_norm`` renormalising ``weight`` in place first, ``scale_grad_by_freq``."""
    if max_norm is not None:
        _renorm_(weight, idx, float(max_norm), float(norm_type))
    out = weight.index_select(0, idx)
    if padding_idx is not None and weight.requires_grad:
        pi = padding_idx if padding_idx >= 0 else weight.shape[0] + padding_idx
        out = where((idx == pi).unsqueeze(1), out.detach(), out)
    if scale_grad_by_freq:
        out = _by_freq(out, idx)
    return out


def _bags(input: Tensor, offsets: Tensor | None, include_last_offset: bool) -> tuple[Tensor, Tensor, int]:  # noqa: A002
    """The flat indices, each one's bag (``-1``: in no bag) and the number of bags."""
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError("if input is 2D, then offsets has to be None, as input is treated is a mini-batch of "
                             "fixed length sequences.")
        b, n = input.shape
        pos = arange(b * n, device=input._dev, session=input._s)
        return input.reshape(-1), pos // max(n, 1), b
    if input.ndim != 1:
        raise ShapeError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension {input.ndim}")
    if offsets is None:
        raise ValueError("offsets has to be a 1D Tensor but got None")
    if offsets.ndim != 1:
        raise ShapeError("offsets has to be a 1D Tensor")
    offsets = offsets.to(input.dtype)
    pos = arange(input.shape[0], device=input._dev, session=input._s)
    starts = offsets[:-1] if include_last_offset else offsets
    nbags = starts.shape[0]
    if not nbags:
        return input, pos * 0 - 1, 0
    bag = searchsorted(starts, pos, right=True) - 1
    if include_last_offset:
        bag = where(pos < offsets[-1], bag, bag.new_full((), -1))
    return input, bag, nbags


def embedding_bag(input: Tensor, weight: Tensor, offsets: Tensor | None = None, max_norm=None,  # noqa: A002
                  norm_type: float = 2, scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False,
                  per_sample_weights: Tensor | None = None, include_last_offset: bool = False,
                  padding_idx: int | None = None) -> Tensor:
    """Sums, means or maxima of bags of embeddings (torch's ``F.embedding_bag``): the bags are the rows of a 2-D
    ``input``, or the runs of a 1-D ``input`` that ``offsets`` starts. An index at ``padding_idx`` is left out of its
    bag; an empty bag gives zeros. ``sparse=True`` gives the same values as a dense gradient (README, the table of
    differences)."""
    if mode not in ("sum", "mean", "max"):
        raise ValueError(f"mode has to be one of sum, mean or max, got {mode!r}")
    if per_sample_weights is not None:
        if mode != "sum":
            raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. per_sample_weights is only "
                                      f"supported for mode='sum' (got mode='{mode}'). Please open a feature request "
                                      "on GitHub.")
        if tuple(per_sample_weights.shape) != tuple(input.shape):
            raise ShapeError(f"embedding_bag: per_sample_weights of shape {list(per_sample_weights.shape)} must "
                             f"have input's shape {list(input.shape)}")
    if input.dtype.is_floating_point or input.dtype.name == "bool":
        raise TypeError(f"embedding_bag: input must be an integer tensor, got {input.dtype.name}")
    idx, bag, nbags = _bags(input, offsets, include_last_offset)
    dim = weight.shape[1]
    rows = embedding_rows(idx, weight, None, max_norm, norm_type, scale_grad_by_freq)
    valid = bag >= 0
    if padding_idx is not None:
        pi = padding_idx if padding_idx >= 0 else weight.shape[0] + padding_idx
        valid = valid & (idx != pi)
    into = where(valid, bag, bag.new_zeros(()))
    keep = valid.unsqueeze(1)
    zeros = weight.new_zeros((nbags, dim))
    if mode == "max":
        lows = where(keep, rows, rows.new_full((), float("-inf")))
        top = zeros.scatter_reduce(0, into.unsqueeze(1).expand(idx.shape[0], dim), lows, "amax", include_self=False)
        count = weight.new_zeros((nbags,)).index_add(0, into, valid.to(weight.dtype))
        return where(count.unsqueeze(1) > 0, top, zeros)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.reshape(-1).to(rows.dtype).unsqueeze(1)
    total = zeros.index_add(0, into, where(keep, rows, rows.new_zeros(())))
    if mode == "sum":
        return total
    count = weight.new_zeros((nbags,)).index_add(0, into, valid.to(weight.dtype))
    return total / count.clamp(min=1).unsqueeze(1)


class EmbeddingBag(Module):
    """Sums, means or maxima of bags of embeddings without materialising the rows in between (torch's
    ``nn.EmbeddingBag``, over :func:`embedding_bag`): ``forward(input, offsets=None, per_sample_weights=None)``.
    ``weight`` ``[num_embeddings, embedding_dim]`` is drawn from N(0, 1), its ``padding_idx`` row zero."""

    def __init__(self, num_embeddings: int, embedding_dim: int, max_norm: float | None = None,
                 norm_type: float = 2.0, scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False,
                 _weight: Tensor | None = None, include_last_offset: bool = False, padding_idx: int | None = None,
                 device=None, dtype=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.max_norm, self.norm_type, self.scale_grad_by_freq = max_norm, norm_type, scale_grad_by_freq
        if padding_idx is not None:
            if padding_idx > 0 and padding_idx >= num_embeddings:
                raise AssertionError("padding_idx must be within num_embeddings")
            if padding_idx < 0:
                if padding_idx < -num_embeddings:
                    raise AssertionError("padding_idx must be within num_embeddings")
                padding_idx = num_embeddings + padding_idx
        self.padding_idx = padding_idx
        if _weight is None:
            self.weight = Parameter(empty(num_embeddings, embedding_dim, dtype=dtype, device=device))
            self.reset_parameters()
        else:
            if list(_weight.shape) != [num_embeddings, embedding_dim]:
                raise AssertionError("Shape of weight does not match num_embeddings and embedding_dim")
            self.weight = Parameter(_weight)
        self.mode = mode
        self.sparse = sparse
        self.include_last_offset = include_last_offset

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with no_grad():
                self.weight[self.padding_idx] = 0

    def forward(self, input: Tensor, offsets: Tensor | None = None,  # noqa: A002
                per_sample_weights: Tensor | None = None) -> Tensor:
        return embedding_bag(input, self.weight, offsets, self.max_norm, self.norm_type, self.scale_grad_by_freq,
                             self.mode, self.sparse, per_sample_weights, self.include_last_offset, self.padding_idx)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm!r}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type!r}"
        if self.scale_grad_by_freq is not False:
            s += f", scale_grad_by_freq={self.scale_grad_by_freq!r}"
        s += f", mode={self.mode!r}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx!r}"
        return s

    @classmethod
    def from_pretrained(cls, embeddings: Tensor, freeze: bool = True, max_norm: float | None = None,
                        norm_type: float = 2.0, scale_grad_by_freq: bool = False, mode: str = "mean",
                        sparse: bool = False, include_last_offset: bool = False,
                        padding_idx: int | None = None) -> EmbeddingBag:
        """An EmbeddingBag holding ``embeddings`` (``[rows, cols]``), frozen unless ``freeze=False``."""
        if embeddings.ndim != 2:
            raise AssertionError("Embeddings parameter is expected to be 2-dimensional")
        rows, cols = embeddings.shape
        bag = cls(num_embeddings=rows, embedding_dim=cols, _weight=embeddings, max_norm=max_norm,
                  norm_type=norm_type, scale_grad_by_freq=scale_grad_by_freq, mode=mode, sparse=sparse,
                  include_last_offset=include_last_offset, padding_idx=padding_idx)
        bag.weight.requires_grad = not freeze
        return bag
