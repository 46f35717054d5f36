"""torch's linear algebra outside ``torch.linalg`` (issue 33): ``det``, ``logdet``, ``slogdet``, ``inverse``,
``cholesky``, ``cholesky_solve``, ``cholesky_inverse``, ``qr``, ``svd``, ``lu``, ``lu_unpack``, ``lu_solve``,
``triangular_solve``, ``geqrf``, ``orgqr``, ``ormqr``, ``pinverse``, ``matrix_power``, ``svd_lowrank``,
``pca_lowrank``: torch's older signatures and result tuples over :mod:`.linalg_decomp`.

:data:`FUNCTIONS` are exported as ``tw.<name>``; :data:`METHODS` become ``Tensor`` methods (:func:`install`).
"""

from __future__ import annotations

from tensorwire.protocol.errors import ShapeError

from . import _install
from . import linalg_decomp as LD
from . import linalg_lapack as L
from .return_types import return_type
from .tensor import Tensor

SvdLegacy = return_type("svd", ["U", "S", "V"])
TriangularSolve = return_type("triangular_solve", ["solution", "cloned_coefficient"])
Geqrf = return_type("geqrf", ["a", "tau"])
QrLegacy = return_type("qr", ["Q", "R"])  # (torch.linalg's are ``linalg_qr``, ``linalg_slogdet``)
SlogdetLegacy = return_type("slogdet", ["sign", "logabsdet"])


def cholesky(input: Tensor, upper: bool = False) -> Tensor:  # noqa: A002
    return LD.cholesky(input, upper=upper)


def cholesky_solve(B: Tensor, L_: Tensor, upper: bool = False) -> Tensor:  # noqa: N803
    """``X`` with ``A X = B``, ``A = L L^T`` (``upper``: ``U^T U``) from its Cholesky factor."""
    low = L_.mT if upper else L_
    return LD.solve_triangular(low.mT, LD.solve_triangular(low, B, upper=False), upper=True)


def cholesky_inverse(L_: Tensor, upper: bool = False) -> Tensor:  # noqa: N803
    """``A^-1`` for ``A = L L^T`` (``upper``: ``U^T U``) from its Cholesky factor."""
    if L_.ndim < 2 or L_.shape[-1] != L_.shape[-2]:
        raise ShapeError("cholesky_inverse: A must be batches of square matrices")
    low = L_.mT if upper else L_
    eye = LD._eye(L_, L_.shape[-1]).expand(*L_.shape)
    low_inv = LD.solve_triangular(low, eye, upper=False)
    return low_inv.mT.matmul(low_inv)


def qr(input: Tensor, some: bool = True) -> QrLegacy:  # noqa: A002
    return QrLegacy(*LD.qr(input, "reduced" if some else "complete"))


def slogdet(input: Tensor) -> SlogdetLegacy:  # noqa: A002
    """``(sign, logabsdet)`` of ``input``'s determinant (``linalg.slogdet``'s values, torch.slogdet's type)."""
    return SlogdetLegacy(*LD.slogdet(input))


def svd(input: Tensor, some: bool = True, compute_uv: bool = True) -> SvdLegacy:  # noqa: A002
    """``(U, S, V)`` (V, not Vh); ``compute_uv=False``: U and V are zeros (m x m, n x n), as torch's."""
    LD._matrix("svd", input)
    if not compute_uv:
        m, n = input.shape[-2], input.shape[-1]
        batch = input.shape[:-2]
        return SvdLegacy(LD._zeros(input, (*batch, m, m)), LD.svdvals(input), LD._zeros(input, (*batch, n, n)))
    u, s, vh = LD.svd(input, full_matrices=not some)
    return SvdLegacy(u, s, vh.mT)


def lu(A: Tensor, pivot: bool = True, get_infos: bool = False):  # noqa: N803
    """``(LU, pivots)`` (``get_infos``: and ``info``, instead of raising for a singular matrix)."""
    r = LD.lu_factor_ex(A, pivot=pivot, check_errors=not get_infos)
    return (r.LU, r.pivots, r.info) if get_infos else (r.LU, r.pivots)


def lu_solve(b: Tensor, LU_data: Tensor, LU_pivots: Tensor) -> Tensor:  # noqa: N803
    return LD.lu_solve(LU_data, LU_pivots, b)


def triangular_solve(b: Tensor, A: Tensor, upper: bool = True, transpose: bool = False,  # noqa: N803
                     unitriangular: bool = False) -> TriangularSolve:
    """``(X, A.clone())`` with ``T X = b`` (``transpose``: ``T^T X = b``), ``T`` a triangle of ``A``."""
    LD._square("triangular_solve", A)
    t = LD._triangle(A, upper, unitriangular)
    if transpose:
        t = t.mT
    return TriangularSolve(L.solve(*LD._batched(t, b), "triangular_solve", False)[0], A.clone())


def geqrf(input: Tensor) -> Geqrf:  # noqa: A002
    LD._matrix("geqrf", input)
    return Geqrf(*L.geqrf(input))


def ormqr(input: Tensor, tau: Tensor, other: Tensor, left: bool = True, transpose: bool = False) -> Tensor:  # noqa: A002
    """``Q other`` (``left=False``: ``other Q``; ``transpose``: Q^T) with Q the product of geqrf's reflectors."""
    return LD.apply_reflectors(input, tau, other, left=left, transpose=transpose)


def pinverse(input: Tensor, rcond: float = 1e-15) -> Tensor:  # noqa: A002
    return LD.pinv(input, rtol=rcond)


def matrix_power(input: Tensor, n: int) -> Tensor:  # noqa: A002
    return LD.matrix_power(input, n)


def _truncated_svd(A: Tensor, q: int):  # noqa: N803
    u, s, vh = LD.svd(A, full_matrices=False)
    return u.narrow(-1, 0, q), s.narrow(-1, 0, q), vh.narrow(-2, 0, q).mT


def svd_lowrank(A: Tensor, q: int | None = 6, niter: int = 2, M: Tensor | None = None) -> tuple:  # noqa: N803
    """``(U, S, V)`` of rank ``q`` approximating ``A - M``: here the exact truncated SVD (torch's randomised
    iteration converges to it; ``niter`` is accepted)."""
    a = A if M is None else A - M
    q = 6 if q is None else q
    if not 0 <= q <= min(a.shape[-2:]):
        raise ShapeError(f"svd_lowrank: q(={q}) must be non-negative integer and not greater than "
                         f"min(m, n)={min(a.shape[-2:])}")
    return _truncated_svd(a, q)


def pca_lowrank(A: Tensor, q: int | None = None, center: bool = True, niter: int = 2) -> tuple:  # noqa: N803
    """``(U, S, V)`` of the rank-``q`` principal components of ``A`` (centred over its rows with ``center``)."""
    m, n = A.shape[-2:]
    q = min(6, m, n) if q is None else q
    if not 0 <= q <= min(m, n):
        raise ShapeError(f"pca_lowrank: q(={q}) must be non-negative integer and not greater than "
                         f"min(m, n)={min(m, n)}")
    return _truncated_svd(A - A.mean(-2, keepdim=True) if center else A, q)


FUNCTIONS = {
    "det": LD.det, "logdet": LD.logdet, "slogdet": slogdet, "inverse": LD.inv, "cholesky": cholesky,
    "cholesky_solve": cholesky_solve, "cholesky_inverse": cholesky_inverse, "qr": qr, "svd": svd, "lu": lu,
    "lu_unpack": LD.lu_unpack, "lu_solve": lu_solve, "triangular_solve": triangular_solve, "geqrf": geqrf,
    "orgqr": LD.householder_product, "ormqr": ormqr, "pinverse": pinverse, "matrix_power": matrix_power,
    "svd_lowrank": svd_lowrank, "pca_lowrank": pca_lowrank,
}

#: Tensor methods torch has for these
METHODS = {n: f for n, f in FUNCTIONS.items() if n not in ("lu_unpack", "svd_lowrank", "pca_lowrank")}


def install(cls=Tensor) -> None:
    """Add :data:`METHODS` to ``Tensor`` (leaving any method it defines itself)."""
    _install.install_methods(cls, METHODS)


install()
_install.register(FUNCTIONS)
_install.loaded(__name__)
