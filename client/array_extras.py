"""torch's derived shape, indexing and set functions, each composed of existing tensor methods (issue 33):
``atleast_*d``, ``block_diag``, ``meshgrid``, ``broadcast_tensors``, ``rot90``, ``diag_embed``, the ``*_scatter``
family, ``as_strided`` (a view step of its own), ``take``/``put``, ``index_copy``, ``masked_scatter``,
``Tensor.unfold``, ``repeat_interleave``, ``isin``, ``bucketize``/``searchsorted``, ``cov``/``corrcoef``, ``cdist``,
and the ``*_copy`` forms of the views; ``scatter_reduce`` and ``index_reduce`` are :mod:`.scatter_reductions`'s.

:data:`FUNCTIONS` are exported as ``tw.<name>``; :data:`METHODS` become ``Tensor`` methods (:func:`install`).
"""

from __future__ import annotations

import builtins
import itertools
import math

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DTypeError, ShapeError
from tensorwire.protocol.shapes import broadcast, norm_dim

from . import _install
from . import combine as _combine
from . import creation as _creation
from . import indexing as _indexing
from . import views as V
from ._aliases import alias, rebind
from .autograd_engine import Function
from .complex_ops import conj as _conj
from .grid_sampling import grid_sampler_2d, grid_sampler_3d
from .padding import pad as _pad
from .scatter_reductions import index_reduce, scatter_reduce
from .tensor import Size, Tensor, _size
from .views import ViewStep, mark_view, root_position
from .zero_grads import zero_grad_from


def _arange(like: Tensor, n: int, start: int = 0, step: int = 1) -> Tensor:
    return _creation.arange(start, start + n * step, step, device=like._dev, session=like._s)


def _where(cond, a, b) -> Tensor:
    return _combine.where(cond, a, b)


def _cat(ts, dim=0) -> Tensor:
    return _combine.cat(ts, dim)


def _stack(ts, dim=0) -> Tensor:
    return _combine.stack(ts, dim)


def _tensors(args) -> list:
    return list(args[0]) if len(args) == 1 and isinstance(args[0], (list, tuple)) else list(args)


# -- shapes ----------------------------------------------------------------------------------------------------------

def _atleast(n: int, args):
    ts = _tensors(args)
    out = []
    for t in ts:
        if t.ndim < n:
            t = t.reshape(*{0: (1, 1, 1), 1: (1, t.numel(), 1), 2: (*t.shape, 1)}[t.ndim][3 - n:]) \
                if n == 3 else t.reshape(*([1] * (n - t.ndim)), *t.shape)
        out.append(t)
    return out[0] if len(args) == 1 and isinstance(args[0], Tensor) else tuple(out)


def atleast_1d(*tensors):
    """Each tensor with at least one dim (0-d becomes shape (1,))."""
    return _atleast(1, tensors)


def atleast_2d(*tensors):
    """Each tensor with at least two dims (new dims in front)."""
    return _atleast(2, tensors)


def atleast_3d(*tensors):
    """Each tensor with at least three dims (a 1-D (n,) becomes (1, n, 1), a 2-D (m, n) becomes (m, n, 1))."""
    return _atleast(3, tensors)


def broadcast_shapes(*shapes) -> Size:
    """The shape all of ``shapes`` broadcast to."""
    out: tuple = ()
    for s in shapes:
        out = broadcast(out, (int(s),) if isinstance(s, int) else tuple(s))
    return Size(out)


def broadcast_tensors(*tensors) -> tuple:
    """Every tensor expanded to their common shape."""
    ts = _tensors(tensors)
    shape = broadcast_shapes(*[t.shape for t in ts])
    return tuple(t.expand(*shape) for t in ts)


def meshgrid(*tensors, indexing: str | None = None) -> tuple:
    """Coordinate grids of 1-D (or 0-d) tensors; ``indexing="ij"`` (torch's default) or ``"xy"``."""
    ts = _tensors(tensors)
    indexing = indexing or "ij"
    if indexing not in ("ij", "xy"):
        raise ValueError(f"torch.meshgrid: indexing must be one of \"xy\" or \"ij\", but received: {indexing}")
    for t in ts:
        if t.ndim > 1:
            raise ShapeError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got: {t.ndim}D")
    if builtins.len({t.dtype for t in ts}) > 1:
        raise DTypeError("torch.meshgrid: Expected all tensors in the tensor list to have the same dtype")
    flat = [t.reshape(-1) for t in ts]
    swap = indexing == "xy" and builtins.len(flat) >= 2
    if swap:
        flat[0], flat[1] = flat[1], flat[0]
    shape = [t.shape[0] for t in flat]
    n = builtins.len(flat)
    out = [t.reshape(*([1] * i), -1, *([1] * (n - i - 1))).expand(*shape) for i, t in enumerate(flat)]
    if swap:
        out[0], out[1] = out[1], out[0]
    return tuple(out)


def cartesian_prod(*tensors) -> Tensor:
    """Every combination of the 1-D tensors' elements, one row each."""
    ts = _tensors(tensors)
    if builtins.len(ts) == 1:
        return ts[0]
    return _stack([g.reshape(-1) for g in meshgrid(*ts, indexing="ij")], 1)


def combinations(input: Tensor, r: int = 2, with_replacement: bool = False) -> Tensor:  # noqa: A002
    """The length-``r`` combinations of a 1-D tensor's elements, one row each (itertools' order)."""
    if input.ndim != 1:
        raise ShapeError(f"Expect a 1D vector, but got shape {list(input.shape)}")
    n = input.shape[0]
    gen = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    rows = list(gen(range(n), r)) if r > 0 else []
    if not rows:
        return zero_grad_from(input.new_zeros((0,) if r == 0 else (0, r)), input)
    idx = input._operand(np.asarray(rows, dtype=np.int64))
    return input.index_select(0, idx.reshape(-1)).reshape(builtins.len(rows), r)


def column_stack(tensors) -> Tensor:
    """The tensors as columns: 0-d and 1-D ones become (n, 1), then joined along dim 1."""
    return _cat([t.reshape(t.numel(), 1) if t.ndim <= 1 else t for t in tensors], 1)


def dstack(tensors) -> Tensor:
    """The tensors joined along dim 2 after :func:`atleast_3d`."""
    return _cat(list(atleast_3d(*tensors)), 2)


def _nsplit(name: str, input: Tensor, sections, dim: int, min_dims: int):  # noqa: A002
    if input.ndim < min_dims:
        raise ShapeError(f"torch.{name} requires a tensor with at least {min_dims} dimension, but got a tensor with "
                         f"{input.ndim} dimensions!")
    if isinstance(sections, int) and input.shape[dim] % sections:
        raise ShapeError(f"torch.{name} attempted to split along dimension {dim}, but the size of the dimension "
                         f"{input.shape[dim]} is not divisible by the split_size {sections}!")
    return input.tensor_split(sections, dim)


def hsplit(input: Tensor, sections):  # noqa: A002
    """Split along dim 1 (dim 0 for 1-D) by a count or indices."""
    return _nsplit("hsplit", input, sections, 1 if input.ndim > 1 else 0, 1)


def vsplit(input: Tensor, sections):  # noqa: A002
    """Split along dim 0 by a count or indices (at least 2-D)."""
    return _nsplit("vsplit", input, sections, 0, 2)


def dsplit(input: Tensor, sections):  # noqa: A002
    """Split along dim 2 by a count or indices (at least 3-D)."""
    return _nsplit("dsplit", input, sections, 2, 3)


def split_with_sizes(input: Tensor, split_sizes, dim: int = 0):  # noqa: A002
    """Split into pieces of the given sizes along ``dim``."""
    if builtins.sum(split_sizes) != input.shape[dim]:
        raise ShapeError(f"split_with_sizes expects split_sizes to sum exactly to {input.shape[dim]} (input tensor's "
                         f"size at dimension {dim}), but got split_sizes={list(split_sizes)}")
    return input.split(list(split_sizes), dim)


def rot90(input: Tensor, k: int = 1, dims=(0, 1)) -> Tensor:  # noqa: A002
    """Rotate by 90° ``k`` times in the plane of ``dims`` (from the first towards the second)."""
    dims = list(dims)
    if builtins.len(dims) != 2:
        raise ShapeError(f"expected total rotation dims == 2, but got dims = {builtins.len(dims)}")
    if input.ndim < 2:
        raise ShapeError(f"expected total dims >= 2, but got total dims = {input.ndim}")
    d0, d1 = norm_dim(dims[0], input.ndim), norm_dim(dims[1], input.ndim)
    if d0 == d1:
        raise ShapeError(f"expected rotation dims to be different, but got dim0 = {d0} and dim1 = {d1}")
    k %= 4
    if k == 1:
        return input.flip(d1).transpose(d0, d1)
    if k == 2:
        return input.flip(d0, d1)
    if k == 3:
        return input.flip(d0).transpose(d0, d1)
    return input.clone()


def sum_to_size(self: Tensor, *size) -> Tensor:
    """Sum the dims that ``size`` broadcasts over (``self`` must expand from ``size``'s shape)."""
    size = _size(size)
    if not size:  # torch's at::sum_to: to () is the whole sum
        return self.sum()
    lead = self.ndim - builtins.len(size)
    if lead < 0 or broadcast(tuple(size), tuple(self.shape)) != tuple(self.shape):
        raise ShapeError(f"size {list(size)} is not expandable to size {list(self.shape)}")
    dims = list(range(lead)) + [lead + i for i, s in enumerate(size) if s == 1 and self.shape[lead + i] != 1]
    out = self.sum(dims, keepdim=True) if dims else self
    return out.reshape(*size) if lead or dims else out.clone()


# -- diagonals -------------------------------------------------------------------------------------------------------

def _diag_values(src: Tensor, rows: int, cols: int, offset: int) -> tuple[Tensor, Tensor]:
    """(mask, values) of shape (..., rows, cols): the offset diagonal's positions, and ``src`` (..., L) laid out so
    that each such position holds its element."""
    i = _arange(src, rows).reshape(rows, 1)
    j = _arange(src, cols).reshape(1, cols)
    mask = (j - i) == offset
    n = rows if offset >= 0 else cols
    L = src.shape[-1]
    v = src if L >= n else _pad(src, [0, n - L])
    v = v.narrow(-1, 0, n)
    vals = v.unsqueeze(-1).expand(*v.shape, cols) if offset >= 0 else v.unsqueeze(-2).expand(*v.shape[:-1], rows, n)
    return mask, vals


def diag_embed(input: Tensor, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:  # noqa: A002
    """Tensors whose (dim1, dim2) planes have ``input``'s last dim on their ``offset`` diagonal, zeros elsewhere."""
    nd = input.ndim + 1
    d1, d2 = norm_dim(dim1, nd), norm_dim(dim2, nd)
    if d1 == d2:
        raise ShapeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    m = input.shape[-1] + builtins.abs(offset)
    mask, vals = _diag_values(input, m, m, offset)
    out = _where(mask, vals, input.new_zeros(()))
    return out.movedim((nd - 2, nd - 1), (d1, d2)) if (d1, d2) != (nd - 2, nd - 1) else out


def diagflat(input: Tensor, offset: int = 0) -> Tensor:  # noqa: A002
    """A 2-D tensor with the flattened input on its ``offset`` diagonal."""
    return diag_embed(input.reshape(-1), offset)


def diagonal_scatter(input: Tensor, src: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:  # noqa: A002
    """``input`` with its (offset, dim1, dim2) diagonal replaced by ``src``."""
    d1, d2 = norm_dim(dim1, input.ndim), norm_dim(dim2, input.ndim)
    expect = tuple(input.diagonal(offset, d1, d2).shape)
    if tuple(src.shape) != expect:
        raise ShapeError(f"diagonal_scatter: src has shape {list(src.shape)}, the diagonal {list(expect)}")
    x = input.movedim((d1, d2), (-2, -1))
    mask, vals = _diag_values(src.to(input.dtype), x.shape[-2], x.shape[-1], offset)
    return _where(mask, vals, x).movedim((-2, -1), (d1, d2))


def select_scatter(input: Tensor, src: Tensor, dim: int, index: int) -> Tensor:  # noqa: A002
    """``input`` with ``input.select(dim, index)`` replaced by ``src``."""
    d = norm_dim(dim, input.ndim)
    n = input.shape[d]
    i = index + n if index < 0 else index
    if not 0 <= i < n:
        raise IndexError(f"select_scatter(): index {index} out of range for tensor of size {list(input.shape)} at "
                         f"dimension {dim}")
    parts = [input.narrow(d, 0, i), src.to(input.dtype).unsqueeze(d), input.narrow(d, i + 1, n - i - 1)]
    return _cat(parts, d)


def slice_scatter(input: Tensor, src: Tensor, dim: int = 0, start=None, end=None, step: int = 1) -> Tensor:  # noqa: A002
    """``input`` with the slice ``start:end:step`` of ``dim`` replaced by ``src``."""
    d = norm_dim(dim, input.ndim)
    idx = list(range(input.shape[d]))[slice(start, end, step)]
    shape = [1] * input.ndim
    shape[d] = builtins.len(idx)
    if tuple(src.shape) != tuple(input.shape[:d]) + (builtins.len(idx),) + tuple(input.shape[d + 1:]):
        raise ShapeError(f"slice_scatter: src has shape {list(src.shape)}, the slice a different one")
    if not idx:
        return input.clone()
    index = input._operand(np.asarray(idx, dtype=np.int64)).reshape(*shape).expand(*src.shape)
    return input.scatter(d, index, src.to(input.dtype))


# -- gathers and scatters --------------------------------------------------------------------------------------------

def _wrap(index: Tensor, n: int) -> Tensor:
    return _where(index < 0, index + n, index)


def take(input: Tensor, index: Tensor) -> Tensor:  # noqa: A002
    """``input`` read as 1-D at ``index`` (negative indices count from the end), shaped like ``index``."""
    n = input.numel()
    flat = input.reshape(-1)
    if index.numel() == 0:
        return flat.narrow(0, 0, 0).reshape(*index.shape)
    return flat.gather(0, _wrap(index.reshape(-1), n)).reshape(*index.shape)


def put(input: Tensor, index: Tensor, source: Tensor, accumulate: bool = False) -> Tensor:  # noqa: A002
    """A copy of ``input`` with ``source`` written (or added) at the flat positions ``index``."""
    if index.numel() != source.numel():
        raise ShapeError(f"put_(): Expected source and index to have the same number of elements, but got "
                         f"source.numel() = {source.numel()}, index.numel() = {index.numel()}")
    if index.numel() == 0:
        return zero_grad_from(input.clone(), source)
    flat = input.reshape(-1)
    idx = _wrap(index.reshape(-1), flat.shape[0])
    src = source.reshape(-1).to(input.dtype)
    out = flat.scatter_add(0, idx, src) if accumulate else flat.scatter(0, idx, src)
    return out.reshape(*input.shape)


def index_copy(input: Tensor, dim: int, index: Tensor, source: Tensor) -> Tensor:  # noqa: A002
    """A copy of ``input`` with ``source``'s slices written at ``index`` along ``dim``."""
    if input.ndim == 0:
        return zero_grad_from(source.reshape(()).to(input.dtype).clone(), input)
    d = norm_dim(dim, input.ndim)
    src = source if source.ndim else source.reshape(1)
    shape = [1] * input.ndim
    shape[d] = index.numel()
    idx = index.reshape(*shape).expand(*src.shape)
    return input.scatter(d, idx, src.to(input.dtype))


def index_copy_(input: Tensor, dim: int, index: Tensor, source: Tensor) -> Tensor:  # noqa: A002
    """:func:`index_copy` in place."""
    return input._assign(index_copy(input, dim, index, source))


def masked_scatter(input: Tensor, mask: Tensor, source: Tensor) -> Tensor:  # noqa: A002
    """``input`` with the positions where ``mask`` is true (broadcast) filled by ``source``'s elements in order."""
    if mask.dtype is not D.bool_:
        raise DTypeError(f"masked_scatter_ only supports boolean masks, but got mask with dtype {mask.dtype.name}")
    shape = broadcast(tuple(input.shape), tuple(mask.shape))
    x = input.expand(*shape)
    m = mask.expand(*shape).reshape(-1)
    if m.shape[0] == 0:
        return x.clone()
    pos = (m.to(D.int64).cumsum(0) - 1).clamp(min=0)
    src = source.reshape(-1)
    if src.shape[0] == 0:
        return x.clone()
    vals = src.gather(0, pos.clamp(max=src.shape[0] - 1)).to(input.dtype)
    return _where(m, vals, x.reshape(-1)).reshape(*shape)


def unfold(self: Tensor, dimension: int, size: int, step: int) -> Tensor:
    """Every window of ``size`` elements, ``step`` apart, along ``dimension`` as a new last dim."""
    if self.ndim == 0:
        if size > 1:
            raise ShapeError(f"maximum size for tensor at dimension 0 is 1 but size is {size}")
        return self.reshape(1)
    d = norm_dim(dimension, self.ndim)
    n = self.shape[d]
    if size > n:
        raise ShapeError(f"maximum size for tensor at dimension {d} is {n} but size is {size}")
    if step <= 0:
        raise ShapeError(f"step is {step} but must be > 0")
    count = (n - size) // step + 1
    idx = (_arange(self, count, 0, step).reshape(count, 1) + _arange(self, size).reshape(1, size)).reshape(-1)
    out = self.index_select(d, idx)
    out = out.reshape(*self.shape[:d], count, size, *self.shape[d + 1:])
    return out.movedim(d + 1, -1)


def repeat_interleave(input, repeats=None, dim: int | None = None, *, output_size: int | None = None) -> Tensor:  # noqa: A002
    """Each element (or slice along ``dim``) repeated ``repeats`` times; ``repeat_interleave(counts)`` alone gives
    ``arange(len(counts))`` so repeated. A tensor of counts is a sync point (the size depends on them)."""
    if repeats is None:
        counts = input._numpy().astype(np.int64).reshape(-1)
        return input._operand(np.repeat(np.arange(counts.shape[0], dtype=np.int64), counts))
    x = input.reshape(-1) if dim is None else input
    d = 0 if dim is None else norm_dim(dim, x.ndim)
    if x.ndim == 0:
        x = x.reshape(1)
    n = x.shape[d]
    if isinstance(repeats, Tensor):
        if repeats.ndim > 1:
            raise ShapeError("repeat_interleave: repeats must be 0-dim or 1-dim tensor")
        counts = repeats._numpy().astype(np.int64).reshape(-1)
        if counts.shape[0] == 1:
            counts = np.repeat(counts, n)
        if counts.shape[0] != n:
            raise ShapeError(f"repeats must have the same size as input along dim, but got repeats.size(0) = "
                             f"{counts.shape[0]} and input.size({d}) = {n}")
        idx = x._operand(np.repeat(np.arange(n, dtype=np.int64), counts))
        return x.index_select(d, idx)
    r = int(repeats)
    return x.unsqueeze(d + 1).expand(*x.shape[:d + 1], r, *x.shape[d + 1:]).reshape(
        *x.shape[:d], n * r, *x.shape[d + 1:])


def isin(elements, test_elements, *, assume_unique: bool = False, invert: bool = False) -> Tensor:
    """Whether each of ``elements`` is among ``test_elements`` (either may be a number)."""
    ref = elements if isinstance(elements, Tensor) else test_elements
    e = ref._operand(elements)
    t = ref._operand(test_elements).reshape(-1)
    rt = D.result_type((e.dtype, e.ndim), (t.dtype, t.ndim))
    e2, t2 = e.to(rt), t.to(rt)
    if t2.shape[0] == 0:
        hit = e.new_zeros(e.shape, dtype=D.bool_)
    else:
        hit = (e2.unsqueeze(-1) == t2).any(-1)
    return ~hit if invert else hit


def searchsorted(sorted_sequence: Tensor, input, *, out_int32: bool = False, right: bool = False,  # noqa: A002
                 side: str | None = None, sorter: Tensor | None = None) -> Tensor:
    """Insertion points of ``input`` into ``sorted_sequence``'s last dim (its leading dims match ``input``'s)."""
    if side is not None:
        if side not in ("left", "right"):
            raise ValueError(f"side can only be 'left' or 'right' but got {side}")
        if right and side == "left":
            raise ValueError("side and right can't be set to opposites, got side of left while right was True")
        right = side == "right"
    seq = sorted_sequence
    if sorter is not None:
        seq = seq.gather(-1, sorter)
    scalar = not isinstance(input, Tensor)
    v = seq._operand(input)
    if scalar:
        v = v.reshape(1) if seq.ndim == 1 else v
    if seq.ndim > 1 and tuple(seq.shape[:-1]) != tuple(v.shape[:-1]):
        raise ShapeError(f"torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 "
                         f"dimensions of boundaries tensor and input value tensor must match, but we got boundaries "
                         f"tensor {list(seq.shape)} and input value tensor {list(v.shape)}")
    rt = D.result_type((seq.dtype, 1), (v.dtype, 1))
    s, x = seq.to(rt), v.to(rt)
    if seq.ndim == 1:
        below = (s <= x.unsqueeze(-1)) if right else (s < x.unsqueeze(-1))
    else:
        below = (s.unsqueeze(-2) <= x.unsqueeze(-1)) if right else (s.unsqueeze(-2) < x.unsqueeze(-1))
    if rt.is_floating_point:  # NaN sorts last: every boundary is "below" a NaN value, a NaN boundary never
        below = below | x.unsqueeze(-1).isnan()
        below = below & ~(s.isnan() if seq.ndim == 1 else s.unsqueeze(-2).isnan())
    out = below.sum(-1).to(D.int32 if out_int32 else D.int64)
    return out.reshape(()) if scalar else out


def bucketize(input, boundaries: Tensor, *, out_int32: bool = False, right: bool = False) -> Tensor:  # noqa: A002
    """The bucket of each of ``input`` by the sorted 1-D ``boundaries``."""
    if boundaries.ndim != 1:
        raise ShapeError(f"boundaries tensor must be 1 dimension, but got dim({boundaries.ndim})")
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)


# -- statistics ------------------------------------------------------------------------------------------------------

def cov(input: Tensor, *, correction: int = 1, fweights: Tensor | None = None,  # noqa: A002
        aweights: Tensor | None = None) -> Tensor:
    """The covariance of the rows of ``input`` (variables) over its columns (observations), torch.cov's weights."""
    if input.ndim > 2:
        raise ShapeError(f"cov(): expected input to have two or fewer dimensions but got an input with {input.ndim} "
                         "dimensions")
    x = input.reshape(1, -1) if input.ndim < 2 else input
    x = x if x.dtype.is_floating_point else x.to(D.get_default_dtype())
    n = x.shape[1]
    w = None
    if fweights is not None:
        w = fweights
    if aweights is not None:
        w = aweights if w is None else w * aweights
    if w is None:
        wsum = x.new_full((), float(n))
        avg = x.mean(1, keepdim=True)
    else:
        w = w.to(x.dtype)
        wsum = w.sum()
        avg = (x * w).sum(1, keepdim=True) / wsum
    if w is None:
        norm = wsum - correction
    elif correction == 0:
        norm = wsum
    elif aweights is None:
        norm = wsum - correction
    else:
        norm = wsum - correction * (w * aweights.to(x.dtype)).sum() / wsum
    norm = norm.clamp(min=0)
    xc = x - avg
    c = (xc * w).matmul(xc.t()) if w is not None else xc.matmul(xc.t())
    c = c / norm
    return c.squeeze()


def corrcoef(input: Tensor) -> Tensor:  # noqa: A002
    """Pearson correlation coefficients of the rows, clipped to [-1, 1]."""
    c = cov(input)
    if c.ndim == 0:
        return c / c
    d = c.diagonal()
    sd = d.sqrt()
    c = c / sd.unsqueeze(1) / sd.unsqueeze(0)
    return c.clamp(-1, 1)


#: torch.cdist's ``compute_mode`` values: whether torch computes Euclidean distances through a matrix product
CDIST_MODES = ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist")


def cdist(x1: Tensor, x2: Tensor, p: float = 2.0,
          compute_mode: str = "use_mm_for_euclid_dist_if_necessary") -> Tensor:
    """The p-norm distance between each row of ``x1`` and each row of ``x2`` (batched), with torch's gradient: 0 for
    a pair at distance zero (``cdist(z, z)``'s diagonal), and for p = inf the whole gradient to each difference that
    is the largest. ``compute_mode`` is checked as torch checks it (one of :data:`CDIST_MODES`) and changes nothing:
    the distances are always those of the differences (torch's ``"donot_use_mm_for_euclid_dist"``), which its
    matrix-product modes approximate."""
    if compute_mode not in CDIST_MODES:
        raise ValueError(f"{compute_mode} is not a valid value for compute_mode")
    if x1.ndim < 2 or x2.ndim < 2:
        raise ShapeError(f"cdist only supports at least 2D tensors, X1 got: {x1.ndim}D, X2 got: {x2.ndim}D")
    if x1.shape[-1] != x2.shape[-1]:
        raise ShapeError(f"X1 and X2 must have the same number of columns. X1: {x1.shape[-1]} X2: {x2.shape[-1]}")
    for name, x in (("X1", x1), ("X2", x2)):
        if not x.dtype.is_floating_point:
            raise DTypeError(f"cdist only supports floating-point dtypes, {name} got: {x.dtype.name.capitalize()}")
    if p < 0:
        raise RuntimeError("cdist only supports non-negative p values")
    diff = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    if p == 0:
        return zero_grad_from((diff != 0).to(diff.dtype).sum(-1), x1, x2)
    if p == 1 or not diff.shape[-1]:
        return diff.abs().sum(-1)
    if p == math.inf:
        return _InfDistance.apply(diff)
    # (the norm op's gradient is torch's cdist_backward for every other p: 0 where the distance is)
    return diff._reduce("norm", [-1], False, p=float(p))


class _InfDistance(Function):
    """The largest absolute difference over the last dim, with torch's cdist gradient for p = inf (``idist_calc``):
    the gradient times the sign at every difference as large as the distance (ties are not split, as they are for
    ``amax`` and ``vector_norm``)."""

    @staticmethod
    def forward(ctx, diff: Tensor) -> Tensor:
        dist = diff.abs().amax(-1)
        ctx.save_for_backward(diff, dist)
        return dist

    @staticmethod
    def backward(ctx, grad: Tensor):
        diff, dist = ctx.saved_tensors
        at = (diff.abs() == dist.unsqueeze(-1)).to(grad.dtype)
        return grad.unsqueeze(-1) * diff.sign() * at


# -- copies of views, and the rest -----------------------------------------------------------------------------------

def _copy_of(method: str):
    def fn(input: Tensor, *args, **kwargs) -> Tensor:  # noqa: A002
        r = getattr(input, method)(*args, **kwargs)
        return tuple(t.clone() for t in r) if isinstance(r, (tuple, list)) else r.clone()

    fn.__name__ = f"{method}_copy"
    fn.__doc__ = f"``input.{method}(...)`` as a new tensor (torch's ``{method}_copy``)."
    return fn


def fill(input: Tensor, value) -> Tensor:  # noqa: A002
    """A tensor like ``input`` filled with ``value`` (a number or a 0-d tensor)."""
    if isinstance(value, Tensor) and value.ndim:
        raise ShapeError(f"fill only supports 0-dimension value tensor but got tensor with {value.ndim} dimensions.")
    return zero_grad_from(input.clone().fill_(value), input)


def zero_(input: Tensor) -> Tensor:  # noqa: A002
    """``input`` filled with zeros in place (its gradient then zeros, as torch's, where it requires grad)."""
    return input.zero_()


def scalar_tensor(s, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A 0-d tensor of ``s`` (the default float dtype unless ``dtype``)."""
    return _creation.tensor(s, dtype=dtype or D.get_default_dtype(), device=device, requires_grad=requires_grad)


def empty_strided(size, stride, *, dtype=None, device=None, requires_grad: bool = False, **_) -> Tensor:
    """An uninitialised tensor of ``size`` (a worker's tensors are contiguous: ``stride`` is not kept)."""
    return _creation.empty(*_size((size,)), dtype=dtype, device=device, requires_grad=requires_grad)


def empty_permuted(size, physical_layout, *, dtype=None, device=None, requires_grad: bool = False, **_) -> Tensor:
    """An uninitialised tensor of ``size`` (the physical layout is the worker's concern)."""
    return _creation.empty(*_size((size,)), dtype=dtype, device=device, requires_grad=requires_grad)


def new_empty_strided(self: Tensor, size, stride, *, dtype=None, device=None, **_) -> Tensor:
    return self.new_empty(_size((size,)), dtype=dtype, device=device)


def argwhere(input: Tensor) -> Tensor:  # noqa: A002
    """The indices of the non-zero elements, one row each (a sync point)."""
    if input.ndim == 0:
        return input.reshape(1).nonzero()[:, :0]
    return input.nonzero()


def unsafe_chunk(input: Tensor, chunks: int, dim: int = 0):  # noqa: A002
    return input.chunk(chunks, dim)


def unsafe_split(input: Tensor, split_size, dim: int = 0):  # noqa: A002
    return input.split(split_size, dim)


def constant_pad_nd(input: Tensor, pad, value=0) -> Tensor:  # noqa: A002
    """``F.pad(input, pad, value=value)``."""
    return _pad(input, list(pad), value=value)


def block_diag(*tensors) -> Tensor:
    """The tensors (0-d, 1-D or 2-D) on the diagonal of one matrix, zeros elsewhere."""
    ts = [t.reshape(1, -1) if t.ndim <= 1 else t for t in tensors]
    for t in ts:
        if t.ndim != 2:
            raise ShapeError(f"torch.block_diag: Input tensors must have 2 or fewer dimensions. Input has {t.ndim} "
                             "dimensions")
    if not ts:
        return _creation.empty(1, 0)
    rt = ts[0].dtype
    for t in ts[1:]:
        rt = D.promote_types(rt, t.dtype)
    cols = builtins.sum(t.shape[1] for t in ts)
    rows, left = [], 0
    for t in ts:
        rows.append(_pad(t.to(rt), [left, cols - left - t.shape[1]]))
        left += t.shape[1]
    return _cat(rows, 0)


def _strided_positions(size, stride, storage_offset: int) -> np.ndarray:
    """The flat storage positions ``storage_offset + Σ i_k stride_k`` of a strided view of shape ``size``."""
    size, stride = [int(n) for n in size], [int(s) for s in stride]
    if len(size) != len(stride):
        raise ShapeError(f"mismatch in length of strides and shape: {len(stride)} != {len(size)}")
    if any(n < 0 for n in size):
        raise ShapeError(f"as_strided: negative size in {size}")
    if any(s < 0 for s in stride):
        raise ShapeError("as_strided: Negative strides are not supported at the moment, got strides: "
                         f"{stride}")
    if storage_offset < 0:
        raise ShapeError(f"Tensor: invalid storage offset {storage_offset}")
    pos = np.full(size, storage_offset, dtype=np.int64)
    for k, (n, st) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[k] = n
        pos = pos + (np.arange(n, dtype=np.int64) * st).reshape(shape)
    return pos


def _storage(input: Tensor) -> tuple[Tensor, int]:  # noqa: A002
    """The tensor whose row-major elements stand for ``input``'s storage (its root base: a worker's tensors are
    contiguous) and ``input``'s storage offset in it."""
    if input._base is None:
        return input, 0
    got = V.layout(input)
    if got is None:
        raise NotImplementedError("as_strided of a view that no strides describe (a reshape torch would have "
                                  "copied): pass storage_offset= (counted in the base's row-major elements) or "
                                  "clone() the view first")
    return input._base, got[1]


class AsStrided(ViewStep):
    """The view step of ``as_strided``: the base's row-major elements read at fixed flat positions (a gather), and
    a write through the view scattered back into them (refused where two elements of the view share a position,
    as torch refuses writes through an overlapping view)."""

    def __init__(self, positions: np.ndarray):
        self.positions = positions
        self.size = positions.shape
        self._idx = None

    def _index(self, t: Tensor) -> Tensor:
        if self._idx is None or self._idx._dev != t._dev or self._idx._s is not t._s:
            self._idx = t._operand(self.positions.reshape(-1))
        return self._idx

    def forward(self, t: Tensor) -> Tensor:
        flat = t.reshape(-1)
        if not self.positions.size:
            return flat.narrow(0, 0, 0).reshape(*self.size)
        return flat.gather(0, self._index(t)).reshape(*self.size)

    def inverse(self, parent: Tensor, value: Tensor) -> Tensor:
        if not self.positions.size:
            return parent
        if np.unique(self.positions).size != self.positions.size:
            raise ShapeError("unsupported operation: more than one element of the written-to tensor refers to a "
                             "single memory location. Please clone() the tensor before performing the operation.")
        flat = parent.reshape(-1).scatter(0, self._index(parent), value.reshape(-1).to(parent.dtype))
        return flat.reshape(*parent.shape)

    def on_host(self, value: np.ndarray) -> np.ndarray:
        return value.reshape(-1)[self.positions]


def as_strided(input: Tensor, size, stride, storage_offset=None) -> Tensor:  # noqa: A002
    """A view of ``input``'s storage with the given sizes and strides (counted in elements), starting at
    ``storage_offset`` (default: ``input``'s own). A worker's tensors are contiguous, so the storage is the root
    base's elements in row-major order, as torch's is for a contiguous base; writes through the view reach the
    base, reads see the base's later writes, and the gradient flows to ``input`` for the elements inside a
    contiguous view's own extent (:func:`_through_view`), to the base for the rest."""
    root, own = _storage(input)
    off = own if storage_offset is None else int(storage_offset)
    pos = _strided_positions(size, stride, off)
    n = root.numel()
    if pos.size and int(pos.max()) >= n:
        raise ShapeError(f"setStorage: sizes {list(size)}, strides {list(stride)}, storage offset {off} require "
                         f"{int(pos.max()) + 1} elements, out of bounds for storage of {n} elements")
    step = AsStrided(pos)
    out = step.forward(root)
    if input._base is not None and pos.size:
        out = _through_view(input, own, pos, out)
    return mark_view(out, root, step)


def _through_view(input: Tensor, own: int, pos: np.ndarray, out: Tensor) -> Tensor:  # noqa: A002
    """``out`` (read from the root base) with the elements that lie inside ``input``'s own storage read from
    ``input`` instead, when ``input`` is a contiguous run of its base: the same values, with the gradient flowing to
    ``input`` for those (as torch's, whose gradient reaches the view it was given) and to the base for the rest."""
    n = input.numel()
    if not n or root_position(input, n - 1) != own + n - 1:  # (slices keep order: a span of n is contiguous)
        return out
    inside = (pos >= own) & (pos < own + n)
    if not inside.any():  # all outside the view: its gradient is zeros (torch's), not None
        return out if out.requires_grad else zero_grad_from(out, input)
    mine = input.reshape(-1).gather(0, input._operand(np.where(inside, pos - own, 0).reshape(-1)))
    mine = mine.reshape(*pos.shape)
    if inside.all():
        return mine
    return _where(input._operand(inside), mine, out)


def as_strided_copy(input: Tensor, size, stride, storage_offset=None) -> Tensor:  # noqa: A002
    """A copy of :func:`as_strided`'s view (torch's ``as_strided_copy``)."""
    return as_strided(input, size, stride, storage_offset).clone()


def as_strided_scatter(input: Tensor, src: Tensor, size, stride, storage_offset=None) -> Tensor:  # noqa: A002
    """A copy of ``input`` with the strided view's elements replaced by ``src``."""
    if input._base is not None:
        if any(type(s).__name__ == "Permute" for s in input._vsteps):
            raise NotImplementedError("as_strided_scatter of a permuted view: torch's result keeps the view's "
                                      "strides, which tensorwire does not have; clone() the view first")
        input = input.clone()  # (torch's result is a new tensor of input's shape, with storage of its own)  # noqa: A001
    pos = _strided_positions(size, stride, int(storage_offset or 0))
    if not pos.size:
        return input.clone()
    idx = input._operand(pos.reshape(-1))
    return input.reshape(-1).scatter(0, idx, src.reshape(-1).to(input.dtype)).reshape(*input.shape)


def slice_(input: Tensor, dim: int = 0, start=None, end=None, step: int = 1) -> Tensor:  # noqa: A002
    """``input[..., start:end:step, ...]`` along ``dim`` (ATen's ``slice``)."""
    key = [builtins.slice(None)] * input.ndim
    key[norm_dim(dim, input.ndim)] = builtins.slice(start, end, step)
    return input[tuple(key)]


def native_dropout_backward(grad_output: Tensor, mask: Tensor, scale: float) -> Tensor:
    """grad · mask · scale."""
    return grad_output * mask.to(grad_output.dtype) * scale


def resize_(self: Tensor, *size, memory_format=None) -> Tensor:
    """Give ``self`` the shape ``size`` in place, keeping its leading elements in order (new elements, where it
    grows, are zeros: torch leaves them uninitialised)."""
    shape = _size(size)
    n, m = self.numel(), math.prod(shape)
    flat = self.reshape(-1)
    if m < n:
        flat = flat.narrow(0, 0, m)
    elif m > n:
        flat = _cat([flat, flat.new_zeros((m - n,))])
    return rebind(self, alias(flat.reshape(*shape)))


def resize_as_(self: Tensor, the_template: Tensor, *, memory_format=None) -> Tensor:
    """:func:`resize_` to ``the_template``'s shape."""
    return resize_(self, tuple(the_template.shape))


def nonzero_static(input: Tensor, *, size: int, fill_value: int = -1) -> Tensor:  # noqa: A002
    """The first ``size`` rows of ``nonzero()``, padded with ``fill_value`` rows (a sync point)."""
    idx = np.argwhere(input._numpy()).astype(np.int64) if input.ndim else \
        np.zeros((1 if input._numpy() else 0, 0), np.int64)
    out = np.full((size, input.ndim), fill_value, dtype=np.int64)
    n = min(size, idx.shape[0])
    out[:n] = idx[:n]
    return input._operand(out)


def unique_consecutive(input: Tensor, return_inverse: bool = False, return_counts: bool = False,  # noqa: A002
                       dim: int | None = None):
    """Each run of equal consecutive elements (slices along ``dim``) once, with the inverse indices and the run
    lengths on request (a sync point)."""
    a = input._numpy()
    if dim is None:
        flat = a.reshape(-1)
        starts = np.ones(flat.shape[0], dtype=bool)
        if flat.shape[0] > 1:
            starts[1:] = flat[1:] != flat[:-1]
        vals = flat[starts]
        inv = (np.cumsum(starts) - 1).reshape(a.shape)
    else:
        d = norm_dim(dim, input.ndim)
        moved = np.moveaxis(a, d, 0)
        n = moved.shape[0]
        starts = np.ones(n, dtype=bool)
        if n > 1:
            starts[1:] = (moved[1:] != moved[:-1]).reshape(n - 1, -1).any(1)
        vals = np.moveaxis(moved[starts], 0, d)
        inv = np.cumsum(starts) - 1
    counts = np.diff(np.append(np.flatnonzero(starts), starts.shape[0]))
    out = [_creation.tensor(np.ascontiguousarray(vals), dtype=input.dtype, device=input._dev, session=input._s)]
    if return_inverse:
        out.append(input._operand(inv.astype(np.int64)))
    if return_counts:
        out.append(input._operand(counts.astype(np.int64)))
    return out[0] if len(out) == 1 else tuple(out)


def index_put(input: Tensor, indices, values, accumulate: bool = False) -> Tensor:  # noqa: A002
    """A copy of ``input`` with ``input[indices] = values`` (``+=`` with ``accumulate``, duplicates adding up)."""
    key = tuple(slice(None) if i is None else i for i in indices)
    values = values if isinstance(values, Tensor) else input._operand(values)
    if not accumulate:
        out = input.clone()
        out[key] = values.to(input.dtype)
        return out
    key = _indexing._expand_key(input, key)
    pre, adv = _indexing._split_key(input, key)
    if not adv or not _indexing._trivial(pre):
        raise NotImplementedError("index_put(accumulate=True) takes index tensors for leading dims here")
    t, start, order = _indexing._index_layout(input, adv)
    new = t._rec("index_put", [t, values.to(input.dtype), *[i for _, i in adv]], {"dim": start, "accumulate": True})
    if order is not None:
        inv = [0] * len(order)
        for i, o in enumerate(order):
            inv[o] = i
        new = new.permute(*inv)
    return new


def adjoint(input: Tensor) -> Tensor:  # noqa: A002
    """The conjugate transpose of the last two dims (``x.mH``; ``x.mT`` for real dtypes)."""
    if input.ndim < 2:
        raise ShapeError(f"tensor.adjoint() is only supported on matrices or batches of matrices. Got "
                         f"{input.ndim}-D tensor.")
    return _conj(input.mT)


FUNCTIONS = {
    "atleast_1d": atleast_1d, "atleast_2d": atleast_2d, "atleast_3d": atleast_3d,
    "broadcast_shapes": broadcast_shapes, "broadcast_tensors": broadcast_tensors, "meshgrid": meshgrid,
    "cartesian_prod": cartesian_prod, "combinations": combinations, "column_stack": column_stack, "dstack": dstack,
    "hsplit": hsplit, "vsplit": vsplit, "dsplit": dsplit, "split_with_sizes": split_with_sizes, "rot90": rot90,
    "diag_embed": diag_embed, "diagflat": diagflat, "diagonal_scatter": diagonal_scatter,
    "select_scatter": select_scatter, "slice_scatter": slice_scatter, "take": take, "put": put,
    "index_copy": index_copy, "masked_scatter": masked_scatter, "repeat_interleave": repeat_interleave,
    "isin": isin, "searchsorted": searchsorted, "bucketize": bucketize, "cov": cov, "corrcoef": corrcoef,
    "cdist": cdist, "fill": fill, "zero_": zero_, "scalar_tensor": scalar_tensor, "empty_strided": empty_strided,
    "empty_permuted": empty_permuted, "argwhere": argwhere, "unsafe_chunk": unsafe_chunk,
    "unsafe_split": unsafe_split, "constant_pad_nd": constant_pad_nd, "block_diag": block_diag,
    "nonzero_static": nonzero_static, "unique_consecutive": unique_consecutive, "index_put": index_put,
    "scatter_reduce": scatter_reduce, "index_reduce": index_reduce,
    "as_strided": as_strided, "as_strided_copy": as_strided_copy, "as_strided_scatter": as_strided_scatter,
    "slice": slice_,
    "native_dropout_backward": native_dropout_backward, "grid_sampler_2d": grid_sampler_2d,
    "grid_sampler_3d": grid_sampler_3d, "resize_as_": resize_as_,
    **{f"{m}_copy": _copy_of(m) for m in ("diagonal", "expand", "narrow", "permute", "squeeze", "t", "transpose",
                                           "unbind", "unsqueeze", "view", "split_with_sizes", "unfold")},
    "alias_copy": _copy_of("clone"), "adjoint": adjoint,
}

_NO_METHOD = {"atleast_1d", "atleast_2d", "atleast_3d", "broadcast_shapes", "broadcast_tensors", "meshgrid",
              "cartesian_prod", "combinations", "column_stack", "dstack", "scalar_tensor", "empty_strided",
              "empty_permuted", "cov", "corrcoef", "cdist", "block_diag", "bucketize", "searchsorted", "fill",
              "zero_", "constant_pad_nd", "isin", "as_strided_copy", "slice", "native_dropout_backward",
              "grid_sampler_2d", "grid_sampler_3d"}

#: Tensor methods (torch has these as methods too), plus the method-only ``unfold``, ``sum_to_size``...
METHODS = {**{n: f for n, f in FUNCTIONS.items()
              if n not in _NO_METHOD and (n == "index_copy" or not n.endswith("_copy"))},
           "index_copy_": index_copy_, "unfold": unfold, "sum_to_size": sum_to_size, "resize_": resize_,
           "new_empty_strided": new_empty_strided,
           "cov": cov, "corrcoef": corrcoef}


def install(cls=Tensor) -> None:
    """Add :data:`METHODS` to ``Tensor`` (leaving any method it defines itself), and the properties ``H`` and ``mH``
    (a real tensor's conjugate transposes: ``.T`` of a matrix, ``.mT``)."""
    _install.install_methods(cls, METHODS)
    if "H" not in cls.__dict__:
        cls.H = property(_conj_transpose, doc="The conjugate transpose of a matrix (its transpose, for real dtypes).")
    if "mH" not in cls.__dict__:
        cls.mH = property(adjoint, doc="The conjugate transpose of the last two dims (``mT`` for real dtypes).")


def _conj_transpose(self: Tensor) -> Tensor:
    if self.ndim not in (0, 2):
        raise ShapeError(f"tensor.H is only supported on matrices (2-D tensors). Got {self.ndim}-D tensor.")
    t = self.t() if self.ndim == 2 else self
    return _conj(t)



install()
_install.register(FUNCTIONS)
_install.loaded(__name__)
