"""Exact samplers of the Gamma, Poisson and Binomial distributions, on the cluster's uniform and normal draws
(``tw.manual_seed`` seeds them; the numbers differ from torch's, the distributions do not).

Each is torch's (and numpy's) algorithm, evaluated in float64 for whole tensors at once:

- **Rejection** (:func:`rejection`): each element draws ``rounds`` independent proposals at a time and keeps the first
  it accepts; the elements that accepted none draw again. The loop reads one bool a round (a sync point). The
  schemes here accept 71-88% (PTRS, BTRS, at their thresholds; more for larger means) to 95-99% (Marsaglia-Tsang) of
  their proposals, so with 4 rounds an element is left over with probability under 0.3^4 < 1%: a small sample
  usually takes one round (one fetch), a few thousand draws two or three.
- **Gamma**: Marsaglia and Tsang's method (2000) for concentration >= 1; below 1 the draw for ``a + 1`` times
  ``U^(1/a)``. Its reparameterized gradient is the implicit one (Figurnov et al., 2018), as torch's:
  ``dx/da = -(dP(a, x)/da) / p(x; a)`` with P the regularized incomplete gamma function, its derivative in ``a`` by
  central differences of ``tw.special.gammainc`` in float64, and above concentration 1000 the derivative of the
  Wilson-Hilferty approximation (:func:`standard_gamma_grad`).
- **Poisson**: inversion below rate 10 (the search runs over 50 values: the probability beyond them is under
  2e-19, below the resolution of a float64 uniform), Hormann's PTRS transformed rejection (1993) from 10.
- **Binomial**: for ``p`` above ½ the count of failures; inversion while ``n min(p, 1-p) < 10`` (50 values, as
  Poisson's), Hormann's BTRS (1993) beyond, its acceptance bound from the exact log-pmf ratio (``lgamma``) rather
  than Stirling's series.

Parameters outside the domain (NaN, a negative rate...) give NaN samples instead of a loop that never ends.
"""

from __future__ import annotations

import math

from tensorwire import array_extras as _array_extras
from tensorwire import autograd_engine as _autograd
from tensorwire import combine as _combine
from tensorwire import creation as _creation
from tensorwire import dtype_info as _dtype_info
from tensorwire import special as _special
from tensorwire.protocol import dtypes as D
from tensorwire.tensor import Tensor

#: the rounds of proposals an element draws at a time
ROUNDS = 4
#: rounds of :func:`rejection`'s loop after which it gives up (each leaves an element unaccepted with probability
#: under 0.3 ** ROUNDS: never reached for valid parameters)
MAX_LOOPS = 200
#: the values the inversion samplers search (see the module's docstring)
INVERSION_TERMS = 50


def _uniform(like: Tensor, shape) -> Tensor:
    return _creation.rand(tuple(shape), dtype=D.float64, device=like._dev, session=like._s)


def _normal(like: Tensor, shape) -> Tensor:
    return _creation.randn(tuple(shape), dtype=D.float64, device=like._dev, session=like._s)


def rejection(like: Tensor, shape, propose, done: Tensor | None = None) -> Tensor:
    """A float64 tensor of ``shape``: for each element not ``done``, the first proposal it accepts.

    ``propose(rounds)`` gives ``(candidates, accepted)``, both of shape ``(rounds, *shape)``, each round an
    independent proposal for every element. Elements ``done`` from the start keep 0 (their caller's branch fills
    them)."""
    shape = tuple(shape)
    result = _creation.zeros(shape, dtype=D.float64, device=like._dev, session=like._s)
    if done is None:
        done = _creation.full(shape, False, dtype=D.bool_, device=like._dev, session=like._s)
    for _ in range(MAX_LOOPS):
        # (a round is drawn before the first read: the read then usually finds every element done, one fetch)
        cand, ok = propose(ROUNDS)
        first = ok & (ok.to(D.int32).cumsum(0) == 1)  # the first accepted round of each element
        value = _combine.where(first, cand, 0.0).sum(0)
        result = _combine.where(done, result, value)
        done = done | ok.any(0)
        if bool(done.all()):
            return result
    raise RuntimeError(f"rejection sampling accepted nothing for some elements in {MAX_LOOPS * ROUNDS} proposals")


def _bad(x: Tensor) -> Tensor:
    """Where ``x`` is NaN or infinite."""
    return ~x.isfinite()


def standard_gamma64(alpha: Tensor) -> Tensor:
    """Gamma(alpha, 1) draws of ``alpha``'s shape, in float64 (NaN where alpha is not positive and finite)."""
    a0 = alpha.to(D.float64)
    shape = tuple(a0.shape)
    invalid = ~(a0 > 0) | _bad(a0)
    boost = a0 < 1
    a = _combine.where(invalid, 1.0, _combine.where(boost, a0 + 1, a0))
    d = a - 1.0 / 3.0
    c = (9 * d).rsqrt()

    def propose(rounds):
        x = _normal(a0, (rounds, *shape))
        u = _uniform(a0, (rounds, *shape))
        v = (1 + c * x) ** 3
        vpos = _combine.where(v > 0, v, 1.0)
        ok = (v > 0) & (u.log() < 0.5 * x * x + d - d * vpos + d * vpos.log())
        return d * v, ok

    g = rejection(a0, shape, propose, done=invalid)
    # below 1: Gamma(a) = Gamma(a + 1) U^(1/a), in logs (U^(1/a) underflows for a small a)
    u = _uniform(a0, shape)
    log_g = g.log() + _combine.where(boost, u.log() / _combine.where(invalid, 1.0, a0), 0.0)
    out = log_g.exp()
    out = _combine.where(a0 == math.inf, math.inf, out)
    return _combine.where(invalid & (a0 != math.inf), math.nan, out)


#: the relative step of :func:`standard_gamma_grad`'s central difference
_GRAD_STEP = 1e-4
#: above this concentration :func:`standard_gamma_grad` differentiates the Wilson-Hilferty approximation instead
#: (relative error under 1e-5 there, against mpmath; ``tw.special.gammainc`` refuses a > 1e4)
_WILSON_HILFERTY_FROM = 1000.0


def standard_gamma_grad(alpha: Tensor, x: Tensor) -> Tensor:
    """``dx/dalpha`` of a Gamma(alpha, 1) draw ``x`` held at its quantile: ``-(dP(alpha, x)/dalpha) / p(x)``
    (torch's ``_standard_gamma_grad``), in ``x``'s dtype. Against mpmath its relative error is under 2e-5 (torch's
    own approximation's: up to 7e-4)."""
    a = alpha.to(D.float64)
    v = x.to(D.float64)
    large = a > _WILSON_HILFERTY_FROM
    af = _combine.where(large, 1.0, a)
    h = af * _GRAD_STEP
    dp = (_special.gammainc(af + h, v) - _special.gammainc(af - h, v)) / (2 * h)
    log_pdf = (af - 1) * v.log() - v - _special.gammaln(af)
    implicit = -dp * (-log_pdf).exp()
    # Wilson-Hilferty: x = a t^3, t = 1 - 1/(9a) + z / (3 sqrt(a)), differentiated with the normal quantile z fixed
    al = _combine.where(large, a, _WILSON_HILFERTY_FROM)
    t = (v / al) ** (1.0 / 3.0)
    z = 3 * al.sqrt() * (t - 1 + 1 / (9 * al))
    wh = t ** 3 + 3 * al * t * t * (1 / (9 * al * al) - z / (6 * al ** 1.5))
    return _combine.where(large, wh, implicit).to(x.dtype)


class StandardGamma(_autograd.Function):
    """Gamma(alpha, 1) draws with the implicit reparameterization gradient."""

    @staticmethod
    def forward(ctx, alpha):
        # (clamped to the dtype's smallest normal number, as torch's _standard_gamma: a Dirichlet of tiny
        # concentrations then normalizes positive draws)
        x = standard_gamma64(alpha).to(alpha.dtype).clamp(min=_dtype_info.finfo(alpha.dtype).tiny)
        ctx.save_for_backward(alpha, x)
        return x

    @staticmethod
    def backward(ctx, grad):
        alpha, x = ctx.saved_tensors
        return grad * standard_gamma_grad(alpha, x)


def _log_factorial(k: Tensor) -> Tensor:
    return _special.gammaln(k + 1)


def poisson64(rate: Tensor) -> Tensor:
    """Poisson(rate) draws of ``rate``'s shape, in float64 (NaN where the rate is negative or not finite)."""
    lam0 = rate.to(D.float64)
    shape = tuple(lam0.shape)
    invalid = ~(lam0 >= 0) | _bad(lam0)
    small = lam0 < 10
    # inversion: the count of k whose cdf F(k) is below u
    lam_s = _combine.where(small & ~invalid, lam0, 0.0)
    u = _uniform(lam0, shape)
    p = (-lam_s).exp()
    cdf = p
    count = (cdf < u).to(D.float64)
    for k in range(1, INVERSION_TERMS):
        p = p * lam_s / k
        cdf = cdf + p
        count = count + (cdf < u).to(D.float64)
    # PTRS where the rate is 10 or more
    lam = _combine.where(small | invalid, 10.0, lam0)
    slam = lam.sqrt()
    loglam = lam.log()
    b = 0.931 + 2.53 * slam
    a = -0.059 + 0.02483 * b
    log_invalpha = (1.1239 + 1.1328 / (b - 3.4)).log()
    vr = 0.9277 - 3.6224 / (b - 2)

    def propose(rounds):
        uu = _uniform(lam0, (rounds, *shape)) - 0.5
        vv = _uniform(lam0, (rounds, *shape))
        us = 0.5 - uu.abs()
        us_safe = _combine.where(us > 0, us, 1.0)
        k = ((2 * a / us_safe + b) * uu + lam + 0.43).floor()
        quick = (us >= 0.07) & (vv <= vr)
        rejected = (us <= 0) | (k < 0) | ((us < 0.013) & (vv > us))
        k_safe = _combine.where(k < 0, 0.0, k)
        lhs = vv.log() + log_invalpha - (a / (us_safe * us_safe) + b).log()
        rhs = -lam + k_safe * loglam - _log_factorial(k_safe)
        return k, quick | (~rejected & (lhs <= rhs))

    big = rejection(lam0, shape, propose, done=small | invalid)
    out = _combine.where(small, count, big)
    return _combine.where(invalid, math.nan, out)


def binomial64(count: Tensor, prob: Tensor) -> Tensor:
    """Binomial(count, prob) draws of their broadcast shape, in float64 (NaN where count is negative or prob outside
    [0, 1])."""
    n0, p0 = count.to(D.float64), prob.to(D.float64)
    both = tuple(_array_extras.broadcast_shapes(tuple(n0.shape), tuple(p0.shape)))
    n0, p0 = n0.expand(both), p0.expand(both)
    shape = tuple(n0.shape)
    invalid = ~(n0 >= 0) | ~(p0 >= 0) | ~(p0 <= 1) | _bad(n0)
    flip = p0 > 0.5
    n = _combine.where(invalid, 0.0, n0)
    q = _combine.where(invalid, 0.0, _combine.where(flip, 1 - p0, p0))
    small = n * q < 10
    # inversion: pmf(k + 1) = pmf(k) (n - k) / (k + 1) q / (1 - q)
    n_s = _combine.where(small, n, 0.0)
    q_s = _combine.where(small, q, 0.0)
    r = q_s / (1 - q_s)
    u = _uniform(n0, shape)
    pmf = (n_s * (-q_s).log1p()).exp()
    cdf = pmf
    found = (cdf < u).to(D.float64)
    for k in range(1, INVERSION_TERMS):
        pmf = pmf * (n_s - (k - 1)).clamp(min=0) / k * r
        cdf = cdf + pmf
        found = found + (cdf < u).to(D.float64)
    found = _combine.where(found > n_s, n_s, found)
    # BTRS where n min(p, 1 - p) is 10 or more
    n_b = _combine.where(small, 100.0, n)
    q_b = _combine.where(small, 0.5, q)
    spq = (n_b * q_b * (1 - q_b)).sqrt()
    b = 1.15 + 2.53 * spq
    a = -0.0873 + 0.0248 * b + 0.01 * q_b
    c = n_b * q_b + 0.5
    vr = 0.92 - 4.2 / b
    log_r = (q_b / (1 - q_b)).log()
    alpha = (2.83 + 5.1 / b) * spq
    m = ((n_b + 1) * q_b).floor()
    log_fm = _log_factorial(m) + _log_factorial(n_b - m)

    def propose(rounds):
        uu = _uniform(n0, (rounds, *shape)) - 0.5
        vv = _uniform(n0, (rounds, *shape))
        us = 0.5 - uu.abs()
        us_safe = _combine.where(us > 0, us, 1.0)
        k = ((2 * a / us_safe + b) * uu + c).floor()
        inside = (us > 0) & (k >= 0) & (k <= n_b)
        k_safe = _combine.where(inside, k, 0.0)
        quick = (us >= 0.07) & (vv <= vr)
        lhs = (vv * alpha / (a / (us_safe * us_safe) + b)).log()
        rhs = log_fm - _log_factorial(k_safe) - _log_factorial(n_b - k_safe) + (k_safe - m) * log_r
        return k, inside & (quick | (lhs <= rhs))

    big = rejection(n0, shape, propose, done=small | invalid)
    out = _combine.where(small, found, big)
    out = _combine.where(flip, n - out, out)
    return _combine.where(invalid, math.nan, out)

