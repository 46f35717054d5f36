"""``tw.distributions`` (torch.distributions) against torch 2.13: log_prob, entropy, the moments and mode, cdf/icdf,
enumerate_support, shapes (batch, event, sample, expand), parameter broadcasting, the validation errors, the
gradients of log_prob, entropy and kl_divergence in the parameters, kl_divergence's registry; and what cannot equal
torch's numbers (the samples: another generator) by the distribution: sample means and variances of a few thousand
draws within their standard errors, reproducibility under ``tw.manual_seed``, and the pathwise gradients of rsample.

torch is the reference (the ``torch`` fixture skips without it)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensorwire as tw

from ._torch_validating import validating_torch

pytestmark = pytest.mark.usefixtures("session")


@pytest.fixture(scope="module")
def torch():
    yield from validating_torch()

F32 = np.float32




def _lib_tensor(lib, a, grad: bool = False):
    """``a`` (numpy) as a tensor of ``lib`` (torch or tensorwire), a leaf that requires grad if asked."""
    t = lib.tensor(np.asarray(a))
    return t.requires_grad_() if grad else t


def _close(got, want, rtol=2e-5, atol=1e-5, what="") -> None:
    """A tensorwire result equals torch's: shape, dtype and values (NaN where torch's is NaN)."""
    w = want.detach().numpy()
    assert tuple(got.shape) == tuple(w.shape), f"{what}: shape {tuple(got.shape)} != torch's {tuple(w.shape)}"
    assert got.dtype.name == str(want.dtype).removeprefix("torch."), f"{what}: dtype {got.dtype} != {want.dtype}"
    np.testing.assert_allclose(got.detach().numpy(), w, rtol=rtol, atol=atol, err_msg=what)


LOC = np.array([0.3, -1.2, 2.0], F32)
SCALE = np.array([0.7, 1.5, 0.2], F32)
COV = np.array([[2.0, 0.3, 0.1], [0.3, 1.0, -0.2], [0.1, -0.2, 0.5]], F32)
TRIL = np.linalg.cholesky(COV).astype(F32)
PROBS = np.array([[0.2, 0.3, 0.5], [0.6, 0.1, 0.3]], F32)
LOGITS = np.array([[0.5, -1.0, 2.0, 0.0], [1.5, 0.2, -0.3, 0.7]], F32)

#: name -> (parameters (numpy), the distribution built from them by a ``distributions`` module, a value in the
#: support, quantiles for icdf (or None)); every parameter here is differentiable
SPECS = {
    "Normal": ({"loc": LOC, "scale": SCALE}, lambda D, L, p: D.Normal(p["loc"], p["scale"]),
               np.array([0.1, 0.5, 2.4], F32), np.array([0.1, 0.5, 0.97], F32)),
    "Bernoulli_probs": ({"probs": np.array([0.2, 0.5, 0.9], F32)}, lambda D, L, p: D.Bernoulli(probs=p["probs"]),
                        np.array([0.0, 1.0, 1.0], F32), None),
    "Bernoulli_logits": ({"logits": np.array([[0.3, -2.0], [4.0, 0.0]], F32)},
                         lambda D, L, p: D.Bernoulli(logits=p["logits"]), np.array([1.0, 0.0], F32), None),
    "Categorical_probs": ({"probs": PROBS}, lambda D, L, p: D.Categorical(probs=p["probs"]),
                          np.array([[2, 0], [1, 1]], np.int64), None),
    "Categorical_logits": ({"logits": LOGITS}, lambda D, L, p: D.Categorical(logits=p["logits"]),
                           np.array([3, 0], np.int64), None),
    "OneHotCategorical": ({"logits": LOGITS}, lambda D, L, p: D.OneHotCategorical(logits=p["logits"]),
                          np.eye(4, dtype=F32)[[1, 3]], None),
    "Uniform": ({"low": np.array([-1.0, 0.5], F32), "high": np.array([2.0, 0.75], F32)},
                lambda D, L, p: D.Uniform(p["low"], p["high"]), np.array([0.0, 0.6], F32), np.array([0.2, 0.9], F32)),
    "Exponential": ({"rate": np.array([0.5, 2.0, 7.0], F32)}, lambda D, L, p: D.Exponential(p["rate"]),
                    np.array([0.0, 1.3, 0.05], F32), np.array([0.1, 0.5, 0.99], F32)),
    "Laplace": ({"loc": LOC, "scale": SCALE}, lambda D, L, p: D.Laplace(p["loc"], p["scale"]),
                np.array([0.1, -3.0, 2.4], F32), np.array([0.1, 0.5, 0.97], F32)),
    "LogNormal": ({"loc": LOC, "scale": SCALE}, lambda D, L, p: D.LogNormal(p["loc"], p["scale"]),
                  np.array([0.5, 0.2, 9.0], F32), np.array([0.1, 0.5, 0.97], F32)),
    "MVN_cov": ({"loc": np.array([[0.0, 1.0, -1.0], [0.5, 0.5, 0.5]], F32), "covariance_matrix": COV},
                lambda D, L, p: D.MultivariateNormal(p["loc"], covariance_matrix=p["covariance_matrix"]),
                np.array([[0.3, 0.2, -0.4], [1.0, -1.0, 2.0]], F32), None),
    "MVN_tril": ({"loc": np.array([0.0, 1.0, -1.0], F32), "scale_tril": TRIL},
                 lambda D, L, p: D.MultivariateNormal(p["loc"], scale_tril=p["scale_tril"]),
                 np.array([0.3, 0.2, -0.4], F32), None),
    "MVN_precision": ({"loc": np.array([0.0, 1.0, -1.0], F32),
                       "precision_matrix": np.linalg.inv(COV).astype(F32)},
                      lambda D, L, p: D.MultivariateNormal(p["loc"], precision_matrix=p["precision_matrix"]),
                      np.array([0.3, 0.2, -0.4], F32), None),
    "Independent": ({"loc": np.stack([LOC, LOC + 1]), "scale": np.stack([SCALE, SCALE * 2])},
                    lambda D, L, p: D.Independent(D.Normal(p["loc"], p["scale"]), 1),
                    np.array([0.1, 0.5, 2.4], F32), None),
    "Poisson": ({"rate": np.array([0.5, 3.0, 25.0], F32)}, lambda D, L, p: D.Poisson(p["rate"]),
                np.array([0.0, 2.0, 31.0], F32), None),
    "Binomial": ({"probs": np.array([0.3, 0.6, 0.0], F32)},
                 lambda D, L, p: D.Binomial(L.tensor([10.0, 20.0, 4.0]), probs=p["probs"]),
                 np.array([3.0, 20.0, 0.0], F32), None),
    "Binomial_logits": ({"logits": np.array([0.3, -1.6], F32)}, lambda D, L, p: D.Binomial(8, logits=p["logits"]),
                        np.array([3.0, 8.0], F32), None),
    "Gamma": ({"concentration": np.array([0.5, 2.0, 9.0], F32), "rate": np.array([1.0, 0.5, 3.0], F32)},
              lambda D, L, p: D.Gamma(p["concentration"], p["rate"]), np.array([0.2, 4.0, 2.5], F32), None),
    "Chi2": ({"df": np.array([1.0, 3.0, 10.0], F32)}, lambda D, L, p: D.Chi2(p["df"]),
             np.array([0.4, 2.0, 12.0], F32), None),
    "Beta": ({"concentration1": np.array([0.5, 2.0, 5.0], F32), "concentration0": np.array([0.8, 2.0, 1.5], F32)},
             lambda D, L, p: D.Beta(p["concentration1"], p["concentration0"]), np.array([0.3, 0.5, 0.9], F32), None),
    "Dirichlet": ({"concentration": np.array([[0.5, 2.0, 3.0], [1.0, 1.0, 1.0]], F32)},
                  lambda D, L, p: D.Dirichlet(p["concentration"]), np.array([0.2, 0.3, 0.5], F32), None),
}


def _pair(torch, name: str, grad: bool = False):
    """(tensorwire distribution, torch distribution, their parameters (tw, torch), the value in each library)."""
    params, build, value, _ = SPECS[name]
    pw = {k: _lib_tensor(tw, v, grad) for k, v in params.items()}
    pt = {k: _lib_tensor(torch, v, grad) for k, v in params.items()}
    return (build(tw.distributions, tw, pw), build(torch.distributions, torch, pt), pw, pt, _lib_tensor(tw, value),
            _lib_tensor(torch, value))


PROPERTIES = ("mean", "mode", "variance", "stddev")


@pytest.mark.parametrize("name", list(SPECS))
def test_values_match_torch(torch, name):
    """Shapes, log_prob, entropy, moments, mode, cdf/icdf and enumerate_support: torch's values, or the same
    NotImplementedError where torch has none."""
    dw, dt, _, _, vw, vt = _pair(torch, name)
    assert type(dw).__name__ == type(dt).__name__
    assert tuple(dw.batch_shape) == tuple(dt.batch_shape) and tuple(dw.event_shape) == tuple(dt.event_shape)
    assert isinstance(dw.batch_shape, tw.Size) and isinstance(dw.event_shape, tw.Size)
    assert dw.has_rsample == dt.has_rsample and dw.has_enumerate_support == dt.has_enumerate_support
    _close(dw.log_prob(vw), dt.log_prob(vt), rtol=5e-5, atol=2e-5, what=f"{name}.log_prob")
    calls = {p: (lambda d, p=p: getattr(d, p)) for p in PROPERTIES}
    calls["entropy"] = lambda d: d.entropy()
    calls["perplexity"] = lambda d: d.perplexity()
    calls["cdf"] = lambda d: d.cdf(vw if d is dw else vt)
    q = SPECS[name][3]
    if q is not None:
        calls["icdf"] = lambda d: d.icdf(_lib_tensor(tw, q) if d is dw else _lib_tensor(torch, q))
    calls["enumerate_support"] = lambda d: d.enumerate_support()
    calls["enumerate_support(expand=False)"] = lambda d: d.enumerate_support(expand=False)
    for what, call in calls.items():
        try:
            want = call(dt)
        except NotImplementedError:
            with pytest.raises(NotImplementedError):
                call(dw)
            continue
        _close(call(dw), want, rtol=5e-5, atol=2e-5, what=f"{name}.{what}")


@pytest.mark.parametrize("name", list(SPECS))
def test_sample_shapes_and_expand(torch, name):
    dw, dt, _, _, vw, vt = _pair(torch, name)
    for shape in ((), (5,), (2, 3)):
        sw = dw.sample(shape)
        st = dt.sample(shape)
        assert tuple(sw.shape) == tuple(st.shape), (name, shape)
        assert sw.dtype.name == str(st.dtype).removeprefix("torch."), (name, sw.dtype, st.dtype)
        if dt.has_rsample:
            assert tuple(dw.rsample(shape).shape) == tuple(dt.rsample(shape).shape)
    new_batch = (4,) + tuple(dt.batch_shape)
    ew, et = dw.expand(new_batch), dt.expand(new_batch)
    assert type(ew) is type(dw) and tuple(ew.batch_shape) == tuple(et.batch_shape) == new_batch
    assert tuple(ew.event_shape) == tuple(et.event_shape)
    value = et.sample().numpy()  # (torch's draw: a value of the expanded shape in the support)
    assert tuple(ew.sample().shape) == value.shape
    _close(ew.log_prob(tw.tensor(value)), et.log_prob(torch.tensor(value)), rtol=5e-5, atol=2e-5,
           what=f"{name}.expand().log_prob")


@pytest.mark.parametrize("name", [n for n in SPECS if not n.startswith(("Categorical", "OneHot"))])
def test_log_prob_and_entropy_gradients_match_torch(torch, name):
    dw, dt, pw, pt, vw, vt = _pair(torch, name, grad=True)
    lw, lt = dw.log_prob(vw).sum(), dt.log_prob(vt).sum()
    try:
        et = dt.entropy().sum()
    except NotImplementedError:
        et = None
    if et is not None:
        lw, lt = lw + 0.5 * dw.entropy().sum(), lt + 0.5 * et
    lw.backward()
    lt.backward()
    for k in pt:
        _close(pw[k].grad, pt[k].grad, rtol=2e-4, atol=2e-5, what=f"{name} d/d{k}")


@pytest.mark.parametrize("name", ["Categorical_logits", "Categorical_probs", "OneHotCategorical"])
def test_categorical_gradients_match_torch(torch, name):
    """(log_prob and entropy in the normalized parameters: their gradients through the normalization)"""
    dw, dt, pw, pt, vw, vt = _pair(torch, name, grad=True)
    (dw.log_prob(vw).sum() + dw.entropy().sum()).backward()
    (dt.log_prob(vt).sum() + dt.entropy().sum()).backward()
    for k in pt:
        _close(pw[k].grad, pt[k].grad, rtol=2e-4, atol=2e-5, what=f"{name} d/d{k}")


def test_number_parameters_broadcast_as_torch(torch):
    """Numbers take the dtype of the first tensor parameter (the default dtype when all are numbers) and broadcast
    with the tensors; batch_shape is () for numbers only."""
    Dw, Dt = tw.distributions, torch.distributions
    # (a distribution, and a value in its support)
    cases = [(lambda D, L: D.Normal(0.0, 1.0), 0.5), (lambda D, L: D.Normal(L.tensor([0.0, 1.0]), 2.0), 0.5),
             (lambda D, L: D.Normal(L.tensor([[0.5], [1.0]]), L.tensor([1.0, 2.0, 3.0])), 0.5),
             (lambda D, L: D.Normal(L.tensor([0.5], dtype=L.float64), 2), 0.5),
             (lambda D, L: D.Uniform(0.0, L.tensor([1.0, 4.0])), 0.5), (lambda D, L: D.Bernoulli(0.3), 1.0),
             (lambda D, L: D.Gamma(2.0, L.tensor([1.0, 3.0])), 0.5), (lambda D, L: D.Laplace(1, 2), 0.5),
             (lambda D, L: D.Exponential(3.0), 0.5), (lambda D, L: D.Beta(2.0, 3.0), 0.5),
             (lambda D, L: D.Binomial(L.tensor([[5.0], [10.0]]), L.tensor([0.5, 0.2])), 1.0)]
    for make, value in cases:
        dw, dt = make(Dw, tw), make(Dt, torch)
        assert tuple(dw.batch_shape) == tuple(dt.batch_shape), dt
        _close(dw.mean, dt.mean, what=repr(dt))
        _close(dw.variance, dt.variance, what=repr(dt))
        v = np.full(tuple(dt.batch_shape), value, dtype=str(dt.mean.dtype).removeprefix("torch."))
        _close(dw.log_prob(tw.tensor(v)), dt.log_prob(torch.tensor(v)), rtol=5e-5, atol=2e-5, what=repr(dt))
        assert repr(dw).split("(")[0] == repr(dt).split("(")[0]


# -- validation --------------------------------------------------------------------------------------------------

INVALID = [
    lambda D, L: D.Normal(L.tensor([0.0, 1.0]), L.tensor([1.0, -1.0])),
    lambda D, L: D.Normal(L.tensor([0.0, math.nan]), L.tensor([1.0, 1.0])),
    lambda D, L: D.Bernoulli(probs=L.tensor([0.5, 1.5])),
    lambda D, L: D.Categorical(probs=L.tensor([0.5, -0.1, 0.6])),
    lambda D, L: D.Uniform(L.tensor([1.0]), L.tensor([0.0])),
    lambda D, L: D.Exponential(L.tensor([0.0])),
    lambda D, L: D.Poisson(L.tensor([-1.0])),
    lambda D, L: D.Binomial(L.tensor([2.5]), L.tensor([0.5])),
    lambda D, L: D.Gamma(L.tensor([1.0]), L.tensor([-2.0])),
    lambda D, L: D.Dirichlet(L.tensor([1.0, 0.0])),
    lambda D, L: D.MultivariateNormal(L.zeros(2), covariance_matrix=L.tensor([[1.0, 2.0], [2.0, 1.0]])),
    lambda D, L: D.MultivariateNormal(L.zeros(2), covariance_matrix=L.tensor([[1.0, 0.5], [0.0, 1.0]])),
    lambda D, L: D.MultivariateNormal(L.zeros(2), scale_tril=L.tensor([[1.0, 0.0], [0.5, -1.0]])),
]


@pytest.mark.parametrize("case", range(len(INVALID)))
def test_invalid_parameters_raise_value_error_as_torch(torch, case):
    make = INVALID[case]
    with pytest.raises(ValueError) as want:
        make(torch.distributions, torch)
    with pytest.raises(ValueError) as got:
        make(tw.distributions, tw)
    # the same parameter named, the same constraint
    assert str(got.value).split(" (")[0] == str(want.value).split(" (")[0]
    assert "to satisfy the constraint" in str(got.value)


def test_validate_args_false_and_the_default_switch(torch):
    D = tw.distributions
    d = D.Normal(tw.tensor([0.0]), tw.tensor([-1.0]), validate_args=False)  # no error
    assert d.scale.item() == -1.0
    assert D.Distribution._validate_args is True
    D.Distribution.set_default_validate_args(False)
    try:
        D.Normal(tw.tensor([0.0]), tw.tensor([-1.0])).log_prob(tw.tensor([float("nan")]))
        D.Bernoulli(probs=tw.tensor([2.0]))
    finally:
        D.Distribution.set_default_validate_args(True)
    with pytest.raises(ValueError):
        D.Bernoulli(probs=tw.tensor([2.0]))
    with pytest.raises(ValueError):
        D.Distribution.set_default_validate_args(3)


SUPPORT = [
    ("Normal", lambda D, L: D.Normal(L.tensor([0.0]), L.tensor([1.0])), [math.nan]),
    ("Bernoulli", lambda D, L: D.Bernoulli(probs=L.tensor([0.5])), [0.5]),
    ("Categorical", lambda D, L: D.Categorical(probs=L.tensor([0.5, 0.5])), [2]),
    ("Uniform", lambda D, L: D.Uniform(L.tensor([0.0]), L.tensor([1.0])), [1.5]),
    ("Exponential", lambda D, L: D.Exponential(L.tensor([1.0])), [-0.5]),
    ("Poisson", lambda D, L: D.Poisson(L.tensor([1.0])), [1.5]),
    ("Binomial", lambda D, L: D.Binomial(3, L.tensor([0.5])), [4.0]),
    ("Gamma", lambda D, L: D.Gamma(L.tensor([1.0]), L.tensor([1.0])), [-1.0]),
    ("Beta", lambda D, L: D.Beta(L.tensor([1.0]), L.tensor([1.0])), [1.5]),
    ("LogNormal", lambda D, L: D.LogNormal(L.tensor([0.0]), L.tensor([1.0])), [-1.0]),
    ("OneHot", lambda D, L: D.OneHotCategorical(probs=L.tensor([0.5, 0.5])), [[1.0, 1.0]]),
    ("Dirichlet", lambda D, L: D.Dirichlet(L.tensor([1.0, 1.0])), [[0.5, 0.7]]),
]


@pytest.mark.parametrize("name,make,value", SUPPORT, ids=[s[0] for s in SUPPORT])
def test_log_prob_outside_the_support_raises_as_torch(torch, name, make, value):
    with pytest.raises(ValueError, match="within the support") as want:
        make(torch.distributions, torch).log_prob(torch.tensor(value))
    with pytest.raises(ValueError, match="within the support") as got:
        make(tw.distributions, tw).log_prob(tw.tensor(value))
    def support(err) -> str:  # (the support's repr, as the message names it)
        return str(err.value).split("within the support (", 1)[1].split(") of the distribution")[0]

    if name != "Binomial":  # (its support's repr shows a tensor bound)
        assert support(got) == support(want)


def test_value_shape_errors_as_torch(torch):
    for L, D in ((torch, torch.distributions), (tw, tw.distributions)):
        mvn = D.MultivariateNormal(L.zeros(3), L.eye(3))
        with pytest.raises(ValueError, match="right-most size of value must match event_shape"):
            mvn.log_prob(L.zeros(2))
        with pytest.raises(ValueError, match="not broadcastable with batch_shape"):
            D.Normal(L.zeros(3), L.ones(3)).log_prob(L.zeros(2))
        with pytest.raises(ValueError, match="must be a Tensor"):
            D.Normal(L.zeros(3), L.ones(3)).log_prob([0.0, 0.0, 0.0])
        with pytest.raises(ValueError, match="Either `probs` or `logits`"):
            D.Bernoulli()
        with pytest.raises(ValueError, match="Exactly one of covariance_matrix"):
            D.MultivariateNormal(L.zeros(3))
        with pytest.raises(ValueError, match="at least one-dimensional"):
            D.Categorical(probs=L.tensor(1.0))
        with pytest.raises(ValueError, match="reinterpreted_batch_ndims"):
            D.Independent(D.Normal(L.zeros(3), L.ones(3)), 2)


# -- kl_divergence -------------------------------------------------------------------------------------------------

def _kl_cases():
    a, b = np.array([0.5, 2.0, 1.0], F32), np.array([1.5, 0.7, 1.0], F32)
    c1, c0 = np.array([0.5, 2.0, 4.0], F32), np.array([1.5, 3.0, 1.0], F32)
    pr, lg = np.array([0.2, 0.5, 0.0], F32), np.array([0.3, -1.0, 2.0], F32)
    norm = lambda D, L, m, s: D.Normal(L.tensor(m), L.tensor(s))  # noqa: E731
    return {
        "Normal-Normal": lambda D, L: (norm(D, L, LOC, SCALE), norm(D, L, a, b)),
        "Bernoulli-Bernoulli": lambda D, L: (D.Bernoulli(probs=L.tensor(pr)), D.Bernoulli(logits=L.tensor(lg))),
        "Bernoulli-Bernoulli_zero": lambda D, L: (D.Bernoulli(probs=L.tensor([0.3, 0.0, 1.0])),
                                                  D.Bernoulli(probs=L.tensor([0.0, 0.4, 1.0]))),
        "Categorical-Categorical": lambda D, L: (D.Categorical(probs=L.tensor(PROBS)),
                                                 D.Categorical(logits=L.tensor(LOGITS[:, :3]))),
        "Categorical-zeros": lambda D, L: (D.Categorical(probs=L.tensor([0.5, 0.5, 0.0])),
                                           D.Categorical(probs=L.tensor([[0.2, 0.3, 0.5], [0.0, 0.5, 0.5]]))),
        "OneHot-OneHot": lambda D, L: (D.OneHotCategorical(probs=L.tensor(PROBS)),
                                       D.OneHotCategorical(logits=L.tensor(LOGITS[:, :3]))),
        "Uniform-Uniform": lambda D, L: (D.Uniform(L.tensor([0.0, 0.0, 1.0]), L.tensor([1.0, 2.0, 2.0])),
                                         D.Uniform(L.tensor([-1.0, 0.5, 0.0]), L.tensor([2.0, 3.0, 3.0]))),
        "Exponential-Exponential": lambda D, L: (D.Exponential(L.tensor(a)), D.Exponential(L.tensor(b))),
        "Laplace-Laplace": lambda D, L: (D.Laplace(L.tensor(LOC), L.tensor(SCALE)),
                                         D.Laplace(L.tensor(a), L.tensor(b))),
        "Gamma-Gamma": lambda D, L: (D.Gamma(L.tensor(a), L.tensor(b)), D.Gamma(L.tensor(b), L.tensor(a))),
        "Beta-Beta": lambda D, L: (D.Beta(L.tensor(c1), L.tensor(c0)), D.Beta(L.tensor(c0), L.tensor(c1))),
        "Dirichlet-Dirichlet": lambda D, L: (D.Dirichlet(L.tensor(np.stack([c1, c0]))),
                                             D.Dirichlet(L.tensor(np.stack([c0, c1])))),
        "Poisson-Poisson": lambda D, L: (D.Poisson(L.tensor(a)), D.Poisson(L.tensor(b))),
        "Binomial-Binomial": lambda D, L: (D.Binomial(L.tensor([5.0, 6.0, 6.0]), L.tensor([0.3, 0.5, 0.2])),
                                           D.Binomial(L.tensor([5.0, 4.0, 6.0]), L.tensor([0.6, 0.5, 0.7]))),
        "MVN-MVN": lambda D, L: (D.MultivariateNormal(L.tensor([[0.0, 1.0, -1.0], [1.0, 1.0, 1.0]]),
                                                      covariance_matrix=L.tensor(COV)),
                                 D.MultivariateNormal(L.tensor([0.5, 0.0, 0.0]), scale_tril=L.tensor(TRIL * 1.5))),
        "Independent-Independent": lambda D, L: (D.Independent(norm(D, L, LOC, SCALE), 1),
                                                 D.Independent(norm(D, L, a, b), 1)),
        "LogNormal-LogNormal": lambda D, L: (D.LogNormal(L.tensor(LOC), L.tensor(SCALE)),
                                             D.LogNormal(L.tensor(a), L.tensor(b))),
        "Normal-Laplace": lambda D, L: (norm(D, L, LOC, SCALE), D.Laplace(L.tensor(a), L.tensor(b))),
        "Laplace-Normal": lambda D, L: (D.Laplace(L.tensor(LOC), L.tensor(SCALE)), norm(D, L, a, b)),
        "Uniform-Normal": lambda D, L: (D.Uniform(L.tensor(-a), L.tensor(b)), norm(D, L, a, b)),
        "Uniform-Exponential": lambda D, L: (D.Uniform(L.tensor([0.0, -1.0, 0.5]), L.tensor(b + 1)),
                                             D.Exponential(L.tensor(a))),
        "Uniform-Gamma": lambda D, L: (D.Uniform(L.tensor([0.0, -1.0, 0.5]), L.tensor(b + 1)),
                                       D.Gamma(L.tensor(a), L.tensor(b))),
        "Uniform-Beta": lambda D, L: (D.Uniform(L.tensor([0.1, 0.2, -0.5]), L.tensor([0.9, 0.5, 0.5])),
                                      D.Beta(L.tensor(c1), L.tensor(c0))),
        "Exponential-Normal": lambda D, L: (D.Exponential(L.tensor(a)), norm(D, L, a, b)),
        "Exponential-Gamma": lambda D, L: (D.Exponential(L.tensor(a)), D.Gamma(L.tensor(b), L.tensor(a))),
        "Gamma-Exponential": lambda D, L: (D.Gamma(L.tensor(a), L.tensor(b)), D.Exponential(L.tensor(a))),
        "Gamma-Normal": lambda D, L: (D.Gamma(L.tensor(a), L.tensor(b)), norm(D, L, a, b)),
        "Beta-Normal": lambda D, L: (D.Beta(L.tensor(c1), L.tensor(c0)), norm(D, L, a, b)),
        "Beta-Gamma": lambda D, L: (D.Beta(L.tensor(c1), L.tensor(c0)), D.Gamma(L.tensor(a), L.tensor(b))),
        "Beta-Exponential": lambda D, L: (D.Beta(L.tensor(c1), L.tensor(c0)), D.Exponential(L.tensor(a))),
        "Beta-Uniform": lambda D, L: (D.Beta(L.tensor(c1), L.tensor(c0)),
                                      D.Uniform(L.tensor([0.0, -1.0, 0.5]), L.tensor([1.0, 2.0, 2.0]))),
        "Bernoulli-Poisson": lambda D, L: (D.Bernoulli(probs=L.tensor([0.2, 0.5, 0.7])), D.Poisson(L.tensor(a))),
        "Normal-Uniform(inf)": lambda D, L: (norm(D, L, LOC, SCALE), D.Uniform(L.tensor(-a), L.tensor(b))),
        "Normal-Gamma(inf)": lambda D, L: (norm(D, L, LOC, SCALE), D.Gamma(L.tensor(a), L.tensor(b))),
        "Exponential-Uniform(inf)": lambda D, L: (D.Exponential(L.tensor(a)), D.Uniform(L.tensor(-a), L.tensor(b))),
        "Laplace-Exponential(inf)": lambda D, L: (D.Laplace(L.tensor(LOC), L.tensor(SCALE)),
                                                  D.Exponential(L.tensor(a))),
        "Poisson-Binomial(inf)": lambda D, L: (D.Poisson(L.tensor(a)), D.Binomial(4, L.tensor(pr))),
        "Gamma-Beta(inf)": lambda D, L: (D.Gamma(L.tensor(a), L.tensor(b)), D.Beta(L.tensor(c1), L.tensor(c0))),
    }


KL_CASES = _kl_cases()


@pytest.mark.parametrize("name", list(KL_CASES))
def test_kl_divergence_matches_torch(torch, name):
    pw, qw = KL_CASES[name](tw.distributions, tw)
    pt, qt = KL_CASES[name](torch.distributions, torch)
    _close(tw.distributions.kl_divergence(pw, qw), torch.distributions.kl_divergence(pt, qt), rtol=1e-4,
           atol=2e-5, what=name)


def test_kl_gradients_match_torch(torch):
    def build(L, D, grad):
        m, s = _lib_tensor(L, LOC, grad), _lib_tensor(L, SCALE, grad)
        tril = _lib_tensor(L, TRIL, grad)
        lg = _lib_tensor(L, LOGITS, grad)
        kl = (D.kl_divergence(D.Normal(m, s), D.Normal(0.0, 1.0)).sum()
              + D.kl_divergence(D.MultivariateNormal(m, scale_tril=tril),
                                D.MultivariateNormal(L.zeros(3), L.eye(3) * 2)).sum()
              + D.kl_divergence(D.Categorical(logits=lg), D.Categorical(probs=L.ones(4))).sum()
              + D.kl_divergence(D.Gamma(s, m.exp()), D.Gamma(1.0, 2.0)).sum())
        kl.backward()
        return kl, [m.grad, s.grad, tril.grad, lg.grad]

    kw, gw = build(tw, tw.distributions, True)
    kt, gt = build(torch, torch.distributions, True)
    _close(kw, kt, rtol=1e-5)
    for a, b in zip(gw, gt):
        _close(a, b, rtol=1e-4, atol=1e-5)


def test_kl_registry_dispatch(torch):
    D = tw.distributions
    for L in (torch, tw):  # (not both exponential families: those meet the Bregman function, which refuses them)
        with pytest.raises(NotImplementedError, match="No KL"):
            L.distributions.kl_divergence(L.distributions.Laplace(0.0, 1.0), L.distributions.Poisson(1.0))
        with pytest.raises(NotImplementedError, match="different exponential families"):
            L.distributions.kl_divergence(L.distributions.Poisson(1.0), L.distributions.Normal(0.0, 1.0))

    class MyNormal(D.Normal):
        pass

    p, q = MyNormal(tw.tensor([0.0]), tw.tensor([1.0])), D.Normal(tw.tensor([1.0]), tw.tensor([2.0]))
    want = D.kl_divergence(D.Normal(tw.tensor([0.0]), tw.tensor([1.0])), q).item()
    assert D.kl_divergence(p, q).item() == pytest.approx(want)  # the Normal-Normal function, by subclass

    @D.register_kl(MyNormal, D.Normal)
    def _kl_mine(p, q):
        return p.loc * 0 + 42.0

    try:
        assert D.kl_divergence(p, q).item() == 42.0
        assert D.kl_divergence(q, q).item() == 0.0
    finally:
        del D.kl.__dict__["_KL_REGISTRY"][MyNormal, D.Normal]
        D.kl.__dict__["_KL_MEMOIZE"].clear()
    # the exponential-family Bregman divergence (by autograd), where no closed form is registered
    pt, qt = torch.distributions.Normal(torch.tensor(LOC), torch.tensor(SCALE)), torch.distributions.Normal(1.0, 2.0)
    got = D.kl._kl_expfamily_expfamily(D.Normal(tw.tensor(LOC), tw.tensor(SCALE)), D.Normal(1.0, 2.0))
    _close(got, torch.distributions.kl._kl_expfamily_expfamily(pt, qt), rtol=1e-4, atol=1e-5)
    ent = D.ExponentialFamily.entropy(D.Gamma(tw.tensor([0.5, 3.0]), tw.tensor([2.0, 1.0])))
    _close(ent, torch.distributions.ExponentialFamily.entropy(
        torch.distributions.Gamma(torch.tensor([0.5, 3.0]), torch.tensor([2.0, 1.0]))), rtol=1e-4, atol=1e-5)


# -- transforms ----------------------------------------------------------------------------------------------------

def test_transformed_distributions_match_torch(torch):
    def build(D, L):
        T = D.transforms
        base = D.Normal(L.tensor(LOC), L.tensor(SCALE))
        return {
            "tanh": (D.TransformedDistribution(base, [T.TanhTransform()]), [0.2, -0.9, 0.99]),
            "affine_sigmoid": (D.TransformedDistribution(base, [T.AffineTransform(1.0, -2.0), T.SigmoidTransform()]),
                               [0.2, 0.5, 0.9]),
            "exp_power": (D.TransformedDistribution(base, [T.ExpTransform(), T.PowerTransform(L.tensor(2.0))]),
                          [0.5, 1.0, 3.0]),
            "softplus": (D.TransformedDistribution(base, T.SoftplusTransform()), [0.5, 1.0, 3.0]),
            "inverse": (D.TransformedDistribution(D.Uniform(L.tensor([0.1]), L.tensor([0.9])),
                                                  T.SigmoidTransform().inv), [-1.0]),
            "stick": (D.TransformedDistribution(D.Independent(base, 1), T.StickBreakingTransform()),
                      [0.2, 0.3, 0.1, 0.4]),
            "affine_event": (D.TransformedDistribution(D.Independent(base, 1),
                                                       T.AffineTransform(L.tensor(LOC), L.tensor(-SCALE), 1)),
                             [0.1, 0.2, 0.3]),
        }

    w, t = build(tw.distributions, tw), build(torch.distributions, torch)
    for name in t:
        (dw, v), (dt, _) = w[name], t[name]
        assert tuple(dw.batch_shape) == tuple(dt.batch_shape) and tuple(dw.event_shape) == tuple(dt.event_shape)
        _close(dw.log_prob(tw.tensor(v)), dt.log_prob(torch.tensor(v)), rtol=1e-4, atol=2e-5, what=name)
        assert tuple(dw.rsample((2,)).shape) == tuple(dt.rsample((2,)).shape)
        if name in ("tanh", "affine_sigmoid"):
            _close(dw.cdf(tw.tensor(v)), dt.cdf(torch.tensor(v)), rtol=1e-4, atol=2e-5, what=name)
            _close(dw.icdf(tw.tensor([0.1, 0.5, 0.9])), dt.icdf(torch.tensor([0.1, 0.5, 0.9])), rtol=1e-4,
                   atol=2e-5, what=name)
    tanh = w["tanh"][0].sample((200,)).numpy()
    assert (np.abs(tanh) <= 1).all()
    T = tw.distributions.transforms
    c = T.ExpTransform().with_cache()
    x = tw.tensor([0.5])
    assert c.inv(c(x)) is x and T.ExpTransform() == T.ExpTransform() and c.inv.inv is c
    assert T.identity_transform(x) is x


# -- samples: statistics, reproducibility, pathwise gradients ------------------------------------------------------

N = 4000

#: name -> (the distribution, the mean and variance of each of its batch elements, in float64)
def _moments():
    D = tw.distributions
    t = tw.tensor
    c, r = np.array([0.3, 1.0, 4.0, 60.0]), np.array([1.0, 2.0, 0.5, 3.0])
    c1, c0 = np.array([0.4, 2.0, 7.0]), np.array([0.6, 5.0, 2.0])
    lam = np.array([0.0, 0.7, 6.0, 12.0, 400.0])
    n, p = np.array([1.0, 30.0, 40.0, 200.0, 1000.0, 7.0]), np.array([0.3, 0.2, 0.5, 0.9, 0.03, 1.0])
    mvn_loc = np.array([1.0, -1.0, 0.5], F32)
    return {
        "Normal": (D.Normal(t(LOC), t(SCALE)), LOC, SCALE.astype(float) ** 2),
        "Bernoulli": (D.Bernoulli(logits=t([-2.0, 0.0, 1.5])), 1 / (1 + np.exp(-np.array([-2.0, 0.0, 1.5]))), None),
        "Uniform": (D.Uniform(t([-1.0, 2.0]), t([3.0, 2.5])), np.array([1.0, 2.25]), np.array([16, 0.25]) / 12),
        "Exponential": (D.Exponential(t([0.5, 4.0])), np.array([2.0, 0.25]), np.array([4.0, 1 / 16])),
        "Laplace": (D.Laplace(t(LOC), t(SCALE)), LOC, 2 * SCALE.astype(float) ** 2),
        "LogNormal": (D.LogNormal(t([0.0, 1.0]), t([0.25, 0.1])),
                      np.exp(np.array([0.0, 1.0]) + np.array([0.25, 0.1]) ** 2 / 2),
                      (np.exp(np.array([0.25, 0.1]) ** 2) - 1) * np.exp(2 * np.array([0.0, 1.0])
                                                                         + np.array([0.25, 0.1]) ** 2)),
        "Gamma": (D.Gamma(t(c), t(r)), c / r, c / r ** 2),
        "Chi2": (D.Chi2(t([0.5, 3.0, 30.0])), np.array([0.5, 3.0, 30.0]), 2 * np.array([0.5, 3.0, 30.0])),
        "Beta": (D.Beta(t(c1), t(c0)), c1 / (c1 + c0), c1 * c0 / ((c1 + c0) ** 2 * (c1 + c0 + 1))),
        "Poisson": (D.Poisson(t(lam)), lam, lam),
        "Binomial": (D.Binomial(t(n), t(p)), n * p, n * p * (1 - p)),
        "MVN": (D.MultivariateNormal(t(mvn_loc), t(COV)), mvn_loc, np.diag(COV).astype(float)),
        "Independent": (D.Independent(D.Normal(t(LOC), t(SCALE)), 1), LOC, SCALE.astype(float) ** 2),
    }


def _check_moments(s: np.ndarray, mean, var, what: str) -> None:
    """The sample mean within 5 standard errors, the sample variance within 5 standard errors of a variance (up to
    the kurtosis of the draws, bounded by the sample's own fourth moment)."""
    mean = np.asarray(mean, float)
    got_mean = s.mean(0)
    var = mean * (1 - mean) if var is None else np.asarray(var, float)
    se = np.sqrt(var / len(s))
    assert np.all(np.abs(got_mean - mean) <= 5 * se + 1e-12), f"{what}: mean {got_mean} vs {mean} (se {se})"
    got_var = s.var(0, ddof=1)
    m4 = ((s - s.mean(0)) ** 4).mean(0)
    se_var = np.sqrt(np.maximum(m4 - var ** 2, 0) / len(s)) + 1e-12
    assert np.all(np.abs(got_var - var) <= 5 * se_var + 1e-9), f"{what}: variance {got_var} vs {var} (se {se_var})"


@pytest.mark.parametrize("name", ["Normal", "Bernoulli", "Uniform", "Exponential", "Laplace", "LogNormal", "Gamma",
                                  "Chi2", "Beta", "Poisson", "Binomial", "MVN", "Independent"])
def test_sample_statistics(name):
    tw.manual_seed(1234)
    d, mean, var = _moments()[name]
    s = d.sample((N,))
    assert tuple(s.shape) == (N,) + tuple(d.batch_shape) + tuple(d.event_shape)
    a = s.numpy().astype(np.float64)
    assert np.isfinite(a).all()
    _check_moments(a, mean, var, name)
    if name in ("Poisson", "Binomial"):
        assert (a == np.round(a)).all() and (a >= 0).all()
    if name == "Binomial":
        assert (a <= np.array([1.0, 30.0, 40.0, 200.0, 1000.0, 7.0])).all() and (a[:, -1] == 7).all()
    if name == "Poisson":
        assert (a[:, 0] == 0).all()
    if name == "MVN":  # the covariance too
        np.testing.assert_allclose(np.cov(a.T), COV, atol=0.12)
    if d.has_rsample:
        _check_moments(d.rsample((N,)).detach().numpy().astype(np.float64), mean, var, name + ".rsample")


def test_categorical_and_dirichlet_sample_frequencies():
    tw.manual_seed(7)
    D = tw.distributions
    s = D.Categorical(probs=tw.tensor(PROBS)).sample((N,)).numpy()
    assert s.dtype == np.int64 and s.shape == (N, 2)
    freq = np.stack([(s == k).mean(0) for k in range(3)], -1)
    np.testing.assert_allclose(freq, PROBS, atol=5 * np.sqrt(0.25 / N))
    oh = D.OneHotCategorical(logits=tw.tensor(LOGITS)).sample((N,)).numpy()
    assert oh.shape == (N, 2, 4) and (oh.sum(-1) == 1).all()
    want = np.exp(LOGITS) / np.exp(LOGITS).sum(-1, keepdims=True)
    np.testing.assert_allclose(oh.mean(0), want, atol=5 * np.sqrt(0.25 / N))
    conc = np.array([[0.3, 1.0, 2.7], [4.0, 4.0, 2.0]])
    dr = D.Dirichlet(tw.tensor(conc)).sample((N,)).numpy().astype(np.float64)
    np.testing.assert_allclose(dr.sum(-1), 1.0, atol=1e-5)
    a0 = conc.sum(-1, keepdims=True)
    _check_moments(dr, conc / a0, conc * (a0 - conc) / (a0 ** 2 * (a0 + 1)), "Dirichlet")


def test_samples_are_reproducible_under_manual_seed():
    D = tw.distributions
    makers = [lambda: D.Normal(tw.zeros(3), tw.ones(3)).sample((4,)),
              lambda: D.Gamma(tw.tensor([0.5, 3.0]), 1.0).sample((5,)),
              lambda: D.Categorical(logits=tw.tensor(LOGITS)).sample((6,)),
              lambda: D.Poisson(tw.tensor([2.0, 40.0])).sample((5,))]
    for make in makers:
        tw.manual_seed(99)
        a = make().numpy()
        b = make().numpy()
        tw.manual_seed(99)
        np.testing.assert_array_equal(make().numpy(), a)
        assert not np.array_equal(a, b)
    g = tw.Generator().manual_seed(5)
    assert g.initial_seed() == 5  # (the distributions draw from the default generator, as torch's)


def test_rsample_gradients_are_pathwise(torch):
    """Each rsample's gradient is the derivative of its sample held at its noise: exact per sample where the noise
    can be recovered from the sample, torch's own implicit gradient for Gamma's samples, and the derivative of the
    expectation for Beta and Dirichlet."""
    D = tw.distributions
    tw.manual_seed(3)
    loc, scale = tw.tensor(LOC, requires_grad=True), tw.tensor(SCALE, requires_grad=True)
    for cls in (D.Normal, D.Laplace, D.LogNormal):
        x = cls(loc, scale).rsample((500,))
        z = x.log() if cls is D.LogNormal else x
        eps = ((z - loc) / scale).detach()
        loc.grad = scale.grad = None
        z.sum().backward()
        np.testing.assert_allclose(loc.grad.numpy(), np.full(3, 500.0), rtol=1e-5)
        np.testing.assert_allclose(scale.grad.numpy(), eps.sum(0).numpy(), rtol=1e-4, atol=1e-3)
    rate = tw.tensor([0.5, 2.0], requires_grad=True)
    x = D.Exponential(rate).rsample((300,))
    x.sum().backward()
    np.testing.assert_allclose(rate.grad.numpy(), (-x / rate).sum(0).detach().numpy(), rtol=1e-4)
    low, high = tw.tensor([0.0, 1.0], requires_grad=True), tw.tensor([2.0, 5.0], requires_grad=True)
    x = D.Uniform(low, high).rsample((300,))
    u = ((x - low) / (high - low)).detach()
    (x * x).sum().backward()
    np.testing.assert_allclose(high.grad.numpy(), (2 * x * u).sum(0).detach().numpy(), rtol=1e-4)
    np.testing.assert_allclose(low.grad.numpy(), (2 * x * (1 - u)).sum(0).detach().numpy(), rtol=1e-4)
    # MultivariateNormal: d x / d L = eps (outer), with eps recovered by a triangular solve
    tril = tw.tensor(TRIL, requires_grad=True)
    m = tw.tensor([0.0, 1.0, -1.0], requires_grad=True)
    x = D.MultivariateNormal(m, scale_tril=tril).rsample((400,))
    eps = tw.linalg.solve_triangular(tril.detach(), (x - m).detach().T, upper=False).T
    x.sum().backward()
    np.testing.assert_allclose(m.grad.numpy(), np.full(3, 400.0), rtol=1e-5)
    want = np.ones((3, 1)) * eps.sum(0).numpy()[None, :]  # (d (L eps)_i / d L_ij = eps_j, as torch's)
    np.testing.assert_allclose(tril.grad.numpy(), want, rtol=1e-3, atol=2e-3)
    # Gamma: per sample, torch's _standard_gamma_grad at the same standard draw, and d/d rate = -x / rate
    conc = tw.tensor([0.4, 1.0, 3.0, 20.0, 1500.0], requires_grad=True)  # (past 1000: Wilson-Hilferty's)
    rt = tw.tensor([1.0, 2.0, 0.5, 4.0, 1.0], requires_grad=True)
    x = D.Gamma(conc, rt).rsample((300,))
    x.sum().backward()
    xs = (x * rt).detach().numpy().astype(np.float64)
    a = np.broadcast_to(np.array([0.4, 1.0, 3.0, 20.0, 1500.0]), xs.shape)
    dxs = torch._standard_gamma_grad(torch.tensor(a), torch.tensor(xs)).numpy()
    np.testing.assert_allclose(conc.grad.numpy(), (dxs / np.array([1.0, 2.0, 0.5, 4.0, 1.0])).sum(0), rtol=3e-3)
    np.testing.assert_allclose(rt.grad.numpy(), (-x / rt).sum(0).detach().numpy(), rtol=1e-4)
    # Beta and Dirichlet: the mean gradient of E[x] over many draws: d E[x_1] / d c1 = c0 / (c1 + c0)^2
    c1, c0 = tw.tensor([2.0, 0.7], requires_grad=True), tw.tensor([3.0, 1.5], requires_grad=True)
    tw.manual_seed(11)
    D.Beta(c1, c0).rsample((N,)).mean(0).sum().backward()
    np.testing.assert_allclose(c1.grad.numpy(), np.array([3.0, 1.5]) / np.array([5.0, 2.2]) ** 2, rtol=0.08)
    np.testing.assert_allclose(c0.grad.numpy(), -np.array([2.0, 0.7]) / np.array([5.0, 2.2]) ** 2, rtol=0.08)
    # a loss through rsample: its gradient matches torch's estimate and the closed form, E[x^2] = loc^2 + scale^2
    for lib in (tw, torch):
        lib.manual_seed(5)
        lc, sc = lib.tensor([0.5, -1.0], requires_grad=True), lib.tensor([2.0, 0.5], requires_grad=True)
        (lib.distributions.Normal(lc, sc).rsample((N,)) ** 2).mean(0).sum().backward()
        np.testing.assert_allclose(lc.grad.numpy(), [1.0, -2.0], atol=0.15)
        np.testing.assert_allclose(sc.grad.numpy(), [4.0, 1.0], rtol=0.06)


def test_sample_has_no_gradient_and_rsample_needs_one():
    D = tw.distributions
    loc = tw.tensor([0.0, 1.0], requires_grad=True)
    assert not D.Normal(loc, 1.0).sample().requires_grad
    assert D.Normal(loc, 1.0).rsample().requires_grad
    assert not D.Categorical(logits=loc).sample((3,)).requires_grad
    with pytest.raises(NotImplementedError):
        D.Bernoulli(probs=tw.tensor([0.5])).rsample()
    assert tw.distributions is __import__("tensorwire.distributions").distributions
    from tensorwire.distributions.normal import Normal
    assert Normal is D.Normal and D.constraints.positive.check(tw.tensor([1.0, -1.0])).tolist() == [True, False]


def test_constraints_and_utils_match_torch(torch):
    Cw, Ct = tw.distributions.constraints, torch.distributions.constraints
    vec = np.array([[0.2, 0.3, 0.5], [-0.1, 0.6, 0.5], [1.0, 0.0, 0.0], [0.5, math.nan, 0.5]], F32)
    mats = np.stack([COV, TRIL, -COV, np.array([[1, 2, 0], [2, 1, 0], [0, 0, 1]], F32)])
    sym = np.stack([COV, np.eye(3, dtype=F32), -COV, mats[3], np.diag([1.0, 0.0, 2.0]).astype(F32)])
    cases = [("real", vec), ("positive", vec), ("nonnegative", vec), ("unit_interval", vec), ("boolean", vec),
             ("simplex", vec), ("one_hot", vec), ("real_vector", vec), ("nonnegative_integer", vec * 4),
             ("positive_integer", vec * 4), ("lower_triangular", mats), ("lower_cholesky", mats),
             ("symmetric", mats), ("positive_definite", sym), ("positive_semidefinite", sym), ("square", mats)]
    for name, value in cases:
        got = getattr(Cw, name).check(tw.tensor(value))
        want = getattr(Ct, name).check(torch.tensor(value))
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=name)
        assert repr(getattr(Cw, name)) == repr(getattr(Ct, name))
    # a batch with a matrix that is not symmetric: torch answers its symmetry check for every matrix (an early
    # return), tensorwire each matrix's own answer; the validation they serve (all true?) is the same
    for name in ("positive_definite", "positive_semidefinite"):
        got = getattr(Cw, name).check(tw.tensor(mats))
        assert got.tolist() == [True, False, False, False]
        assert bool(got.all()) == bool(getattr(Ct, name).check(torch.tensor(mats)).all())
    for make in (lambda C: C.interval(0.0, 0.5), lambda C: C.half_open_interval(0.0, 0.5),
                 lambda C: C.greater_than(0.2), lambda C: C.greater_than_eq(0.2), lambda C: C.less_than(0.3),
                 lambda C: C.integer_interval(0, 2), lambda C: C.independent(C.positive, 1),
                 lambda C: C.cat([C.positive, C.real], 1, [1, 2]), lambda C: C.stack([C.positive, C.real, C.real], 1),
                 lambda C: C.multinomial(1)):
        np.testing.assert_array_equal(make(Cw).check(tw.tensor(vec * 2)).numpy(),
                                      make(Ct).check(torch.tensor(vec * 2)).numpy(), err_msg=repr(make(Ct)))
        assert repr(make(Cw)) == repr(make(Ct)) and make(Cw).event_dim == make(Ct).event_dim
    assert Cw.is_dependent(Cw.dependent) and Cw.is_dependent(tw.distributions.Uniform.support)
    with pytest.raises(ValueError):
        Cw.dependent.check(tw.zeros(2))
    U, Ut = tw.distributions.utils, torch.distributions.utils
    p = np.array([[0.0, 0.25, 0.75], [0.5, 0.5, 1.0]], F32)
    for fn in ("probs_to_logits", "logits_to_probs", "clamp_probs"):
        for kw in ({}, {"is_binary": True}) if fn != "clamp_probs" else ({},):
            _close(getattr(U, fn)(tw.tensor(p), **kw), getattr(Ut, fn)(torch.tensor(p), **kw), what=fn)
    v = np.arange(12, dtype=F32).reshape(2, 6)
    m = np.arange(32, dtype=F32).reshape(2, 4, 4)
    for diag in (0, -1):
        _close(U.vec_to_tril_matrix(tw.tensor(v), diag), Ut.vec_to_tril_matrix(torch.tensor(v), diag))
        _close(U.tril_matrix_to_vec(tw.tensor(m), diag), Ut.tril_matrix_to_vec(torch.tensor(m), diag))
    a, b = U.broadcast_all(tw.tensor([[1.0], [2.0]], dtype=tw.float64), 3)
    assert tuple(a.shape) == tuple(b.shape) == (2, 1) and b.dtype == tw.float64
    with pytest.raises(ValueError):
        U.broadcast_all(tw.zeros(2), "a")
