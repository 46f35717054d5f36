"""The factorisations behind ``tw.linalg``, run on the client's LAPACK (:mod:`.host_ops`), with their gradients.

Seven are differentiable and carry everything else in ``tw.linalg`` that composes from them: ``solve`` (inverses,
triangular and Cholesky solves), ``slogdet`` (``det``, ``logdet``), ``cholesky``, ``eigh``, ``svd`` (``svdvals``,
``pinv``, ``matrix_rank``, ``cond``, ``lstsq``, the spectral and nuclear norms), ``qr`` and ``getrf`` (``lu_factor``,
``lu``, ``lu_solve``). ``sytrf``/``sytrs`` (``ldl_factor``/``ldl_solve``) and ``geqrf`` are not
(torch's have no gradient either; ``householder_product`` and ``ormqr`` compose from tensor ops and are). The
gradients are torch's formulas (torch/csrc/autograd/FunctionsManual.cpp), for real matrices.
"""

from __future__ import annotations

import numpy as np

from . import _install
from . import array_extras as _array_extras
from . import combine as _combine
from . import complex_ops as _complex_ops
from . import creation as _creation
from .host_ops import HostOp, LinAlgError, host_run, per_matrix
from .tensor import Tensor


def _scipy_lapack():
    try:
        from scipy.linalg import lapack  # lazy: an optional dependency, for these factorisations only
    except ImportError as e:  # pragma: no cover - scipy comes with the test extras
        raise NotImplementedError("this factorisation's LAPACK format (pivots, info) comes from scipy on the "
                                  "client: pip install 'tensorwire[linalg]' (or scipy)") from e
    return lapack


def _eye_like(x: Tensor, n: int) -> Tensor:
    return _creation.eye(n, dtype=x.dtype, device=x._dev, session=x._s)


def _cat(ts: list, dim: int) -> Tensor:
    return _combine.cat(ts, dim)


def _diag(v: Tensor) -> Tensor:
    return _array_extras.diag_embed(v)


def _inv_or_nan(a: np.ndarray) -> np.ndarray:
    """Batched inverses; a singular matrix's is NaN (only a gradient reads it, and a singular matrix has none)."""
    try:
        return np.linalg.inv(a)
    except np.linalg.LinAlgError:
        def one(m):
            try:
                return (np.linalg.inv(m),)
            except np.linalg.LinAlgError:
                return (np.full_like(m, np.nan),)
        return per_matrix(one, a)[0]


def _getrf_info(a: np.ndarray) -> np.ndarray:
    """LAPACK's ``info`` of an LU factorisation per matrix (0: invertible; k: U[k-1, k-1] is zero)."""
    lapack = _scipy_lapack()
    if a.size == 0:
        return np.zeros(a.shape[:-2], np.int32)
    return per_matrix(lambda m: (np.int32(lapack.dgetrf(m)[2]),), a)[0].astype(np.int32)


# -- solve: X = A^-1 B -----------------------------------------------------------------------------------------------

def _solve_compute(attrs, a, b):
    try:
        x = np.linalg.solve(a, b)
        info = np.zeros(a.shape[:-2], np.int32)
    except np.linalg.LinAlgError:
        info = _getrf_info(a)
        if attrs["check_errors"]:
            raise LinAlgError(f"{attrs['name']}: The solver failed because the input matrix is singular (info "
                              f"{int(info.max())}: U[{int(info.max()) - 1}, {int(info.max()) - 1}] is zero); the "
                              "_ex form returns info instead of raising") from None
        x = _inv_or_nan(a) @ b
    return [x, info], [_inv_or_nan(a)]


def _solve_grad(ctx, inputs, outs, saved, grads):
    (x, _), (a_inv,), (g, _) = outs, saved, grads
    gb = a_inv.mT.matmul(g)
    return -gb.matmul(x.mT), gb


SOLVE = HostOp("linalg.solve", _solve_compute, _solve_grad)


def solve(A: Tensor, B: Tensor, name: str = "linalg.solve", check_errors: bool = True) -> tuple[Tensor, Tensor]:  # noqa: N803
    """``(X, info)`` with ``A X = B``, for ``A`` (*, n, n) and ``B`` (*, n, k) of the same batch shape."""
    return host_run(SOLVE, A, B, name=name, check_errors=check_errors)


# -- slogdet ---------------------------------------------------------------------------------------------------------

def _slogdet_compute(attrs, a):
    sign, logabs = np.linalg.slogdet(a)
    return [sign, logabs], [_inv_or_nan(a)]


def _slogdet_grad(ctx, inputs, outs, saved, grads):
    (a_inv,), (_, g) = saved, grads
    return (g.unsqueeze(-1).unsqueeze(-1) * a_inv.mT,)


SLOGDET = HostOp("linalg.slogdet", _slogdet_compute, _slogdet_grad)


def slogdet(A: Tensor) -> tuple[Tensor, Tensor]:  # noqa: N803
    """``(sign, log|det A|)``."""
    return host_run(SLOGDET, A)


# -- cholesky --------------------------------------------------------------------------------------------------------

def _cholesky_compute(attrs, a):
    try:
        low = np.linalg.cholesky(a)
        info = np.zeros(a.shape[:-2], np.int32)
    except np.linalg.LinAlgError:
        lapack = _scipy_lapack()  # (not reached for an empty matrix: numpy factors those)
        low, info = per_matrix(lambda m: (lambda c, i: (np.tril(c), np.int32(i)))(*lapack.dpotrf(m, lower=1)), a)
        info = info.astype(np.int32)
        if attrs["check_errors"]:
            k = int(info.max())
            raise LinAlgError(f"{attrs['name']}: The factorization could not be completed because the input is not "
                              f"positive-definite (the leading minor of order {k} is not positive-definite)") from None
    return [low, info], [_inv_or_nan(low)]


def _phi(x: Tensor) -> Tensor:
    """The lower triangle with the diagonal halved."""
    return x.tril(-1) + _diag(x.diagonal(0, -2, -1) * 0.5)


def _cholesky_grad(ctx, inputs, outs, saved, grads):
    (low, _), (l_inv,), (g, _) = outs, saved, grads
    ga = l_inv.mT.matmul(_phi(low.mT.matmul(g))).matmul(l_inv)
    return ((ga + ga.mT) * 0.5,)


CHOLESKY = HostOp("linalg.cholesky", _cholesky_compute, _cholesky_grad)


def cholesky(A: Tensor, name: str = "linalg.cholesky", check_errors: bool = True) -> tuple[Tensor, Tensor]:  # noqa: N803
    """``(L, info)``: the lower Cholesky factor of ``A`` (its lower triangle is read)."""
    return host_run(CHOLESKY, A, name=name, check_errors=check_errors)


# -- eigh ------------------------------------------------------------------------------------------------------------

def _eigh_compute(attrs, a):
    w, v = np.linalg.eigh(a, UPLO=attrs["uplo"])
    return [w, v], []


def _offdiag_ratio(x: Tensor, e: Tensor) -> Tensor:
    """``x / e`` off the diagonal, 0 on it (``e`` is a difference of eigenvalues, 0 on its diagonal)."""
    n = e.shape[-1]
    eye = _eye_like(e, n)
    return x / (e + eye) * (1 - eye)


def _eigh_grad(ctx, inputs, outs, saved, grads):
    (w, v), (gw, gv) = outs, grads
    vtgv = v.mT.matmul(gv)
    e = w.unsqueeze(-2) - w.unsqueeze(-1)  # e[i, j] = w_j - w_i
    inner = _offdiag_ratio((vtgv - vtgv.mT) * 0.5, e) + _diag(gw)
    return (v.matmul(inner).matmul(v.mT),)


EIGH = HostOp("linalg.eigh", _eigh_compute, _eigh_grad)


def eigh(A: Tensor, UPLO: str = "L") -> tuple[Tensor, Tensor]:  # noqa: N803
    """``(eigenvalues ascending, eigenvectors as columns)`` of the symmetric ``A`` (its ``UPLO`` triangle read)."""
    return host_run(EIGH, A, uplo=UPLO)


# -- eig (complex results) -------------------------------------------------------------------------------------------

def _eig_compute(attrs, a):
    w, v = np.linalg.eig(a)  # (LAPACK's geev: each vector of unit norm, its largest component real)
    w, v = w.astype(np.complex128), v.astype(np.complex128)  # (numpy gives real arrays when every value is real)
    return [w, v], [np.linalg.inv(v)]


def _eig_grad(ctx, inputs, outs, saved, grads):
    """torch's ``linalg_eig_backward``: ``V^-H (gL on the diagonal, (V^H gV - V^H V Re(diag(V^H gV))) / (conj(L_j) -
    conj(L_i)) off it) V^H``, its real part for a real input."""
    (a,), (w, v), (v_inv,), (gw, gv) = inputs, outs, saved, grads
    vh = _complex_ops.conj(v).mT
    n = w.shape[-1]
    eye = _eye_like(_complex_ops.real(w), n) != 0
    inner = _diag(gw) if gw is not None else None
    if gv is not None:
        vhgv = vh.matmul(gv)
        re_diag = _complex_ops.real(vhgv).diagonal(0, -2, -1)
        ret = vhgv - vh.matmul(v * re_diag.unsqueeze(-2))
        lc = _complex_ops.conj(w)
        e = _combine.where(eye, 1.0, lc.unsqueeze(-2) - lc.unsqueeze(-1))  # e[i, j] = conj(L_j) - conj(L_i)
        off = _combine.where(eye, 0.0, ret / e)
        inner = off if inner is None else off + inner
    if inner is None:
        return (None,)
    ga = _complex_ops.conj(v_inv).mT.matmul(inner).matmul(vh)
    return (ga if a.dtype.is_complex else _complex_ops.real(ga),)


EIG = HostOp("linalg.eig", _eig_compute, _eig_grad)


def eig(A: Tensor) -> tuple[Tensor, Tensor]:  # noqa: N803
    """``(eigenvalues, eigenvectors as columns)`` of a square ``A``, complex (LAPACK's geev, as torch's CPU)."""
    return host_run(EIG, A)


# -- svd -------------------------------------------------------------------------------------------------------------

def _svd_compute(attrs, a):
    u, s, vh = np.linalg.svd(a, full_matrices=attrs["full_matrices"])
    return [u, s, vh], []


def _svd_grad(ctx, inputs, outs, saved, grads):
    (a,), (u, s, vh), (gu, gs, gvh) = inputs, outs, grads
    m, n = a.shape[-2], a.shape[-1]
    k = min(m, n)
    if ctx.attrs["values_only"]:  # only S was asked for: its gradient alone (defined where singular values repeat)
        return ((u.narrow(-1, 0, k) * gs.unsqueeze(-2)).matmul(vh.narrow(-2, 0, k)),)
    if ctx.attrs["full_matrices"] and m != n:
        # the extra singular vectors are not unique: torch differentiates the reduced factors (derivatives.yaml's
        # _linalg_svd narrows U, Vh and their gradients to min(m, n)); so does this
        u, gu, vh, gvh = u.narrow(-1, 0, k), gu.narrow(-1, 0, k), vh.narrow(-2, 0, k), gvh.narrow(-2, 0, k)
    v, gv = vh.mT, gvh.mT
    s2 = s * s
    e = s2.unsqueeze(-2) - s2.unsqueeze(-1)  # e[i, j] = s_j^2 - s_i^2
    utgu, vtgv = u.mT.matmul(gu), v.mT.matmul(gv)
    ga = _offdiag_ratio((utgu - utgu.mT) * s.unsqueeze(-2) + s.unsqueeze(-1) * (vtgv - vtgv.mT), e) + _diag(gs)
    if m > k:
        gus = gu / s.unsqueeze(-2)
        return ((u.matmul(ga) + gus - u.matmul(u.mT.matmul(gus))).matmul(vh),)
    if n > k:
        gvs = gv / s.unsqueeze(-2)
        return (u.matmul(ga.matmul(vh) + (gvs - v.matmul(v.mT.matmul(gvs))).mT),)
    return (u.matmul(ga).matmul(vh),)


SVD = HostOp("linalg.svd", _svd_compute, _svd_grad)


def svd(A: Tensor, full_matrices: bool = True, values_only: bool = False) -> tuple[Tensor, Tensor, Tensor]:  # noqa: N803
    """``(U, S, Vh)`` with ``A = U diag(S) Vh``, ``S`` descending (``values_only``: only ``S`` will be used, and
    differentiated)."""
    return host_run(SVD, A, full_matrices=bool(full_matrices), values_only=bool(values_only))


# -- qr --------------------------------------------------------------------------------------------------------------

def _qr_compute(attrs, a):
    mode = attrs["mode"]
    m, n = a.shape[-2:]
    if mode == "r":
        r = np.linalg.qr(a, mode="r")
        return [np.zeros((0,)), r], [np.zeros((0,))]
    q, r = np.linalg.qr(a, mode=mode)
    r_inv = _inv_or_nan(r if m >= n else r[..., :, :m])  # (rows < columns: the leading square block's)
    return [q, r], [r_inv]


def _qr_grad(ctx, inputs, outs, saved, grads):
    (a,), (q, r), (r_inv,), (gq, gr) = inputs, outs, saved, grads
    m, n = a.shape[-2], a.shape[-1]
    mode = ctx.attrs["mode"]
    if mode == "r" or (mode == "complete" and m > n):
        raise NotImplementedError(f"linalg.qr's gradient is not defined for mode={mode!r} with {m} x {n} (torch "
                                  "refuses it too): the complete Q's extra columns are not unique; use "
                                  "mode='reduced'")
    if m >= n:
        return (_qr_square_or_tall_grad(q, r, r_inv, gq, gr),)
    # rows < columns (torch's linalg_qr_backward): A = Q [R1 R2] with A1 = Q R1 square and R2 = Q^T A2, so
    # gA2 = Q gR2 and A1 takes the square case's gradient with gQ + A2 gR2^T
    a2, gr1, gr2 = a.narrow(-1, m, n - m), gr.narrow(-1, 0, m), gr.narrow(-1, m, n - m)
    ga1 = _qr_square_or_tall_grad(q, r.narrow(-1, 0, m), r_inv, gq + a2.matmul(gr2.mT), gr1)
    return (_cat([ga1, q.matmul(gr2)], -1),)


def _qr_square_or_tall_grad(q: Tensor, r: Tensor, r_inv: Tensor, gq: Tensor, gr: Tensor) -> Tensor:
    """The reduced QR's gradient where R is square: ``(gQ + Q copyltu(R gR^T - gQ^T Q)) R^-T``."""
    mm = r.matmul(gr.mT) - gq.mT.matmul(q)
    low = mm.tril(-1)
    copyltu = low + low.mT + _diag(mm.diagonal(0, -2, -1))
    return (gq + q.matmul(copyltu)).matmul(r_inv.mT)


QR = HostOp("linalg.qr", _qr_compute, _qr_grad)


def qr(A: Tensor, mode: str = "reduced") -> tuple[Tensor, Tensor]:  # noqa: N803
    """``(Q, R)`` with ``A = Q R`` (``mode``: ``"reduced"``, ``"complete"``, or ``"r"``: Q empty)."""
    if mode not in ("reduced", "complete", "r"):
        raise ValueError(f"qr received unrecognized mode '{mode}' but expected one of 'reduced' (default), 'r', or "
                         "'complete'")
    return host_run(QR, A, mode=mode)


# -- LAPACK formats: getrf, sytrf/sytrs, geqrf (not differentiable) -------------------------------------------------

def _getrf_compute(attrs, a):
    lapack = _scipy_lapack()
    m, n = a.shape[-2:]
    if a.size == 0:
        return ([a, np.zeros((*a.shape[:-2], min(m, n)), np.int32), np.zeros(a.shape[:-2], np.int32)],
                [np.zeros(0)] * 3)

    def one(x):
        lu, piv, info = lapack.dgetrf(x)
        return lu, (piv + 1).astype(np.int32), np.int32(info), *_lu_gradient_factors(lu, piv)
    lu, piv, info, *factors = per_matrix(one, a)
    return [lu, piv, info.astype(np.int32)], factors


def _lu_gradient_factors(lu: np.ndarray, piv: np.ndarray) -> list[np.ndarray]:
    """What the backward of an (m, n) LU reads: ``P`` (``A = P L U``, (m, m)) and the inverses of the leading
    k x k blocks of ``L`` and ``U`` (k = min(m, n): all of the square one, L1 of a tall L, U1 of a wide U)."""
    m, n = lu.shape[-2:]
    k = min(m, n)
    perm = np.arange(m)
    for i, j in enumerate(piv):
        perm[[i, j]] = perm[[j, i]]
    p = np.eye(m)[perm].T  # rows of L U are A's rows perm: A = P (L U)
    sq = lu[:k, :k]
    return [p, _inv_or_nan(np.tril(sq, -1) + np.eye(k)), _inv_or_nan(np.triu(sq))]


def _getrf_grad(ctx, inputs, outs, saved, grads):
    """torch's linalg_lu_backward, the packed factors' gradient ``g`` split as ``gL = tril(g, -1)``,
    ``gU = triu(g)``. Square: ``gA = P L^-T (tril_(L^T gL) + triu(gU U^T)) U^-T``. Wide (m < n, U = [U1 U2]):
    ``gA = P L^-T [tril_(L^T gL - gU U^T) U1^-T + triu(gU1), gU2]``. Tall (m > n, L = [L1; L2]):
    ``gA = P [L1^-T triu(gU U^T - L^T gL) + tril_(gL1); gL2] U^-T``."""
    (a,), (lu, _, _), (p, l_inv, u_inv), (g, _, _) = inputs, outs, saved, grads
    if a.numel() == 0:
        return (g,)
    m, n = a.shape[-2], a.shape[-1]
    k = min(m, n)
    if m == n:
        low, up = lu.tril(-1) + _eye_like(lu, n), lu.triu()
        phi = low.mT.matmul(g.tril(-1)).tril(-1) + g.triu().matmul(up.mT).triu()
        return (p.matmul(l_inv.mT).matmul(phi).matmul(u_inv.mT),)
    low = lu.narrow(-1, 0, k).tril(-1) + _eye_like(lu, m).narrow(-1, 0, k)  # (m, k)
    up = lu.narrow(-2, 0, k).triu()  # (k, n)
    gl, gu = g.narrow(-1, 0, k).tril(-1), g.narrow(-2, 0, k).triu()
    if m < n:
        x = (low.mT.matmul(gl) - gu.matmul(up.mT)).tril(-1).matmul(u_inv.mT)
        x = _cat([x + gu.narrow(-1, 0, k), gu.narrow(-1, k, n - k)], -1)
        return (p.matmul(l_inv.mT.matmul(x)),)
    x = l_inv.mT.matmul((gu.matmul(up.mT) - low.mT.matmul(gl)).triu())
    x = _cat([x + gl.narrow(-2, 0, k), gl.narrow(-2, k, m - k)], -2)
    return (p.matmul(x.matmul(u_inv.mT)),)


GETRF = HostOp("linalg.lu_factor", _getrf_compute, _getrf_grad)


def lu_factor(A: Tensor) -> tuple[Tensor, Tensor, Tensor]:  # noqa: N803
    """``(LU, pivots, info)`` as LAPACK's getrf (1-based int32 pivots)."""
    return host_run(GETRF, A)


def _sytrf_compute(attrs, a):
    lapack = _scipy_lapack()
    if a.size == 0:
        return [a, np.zeros(a.shape[:-1], np.int32), np.zeros(a.shape[:-2], np.int32)], []

    def one(m):
        ld, piv, info = lapack.dsytrf(m, lower=1)
        return np.tril(ld), piv.astype(np.int32), np.int32(info)
    ld, piv, info = per_matrix(one, a)
    return [ld, piv, info.astype(np.int32)], []


SYTRF = HostOp("linalg.ldl_factor", _sytrf_compute)


def ldl_factor(A: Tensor) -> tuple[Tensor, Tensor, Tensor]:  # noqa: N803
    """``(LD, pivots, info)`` as LAPACK's sytrf (Bunch-Kaufman, the lower triangle)."""
    return host_run(SYTRF, A)


def _sytrs_compute(attrs, ld, piv, b):
    lapack = _scipy_lapack()
    if ld.size == 0 or b.size == 0:
        return [np.zeros(b.shape)], []
    return [per_matrix(lambda m, p, x: (lapack.dsytrs(m, p, x, lower=1)[0],), ld, piv, b)[0]], []


SYTRS = HostOp("linalg.ldl_solve", _sytrs_compute)


def ldl_solve(LD: Tensor, pivots: Tensor, B: Tensor) -> Tensor:  # noqa: N803
    """``X`` with ``A X = B`` from ``ldl_factor``'s ``(LD, pivots)``, all of one batch shape."""
    return host_run(SYTRS, LD, pivots, B)[0]


def _geqrf_compute(attrs, a):
    h, tau = np.linalg.qr(a, mode="raw")
    return [np.swapaxes(h, -1, -2), tau], []


GEQRF = HostOp("geqrf", _geqrf_compute)


def geqrf(A: Tensor) -> tuple[Tensor, Tensor]:  # noqa: N803
    """``(a, tau)``: LAPACK's geqrf, R above the diagonal and the Householder vectors below."""
    return host_run(GEQRF, A)

_install.loaded(__name__)
