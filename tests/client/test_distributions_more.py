"""The rest of torch.distributions in ``tw.distributions`` against torch 2.13: Cauchy, ContinuousBernoulli,
FisherSnedecor, GeneralizedPareto, Geometric, Gumbel, HalfCauchy, HalfNormal, InverseGamma, Kumaraswamy,
LKJCholesky, LogisticNormal, LowRankMultivariateNormal, MixtureSameFamily, Multinomial, NegativeBinomial, Pareto,
RelaxedBernoulli, RelaxedOneHotCategorical, StudentT, VonMises, Weibull, Wishart; the CatTransform, StackTransform
and CorrCholeskyTransform; the registries ``biject_to`` and ``transform_to``; their kl_divergence pairs.

In float64 (torch's numbers to ~1e-10 where both compute the same formula): log_prob, cdf, icdf, entropy, the
moments and mode, shapes (batch, event, sample, expand), the gradients of log_prob and entropy, the validation errors.
What cannot equal torch's numbers (the samples: another generator): 100k draws of each against 100k of torch's by
a two-sample Kolmogorov-Smirnov bound, and their means within their standard errors; and each rsample's pathwise
gradient, per draw: against central finite differences of draws of the same seed, or, through Gamma draws (whose
gradient is the implicit one), against torch's gradient of the same Gamma variates.

torch is the reference (the ``torch`` fixture skips without it)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import tensorwire as tw

from ._torch_validating import validating_torch

pytestmark = pytest.mark.usefixtures("session")


@pytest.fixture(scope="module")
def torch():
    yield from validating_torch()

F64 = np.float64




def _lib_tensor(lib, a, grad: bool = False, dtype=F64):
    """``a`` as a tensor of ``lib`` (torch or tensorwire) of ``dtype`` (float64), a leaf that requires grad if
    asked."""
    arr = np.asarray(a)
    t = lib.tensor(arr.astype(dtype) if arr.dtype.kind == "f" else arr)
    return t.requires_grad_() if grad else t


def _close(got, want, rtol=1e-10, atol=1e-12, what="") -> None:
    """A tensorwire result equals torch's: shape, dtype and values (NaN and infinities where torch's are)."""
    w = want.detach().numpy()
    assert tuple(got.shape) == tuple(w.shape), f"{what}: shape {tuple(got.shape)} != torch's {tuple(w.shape)}"
    assert got.dtype.name == str(want.dtype).removeprefix("torch."), f"{what}: dtype {got.dtype} != {want.dtype}"
    np.testing.assert_allclose(got.detach().numpy(), w, rtol=rtol, atol=atol, err_msg=what)


COV = np.array([[2.0, 0.3, 0.1], [0.3, 1.0, -0.2], [0.1, -0.2, 0.5]])
TRIL = np.linalg.cholesky(COV)
CORR_TRIL = np.linalg.cholesky(np.array([[1.0, 0.3, -0.2], [0.3, 1.0, 0.4], [-0.2, 0.4, 1.0]]))
PROBS = np.array([[0.2, 0.3, 0.5], [0.6, 0.1, 0.3]])
LOGITS = np.array([[0.5, -1.0, 2.0], [1.5, 0.2, -0.3]])
LOC, SCALE = np.array([0.3, -1.2, 2.0]), np.array([0.7, 1.5, 0.2])
Q = np.array([0.1, 0.5, 0.97])

#: name -> (parameters (numpy, each differentiable), the distribution built from them by a ``distributions`` module
#: and its library, a value in the support, quantiles for icdf (or None), options: ``rtol`` (1e-10 unless given),
#: ``dtype`` (float64 unless given), and a tolerance of its own for a named value where torch's is approximate)
SPECS = {
    "StudentT": ({"df": np.array([0.8, 1.5, 5.0]), "loc": LOC, "scale": SCALE},
                 lambda D, L, p: D.StudentT(p["df"], p["loc"], p["scale"]), np.array([0.1, -3.0, 2.4]), None, {}),
    "Cauchy": ({"loc": LOC, "scale": SCALE}, lambda D, L, p: D.Cauchy(p["loc"], p["scale"]),
               np.array([0.1, -3.0, 2.4]), Q, {}),
    "HalfCauchy": ({"scale": SCALE}, lambda D, L, p: D.HalfCauchy(p["scale"]), np.array([0.1, 3.0, 0.0]), Q, {}),
    "HalfNormal": ({"scale": SCALE}, lambda D, L, p: D.HalfNormal(p["scale"]), np.array([0.1, 3.0, 0.0]), Q, {}),
    "Gumbel": ({"loc": LOC, "scale": SCALE}, lambda D, L, p: D.Gumbel(p["loc"], p["scale"]),
               np.array([0.1, -3.0, 2.4]), Q, {}),
    "Geometric_probs": ({"probs": np.array([0.2, 0.5, 1.0])}, lambda D, L, p: D.Geometric(probs=p["probs"]),
                        np.array([3.0, 1.0, 0.0]), None, {}),
    "Geometric_logits": ({"logits": np.array([0.3, -2.0, 4.0])}, lambda D, L, p: D.Geometric(logits=p["logits"]),
                         np.array([0.0, 7.0, 1.0]), None, {}),
    # (torch's entropy takes lgamma(n + 1) of an int tensor: in float32)
    "Multinomial_probs": ({"probs": PROBS}, lambda D, L, p: D.Multinomial(5, probs=p["probs"]),
                          np.array([[1.0, 0.0, 4.0], [2.0, 2.0, 1.0]]), None, {"entropy": 1e-7, "perplexity": 1e-7}),
    "Multinomial_logits": ({"logits": LOGITS}, lambda D, L, p: D.Multinomial(4, logits=p["logits"]),
                           np.array([0.0, 1.0, 3.0]), None, {"entropy": 1e-7, "perplexity": 1e-7}),
    "NegativeBinomial": ({"probs": np.array([0.3, 0.6, 0.0])},
                         lambda D, L, p: D.NegativeBinomial(L.tensor([3.0, 0.5, 10.0], dtype=L.float64), p["probs"]),
                         np.array([2.0, 0.0, 0.0]), None, {}),
    "NegativeBinomial_logits": ({"total_count": np.array([3.0, 0.5]), "logits": np.array([0.3, -1.6])},
                                lambda D, L, p: D.NegativeBinomial(p["total_count"], logits=p["logits"]),
                                np.array([4.0, 1.0]), None, {}),
    "Weibull": ({"scale": SCALE, "concentration": np.array([0.7, 1.5, 3.0])},
                lambda D, L, p: D.Weibull(p["scale"], p["concentration"]), np.array([0.1, 3.0, 0.25]), Q, {}),
    "Pareto": ({"scale": SCALE, "alpha": np.array([0.8, 1.5, 3.0])}, lambda D, L, p: D.Pareto(p["scale"], p["alpha"]),
               np.array([0.7, 3.0, 0.25]), Q, {}),
    "GeneralizedPareto": ({"loc": LOC, "scale": SCALE, "concentration": np.array([-0.5, 0.0, 0.3])},
                          lambda D, L, p: D.GeneralizedPareto(p["loc"], p["scale"], p["concentration"]),
                          np.array([0.9, 0.0, 2.5]), Q, {"dtype": np.float32, "rtol": 2e-6}),  # (torch's: float32 only)
    "MixtureSameFamily": ({"probs": np.array([0.2, 0.5, 0.3]), "loc": LOC, "scale": SCALE},
                          lambda D, L, p: D.MixtureSameFamily(D.Categorical(probs=p["probs"]),
                                                              D.Normal(p["loc"], p["scale"])),
                          np.array([0.4, -1.0]), None, {}),
    "MixtureSameFamily_event": ({"logits": LOGITS, "loc": np.arange(12.0).reshape(2, 3, 2) / 4,
                                 "scale": np.full((2, 3, 2), 0.8)},
                                lambda D, L, p: D.MixtureSameFamily(D.Categorical(logits=p["logits"]),
                                                                    D.Independent(D.Normal(p["loc"], p["scale"]), 1)),
                                np.array([[0.3, 1.0], [2.0, 1.5]]), None, {}),
    "LowRankMVN": ({"loc": np.array([[0.0, 1.0, -1.0], [0.5, 0.5, 0.5]]),
                    "cov_factor": np.array([[1.0, 0.2], [0.3, -0.5], [0.0, 0.7]]),
                    "cov_diag": np.array([0.5, 1.0, 2.0])},
                   lambda D, L, p: D.LowRankMultivariateNormal(p["loc"], p["cov_factor"], p["cov_diag"]),
                   np.array([0.3, 0.2, -0.4]), None, {}),
    "RelaxedBernoulli": ({"probs": np.array([0.2, 0.5, 0.9])},
                         lambda D, L, p: D.RelaxedBernoulli(L.tensor(0.7, dtype=L.float64), probs=p["probs"]),
                         np.array([0.3, 0.01, 0.95]), None, {}),
    "RelaxedBernoulli_logits": ({"logits": np.array([0.3, -2.0])},
                                lambda D, L, p: D.RelaxedBernoulli(L.tensor([1.5, 0.4], dtype=L.float64),
                                                                   logits=p["logits"]),
                                np.array([0.5, 0.2]), None, {}),
    "RelaxedOneHotCategorical": ({"probs": PROBS},
                                 lambda D, L, p: D.RelaxedOneHotCategorical(L.tensor(0.5, dtype=L.float64),
                                                                            probs=p["probs"]),
                                 np.array([[0.1, 0.3, 0.6], [0.8, 0.15, 0.05]]), None, {"rtol": 1e-9}),
    "ContinuousBernoulli": ({"probs": np.array([0.2, 0.4995, 0.8])},
                            lambda D, L, p: D.ContinuousBernoulli(probs=p["probs"]), np.array([0.3, 0.0, 0.9]),
                            Q, {}),
    "ContinuousBernoulli_logits": ({"logits": np.array([-1.0, 0.001, 2.0])},
                                   lambda D, L, p: D.ContinuousBernoulli(logits=p["logits"]),
                                   np.array([0.3, 1.0, 0.9]), Q, {}),
    "FisherSnedecor": ({"df1": np.array([1.5, 3.0, 6.0]), "df2": np.array([1.5, 5.0, 10.0])},
                       lambda D, L, p: D.FisherSnedecor(p["df1"], p["df2"]), np.array([0.3, 1.0, 2.5]), None, {}),
    "InverseGamma": ({"concentration": np.array([0.8, 1.5, 3.0]), "rate": np.array([1.0, 0.5, 2.0])},
                     lambda D, L, p: D.InverseGamma(p["concentration"], p["rate"]), np.array([0.3, 1.0, 2.5]),
                     None, {}),
    "Kumaraswamy": ({"concentration1": np.array([0.5, 2.0, 5.0]), "concentration0": np.array([0.8, 2.0, 1.5])},
                    lambda D, L, p: D.Kumaraswamy(p["concentration1"], p["concentration0"]),
                    np.array([0.3, 0.5, 0.9]), Q, {}),
    "LogisticNormal": ({"loc": np.array([[0.0, 1.0, -1.0], [0.5, 0.5, 0.5]]), "scale": np.array([0.5, 1.0, 2.0])},
                       lambda D, L, p: D.LogisticNormal(p["loc"], p["scale"]), np.array([0.1, 0.2, 0.3, 0.4]),
                       None, {}),
    "VonMises": ({"loc": LOC, "concentration": np.array([0.5, 2.0, 10.0])},
                 lambda D, L, p: D.VonMises(p["loc"], p["concentration"]), np.array([0.1, -3.0, 8.4]), None,
                 {"rtol": 1e-6}),  # (torch's Bessel functions: a polynomial of ~1e-7 relative error)
    "LKJCholesky": ({"concentration": np.array([0.5, 1.0, 2.0])},
                    lambda D, L, p: D.LKJCholesky(3, p["concentration"]), CORR_TRIL, None, {}),
    "Wishart": ({"df": np.array([3.5, 5.0]), "covariance_matrix": COV},
                lambda D, L, p: D.Wishart(p["df"], covariance_matrix=p["covariance_matrix"]), 3 * COV + np.eye(3),
                None, {}),
    "Wishart_tril": ({"df": np.array(4.0), "scale_tril": TRIL},
                     lambda D, L, p: D.Wishart(p["df"], scale_tril=p["scale_tril"]), 3 * COV + np.eye(3), None,
                     {}),
    "Wishart_precision": ({"precision_matrix": np.linalg.inv(COV)},
                          lambda D, L, p: D.Wishart(6, precision_matrix=p["precision_matrix"]), 3 * COV + np.eye(3),
                          None, {}),
}


def _torch_sample(d, shape=()):
    """``d.sample(shape)`` of a torch distribution, without the warning torch's Wishart gives of a singular sample
    where there is none (its test is the wrong way round)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Singular sample detected")
        return d.sample(shape)


def _pair(torch, name: str, grad: bool = False):
    """(tensorwire distribution, torch distribution, their parameters (tw, torch), the value in each library)."""
    params, build, value, _, opts = SPECS[name]
    dtype = opts.get("dtype", F64)
    pw = {k: _lib_tensor(tw, v, grad, dtype) for k, v in params.items()}
    pt = {k: _lib_tensor(torch, v, grad, dtype) for k, v in params.items()}
    return (build(tw.distributions, tw, pw), build(torch.distributions, torch, pt), pw, pt,
            _lib_tensor(tw, value, dtype=dtype), _lib_tensor(torch, value, dtype=dtype))


def _rtol(name: str, what: str = "") -> float:
    """The tolerance of ``name``'s ``what`` (an icdf through erfinv: tw's is Acklam's approximation, 1.15e-9
    relative)."""
    opts = SPECS[name][4]
    rtol = opts.get(what, opts.get("rtol", 1e-10))
    return max(rtol, 1e-8) if what == "icdf" else rtol


@pytest.mark.parametrize("name", list(SPECS))
def test_values_match_torch(torch, name):
    """Shapes, log_prob, entropy, moments, mode, cdf/icdf, enumerate_support: torch's values, or the same
    NotImplementedError where torch has none."""
    dw, dt, _, _, vw, vt = _pair(torch, name)
    rtol = _rtol(name)
    atol = rtol
    assert type(dw).__name__ == type(dt).__name__
    assert tuple(dw.batch_shape) == tuple(dt.batch_shape) and tuple(dw.event_shape) == tuple(dt.event_shape)
    assert isinstance(dw.batch_shape, tw.Size) and isinstance(dw.event_shape, tw.Size)
    assert dw.has_rsample == dt.has_rsample and dw.has_enumerate_support == dt.has_enumerate_support
    assert set(dw.arg_constraints) == set(dt.arg_constraints)
    _close(dw.log_prob(vw), dt.log_prob(vt), rtol=rtol, atol=atol, what=f"{name}.log_prob")
    calls = {p: (lambda d, p=p: getattr(d, p)) for p in ("mean", "mode", "variance", "stddev")}
    calls["entropy"] = lambda d: d.entropy()
    calls["perplexity"] = lambda d: d.perplexity()
    calls["cdf"] = lambda d: d.cdf(vw if d is dw else vt)
    q = SPECS[name][3]
    if q is not None:
        dtype = SPECS[name][4].get("dtype", F64)
        calls["icdf"] = lambda d: d.icdf(_lib_tensor(tw if d is dw else torch, q, dtype=dtype))
    calls["enumerate_support"] = lambda d: d.enumerate_support()
    for what, call in calls.items():
        try:
            want = call(dt)
        except NotImplementedError:
            with pytest.raises(NotImplementedError):
                call(dw)
            continue
        tol = _rtol(name, what)
        _close(call(dw), want, rtol=tol, atol=tol, what=f"{name}.{what}")
    assert repr(dw).split("(")[0] == repr(dt).split("(")[0]


@pytest.mark.parametrize("name", list(SPECS))
def test_sample_shapes_and_expand(torch, name):
    dw, dt, _, _, _, _ = _pair(torch, name)
    for shape in ((), (2, 3)):
        sw, st = dw.sample(shape), _torch_sample(dt, shape)
        assert tuple(sw.shape) == tuple(st.shape), (name, shape)
        assert sw.dtype.name == str(st.dtype).removeprefix("torch."), (name, sw.dtype, st.dtype)
        if dt.has_rsample:
            assert tuple(dw.rsample(shape).shape) == tuple(st.shape)
    new_batch = (4,) + tuple(dt.batch_shape)
    ew, et = dw.expand(new_batch), dt.expand(new_batch)
    assert type(ew) is type(dw) and tuple(ew.batch_shape) == tuple(et.batch_shape) == new_batch
    assert tuple(ew.event_shape) == tuple(et.event_shape)
    value = _torch_sample(et).numpy()  # (torch's draw: a value of the expanded shape in the support)
    assert tuple(ew.sample().shape) == value.shape
    rtol = _rtol(name)
    _close(ew.log_prob(tw.tensor(value)), et.log_prob(torch.tensor(value)), rtol=rtol, atol=rtol,
           what=f"{name}.expand().log_prob")
    try:
        want = et.mean
    except NotImplementedError:
        return
    _close(ew.mean, want, rtol=rtol, atol=rtol, what=f"{name}.expand().mean")


@pytest.mark.parametrize("name", list(SPECS))
def test_log_prob_and_entropy_gradients_match_torch(torch, name):
    """The gradient of log_prob (plus half the entropy, where torch's is finite) in each parameter: torch's."""
    dw, dt, pw, pt, vw, vt = _pair(torch, name, grad=True)
    lw, lt = dw.log_prob(vw).sum(), dt.log_prob(vt).sum()
    try:
        et = dt.entropy().sum()
    except NotImplementedError:
        et = None
    if et is not None and torch.isfinite(et):
        lw, lt = lw + 0.5 * dw.entropy().sum(), lt + 0.5 * et
    lw.backward()
    lt.backward()
    rtol = max(_rtol(name), 1e-9)
    for k in pt:
        if pt[k].grad is None:
            assert pw[k].grad is None or not np.any(pw[k].grad.numpy()), (name, k)
            continue
        gw, gt = pw[k].grad, pt[k].grad
        if k == "scale_tril":  # (torch's cholesky_solve gives the unread upper triangle a gradient too)
            gw, gt = gw.tril(), gt.tril()
        _close(gw, gt, rtol=rtol * 10, atol=rtol, what=f"{name} d/d{k}")


def test_other_attributes_match_torch(torch):
    """What some of them have beyond Distribution's: the matrices of LowRankMultivariateNormal and Wishart,
    GeneralizedPareto's log_cdf and log_survival_function (float32: torch's takes no other), the relaxed
    distributions' bases (the distributions of the logit and the log), an expanded Multinomial's entropy (torch's
    expanded copy has no binomial to compute it: against the entropy before the expansion)."""
    def build(D, L):
        def t(x, dtype=F64):
            return L.tensor(np.asarray(x, dtype))

        lowrank = D.LowRankMultivariateNormal(t([[0.0, 1.0, -1.0], [0.5, 0.5, 0.5]]),
                                              t([[1.0, 0.2], [0.3, -0.5], [0.0, 0.7]]), t([0.5, 1.0, 2.0]))
        wishart = D.Wishart(t([3.5, 5.0]), precision_matrix=t(np.linalg.inv(COV)))
        gpd = D.GeneralizedPareto(t(LOC, np.float32), t(SCALE, np.float32), t([-0.5, 0.0, 0.3], np.float32))
        value = t([0.9, 0.0, 2.5], np.float32)
        relaxed = D.relaxed_bernoulli.LogitRelaxedBernoulli(t(0.7), logits=t([0.3, -1.0]))
        exp_relaxed = D.relaxed_categorical.ExpRelaxedCategorical(t(0.5), probs=t(PROBS))
        multinomial = D.Multinomial(3, t([0.2, 0.8]))
        return {"lowrank.scale_tril": lowrank.scale_tril, "lowrank.covariance_matrix": lowrank.covariance_matrix,
                "lowrank.precision_matrix": lowrank.precision_matrix, "lowrank.variance": lowrank.variance,
                "wishart.scale_tril": wishart.scale_tril, "wishart.covariance_matrix": wishart.covariance_matrix,
                "wishart.precision_matrix": wishart.precision_matrix,
                "gpd.log_cdf": gpd.log_cdf(value), "gpd.log_survival_function": gpd.log_survival_function(value),
                "LogitRelaxedBernoulli.log_prob": relaxed.log_prob(t([0.5, -2.0])),
                "ExpRelaxedCategorical.log_prob": exp_relaxed.log_prob(t(np.log([[0.1, 0.3, 0.6], [0.8, 0.15, 0.05]]))),
                "Multinomial.entropy": (multinomial.expand((2,)).entropy() if D is tw.distributions
                                        else multinomial.entropy().expand(2))}

    w, t = build(tw.distributions, tw), build(torch.distributions, torch)
    for what, want in t.items():
        rtol = {"gpd": 2e-6, "Mul": 1e-7, "wis": 1e-10}.get(what[:3], 1e-12)
        _close(w[what], want, rtol=rtol, atol=rtol, what=what)


def test_number_parameters_broadcast_as_torch(torch):
    """Numbers take the dtype of the first tensor parameter (the default dtype when all are numbers) and broadcast;
    batch_shape is () for numbers only where torch's is."""
    cases = [lambda D, L: D.Cauchy(0.0, 2.0), lambda D, L: D.Cauchy(L.tensor([0.0, 1.0], dtype=L.float64), 2.0),
             lambda D, L: D.StudentT(3.0), lambda D, L: D.StudentT(L.tensor([[3.0], [5.0]]), L.tensor([0.0, 1.0])),
             lambda D, L: D.Gumbel(1.0, 2.0), lambda D, L: D.Gumbel(L.tensor([1.0, 2.0]), 0.5),
             lambda D, L: D.HalfNormal(2.0), lambda D, L: D.Geometric(0.3), lambda D, L: D.Weibull(1.0, 2.0),
             lambda D, L: D.Pareto(1.0, L.tensor([3.0, 4.0])), lambda D, L: D.GeneralizedPareto(0.0, 1.0, 0.2),
             lambda D, L: D.FisherSnedecor(3.0, 6.0), lambda D, L: D.InverseGamma(3.0, L.tensor([1.0, 2.0])),
             lambda D, L: D.Kumaraswamy(2.0, 3.0), lambda D, L: D.ContinuousBernoulli(0.3),
             lambda D, L: D.LogisticNormal(0.0, 1.0), lambda D, L: D.LKJCholesky(2, 2.0),
             lambda D, L: D.NegativeBinomial(3.0, L.tensor([0.5, 0.2]))]
    for make in cases:
        dw, dt = make(tw.distributions, tw), make(torch.distributions, torch)
        assert tuple(dw.batch_shape) == tuple(dt.batch_shape), dt
        assert tuple(dw.event_shape) == tuple(dt.event_shape), dt
        if not isinstance(dt, (torch.distributions.LogisticNormal, torch.distributions.LKJCholesky)):  # (no mean)
            _close(dw.mean, dt.mean, rtol=1e-6, atol=1e-6, what=repr(dt))
        v = dt.sample().numpy()
        _close(dw.log_prob(tw.tensor(v)), dt.log_prob(torch.tensor(v)), rtol=1e-5, atol=1e-5, what=repr(dt))


# -- validation ----------------------------------------------------------------------------------------------------

INVALID = [
    lambda D, L: D.StudentT(L.tensor([1.0, -1.0])),
    lambda D, L: D.StudentT(L.tensor([1.0]), L.tensor([0.0]), L.tensor([0.0])),
    lambda D, L: D.Cauchy(L.tensor([math.nan]), L.tensor([1.0])),
    lambda D, L: D.HalfCauchy(L.tensor([-1.0])),
    lambda D, L: D.HalfNormal(L.tensor([0.0])),
    lambda D, L: D.Gumbel(L.tensor([0.0]), L.tensor([-1.0])),
    lambda D, L: D.Geometric(probs=L.tensor([0.5, 1.5])),
    lambda D, L: D.Geometric(probs=L.tensor([0.5, 0.0])),  # (torch's second check: positive)
    lambda D, L: D.Multinomial(3, probs=L.tensor([0.5, -0.1, 0.6])),
    lambda D, L: D.NegativeBinomial(L.tensor([-1.0]), L.tensor([0.5])),
    lambda D, L: D.NegativeBinomial(L.tensor([2.0]), L.tensor([1.0])),
    lambda D, L: D.Weibull(L.tensor([1.0]), L.tensor([0.0])),
    lambda D, L: D.Pareto(L.tensor([1.0]), L.tensor([-2.0])),
    lambda D, L: D.GeneralizedPareto(L.tensor([0.0]), L.tensor([-1.0]), L.tensor([0.1])),
    lambda D, L: D.LowRankMultivariateNormal(L.zeros(2), L.ones(2, 1), L.tensor([1.0, -1.0])),
    lambda D, L: D.RelaxedBernoulli(L.tensor(0.5), probs=L.tensor([1.5])),
    lambda D, L: D.RelaxedOneHotCategorical(L.tensor(0.5), probs=L.tensor([0.5, -0.5, 0.5])),
    lambda D, L: D.FisherSnedecor(L.tensor([1.0]), L.tensor([0.0])),
    lambda D, L: D.InverseGamma(L.tensor([0.0]), L.tensor([1.0])),
    lambda D, L: D.Kumaraswamy(L.tensor([1.0]), L.tensor([-1.0])),
    lambda D, L: D.LogisticNormal(L.tensor([0.0, 1.0]), L.tensor([1.0, -1.0])),
    lambda D, L: D.VonMises(L.tensor([0.0]), L.tensor([-1.0])),
    lambda D, L: D.LKJCholesky(3, L.tensor([0.0])),
    lambda D, L: D.Wishart(L.tensor([4.0]), covariance_matrix=L.tensor([[1.0, 2.0], [2.0, 1.0]])),
    lambda D, L: D.Wishart(L.tensor([4.0]), scale_tril=L.tensor([[1.0, 0.0], [0.5, -1.0]])),
]


@pytest.mark.parametrize("case", range(len(INVALID)))
def test_invalid_parameters_raise_value_error_as_torch(torch, case):
    make = INVALID[case]
    with pytest.raises(ValueError) as want:
        make(torch.distributions, torch)
    with pytest.raises(ValueError) as got:
        make(tw.distributions, tw)
    # the same parameter named, the same check
    assert str(got.value).split(" (")[0] == str(want.value).split(" (")[0]


def test_constructor_errors_as_torch(torch):
    for L, D in ((torch, torch.distributions), (tw, tw.distributions)):
        with pytest.raises(ValueError, match="Either `probs` or `logits`"):
            D.Geometric()
        with pytest.raises(ValueError, match="Either `probs` or `logits`"):
            D.NegativeBinomial(3.0)
        with pytest.raises(ValueError, match="Either `probs` or `logits`"):
            D.ContinuousBernoulli(probs=L.tensor([0.5]), logits=L.tensor([0.0]))
        with pytest.raises(NotImplementedError, match="inhomogeneous total_count"):
            D.Multinomial(L.tensor([2, 3]), probs=L.tensor([0.5, 0.5]))
        with pytest.raises(ValueError, match="cov_factor must be a batch of matrices"):
            D.LowRankMultivariateNormal(L.zeros(3), L.ones(2, 1), L.ones(3))
        with pytest.raises(ValueError, match="Incompatible batch shapes"):
            D.LowRankMultivariateNormal(L.zeros(2, 3), L.ones(3, 3, 1), L.ones(3))
        with pytest.raises(ValueError, match="Mixture distribution needs"):
            D.MixtureSameFamily(D.Normal(0.0, 1.0), D.Normal(L.zeros(2), L.ones(2)))
        with pytest.raises(ValueError, match="does not equal"):
            D.MixtureSameFamily(D.Categorical(L.ones(3)), D.Normal(L.zeros(2), L.ones(2)))
        with pytest.raises(ValueError, match="Expected dim to be an integer greater than or equal to 2"):
            D.LKJCholesky(1)
        with pytest.raises(ValueError, match="expected to be greater than ndim - 1"):
            D.Wishart(L.tensor(1.5), L.eye(3))
        with pytest.raises(AssertionError, match="Exactly one of"):
            D.Wishart(L.tensor(4.0))
        with pytest.raises(ValueError, match="The parameter probs has invalid values"):
            D.ContinuousBernoulli(L.tensor([1.5]), validate_args=True)
    with pytest.warns(UserWarning, match="Low df values detected"):
        tw.distributions.Wishart(tw.tensor(2.5), tw.eye(3))


SUPPORT = [
    ("HalfNormal", lambda D, L: D.HalfNormal(L.tensor([1.0])), [-0.5]),
    ("Geometric", lambda D, L: D.Geometric(L.tensor([0.5])), [1.5]),
    ("Multinomial", lambda D, L: D.Multinomial(2, L.tensor([0.5, 0.5])), [[2.0, 1.0]]),
    ("Pareto", lambda D, L: D.Pareto(L.tensor([2.0]), L.tensor([1.0])), [1.5]),
    ("Weibull", lambda D, L: D.Weibull(L.tensor([2.0]), L.tensor([1.0])), [0.0]),
    ("Kumaraswamy", lambda D, L: D.Kumaraswamy(L.tensor([2.0]), L.tensor([1.0])), [1.5]),
    ("GeneralizedPareto", lambda D, L: D.GeneralizedPareto(L.tensor([0.0]), L.tensor([1.0]), L.tensor([-0.5])),
     [2.5]),
    ("LKJCholesky", lambda D, L: D.LKJCholesky(2), [[1.0, 0.0], [0.5, 0.5]]),
    ("Wishart", lambda D, L: D.Wishart(L.tensor(3.0), L.eye(2)), [[1.0, 2.0], [2.0, 1.0]]),
    ("MixtureSameFamily", lambda D, L: D.MixtureSameFamily(D.Categorical(L.ones(2)), D.Gamma(L.ones(2), 1.0)),
     [-1.0]),
]


@pytest.mark.parametrize("name,make,value", SUPPORT, ids=[s[0] for s in SUPPORT])
def test_log_prob_outside_the_support_raises_as_torch(torch, name, make, value):
    with pytest.raises(ValueError, match="within the support"):
        make(torch.distributions, torch).log_prob(torch.tensor(value))
    with pytest.raises(ValueError, match="within the support"):
        make(tw.distributions, tw).log_prob(tw.tensor(value))


# -- kl_divergence -------------------------------------------------------------------------------------------------

def _kl_cases():
    a, b = np.array([0.5, 2.0, 1.0]), np.array([1.5, 0.7, 1.0])
    c1, c0 = np.array([0.5, 2.0, 4.0]), np.array([1.5, 3.0, 1.0])
    al = np.array([0.8, 1.5, 3.0])
    cb = np.array([0.2, 0.4995, 0.8])

    def t(L, x):
        return L.tensor(np.asarray(x, F64))

    def lowrank(D, L, shift):
        return D.LowRankMultivariateNormal(t(L, [[0.0, 1.0, -1.0], [1.0, 1.0, 1.0]]) + shift,
                                           t(L, [[1.0, 0.2], [0.3, -0.5], [0.0, 0.7]]) * (1 + shift),
                                           t(L, [0.5, 1.0, 2.0]) + shift)

    return {
        "Cauchy-Cauchy": lambda D, L: (D.Cauchy(t(L, LOC), t(L, SCALE)), D.Cauchy(t(L, a), t(L, b))),
        "Gumbel-Gumbel": lambda D, L: (D.Gumbel(t(L, LOC), t(L, SCALE)), D.Gumbel(t(L, a), t(L, b))),
        "Geometric-Geometric": lambda D, L: (D.Geometric(t(L, [0.2, 0.5, 0.9])), D.Geometric(logits=t(L, a - 1))),
        "HalfNormal-HalfNormal": lambda D, L: (D.HalfNormal(t(L, a)), D.HalfNormal(t(L, b))),
        "Pareto-Pareto": lambda D, L: (D.Pareto(t(L, a), t(L, al)), D.Pareto(t(L, b), t(L, a))),
        "ContinuousBernoulli-ContinuousBernoulli": lambda D, L: (D.ContinuousBernoulli(t(L, cb)),
                                                                 D.ContinuousBernoulli(logits=t(L, a - 1))),
        "LowRank-LowRank": lambda D, L: (lowrank(D, L, 0.0), lowrank(D, L, 0.3)),
        "MVN-LowRank": lambda D, L: (D.MultivariateNormal(t(L, [0.5, 0.0, 0.0]), scale_tril=t(L, TRIL)),
                                     lowrank(D, L, 0.3)),
        "LowRank-MVN": lambda D, L: (lowrank(D, L, 0.0), D.MultivariateNormal(t(L, [0.5, 0.0, 0.0]), t(L, COV))),
        "Beta-ContinuousBernoulli": lambda D, L: (D.Beta(t(L, c1), t(L, c0)), D.ContinuousBernoulli(t(L, cb))),
        "ContinuousBernoulli-Exponential": lambda D, L: (D.ContinuousBernoulli(t(L, cb)), D.Exponential(t(L, a))),
        "ContinuousBernoulli-Normal": lambda D, L: (D.ContinuousBernoulli(t(L, cb)), D.Normal(t(L, a), t(L, b))),
        "ContinuousBernoulli-Uniform": lambda D, L: (D.ContinuousBernoulli(t(L, cb)),
                                                     D.Uniform(t(L, [-1.0, 0.0, -0.5]), t(L, [2.0, 2.0, 1.0]))),
        "Uniform-ContinuousBernoulli": lambda D, L: (D.Uniform(t(L, [0.1, 0.0, 0.2]), t(L, [0.9, 0.5, 1.0])),
                                                     D.ContinuousBernoulli(t(L, cb))),
        "Exponential-Gumbel": lambda D, L: (D.Exponential(t(L, a)), D.Gumbel(t(L, LOC), t(L, SCALE))),
        "Gamma-Gumbel": lambda D, L: (D.Gamma(t(L, a), t(L, b)), D.Gumbel(t(L, LOC), t(L, SCALE))),
        "Gumbel-Normal": lambda D, L: (D.Gumbel(t(L, LOC), t(L, SCALE)), D.Normal(t(L, a), t(L, b))),
        "Normal-Gumbel": lambda D, L: (D.Normal(t(L, a), t(L, b)), D.Gumbel(t(L, LOC), t(L, SCALE))),
        "Uniform-Gumbel": lambda D, L: (D.Uniform(t(L, -a), t(L, b)), D.Gumbel(t(L, LOC), t(L, SCALE))),
        "Pareto-Exponential": lambda D, L: (D.Pareto(t(L, a), t(L, al)), D.Exponential(t(L, b))),
        "Pareto-Gamma": lambda D, L: (D.Pareto(t(L, a), t(L, al)), D.Gamma(t(L, b), t(L, a))),
        "Pareto-Normal": lambda D, L: (D.Pareto(t(L, a), t(L, al + 0.8)), D.Normal(t(L, a), t(L, b))),
        "Uniform-Pareto": lambda D, L: (D.Uniform(t(L, [0.6, 2.5, 1.0]), t(L, [0.9, 3.0, 4.0])),
                                        D.Pareto(t(L, a), t(L, al))),
        "Gumbel-Gamma(inf)": lambda D, L: (D.Gumbel(t(L, LOC), t(L, SCALE)), D.Gamma(t(L, a), t(L, b))),
        "Normal-Pareto(inf)": lambda D, L: (D.Normal(t(L, a), t(L, b)), D.Pareto(t(L, a), t(L, al))),
        "Exponential-ContinuousBernoulli(inf)": lambda D, L: (D.Exponential(t(L, a)), D.ContinuousBernoulli(t(L, cb))),
        "Pareto-Uniform(inf)": lambda D, L: (D.Pareto(t(L, a), t(L, al)), D.Uniform(t(L, -a), t(L, b))),
        "Beta-Pareto(inf)": lambda D, L: (D.Beta(t(L, c1), t(L, c0)), D.Pareto(t(L, a), t(L, al))),
        "Weibull-Weibull(transformed)": lambda D, L: (D.Weibull(t(L, a), t(L, al)), D.Weibull(t(L, a), t(L, al))),
    }


KL_CASES = _kl_cases()


@pytest.mark.parametrize("name", list(KL_CASES))
def test_kl_divergence_matches_torch(torch, name):
    pw, qw = KL_CASES[name](tw.distributions, tw)
    pt, qt = KL_CASES[name](torch.distributions, torch)
    want = torch.distributions.kl_divergence(pt, qt)
    _close(tw.distributions.kl_divergence(pw, qw), want, rtol=1e-9, atol=1e-11, what=name)


def test_kl_gradients_match_torch(torch):
    def build(L, D):
        loc, scale = _lib_tensor(L, LOC, True), _lib_tensor(L, SCALE, True)
        alpha = _lib_tensor(L, [0.8, 1.5, 3.0], True)
        pairs = [(D.Gumbel(loc, scale), D.Normal(loc * 0.5, scale + 1)),
                 (D.Pareto(scale, alpha + 2), D.Gamma(alpha, scale)),
                 (D.ContinuousBernoulli(logits=loc), D.Normal(loc, scale))]
        total = sum(D.kl_divergence(p, q).sum() for p, q in pairs)
        total.backward()
        return loc.grad, scale.grad, alpha.grad

    for gw, gt in zip(build(tw, tw.distributions), build(torch, torch.distributions)):
        _close(gw, gt, rtol=1e-9, atol=1e-11)


# -- transforms and the constraint registries ----------------------------------------------------------------------

def test_structured_transforms_match_torch(torch):
    """CorrCholeskyTransform, CatTransform and StackTransform: forward, inverse, log-det, shapes, domains."""
    x6 = np.array([[0.3, -0.5, 0.8, 1.2, -2.0, 0.1], [0.0, 0.4, -0.4, 0.9, 0.2, -0.7]])
    x = np.array([[0.3, -0.5, 0.8, 1.2], [0.1, 0.4, -0.4, 0.9], [-1.0, 0.2, 0.5, 0.0]])

    def build(L, T, C):
        return {
            "corr": T.CorrCholeskyTransform(),
            "cat": T.CatTransform([T.ExpTransform(), T.identity_transform, T.SigmoidTransform()], dim=1,
                                  lengths=[2, 1, 1]),
            "cat_batch": T.CatTransform([T.ExpTransform(), T.AffineTransform(1.0, 2.0)], dim=0, lengths=[1, 2]),
            "cat_event": T.CatTransform([T.IndependentTransform(T.ExpTransform(), 1),
                                         T.IndependentTransform(T.SigmoidTransform(), 1)], dim=-1, lengths=[3, 1]),
            "stack": T.StackTransform([T.ExpTransform(), T.TanhTransform(), T.SoftplusTransform(),
                                       T.identity_transform], dim=-1),
        }

    w = build(tw, tw.distributions.transforms, tw.distributions.constraints)
    t = build(torch, torch.distributions.transforms, torch.distributions.constraints)
    for name in t:
        xin = x6 if name == "corr" else x
        tw_t, th_t = w[name], t[name]
        yw, yt = tw_t(_lib_tensor(tw, xin)), th_t(_lib_tensor(torch, xin))
        _close(yw, yt, rtol=1e-12, atol=1e-14, what=f"{name} forward")
        _close(tw_t.inv(yw), th_t.inv(yt), rtol=1e-9, atol=1e-12, what=f"{name} inverse")
        if th_t.bijective:
            np.testing.assert_allclose(tw_t.inv(yw).numpy(), xin, rtol=1e-9, atol=1e-12, err_msg=name)
        _close(tw_t.log_abs_det_jacobian(_lib_tensor(tw, xin), yw),
               th_t.log_abs_det_jacobian(_lib_tensor(torch, xin), yt), rtol=1e-12, atol=1e-14,
               what=f"{name} log_abs_det_jacobian")
        assert tw_t.bijective == th_t.bijective, name
        assert tw_t.domain.event_dim == th_t.domain.event_dim and tw_t.codomain.event_dim == th_t.codomain.event_dim
        np.testing.assert_array_equal(tw_t.codomain.check(yw).numpy(), th_t.codomain.check(yt).numpy(), err_msg=name)
        shape = tuple(yt.shape)
        assert tuple(tw_t.forward_shape(xin.shape)) == tuple(th_t.forward_shape(xin.shape)) == shape
        assert tuple(tw_t.inverse_shape(shape)) == tuple(th_t.inverse_shape(shape))
        cached = tw_t.with_cache()
        xc = _lib_tensor(tw, xin)
        assert cached.inv(cached(xc)) is xc
    assert tw.distributions.constraints.corr_cholesky.check(w["corr"](tw.tensor(x6))).all()
    with pytest.raises(ValueError, match="flattened lower-diagonal"):
        w["corr"].forward_shape((5,))
    with pytest.raises(AssertionError, match="must equal"):
        w["cat"](tw.zeros(3, 5, dtype=tw.float64))


def _registry_constraints(C, L):
    return {
        "real": C.real, "positive": C.positive, "nonnegative": C.nonnegative, "greater_than": C.greater_than(1.5),
        "greater_than_eq": C.greater_than_eq(-2.0), "less_than": C.less_than(-1.0), "unit_interval": C.unit_interval,
        "interval": C.interval(-2.0, 3.0), "half_open_interval": C.half_open_interval(0.5, 1.5),
        "interval_tensor": C.interval(L.tensor([0.0, 1.0, 2.0, -1.0], dtype=L.float64), 5.0),
        "simplex": C.simplex, "real_vector": C.real_vector, "independent": C.independent(C.positive, 1),
        "corr_cholesky": C.corr_cholesky, "lower_cholesky": C.lower_cholesky,
        "positive_definite": C.positive_definite, "positive_semidefinite": C.positive_semidefinite,
        "cat": C.cat([C.positive, C.real, C.unit_interval], -1, [2, 1, 1]),
        "stack": C.stack([C.positive, C.unit_interval, C.real, C.less_than(2.0)], -1),
    }


def _describe(t) -> str:
    """A transform's class names, its parts' too (a ComposeTransform, a Cat or Stack, an IndependentTransform)."""
    parts = getattr(t, "parts", None) or getattr(t, "transforms", None)
    inner = getattr(t, "base_transform", None)
    if parts:
        return f"{type(t).__name__}[{', '.join(_describe(p) for p in parts)}]"
    if inner is not None:
        return f"{type(t).__name__}[{_describe(inner)}]"
    return type(t).__name__


def test_biject_to_and_transform_to_match_torch(torch):
    """The same transform for each constraint (by class), the same values, a value in the constraint, the inverse
    and the log-det; NotImplementedError where torch has no entry; ``register`` extends a registry."""
    vec = np.array([[0.3, -0.5, 0.8, 1.2], [0.1, 0.4, -0.4, 0.9], [-1.0, 0.2, 0.5, 0.0]])
    mat = np.array([[0.3, -0.5, 0.8], [1.2, 0.1, 0.4], [-0.4, 0.9, -1.0]])
    cw = _registry_constraints(tw.distributions.constraints, tw)
    ct = _registry_constraints(torch.distributions.constraints, torch)
    for registry in ("biject_to", "transform_to"):
        rw, rt = getattr(tw.distributions, registry), getattr(torch.distributions, registry)
        for name in ct:
            try:
                tt = rt(ct[name])
            except NotImplementedError:
                with pytest.raises(NotImplementedError, match="Cannot transform"):
                    rw(cw[name])
                continue
            tr = rw(cw[name])
            assert _describe(tr) == _describe(tt), (registry, name)
            x = mat if name in ("lower_cholesky", "positive_definite", "positive_semidefinite") else vec
            x = x[:, :3].reshape(-1)[:3] if name == "corr_cholesky" else x
            xw, xt = _lib_tensor(tw, x), _lib_tensor(torch, x)
            yw, yt = tr(xw), tt(xt)
            what = f"{registry}({name})"
            _close(yw, yt, rtol=1e-12, atol=1e-14, what=what)
            assert bool(cw[name].check(yw).all()), what
            if tt.bijective:
                np.testing.assert_allclose(tr.inv(yw).numpy(), x, rtol=1e-9, atol=1e-12, err_msg=what)
                _close(tr.log_abs_det_jacobian(xw, yw), tt.log_abs_det_jacobian(xt, yt), rtol=1e-12, atol=1e-14,
                       what=what)
    C = tw.distributions.constraints
    registry = tw.distributions.constraint_registry.ConstraintRegistry()
    with pytest.raises(NotImplementedError, match="Cannot transform _GreaterThan constraints"):
        registry(C.positive)

    @registry.register(C.greater_than)
    def _softplus(constraint):
        return tw.distributions.transforms.SoftplusTransform()

    assert isinstance(registry(C.positive), tw.distributions.transforms.SoftplusTransform)
    with pytest.raises(TypeError):
        registry.register(3, _softplus)


# -- samples: the distribution of 100k draws, and the pathwise gradients of rsample --------------------------------

N = 100_000

#: name -> the distribution (``D``: a ``distributions`` module, ``L``: its library), for the two-sample comparisons
SAMPLED = {
    "StudentT": lambda D, L: D.StudentT(L.tensor([0.8, 3.0, 12.0]), L.tensor([0.0, 1.0, -2.0]), 2.0),
    "Cauchy": lambda D, L: D.Cauchy(L.tensor([0.0, 3.0]), L.tensor([1.0, 0.1])),
    "HalfCauchy": lambda D, L: D.HalfCauchy(L.tensor([1.0, 4.0])),
    "HalfNormal": lambda D, L: D.HalfNormal(L.tensor([1.0, 0.3])),
    "Gumbel": lambda D, L: D.Gumbel(L.tensor([0.0, 5.0]), L.tensor([1.0, 0.5])),
    "Geometric": lambda D, L: D.Geometric(L.tensor([0.05, 0.5, 0.9, 1.0])),
    "Multinomial": lambda D, L: D.Multinomial(7, L.tensor([0.2, 0.5, 0.3])),
    "NegativeBinomial": lambda D, L: D.NegativeBinomial(L.tensor([0.5, 3.0, 40.0]), L.tensor([0.5, 0.2, 0.7])),
    "Weibull": lambda D, L: D.Weibull(L.tensor([1.0, 2.0]), L.tensor([0.5, 3.0])),
    "Pareto": lambda D, L: D.Pareto(L.tensor([1.0, 2.0]), L.tensor([1.5, 5.0])),
    "GeneralizedPareto": lambda D, L: D.GeneralizedPareto(L.tensor([0.0, 1.0, -1.0]), L.tensor([1.0, 2.0, 0.5]),
                                                          L.tensor([-0.4, 0.0, 0.3])),
    "MixtureSameFamily": lambda D, L: D.MixtureSameFamily(D.Categorical(L.tensor([0.3, 0.7])),
                                                          D.Normal(L.tensor([-2.0, 2.0]), L.tensor([0.5, 1.0]))),
    "LowRankMVN": lambda D, L: D.LowRankMultivariateNormal(L.tensor([1.0, -1.0, 0.5]),
                                                           L.tensor([[1.0, 0.2], [0.3, -0.5], [0.0, 0.7]]),
                                                           L.tensor([0.5, 1.0, 2.0])),
    "RelaxedBernoulli": lambda D, L: D.RelaxedBernoulli(L.tensor(0.5), L.tensor([0.2, 0.7])),
    "RelaxedOneHotCategorical": lambda D, L: D.RelaxedOneHotCategorical(L.tensor(0.8), L.tensor([0.2, 0.5, 0.3])),
    "ContinuousBernoulli": lambda D, L: D.ContinuousBernoulli(L.tensor([0.1, 0.5, 0.8])),
    "FisherSnedecor": lambda D, L: D.FisherSnedecor(L.tensor([2.0, 10.0]), L.tensor([3.0, 20.0])),
    "InverseGamma": lambda D, L: D.InverseGamma(L.tensor([0.5, 3.0]), L.tensor([1.0, 2.0])),
    "Kumaraswamy": lambda D, L: D.Kumaraswamy(L.tensor([0.5, 3.0]), L.tensor([2.0, 0.7])),
    "LogisticNormal": lambda D, L: D.LogisticNormal(L.tensor([0.0, 1.0, -1.0]), L.tensor([0.5, 1.0, 2.0])),
    "VonMises": lambda D, L: D.VonMises(L.tensor([0.0, 3.0, -1.0]), L.tensor([0.3, 4.0, 50.0])),
    "LKJCholesky": lambda D, L: D.LKJCholesky(3, L.tensor([0.5, 3.0])),
    "Wishart": lambda D, L: D.Wishart(L.tensor([3.5, 6.0], dtype=L.float64),
                                      L.tensor([[1.0, 0.3, 0.0], [0.3, 2.0, 0.5], [0.0, 0.5, 1.0]], dtype=L.float64)),
}


def _ks_two_sample(a: np.ndarray, b: np.ndarray) -> float:
    """The largest distance between the empirical cdfs of ``a`` and ``b`` (each 1-D)."""
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    return float(np.abs(np.searchsorted(a, grid, "right") / len(a) - np.searchsorted(b, grid, "right") / len(b)).max())


def _ks_one_sample(a: np.ndarray, cdf) -> float:
    """The largest distance between the empirical cdf of ``a`` (1-D) and ``cdf`` (a function of numpy arrays)."""
    a = np.sort(a)
    f = cdf(a)
    ranks = np.arange(1, len(a) + 1) / len(a)
    return float(max(np.abs(ranks - f).max(), np.abs(ranks - 1 / len(a) - f).max()))


def _von_mises_cdf(loc: float, conc: float):
    """The cdf on [-pi, pi) of a von Mises distribution, by the trapezoid rule on a fine grid."""
    grid = np.linspace(-math.pi, math.pi, 200_001)
    density = np.exp(conc * (np.cos(grid - loc) - 1))
    cum = np.concatenate([[0.0], np.cumsum((density[1:] + density[:-1]) / 2)])
    return lambda x: np.interp(x, grid, cum / cum[-1])


#: the level of the Kolmogorov-Smirnov bounds: a distance above ``sqrt(-ln(level / 2) / 2) sqrt(2 / n)`` between two
#: samples of ``n`` of one distribution (``... sqrt(1 / n)`` between a sample and its cdf) has a probability under it
KS_LEVEL = 1e-9
#: draws of the matrix distributions (each a few fetches more per draw)
N_MATRIX = 20_000


@pytest.mark.parametrize("name", list(SAMPLED))
def test_samples_match_torchs_distribution(torch, name):
    """Every marginal of 100k draws (20k of a matrix) against as many of torch's (two-sample Kolmogorov-Smirnov at
    1e-9; VonMises': against its cdf), each draw in the support, and the sample mean within 6 standard errors of the
    distribution's mean where its variance is finite."""
    n = N_MATRIX if name in ("LKJCholesky", "Wishart") else N
    tw.manual_seed(1234)
    torch.manual_seed(1234)
    dw = SAMPLED[name](tw.distributions, tw)
    dt = SAMPLED[name](torch.distributions, torch)
    sample = dw.sample((n,)).numpy()
    assert bool(dt.support.check(torch.tensor(sample)).all()), f"{name}: a draw outside the support"
    sw = sample.astype(F64)
    assert sw.shape == (n,) + tuple(dt.batch_shape) + tuple(dt.event_shape) and np.isfinite(sw).all(), name
    flat_w = sw.reshape(n, -1)
    c = math.sqrt(-math.log(KS_LEVEL / 2) / 2)
    if name == "VonMises":  # (torch's sampler takes seconds: against the cdf instead, one sample)
        loc, conc = dt.loc.numpy().astype(F64), dt.concentration.numpy().astype(F64)
        for j in range(flat_w.shape[1]):
            d = _ks_one_sample(flat_w[:, j], _von_mises_cdf(loc[j], conc[j]))
            assert d < c / math.sqrt(n), f"{name}[{j}]: Kolmogorov-Smirnov distance {d:.4f}"
        return
    flat_t = _torch_sample(dt, (n,)).numpy().astype(F64).reshape(n, -1)
    for j in range(flat_w.shape[1]):
        d = _ks_two_sample(flat_w[:, j], flat_t[:, j])
        assert d < c * math.sqrt(2 / n), f"{name}[{j}]: Kolmogorov-Smirnov distance {d:.4f}"
    if name in ("VonMises", "RelaxedBernoulli", "RelaxedOneHotCategorical", "LogisticNormal", "LKJCholesky"):
        return  # (a circular mean, or no mean)
    mean, var = dt.mean.numpy().reshape(-1), dt.variance.numpy().reshape(-1)
    finite = np.isfinite(var) & np.isfinite(mean)
    se = np.sqrt(var[finite] / n)
    got = flat_w.mean(0)[finite]
    assert np.all(np.abs(got - mean[finite]) <= 6 * se + 1e-12), f"{name}: mean {got} vs {mean[finite]}"
    if name in ("Geometric", "Multinomial", "NegativeBinomial"):
        assert (sw == np.round(sw)).all()


#: name -> (the parameters (numpy), the distribution built from them and the fixed arguments); each rsample's draws
#: are differentiated per draw (the parameters repeated per draw), against central differences of draws of the same
#: seed, so of the same noise
RSAMPLED = {
    "Cauchy": ({"loc": [0.0, 3.0], "scale": [1.0, 0.1]}, lambda D, L, p: D.Cauchy(p["loc"], p["scale"])),
    "HalfCauchy": ({"scale": [1.0, 4.0]}, lambda D, L, p: D.HalfCauchy(p["scale"])),
    "HalfNormal": ({"scale": [1.0, 0.3]}, lambda D, L, p: D.HalfNormal(p["scale"])),
    "Gumbel": ({"loc": [0.0, 5.0], "scale": [1.0, 0.5]}, lambda D, L, p: D.Gumbel(p["loc"], p["scale"])),
    "Weibull": ({"scale": [1.0, 2.0], "concentration": [0.5, 3.0]},
                lambda D, L, p: D.Weibull(p["scale"], p["concentration"])),
    "Pareto": ({"scale": [1.0, 2.0], "alpha": [1.5, 5.0]}, lambda D, L, p: D.Pareto(p["scale"], p["alpha"])),
    "GeneralizedPareto": ({"loc": [0.0, 1.0, -1.0], "scale": [1.0, 2.0, 0.5], "concentration": [-0.4, 0.2, 0.3]},
                          lambda D, L, p: D.GeneralizedPareto(p["loc"], p["scale"], p["concentration"])),
    "LowRankMVN": ({"loc": [1.0, -1.0, 0.5], "cov_factor": [[1.0, 0.2], [0.3, -0.5], [0.0, 0.7]],
                    "cov_diag": [0.5, 1.0, 2.0]},
                   lambda D, L, p: D.LowRankMultivariateNormal(p["loc"], p["cov_factor"], p["cov_diag"])),
    "RelaxedBernoulli": ({"logits": [-1.0, 0.5]},
                         lambda D, L, p: D.RelaxedBernoulli(L.tensor(0.5, dtype=L.float64), logits=p["logits"])),
    "RelaxedOneHotCategorical": ({"logits": [0.2, -0.5, 0.3]},
                                 lambda D, L, p: D.RelaxedOneHotCategorical(L.tensor(0.8, dtype=L.float64),
                                                                            logits=p["logits"])),
    "ContinuousBernoulli": ({"probs": [0.1, 0.3, 0.8]}, lambda D, L, p: D.ContinuousBernoulli(p["probs"])),
    "Kumaraswamy": ({"concentration1": [0.5, 3.0], "concentration0": [2.0, 0.7]},
                    lambda D, L, p: D.Kumaraswamy(p["concentration1"], p["concentration0"])),
    "LogisticNormal": ({"loc": [0.0, 1.0, -1.0], "scale": [0.5, 1.0, 2.0]},
                       lambda D, L, p: D.LogisticNormal(p["loc"], p["scale"])),
    # (through Gamma draws: only the parameters that do not shape them; the others' below)
    "StudentT(loc, scale)": ({"loc": [0.0, 1.0, -2.0], "scale": [2.0, 0.5, 1.0]},
                             lambda D, L, p: D.StudentT(L.tensor([0.8, 3.0, 12.0], dtype=L.float64), p["loc"],
                                                        p["scale"])),
    "InverseGamma(rate)": ({"rate": [1.0, 2.0]},
                           lambda D, L, p: D.InverseGamma(L.tensor([0.5, 3.0], dtype=L.float64), p["rate"])),
    "Wishart(scale_tril)": ({"scale_tril": TRIL},
                            lambda D, L, p: D.Wishart(L.tensor(4.5, dtype=L.float64), scale_tril=p["scale_tril"])),
}

#: draws per gradient check
NG = 1000


def _per_draw(raw: dict, n: int) -> dict:
    """Each parameter (numpy) repeated for ``n`` draws, in float64."""
    return {k: np.broadcast_to(np.asarray(v, F64), (n,) + np.shape(v)).copy() for k, v in raw.items()}


def _rsample_at(build, params: dict, seed: int):
    """The draws of the distribution of ``params`` (tensorwire tensors) under ``seed``."""
    tw.manual_seed(seed)
    return build(tw.distributions, tw, params).rsample()


@pytest.mark.parametrize("name", list(RSAMPLED))
def test_rsample_gradients_match_finite_differences(name):
    """Per draw, the derivative of ``<x, w>`` (``w`` fixed weights) along a direction of each parameter: autograd's
    against the central difference of two draws of the same seed (so of the same noise)."""
    raw, build = RSAMPLED[name]
    rng = np.random.default_rng(0)
    base = _per_draw(raw, NG)
    leaves = {k: tw.tensor(v, requires_grad=True) for k, v in base.items()}
    x = _rsample_at(build, leaves, seed=21)
    weights = rng.uniform(-1, 1, tuple(x.shape))
    (x * tw.tensor(weights)).sum().backward()
    for k, v in base.items():
        direction = rng.uniform(-1, 1, v.shape) * np.abs(v)
        h = 1e-6
        ad = (leaves[k].grad.numpy() * direction).reshape(NG, -1).sum(-1)

        def at(step, k=k, direction=direction):
            moved = {j: tw.tensor(u + step * direction if j == k else u) for j, u in base.items()}
            return (_rsample_at(build, moved, seed=21).numpy() * weights).reshape(NG, -1).sum(-1)

        fd = (at(h) - at(-h)) / (2 * h)
        ok = np.isclose(ad, fd, rtol=2e-5, atol=1e-6 * (1 + np.abs(fd).max()))
        assert ok.all(), (f"{name} d/d{k}: {np.count_nonzero(~ok)} of {NG} draws differ, e.g. autograd "
                          f"{ad[~ok][:3]} vs finite differences {fd[~ok][:3]}")


#: draws per check of a gradient through Gamma draws (few: the backward of a Gamma draw is a fragment of ~1,450
#: steps, which the suite's workers compile once it is large, TENSORWIRE_CPU_COMPILE_MIN_ELEMENTS)
NGAMMA = 200
GAMMA_SEED = 5


def _gamma_grad(torch, alpha, g):
    """torch's derivative of a standard Gamma draw ``g`` in its concentration ``alpha`` (numpy arrays)."""
    return torch._standard_gamma_grad(torch.tensor(np.asarray(alpha, F64)), torch.tensor(np.asarray(g, F64))).numpy()


def _student_t_expected(torch, p, x):
    """dx/d(df, loc, scale) of each draw: ``x = loc + scale X sqrt(df / Z)``, X the first (normal) draw, replayed,
    and ``Z = 2 G`` a Chi2(df) draw (G ~ Gamma(df / 2))."""
    tw.manual_seed(GAMMA_SEED)
    normal = tw.randn(x.shape, dtype=tw.float64).numpy()
    df, loc, scale = p["df"], p["loc"], p["scale"]
    z = df * (scale * normal / (x - loc)) ** 2
    c = scale * normal / (2 * np.sqrt(df / z))
    via_gamma = -c * df / z ** 2 * _gamma_grad(torch, df / 2, z / 2)  # (d(2 G)/d df = dG/d alpha)
    zero = np.zeros_like(x)
    return {"df": (c / z + via_gamma, via_gamma), "loc": (np.ones_like(x), zero), "scale": ((x - loc) / scale, zero)}


def _fisher_snedecor_expected(torch, p, x):
    """``x = (G1 / df1) / (G2 / df2)``, the two Gamma draws replayed (the first two draws of the seed)."""
    df1, df2 = p["df1"], p["df2"]
    tw.manual_seed(GAMMA_SEED)
    D = tw.distributions
    x1 = D.Gamma(tw.tensor(df1 * 0.5), tw.tensor(df1)).rsample().numpy()
    x2 = D.Gamma(tw.tensor(df2 * 0.5), tw.tensor(df2)).rsample().numpy()
    np.testing.assert_allclose(x1 / x2, x, rtol=1e-12)  # (the replay is the draw)
    g1, g2 = x1 * df1, x2 * df2
    via1 = 0.5 * _gamma_grad(torch, df1 / 2, g1) / df1 / x2
    via2 = -x1 * 0.5 * df2 * _gamma_grad(torch, df2 / 2, g2) / g2 ** 2
    return {"df1": (via1 - g1 / df1 ** 2 / x2, via1), "df2": (x1 / g2 + via2, via2)}


def _inverse_gamma_expected(torch, p, x):
    """``x = rate / G``."""
    g = p["rate"] / x
    via_gamma = -x / g * _gamma_grad(torch, p["concentration"], g)
    return {"concentration": (via_gamma, via_gamma), "rate": (1 / g, np.zeros_like(x))}


def _wishart_expected(torch, p, x):
    """d sum(X)/d df of ``X = L A A^T L^T``, A's diagonal the square roots of Chi2(df - i) draws (replayed: the
    first draw of the seed), below it the normal draws that follow."""
    df, tril = p["df"], TRIL
    n, d = len(df), tril.shape[-1]
    tw.manual_seed(GAMMA_SEED)
    dfs = df[:, None] - np.arange(d)
    chi2 = tw.distributions.Chi2(tw.tensor(dfs)).rsample().numpy()
    below = tw.randn((n, d * (d - 1) // 2), dtype=tw.float64).numpy()
    a = np.zeros((n, d, d))
    a[:, np.arange(d), np.arange(d)] = np.sqrt(chi2)
    a[:, np.tril_indices(d, -1)[0], np.tril_indices(d, -1)[1]] = below
    np.testing.assert_allclose(tril @ a @ a.transpose(0, 2, 1) @ tril.T, x, rtol=1e-10)  # (the replay is the draw)
    da = np.zeros_like(a)
    da[:, np.arange(d), np.arange(d)] = _gamma_grad(torch, dfs / 2, chi2 / 2) / (2 * np.sqrt(chi2))
    dx = (tril @ (da @ a.transpose(0, 2, 1) + a @ da.transpose(0, 2, 1)) @ tril.T).sum((-2, -1))
    return {"df": (dx, dx)}


#: name -> (the parameters (numpy, each repeated per draw and differentiated), the distribution, each draw's
#: derivatives of the sum of its entries from torch's derivative of its Gamma draws, with the part of each that goes
#: through them): the distributions whose draws go through Gamma's rejection
#: sampler. A Gamma draw's gradient in its concentration is the implicit one (Figurnov et al., 2018: the draw held
#: at its quantile), not the derivative of the sampler's own transformation of its noise, so finite differences of
#: one seed's draws cannot check it: the draw's Gamma variates are recovered (from the draw, or by replaying the seed)
#: and the chain rule applied to torch's ``_standard_gamma_grad`` of them
GAMMA_DRAWS = {
    "StudentT": ({"df": [0.8, 5.0, 15.0], "loc": [0.0, 1.0, -2.0], "scale": [2.0, 0.5, 1.0]},
                 lambda D, p: D.StudentT(p["df"], p["loc"], p["scale"]), _student_t_expected),
    "FisherSnedecor": ({"df1": [2.0, 10.0], "df2": [6.0, 20.0]}, lambda D, p: D.FisherSnedecor(p["df1"], p["df2"]),
                       _fisher_snedecor_expected),
    "InverseGamma": ({"concentration": [0.5, 3.0], "rate": [1.0, 2.0]},
                     lambda D, p: D.InverseGamma(p["concentration"], p["rate"]), _inverse_gamma_expected),
    "Wishart": ({"df": 4.5}, lambda D, p: D.Wishart(p["df"], scale_tril=tw.tensor(TRIL)), _wishart_expected),
}


@pytest.mark.parametrize("name", list(GAMMA_DRAWS))
def test_rsample_gradients_through_gamma_draws_match_torchs(torch, name):
    """Each draw's gradient against torch's for the same Gamma variates: to 1e-9 but for the part through torch's
    ``_standard_gamma_grad``, an approximation (of up to 7e-4 relative error), which is allowed 2e-3 of itself."""
    raw, build, expected = GAMMA_DRAWS[name]
    base = _per_draw(raw, NGAMMA)
    leaves = {k: tw.tensor(v, requires_grad=True) for k, v in base.items()}
    tw.manual_seed(GAMMA_SEED)
    x = build(tw.distributions, leaves).rsample()
    x.sum().backward()
    want = expected(torch, base, x.detach().numpy())
    for k, leaf in leaves.items():
        got = leaf.grad.numpy()
        value, via_gamma = want[k]
        tol = 1e-9 * (1 + np.abs(value)) + 2e-3 * np.abs(via_gamma)
        bad = np.abs(got - value) > tol
        assert not bad.any(), f"{name} d/d{k}: {got[bad][:3]} vs torch's {value[bad][:3]} ({np.count_nonzero(bad)})"


def test_samples_are_reproducible_and_sample_has_no_gradient():
    D = tw.distributions
    makers = [lambda: D.StudentT(tw.tensor([3.0, 0.5])).sample((4,)), lambda: D.Geometric(tw.tensor(0.3)).sample((5,)),
              lambda: D.VonMises(tw.tensor([0.0]), tw.tensor([2.0])).sample((5,)),
              lambda: D.Multinomial(4, tw.tensor([0.5, 0.5])).sample((3,))]
    for make in makers:
        tw.manual_seed(99)
        a = make().numpy()
        tw.manual_seed(99)
        np.testing.assert_array_equal(make().numpy(), a)
    scale = tw.tensor([1.0, 2.0], requires_grad=True)
    assert not D.Gumbel(0.0, scale).sample().requires_grad and D.Gumbel(0.0, scale).rsample().requires_grad
    assert not D.VonMises(0.0, scale).has_rsample
    with pytest.raises(NotImplementedError):
        D.Geometric(tw.tensor([0.5])).rsample()
    s = D.LKJCholesky(4, tw.tensor([0.5, 2.0])).sample((50,))
    assert tuple(s.shape) == (50, 2, 4, 4) and bool(D.constraints.corr_cholesky.check(s).all())
