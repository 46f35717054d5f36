"""Batch normalisation's composites (``tw.nn.functional.batch_norm``, ``nn.BatchNorm1d/2d/3d``): the normalisation,
its statistics, the running statistics' update, and the two ops of its backward, each with a numpy kernel on the CPU
(``backends/cpu/kernels.py``) and its decomposition for every other backend.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as D
from ..errors import DTypeError, ProtocolError, ShapeError
from ..shapes import numel
from .attrs import a_bool, a_int, a_num, a_str
from .table import OPS, _scalar, composite

# ------------------------------------------------------------------------------------------------ batch norm
#
# torch's batch norm: statistics over every dim but 1 (the channels). One output per node, so training records
# ``batch_norm_stats(x)`` and ``batch_norm(x, stats, [weight], [bias])`` (``has_stats``; without it batch_norm computes
# the statistics itself), the statistics also feeding one ``batch_norm_update`` per tracked running buffer and the
# backward, which would otherwise compute them twice more (three passes over x, ~0.7 ms of a DCGAN step). The
# gradient of batch_norm with respect to x accounts for the statistics' dependence on x, and ``stats`` gets none
# (its history serves a double backward). The backward is ``batch_norm_grad_stats`` (the per-channel sums of g and
# g * x_hat, which are also the bias's and the weight's gradients) and ``batch_norm_grad`` (the input's gradient in
# closed form). Statistics travel as one [2C] vector: the means, then the biased variances (float32 for 16-bit
# inputs, as torch's CPU keeps them). Eval mode normalises with the running statistics instead.

def _bn_stat_dtype(d: D.DType) -> D.DType:
    """The dtype the statistics of a ``d`` input are kept in."""
    return D.float32 if d in D.HALF else D.float_of(d)


def _bn_input(what: str, s, d) -> int:
    """The channel count of a batch-norm input (shape ``s``, dtype ``d``)."""
    if not d.is_floating_point:
        raise DTypeError(f'{what}: "batch_norm" is not implemented for {d.name}: normalise a floating tensor')
    if len(s) < 2:
        raise ShapeError(f"{what}: expected an input with at least 2 dims (batch, channels, ...), got shape {list(s)}")
    return s[1]


def _bn_per_channel(what: str, name: str, meta, c: int) -> None:
    s, d = meta
    if tuple(s) != (c,):
        raise ShapeError(f"{what}: {name} should have shape [{c}] (the input's channels), got {list(s)}")
    if not d.is_floating_point:
        raise DTypeError(f"{what}: {name} must be floating, got {d.name}")


def _bn_layout(what: str, nin: int, attrs: dict, lead: int, extra: tuple[str, ...] = ()) -> list[str]:
    """The names of a batch-norm op's inputs after the first ``lead``: ``extra``, then the weight and bias when the
    ``has_weight`` / ``has_bias`` attributes say they are there."""
    names = list(extra)
    if a_bool(attrs, "has_weight"):
        names.append("weight")
    if a_bool(attrs, "has_bias"):
        names.append("bias")
    if nin != lead + len(names):
        raise ProtocolError(f"{what} takes {lead + len(names)} inputs with these attributes "
                            f"({', '.join(['input'] * lead + names)}), got {nin}")
    return names


def _bn_eps(attrs: dict) -> float:
    eps = a_num(attrs, "eps", 1e-5)
    if eps < 0:
        raise ProtocolError(f"batch_norm: eps must be >= 0, got {eps}")
    return eps


def _bn_norm_inputs(attrs: dict) -> tuple[str, ...]:
    """The inputs of ``batch_norm`` between x and the weight: the batch statistics in training when ``has_stats``
    says they are given, the running ones in eval."""
    if a_bool(attrs, "training"):
        return ("stats",) if a_bool(attrs, "has_stats") else ()
    return "running_mean", "running_var"


def _batch_norm_infer(metas, attrs):
    (s, d) = metas[0]
    c = _bn_input("batch_norm", s, d)
    _bn_eps(attrs)
    names = _bn_layout("batch_norm", len(metas), attrs, 1, _bn_norm_inputs(attrs))
    for name, m in zip(names, metas[1:]):
        if name == "stats":
            _bn_stats_meta("batch_norm", m, c, d)
        else:
            _bn_per_channel("batch_norm", name, m, c)
    return tuple(s), d


def _bn_dims(x) -> list[int]:
    return [0] + list(range(2, len(x.shape)))


def _bn_col(g, v, x):
    """A [C] vector shaped to broadcast against ``x`` ([1, C, 1, ...])."""
    return g.op("reshape", v, shape=[1, x.shape[1]] + [1] * (len(x.shape) - 2))


def _bn_moments(g, x):
    """(mean, biased variance) per channel of ``x`` in its statistics dtype, two passes as torch's CPU."""
    st = _bn_stat_dtype(x.dtype)
    xf = x if x.dtype is st else g.op("cast", x, dtype=st.name)
    dims = _bn_dims(x)
    mu = g.op("mean", xf, dims=dims, keepdim=False)
    xc = g.op("sub", xf, _bn_col(g, mu, x))
    return mu, g.op("mean", g.op("mul", xc, xc), dims=dims, keepdim=False)


def _bn_split(g, stats, c: int):
    """(means, variances) of a [2C] statistics vector."""
    def part(a):
        return g.op("slice", stats, starts=[a], stops=[a + c], steps=[1])
    return part(0), part(c)


def _bn_as(g, v, dt: D.DType):
    return v if v.dtype is dt else g.op("cast", v, dtype=dt.name)


@composite("batch_norm", None, _batch_norm_infer, attrs=("training", "eps", "has_weight", "has_bias", "has_stats"))
def _batch_norm(g, x, *rest):
    """Batch normalisation (torch's ``F.batch_norm``): ``x * a + b`` per channel (dim 1) with ``a = weight * rstd``,
    ``b = bias - mean * a``, ``rstd = 1 / sqrt(var + eps)``. Training (inputs x[, stats][, weight][, bias]): the
    batch's mean and biased variance over every dim but 1 (``stats``, ``batch_norm_stats(x)``, when ``has_stats``);
    eval (inputs x, running_mean, running_var[, weight][, bias]): the running statistics."""
    *ins, attrs = rest
    training = a_bool(attrs, "training")
    st = _bn_stat_dtype(x.dtype)
    names = _bn_layout("batch_norm", 1 + len(ins), attrs, 1, _bn_norm_inputs(attrs))
    named = dict(zip(names, ins))
    if "stats" in named:
        mu, var = _bn_split(g, named["stats"], x.shape[1])
    elif training:
        mu, var = _bn_moments(g, x)
    else:
        mu, var = _bn_as(g, named["running_mean"], st), _bn_as(g, named["running_var"], st)
    a = g.op("rsqrt", g.op("add", var, _scalar(g, _bn_eps(attrs), st)))
    if "weight" in named:
        a = g.op("mul", a, _bn_as(g, named["weight"], st))
    b = g.op("neg", g.op("mul", mu, a))
    if "bias" in named:
        b = g.op("add", b, _bn_as(g, named["bias"], st))
    y = g.op("add", g.op("mul", _bn_as(g, x, st), _bn_col(g, a, x)), _bn_col(g, b, x))
    return _bn_as(g, y, x.dtype)


def _bn_stats_infer(metas, attrs):
    (s, d), = metas
    c = _bn_input("batch_norm_stats", s, d)
    return (2 * c,), _bn_stat_dtype(d)


@composite("batch_norm_stats", 1, _bn_stats_infer)
def _batch_norm_stats(g, x, attrs):
    """The batch statistics of ``x`` as one [2C] vector: the per-channel means over every dim but 1, then the
    biased variances."""
    mu, var = _bn_moments(g, x)
    return g.op("cat", mu, var, dim=0)


def _bn_stats_meta(what: str, meta, c: int, x_dtype: D.DType, name: str = "stats") -> None:
    s, d = meta
    if tuple(s) != (2 * c,):
        raise ShapeError(f"{what}: {name} should have shape [{2 * c}] (means then variances of {c} channels), "
                         f"got {list(s)}")
    if d is not _bn_stat_dtype(x_dtype):
        raise DTypeError(f"{what}: {name} should be {_bn_stat_dtype(x_dtype).name} for a {x_dtype.name} input, "
                         f"got {d.name}")


def _bn_grad_in_check(what: str, metas) -> int:
    (sg, dg), (sx, dx) = metas[0], metas[1]
    c = _bn_input(what, sx, dx)
    if tuple(sg) != tuple(sx) or dg is not dx:
        raise ShapeError(f"{what}: the output gradient ({list(sg)}, {dg.name}) should match the input "
                         f"({list(sx)}, {dx.name})")
    return c


def _bn_grad_stats_infer(metas, attrs):
    if len(metas) != 3:
        raise ProtocolError(f"batch_norm_grad_stats takes 3 inputs (grad_output, input, stats), got {len(metas)}")
    c = _bn_grad_in_check("batch_norm_grad_stats", metas)
    _bn_stats_meta("batch_norm_grad_stats", metas[2], c, metas[1][1])
    _bn_eps(attrs)
    return (2 * c,), _bn_stat_dtype(metas[1][1])


@composite("batch_norm_grad_stats", 3, _bn_grad_stats_infer, attrs=("eps",))
def _batch_norm_grad_stats(g, gy, x, stats, attrs):
    """The per-channel sums of the output gradient and of the output gradient times x_hat = (x - mean) * rstd (the
    statistics in ``stats``), as one [2C] vector: batch norm's bias gradient, then its weight gradient."""
    c, st = x.shape[1], stats.dtype
    mu, var = _bn_split(g, stats, c)
    rstd = g.op("rsqrt", g.op("add", var, _scalar(g, _bn_eps(attrs), st)))
    dims = _bn_dims(x)
    gf = _bn_as(g, gy, st)
    xhat = g.op("mul", g.op("sub", _bn_as(g, x, st), _bn_col(g, mu, x)), _bn_col(g, rstd, x))
    return g.op("cat", g.op("sum", gf, dims=dims, keepdim=False),
                g.op("sum", g.op("mul", gf, xhat), dims=dims, keepdim=False), dim=0)


def _bn_grad_infer(metas, attrs):
    training = a_bool(attrs, "training")
    names = _bn_layout("batch_norm_grad", len(metas), attrs, 3, ("grad_stats",) if training else ())
    c = _bn_grad_in_check("batch_norm_grad", metas)
    dx = metas[1][1]
    _bn_stats_meta("batch_norm_grad", metas[2], c, dx)
    if a_bool(attrs, "has_bias"):
        raise ProtocolError("batch_norm_grad takes no bias (has_bias must be false)")
    for name, m in zip(names, metas[3:]):
        if name == "grad_stats":
            _bn_stats_meta("batch_norm_grad", m, c, dx, name)
        else:
            _bn_per_channel("batch_norm_grad", name, m, c)
    _bn_eps(attrs)
    return tuple(metas[1][0]), dx


@composite("batch_norm_grad", None, _bn_grad_infer, attrs=("training", "eps", "has_weight"))
def _batch_norm_grad(g, gy, x, stats, *rest):
    """Batch norm's input gradient given the output gradient, the input, the statistics it normalised with
    (``stats``: [2C], means then variances) and, in training, ``grad_stats`` (:func:`batch_norm_grad_stats`'s sums
    ``sum g`` and ``sum g * x_hat``): ``w * rstd * (g - sum_g / n - x_hat * sum_gx / n)`` (n values per channel),
    in eval ``w * rstd * g`` (the running statistics are constants)."""
    *ins, attrs = rest
    training = a_bool(attrs, "training")
    named = dict(zip(_bn_layout("batch_norm_grad", 3 + len(ins), attrs, 3, ("grad_stats",) if training else ()),
                     ins))
    c, st = x.shape[1], stats.dtype
    mu, var = _bn_split(g, stats, c)
    k = g.op("rsqrt", g.op("add", var, _scalar(g, _bn_eps(attrs), st)))
    if "weight" in named:
        k = g.op("mul", k, _bn_as(g, named["weight"], st))
    gf = _bn_as(g, gy, st)
    if not training:
        return _bn_as(g, g.op("mul", gf, _bn_col(g, k, x)), x.dtype)
    n = numel(x.shape) // max(c, 1)
    sg, sgx = _bn_split(g, named["grad_stats"], c)
    rstd = g.op("rsqrt", g.op("add", var, _scalar(g, _bn_eps(attrs), st)))
    xhat = g.op("mul", g.op("sub", _bn_as(g, x, st), _bn_col(g, mu, x)), _bn_col(g, rstd, x))
    inv_n = _scalar(g, 1.0 / max(n, 1), st)
    inner = g.op("sub", g.op("sub", gf, _bn_col(g, g.op("mul", sg, inv_n), x)),
                 g.op("mul", xhat, _bn_col(g, g.op("mul", sgx, inv_n), x)))
    return _bn_as(g, g.op("mul", inner, _bn_col(g, k, x)), x.dtype)


def _bn_update_infer(metas, attrs):
    if len(metas) not in (2, 3):
        raise ProtocolError(f"batch_norm_update takes 2 or 3 inputs (running, stats[, count]), got {len(metas)}")
    (sr, dr), (ss, ds) = metas[0], metas[1]
    a_str(attrs, "which", ("mean", "var"))
    n = a_int(attrs, "n", 2)
    if n < 1:
        raise ProtocolError(f"batch_norm_update: n (values per channel) must be >= 1, got {n}")
    if len(sr) != 1 or tuple(ss) != (2 * sr[0],):
        raise ShapeError(f"batch_norm_update: expected a [C] running statistic and [2C] batch statistics, got "
                         f"{list(sr)} and {list(ss)}")
    if not dr.is_floating_point or not ds.is_floating_point:
        raise DTypeError(f"batch_norm_update: statistics must be floating, got {dr.name} and {ds.name}")
    if len(metas) == 3:
        (sf, df) = metas[2]
        if tuple(sf) != ():
            raise ShapeError(f"batch_norm_update: the count must be a 0-d tensor, got shape {list(sf)}")
        if df.category not in (1, 2):
            raise DTypeError(f"batch_norm_update: the count must be an integer or floating tensor, got {df.name}")
    else:
        a_num(attrs, "momentum")
    return tuple(sr), dr


@composite("batch_norm_update", None, _bn_update_infer, attrs=("which", "momentum", "n"), differentiable=False)
def _batch_norm_update(g, running, stats, *rest):
    """A running statistic's update as torch's: ``(1 - f) * running + f * stat`` with ``stat`` the batch mean
    (``which="mean"``) or the unbiased batch variance ``var * n / (n - 1)`` (``which="var"``; n values per channel,
    the variance itself when n is 1) and ``f`` the ``momentum`` attribute or, for a cumulative average
    (torch's ``momentum=None``), ``1 / count`` with ``count`` the 0-d third input (num_batches_tracked)."""
    *f, attrs = rest
    c = running.shape[0]
    st = stats.dtype
    mu, var = _bn_split(g, stats, c)
    if a_str(attrs, "which", ("mean", "var")) == "mean":
        stat = mu
    else:
        n = a_int(attrs, "n", 2)
        stat = g.op("mul", var, _scalar(g, n / (n - 1), st)) if n > 1 else var
    fac = g.op("reciprocal", _bn_as(g, f[0], st)) if f else _scalar(g, a_num(attrs, "momentum"), st)
    keep = g.op("sub", _scalar(g, 1.0, st), fac)
    new = g.op("add", g.op("mul", _bn_as(g, running, st), keep), g.op("mul", stat, fac))
    return _bn_as(g, new, running.dtype)


# conformance examples (backends/testing: ``extra["examples"]`` checked against ``extra["reference"]``, which reads the
# inputs in float64)
_BN_RNG = np.random.default_rng(37)


def _bn_r(*shape, lo=-2.0, hi=2.0) -> np.ndarray:
    return _BN_RNG.uniform(lo, hi, size=shape).astype(np.float32)


def _bn_ref_moments(x: np.ndarray):
    ax = (0,) + tuple(range(2, x.ndim))
    return x.mean(axis=ax), x.var(axis=ax)


def _bn_ref_col(v: np.ndarray, nd: int) -> np.ndarray:
    return v.reshape((1, -1) + (1,) * (nd - 2))


def _bn_ref(xs, attrs):
    x, *ins = xs
    training = bool(attrs.get("training", False))
    mu, var = _bn_ref_moments(x) if training else (ins[0], ins[1])
    rest = ins if training else ins[2:]
    y = (x - _bn_ref_col(mu, x.ndim)) / np.sqrt(_bn_ref_col(var, x.ndim) + attrs.get("eps", 1e-5))
    if attrs.get("has_weight"):
        y = y * _bn_ref_col(rest.pop(0), x.ndim)
    if attrs.get("has_bias"):
        y = y + _bn_ref_col(rest.pop(0), x.ndim)
    return y


def _bn_grad_stats_ref(xs, attrs):
    gy, x, stats = xs
    c = x.shape[1]
    ax = (0,) + tuple(range(2, x.ndim))
    xhat = (x - _bn_ref_col(stats[:c], x.ndim)) / np.sqrt(_bn_ref_col(stats[c:], x.ndim) + attrs.get("eps", 1e-5))
    return np.concatenate([gy.sum(axis=ax), (gy * xhat).sum(axis=ax)])


def _bn_grad_ref(xs, attrs):
    gy, x, stats, *rest = xs
    c, nd = x.shape[1], x.ndim
    k = 1 / np.sqrt(stats[c:] + attrs.get("eps", 1e-5))
    w = rest[-1] if attrs.get("has_weight") else np.ones(c)
    if not attrs.get("training"):
        return gy * _bn_ref_col(w * k, nd)
    gs, n = rest[0], x.size // c
    xhat = (x - _bn_ref_col(stats[:c], nd)) * _bn_ref_col(k, nd)
    return (gy - _bn_ref_col(gs[:c] / n, nd) - xhat * _bn_ref_col(gs[c:] / n, nd)) * _bn_ref_col(w * k, nd)


def _bn_update_ref(xs, attrs):
    running, stats, *f = xs
    c = running.shape[0]
    fac = 1.0 / f[0] if f else attrs["momentum"]
    n = attrs.get("n", 2)
    stat = stats[:c] if attrs["which"] == "mean" else stats[c:] * (n / (n - 1) if n > 1 else 1.0)
    return (1 - fac) * running + fac * stat


def _bn_stats_ref(xs, attrs):
    return np.concatenate(_bn_ref_moments(xs[0]))


def _bn_examples():
    x4, x3, x2 = _bn_r(3, 4, 5, 2), _bn_r(4, 3, 6), _bn_r(8, 5)
    w4, b4, var4 = _bn_r(4), _bn_r(4), _bn_r(4, lo=0.5, hi=2.0)
    s4 = np.concatenate([_bn_r(4), var4])
    tr = {"training": True}
    return {
        "batch_norm": [([x4], tr), ([x4, w4, b4], {**tr, "has_weight": True, "has_bias": True, "eps": 1e-3}),
                       ([x3, _bn_r(3)], {**tr, "has_bias": True}), ([x2], tr),
                       ([x4, _bn_r(4), var4], {}),
                       ([x4, _bn_r(4), var4, w4, b4], {"has_weight": True, "has_bias": True}),
                       ([_bn_r(2, 3, 2, 2, 3), _bn_r(3), _bn_r(3, lo=0.5), _bn_r(3)], {"has_weight": True})],
        "batch_norm_stats": [([x4], {}), ([x3], {}), ([x2], {})],
        "batch_norm_grad_stats": [([_bn_r(3, 4, 5, 2), x4, s4], {}), ([_bn_r(8, 5), x2,
                                  np.concatenate([_bn_r(5), _bn_r(5, lo=0.5)])], {"eps": 1e-3})],
        "batch_norm_grad": [([_bn_r(3, 4, 5, 2), x4, s4, _bn_r(8), w4], {"training": True, "has_weight": True}),
                            ([_bn_r(3, 4, 5, 2), x4, s4, _bn_r(8)], {"training": True}),
                            ([_bn_r(3, 4, 5, 2), x4, s4, w4], {"has_weight": True}),
                            ([_bn_r(4, 3, 6), x3, np.concatenate([_bn_r(3), _bn_r(3, lo=0.5)])], {})],
        "batch_norm_update": [([_bn_r(4), s4], {"which": "mean", "momentum": 0.1, "n": 30}),
                              ([_bn_r(4, lo=0.5), s4], {"which": "var", "momentum": 0.3, "n": 30}),
                              ([_bn_r(4, lo=0.5), s4, np.int64(4)], {"which": "var", "n": 2}),
                              ([_bn_r(4), s4, np.float32(3)], {"which": "mean", "n": 2})],
    }


for _name, _ex in _bn_examples().items():
    OPS[_name].extra["examples"] = _ex
    OPS[_name].extra["reference"] = {"batch_norm": _bn_ref, "batch_norm_stats": _bn_stats_ref,
                                     "batch_norm_grad_stats": _bn_grad_stats_ref, "batch_norm_grad": _bn_grad_ref,
                                     "batch_norm_update": _bn_update_ref}[_name]
