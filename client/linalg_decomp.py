"""``tw.linalg``'s decompositions, solves and what derives from them (issue 33): ``det``, ``slogdet``, ``inv``,
``solve``, ``solve_triangular``, ``cholesky``, ``eigh``, ``svd``, ``qr``, ``lu``/``lu_factor``/``lu_solve``,
``ldl_factor``/``ldl_solve``, ``householder_product``, ``pinv``, ``matrix_rank``, ``cond``, ``lstsq``,
``tensorinv``/``tensorsolve``, with torch's signatures, result tuples and errors.

The factorisations run on the client's LAPACK (:mod:`.linalg_lapack`: a sync point each); everything else composes
from them with tensor ops, so gradients flow through the composition; ``pinv`` (and ``lstsq``, its solution being
``pinv(A) B``) has torch's own backward formula instead, as the SVD's is NaN where singular values repeat. ``eig`` and
``eigvals`` give complex results (complex64 for a float32 input).
"""

from __future__ import annotations

import math

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DTypeError, ShapeError
from tensorwire.protocol.shapes import broadcast, norm_dim

from . import _install
from . import combine as _combine
from . import creation as _creation
from . import linalg_lapack as L
from .autograd_engine import Function
from .host_ops import LinAlgError, check_float
from .return_types import return_type
from .tensor import Tensor
from .zero_grads import zero_grad_from

#: torch.linalg's result types (``torch.return_types.linalg_<name>``; torch's older functions' own are in
#: :mod:`.linalg_legacy`)
Slogdet = return_type("linalg_slogdet", ["sign", "logabsdet"])
InvEx = return_type("linalg_inv_ex", ["inverse", "info"])
SolveEx = return_type("linalg_solve_ex", ["result", "info"])
CholeskyEx = return_type("linalg_cholesky_ex", ["L", "info"])
Eigh = return_type("linalg_eigh", ["eigenvalues", "eigenvectors"])
Eig = return_type("linalg_eig", ["eigenvalues", "eigenvectors"])
Svd = return_type("linalg_svd", ["U", "S", "Vh"])
Qr = return_type("linalg_qr", ["Q", "R"])
LUFactor = return_type("linalg_lu_factor", ["LU", "pivots"])
LUFactorEx = return_type("linalg_lu_factor_ex", ["LU", "pivots", "info"])
PLU = return_type("linalg_lu", ["P", "L", "U"])
LUUnpack = return_type("lu_unpack", ["P", "L", "U"])
LDLFactor = return_type("linalg_ldl_factor", ["LD", "pivots"])
LDLFactorEx = return_type("linalg_ldl_factor_ex", ["LD", "pivots", "info"])
Lstsq = return_type("linalg_lstsq", ["solution", "residuals", "rank", "singular_values"])


# -- checks and shapes -----------------------------------------------------------------------------------------------

def _square(name: str, A: Tensor) -> None:  # noqa: N803
    check_float(name, A)
    if A.ndim < 2:
        raise ShapeError(f"{name}: The input tensor A must have at least 2 dimensions.")
    if A.shape[-1] != A.shape[-2]:
        raise ShapeError(f"{name}: A must be batches of square matrices, but they are {A.shape[-2]} by "
                         f"{A.shape[-1]} matrices")


def _matrix(name: str, A: Tensor) -> None:  # noqa: N803
    check_float(name, A)
    if A.ndim < 2:
        raise ShapeError(f"{name}: The input tensor A must have at least 2 dimensions.")


def _eye(like: Tensor, n: int, m: int | None = None) -> Tensor:
    return _creation.eye(n, m, dtype=like.dtype, device=like._dev, session=like._s)


def _zeros(like: Tensor, shape, dtype=None) -> Tensor:
    return _creation.zeros(*shape, dtype=dtype or like.dtype, device=like._dev, session=like._s)


def _where(cond, a, b) -> Tensor:
    return _combine.where(cond, a, b)


def _batched(A: Tensor, B: Tensor) -> tuple[Tensor, Tensor]:  # noqa: N803
    """``A`` (*, n, n) and ``B`` (*, n, k) expanded to their common batch shape."""
    batch = broadcast(tuple(A.shape[:-2]), tuple(B.shape[:-2]))
    return A.expand(*batch, *A.shape[-2:]), B.expand(*batch, *B.shape[-2:])


def _vector_case(A: Tensor, B: Tensor) -> bool:  # noqa: N803
    return B.ndim == 1 or (B.ndim == A.ndim - 1 and tuple(B.shape) == tuple(A.shape[:-1]))


# -- determinants ----------------------------------------------------------------------------------------------------

def slogdet(A: Tensor) -> Slogdet:  # noqa: N803
    """``(sign, log|det A|)``: sign 0 and -inf for a singular matrix."""
    _square("linalg.slogdet", A)
    return Slogdet(*L.slogdet(A))


def det(A: Tensor) -> Tensor:  # noqa: N803
    """The determinant, as ``sign * exp(log|det|)``."""
    _square("linalg.det", A)
    sign, logabs = L.slogdet(A)
    return sign * logabs.exp()


def logdet(A: Tensor) -> Tensor:  # noqa: N803
    """``log det A``: NaN for a negative determinant, -inf for a singular matrix (torch.logdet)."""
    _square("logdet", A)
    sign, logabs = L.slogdet(A)
    return _where(sign < 0, math.nan, logabs)


# -- inverses and solves ---------------------------------------------------------------------------------------------

def inv_ex(A: Tensor, *, check_errors: bool = False) -> InvEx:  # noqa: N803
    """``(A^-1, info)``: ``info`` > 0 marks a singular matrix (its inverse is then NaN) instead of raising."""
    _square("linalg.inv", A)
    x, info = L.solve(A, _eye(A, A.shape[-1]).expand(*A.shape), "linalg.inv", check_errors)
    return InvEx(x, info)


def inv(A: Tensor) -> Tensor:  # noqa: N803
    """The inverse; a singular matrix raises :class:`LinAlgError`."""
    return inv_ex(A, check_errors=True).inverse


def solve_ex(A: Tensor, B: Tensor, *, left: bool = True, check_errors: bool = False) -> SolveEx:  # noqa: N803
    """``(X, info)`` with ``A X = B`` (``left=False``: ``X A = B``); ``B`` (*, n) is a batch of vectors when its
    shape is ``A``'s but the last, as torch reads it."""
    _square("linalg.solve", A)
    check_float("linalg.solve", B)
    if _vector_case(A, B) and left:
        x, info = solve_ex(A, B.unsqueeze(-1), check_errors=check_errors)
        return SolveEx(x.squeeze(-1), info)
    if not left:
        x, info = solve_ex(A.mT, B.mT, check_errors=check_errors)
        return SolveEx(x.mT, info)
    if B.shape[-2] != A.shape[-1]:
        raise ShapeError(f"linalg.solve: Incompatible shapes of A and B for the equation AX = B ({A.shape[-2]}x"
                         f"{A.shape[-1]} and {B.shape[-2]}x{B.shape[-1]})")
    return SolveEx(*L.solve(*_batched(A, B), "linalg.solve", check_errors))


def solve(A: Tensor, B: Tensor, *, left: bool = True, out=None) -> Tensor:  # noqa: N803
    """``X`` with ``A X = B`` (``left=False``: ``X A = B``); a singular ``A`` raises :class:`LinAlgError`."""
    return _combine.write_out(out, solve_ex(A, B, left=left, check_errors=True).result)


def _triangle(A: Tensor, upper: bool, unitriangular: bool) -> Tensor:  # noqa: N803
    """The triangle of ``A`` a triangular solve reads (its diagonal taken as ones when ``unitriangular``)."""
    if not unitriangular:
        return A.triu() if upper else A.tril()
    return (A.triu(1) if upper else A.tril(-1)) + _eye(A, A.shape[-1])


def solve_triangular(A: Tensor, B: Tensor, *, upper: bool, left: bool = True,  # noqa: N803
                     unitriangular: bool = False, out=None) -> Tensor:
    """``X`` with ``T X = B`` (``left=False``: ``X T = B``), ``T`` the upper or lower triangle of ``A``; a zero on
    the diagonal gives inf/NaN, as LAPACK's trtrs."""
    _square("linalg.solve_triangular", A)
    check_float("linalg.solve_triangular", B)
    if B.ndim < 2:
        raise ShapeError("linalg.solve_triangular: The input tensor B must have at least 2 dimensions.")
    t = _triangle(A, upper, unitriangular)
    t, b = (t, B) if left else (t.mT, B.mT)
    x = L.solve(*_batched(t, b), "linalg.solve_triangular", False)[0]
    return _combine.write_out(out, x if left else x.mT)


def tensorinv(A: Tensor, ind: int = 2) -> Tensor:  # noqa: N803
    """The inverse of ``A`` read as a map from its first ``ind`` dims to the rest."""
    if ind <= 0:
        raise ValueError(f"Expected a strictly positive integer for 'ind', but got {ind}")
    rows, cols = math.prod(A.shape[:ind]), math.prod(A.shape[ind:])
    if rows != cols:
        raise ShapeError(f"Expected self to satisfy the requirement prod(self.shape[ind:]) == "
                         f"prod(self.shape[:ind]), but got {cols} != {rows}")
    return inv(A.reshape(rows, cols)).reshape(*A.shape[ind:], *A.shape[:ind])


def tensorsolve(A: Tensor, B: Tensor, dims=None) -> Tensor:  # noqa: N803
    """``X`` with ``tensordot(A, X, X.ndim) = B`` (``dims``: dims of ``A`` moved to the end first)."""
    if dims is not None:
        src = [norm_dim(d, A.ndim) for d in dims]
        A = A.movedim(src, list(range(A.ndim - len(src), A.ndim)))  # noqa: N806
    out_shape = A.shape[B.ndim:]
    n = math.prod(B.shape)
    if math.prod(out_shape) != n:
        raise ShapeError(f"Expected self to satisfy the requirement prod(self.shape[other.ndim:]) == "
                         f"prod(self.shape[:other.ndim]), but got {math.prod(out_shape)} != {n}")
    return solve(A.reshape(n, n), B.reshape(n)).reshape(*out_shape)


# -- Cholesky, eigh, SVD, QR -----------------------------------------------------------------------------------------

def cholesky_ex(A: Tensor, *, upper: bool = False, check_errors: bool = False) -> CholeskyEx:  # noqa: N803
    """``(L, info)``: ``info`` > 0 (the order of the leading minor that is not positive-definite) instead of
    raising."""
    _square("linalg.cholesky", A)
    low, info = L.cholesky(A, "linalg.cholesky", check_errors)
    return CholeskyEx(low.mT if upper else low, info)


def cholesky(A: Tensor, *, upper: bool = False, out=None) -> Tensor:  # noqa: N803
    """The Cholesky factor ``L`` (``A = L L^T``; ``upper``: ``U = L^T``); not positive-definite: LinAlgError."""
    return _combine.write_out(out, cholesky_ex(A, upper=upper, check_errors=True).L)


def eigh(A: Tensor, UPLO: str = "L") -> Eigh:  # noqa: N803
    """Eigenvalues (ascending) and eigenvectors (columns) of the symmetric ``A``; each vector's sign is LAPACK's
    choice (torch's may differ: both are right)."""
    _square("linalg.eigh", A)
    if UPLO not in ("L", "U"):
        raise ValueError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    return Eigh(*L.eigh(A, UPLO))


def eigvalsh(A: Tensor, UPLO: str = "L") -> Tensor:  # noqa: N803
    return eigh(A, UPLO).eigenvalues


def eig(A: Tensor) -> Eig:  # noqa: N803
    """``(eigenvalues, eigenvectors)`` of a square matrix, complex: each eigenvector of unit norm with its largest
    component real (LAPACK's ``geev``, as torch's CPU)."""
    _square("linalg.eig", A)
    return Eig(*L.eig(A))


def eigvals(A: Tensor) -> Tensor:  # noqa: N803
    """The eigenvalues of a square matrix, complex."""
    return eig(A).eigenvalues


def svd(A: Tensor, full_matrices: bool = True, *, driver=None) -> Svd:  # noqa: N803
    """``(U, S, Vh)``, ``S`` descending; each singular pair's sign is LAPACK's choice."""
    _matrix("linalg.svd", A)
    return Svd(*L.svd(A, full_matrices))


def svdvals(A: Tensor, *, driver=None) -> Tensor:  # noqa: N803
    """The singular values, descending."""
    _matrix("linalg.svdvals", A)
    return L.svd(A, False, values_only=True)[1]


def qr(A: Tensor, mode: str = "reduced") -> Qr:  # noqa: N803
    _matrix("linalg.qr", A)
    return Qr(*L.qr(A, mode))


# -- LU and LDL ------------------------------------------------------------------------------------------------------

def _no_pivot(name: str, pivot: bool) -> None:
    if not pivot:
        raise NotImplementedError(f"{name}: LU without pivoting is not implemented on the CPU (nor in tensorwire)")


def lu_factor_ex(A: Tensor, *, pivot: bool = True, check_errors: bool = False) -> LUFactorEx:  # noqa: N803
    """``(LU, pivots, info)`` as LAPACK's getrf: ``info`` = k > 0 when ``U[k-1, k-1]`` is zero."""
    _matrix("linalg.lu_factor", A)
    _no_pivot("linalg.lu_factor", pivot)
    lu, piv, info = L.lu_factor(A)
    if check_errors and bool((info > 0).any()):
        k = int(info.max())
        raise LinAlgError(f"linalg.lu_factor: U[{k},{k}] is zero and using it on lu_solve would result in a "
                          "division by zero. If you still want to perform the factorization, consider calling "
                          "linalg.lu(A, pivot) or linalg.lu_factor_ex(A, pivot)")
    return LUFactorEx(lu, piv, info)


def lu_factor(A: Tensor, *, pivot: bool = True) -> LUFactor:  # noqa: N803
    lu, piv, _ = lu_factor_ex(A, pivot=pivot, check_errors=True)
    return LUFactor(lu, piv)


def _permutation(pivots: Tensor, m: int, like: Tensor) -> Tensor:
    """The permutation matrix ``P`` (m x m) of LAPACK's 1-based row swaps ``pivots``: ``A = P L U``."""
    piv = np.asarray(pivots._numpy()).astype(np.int64) - 1
    batch, k = piv.shape[:-1], piv.shape[-1]
    if m == 0 or piv.size == 0 and k:
        return _zeros(like, (*batch, m, m))
    perm = np.broadcast_to(np.arange(m), (*batch, m)).reshape(-1, m).copy()
    swaps, rows = piv.reshape(-1, k), np.arange(perm.shape[0])
    for i in range(k):  # LAPACK's order: row i swapped with row pivots[i]
        j = swaps[:, i]
        perm[rows, i], perm[rows, j] = perm[rows, j], perm[rows, i].copy()
    perm = perm.reshape(*batch, m)
    p = np.zeros((*batch, m, m), np.float64)
    np.put_along_axis(p, perm[..., :, None], 1.0, axis=-1)  # p[perm[i], ...]: rows of (L U) go to perm[i]
    p = np.swapaxes(p, -1, -2)
    return _creation.tensor(p, dtype=like.dtype, device=like._dev, session=like._s)


def lu_unpack(LU_data: Tensor, LU_pivots: Tensor, unpack_data: bool = True, unpack_pivots: bool = True) -> LUUnpack:  # noqa: N803
    """``(P, L, U)`` from ``lu_factor``'s compact form (an empty tensor for what is not unpacked)."""
    m, n = LU_data.shape[-2], LU_data.shape[-1]
    k = min(m, n)
    empty = _zeros(LU_data, (0,))
    if unpack_data:
        low = LU_data.narrow(-1, 0, k).tril(-1) + _eye(LU_data, m, k)
        up = LU_data.narrow(-2, 0, k).triu()
    else:
        low = up = empty
    p = _permutation(LU_pivots, m, LU_data) if unpack_pivots else empty
    return LUUnpack(p, low, up)


def lu(A: Tensor, *, pivot: bool = True) -> PLU:  # noqa: N803
    """``(P, L, U)`` with ``A = P L U``."""
    lu_, piv, _ = lu_factor_ex(A, pivot=pivot)
    return PLU(*lu_unpack(lu_, piv))


def lu_solve(LU: Tensor, pivots: Tensor, B: Tensor, *, left: bool = True, adjoint: bool = False) -> Tensor:  # noqa: N803
    """``X`` with ``A X = B`` from ``A``'s ``lu_factor`` (``adjoint``: ``A^T X = B``; ``left=False``: ``X A = B``)."""
    check_float("linalg.lu_solve", LU, B)
    if not left:
        return lu_solve(LU, pivots, B.mT, adjoint=not adjoint).mT
    p, low, up = lu_unpack(LU, pivots)
    if not adjoint:  # A = P L U: X = U^-1 L^-1 P^T B
        y = solve_triangular(low, p.mT.matmul(B), upper=False, unitriangular=True)
        return solve_triangular(up, y, upper=True)
    y = solve_triangular(up.mT, B, upper=False)  # A^T = U^T L^T P^T: X = P L^-T U^-T B
    return p.matmul(solve_triangular(low.mT, y, upper=True, unitriangular=True))


def ldl_factor_ex(A: Tensor, *, hermitian: bool = False, check_errors: bool = False) -> LDLFactorEx:  # noqa: N803
    """``(LD, pivots, info)`` as LAPACK's sytrf (Bunch-Kaufman; the lower triangle is read)."""
    _square("linalg.ldl_factor", A)
    ld, piv, info = L.ldl_factor(A)
    if check_errors and bool((info > 0).any()):
        raise LinAlgError(f"linalg.ldl_factor: The factorization could not be completed because the input is "
                          f"singular (D[{int(info.max())}] is zero)")
    return LDLFactorEx(ld, piv, info)


def ldl_factor(A: Tensor, *, hermitian: bool = False) -> LDLFactor:  # noqa: N803
    ld, piv, _ = ldl_factor_ex(A, hermitian=hermitian, check_errors=True)
    return LDLFactor(ld, piv)


def ldl_solve(LD: Tensor, pivots: Tensor, B: Tensor, *, hermitian: bool = False) -> Tensor:  # noqa: N803
    """``X`` with ``A X = B`` from ``ldl_factor``'s ``(LD, pivots)``."""
    check_float("linalg.ldl_solve", LD, B)
    batch = broadcast(tuple(LD.shape[:-2]), tuple(B.shape[:-2]))
    return L.ldl_solve(LD.expand(*batch, *LD.shape[-2:]), pivots.expand(*batch, pivots.shape[-1]),
                       B.expand(*batch, *B.shape[-2:]))


# -- Householder products --------------------------------------------------------------------------------------------

def _reflector(A: Tensor, i: int) -> Tensor:  # noqa: N803
    """The i-th Householder vector of a geqrf result (*, m, 1): zeros above row i, 1 at i, ``A[i+1:, i]`` below."""
    m = A.shape[-2]
    col = A.narrow(-1, i, 1)
    rows = _creation.arange(m, device=A._dev, session=A._s).unsqueeze(-1)
    return _where(rows > i, col, (rows == i).to(A.dtype))


def apply_reflectors(A: Tensor, tau: Tensor, C: Tensor, *, left: bool, transpose: bool) -> Tensor:  # noqa: N803
    """``Q C``, ``Q^T C``, ``C Q`` or ``C Q^T`` with ``Q = H_1 ... H_k``, ``H_i = I - tau_i v_i v_i^T``, the
    reflectors of ``(A, tau)`` (geqrf's form), one rank-1 update a reflector."""
    k = tau.shape[-1]
    order = range(k - 1, -1, -1) if left != transpose else range(k)
    for i in order:
        v = _reflector(A, i)
        t = tau.narrow(-1, i, 1).unsqueeze(-1)
        C = C - t * v.matmul(v.mT.matmul(C)) if left else C - t * C.matmul(v).matmul(v.mT)  # noqa: N806
    return C


def householder_product(A: Tensor, tau: Tensor, *, out=None) -> Tensor:  # noqa: N803
    """The first n columns of ``H_1 ... H_k`` (LAPACK's orgqr)."""
    check_float("linalg.householder_product", A, tau)
    m, n = A.shape[-2], A.shape[-1]
    if not m >= n >= tau.shape[-1]:
        raise ShapeError("torch.linalg.householder_product: input.shape[-2] must be greater than or equal to "
                         "input.shape[-1], which must be greater than or equal to tau.shape[-1]")
    eye = _eye(A, m, n).expand(*A.shape[:-2], m, n)
    return _combine.write_out(out, apply_reflectors(A, tau, eye, left=True, transpose=False))


# -- from the SVD: pinv, matrix_rank, cond, lstsq, norms -------------------------------------------------------------

def _tolerance(s_max: Tensor, m: int, n: int, atol, rtol, dtype) -> Tensor:
    """``max(atol, rtol * s_max)`` with torch's defaults (rtol = eps * max(m, n) unless a positive atol is given)."""
    eps = float(np.finfo(dtype.np).eps) * max(m, n)
    if atol is None:
        atol = 0.0
    if rtol is None:
        rtol = eps if not isinstance(atol, Tensor) and atol <= 0 else (
            _where(atol > 0, 0.0, eps) if isinstance(atol, Tensor) else 0.0)
    if isinstance(atol, Tensor):
        atol = atol.unsqueeze(-1) if atol.ndim else atol
    if isinstance(rtol, Tensor) and rtol.ndim:
        rtol = rtol.unsqueeze(-1)
    tol = rtol * s_max
    return tol.maximum(atol) if isinstance(atol, Tensor) else tol.clamp(min=atol)


def _spectrum(A: Tensor, hermitian: bool):  # noqa: N803
    """``(magnitudes, left vectors, values to invert, right vectors^T)``: the SVD, or for a symmetric ``A`` the
    eigen-decomposition (|w| as magnitudes)."""
    if hermitian:
        w, v = L.eigh(A, "L")
        return w.abs(), v, w, v.mT
    u, s, vh = L.svd(A, False)
    return s, u, s, vh


def pinv(A: Tensor, *, atol=None, rtol=None, hermitian: bool = False, rcond=None, out=None) -> Tensor:  # noqa: N803
    """The Moore-Penrose pseudo-inverse: values of magnitude at most ``max(atol, rtol * largest)`` count as zero."""
    _matrix("linalg.pinv", A)
    if rcond is not None:
        rtol = rcond
    m, n = A.shape[-2], A.shape[-1]
    if min(m, n) == 0:
        return _combine.write_out(out, zero_grad_from(_zeros(A, (*A.shape[:-2], n, m)), A))
    return _combine.write_out(out, _Pinv.apply(A, lambda: _pinv_value(A, m, n, atol, rtol, hermitian)))


def _pinv_value(A: Tensor, m: int, n: int, atol, rtol, hermitian: bool) -> Tensor:  # noqa: N803
    mag, u, vals, vh = _spectrum(A, hermitian)
    keep = mag > _tolerance(mag.amax(-1, keepdim=True), m, n, atol, rtol, A.dtype)
    inv_vals = _where(keep, 1 / _where(keep, vals, 1.0), 0.0)
    return (vh.mT * inv_vals.unsqueeze(-2)).matmul(u.mT)


class _Pinv(Function):
    """``pinv(A)`` with torch's pinv_backward (FunctionsManual.cpp), written from ``A`` and ``pinv(A)`` alone: the
    SVD's own gradient is NaN or wrong where singular values repeat, as the zeros of a rank-deficient ``A`` do."""

    @staticmethod
    def forward(ctx, A: Tensor, value) -> Tensor:  # noqa: N803
        P = value()  # noqa: N806
        ctx.save_for_backward(A, P)
        return P

    @staticmethod
    def backward(ctx, grad: Tensor):
        A, P = ctx.saved_tensors  # noqa: N806
        gh = grad.mT
        if A.shape[-2] <= A.shape[-1]:
            K = gh.matmul(P)  # noqa: N806
            KPh = K.matmul(P.mT)  # noqa: N806
            gA = -P.matmul(K).mT + KPh - A.matmul(P).matmul(KPh) + P.mT.matmul(P).matmul(gh - K.matmul(A))  # noqa: N806
        else:
            K = P.matmul(gh)  # noqa: N806
            PhK = P.mT.matmul(K)  # noqa: N806
            gA = -K.matmul(P).mT + (gh - A.matmul(K)).matmul(P).matmul(P.mT) + PhK - PhK.matmul(P).matmul(A)  # noqa: N806
        return gA, None


def matrix_rank(A: Tensor, tol=None, hermitian: bool = False, *, atol=None, rtol=None, out=None) -> Tensor:  # noqa: N803
    """The number of singular values (|eigenvalues| for ``hermitian``) above ``max(atol, rtol * largest)``."""
    _matrix("linalg.matrix_rank", A)
    if tol is not None:
        atol, rtol = tol, 0.0
    m, n = A.shape[-2], A.shape[-1]
    if min(m, n) == 0:
        return _combine.write_out(out, _zeros(A, A.shape[:-2], D.int64))
    mag = L.eigh(A, "L")[0].abs() if hermitian else L.svd(A, False, values_only=True)[1]
    tol_ = _tolerance(mag.amax(-1, keepdim=True), m, n, atol, rtol, A.dtype)
    return _combine.write_out(out, (mag > tol_).sum(-1))


def cond(A: Tensor, p=None) -> Tensor:  # noqa: N803
    """The condition number in the ``p`` norm (``None``/2: largest / smallest singular value)."""
    _matrix("linalg.cond", A)
    if p in (None, 2, -2):
        s = svdvals(A)
        hi, lo = s.narrow(-1, 0, 1).squeeze(-1), s.narrow(-1, s.shape[-1] - 1, 1).squeeze(-1)
        return hi / lo if p != -2 else lo / hi
    _square("linalg.cond", A)
    a_inv, info = inv_ex(A)
    r = matrix_norm(A, p) * matrix_norm(a_inv, p)
    return _where(info > 0, math.inf, r)


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

    return _combine.write_out(out, r)


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


def singular_norm(A: Tensor, ord, dim, keepdim: bool) -> Tensor:  # noqa: N803, A002
    """The matrix norms from singular values: ``"nuc"`` (their sum), 2 (the largest), -2 (the smallest)."""
    d0, d1 = (norm_dim(d, A.ndim) for d in dim)
    s = svdvals(A.movedim((d0, d1), (-2, -1)))
    empty_max = ord == 2 and s.shape[-1] == 0  # torch: 0 for an empty matrix; the min norm has no identity
    r = s.sum(-1) if ord == "nuc" or empty_max else s.amax(-1) if ord == 2 else s.amin(-1)
    if keepdim:
        for d in sorted((d0, d1)):
            r = r.unsqueeze(d)
    return r


def lstsq(A: Tensor, B: Tensor, rcond=None, *, driver=None) -> Lstsq:  # noqa: N803
    """The least-squares solution of ``A X = B`` (the minimum-norm one where ``A`` has not full rank), with torch's
    other results for ``driver``: residuals (``m > n``, full rank, not gelsy), rank (not gels), singular values
    (gelsd, gelss); empty where the driver gives none."""
    _matrix("linalg.lstsq", A)
    check_float("linalg.lstsq", B)
    driver = driver or "gelsy"
    if driver not in ("gels", "gelsy", "gelsd", "gelss"):
        raise ValueError(f"torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss), "
                         f"but got {driver}")
    vector = B.ndim == A.ndim - 1
    b = B.unsqueeze(-1) if vector else B
    a, b = _batched(A, b)
    m, n = A.shape[-2], A.shape[-1]
    empty = _zeros(A, (0,))
    if min(m, n) == 0:
        x = _zeros(A, (*b.shape[:-2], n, b.shape[-1]))
        s = r = None
    else:
        u, s, vh = L.svd(a, False)
        rtol = float(np.finfo(A.dtype.np).eps) * max(m, n) if rcond is None or rcond < 0 else rcond
        keep = s > s.amax(-1, keepdim=True) * rtol
        inv_s = _where(keep, 1 / _where(keep, s, 1.0), 0.0)
        x = _Pinv.apply(a, lambda: (vh.mT * inv_s.unsqueeze(-2)).matmul(u.mT)).matmul(b)  # torch's gradient
        r = keep.sum(-1)
    rank = empty.to(D.int64) if driver == "gels" or r is None else r
    full = r is not None and bool((r == n).all())
    resid = ((a.matmul(x) - b) ** 2).sum(-2) if m > n and driver != "gelsy" and full else empty
    if vector and resid.ndim:
        resid = resid.squeeze(-1) if resid.shape[-1] == 1 and resid.ndim > 1 else resid
    sv = s if driver in ("gelsd", "gelss") and s is not None else empty
    return Lstsq(x.squeeze(-1) if vector else x, resid, rank, sv)

def tensor_norm(self: Tensor, p="fro", dim=None, keepdim: bool = False, dtype=None) -> Tensor:
    """``x.norm(p, dim, keepdim, dtype)`` (and ``tw.norm``): the ``p``-norm over ``dim`` (all elements when None;
    ``"fro"`` is 2), or the nuclear norm of the matrices over ``dim`` (the last two by default) for ``"nuc"``. A Tensor
    method installed here, with :func:`matrix_norm` (issue 32: ``tensor`` does not import the linear algebra)."""
    x = self if dtype is None else self.to(dtype)
    if p == "fro" or p is None:
        p = 2
    if p == "nuc":
        return matrix_norm(x, "nuc", (-2, -1) if dim is None else dim, keepdim)
    return x._reduce("norm", dim, keepdim, p=float(p) if not isinstance(p, int) else p)


tensor_norm.__name__ = tensor_norm.__qualname__ = "norm"
_install.install_methods(Tensor, {"norm": tensor_norm}, wrap=False)
_install.loaded(__name__)
