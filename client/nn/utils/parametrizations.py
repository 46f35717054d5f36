"""``tw.nn.utils.parametrizations``: torch's ``orthogonal``, ``weight_norm`` and ``spectral_norm`` as
parametrizations (:mod:`.parametrize`), with torch's state dict keys: ``parametrizations.weight.original`` and the
trivialization's ``parametrizations.weight.0.base`` for ``orthogonal``; ``parametrizations.weight.original0`` (g)
and ``original1`` (v) for ``weight_norm``; ``parametrizations.weight.original`` and the power iteration's
``parametrizations.weight.0._u`` / ``._v`` for ``spectral_norm``."""

from __future__ import annotations

from enum import Enum, auto

from tensorwire.combine import where
from tensorwire.creation import eye, randn, zeros_like
from tensorwire.dtype_info import finfo
from tensorwire.functions import cat
from tensorwire.linalg_decomp import solve
from tensorwire.tensor import Tensor

from .. import functional as F
from .._tensors import no_grad, rebind
from ..conv_transpose import ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from ..module import Module
from . import parametrize
from .weight_norm import norm_except_dim, weight_norm_of

__all__ = ["orthogonal", "spectral_norm", "weight_norm"]


class _WeightNorm(Module):
    def __init__(self, dim: int | None = 0) -> None:
        super().__init__()
        if dim is None:
            dim = -1
        self.dim = dim

    def forward(self, weight_g: Tensor, weight_v: Tensor) -> Tensor:
        return weight_norm_of(weight_v, weight_g, self.dim)

    def right_inverse(self, weight: Tensor):
        return norm_except_dim(weight, 2, self.dim), weight


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """Weight normalisation as a parametrization: ``module.<name>`` is ``original1 * (original0 / ||original1||)``
    (the norm over every dimension but ``dim``; ``None``: the whole tensor). Returns ``module``."""
    parametrize.register_parametrization(module, name, _WeightNorm(dim), unsafe=True)
    return module


class _SpectralNorm(Module):
    def __init__(self, weight: Tensor, n_power_iterations: int = 1, dim: int = 0, eps: float = 1e-12) -> None:
        super().__init__()
        ndim = weight.ndim
        if dim >= ndim or dim < -ndim:
            raise IndexError(f"Dimension out of range (expected to be in range of [-{ndim}, {ndim - 1}] but got "
                             f"{dim})")
        if n_power_iterations <= 0:
            raise ValueError("Expected n_power_iterations to be positive, but got "
                             f"n_power_iterations={n_power_iterations}")
        self.dim = dim if dim >= 0 else dim + ndim
        self.eps = eps
        if ndim > 1:
            self.n_power_iterations = n_power_iterations
            with no_grad():
                weight_mat = self._reshape_weight_to_matrix(weight.detach())
                h, w = weight_mat.shape
                u = weight_mat.new_empty(h).normal_(0, 1)
                v = weight_mat.new_empty(w).normal_(0, 1)
                self.register_buffer("_u", F.normalize(u, dim=0, eps=self.eps))
                self.register_buffer("_v", F.normalize(v, dim=0, eps=self.eps))
                self._power_method(weight_mat, 15)

    def _reshape_weight_to_matrix(self, weight: Tensor) -> Tensor:
        if self.dim != 0:
            weight = weight.permute(self.dim, *(d for d in range(weight.dim()) if d != self.dim))
        return weight.flatten(1)

    def _power_method(self, weight_mat: Tensor, n_power_iterations: int) -> None:
        """``u = normalize(W v)``, then ``v = normalize(W^H u)``, ``n_power_iterations`` times, outside autograd;
        the buffers are updated in place (rebound), as torch's ``out=``."""
        with no_grad():
            wd = weight_mat.detach()
            wh = wd.t().conj() if wd.is_complex() else wd.t()
            for _ in range(n_power_iterations):
                rebind(self._u, F.normalize(wd.mv(self._v), dim=0, eps=self.eps))
                rebind(self._v, F.normalize(wh.mv(self._u), dim=0, eps=self.eps))

    def forward(self, weight: Tensor) -> Tensor:
        if weight.ndim == 1:
            return F.normalize(weight, dim=0, eps=self.eps)
        weight_mat = self._reshape_weight_to_matrix(weight)
        if self.training:
            self._power_method(weight_mat, self.n_power_iterations)
        u = self._u.clone()
        v = self._v.clone()
        sigma = u.vdot(weight_mat.mv(v))
        return weight / sigma

    def right_inverse(self, value: Tensor) -> Tensor:
        return value


def spectral_norm(module: Module, name: str = "weight", n_power_iterations: int = 1, eps: float = 1e-12,
                  dim: int | None = None) -> Module:
    """Spectral normalisation as a parametrization (torch.nn.utils.parametrizations.spectral_norm): the power
    iteration runs on every read of ``module.<name>`` in training mode (15 iterations at registration), none in
    eval mode. ``dim`` defaults to 1 for transposed convolutions, else 0. Returns ``module``."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if dim is None:
        dim = 1 if isinstance(module, (ConvTranspose1d, ConvTranspose2d, ConvTranspose3d)) else 0
    parametrize.register_parametrization(module, name, _SpectralNorm(weight, n_power_iterations, dim, eps))
    return module


# -- orthogonal ------------------------------------------------------------------------------------------------------

def _is_orthogonal(Q: Tensor) -> bool:
    """Whether ``Q``'s columns are orthonormal, to ``10 * n * eps`` (torch's test; one read of a bool)."""
    n, k = Q.shape[-2], Q.shape[-1]
    eye_k = eye(k, dtype=Q.dtype, device=Q.device)
    return (Q.mH @ Q).allclose(eye_k, atol=10.0 * n * finfo(Q.dtype).eps)


def _make_orthogonal(A: Tensor) -> Tensor:
    """The Q factor of a tall ``A = QR`` whose R has a real non-negative diagonal (torch's: ``geqrf``, then the
    Householder product, with the columns' signs set by R's diagonal)."""
    X, tau = A.geqrf()
    return X.orgqr(tau) * X.diagonal(dim1=-2, dim2=-1).sgn().unsqueeze(-2)


class _OrthMaps(Enum):
    matrix_exp = auto()
    cayley = auto()
    householder = auto()


class _Orthogonal(Module):
    """torch's orthogonal parametrization: a matrix (or batch) ``X`` -> an orthogonal one, by the matrix exponential
    or the Cayley map of the skew-symmetric ``tril(X) - tril(X)^H``, or the product of Householder reflectors stored
    below ``X``'s diagonal; with ``use_trivialization``, times the buffer ``base`` (the orthogonal matrix assigned
    last, torch's dynamic trivialization)."""

    base: Tensor

    def __init__(self, weight: Tensor, orthogonal_map: _OrthMaps, *, use_trivialization: bool = True) -> None:
        super().__init__()
        if weight.is_complex() and orthogonal_map == _OrthMaps.householder:
            raise ValueError("The householder parametrization does not support complex tensors.")
        self.shape = tuple(weight.shape)
        self.orthogonal_map = orthogonal_map
        if use_trivialization:
            self.register_buffer("base", None)

    def forward(self, X: Tensor) -> Tensor:
        n, k = X.shape[-2], X.shape[-1]
        transposed = n < k
        if transposed:
            X = X.mT
            n, k = k, n
        # X is tall (n >= k) from here
        if self.orthogonal_map in (_OrthMaps.matrix_exp, _OrthMaps.cayley):
            X = X.tril()  # (n * k - k * (k - 1) / 2 parameters)
            if n != k:  # embedded in a square matrix
                X = cat([X, X.new_zeros(n, n - k).expand(*X.shape[:-2], -1, -1)], dim=-1)
            A = X - X.mH  # (skew-symmetric, or skew-Hermitian)
            if self.orthogonal_map == _OrthMaps.matrix_exp:
                Q = A.matrix_exp()
            else:  # the Cayley retraction (I + A / 2)(I - A / 2)^-1
                eye_n = eye(n, dtype=A.dtype, device=A.device)
                Q = solve(eye_n + A * -0.5, eye_n + A * 0.5)
            if n != k:
                Q = Q[..., :k]
        else:  # real X (no complex householder): reflectors below the diagonal, its signs on the diagonal
            A = X.tril(diagonal=-1)
            tau = 2.0 / (1.0 + (A * A).sum(dim=-2))
            # (the diagonal's +-1 as integers: neither differentiated nor updated through this product)
            Q = A.orgqr(tau) * X.diagonal(dim1=-2, dim2=-1).int().unsqueeze(-2)
        if hasattr(self, "base"):
            Q = self.base @ Q
        if transposed:
            Q = Q.mT
        return Q

    def right_inverse(self, Q: Tensor) -> Tensor:
        """The original that gives ``Q`` (torch's): with the trivialization, ``Q`` (orthogonalised by a QR when it is
        not orthogonal; a tall one completed to a square orthogonal matrix with random columns) becomes ``base`` and
        the original is ``-I``; without it (Householder only), the reflectors of ``Q``'s QR with the signs of R's
        diagonal on the diagonal."""
        with no_grad():
            if tuple(Q.shape) != self.shape:
                raise ValueError(f"Expected a matrix or batch of matrices of shape {self.shape}. Got a tensor of "
                                 f"shape {tuple(Q.shape)}.")
            q_init = Q
            n, k = Q.shape[-2], Q.shape[-1]
            transpose = n < k
            if transpose:
                Q = Q.mT
                n, k = k, n
            if not hasattr(self, "base"):
                if self.orthogonal_map in (_OrthMaps.cayley, _OrthMaps.matrix_exp):
                    raise NotImplementedError("It is not possible to assign to the matrix exponential or the Cayley "
                                              "parametrizations when use_trivialization=False.")
                A, tau = Q.geqrf()
                # diag(R) > 0 (else Q = (-Q)(-I) would be as good a decomposition); a reflection LAPACK skipped (tau
                # exactly 0) flips the sign
                d = A.diagonal(dim1=-2, dim2=-1)
                sign = d.sign()
                d.copy_(where(tau == 0.0, -sign, sign))
                return A.mT if transpose else A
            if n == k:
                Q = _make_orthogonal(Q) if not _is_orthogonal(Q) else Q.clone()
            else:  # completed to an n x n orthogonal matrix
                N = randn(*(tuple(Q.shape[:-2]) + (n, n - k)), dtype=Q.dtype, device=Q.device)
                Q = _make_orthogonal(cat([Q, N], dim=-1))
            self.base = Q
            # -I: householder(zeros) is eye(n, k), the diagonal's -1s flipping the reflections' signs back
            neg_eye = zeros_like(q_init)
            neg_eye.diagonal(dim1=-2, dim2=-1).fill_(-1.0)
            return neg_eye


def orthogonal(module: Module, name: str = "weight", orthogonal_map: str | None = None, *,
               use_trivialization: bool = True) -> Module:
    """Parametrize ``module.<name>`` (a matrix, or a batch of them) as an orthogonal (unitary) matrix: orthonormal
    columns when it is tall, rows when it is wide (torch's ``torch.nn.utils.parametrizations.orthogonal``).
    ``orthogonal_map``: ``"matrix_exp"`` (default for square or complex matrices), ``"cayley"`` or ``"householder"``
    (default otherwise). ``use_trivialization`` (default): the dynamic trivialization, an orthogonal ``base`` buffer
    (``parametrizations.<name>.0.base``) times the map's result. The initial value is the tensor itself when it is
    orthogonal, else the Q of its QR decomposition. Returns ``module``."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if weight.ndim < 2:
        raise ValueError(f"Expected a matrix or batch of matrices. Got a tensor of {weight.ndim} dimensions.")
    if orthogonal_map is None:
        orthogonal_map = "matrix_exp" if weight.shape[-2] == weight.shape[-1] or weight.is_complex() else "householder"
    orth_enum = getattr(_OrthMaps, orthogonal_map, None)
    if orth_enum is None:
        raise ValueError(f'orthogonal_map has to be one of "matrix_exp", "cayley", "householder". Got: '
                         f"{orthogonal_map}")
    orth = _Orthogonal(weight, orth_enum, use_trivialization=use_trivialization)
    parametrize.register_parametrization(module, name, orth, unsafe=True)
    return module
