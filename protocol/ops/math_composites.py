"""Math composites, each written once in terms of other ops: relu, sigmoid, softmax, logsumexp, norms,
means and variances, and the rest of the tensor API's derived functions. The :func:`composite` decorator
registers each.
"""

from __future__ import annotations

import math

from .. import dtypes as D
from ..errors import DTypeError, ShapeError
from ..shapes import broadcast_many, check_shape, norm_dim, numel, reduced
from .attrs import a_bool, a_dims, a_dtype, a_int, a_num
from .elementwise import _no_complex, _unary_bool, _unary_float, _unary_same, binary_dtype
from .table import _scalar, _to_float, composite


def _same_float(metas, attrs):
    return _unary_float(metas, attrs)


@composite("relu", 1, _no_complex("relu", _unary_same), kind="unary")
def _relu(g, x, attrs):
    """max(x, 0)."""
    return g.op("maximum", x, _scalar(g, 0, x.dtype))


@composite("sigmoid", 1, _unary_float, kind="unary")
def _sigmoid(g, x, attrs):
    """1 / (1 + exp(-x))."""
    x = _to_float(g, x)
    return g.op("reciprocal", g.op("add", g.op("exp", g.op("neg", x)), _scalar(g, 1, x.dtype)))


@composite("square", 1, lambda m, a: (m[0][0], D.int64 if m[0][1] is D.bool_ else m[0][1]), kind="unary")
def _square(g, x, attrs):
    """x * x (bool as int64, as torch)."""
    if x.dtype is D.bool_:
        x = g.op("cast", x, dtype="int64")
    return g.op("mul", x, x)


@composite("rsqrt", 1, _unary_float, kind="unary")
def _rsqrt(g, x, attrs):
    """1 / sqrt(x)."""
    return g.op("reciprocal", g.op("sqrt", x))


@composite("exp2", 1, _unary_float, kind="unary")
def _exp2(g, x, attrs):
    """2 ** x."""
    x = _to_float(g, x)
    return g.op("exp", g.op("mul", x, _scalar(g, math.log(2.0), x.dtype)))


@composite("log2", 1, _unary_float, kind="unary")
def _log2(g, x, attrs):
    """log(x) / log(2)."""
    y = g.op("log", x)
    return g.op("mul", y, _scalar(g, 1.0 / math.log(2.0), y.dtype))


@composite("log10", 1, _unary_float, kind="unary")
def _log10(g, x, attrs):
    """log(x) / log(10)."""
    y = g.op("log", x)
    return g.op("mul", y, _scalar(g, 1.0 / math.log(10.0), y.dtype))


@composite("isfinite", 1, _unary_bool, kind="unary", differentiable=False)
def _isfinite(g, x, attrs):
    """not (isnan or isinf)."""
    return g.op("logical_not", g.op("logical_or", g.op("isnan", x), g.op("isinf", x)))


def _clamp_infer(metas, attrs):
    s, d = metas[0]
    lo, hi = attrs.get("min"), attrs.get("max")
    if lo is None and hi is None:
        raise ShapeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    for v in (lo, hi):
        if v is not None:
            d = D.result_type((d, len(s)), v) if len(s) else D.result_type((d, 1), v)
    return s, d


@composite("clamp", 1, _clamp_infer, attrs=("min", "max"), kind="unary")
def _clamp(g, x, attrs):
    """minimum(maximum(x, min), max)."""
    lo, hi = attrs.get("min"), attrs.get("max")
    _, d = _clamp_infer([(x.shape, x.dtype)], attrs)
    if x.dtype is not d:
        x = g.op("cast", x, dtype=d.name)
    if lo is not None:
        x = g.op("maximum", x, _scalar(g, lo, d))
    if hi is not None:
        x = g.op("minimum", x, _scalar(g, hi, d))
    return x


def _nan_to_num_infer(metas, attrs):
    return metas[0]


@composite("nan_to_num", 1, _nan_to_num_infer, attrs=("nan", "posinf", "neginf"), kind="unary")
def _nan_to_num(g, x, attrs):
    """Replace NaN by `nan`, +inf by `posinf`, -inf by `neginf` (defaults: 0 and the dtype's extremes); a complex
    tensor's real and imaginary parts each."""
    if x.dtype.is_complex:
        return g.op("complex", *(_nan_to_num(g, g.op(part, x), attrs) for part in ("real", "imag")))
    if not x.dtype.is_floating_point:
        return g.op("copy", x)
    big = D.finfo_max(x.dtype)
    nan = attrs.get("nan")
    nan = 0.0 if nan is None else nan  # (not `or`: nan=-0.0 keeps its sign)
    pos = attrs.get("posinf")
    neg = attrs.get("neginf")
    pos = big if pos is None else pos
    neg = -big if neg is None else neg
    y = g.op("where", g.op("isnan", x), _scalar(g, nan, x.dtype), x)
    inf = g.op("isinf", y)
    sgn = g.op("gt", y, _scalar(g, 0, x.dtype))
    return g.op("where", g.op("logical_and", inf, sgn), _scalar(g, pos, x.dtype),
                g.op("where", inf, _scalar(g, neg, x.dtype), y))


def _lerp_infer(metas, attrs):
    s = broadcast_many(*(m[0] for m in metas))
    d = binary_dtype(metas[:2])
    if d is D.bool_:  # the decomposition subtracts
        raise DTypeError("lerp is not supported for bool tensors")
    return s, d


@composite("lerp", 3, _lerp_infer)
def _lerp(g, a, b, w, attrs):
    """a + w * (b - a)."""
    return g.op("add", a, g.op("mul", w, g.op("sub", b, a)))


def _add_scaled_infer(metas, attrs):
    (sx, dx), (sy, dy), (sa, da) = metas
    if sa:
        raise ShapeError(f"add_scaled: alpha must be a 0-d tensor, got shape {list(sa)}")
    d = binary_dtype(metas[:2])
    if not d.is_floating_point:  # (torch refuses a float alpha for integers; the client keeps those on add + mul)
        raise DTypeError(f"add_scaled takes floating tensors, got {d.name}")
    if not da.is_floating_point:
        raise DTypeError(f"add_scaled: alpha must be a floating 0-d tensor, got {da.name}")
    return broadcast_many(sx, sy), d


@composite("add_scaled", 3, _add_scaled_infer)
def _add_scaled(g, x, y, alpha, attrs):
    """x + alpha * y, in the promoted float dtype (torch's ``add(x, y, alpha=)``; ``sub`` is alpha's negation,
    which is exact): one node where an update ``p.add_(g, alpha=-lr)`` would record a mul and an add."""
    _, d = _add_scaled_infer([(x.shape, x.dtype), (y.shape, y.dtype), (alpha.shape, alpha.dtype)], attrs)
    if y.dtype is not d:
        y = g.op("cast", y, dtype=d.name)
    if alpha.dtype is not d:
        alpha = g.op("cast", alpha, dtype=d.name)
    if x.dtype is not d:
        x = g.op("cast", x, dtype=d.name)
    return g.op("add", x, g.op("mul", y, alpha))


def _mean_infer(metas, attrs):
    (s, d), = metas
    if attrs.get("dtype") is not None:
        d = a_dtype(attrs)
    if not d.is_inexact:
        raise DTypeError(f"mean(): could not infer output dtype. Input dtype must be either a floating point "
                         f"or complex dtype. Got: {d.name.capitalize()}")
    return reduced(s, a_dims(attrs, len(s)), a_bool(attrs, "keepdim")), d


@composite("mean", 1, _mean_infer, attrs=("dims", "keepdim", "dtype"), kind="reduce")
def _mean(g, x, attrs):
    """sum(x, dims) / count."""
    _, d = _mean_infer([(x.shape, x.dtype)], attrs)
    dims = a_dims(attrs, len(x.shape))
    if x.dtype is not d:
        x = g.op("cast", x, dtype=d.name)
    n = numel(tuple(x.shape[i] for i in dims))
    s = g.op("sum", x, dims=list(dims), keepdim=a_bool(attrs, "keepdim"))
    return g.op("div", s, _scalar(g, n, d))


def _float_reduce_infer(num: str, default):
    """The rule of a float reduction over ``dims`` with one numeric attribute ``num`` (checked): var's correction,
    norm's p."""
    def infer(metas, attrs):
        (s, d), = metas
        a_num(attrs, num, default)
        # (a complex tensor's variance and norms are real)
        return reduced(s, a_dims(attrs, len(s)), a_bool(attrs, "keepdim")), D.to_real(D.float_of(d))
    return infer


_var_infer = _float_reduce_infer("correction", 1)


@composite("var", 1, _var_infer, attrs=("dims", "keepdim", "correction"), kind="reduce")
def _var(g, x, attrs):
    """sum((x - mean)^2) / (N - correction); a complex tensor's, sum(|x - mean|^2) / (N - correction), is its real
    part's plus its imaginary part's."""
    if x.dtype.is_complex:
        return g.op("add", *(g.op("var", g.op(part, x), **attrs) for part in ("real", "imag")))
    x = _to_float(g, x)
    dims = list(a_dims(attrs, len(x.shape)))
    n = numel(tuple(x.shape[i] for i in dims))
    mu = g.op("mean", x, dims=dims, keepdim=True)
    dev = g.op("sub", x, mu)
    ss = g.op("sum", g.op("mul", dev, dev), dims=dims, keepdim=a_bool(attrs, "keepdim"))
    denom = max(n - a_num(attrs, "correction", 1), 0)
    return g.op("div", ss, _scalar(g, float(denom), x.dtype))


@composite("std", 1, _var_infer, attrs=("dims", "keepdim", "correction"), kind="reduce")
def _std(g, x, attrs):
    """sqrt(var)."""
    return g.op("sqrt", g.op("var", x, **attrs))


@composite("logsumexp", 1, lambda m, a: (reduced(m[0][0], a_dims(a, len(m[0][0])), a_bool(a, "keepdim")),
                                         D.float_of(m[0][1])), attrs=("dims", "keepdim"), kind="reduce")
def _logsumexp(g, x, attrs):
    """max + log(sum(exp(x - max))), stable; infinite maxima are handled like torch."""
    x = _to_float(g, x)
    dims = list(a_dims(attrs, len(x.shape)))
    keep = a_bool(attrs, "keepdim")
    if any(x.shape[d] == 0 for d in dims if d < len(x.shape)):  # log of an empty sum (amax would refuse)
        return g.op("full", shape=list(reduced(x.shape, tuple(dims), keep)), dtype=x.dtype.name, value=-math.inf)
    m = g.op("amax", x, dims=dims, keepdim=True)
    m = g.op("where", g.op("isinf", m), _scalar(g, 0.0, x.dtype), m)
    s = g.op("sum", g.op("exp", g.op("sub", x, m)), dims=dims, keepdim=keep)
    mm = m if keep else g.op("reshape", m, shape=list(reduced(x.shape, tuple(dims), False)))
    return g.op("add", g.op("log", s), mm)


def _softmax_infer(metas, attrs):
    (s, d), = metas
    norm_dim(a_int(attrs, "dim"), len(s))
    return s, D.float_of(d)


@composite("softmax", 1, _softmax_infer, attrs=("dim",))
def _softmax(g, x, attrs):
    """exp(x - max) / sum(exp(x - max)) along dim."""
    x = _to_float(g, x)
    dim = [a_int(attrs, "dim")]
    if numel(x.shape) == 0:  # nothing to normalise (amax over an empty dim would refuse)
        return g.op("full", shape=list(x.shape), dtype=x.dtype.name, value=0)
    e = g.op("exp", g.op("sub", x, g.op("amax", x, dims=dim, keepdim=True)))
    return g.op("div", e, g.op("sum", e, dims=dim, keepdim=True))


@composite("log_softmax", 1, _softmax_infer, attrs=("dim",))
def _log_softmax(g, x, attrs):
    """x - logsumexp(x) along dim."""
    x = _to_float(g, x)
    return g.op("sub", x, g.op("logsumexp", x, dims=[a_int(attrs, "dim")], keepdim=True))


def _log_softmax_grad_infer(metas, attrs):
    (sg, dg), (sy, dy) = metas
    if tuple(sg) != tuple(sy):
        raise ShapeError(f"log_softmax_grad: the output gradient {list(sg)} and the output {list(sy)} differ in shape")
    if not (dg.is_floating_point and dy.is_floating_point):
        raise DTypeError(f"log_softmax_grad: expected floating tensors, got {dg.name} and {dy.name}")
    norm_dim(a_int(attrs, "dim"), len(sy))
    return sg, binary_dtype(metas)


@composite("log_softmax_grad", 2, _log_softmax_grad_infer, attrs=("dim",))
def _log_softmax_grad(g, gy, y, attrs):
    """The input gradient of ``y = log_softmax(x, dim)`` from the output's ``gy``: gy - exp(y) * sum(gy) along
    dim (log_softmax's VJP rule as one op: a CPU kernel reads each element once where the decomposition's four ops
    make four passes, a language model's [700, 7115] decoder output)."""
    d = [a_int(attrs, "dim")]
    return g.op("sub", gy, g.op("mul", g.op("exp", y), g.op("sum", gy, dims=d, keepdim=True)))


@composite("norm", 1, _float_reduce_infer("p", 2), attrs=("p", "dims", "keepdim"), kind="reduce")
def _norm(g, x, attrs):
    """Vector p-norm: (sum |x|^p)^(1/p); p = inf / -inf give max / min of |x| (a complex tensor's: its modulus's)."""
    if x.dtype.is_complex:
        return _norm(g, g.op("abs", x), attrs)
    x = _to_float(g, x)
    p = a_num(attrs, "p", 2)
    dims = list(a_dims(attrs, len(x.shape)))
    keep = a_bool(attrs, "keepdim")
    ax = g.op("abs", x)
    if p == math.inf:
        return g.op("amax", ax, dims=dims, keepdim=keep)
    if p == -math.inf:
        return g.op("amin", ax, dims=dims, keepdim=keep)
    if p == 0:
        return g.op("sum", g.op("cast", g.op("ne", x, _scalar(g, 0, x.dtype)), dtype=x.dtype.name),
                    dims=dims, keepdim=keep)
    if p == 1:
        return g.op("sum", ax, dims=dims, keepdim=keep)
    if p == 2:
        return g.op("sqrt", g.op("sum", g.op("mul", x, x), dims=dims, keepdim=keep))
    s = g.op("sum", g.op("pow", ax, _scalar(g, float(p), x.dtype)), dims=dims, keepdim=keep)
    return g.op("pow", s, _scalar(g, 1.0 / p, x.dtype))


def _allany_infer(metas, attrs):
    (s, d), = metas
    return reduced(s, a_dims(attrs, len(s)), a_bool(attrs, "keepdim")), D.bool_


@composite("all", 1, _allany_infer, attrs=("dims", "keepdim"), kind="reduce", differentiable=False)
def _all(g, x, attrs):
    """amin of x read as bool."""
    b = x if x.dtype is D.bool_ else g.op("ne", x, _scalar(g, 0, x.dtype))
    if numel(x.shape) == 0:
        return g.op("full", shape=list(_allany_infer([(x.shape, x.dtype)], attrs)[0]), dtype="bool", value=True)
    return g.op("amin", b, **attrs)


@composite("any", 1, _allany_infer, attrs=("dims", "keepdim"), kind="reduce", differentiable=False)
def _any(g, x, attrs):
    """amax of x read as bool."""
    b = x if x.dtype is D.bool_ else g.op("ne", x, _scalar(g, 0, x.dtype))
    if numel(x.shape) == 0:
        return g.op("full", shape=list(_allany_infer([(x.shape, x.dtype)], attrs)[0]), dtype="bool",
                    value=False)
    return g.op("amax", b, **attrs)


def _tri_infer(metas, attrs):
    (s, d), = metas
    a_int(attrs, "diagonal", 0)
    if len(s) < 2:
        raise ShapeError("tril/triu: input tensor must have at least 2 dimensions")
    return s, d


def _tri(g, x, attrs, lower: bool):
    n, m = x.shape[-2], x.shape[-1]
    k = a_int(attrs, "diagonal", 0)
    rows = g.op("reshape", g.op("arange", start=0, step=1, n=n, dtype="int64"), shape=[n, 1])
    cols = g.op("arange", start=0, step=1, n=m, dtype="int64")
    diff = g.op("sub", cols, rows)  # [n, m]: col - row
    mask = g.op("le" if lower else "ge", diff, _scalar(g, k, D.int64))
    return g.op("where", mask, x, _scalar(g, 0, x.dtype))


@composite("tril", 1, _tri_infer, attrs=("diagonal",))
def _tril(g, x, attrs):
    """Keep elements with col - row <= diagonal, zero the rest."""
    return _tri(g, x, attrs, True)


@composite("triu", 1, _tri_infer, attrs=("diagonal",))
def _triu(g, x, attrs):
    """Keep elements with col - row >= diagonal, zero the rest."""
    return _tri(g, x, attrs, False)


def _eye_infer(metas, attrs):
    return check_shape((a_int(attrs, "n"), a_int(attrs, "m"))), a_dtype(attrs)


@composite("eye", 0, _eye_infer, attrs=("n", "m", "dtype"), kind="creation", differentiable=False)
def _eye(g, attrs):
    """Ones on the diagonal: arange(n)[:, None] == arange(m)."""
    n, m = a_int(attrs, "n"), a_int(attrs, "m")
    rows = g.op("reshape", g.op("arange", start=0, step=1, n=n, dtype="int64"), shape=[n, 1])
    cols = g.op("arange", start=0, step=1, n=m, dtype="int64")
    return g.op("cast", g.op("eq", rows, cols), dtype=attrs["dtype"])


@composite("relu6", 1, lambda m, a: _clamp_infer(m, {"min": 0, "max": 6}), kind="unary")
def _relu6(g, x, attrs):
    """min(max(x, 0), 6)."""
    return g.op("clamp", x, min=0, max=6)


def _add_n_infer(metas, attrs):
    """``add_n``: at least two inputs, all of one shape and one floating or complex dtype; the output is theirs."""
    if len(metas) < 2:
        raise ShapeError(f"add_n takes at least 2 inputs, got {len(metas)}")
    (s, d) = metas[0]
    if not d.is_inexact:
        raise DTypeError(f"add_n: the inputs must be floating or complex, got {d.name}")
    for i, (si, di) in enumerate(metas):
        if di is not d:
            raise DTypeError(f"add_n: every input must be {d.name}, got {di.name} for input {i}")
        if tuple(si) != tuple(s):
            raise ShapeError(f"add_n: every input must have shape {list(s)}, got {list(si)} for input {i}")
    return tuple(s), d


@composite("add_n", None, _add_n_infer)
def _add_n(g, *rest):
    """The sum of its inputs, added left to right: ``((x0 + x1) + x2) + ...`` (rounded after each addition, as
    that chain of ``add`` s). One op where a backward pass summed a weight's gradient from each use of it (a
    recurrent cell's, once a time step) with an ``add`` each."""
    *xs, _attrs = rest
    s = xs[0]
    for x in xs[1:]:
        s = g.op("add", s, x)
    return s
