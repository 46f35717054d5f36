"""``tw.linalg`` (issue 33): the parts of torch.linalg that compose from existing ops (norms, ``vecdot``,
``cross``, ``multi_dot``, ``matrix_power``, ``vander``, ``diagonal``, ``matmul``, ``matrix_exp``), and the
factorisations and what derives from them (``det``, ``inv``, ``solve``, ``cholesky``, ``qr``, ``eigh``, ``svd``,
``lu``, ``ldl``, ``pinv``, ``lstsq``...: :mod:`.linalg_decomp`, run on the client's LAPACK; ``eig``/``eigvals``
need complex dtypes and raise ``NotImplementedError``).
"""

from __future__ import annotations

import math

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DTypeError, ShapeError
from tensorwire.protocol.shapes import norm_dim

from . import creation as _creation
from . import functions as _functions
from .host_ops import LinAlgError
from .linalg_decomp import (
    cholesky,
    cholesky_ex,
    cond,
    det,
    eig,
    eigh,
    eigvals,
    eigvalsh,
    householder_product,
    inv,
    inv_ex,
    ldl_factor,
    ldl_factor_ex,
    ldl_solve,
    lstsq,
    lu,
    lu_factor,
    lu_factor_ex,
    lu_solve,
    matrix_rank,
    pinv,
    qr,
    singular_norm,
    slogdet,
    solve,
    solve_ex,
    solve_triangular,
    svd,
    svdvals,
    tensorinv,
    tensorsolve,
)
from .math_extras import linalg_cross as cross
from .tensor import Tensor
from .zero_grads import zero_grad_from

__all__ = ["vector_norm", "matrix_norm", "norm", "vecdot", "cross", "multi_dot", "matrix_power", "vander",
           "diagonal", "matmul", "matrix_exp", "LinAlgError", "cholesky", "cholesky_ex", "cond", "det", "eig",
           "eigh", "eigvals", "eigvalsh", "householder_product", "inv", "inv_ex", "ldl_factor", "ldl_factor_ex",
           "ldl_solve", "lstsq", "lu", "lu_factor", "lu_factor_ex", "lu_solve", "matrix_rank", "pinv", "qr",
           "slogdet", "solve", "solve_ex", "solve_triangular", "svd", "svdvals", "tensorinv", "tensorsolve"]


def _dims(dim, ndim: int):
    if dim is None:
        return None
    ds = [dim] if isinstance(dim, int) else list(dim)
    return tuple(norm_dim(d, ndim) for d in ds) if ndim else tuple(ds)


def vector_norm(x: Tensor, ord=2, dim=None, keepdim: bool = False, *, dtype=None, out=None) -> Tensor:  # noqa: A002
    """The vector ``ord``-norm over ``dim`` (all elements for ``None``): max |x| for inf, min for -inf, the count of
    non-zeros for 0, (Σ |x|^ord)^(1/ord) otherwise (a complex tensor's: its modulus's)."""
    if not x.dtype.is_inexact:
        raise DTypeError(f"linalg.vector_norm: Expected a floating point or complex tensor as input. Got "
                         f"{x.dtype.name.capitalize()}")
    if dtype is not None:
        x = x.to(dtype)
    dims = _dims(dim, x.ndim)
    a = x.abs()
    if ord == math.inf or ord == -math.inf:
        if x.numel() == 0 and (dims is None or any(x.shape[d] == 0 for d in dims)):
            raise ShapeError(f"linalg.vector_norm cannot compute the {ord} norm on an empty tensor because the "
                             "operation does not have an identity")
        red = a.amax if ord > 0 else a.amin
        r = red(dim=dims if dims is not None else tuple(range(x.ndim)), keepdim=keepdim)
    elif ord == 0:
        r = (a != 0).to(a.dtype).sum(dims, keepdim=keepdim)
    else:  # the norm op, negative ord included: its gradient is torch's, 0 where an element or the norm is 0
        r = x._reduce("norm", list(dims) if dims is not None else None, keepdim,
                      p=float(ord) if not isinstance(ord, int) else ord)

    return _functions.write_out(out, r)


def matrix_norm(A: Tensor, ord="fro", dim=(-2, -1), keepdim: bool = False, *, dtype=None) -> Tensor:  # noqa: A002,N803
    """The matrix norm over the two ``dim``: ``"fro"``, the max (min) absolute column (1, -1) or row (inf, -inf)
    sum, or from the singular values: their sum (``"nuc"``), the largest (2) or smallest (-2)."""
    if A.ndim < 2:
        raise ShapeError("linalg.matrix_norm: The input tensor A must have at least 2 dimensions.")
    if dtype is not None:
        A = A.to(dtype)
    d0, d1 = (norm_dim(d, A.ndim) for d in dim)
    if ord == "fro":
        return vector_norm(A, 2, (d0, d1), keepdim)
    if ord in ("nuc", 2, -2):
        return singular_norm(A, ord, (d0, d1), keepdim)
    if ord not in (1, -1, math.inf, -math.inf):
        raise ValueError(f"linalg.matrix_norm: Order {ord} not supported.")
    if not A.dtype.is_floating_point:
        raise DTypeError("linalg.matrix_norm: Expected a floating point tensor as input")
    sum_dim, red_dim = (d0, d1) if ord in (1, -1) else (d1, d0)
    s = A.abs().sum(sum_dim, keepdim=True)
    if ord > 0 and s.shape[red_dim] == 0:  # torch: 0 for an empty matrix (the max norms' identity)
        r = s.sum(red_dim, keepdim=True)
    else:
        r = s.amax(red_dim, keepdim=True) if ord > 0 else s.amin(red_dim, keepdim=True)
    return r if keepdim else r.squeeze(max(d0, d1)).squeeze(min(d0, d1))


def norm(A: Tensor, ord=None, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:  # noqa: A002,N803
    """``vector_norm`` or ``matrix_norm`` as torch.linalg.norm picks: a matrix norm when ``dim`` has two dims (or
    ``A`` is 2-D and ``ord`` is given without ``dim``), else a vector norm (``ord=None``: 2, or "fro" for matrices)."""
    if isinstance(dim, int):
        dim = (dim,)
    if dim is not None and len(dim) == 2 or (dim is None and ord is not None and A.ndim == 2):
        return matrix_norm(A, "fro" if ord is None else ord, dim if dim is not None else (-2, -1), keepdim,
                           dtype=dtype)
    if dim is None and ord is not None and A.ndim != 1:
        raise ShapeError(f"linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. Got "
                         f"{A.ndim}D.")
    return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)


def vecdot(x: Tensor, y: Tensor, *, dim: int = -1) -> Tensor:
    """Σ x · y along ``dim`` (broadcasting the others)."""
    return (x * y).sum(dim)


def matmul(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    return input.matmul(other)


def diagonal(A: Tensor, *, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:  # noqa: N803
    return A.diagonal(offset, dim1, dim2)


def multi_dot(tensors) -> Tensor:
    """The product of a chain of matrices (the first and last may be vectors), left to right."""
    ts = list(tensors)
    if len(ts) < 2:
        raise ShapeError(f"multi_dot(): expected at least 2 tensors but got {len(ts)}")
    first_vec, last_vec = ts[0].ndim == 1, ts[-1].ndim == 1
    if first_vec:
        ts[0] = ts[0].unsqueeze(0)
    if last_vec:
        ts[-1] = ts[-1].unsqueeze(-1)
    for i, t in enumerate(ts):
        if t.ndim != 2:
            raise ShapeError(f"multi_dot(): tensor {i} must be 2D but got {t.ndim}D")
    r = ts[0]
    for t in ts[1:]:
        r = r.matmul(t)
    if first_vec and last_vec:
        return r.reshape(())
    if first_vec:
        return r.squeeze(0)
    if last_vec:
        return r.squeeze(-1)
    return r


def matrix_power(A: Tensor, n: int) -> Tensor:  # noqa: N803
    """A^n by repeated squaring (a negative power: the inverse's)."""
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise ShapeError(f"linalg.matrix_power: A must be batches of square matrices, but they are "
                         f"{A.shape[-2] if A.ndim >= 2 else ''} by {A.shape[-1] if A.ndim else ''} matrices")
    if n < 0:
        return matrix_power(inv(A), -n)
    if n == 0:
        ident = _creation.eye(A.shape[-1], dtype=A.dtype, device=A._dev, session=A._s).expand(*A.shape).clone()
        return zero_grad_from(ident, A)
    if n == 1:
        return A.clone()
    result, base = None, A
    while n:
        if n & 1:
            result = base if result is None else result.matmul(base)
        n >>= 1
        if n:
            base = base.matmul(base)
    return result


def vander(x: Tensor, *, N: int | None = None) -> Tensor:  # noqa: N803
    """The Vandermonde matrix of increasing powers x^0 .. x^(N-1) along a new last dim (torch's cumulative
    product)."""
    if x.ndim == 0:  # torch reads a 0-d x as one point
        x = x.reshape(1)
    n = x.shape[-1] if N is None else N
    if n < 0:
        raise ShapeError("N must be non-negative.")
    if x.dtype is D.bool_:
        x = x.to(D.int64)
    ones = x.new_ones((*x.shape, 1))
    if n <= 1:
        return ones.narrow(-1, 0, n)

    return _functions.cat([ones, x.unsqueeze(-1).expand(*x.shape, n - 1).cumprod(-1)], -1)


def matrix_exp(A: Tensor) -> Tensor:  # noqa: N803
    """exp(A) by scaling and squaring: the Taylor series of A / 2^s to degree 18 (in float64 for float32 input),
    squared s times, with s from the largest 1-norm in the batch (a sync point)."""
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise ShapeError("linalg.matrix_exp: A must be batches of square matrices")
    if not A.dtype.is_floating_point:
        raise DTypeError(f"linalg.matrix_exp: expected a floating point tensor, got {A.dtype.name}")
    n = A.shape[-1]
    if A.numel() == 0:
        return A.clone()
    work = D.float64 if A.dtype in (D.float32, D.float16, D.bfloat16) else A.dtype
    x = A.to(work)
    norm1 = float(x.abs().sum(-2).amax().item())
    s = max(0, math.ceil(math.log2(norm1 / 0.5))) if norm1 > 0.5 and math.isfinite(norm1) else 0
    x = x / (2.0 ** s)

    ident = _creation.eye(n, dtype=work, device=A._dev, session=A._s).expand(*x.shape)
    term, total = ident, ident
    for k in range(1, 19):
        term = term.matmul(x) / k
        total = total + term
    for _ in range(s):
        total = total.matmul(total)
    return total.to(A.dtype)
