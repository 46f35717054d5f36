"""``tw.linalg`` (issue 33): the parts of torch.linalg that compose from existing ops (norms, ``vecdot``,
``cross``, ``multi_dot``, ``matrix_power``, ``vander``, ``diagonal``, ``matmul``, ``matrix_exp``), and the
factorisations and what derives from them (``det``, ``inv``, ``solve``, ``cholesky``, ``qr``, ``eigh``, ``svd``,
``lu``, ``ldl``, ``pinv``, ``lstsq``...: :mod:`.linalg_decomp`, run on the client's LAPACK; ``eig``/``eigvals``
need complex dtypes and raise ``NotImplementedError``).

The norms and ``matrix_power`` are defined in :mod:`.linalg_decomp` and ``matrix_exp`` in :mod:`.math_extras`
(Tensor's method modules use them, and this module imports both), and exported here.
"""

from __future__ import annotations

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import ShapeError

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
    matrix_norm,
    matrix_power,
    matrix_rank,
    pinv,
    qr,
    slogdet,
    solve,
    solve_ex,
    solve_triangular,
    svd,
    svdvals,
    tensorinv,
    tensorsolve,
    vector_norm,
)
from .math_extras import linalg_cross as cross
from .math_extras import linalg_matrix_exp as matrix_exp
from .tensor import Tensor

__all__ = ["vector_norm", "matrix_norm", "norm", "vecdot", "cross", "multi_dot", "matrix_power", "vander",
           "diagonal", "matmul", "matrix_exp", "LinAlgError", "cholesky", "cholesky_ex", "cond", "det", "eig",
           "eigh", "eigvals", "eigvalsh", "householder_product", "inv", "inv_ex", "ldl_factor", "ldl_factor_ex",
           "ldl_solve", "lstsq", "lu", "lu_factor", "lu_factor_ex", "lu_solve", "matrix_rank", "pinv", "qr",
           "slogdet", "solve", "solve_ex", "solve_triangular", "svd", "svdvals", "tensorinv", "tensorsolve"]


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
