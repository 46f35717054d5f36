"""torch's remaining random samplers (issue 33): ``bernoulli``, ``normal`` with tensor or number parameters, and the
in-place fillers ``cauchy_``, ``exponential_``, ``geometric_``, ``log_normal_``, each a transform of the cluster's
uniform or normal draws (``tw.manual_seed`` seeds them; the numbers differ from torch's)."""

from __future__ import annotations

import math

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DTypeError

from . import _install
from . import array_extras as _array_extras
from . import combine as _combine
from . import creation as _creation
from .tensor import Tensor, _size
from .zero_grads import zero_grad_from


def _uniform(like: Tensor, shape, generator=None) -> Tensor:
    dt = like.dtype if like.dtype.is_floating_point else D.get_default_dtype()
    return _creation.rand(tuple(shape), dtype=dt, device=like._dev, generator=generator, session=like._s)


def _normal01(like: Tensor, shape, generator=None) -> Tensor:
    dt = like.dtype if like.dtype.is_floating_point else D.get_default_dtype()
    return _creation.randn(tuple(shape), dtype=dt, device=like._dev, generator=generator, session=like._s)


def bernoulli(input: Tensor, p=None, *, generator=None, out=None) -> Tensor:  # noqa: A002
    """1 with probability ``input`` (or ``p``) per element, else 0, in ``input``'s dtype."""
    if not input.dtype.is_floating_point and p is None:
        raise DTypeError(f"bernoulli: expected a floating point tensor of probabilities, got {input.dtype.name}")
    prob = input if p is None else input._operand(p)
    r = (_uniform(input, input.shape, generator) < prob).to(input.dtype)
    r = zero_grad_from(r, *([input] if prob is input else [input, prob]))  # (torch's: zero gradients)
    return _combine.write_out(out, r)


def normal(mean=0.0, std=1.0, size=None, *, generator=None, out=None, dtype=None, layout=None, device=None,
           pin_memory: bool = False, requires_grad: bool = False) -> Tensor:
    """Draws from N(mean, std²): tensor ``mean`` and/or ``std`` broadcast together, or numbers with ``size``
    (``layout``: ``tw.strided``, the only one torch's ``normal`` makes)."""
    if layout is not None and layout != "strided":
        raise NotImplementedError(f"normal(layout={layout!r}): torch draws dense (strided) tensors only")

    ref = mean if isinstance(mean, Tensor) else std if isinstance(std, Tensor) else None
    if ref is None:
        if size is None:
            raise TypeError("normal() with number mean and std needs a size")
        r = _creation.randn(_size((size,)), dtype=dtype, device=device, generator=generator) * std + mean
        return _combine.write_out(out, r.requires_grad_(requires_grad) if requires_grad else r)
    m = ref._operand(mean)
    s = ref._operand(std)
    if isinstance(std, Tensor) and bool((std < 0).any()):
        raise ValueError("normal expects all elements of std >= 0.0")

    shape = _array_extras.broadcast_shapes(m.shape, s.shape)
    return _combine.write_out(out, _normal01(ref, shape, generator) * s + m)


def cauchy_(self: Tensor, median: float = 0.0, sigma: float = 1.0, *, generator=None) -> Tensor:
    """Fill with draws from the Cauchy distribution: median + σ tan(π (u - ½))."""
    u = _uniform(self, self.shape, generator)
    return self._assign((u - 0.5).mul(math.pi).tan() * sigma + median)


def exponential_(self: Tensor, lambd: float = 1.0, *, generator=None) -> Tensor:
    """Fill with draws from Exp(λ): -log(1 - u) / λ."""
    u = _uniform(self, self.shape, generator)
    return self._assign(-(-u).log1p() / lambd)


def geometric_(self: Tensor, p: float, *, generator=None) -> Tensor:
    """Fill with the number of Bernoulli(p) trials up to the first success: ceil(log(1 - u) / log(1 - p))."""
    u = _uniform(self, self.shape, generator)
    k = ((-u).log1p() / math.log1p(-p)).ceil().clamp(min=1)
    return self._assign(k.to(self.dtype))


def log_normal_(self: Tensor, mean: float = 1.0, std: float = 2.0, *, generator=None) -> Tensor:
    """Fill with exp(N(mean, std²))."""
    return self._assign((_normal01(self, self.shape, generator) * std + mean).exp())


FUNCTIONS = {"bernoulli": bernoulli, "normal": normal}
METHODS = {"bernoulli": bernoulli, "cauchy_": cauchy_, "exponential_": exponential_, "geometric_": geometric_,
           "log_normal_": log_normal_}


def install(cls=Tensor) -> None:
    """Add :data:`METHODS` to ``Tensor`` (leaving any method it defines itself)."""
    _install.install_methods(cls, METHODS, wrap=False)


install()
_install.register(FUNCTIONS)
_install.loaded(__name__)
