"""Sparse tensors with PyTorch's semantics, and ``tw.sparse`` (torch.sparse) (issue 33).

``tw.sparse_coo_tensor(indices, values, size)``, ``x.to_sparse()``, ``.to_dense()``, ``.coalesce()``,
``._indices()`` / ``._values()``, ``tw.sparse.mm`` / ``tw.spmm`` / ``tw.mm(sparse, dense)``, ``tw.sparse.sum``, sparse +
sparse, sparse * scalar or dense, and the CSR layout (``tw.sparse_csr_tensor``, ``x.to_sparse_csr()``,
``crow_indices()`` / ``col_indices()``) that ``tw.sparse.mm(csr, dense, reduce)`` and ``tw.sparse.sampled_addmm``
take.

A sparse tensor is a client-side :class:`SparseTensor` over two device tensors: ``indices`` (int64, ``(sparse_dim,
nnz)``) and ``values`` (``(nnz, *dense_shape)``). What it computes is recorded as the op table's dense ops
(``index_select``, ``index_add``, products and sums), so every backend runs it with no kernel, message or wire format
of its own, and autograd reaches the values and the dense operands through those ops' own gradients. A CSR tensor has
the same form, its row and column indices in row-major order (a coalesced 2-D COO tensor); its ``crow_indices()`` is
computed on the device. What depends on the indices' values on the client is a sync point, as ``nonzero`` is:
``coalesce()`` (the distinct indices), ``to_sparse()`` (the nonzeros), a size left to be inferred.

Gradients, as torch's: a sparse tensor requires grad when its values do; a sparse leaf's ``.grad`` (and
``autograd.grad``'s answer for it) is a sparse tensor of its layout holding the gradient at each specified element,
coalesced (a duplicated index's element once); values given to ``sparse_coo_tensor`` get each entry's gradient.

Where tensorwire differs: the sum of two sparse tensors of which one is uncoalesced is the concatenation of both
(torch merges them as if sorted: another order of the same elements, both uncoalesced); a dense op that reads a
sparse tensor as dense (``torch.exp(s)``, ``tw.add(dense, s)``) raises ``NotImplementedError`` naming
``.to_dense()`` (torch runs some of them); ``torch.mm(s, d)`` of a sparse leaf that requires grad is refused (torch
gives that leaf a dense gradient; ``tw.sparse.mm`` gives the sparse one). Cost: ``mm`` and ``sampled_addmm`` take
time and memory linear in nnz; ``sparse.mm``'s ``reduce="amax"``/``"amin"`` and ``sparse.softmax`` take the maximum per
row through ``scatter_reduce`` (linear in nnz too).
"""

from __future__ import annotations

import math

import numpy as np

# (tw.tensor, tw.zeros and tw.cat through the package's lazy names, looked up when called: their modules import
# tensorwire.context, which may be the module loading Tensor's, and so this one)
import tensorwire as _tw
from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DTypeError, ShapeError
from tensorwire.protocol.shapes import norm_dim

# Tensor's module first: it loads the math and array modules, which cannot load before it (`import tensorwire.sparse`
# first works then)
from . import _install
from .tensor import Size, Tensor

# isort: split
from .autograd_engine import is_grad_enabled
from .scatter_reductions import scatter_reduce
from .sparse_layout import LAYOUTS, layout, sparse_coo, sparse_csr, strided

__all__ = ["SparseTensor", "addmm", "layout", "log_softmax", "mm", "sampled_addmm", "softmax", "sparse_coo",
           "sparse_coo_tensor", "sparse_csr", "sparse_csr_tensor", "spmm", "strided", "sum"]

_DENSE_ONLY = ("this operation reads a {layout} tensor as a dense one, which tensorwire does not do: call "
               ".to_dense() first (sparse tensors support to_dense, coalesce, mm/matmul with a dense matrix, add of a "
               "sparse tensor, mul and div by a number or a dense tensor, sum, and the tw.sparse functions)")


class SparseTensor(Tensor):
    """A sparse tensor (``layout`` ``tw.sparse_coo`` or ``tw.sparse_csr``): made by :func:`sparse_coo_tensor`,
    :func:`sparse_csr_tensor` or ``Tensor.to_sparse()``; see the module's documentation."""

    __slots__ = ("_ind", "_val", "_lay", "_coal")
    _sparse = True

    # -- identity: a sparse tensor has no handle of its own -----------------------------------------------------
    @property
    def _id(self):
        raise NotImplementedError(_DENSE_ONLY.format(layout=self._lay))

    def __del__(self):
        pass  # the indices and values tensors release their own handles

    def _numpy(self):
        raise TypeError(f"can't convert {self._lay} tensor to numpy. Use Tensor.to_dense() first.")

    def __repr__(self) -> str:
        pad = " " * 7
        size = tuple(self._shape)
        if self._lay is sparse_csr:
            parts = [("crow_indices", self.crow_indices()), ("col_indices", self.col_indices())]
        else:
            parts = [("indices", self._ind)]
        parts.append(("values", self._val))
        # (each tensor's continuation lines under its first one, as torch prints them)
        body = (",\n" + pad).join(f"{name}=" + repr(t).replace("\n", "\n" + pad + " " * (len(name) + 1))
                                   for name, t in parts)
        grad = ", requires_grad=True" if self.requires_grad else ""
        return f"tensor({body},\n{pad}size={size}, nnz={self._nnz()}, layout={self._lay!r}{grad})"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)

    # -- what it is ----------------------------------------------------------------------------------------------
    @property
    def layout(self) -> layout:
        return self._lay

    @property
    def is_sparse(self) -> bool:
        """Whether this is a COO tensor (torch's ``is_sparse``; a CSR tensor answers ``is_sparse_csr``)."""
        return self._lay is sparse_coo

    @property
    def is_sparse_csr(self) -> bool:
        return self._lay is sparse_csr

    def sparse_dim(self) -> int:
        """How many leading dims the indices address."""
        return self._ind._shape[0]

    def dense_dim(self) -> int:
        """How many trailing dims each specified element (a row of ``values``) has."""
        return len(self._val._shape) - 1

    def _nnz(self) -> int:
        """The number of specified elements (duplicates counted until ``coalesce()``)."""
        return self._val._shape[0]

    def is_coalesced(self) -> bool:
        """Whether the indices are sorted (row-major) and distinct."""
        self._need(sparse_coo, "is_coalesced")
        return self._coal

    def _coalesced_(self, coalesced: bool) -> SparseTensor:
        """Mark the indices as sorted and distinct (or not), as torch's ``_coalesced_``; returns self."""
        self._need(sparse_coo, "_coalesced_")
        self._coal = bool(coalesced)
        return self

    def _indices(self) -> Tensor:
        """The indices, ``(sparse_dim, nnz)`` int64, as given (uncoalesced ones too)."""
        self._need(sparse_coo, "_indices")
        return self._ind

    def _values(self) -> Tensor:
        """The values, ``(nnz, *dense_shape)``, as given."""
        return self._val

    def indices(self) -> Tensor:
        """The indices of a coalesced tensor (torch refuses an uncoalesced one: ``coalesce()`` first)."""
        self._need(sparse_coo, "indices")
        if not self._coal:
            raise RuntimeError("Cannot get indices on an uncoalesced tensor, please call .coalesce() first")
        return self._ind

    def values(self) -> Tensor:
        """The values of a coalesced COO tensor, or of a CSR tensor."""
        if self._lay is sparse_coo and not self._coal:
            raise RuntimeError("Cannot get values on an uncoalesced tensor, please call .coalesce() first")
        return self._val

    def crow_indices(self) -> Tensor:
        """A CSR tensor's compressed row pointers, ``(rows + 1,)`` int64: row ``i``'s elements are
        ``values()[crow[i]:crow[i + 1]]``."""
        self._need(sparse_csr, "crow_indices")
        rows = self._shape[0]
        ones = self._ind._operand(np.ones(self._nnz(), np.int64))
        counts = _tw.zeros(rows + 1, dtype=D.int64, device=self._dev, session=self._s)
        if self._nnz():
            counts = counts.index_add(0, self._ind[0] + 1, ones)
        return counts.cumsum(0)

    def col_indices(self) -> Tensor:
        """A CSR tensor's column index of each element, ``(nnz,)`` int64."""
        self._need(sparse_csr, "col_indices")
        return self._ind[1]

    def _need(self, lay: layout, what: str) -> None:
        if self._lay is not lay:
            kind = "sparse coordinate" if lay is sparse_coo else "sparse row compressed"
            raise RuntimeError(f"{what} expected {kind} tensor layout but got {_torch_layout_name(self._lay)}")

    # -- autograd: the values carry it ---------------------------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        return self._val.requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self._val.requires_grad = bool(value)

    @property
    def grad_fn(self):
        return self._val.grad_fn

    @property
    def grad(self) -> SparseTensor | None:
        """A sparse leaf's gradient: a sparse tensor of its layout (coalesced), ``None`` before a backward pass."""
        g = self._val.grad
        return None if g is None else self._grad_of_values(g)

    @grad.setter
    def grad(self, value) -> None:
        if value is None:
            self._val.grad = None
            return
        if not isinstance(value, SparseTensor) or value._val._shape != self._val._shape:
            raise TypeError("assigned grad must be None or a sparse tensor with this tensor's indices")
        self._val.grad = value._val

    def _grad_of_values(self, g: Tensor) -> SparseTensor:
        """The gradient with respect to this tensor, from ``g``, the gradient of its values: each specified element
        once (duplicates of an index all have the element's gradient), coalesced as torch gives it."""
        if self._coal:
            return _make(self._ind, g, self._shape, self._lay, True)
        ind, first, _ = _distinct(self)
        return _make(ind, g.index_select(0, first), self._shape, self._lay, True)

    def detach(self) -> SparseTensor:
        return _make(self._ind, self._val.detach(), self._shape, self._lay, self._coal)

    def clone(self, *, memory_format=None) -> SparseTensor:
        return _make(self._ind.clone(), self._val.clone(), self._shape, self._lay, self._coal)

    def to(self, *args, **kwargs) -> SparseTensor:
        """Another dtype or device (``to(dtype)``, ``to(device)`` ..., as ``Tensor.to``); the indices follow the
        device."""
        val = self._val.to(*args, **kwargs)
        if val is self._val:
            return self
        ind = self._ind if val._dev == self._ind._dev else self._ind.to(val._dev)
        return _make(ind, val, self._shape, self._lay, self._coal)

    # -- conversions ---------------------------------------------------------------------------------------------
    def coalesce(self) -> SparseTensor:
        """The same tensor with distinct, sorted indices, the values of a repeated index summed (a sync point: the
        distinct indices are found on the client)."""
        self._need(sparse_coo, "coalesce")
        if self._coal:
            return self
        if not self._nnz():
            return _make(self._ind, self._val, self._shape, sparse_coo, True)
        ind, _, inverse = _distinct(self)
        vals = _tw.zeros(ind._shape[1], *self._val._shape[1:], dtype=self.dtype, device=self._dev, session=self._s)
        return _make(ind, vals.index_add(0, inverse, self._val), self._shape, sparse_coo, True)

    def to_dense(self, dtype=None, *, masked_grad: bool | None = None) -> Tensor:
        """The dense (strided) tensor: zeros where no element is specified, a repeated index's values summed."""
        sd = self.sparse_dim()
        sizes, rest = self._shape[:sd], self._shape[sd:]
        out = _tw.zeros(math.prod(sizes), *rest, dtype=self.dtype, device=self._dev, session=self._s)
        if self._nnz():
            out = out.index_add(0, _flat_index(self._ind, sizes), self._val)
        out = out.reshape(*self._shape)
        return out if dtype is None else out.to(dtype)

    def to_sparse(self, *args, layout: layout | None = None, blocksize=None, dense_dim=None) -> SparseTensor:
        """This tensor in ``layout`` (COO by default): itself when it is already."""
        lay = sparse_coo if layout is None else _layout(layout)
        if args and lay is sparse_coo and args[0] != self.sparse_dim():
            raise NotImplementedError("to_sparse(sparse_dim) of a sparse tensor to another sparse_dim: call "
                                      ".to_dense().to_sparse(sparse_dim)")
        if lay is self._lay:
            return self
        if lay is sparse_coo:
            return _make(self._ind, self._val, self._shape, sparse_coo, True)
        if lay is sparse_csr:
            return self.to_sparse_csr()
        raise NotImplementedError(f"to_sparse(layout={lay!r}): tensorwire has COO and CSR sparse tensors")

    def to_sparse_coo(self) -> SparseTensor:
        return self.to_sparse()

    def to_sparse_csr(self, dense_dim=None) -> SparseTensor:
        """This 2-D tensor in the CSR layout."""
        if self._lay is sparse_csr:
            return self
        if self.sparse_dim() != 2 or self.dense_dim():
            raise RuntimeError(f"to_sparse_csr: expected a 2-D sparse tensor without dense dims, got sparse_dim "
                               f"{self.sparse_dim()} and dense_dim {self.dense_dim()}")
        c = self.coalesce()
        return _make(c._ind, c._val, self._shape, sparse_csr, True)

    # -- arithmetic ----------------------------------------------------------------------------------------------
    def add(self, other, *, alpha=1) -> SparseTensor:
        """``self + alpha * other`` of two sparse tensors of one shape and layout (sparse + dense is refused, as
        torch: ``dense + sparse`` gives the dense sum)."""
        if not isinstance(other, SparseTensor):
            raise RuntimeError("add(sparse, dense) is not supported. Use add(dense, sparse) instead.")
        if other._shape != self._shape:
            raise RuntimeError(f"add: expected sizes of 'self' and 'other' to match, but {list(self._shape)} != "
                               f"{list(other._shape)}")
        if other._lay is not self._lay or other.sparse_dim() != self.sparse_dim():
            raise RuntimeError(f"add: expected 'self' and 'other' to have the same layout and sparse dims, got "
                               f"{self._lay!r} ({self.sparse_dim()}) and {other._lay!r} ({other.sparse_dim()})")
        if other._dev != self._dev:
            raise RuntimeError(f"add: expected both tensors on one device, got {self._dev} and {other._dev}")
        ov = other._val if alpha == 1 else other._val * alpha
        dt = D.result_type((self.dtype, 1), (ov.dtype, 1))
        ind, val = _tw.cat([self._ind, other._ind], 1), _tw.cat([self._val.to(dt), ov.to(dt)], 0)
        out = _make(ind, val, self._shape, sparse_coo, False)
        if self._coal and other._coal:  # torch merges two coalesced operands into a coalesced sum
            out = out.coalesce()
            if self._lay is sparse_csr:
                out = _make(out._ind, out._val, self._shape, sparse_csr, True)
        return out

    __add__ = add

    def __radd__(self, other):
        if isinstance(other, Tensor) and not isinstance(other, SparseTensor):
            return other + self.to_dense()  # dense + sparse: dense, as torch
        raise RuntimeError("add(sparse, dense) is not supported. Use add(dense, sparse) instead.")

    def sub(self, other, *, alpha=1) -> SparseTensor:
        return self.add(other, alpha=-alpha)

    __sub__ = sub

    def __rsub__(self, other):
        if isinstance(other, Tensor) and not isinstance(other, SparseTensor):
            return other - self.to_dense()
        raise RuntimeError("sub(dense number, sparse) is not supported: use a dense tensor minus the sparse one")

    def mul(self, other) -> SparseTensor:
        """The product with a number, a 0-d or same-shaped dense tensor, or a sparse tensor: a sparse tensor of
        this one's indices (the intersection of both when both are coalesced, as torch)."""
        if isinstance(other, SparseTensor):
            return _mul_sparse(self, other)
        if isinstance(other, Tensor) and other._shape:
            if other._shape != self._shape:
                raise RuntimeError(f"mul(sparse, dense): expected the dense operand to have the sparse one's shape "
                                   f"{list(self._shape)} (or none), got {list(other._shape)}")
            sd = self.sparse_dim()
            picked = other.reshape(-1, *other._shape[sd:]).index_select(0, _flat_index(self._ind, self._shape[:sd]))
            return self._with_values(self._val * picked)
        return self._with_values(self._val * other)

    __mul__ = mul
    __rmul__ = mul

    def div(self, other, *, rounding_mode=None) -> SparseTensor:
        """Division by a number or a 0-d dense tensor (the values divided; unspecified elements stay zero)."""
        if isinstance(other, Tensor) and other._shape:
            raise RuntimeError("div(sparse, dense): the divisor must be a number or a 0-d tensor")
        return self._with_values(self._val.div(other, rounding_mode=rounding_mode))

    __truediv__ = div

    def neg(self) -> SparseTensor:
        return self._with_values(-self._val)

    __neg__ = neg

    def _become(self, new: SparseTensor) -> SparseTensor:
        """In place: this tensor now holds ``new``'s elements, in its own dtype (as torch's in-place ops)."""
        if self.requires_grad and self.grad_fn is None and is_grad_enabled():
            raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
        self._ind, self._val, self._coal = new._ind, new._val.to(self.dtype), new._coal
        return self

    def add_(self, other, *, alpha=1) -> SparseTensor:
        return self._become(self.add(other, alpha=alpha))

    def sub_(self, other, *, alpha=1) -> SparseTensor:
        return self._become(self.sub(other, alpha=alpha))

    def mul_(self, other) -> SparseTensor:
        return self._become(self.mul(other))

    def div_(self, other, *, rounding_mode=None) -> SparseTensor:
        return self._become(self.div(other, rounding_mode=rounding_mode))

    __iadd__ = add_
    __isub__ = sub_
    __imul__ = mul_
    __itruediv__ = div_

    def _with_values(self, vals: Tensor) -> SparseTensor:
        return _make(self._ind, vals, self._shape, self._lay, self._coal)

    def t(self) -> SparseTensor:
        """The transpose of a 2-D COO tensor (its index rows swapped; no longer coalesced)."""
        self._need(sparse_coo, "t")
        if self.sparse_dim() != 2:
            raise RuntimeError(f"t() expects a tensor with 2 sparse dims, got {self.sparse_dim()}")
        return _make(self._ind.flip(0), self._val, self._shape[::-1], sparse_coo, False)

    def transpose(self, dim0: int, dim1: int) -> SparseTensor:
        nd = len(self._shape)
        a, b = sorted((norm_dim(dim0, nd), norm_dim(dim1, nd)))
        if a == b:
            return self
        if (a, b) != (0, 1) or self.sparse_dim() != 2:
            raise NotImplementedError("transpose of a sparse tensor: tensorwire swaps the two sparse dims of a 2-D "
                                      "tensor only")
        return self.t()

    def sum(self, dim=None, keepdim: bool = False, *, dtype=None):
        """torch.sparse.sum: every element (a dense 0-d tensor), or over ``dim`` (sparse while sparse dims
        remain)."""
        if keepdim:
            raise RuntimeError("sum of a sparse tensor with keepdim=True is not supported (torch.sparse.sum has no "
                               "keepdim)")
        return sum(self, dim, dtype=dtype)

    # -- products ------------------------------------------------------------------------------------------------
    def matmul(self, other):
        """``sparse @ dense`` (a 2-D COO or CSR tensor times a matrix or a vector): dense, as torch.mm."""
        if isinstance(other, SparseTensor):
            raise NotImplementedError("sparse @ sparse: tensorwire multiplies a sparse tensor by a dense one "
                                      "(call .to_dense() on one operand)")
        if not isinstance(other, Tensor):
            raise TypeError(f"matmul(): argument 'other' must be a Tensor, not {type(other).__name__}")
        if self.requires_grad and self.grad_fn is None and is_grad_enabled():
            raise NotImplementedError(
                "torch.mm/matmul of a sparse leaf that requires grad gives it a dense gradient in torch, and "
                "tensorwire keeps sparse gradients only: use tw.sparse.mm(sparse, dense), whose gradient for the "
                "sparse operand is sparse (as torch.sparse.mm's)")
        if other.ndim == 1:
            return _spmm(self, other.unsqueeze(1)).squeeze(1)
        return _spmm(self, other)

    mm = matmul
    __matmul__ = matmul

    def mv(self, vec):
        return self.matmul(vec)

    def __rmatmul__(self, other):
        return self._rmatmul(other)

    def _rmatmul(self, other: Tensor) -> Tensor:
        """``dense @ sparse`` (``Tensor.matmul`` sends it here): dense, as torch.mm."""
        if other.ndim != 2:
            raise NotImplementedError("dense @ sparse: tensorwire multiplies a dense matrix by a 2-D sparse one")
        sp = self if self._lay is sparse_coo else self.to_sparse()
        return _spmm(sp.t(), other.t()).t()


def _torch_layout_name(lay: layout) -> str:
    return {"sparse_coo": "Sparse", "sparse_csr": "SparseCsr", "strided": "Strided"}.get(str.__str__(lay), lay)


def _make(indices: Tensor, values: Tensor, shape, lay: layout, coalesced: bool) -> SparseTensor:
    """A sparse tensor over ``indices`` and ``values`` (no checks: the callers have made them)."""
    t = object.__new__(SparseTensor)
    t._s, t._shape, t.dtype, t._dev = values._s, tuple(int(s) for s in shape), values.dtype, values._dev
    t._base = t._vsteps = None
    t._base_version = t._version = 0
    t._retains_grad = False
    t._ag = None
    t._ind, t._val, t._lay, t._coal = indices, values, lay, bool(coalesced)
    return t


def _strides(sizes) -> list[int]:
    out, acc = [], 1
    for s in reversed(sizes):
        out.append(acc)
        acc *= int(s)
    return out[::-1]


def _flat_index(ind: Tensor, sizes) -> Tensor:
    """Each element's row-major position among the sparse dims (``(nnz,)`` int64, on the device)."""
    if len(sizes) == 1:
        return ind[0]
    w = ind._operand(np.array(_strides(sizes), np.int64).reshape(-1, 1))
    return (ind * w).sum(0)


def _distinct(s: SparseTensor) -> tuple[Tensor, Tensor, Tensor]:
    """The distinct indices of ``s`` in row-major order ``(sparse_dim, n)``, the position of each one's first
    occurrence ``(n,)`` and each element's position among them ``(nnz,)`` (a sync point: found on the client)."""
    sd = s.sparse_dim()
    idx = s._ind._numpy().astype(np.int64, copy=False)
    sizes = s._shape[:sd]
    if idx.size and (idx.min() < 0 or (idx >= np.array(sizes, np.int64).reshape(-1, 1)).any()):
        bad = idx[:, ((idx < 0) | (idx >= np.array(sizes, np.int64).reshape(-1, 1))).any(0)][:, 0].tolist()
        raise IndexError(f"sparse tensor index {bad} is out of bounds for size {list(sizes)}")
    flat = np.ravel_multi_index(tuple(idx), sizes) if sd > 1 else idx.reshape(-1)
    _, first, inverse = np.unique(flat, return_index=True, return_inverse=True)
    ind = s._ind._operand(np.ascontiguousarray(idx[:, first]))
    return ind, s._ind._operand(first.astype(np.int64)), s._ind._operand(inverse.reshape(-1).astype(np.int64))


def _mul_sparse(a: SparseTensor, b: SparseTensor) -> SparseTensor:
    """sparse * sparse, as torch: the intersection of two coalesced operands; otherwise the elements of the
    uncoalesced one (of both uncoalesced, the one with fewer, ``a`` on a tie), each times the other's value there."""
    if a._shape != b._shape:
        raise RuntimeError(f"mul: expected sizes of 'self' and 'other' to match, but {list(a._shape)} != "
                           f"{list(b._shape)}")
    if not (a._coal and b._coal):
        if a._coal or (not b._coal and b._nnz() < a._nnz()):
            a, b = b, a
        return a.mul(b.to_dense())
    sd = a.sparse_dim()
    fa = np.ravel_multi_index(tuple(a._ind._numpy()), a._shape[:sd]) if a._nnz() else np.zeros(0, np.int64)
    fb = np.ravel_multi_index(tuple(b._ind._numpy()), b._shape[:sd]) if b._nnz() else np.zeros(0, np.int64)
    _, ia, ib = np.intersect1d(fa, fb, assume_unique=True, return_indices=True)
    pa, pb = a._ind._operand(ia.astype(np.int64)), a._ind._operand(ib.astype(np.int64))
    vals = a._val.index_select(0, pa) * b._val.index_select(0, pb)
    return _make(a._ind.index_select(1, pa), vals, a._shape, a._lay, True)


def _check_mm(s: SparseTensor, d: Tensor, what: str) -> None:
    if len(s._shape) != 2 or s.sparse_dim() != 2:
        raise RuntimeError(f"{what}: expected a 2-D sparse matrix with 2 sparse dims, got size {list(s._shape)} with "
                           f"{s.sparse_dim()} sparse dims")
    if d.ndim != 2:
        raise RuntimeError(f"{what}: expected a 2-D dense matrix, got {d.ndim}-D")
    if s._shape[1] != d._shape[0]:
        raise ShapeError(f"mat1 and mat2 shapes cannot be multiplied ({s._shape[0]}x{s._shape[1]} and "
                         f"{d._shape[0]}x{d._shape[1]})")
    if s.dtype is not d.dtype:
        raise DTypeError(f"{what}: expected mat1 and mat2 to have the same dtype, but got: {s.dtype.name} != "
                         f"{d.dtype.name}")


def _spmm(s: SparseTensor, d: Tensor) -> Tensor:
    """``s @ d`` for a 2-D sparse ``s``: each element's row of ``d`` scaled, summed into its row."""
    _check_mm(s, d, "mm")
    rows, cols = s._ind[0], s._ind[1]
    out = _tw.zeros(s._shape[0], d._shape[1], dtype=d.dtype, device=d._dev, session=d._s)
    if not s._nnz():
        return out
    return out.index_add(0, rows, d.index_select(0, cols) * s._val.unsqueeze(1))


# -- making sparse tensors -------------------------------------------------------------------------------------------

def _layout(x) -> layout:
    if isinstance(x, layout):
        return x
    name = str(x).removeprefix("torch.").removeprefix("tensorwire.")
    if name not in LAYOUTS:
        raise ValueError(f"unknown layout {x!r}")
    return LAYOUTS[name]


def _as_device_tensor(x, like: Tensor | None, dtype=None, device=None) -> Tensor:
    if isinstance(x, SparseTensor):
        raise TypeError("expected dense indices and values, got a sparse tensor")
    if isinstance(x, Tensor):
        out = x if dtype is None else x.to(dtype)
        return out if device is None else out.to(device)
    if like is not None and device is None:  # (on the other argument's device and session)
        return _tw.tensor(x, dtype=dtype, device=like._dev, session=like._s)
    return _tw.tensor(x, dtype=dtype, device=device)


def _values_alias(values: Tensor) -> Tensor:
    """``values`` as the sparse tensor's own non-leaf (a zero-copy alias with a gradient edge to ``values``), so the
    sparse tensor is no leaf and ``values`` receives its gradient, as torch's ``sparse_coo_tensor``."""
    if values.requires_grad and values.grad_fn is None and is_grad_enabled():
        return values._rec("reshape", [values], {"shape": list(values._shape)})
    return values


def sparse_coo_tensor(indices, values, size=None, *, dtype=None, device=None, pin_memory: bool = False,
                      requires_grad: bool = False, check_invariants: bool | None = None,
                      is_coalesced: bool | None = None) -> SparseTensor:
    """A COO sparse tensor (torch.sparse_coo_tensor): ``indices`` ``(sparse_dim, nnz)`` integers, ``values``
    ``(nnz, *dense_shape)``; ``size`` inferred from the largest indices when omitted (a sync point).
    ``is_coalesced=True`` promises the indices are sorted and distinct; ``check_invariants`` checks they are in range
    (a sync point; torch's default leaves them unchecked)."""
    vals = _as_device_tensor(values, indices if isinstance(indices, Tensor) else None, dtype, device)
    ind = _as_device_tensor(indices, vals)
    if ind.dtype is not D.int64:
        if ind.dtype.is_floating_point or ind.dtype is D.bool_:
            raise RuntimeError(f"indices must be an int64 tensor, got {ind.dtype.name}")
        ind = ind.to(D.int64)
    if ind._dev != vals._dev:
        raise RuntimeError(f"indices and values must be on one device, got {ind._dev} and {vals._dev}")
    if ind.ndim != 2:
        raise RuntimeError(f"indices must be sparse_dim x nnz, but got: {list(ind._shape)}")
    if vals.ndim == 0:
        raise RuntimeError("values must have at least one dim (nnz), got a 0-d tensor")
    sd, nnz = ind._shape
    if vals._shape[0] != nnz:
        raise RuntimeError(f"indices and values must have same nnz, but got nnz from indices: {nnz}, nnz from "
                           f"values: {vals._shape[0]}")
    dense = tuple(vals._shape[1:])
    if size is None:
        top = ind._numpy().max(1) + 1 if nnz else np.zeros(sd, np.int64)
        shape = tuple(int(v) for v in top) + dense
    else:
        shape = tuple(int(v) for v in (size if isinstance(size, (tuple, list, Size)) else [size]))
        if len(shape) != sd + len(dense):
            raise RuntimeError(f"'len(size) == sparse_dim + dense_dim' is not satisfied: len(size) = {len(shape)}, "
                               f"sparse_dim = {sd}, dense_dim = {len(dense)}")
        if tuple(shape[sd:]) != dense:
            raise RuntimeError(f"values has incorrect size, expected {[nnz, *shape[sd:]]}, got {list(vals._shape)}")
    if sd == 0:
        raise NotImplementedError("a sparse tensor with no sparse dims: tensorwire's have at least one")
    if requires_grad:
        if not vals.dtype.is_floating_point:
            raise DTypeError("only Tensors of floating point dtype can require gradients")
        vals = vals.detach().requires_grad_()
    else:
        vals = _values_alias(vals)
    out = _make(ind, vals, shape, sparse_coo, bool(is_coalesced))
    if check_invariants:
        _distinct(out)  # raises IndexError for an index out of range
    return out


def sparse_csr_tensor(crow_indices, col_indices, values, size=None, *, dtype=None, device=None,
                      pin_memory: bool = False, requires_grad: bool = False,
                      check_invariants: bool | None = None) -> SparseTensor:
    """A CSR sparse matrix (torch.sparse_csr_tensor): row ``i``'s elements are ``values[crow[i]:crow[i + 1]]`` in
    columns ``col_indices[crow[i]:crow[i + 1]]``; ``size`` inferred (rows from ``crow``, columns from the largest
    column index: a sync point) when omitted."""
    vals = _as_device_tensor(values, col_indices if isinstance(col_indices, Tensor) else None, dtype, device)
    crow = _as_device_tensor(crow_indices, vals).to(D.int64)
    col = _as_device_tensor(col_indices, vals).to(D.int64)
    if crow.ndim != 1 or col.ndim != 1 or vals.ndim != 1:
        raise NotImplementedError("sparse_csr_tensor: tensorwire has 2-D CSR tensors (1-D crow_indices, col_indices "
                                  "and values)")
    nnz = col._shape[0]
    if vals._shape[0] != nnz:
        raise RuntimeError(f"col_indices and values must have the same number of elements, got {nnz} and "
                           f"{vals._shape[0]}")
    nrows = crow._shape[0] - 1
    if nrows < 0:
        raise RuntimeError("crow_indices must have at least one element")
    if size is None:
        ncols = int(col._numpy().max()) + 1 if nnz else 0
        shape = (nrows, ncols)
    else:
        shape = tuple(int(v) for v in size)
        if len(shape) != 2 or shape[0] != nrows:
            raise RuntimeError(f"size {list(shape)} does not fit crow_indices of {nrows + 1} elements (2-D, rows + 1)")
    if nnz:
        # row of element k: how many row starts crow[1:rows] are at or before k
        starts = _tw.zeros(nnz + 1, dtype=D.int64, device=vals._dev, session=vals._s)
        if nrows > 1:
            starts = starts.index_add(0, crow[1:nrows], crow._operand(np.ones(nrows - 1, np.int64)))
        rows = starts.cumsum(0)[:nnz]
    else:
        rows = col
    if requires_grad:
        vals = vals.detach().requires_grad_()
    else:
        vals = _values_alias(vals)
    return _make(_tw.cat([rows.unsqueeze(0), col.unsqueeze(0)], 0), vals, shape, sparse_csr, True)


def to_sparse(self: Tensor, *args, layout=None, blocksize=None, dense_dim=None) -> SparseTensor:
    """``Tensor.to_sparse(sparse_dim=None)``: the nonzero elements as a coalesced COO tensor (``sparse_dim`` leading
    dims indexed, the rest dense: a row of ``values`` is kept where any of its elements is nonzero); ``layout=``
    another sparse layout (a sync point: the nonzeros are found on the client)."""
    lay = sparse_coo if layout is None else _layout(layout)
    if len(args) > 1:
        raise TypeError(f"to_sparse() takes at most 1 positional argument (sparse_dim), got {len(args)}")
    if lay is sparse_csr:
        return to_sparse_csr(self, dense_dim)
    if lay is strided:
        return self
    if lay is not sparse_coo:
        raise NotImplementedError(f"to_sparse(layout={lay!r}): tensorwire has COO and CSR sparse tensors")
    if blocksize is not None:
        raise RuntimeError("dense_to_sparse: conversion from Strided to Sparse with blocksize argument given is not "
                           "supported")
    if dense_dim is not None and args and args[0] is not None:
        raise TypeError("to_sparse() takes sparse_dim or dense_dim, not both")
    sd = (self.ndim - int(dense_dim) if dense_dim is not None else self.ndim) if not args or args[0] is None \
        else int(args[0])
    if not 0 < sd <= self.ndim:
        raise RuntimeError(f"sparse_dim must be between 1 and {self.ndim} (tensorwire's sparse tensors have a "
                           f"sparse dim), got {sd}")
    sizes, rest = self._shape[:sd], self._shape[sd:]
    rows = self.reshape(math.prod(sizes), *rest)
    hit = rows != 0
    if rest:
        hit = hit.reshape(hit._shape[0], -1).any(1)
    pos = np.flatnonzero(hit._numpy()).astype(np.int64)
    p = self._operand(pos)
    ind = self._operand(np.stack(np.unravel_index(pos, sizes)).astype(np.int64).reshape(sd, -1))
    return _make(ind, rows.index_select(0, p), self._shape, sparse_coo, True)


def to_sparse_csr(self: Tensor, dense_dim=None) -> SparseTensor:
    """``Tensor.to_sparse_csr()``: a 2-D tensor's nonzero elements in the CSR layout."""
    if dense_dim:
        raise NotImplementedError("to_sparse_csr(dense_dim=): tensorwire's CSR tensors have no dense dims")
    if self.ndim != 2:
        raise RuntimeError(f"to_sparse_csr: expected a 2-D tensor, got {self.ndim}-D (batched CSR is not supported)")
    s = to_sparse(self)
    return _make(s._ind, s._val, s._shape, sparse_csr, True)


def to_dense(self: Tensor, dtype=None, *, masked_grad: bool | None = None) -> Tensor:
    """``Tensor.to_dense()`` of a dense tensor: itself (or cast to ``dtype``)."""
    return self if dtype is None else self.to(dtype)


def sparse_mask(self: Tensor, mask: SparseTensor) -> SparseTensor:
    """``Tensor.sparse_mask(mask)``: this dense tensor's elements at ``mask``'s indices, in ``mask``'s layout."""
    if not isinstance(mask, SparseTensor):
        raise RuntimeError("sparse_mask expects mask to be a sparse tensor")
    if mask._shape != tuple(self._shape):
        raise RuntimeError(f"sparse_mask(): operands have incompatible sizes; self has size {list(self._shape)} but "
                           f"mask has size {list(mask._shape)}")
    sd = mask.sparse_dim()
    picked = self.reshape(-1, *self._shape[sd:]).index_select(0, _flat_index(mask._ind, mask._shape[:sd]))
    return _make(mask._ind, picked, mask._shape, mask._lay, mask._coal)


# -- torch.sparse ----------------------------------------------------------------------------------------------------

def _as_sparse(x, what: str) -> SparseTensor:
    if not isinstance(x, SparseTensor):
        raise RuntimeError(f"{what}: expected a sparse tensor, got a {getattr(x, 'layout', type(x).__name__)!r} one")
    return x


def mm(mat1, mat2, reduce: str | None = None) -> Tensor:
    """torch.sparse.mm: a 2-D sparse matrix (COO or CSR) times a dense one, dense. ``reduce`` (CSR only, as torch):
    how each row's products combine, ``"sum"``, ``"mean"`` (over the row's specified elements), ``"amax"`` or
    ``"amin"`` (a row with none gives zeros). The sparse operand's gradient is sparse, at its specified elements."""
    if not isinstance(mat1, SparseTensor):
        if isinstance(mat2, SparseTensor) and reduce is None:
            return mat2._rmatmul(mat1)
        raise RuntimeError("torch.sparse.mm: the first operand must be sparse")
    if isinstance(mat2, SparseTensor):
        raise NotImplementedError("torch.sparse.mm of two sparse matrices: call .to_dense() on one of them")
    if reduce is None or reduce == "sum" and mat1._lay is sparse_csr:
        return _spmm(mat1, mat2)
    if mat1._lay is not sparse_csr:
        raise NotImplementedError(f"sparse.mm with reduce={reduce!r}: torch reduces a sparse CSR matrix's rows only, "
                                  f"got a {mat1._lay!r} one")
    if reduce not in ("mean", "amax", "amin"):
        raise RuntimeError(f"reduce argument must be either sum, mean, amax or amin, got {reduce}")
    _check_mm(mat1, mat2, "sparse.mm")
    m, n = mat1._shape[0], mat2._shape[1]
    out = _tw.zeros(m, n, dtype=mat2.dtype, device=mat2._dev, session=mat2._s)
    if not mat1._nnz():
        return out
    rows, cols = mat1._ind[0], mat1._ind[1]
    terms = mat2.index_select(0, cols) * mat1._val.unsqueeze(1)
    if reduce == "mean":
        ones = mat1._val._operand(np.ones(mat1._nnz(), np.float64)).to(mat2.dtype)
        count = _tw.zeros(m, dtype=mat2.dtype, device=mat2._dev, session=mat2._s).index_add(0, rows, ones)
        return out.index_add(0, rows, terms) / count.clamp(min=1).unsqueeze(1)
    return scatter_reduce(out, 0, rows.unsqueeze(1).expand(-1, n), terms, reduce, include_self=False)


def spmm(mat1, mat2) -> Tensor:
    """torch.spmm: ``sparse @ dense`` (as :func:`mm`)."""
    return mm(mat1, mat2)


def addmm(mat: Tensor, mat1, mat2: Tensor, *, beta=1.0, alpha=1.0) -> Tensor:
    """torch.sparse.addmm: ``beta * mat + alpha * (mat1 @ mat2)`` for a sparse ``mat1`` and dense ``mat``, ``mat2``."""
    prod = mm(_as_sparse(mat1, "sparse.addmm"), mat2)
    if alpha != 1:
        prod = prod * alpha
    return prod if beta == 0 else prod + (mat if beta == 1 else mat * beta)


def sampled_addmm(input, mat1: Tensor, mat2: Tensor, *, beta=1.0, alpha=1.0, out=None) -> SparseTensor:  # noqa: A002
    """torch.sparse.sampled_addmm: ``alpha * (mat1 @ mat2)`` at the specified elements of the CSR matrix ``input``,
    plus ``beta * input`` (a CSR result of ``input``'s pattern; only the sampled products are computed)."""
    s = _as_sparse(input, "sampled_addmm")
    if s._lay is not sparse_csr:
        raise RuntimeError(f"sampled_addmm: Expected input to have sparse csr layout, but got {s._lay!r}")
    if mat1.ndim != 2 or mat2.ndim != 2:
        raise RuntimeError("sampled_addmm: tensorwire multiplies 2-D matrices (no batch dims)")
    m, n = s._shape
    if mat1._shape[0] != m or mat2._shape[1] != n or mat1._shape[1] != mat2._shape[0]:
        raise ShapeError(f"sampled_addmm: input {[m, n]} does not fit mat1 {list(mat1._shape)} @ mat2 "
                         f"{list(mat2._shape)}")
    rows, cols = s._ind[0], s._ind[1]
    prods = (mat1.index_select(0, rows) * mat2.t().index_select(0, cols)).sum(-1)
    vals = prods * alpha if alpha != 1 else prods
    if beta != 0:
        vals = vals + (s._val * beta if beta != 1 else s._val)
    res = _make(s._ind, vals, s._shape, sparse_csr, True)
    if out is not None:
        raise NotImplementedError("sampled_addmm(out=): tensorwire returns a new sparse tensor")
    return res


def sum(input, dim=None, dtype=None):  # noqa: A001,A002 - torch's name
    """torch.sparse.sum: every element (a dense 0-d tensor), or over ``dim`` (an int or a tuple): a sparse tensor
    (coalesced) while sparse dims remain, else dense."""
    s = _as_sparse(input, "torch.sparse.sum")
    vals = s._val if dtype is None else s._val.to(dtype)
    if dim is None:
        return vals.sum()
    dims = sorted({norm_dim(d, len(s._shape)) for d in (dim if isinstance(dim, (tuple, list)) else [dim])})
    sd = s.sparse_dim()
    dense_red = [d - sd + 1 for d in dims if d >= sd]
    if dense_red:
        vals = vals.sum(dense_red)
    keep = [d for d in range(sd) if d not in dims]
    rest = [n for d, n in enumerate(s._shape) if d >= sd and d not in dims]
    if not keep:
        return vals.sum(0)
    if len(keep) == sd:
        return _make(s._ind, vals, [*s._shape[:sd], *rest], s._lay, s._coal)
    ind = s._ind.index_select(0, s._ind._operand(np.array(keep, np.int64)))
    return _make(ind, vals, [s._shape[d] for d in keep] + rest, sparse_coo, False).coalesce()


def softmax(input, dim: int, *, dtype=None):  # noqa: A002
    """torch.sparse.softmax: softmax along ``dim`` over the specified elements only (the unspecified ones count as
    -inf, and stay unspecified)."""
    return _softmax(input, dim, dtype, log=False)


def log_softmax(input, dim: int, *, dtype=None):  # noqa: A002
    """torch.sparse.log_softmax: log-softmax along ``dim`` over the specified elements only."""
    return _softmax(input, dim, dtype, log=True)


def _softmax(input, dim: int, dtype, log: bool) -> SparseTensor:  # noqa: A002
    s = _as_sparse(input, "torch.sparse.softmax")
    s._need(sparse_coo, "softmax")
    s = s.coalesce()
    vals = s._val if dtype is None else s._val.to(dtype)
    d = norm_dim(dim, len(s._shape))
    sd = s.sparse_dim()
    if d >= sd:  # a dense dim: each element's own softmax
        v = vals.log_softmax(d - sd + 1) if log else vals.softmax(d - sd + 1)
        return s._with_values(v)
    # the elements sharing every sparse index but dim's are one group (a sync point: the groups are numbered here)
    idx = s._ind._numpy()
    others = [k for k in range(sd) if k != d]
    if others:
        key = np.ravel_multi_index(tuple(idx[others]), tuple(s._shape[k] for k in others))
        _, group = np.unique(key, return_inverse=True)
    else:
        group = np.zeros(idx.shape[1], np.int64)
    g = s._ind._operand(group.reshape(-1).astype(np.int64))
    ngroups = int(group.max()) + 1 if group.size else 0
    shape = (ngroups, *vals._shape[1:])
    fill = vals._s.scalar(-math.inf, vals.dtype, vals._dev).expand(*shape)
    gi = g.reshape(-1, *[1] * (vals.ndim - 1)).expand(*vals._shape)
    top = scatter_reduce(fill, 0, gi, vals.detach(), "amax", include_self=False).index_select(0, g)
    shifted = vals - top
    total = _tw.zeros(*shape, dtype=vals.dtype, device=vals._dev, session=vals._s).index_add(0, g, shifted.exp())
    if log:
        return s._with_values(shifted - total.log().index_select(0, g))
    return s._with_values(shifted.exp() / total.index_select(0, g))


#: ``tw.<name>`` functions this module gives
FUNCTIONS = {"sparse_coo_tensor": sparse_coo_tensor, "sparse_csr_tensor": sparse_csr_tensor, "spmm": spmm}
#: ``Tensor`` methods of dense tensors this module gives
METHODS = {"to_sparse": to_sparse, "to_sparse_coo": to_sparse, "to_sparse_csr": to_sparse_csr, "to_dense": to_dense,
           "sparse_mask": sparse_mask}


def install(cls=Tensor) -> None:
    """Add :data:`METHODS` to ``Tensor`` (leaving any it defines itself), and ``is_sparse_csr`` (False)."""
    _install.install_methods(cls, METHODS)
    if "is_sparse_csr" not in cls.__dict__:
        cls.is_sparse_csr = False


install()
_install.loaded(__name__)
