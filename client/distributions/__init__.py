"""``tw.distributions``: torch.distributions on tensorwire tensors.

The same classes, arguments, shapes and semantics as torch 2.13's (``batch_shape``/``event_shape``, ``sample`` and
``rsample``, ``log_prob``, ``entropy``, ``cdf``/``icdf``, ``expand``, ``validate_args`` with torch's constraint
checks and ValueErrors, ``kl_divergence`` and ``register_kl``), computed by recorded tensorwire ops (autograd
flows through ``log_prob``, ``entropy``, ``kl_divergence`` and ``rsample`` to the parameters). Samples come from
the cluster's generator (``tw.manual_seed`` makes them reproducible; the numbers are not torch's).

Distributions: Bernoulli, Beta, Binomial, Categorical, Chi2, Dirichlet, Exponential, Gamma, Independent, Laplace,
LogNormal, MultivariateNormal, Normal, OneHotCategorical, OneHotCategoricalStraightThrough, Poisson,
TransformedDistribution, Uniform; ``transforms`` (a subset: see its docstring) and ``constraints``.

Two costs torch does not have: validation reads its checks from the cluster (one fetch per construction, one per
checked ``log_prob``/``cdf``: ``Distribution.set_default_validate_args(False)`` turns it off), and the rejection
samplers (Gamma, Beta, Dirichlet, Chi2, and Poisson and Binomial for large means) read one bool per round of
proposals (``_sampling``).
"""

from __future__ import annotations

from . import constraints, transforms
from .bernoulli import Bernoulli
from .beta import Beta
from .binomial import Binomial
from .categorical import Categorical
from .chi2 import Chi2
from .dirichlet import Dirichlet
from .distribution import Distribution
from .exp_family import ExponentialFamily
from .exponential import Exponential
from .gamma import Gamma
from .independent import Independent
from .kl import kl_divergence, register_kl
from .laplace import Laplace
from .log_normal import LogNormal
from .multivariate_normal import MultivariateNormal
from .normal import Normal
from .one_hot_categorical import OneHotCategorical, OneHotCategoricalStraightThrough
from .poisson import Poisson
from .transformed_distribution import TransformedDistribution
from .transforms import (
    AbsTransform,
    AffineTransform,
    ComposeTransform,
    CumulativeDistributionTransform,
    ExpTransform,
    IndependentTransform,
    LowerCholeskyTransform,
    PositiveDefiniteTransform,
    PowerTransform,
    ReshapeTransform,
    SigmoidTransform,
    SoftmaxTransform,
    SoftplusTransform,
    StickBreakingTransform,
    TanhTransform,
    Transform,
    identity_transform,
)
from .uniform import Uniform

__all__ = [
    "Bernoulli", "Beta", "Binomial", "Categorical", "Chi2", "Dirichlet", "Distribution", "Exponential",
    "ExponentialFamily", "Gamma", "Independent", "Laplace", "LogNormal", "MultivariateNormal", "Normal",
    "OneHotCategorical", "OneHotCategoricalStraightThrough", "Poisson", "TransformedDistribution", "Uniform",
    "constraints", "kl_divergence", "register_kl", "transforms",
    "AbsTransform", "AffineTransform", "ComposeTransform", "CumulativeDistributionTransform", "ExpTransform",
    "IndependentTransform", "LowerCholeskyTransform", "PositiveDefiniteTransform", "PowerTransform",
    "ReshapeTransform", "SigmoidTransform", "SoftmaxTransform", "SoftplusTransform", "StickBreakingTransform",
    "TanhTransform", "Transform", "identity_transform",
]
