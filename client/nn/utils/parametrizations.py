"""``tw.nn.utils.parametrizations``: torch's ``weight_norm`` and ``spectral_norm`` as parametrizations
(:mod:`.parametrize`), with torch's state dict keys: ``parametrizations.weight.original0`` (g) and ``original1``
(v) for ``weight_norm``; ``parametrizations.weight.original`` and the power iteration's
``parametrizations.weight.0._u`` / ``._v`` for ``spectral_norm``. ``orthogonal`` is not provided."""

from __future__ import annotations

from tensorwire.tensor import Tensor

from .. import functional as F
from .._tensors import no_grad, rebind
from ..conv_transpose import ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from ..module import Module
from . import parametrize
from .weight_norm import norm_except_dim, weight_norm_of

__all__ = ["spectral_norm", "weight_norm"]


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
