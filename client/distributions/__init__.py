"""``tw.distributions``: torch.distributions on tensorwire tensors.

The same classes, arguments, shapes and semantics as torch 2.13's (``batch_shape``/``event_shape``, ``sample`` and
``rsample``, ``log_prob``, ``entropy``, ``cdf``/``icdf``, ``expand``, ``validate_args`` with torch's constraint
checks and ValueErrors, ``kl_divergence`` and ``register_kl``), computed by recorded tensorwire ops (autograd
flows through ``log_prob``, ``entropy``, ``kl_divergence`` and ``rsample`` to the parameters). Samples come from
the cluster's generator (``tw.manual_seed`` makes them reproducible; the numbers are not torch's). Where torch's
own formula is an approximation this package computes the exact value instead (VonMises' Bessel functions).

Distributions: every one of torch's: Bernoulli, Beta, Binomial, Categorical, Cauchy, Chi2, ContinuousBernoulli,
Dirichlet, Exponential, FisherSnedecor, Gamma, GeneralizedPareto, Geometric, Gumbel, HalfCauchy, HalfNormal,
Independent, InverseGamma, Kumaraswamy, LKJCholesky, Laplace, LogNormal, LogisticNormal, LowRankMultivariateNormal,
MixtureSameFamily, Multinomial, MultivariateNormal, NegativeBinomial, Normal, OneHotCategorical,
OneHotCategoricalStraightThrough, Pareto, Poisson, RelaxedBernoulli, RelaxedOneHotCategorical, StudentT,
TransformedDistribution, Uniform, VonMises, Weibull, Wishart; ``transforms``, ``constraints``, and the constraint
registries ``biject_to`` and ``transform_to``.

Two costs torch does not have: validation reads its checks from the cluster (one fetch per construction, one per
checked ``log_prob``/``cdf``: ``Distribution.set_default_validate_args(False)`` turns it off), and the rejection
samplers (Gamma and those built on it, Beta, Dirichlet, Chi2, StudentT, FisherSnedecor, InverseGamma,
NegativeBinomial, Wishart, LKJCholesky; Poisson and Binomial for large means; VonMises) read one bool per round of
proposals (``_sampling``), and Wishart's ``rsample`` reads whether any sample is singular (its constructor reads its
``df`` check, as torch's makes it, validated or not).
"""

from __future__ import annotations

from . import constraints, transforms
from .bernoulli import Bernoulli
from .beta import Beta
from .binomial import Binomial
from .categorical import Categorical
from .cauchy import Cauchy
from .chi2 import Chi2
from .constraint_registry import biject_to, transform_to
from .continuous_bernoulli import ContinuousBernoulli
from .dirichlet import Dirichlet
from .distribution import Distribution
from .exp_family import ExponentialFamily
from .exponential import Exponential
from .fishersnedecor import FisherSnedecor
from .gamma import Gamma
from .generalized_pareto import GeneralizedPareto
from .geometric import Geometric
from .gumbel import Gumbel
from .half_cauchy import HalfCauchy
from .half_normal import HalfNormal
from .independent import Independent
from .inverse_gamma import InverseGamma
from .kl import kl_divergence, register_kl
from .kumaraswamy import Kumaraswamy
from .laplace import Laplace
from .lkj_cholesky import LKJCholesky
from .log_normal import LogNormal
from .logistic_normal import LogisticNormal
from .lowrank_multivariate_normal import LowRankMultivariateNormal
from .mixture_same_family import MixtureSameFamily
from .multinomial import Multinomial
from .multivariate_normal import MultivariateNormal
from .negative_binomial import NegativeBinomial
from .normal import Normal
from .one_hot_categorical import OneHotCategorical, OneHotCategoricalStraightThrough
from .pareto import Pareto
from .poisson import Poisson
from .relaxed_bernoulli import RelaxedBernoulli
from .relaxed_categorical import RelaxedOneHotCategorical
from .studentT import StudentT
from .transformed_distribution import TransformedDistribution
from .transforms import (
    AbsTransform,
    AffineTransform,
    CatTransform,
    ComposeTransform,
    CorrCholeskyTransform,
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
    StackTransform,
    StickBreakingTransform,
    TanhTransform,
    Transform,
    identity_transform,
)
from .uniform import Uniform
from .von_mises import VonMises
from .weibull import Weibull
from .wishart import Wishart

__all__ = [
    "Bernoulli", "Beta", "Binomial", "Categorical", "Cauchy", "Chi2", "ContinuousBernoulli", "Dirichlet",
    "Distribution", "Exponential", "ExponentialFamily", "FisherSnedecor", "Gamma", "GeneralizedPareto", "Geometric",
    "Gumbel", "HalfCauchy", "HalfNormal", "Independent", "InverseGamma", "Kumaraswamy", "LKJCholesky", "Laplace",
    "LogNormal", "LogisticNormal", "LowRankMultivariateNormal", "MixtureSameFamily", "Multinomial",
    "MultivariateNormal", "NegativeBinomial", "Normal", "OneHotCategorical", "OneHotCategoricalStraightThrough",
    "Pareto", "Poisson", "RelaxedBernoulli", "RelaxedOneHotCategorical", "StudentT", "TransformedDistribution",
    "Uniform", "VonMises", "Weibull", "Wishart",
    "biject_to", "constraints", "kl_divergence", "register_kl", "transform_to", "transforms",
    "AbsTransform", "AffineTransform", "CatTransform", "ComposeTransform", "CorrCholeskyTransform",
    "CumulativeDistributionTransform", "ExpTransform", "IndependentTransform", "LowerCholeskyTransform",
    "PositiveDefiniteTransform", "PowerTransform", "ReshapeTransform", "SigmoidTransform", "SoftmaxTransform",
    "SoftplusTransform", "StackTransform", "StickBreakingTransform", "TanhTransform", "Transform",
    "identity_transform",
]
