"""Neural-network composites of ``tw.nn.functional``: activations, layer/RMS normalisation and ``linear``.
"""

from __future__ import annotations

import math

from .. import dtypes as D
from ..errors import DTypeError, ProtocolError, ShapeError
from ..shapes import broadcast, numel
from .attrs import a_int, a_num, a_str
from .elementwise import _unary_float, binary_dtype
from .table import _scalar, _to_float, composite


@composite("gelu", 1, lambda m, a: (a_str(a, "approximate", ("none", "tanh")), _unary_float(m, a))[1],
           attrs=("approximate",), kind="unary")
def _gelu(g, x, attrs):
    """x * Phi(x): 0.5 x (1 + erf(x / sqrt 2)); approximate="tanh": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    x = _to_float(g, x)
    d = x.dtype
    if attrs.get("approximate", "none") == "tanh":
        x3 = g.op("mul", g.op("mul", x, x), x)
        inner = g.op("mul", g.op("add", x, g.op("mul", x3, _scalar(g, 0.044715, d))),
                     _scalar(g, math.sqrt(2.0 / math.pi), d))
        t = g.op("tanh", inner)
    else:
        t = g.op("erf", g.op("mul", x, _scalar(g, 1.0 / math.sqrt(2.0), d)))
    return g.op("mul", g.op("mul", x, _scalar(g, 0.5, d)), g.op("add", t, _scalar(g, 1.0, d)))


def _grad_like_infer(what: str, nin: int):
    """Inference of a backward op whose inputs are the output gradient then forward tensors of its shape: the result
    is the gradient's shape and (floating) dtype."""
    def infer(metas, attrs):
        if len(metas) != nin:
            raise ProtocolError(f"{what} takes {nin} inputs, got {len(metas)}")
        (sg, dg) = metas[0]
        if not dg.is_floating_point:
            raise DTypeError(f"{what}: the output gradient must be floating, got {dg.name}")
        for s, _ in metas[1:]:
            if tuple(s) != tuple(sg):
                raise ShapeError(f"{what}: the inputs should all have the gradient's shape {list(sg)}, got {list(s)}")
        return tuple(sg), dg
    return infer


@composite("gelu_grad", 2, _grad_like_infer("gelu_grad", 2))
def _gelu_grad(g, gy, x, attrs):
    """Exact GELU's input gradient from the output gradient and the input: ``gy * (Phi(x) + x * phi(x))``, Phi the
    normal CDF (``(erf(x / sqrt 2) + 1) / 2``) and phi its density, in the gradient's dtype. One op where the
    decomposition is ~9 (the backward of every exact ``gelu``)."""
    d = gy.dtype
    x = x if x.dtype is d else g.op("cast", x, dtype=d.name)
    cdf = g.op("mul", g.op("add", g.op("erf", g.op("mul", x, _scalar(g, 1 / math.sqrt(2.0), d))), _scalar(g, 1, d)),
               _scalar(g, 0.5, d))
    pdf = g.op("mul", g.op("exp", g.op("mul", g.op("mul", x, x), _scalar(g, -0.5, d))),
               _scalar(g, 1 / math.sqrt(2 * math.pi), d))
    return g.op("mul", gy, g.op("add", cdf, g.op("mul", x, pdf)))


@composite("silu", 1, _unary_float, kind="unary")
def _silu(g, x, attrs):
    """x * sigmoid(x)."""
    x = _to_float(g, x)
    return g.op("mul", x, g.op("sigmoid", x))


def _leaky_infer(metas, attrs):
    a_num(attrs, "negative_slope", 0.01)
    return _unary_float(metas, attrs)


@composite("leaky_relu", 1, _leaky_infer, attrs=("negative_slope",), kind="unary")
def _leaky_relu(g, x, attrs):
    """where(x > 0, x, negative_slope * x)."""
    x = _to_float(g, x)
    slope = a_num(attrs, "negative_slope", 0.01)
    zero = _scalar(g, 0, x.dtype)
    return g.op("where", g.op("gt", x, zero), x, g.op("mul", x, _scalar(g, slope, x.dtype)))


def _softplus_infer(metas, attrs):
    a_num(attrs, "beta", 1.0)
    a_num(attrs, "threshold", 20.0)
    return _unary_float(metas, attrs)


@composite("softplus", 1, _softplus_infer, attrs=("beta", "threshold"), kind="unary")
def _softplus(g, x, attrs):
    """log1p(exp(beta x)) / beta, and x itself where beta x > threshold (as torch)."""
    x = _to_float(g, x)
    beta, thr = a_num(attrs, "beta", 1.0), a_num(attrs, "threshold", 20.0)
    bx = g.op("mul", x, _scalar(g, beta, x.dtype))
    big = g.op("gt", bx, _scalar(g, thr, x.dtype))
    safe = g.op("where", big, _scalar(g, 0.0, x.dtype), bx)
    sp = g.op("div", g.op("log1p", g.op("exp", safe)), _scalar(g, beta, x.dtype))
    return g.op("where", big, x, sp)



def _norm_last_infer(metas, attrs):
    (s, d), = metas
    n = a_int(attrs, "ndim", 1)
    a_num(attrs, "eps", 1e-5)
    if not 0 < n <= len(s):
        raise ShapeError(f"normalisation over the last {n} dims of a tensor of shape {list(s)}")
    return s, D.float_of(d)


@composite("layer_norm", 1, _norm_last_infer, attrs=("ndim", "eps"))
def _layer_norm(g, x, attrs):
    """(x - mean) / sqrt(var + eps) over the last `ndim` dims (biased variance; the affine part is separate)."""
    x = _to_float(g, x)
    n = a_int(attrs, "ndim", 1)
    dims = list(range(len(x.shape) - n, len(x.shape)))
    mu = g.op("mean", x, dims=dims, keepdim=True)
    xc = g.op("sub", x, mu)
    var = g.op("mean", g.op("mul", xc, xc), dims=dims, keepdim=True)
    return g.op("mul", xc, g.op("rsqrt", g.op("add", var, _scalar(g, a_num(attrs, "eps", 1e-5), x.dtype))))


def _layer_norm_grad_infer(metas, attrs):
    out = _grad_like_infer("layer_norm_grad", 3)(metas, attrs)
    _norm_last_infer(metas[1:2], attrs)
    return out


@composite("layer_norm_grad", 3, _layer_norm_grad_infer, attrs=("ndim", "eps"))
def _layer_norm_grad(g, gy, x, y, attrs):
    """``layer_norm``'s input gradient from the output gradient, the input and the output y:
    ``rstd * (gy - mean(gy) - y * mean(gy * y))`` over the last `ndim` dims, rstd recomputed from x, in the gradient's
    dtype. One op where the decomposition is ~14 (the backward of every ``layer_norm``)."""
    d = gy.dtype
    x, y = (t if t.dtype is d else g.op("cast", t, dtype=d.name) for t in (x, y))
    n = a_int(attrs, "ndim", 1)
    dims = list(range(len(x.shape) - n, len(x.shape)))

    def mean(t):
        return g.op("mean", t, dims=dims, keepdim=True)
    xc = g.op("sub", x, mean(x))
    rstd = g.op("rsqrt", g.op("add", mean(g.op("mul", xc, xc)), _scalar(g, a_num(attrs, "eps", 1e-5), d)))
    inner = g.op("sub", g.op("sub", gy, mean(gy)), g.op("mul", y, mean(g.op("mul", gy, y))))
    return g.op("mul", rstd, inner)


@composite("rms_norm", 1, _norm_last_infer, attrs=("ndim", "eps"))
def _rms_norm(g, x, attrs):
    """x / sqrt(mean(x^2) + eps) over the last `ndim` dims (the weight is separate)."""
    x = _to_float(g, x)
    n = a_int(attrs, "ndim", 1)
    dims = list(range(len(x.shape) - n, len(x.shape)))
    ms = g.op("mean", g.op("mul", x, x), dims=dims, keepdim=True)
    return g.op("mul", x, g.op("rsqrt", g.op("add", ms, _scalar(g, a_num(attrs, "eps", 1e-5), x.dtype))))


def _linear_infer(metas, attrs):
    if len(metas) not in (2, 3):
        raise ProtocolError(f"op linear takes 2 or 3 inputs (input, weight[, bias]), got {len(metas)}")
    (sx, dx), (sw, dw) = metas[0], metas[1]
    if len(sw) != 2 or not sx:
        raise ShapeError(f"linear: expected a 2-D weight and an input with at least 1 dim, got input {list(sx)} "
                         f"and weight {list(sw)}")
    if sx[-1] != sw[1]:
        raise ShapeError(f"mat1 and mat2 shapes cannot be multiplied ({numel(sx[:-1])}x{sx[-1]} and "
                         f"{sw[1]}x{sw[0]})")
    if dx is not dw:
        raise DTypeError(f"mat1 and mat2 must have the same dtype, but got {dx.name} and {dw.name}")
    out = sx[:-1] + (sw[0],)
    if len(metas) == 3:
        sb, db = metas[2]
        if broadcast(out, sb) != out:
            raise ShapeError(f"linear: bias of shape {list(sb)} does not broadcast to the output {list(out)}")
        return out, binary_dtype([(out, dx), (sb, db)])
    return out, dx


@composite("linear", None, _linear_infer)
def _linear(g, x, w, *rest):
    """input @ weight^T (+ bias), as torch's F.linear: a 16-bit float result is rounded once, after the bias is
    added to the float32 product (rounding the product first turns a near-cancelling sum into an exact 0, which a
    ReLU behind it then gates the other way than torch)."""
    *b, attrs = rest
    wt = g.op("permute", w, dims=[1, 0])
    if not b:
        return g.op("matmul", x, wt)
    dt = binary_dtype([(x.shape, x.dtype), (b[0].shape, b[0].dtype)])
    if dt not in D.HALF:
        return g.op("add", g.op("matmul", x, wt), b[0])
    f32 = D.float32.name
    y = g.op("matmul", g.op("cast", x, dtype=f32), g.op("cast", wt, dtype=f32))
    return g.op("cast", g.op("add", y, g.op("cast", b[0], dtype=f32)), dtype=dt.name)
