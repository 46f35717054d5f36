"""VJP rules: for every differentiable op of the op table, how the gradient of its output becomes
gradients of its inputs, written once, against a :class:`~tensorwire.protocol.graph.Builder`.

A rule is ``rule(c) -> [grad or None per input]`` where ``c`` is a :class:`Ctx`: ``c.x`` are the
inputs, ``c.y`` the output, ``c.g`` the output's gradient (all :class:`T`, symbolic values that
record ops through the builder when combined: ``c.g * c.y``), ``c.a`` the attributes and
``c.needs[i]`` whether input ``i`` needs a gradient. Rules may return gradients with the broadcast
shape or the wider dtype of the output: :func:`fit` sums them back to the input's shape and casts
them to its dtype. Composite ops without a rule get their VJP through their decomposition
(:func:`vjp`), so an op added to the table with a decomposition is differentiable at once; the
numerically sensitive composites (softmax, log_softmax, logsumexp, norm, var/std, sigmoid ...) have
direct rules. A rule may also be declared with its op (``OpDef.vjp``, as the binary arithmetic ops' are in
``protocol/ops/elementwise.py``); a rule registered here takes precedence.
"""

from __future__ import annotations

import math

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DTypeError, ProtocolError
from tensorwire.protocol.graph import Builder, Value
from tensorwire.protocol.ops import OPS, a_bool, a_dims, a_int, a_num, get_op
from tensorwire.protocol.ops.recurrent import GRAD_PARTS
from tensorwire.protocol.shapes import numel

RULES: dict = {}


def rule(*names):
    """Register the decorated function as the VJP rule of ``names``."""
    def deco(fn):
        for n in names:
            if n in RULES:
                raise ValueError(f"VJP rule for {n!r} defined twice")
            RULES[n] = fn
        return fn
    return deco


def has_vjp(op: str) -> bool:
    """Whether ``op`` can be differentiated (a rule, or a decomposition to go through)."""
    return op in RULES or (op in OPS and (OPS[op].vjp is not None or OPS[op].decompose is not None))


# ----------------------------------------------------------------------------------------------
# symbolic values


class T:
    """A value in a builder, with operators that record ops (``a * b``, ``a.sum(...)``)."""

    __slots__ = ("b", "v")

    def __init__(self, b: Builder, v: Value):
        self.b = b
        self.v = v

    @property
    def shape(self):
        return self.v.shape

    @property
    def dtype(self) -> D.DType:
        return self.v.dtype

    @property
    def ndim(self) -> int:
        return len(self.v.shape)

    def _o(self, other) -> Value:
        if isinstance(other, T):
            return other.v
        return self.b.op("full", shape=[], dtype=self.dtype.name, value=other)

    def op(self, name: str, *others, **attrs) -> T:
        return T(self.b, self.b.op(name, self.v, *(self._o(o) for o in others), **attrs))

    def __add__(self, o):
        return self.op("add", o)

    def __radd__(self, o):
        return T(self.b, self.b.op("add", self._o(o), self.v))

    def __sub__(self, o):
        return self.op("sub", o)

    def __rsub__(self, o):
        return T(self.b, self.b.op("sub", self._o(o), self.v))

    def __mul__(self, o):
        return self.op("mul", o)

    def __rmul__(self, o):
        return T(self.b, self.b.op("mul", self._o(o), self.v))

    def __truediv__(self, o):
        return self.op("div", o)

    def __rtruediv__(self, o):
        return T(self.b, self.b.op("div", self._o(o), self.v))

    def __neg__(self):
        return self.op("neg")

    def __gt__(self, o):
        return self.op("gt", o)

    def __ge__(self, o):
        return self.op("ge", o)

    def __lt__(self, o):
        return self.op("lt", o)

    def __le__(self, o):
        return self.op("le", o)

    def eq(self, o):
        return self.op("eq", o)

    def __and__(self, o):
        return self.op("logical_and", o)

    def sum(self, dims, keepdim=False):
        return self.op("sum", dims=list(dims), keepdim=keepdim)

    def reshape(self, shape):
        """``self`` reshaped; a reshape of a reshape is one reshape of the first's input (where the builder says
        how values were made: ``producer``), and no op at all where that input has the shape."""
        shape = list(shape)
        if list(self.shape) == shape:
            return self
        producer = getattr(self.b, "producer", None)
        made = producer(self.v) if producer is not None else None
        if made is not None and made[0] == "reshape":
            src = T(self.b, made[1][0])
            return src if list(src.shape) == shape else src.op("reshape", shape=shape)
        return self.op("reshape", shape=shape)

    def expand(self, shape):
        return self if tuple(self.shape) == tuple(shape) else self.op("expand", shape=list(shape))

    def permute(self, dims):
        return self if list(dims) == list(range(self.ndim)) else self.op("permute", dims=list(dims))

    def cast(self, dtype: D.DType):
        return self if self.dtype is dtype else self.op("cast", dtype=dtype.name)

    def flip(self, dims):
        return self.op("flip", dims=list(dims))

    def pad(self, pads, value=0):
        return self if not any(pads) else self.op("pad", pads=list(pads), value=value)


def where(c: T, a, b) -> T:
    """where(c, a, b) with Python numbers allowed for a or b (given a's or b's dtype)."""
    ref = a if isinstance(a, T) else b
    av = a.v if isinstance(a, T) else ref._o(a)
    bv = b.v if isinstance(b, T) else ref._o(b)
    return T(c.b, c.b.op("where", c.v, av, bv))


def zeros(b: Builder, shape, dtype: D.DType) -> T:
    z = T(b, b.op("full", shape=[], dtype=dtype.name, value=0))
    return z.expand(shape)


def unreduce(g: T, shape, dims, keepdim: bool) -> T:
    """Broadcast a reduction's gradient back over the reduced dims of ``shape``."""
    if not keepdim:
        g = g.reshape([1 if i in dims else s for i, s in enumerate(shape)])
    return g.expand(shape)


def fit(g: T, shape, dtype: D.DType) -> T:
    """Sum ``g`` down to ``shape`` (undoing broadcasting) and cast it to ``dtype``."""
    gs = tuple(g.shape)
    shape = tuple(shape)
    if gs != shape:
        lead = len(gs) - len(shape)
        if lead < 0:
            raise ProtocolError(f"gradient of shape {list(gs)} does not fit a value of shape {list(shape)}")
        dims = list(range(lead)) + [lead + i for i, s in enumerate(shape) if s == 1 and gs[lead + i] != 1]
        if dims:
            g = g.sum(dims, keepdim=True)
        g = g.reshape(shape)
    return g.cast(dtype)


class Ctx:
    """What a rule sees: inputs ``x``, output ``y``, output gradient ``g``, attributes ``a``, ``needs``."""

    __slots__ = ("b", "op", "x", "y", "g", "a", "needs", "devs", "dev")

    def __init__(self, b, op, x, y, g, a, needs, devs=None, dev=None):
        self.b, self.op, self.x, self.y, self.g, self.a, self.needs = b, op, x, y, g, a or {}, needs
        self.devs = devs  # device index of each input (None: same as the node)
        self.dev = dev

    def dims(self, ndim=None):
        return a_dims(self.a, self.x[0].ndim if ndim is None else ndim)

    @property
    def keepdim(self) -> bool:
        return a_bool(self.a, "keepdim")

    def scalar(self, v, dtype=None):
        return T(self.b, self.b.op("full", shape=[], dtype=(dtype or self.g.dtype).name, value=v))

    @property
    def higher(self) -> bool:
        """Whether the gradients are to be differentiated again (``create_graph``: ``BackwardBuilder.graph``)."""
        return getattr(self.b, "graph", False)

    def masked(self, mask: T, g: T, other, on: T) -> T:
        """``where(mask, g, other)``, a gradient given by a mask of ``on`` (an input or the output): when the
        gradients are differentiated again (:attr:`higher`) kept connected to ``on`` with a zero derivative, as
        torch's ``threshold_backward``/``hardtanh_backward``/``leaky_relu_backward`` are (a gradient penalty through
        a ReLU network: the second derivative is zeros, and the first layer's bias gets a zero gradient, not none).
        ``sign(on) * 0`` is that zero: finite where ``on`` is infinite."""
        out = where(mask, g, other)
        return out + on.op("sign") * 0 if self.higher else out

    @staticmethod
    def where(cond: T, a, b) -> T:
        """:func:`where` for the rules declared with their ops (``OpDef.vjp``), which do not import this module."""
        return where(cond, a, b)


# ----------------------------------------------------------------------------------------------
# elementwise unary composites (the primitives' rules are declared with their ops: protocol/ops/elementwise.py)

@rule("rsqrt")
def _rsqrt(c):
    return [c.g * c.y * c.y * c.y * -0.5]


@rule("sigmoid")
def _sigmoid(c):
    return [c.g * c.y * (1 - c.y)]


@rule("square")
def _square(c):
    return [c.g * c.x[0] * 2]


@rule("exp2")
def _exp2(c):
    return [c.g * c.y * math.log(2.0)]


@rule("log2")
def _log2(c):
    return [c.g / (c.x[0] * math.log(2.0))]


@rule("log10")
def _log10(c):
    return [c.g / (c.x[0] * math.log(10.0))]


@rule("relu")
def _relu(c):
    return [c.masked(c.y > 0, c.g, 0, c.y)]


@rule("relu6")
def _relu6(c):
    x = c.x[0]
    return [c.masked((x > 0) & (x < 6), c.g, 0, c.y)]


@rule("clamp")
def _clamp(c):
    x = c.x[0]
    lo, hi = c.a.get("min"), c.a.get("max")
    mask = None
    if lo is not None:
        mask = x >= lo
    if hi is not None:
        m = x <= hi
        mask = m if mask is None else mask & m
    return [c.masked(mask, c.g, 0, c.y)]


@rule("nan_to_num")
def _nan_to_num(c):
    return [where(c.x[0].op("isfinite"), c.g, 0)]


@rule("cast", "copy")
def _cast(c):
    g = c.g
    if c.op == "copy" and c.devs and c.devs[0] != c.dev:  # a transfer: the gradient goes back
        b = c.b
        b.dev = c.devs[0]
        g = T(b, b.op("copy", g.v, shape=list(g.shape), dtype=g.dtype.name))
    return [g]


# ----------------------------------------------------------------------------------------------
# elementwise binary

# the binary arithmetic ops' rules are declared with the ops (``OpDef.vjp`` in protocol/ops/elementwise.py)


@rule("where")
def _where(c):
    cond = c.x[0]
    return [None, where(cond, c.g, 0) if c.needs[1] else None, where(cond, 0, c.g) if c.needs[2] else None]


@rule("add_n")
def _add_n(c):
    """Each input's gradient is the output's (the sum's, as ``add``'s)."""
    return [c.g if need else None for need in c.needs]


@rule("lerp")
def _lerp(c):
    a, b, w = c.x
    return [c.g * (1 - w) if c.needs[0] else None, c.g * w if c.needs[1] else None,
            c.g * (b - a) if c.needs[2] else None]


# ----------------------------------------------------------------------------------------------
# reductions and scans

@rule("sum")
def _sum(c):
    x = c.x[0]
    return [unreduce(c.g, x.shape, c.dims(), c.keepdim)]


@rule("mean")
def _mean(c):
    x = c.x[0]
    dims = c.dims()
    n = numel(tuple(x.shape[i] for i in dims))
    return [unreduce(c.g, x.shape, dims, c.keepdim) / float(n)]


@rule("amax", "amin")
def _amax(c):
    x = c.x[0]
    dims, keep = c.dims(), c.keepdim
    y = unreduce(c.y, x.shape, dims, keep)
    mask = x.eq(y).cast(c.g.dtype)
    count = mask.sum(dims, keepdim=True)
    return [unreduce(c.g, x.shape, dims, keep) * mask / count]


def _exclusive_cumprod(x: T, dim: int) -> T:
    """out[i] = prod(x[:i]) along ``dim`` (1 at i = 0)."""
    pads = [0] * (2 * x.ndim)
    pads[2 * dim], pads[2 * dim + 1] = 1, -1
    return x.pad(pads, value=1).op("cumprod", dim=dim)


@rule("prod")
def _prod(c):
    x = c.x[0]
    if x.ndim == 0:
        return [c.g]
    dims = c.dims()
    g = unreduce(c.g, x.shape, dims, c.keepdim)
    rest = [i for i in range(x.ndim) if i not in dims]
    perm = rest + list(dims)
    flat = [x.shape[i] for i in rest] + [numel(tuple(x.shape[i] for i in dims))]
    xp = x.cast(c.g.dtype).permute(perm).reshape(flat)
    last = len(flat) - 1
    left = _exclusive_cumprod(xp, last)
    right = _exclusive_cumprod(xp.flip([last]), last).flip([last])
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    others = (left * right).reshape([x.shape[i] for i in perm]).permute(inv)
    return [g * others]


def _rev_cumsum(x: T, d: int) -> T:
    """out[i] = sum(x[i:]) along ``d``."""
    return x.flip([d]).op("cumsum", dim=d).flip([d])


@rule("cumsum")
def _cumsum(c):
    d = a_int(c.a, "dim") % max(c.x[0].ndim, 1)
    if c.x[0].ndim == 0:
        return [c.g]
    return [_rev_cumsum(c.g, d)]


@rule("sign", "floor", "ceil", "round", "trunc", "floor_divide")
def _piecewise_constant(c):
    """0 for every input (torch's: the outputs require grad, with a zero gradient; the steps' deltas are not
    taken)."""
    return [zeros(c.b, x.shape, c.g.dtype) if need else None for x, need in zip(c.x, c.needs)]


@rule("cumprod")
def _cumprod(c):
    """d y_j / d x_i = prod_{k <= j, k != i} x_k, as torch's cumprod_backward: before the first zero along ``dim``,
    sum_{j >= i} g_j y_j / x_i; at the first zero z, sum_{j >= z} g_j y'_j with y' the cumprod of x with that zero
    made 1; after it, 0 (every product there keeps the zero)."""
    x = c.x[0]
    if x.ndim == 0:
        return [c.g]
    d = a_int(c.a, "dim") % x.ndim
    xf = x.cast(c.g.dtype)
    zero = xf.eq(0.0)
    seen = zero.cast(D.int64).op("cumsum", dim=d)
    before = seen.eq(0)
    first = zero & seen.eq(1)
    at_before = _rev_cumsum(c.g * c.y, d) / where(before, xf, 1.0)
    at_first = _rev_cumsum(c.g * where(first, 1.0, xf).op("cumprod", dim=d), d)
    return [where(before, at_before, where(first, at_first, 0.0))]


@rule("var", "std")
def _var(c):
    x = c.x[0]
    dims, keep = c.dims(), c.keepdim
    n = numel(tuple(x.shape[i] for i in dims))
    denom = max(n - a_num(c.a, "correction", 1), 0)
    xf = x.cast(c.g.dtype)
    dev = xf - xf.op("mean", dims=list(dims), keepdim=True)
    g = unreduce(c.g, x.shape, dims, keep)
    if c.op == "var":
        return [g * dev * (2.0 / denom if denom else math.inf)]
    return [g * dev / (unreduce(c.y, x.shape, dims, keep) * float(denom))]


@rule("logsumexp")
def _logsumexp(c):
    x = c.x[0]
    dims, keep = c.dims(), c.keepdim
    y = unreduce(c.y, x.shape, dims, keep)
    return [unreduce(c.g, x.shape, dims, keep) * (x.cast(c.g.dtype) - y).op("exp")]


@rule("softmax")
def _softmax(c):
    d = [a_int(c.a, "dim")]
    gy = c.g * c.y
    return [gy - c.y * gy.sum(d, keepdim=True)]


@rule("log_softmax")
def _log_softmax(c):
    """One op, ``log_softmax_grad(g, y)``: g - exp(y) * sum(g) (a composite: other backends, and double backward, go
    through that decomposition)."""
    return [c.g.op("log_softmax_grad", c.y, dim=a_int(c.a, "dim"))]


@rule("norm")
def _norm(c):
    x = c.x[0].cast(c.g.dtype)
    p = a_num(c.a, "p", 2)
    dims, keep = c.dims(), c.keepdim
    g = unreduce(c.g, x.shape, dims, keep)
    if p == 0:
        return [g * 0.0]
    if p == 1:
        return [g * x.op("sign")]
    y = unreduce(c.y, x.shape, dims, keep)
    if p in (math.inf, -math.inf):
        ax = x.op("abs")
        mask = ax.eq(y).cast(g.dtype)
        return [g * x.op("sign") * mask / mask.sum(dims, keepdim=True)]
    if p == 2:
        return [where(y.eq(0), 0, g * x / y)]
    ax = x.op("abs")
    # torch's norm_backward: sign(x) |x|^(p-1), 0 where x is (|x|^(p-1) is inf there for p < 1); for p < 1 times
    # y^(1-p) (0 where the norm is: a negative p's norm of a vector with a zero), else over y^(p-1), 0 at y = 0
    if p < 2:
        scaled = x.op("sign") * where(x.eq(0.0), 0.0, ax.op("pow", float(p) - 1))
    else:
        scaled = x * ax.op("pow", float(p) - 2)
    if p < 1:
        return [scaled * g * y.op("pow", 1.0 - float(p))]
    return [where(y.eq(0), 0, g * scaled / y.op("pow", float(p) - 1))]


@rule("silu")
def _silu(c):
    x = c.x[0].cast(c.g.dtype)
    s = x.op("sigmoid")
    return [c.g * s * (1 + x * (1 - s))]


@rule("gelu")
def _gelu(c):
    """Exact GELU: g * (Phi(x) + x phi(x)) as one ``gelu_grad`` op (a composite of that math); the tanh approximation
    goes through the forward's decomposition."""
    if c.a.get("approximate", "none") != "none":
        return NotImplemented
    return [c.g.op("gelu_grad", c.x[0])]


@rule("leaky_relu")
def _leaky_relu(c):
    """From the output for a slope >= 0 (its sign is the input's), as torch's: an in-place ``leaky_relu_`` (a
    DCGAN's discriminator) overwrites the input, which the rule must then not read."""
    slope = a_num(c.a, "negative_slope", 0.01)
    v = c.y if slope >= 0 else c.x[0]
    return [c.masked(v > 0, c.g, c.g * slope, v)]


@rule("softplus")
def _softplus(c):
    beta, thr = a_num(c.a, "beta", 1.0), a_num(c.a, "threshold", 20.0)
    bx = c.x[0].cast(c.g.dtype) * beta
    return [where(bx > thr, c.g, c.g * bx.op("sigmoid"))]


def _last_dims(c):
    n = a_int(c.a, "ndim", 1)
    nd = c.x[0].ndim
    return list(range(nd - n, nd))


@rule("layer_norm")
def _layer_norm(c):
    """rstd * (g - mean(g) - y * mean(g * y)) with y the output: one ``layer_norm_grad`` op (a composite of that math:
    double backward goes through its decomposition)."""
    return [c.g.op("layer_norm_grad", c.x[0], c.y, ndim=a_int(c.a, "ndim", 1), eps=a_num(c.a, "eps", 1e-5))]


@rule("rms_norm")
def _rms_norm(c):
    """r * (g - y * mean(g * y)) with r = rsqrt(mean(x^2) + eps) and y the output."""
    dims = _last_dims(c)
    x = c.x[0].cast(c.g.dtype)
    r = ((x * x).op("mean", dims=dims, keepdim=True) + a_num(c.a, "eps", 1e-5)).op("rsqrt")
    g, y = c.g, c.y
    return [r * (g - y * (g * y).op("mean", dims=dims, keepdim=True))]


@rule("batch_norm")
def _batch_norm(c):
    """Two ops for any number of parameters, where the decomposition's rules record ~25: ``batch_norm_grad_stats``
    (the per-channel sums of g and g * x_hat: the bias's and the weight's gradients) and ``batch_norm_grad`` (the
    input's, in closed form; in training the batch statistics, the forward's ``stats`` input or else recomputed by
    ``batch_norm_stats``, depend on the input: that input gets no gradient of its own). The running statistics of
    eval mode are constants. The backward ops are composites too: double backward
    goes through their decompositions."""
    x = c.x[0]
    training = a_bool(c.a, "training")
    eps = a_num(c.a, "eps", 1e-5)
    has_w, has_b = a_bool(c.a, "has_weight"), a_bool(c.a, "has_bias")
    given = training and a_bool(c.a, "has_stats")  # (the forward's batch statistics, an input: no gradient)
    first = (1 + given) if training else 3
    iw = first if has_w else None
    ib = first + has_w if has_b else None
    need_w = iw is not None and c.needs[iw]
    need_b = ib is not None and c.needs[ib]
    g = c.g.cast(x.dtype)
    if given:
        stats = c.x[1]
    elif training:
        stats = x.op("batch_norm_stats")
    else:
        st = D.float32 if x.dtype in D.HALF else D.float_of(x.dtype)
        stats = c.x[1].cast(st).op("cat", c.x[2].cast(st), dim=0)
    gs = g.op("batch_norm_grad_stats", x, stats, eps=eps) if training and c.needs[0] or need_w or need_b else None
    out = [None] * len(c.x)
    if c.needs[0]:
        extra = ([gs] if training else []) + ([c.x[iw]] if has_w else [])
        out[0] = g.op("batch_norm_grad", x, stats, *extra, training=training, eps=eps, has_weight=has_w)
    n = x.shape[1]
    if need_w:
        out[iw] = gs.op("slice", starts=[n], stops=[2 * n], steps=[1])
    if need_b:
        out[ib] = gs.op("slice", starts=[0], stops=[n], steps=[1])
    return out


# ----------------------------------------------------------------------------------------------
# movement

@rule("reshape")
def _reshape(c):
    return [c.g.reshape(c.x[0].shape)]


@rule("permute")
def _permute(c):
    dims = [d % c.x[0].ndim for d in c.a["dims"]]
    inv = [0] * len(dims)
    for i, d in enumerate(dims):
        inv[d] = i
    return [c.g.permute(inv)]


@rule("expand")
def _expand(c):
    return [c.g]  # fit() sums the broadcast dims away


@rule("slice")
def _slice(c):
    x = c.x[0]
    starts, stops, steps = c.a["starts"], c.a["stops"], c.a["steps"]
    if all(s == 1 for s in steps):
        pads = []
        for n, a, e in zip(x.shape, starts, stops):
            pads += [a, n - max(a, e)]
        return [c.g.pad(pads)]
    z = zeros(c.b, x.shape, c.g.dtype)
    return [z.op("setslice", c.g, starts=list(starts), stops=list(stops), steps=list(steps))]


@rule("flip")
def _flip(c):
    return [c.g.flip(c.dims())]


@rule("pad")
def _pad(c):
    return [c.g.pad([-p for p in c.a["pads"]])]


@rule("cat")
def _cat(c):
    d = a_int(c.a, "dim") % c.x[0].ndim
    out, off = [], 0
    for x, need in zip(c.x, c.needs):
        n = x.shape[d]
        if need:
            starts = [0] * c.g.ndim
            stops = list(c.g.shape)
            starts[d], stops[d] = off, off + n
            out.append(c.g.op("slice", starts=starts, stops=stops, steps=[1] * c.g.ndim))
        else:
            out.append(None)
        off += n
    return out


@rule("tril", "triu")
def _tri(c):
    return [c.g.op(c.op, diagonal=a_int(c.a, "diagonal", 0))]


# ----------------------------------------------------------------------------------------------
# indexing

def _pad_to(g: T, shape) -> T:
    pads = []
    for have, want in zip(g.shape, shape):
        pads += [0, want - have]
    return g.pad(pads)


@rule("gather")
def _gather(c):
    x, idx = c.x
    z = zeros(c.b, x.shape, c.g.dtype)
    return [z.op("scatter_add", idx, c.g, dim=a_int(c.a, "dim")), None]


@rule("scatter", "scatter_add")
def _scatter(c):
    x, idx, src = c.x
    dim = a_int(c.a, "dim")
    gx = c.g
    if c.op == "scatter" and c.needs[0]:
        gx = c.g.op("scatter", idx, zeros(c.b, idx.shape, c.g.dtype), dim=dim)
    gs = _pad_to(c.g.op("gather", idx, dim=dim), src.shape) if c.needs[2] else None
    return [gx, None, gs]


@rule("scatter_reduce")
def _scatter_reduce(c):
    """torch's scatter_reduce_backward (FunctionsManual.cpp). amax/amin: the gradient goes to the values equal to the
    result (``self``'s own counted even without ``include_self``, as torch's), split evenly among them. prod: the
    product of the others, from the result over each value, and for a value that is the only zero of its position
    from the product with it made 1 (the others are then 0). Without ``include_self``, ``self`` gets none where
    something was scattered."""
    x, idx, src = c.x
    dim = a_int(c.a, "dim")
    reduce, keep = c.a["reduce"], a_bool(c.a, "include_self")
    g = c.g
    nd = len(idx.shape)
    s = src if tuple(src.shape) == tuple(idx.shape) else src.op(
        "slice", starts=[0] * nd, stops=list(idx.shape), steps=[1] * nd)

    def gather(t: T) -> T:
        return t.op("gather", idx, dim=dim)

    def scatter_add(into: T, values: T) -> T:
        return into.op("scatter_add", idx, values, dim=dim)

    if reduce in ("amax", "amin"):
        self_is = x.eq(c.y).cast(g.dtype)
        src_is = s.eq(gather(c.y)).cast(g.dtype)
        share = g / scatter_add(self_is, src_is)
        gx = self_is * share if c.needs[0] else None
        gs = src_is * gather(share) if c.needs[2] else None
    else:
        def prod(into: T, values: T) -> T:
            return into.op("scatter_reduce", idx, values, dim=dim, reduce="prod", include_self=keep)
        gx = gs = None
        if c.needs[0]:
            masked_self = where(x.eq(0), 1, x)
            gx = g * prod(masked_self, s) / masked_self
        if c.needs[2]:
            src_zero = s.eq(0)
            zeros_there = gather(scatter_add(zeros(c.b, x.shape, g.dtype), src_zero.cast(g.dtype)))
            single = src_zero & zeros_there.eq(1)
            gs = where(single, gather(g * prod(x, where(single, 1, s))), gather(g * c.y) / where(src_zero, 1, s))
    if gx is not None and not keep:
        gx = gx.op("scatter", idx, zeros(c.b, idx.shape, g.dtype), dim=dim)
    return [gx, None, _pad_to(gs, src.shape) if gs is not None else None]


@rule("index")
def _index(c):
    x, *idx = c.x
    z = zeros(c.b, x.shape, c.g.dtype)
    return [z.op("index_put", c.g, *idx, dim=a_int(c.a, "dim"), accumulate=True)] + [None] * len(idx)


@rule("index_put")
def _index_put(c):
    x, v, *idx = c.x
    dim = a_int(c.a, "dim")
    gx = c.g
    if not a_bool(c.a, "accumulate") and c.needs[0]:
        gx = c.g.op("index_put", c.scalar(0), *idx, dim=dim, accumulate=False)
    gv = c.g.op("index", *idx, dim=dim) if c.needs[1] else None
    return [gx, gv] + [None] * len(idx)


@rule("setslice")
def _setslice(c):
    at = {k: list(c.a[k]) for k in ("starts", "stops", "steps")}
    gx = c.g.op("setslice", c.scalar(0), **at) if c.needs[0] else None
    gv = c.g.op("slice", **at) if c.needs[1] else None
    return [gx, gv]


# ----------------------------------------------------------------------------------------------
# matmul

@rule("matmul")
def _matmul(c):
    a, b = c.x
    g = c.g
    a2 = a.reshape((1,) + tuple(a.shape)) if a.ndim == 1 else a
    b2 = b.reshape(tuple(b.shape) + (1,)) if b.ndim == 1 else b
    gshape = list(g.shape)
    if a.ndim == 1:
        gshape.insert(len(gshape) - (0 if b.ndim == 1 else 1), 1)
    if b.ndim == 1:
        gshape.append(1)
    g2 = g.reshape(gshape)

    def mt(t):
        p = list(range(t.ndim))
        p[-1], p[-2] = p[-2], p[-1]
        return t.permute(p)

    ga = gb = None
    if c.needs[0]:
        ga = g2.op("matmul", mt(b2))
        if a.ndim == 1:
            ga = fit(ga, (1,) + tuple(a.shape), ga.dtype).reshape(a.shape)
    if c.needs[1]:
        gb = mt(a2).op("matmul", g2)
        if b.ndim == 1:
            gb = fit(gb, tuple(b.shape) + (1,), gb.dtype).reshape(b.shape)
    return [ga, gb]


@rule("linear")
def _linear(c):
    """g @ W, g^T @ x (over the flattened leading dims) and sum(g): 3-4 ops where the decomposition's
    matmul + permute + add rule records 5-8 (a permute of the permuted weight, a keepdim sum and reshape)."""
    x, w = c.x[0], c.x[1]
    o, i = w.shape
    gm = c.g.cast(x.dtype)  # the matmul's own output gradient, as through the decomposition
    gx = gm.op("matmul", w) if c.needs[0] else None
    gw = None
    if c.needs[1]:
        n = numel(x.shape[:-1])
        gw = gm.reshape([n, o]).permute([1, 0]).op("matmul", x.reshape([n, i]))
    gb = None
    if len(c.x) == 3 and c.needs[2]:  # fit() sums a broadcast bias's gradient down
        gb = c.g.sum(list(range(c.g.ndim - 1))) if c.g.ndim > 1 and tuple(c.x[2].shape) == (o,) else c.g
    return [gx, gw] + ([gb] if len(c.x) == 3 else [])


@rule("cross_entropy_index")
def _cross_entropy_index(c):
    """One fused op, (softmax(x) - onehot(target)) * scale, where the decomposition's log_softmax / gather /
    mask / reduction rules record ~13 (it is a composite too, so double backward goes through its
    decomposition)."""
    x, t = c.x
    at = {"reduction": c.a.get("reduction", "mean"), "ignore_index": a_int(c.a, "ignore_index", -100)}
    return [x.op("cross_entropy_index_grad", t, c.g, **at), None]


@rule("conv2d")
def _conv2d(c):
    """One op per input, conv2d_grad_input(g, W) and conv2d_grad_weight(x, g), where the im2col / matmul
    decomposition's rules record ~40 (they are composites too: double backward goes through their
    decompositions); the bias's is the output gradient summed over batch and positions."""
    x, w = c.x[0], c.x[1]
    at = {"stride": list(c.a.get("stride", [1, 1])), "padding": list(c.a.get("padding", [0, 0])),
          "dilation": list(c.a.get("dilation", [1, 1])), "groups": a_int(c.a, "groups", 1)}
    g = c.g.cast(x.dtype)
    gx = g.op("conv2d_grad_input", w, input_size=list(x.shape[2:]), **at) if c.needs[0] else None
    gw = x.op("conv2d_grad_weight", g, kernel=list(w.shape[2:]), **at) if c.needs[1] else None
    if len(c.x) == 2:
        return [gx, gw]
    return [gx, gw, c.g.sum([0, 2, 3]) if c.needs[2] else None]

@rule("conv2d_grad_input")
def _conv2d_grad_input(c):
    """The transposed convolution (``F.conv_transpose2d``) is conv2d's input gradient; its own VJP is one op per
    input, where its decomposition's col2im (a setslice per kernel position) records ~5 per kernel position: the
    convolution of the output gradient with the weight for ``gy``, ``conv2d_grad_weight`` (the output gradient in
    the role of conv2d's input) for ``w``."""
    gy, w = c.x
    at = {"stride": list(c.a.get("stride", [1, 1])), "padding": list(c.a.get("padding", [0, 0])),
          "dilation": list(c.a.get("dilation", [1, 1])), "groups": a_int(c.a, "groups", 1)}
    g = c.g.cast(gy.dtype)
    ggy = g.op("conv2d", w, **at) if c.needs[0] else None
    gw = g.op("conv2d_grad_weight", gy, kernel=list(w.shape[2:]), **at) if c.needs[1] else None
    return [ggy, gw]


@rule("max_pool2d")
def _max_pool2d(c):
    """One op, max_pool2d_grad(x, g), routing each window's gradient to its (first) maximum as torch does, where
    the decomposition's chain of maximum rules records ~10 ops per window position and splits ties (it is a
    composite too: double backward goes through its decomposition). Differentiated again (:attr:`Ctx.higher`) it
    stays connected to ``x`` with a zero derivative, as torch's ``max_pool2d_with_indices_backward`` is."""
    at = {k: c.a[k] for k in ("kernel", "stride", "padding", "dilation", "ceil_mode") if k in c.a}
    x = c.x[0]
    gx = x.op("max_pool2d_grad", c.g.cast(x.dtype), **at)
    return [gx + x.op("sign") * 0 if c.higher else gx]

MAX_PARTS = 8  # padded_parts gives up on a gradient summed from more pieces than this


def padded_parts(b: Builder, g: Value) -> list[tuple[tuple[int, ...], tuple[int, ...], Value]] | None:
    """``g`` as a sum of zero-padded pieces, as the builder recorded it: ``[(starts, sizes, piece)]``, each piece
    ``g``'s values in the box ``starts`` / ``sizes`` (in ``g``'s dimensions; the piece's shape is the box's up to
    dimensions of 1) and zeros outside.

    The gradient of a value read through slices is made so: each slice's VJP pads its gradient back with zeros,
    ``add`` sums them, with ``reshape`` s that only add or drop dimensions of 1 between. A rule that can take the
    pieces as they are (``rnn_scan``'s: its output's and its final state's gradients) spares the padding and the
    adds, which are pruned from the backward graph when nothing else reads them. None where the builder cannot say
    how ``g`` was made (it has no ``producer``) or the pieces are more than :data:`MAX_PARTS`; a value made
    otherwise is one piece covering its box."""
    producer = getattr(b, "producer", None)
    if producer is None:
        return None
    out: list = []

    def walk(v: Value, where: list, starts: list[int], sizes: list[int], depth: int) -> bool:
        # v's values land in the box starts/sizes of g; ``where``: g's dimension of each of v's (None: a dimension
        # of 1 that g's box does not follow)
        made = producer(v) if depth < 32 else None
        if made is not None:
            name, ins, attrs = made
            if name in ("add", "add_n") and all(tuple(x.shape) == tuple(v.shape) and x.dtype is v.dtype for x in ins):
                return all(walk(x, where, starts, sizes, depth + 1) for x in ins)
            pads = attrs.get("pads") if name == "pad" and attrs.get("value", 0) == 0 else None
            if pads is not None and len(pads) == 2 * len(where) and min(pads, default=0) >= 0 and \
                    all(where[k] is not None or not (pads[2 * k] or pads[2 * k + 1]) for k in range(len(where))):
                st, sz = list(starts), list(sizes)
                for k, d in enumerate(where):
                    if d is not None:
                        st[d] += pads[2 * k]
                        sz[d] = ins[0].shape[k]
                return walk(ins[0], where, st, sz, depth + 1)
            if name == "reshape":
                inner = tuple(ins[0].shape)
                if [n for n in inner if n != 1] == [n for n in v.shape if n != 1]:
                    big = iter(d for d, n in zip(where, v.shape) if n != 1)
                    return walk(ins[0], [next(big) if n != 1 else None for n in inner], starts, sizes, depth + 1)
        if len(out) >= MAX_PARTS:
            return False
        out.append((tuple(starts), tuple(sizes), v))
        return True

    n = len(g.shape)
    return out if walk(g, list(range(n)), [0] * n, list(g.shape), 0) else None


@rule("rnn_scan")
def _rnn_scan(c):
    """One ``rnn_scan_grad`` for the sequential part (each step's gate gradients and the initial state's), then
    the weight gradient as ONE product over the whole sequence, ``dW_hh = sum_t dgh_t^T h_{t-1}``, and the bias's
    as a sum, where the unrolled decomposition's rules record ~40 ops a step (``rnn_scan_grad`` is a composite
    too: double backward goes through its decomposition).

    The output's gradient goes to ``rnn_scan_grad`` in the parts the layer's outputs got (:func:`_scan_grad_parts`:
    its output's, its final ``h``'s and ``c``'s), not padded into the packed ``[T, B, S]`` and summed first."""
    mode, reverse = c.a.get("mode", "lstm"), a_bool(c.a, "reverse")
    gi, h0 = c.x[0], c.x[1]
    T_, B, GH = (1, *gi.shape) if len(gi.shape) == 2 else gi.shape  # (a cell's one step: 2-D, see the op)
    H = h0.shape[1]
    y = c.y
    names, parts = _scan_grad_parts(c.b, c.g.cast(y.dtype), mode, reverse, H)
    at = {"mode": mode, "reverse": reverse}
    if names != ["y"]:
        at["grads"] = names
    d = y.op("rnn_scan_grad", *parts, *c.x[1:-1], **at)
    # read as rows [(T + 1) * B, W]: a state's gradient is one slice of it, each step's gates' the first T * B rows
    # (as the weight's product wants them; the input projection's VJP reshapes them back to this)
    n = T_ * B
    d2 = d.reshape([n + B, d.shape[-1]])
    rows = lambda r0, r1, a, b: d2.op("slice", starts=[r0, a], stops=[r1, b], steps=[1, 1])  # noqa: E731
    dgi = rows(0, n, 0, GH)
    dgh = dgi if mode != "gru" else rows(0, n, 0, 2 * H).op("cat", rows(0, n, 3 * H, 4 * H), dim=1)
    grads = [dgi.reshape(gi.shape) if c.needs[0] else None]
    grads.append(rows(n, n + B, 0, H) if c.needs[1] else None)
    if mode == "lstm":
        grads.append(rows(n, n + B, H, 2 * H) if c.needs[2] else None)
    gw = None
    if c.needs[-2]:
        # h_{t-1} for every step in the order of t: h0 comes first going forward, last going backward
        if T_ == 1:
            prev = h0
        else:
            part = lambda v, t0, t1: v.op("slice", starts=[t0, 0, 0], stops=[t1, B, H], steps=[1, 1, 1])  # noqa: E731
            h0_ = h0.reshape([1, B, H])
            prev = part(y, 1, T_).op("cat", h0_, dim=0) if reverse else h0_.op("cat", part(y, 0, T_ - 1), dim=0)
        gw = dgh.permute([1, 0]).op("matmul", prev.reshape([n, H]))
    grads.append(gw)
    # the bias's: summed as the input projection's bias is (a cell's: a linear of [B, in]; a layer's: of [T, B, in]),
    # so that the backward graph computes the two once where they are the same (lstm, rnn)
    grads.append((dgh.sum([0]) if T_ == 1 else dgh.reshape([T_, B, dgh.shape[1]]).sum([0, 1])) if c.needs[-1]
                 else None)
    return grads


def _scan_grad_parts(b: Builder, g: T, mode: str, reverse: bool, H: int) -> tuple[list[str], list[T]]:
    """``rnn_scan``'s output gradient ``g`` (``[T, B, S]``) as ``rnn_scan_grad``'s parts (``grads``, in
    ``GRAD_PARTS``' order, and their values): where :func:`padded_parts` finds it made of pieces that each are
    a layer output's gradient (``h`` of every step: ``"out"``) or the final state's (the last step's ``h``: ``"h"``,
    its ``c``: ``"c"``), those; else the whole, ``"y"``."""
    step = len(g.shape) == 2  # a cell's one step: ``[B, S]``, its parts 2-D
    T_, B, _ = (1, *g.shape) if step else g.shape
    last = 0 if reverse else T_ - 1
    pieces = padded_parts(b, g.v)
    found: dict[str, list[T]] = {}
    for starts, sizes, v in pieces or ():
        t0, b0, k0 = (0, *starts) if step else starts
        nt, nb, nk = (1, *sizes) if step else sizes
        kind = None
        if b0 == 0 and nb == B and nk == H and k0 in (0, H):
            if nt == 1 and t0 == last:
                kind = "h" if k0 == 0 else ("c" if mode == "lstm" else None)
            elif nt == T_ and k0 == 0:
                kind = "out"
        if kind is None or v.dtype is not g.dtype:
            return ["y"], [g]
        shape = [T_, B, H] if kind == "out" and not step else [B, H]
        found.setdefault(kind, []).append(T(b, v).reshape(shape))
    if not found:
        return ["y"], [g]
    names = [k for k in GRAD_PARTS if k in found]
    vals = []
    for k in names:
        s = found[k][0]
        for v in found[k][1:]:
            s = s + v
        vals.append(s)
    return names, vals


# ----------------------------------------------------------------------------------------------
# the dispatcher of rules

class Tape(Builder):
    """Records a decomposition through ``inner`` and remembers each op, to differentiate it."""

    def __init__(self, inner: Builder):
        self.inner = inner
        self.entries: list = []
        self.seen: set = set()

    def op(self, name: str, *inputs: Value, **attrs) -> Value:
        out = self.inner.op(name, *inputs, **attrs)
        if out.ref not in self.seen and all(v.ref != out.ref for v in inputs):
            self.seen.add(out.ref)
            self.entries.append((name, inputs, attrs, out))
        return out


def _float(d: D.DType) -> bool:
    return d.is_inexact  # floating point or complex: what can carry a gradient


# Complex values (PyTorch's convention: the gradient of a real loss L with respect to z = a + ib is dL/da + i dL/db,
# the conjugate Wirtinger derivative, times two). A rule meets complex values only where it is known to give that:
#: ops whose rules read no input or output value (movement, indexing, sums, where, casts) or handle complex values
#: themselves (abs: g * sgn(z); the complex ops of protocol/ops/complex_ops.py declare ``extra["complex_vjp"]``)
COMPLEX_AS_IS = frozenset({
    "add", "add_n", "sub", "neg", "sum", "mean", "cumsum", "reshape", "permute", "expand", "slice", "flip", "pad",
    "cat", "tril", "triu", "gather", "scatter", "scatter_add", "index", "index_put", "setslice", "where", "cast",
    "copy", "abs"})
#: holomorphic ops with real coefficients (f(conj z) = conj f(z)): for them torch's gradient g * conj(f'(z)) is the
#: real rule, g * f'(z), evaluated at the conjugates of the inputs and output, so the rule reads those
COMPLEX_BY_CONJ = frozenset({
    "mul", "div", "pow", "exp", "log", "log1p", "expm1", "sqrt", "sin", "cos", "tan", "tanh", "sinh", "cosh",
    "reciprocal", "asin", "acos", "atan", "square", "rsqrt", "sigmoid", "exp2", "log2", "log10", "prod", "cumprod",
    "matmul", "linear", "lerp"})


def _complex_values(b: Builder, op: str, opdef, xs: list[Value], y: Value) -> tuple[list[Value], Value] | None:
    """The values ``op``'s rule reads where complex ones are involved: as they are, or conjugated
    (:data:`COMPLEX_BY_CONJ`); ``None``: the rule is not known to give torch's complex gradient, but the op has a
    decomposition to differentiate instead (var, norm...); an op with neither is refused."""
    if opdef.extra.get("complex_vjp") or op in COMPLEX_AS_IS:
        return xs, y
    if op in COMPLEX_BY_CONJ:
        def conj(v: Value) -> Value:
            return b.op("conj", v) if v.dtype.is_complex else v
        return [conj(x) for x in xs], conj(y)
    if opdef.decompose is not None:
        return None
    raise DTypeError(f"the gradient of {op} is not implemented for complex tensors yet")


def vjp(b: Builder, op: str, xs: list[Value], y: Value, g: Value, attrs: dict, needs: list[bool],
        devs=None, dev=None) -> list[Value | None]:
    """Gradients of ``op``'s inputs given its output's gradient ``g`` (``None`` where not needed)."""
    opdef = get_op(op)
    if not opdef.differentiable:
        return [None] * len(xs)
    # the rule here, else the one declared with the op (OpDef.vjp), else a custom op's own (``tensorwire_ops``)
    fn = RULES.get(op) or opdef.vjp or opdef.extra.get("vjp")
    if fn is not None:
        rx, ry = xs, y
        if y.dtype.is_complex or any(x.dtype.is_complex for x in xs):
            values = _complex_values(b, op, opdef, xs, y)
            if values is None:
                return _vjp_decomposed(b, opdef, xs, g, attrs, needs)
            rx, ry = values
        c = Ctx(b, op, [T(b, x) for x in rx], T(b, ry), T(b, g), attrs, needs, devs, dev)
        out = fn(c)
        if out is NotImplemented:  # the rule declines these attributes: go through the decomposition
            return _vjp_decomposed(b, opdef, xs, g, attrs, needs)
        if len(out) != len(xs):
            raise ProtocolError(f"VJP rule of {op} returned {len(out)} gradients for {len(xs)} inputs")
        res = []
        for i, (x, gx, need) in enumerate(zip(xs, out, needs)):
            if devs is not None:
                b.dev = devs[i]
            res.append(fit(gx, x.shape, x.dtype).v if need and gx is not None else None)
        if dev is not None:
            b.dev = dev
        return res
    if opdef.decompose is None:
        raise ProtocolError(f"no VJP rule for op {op!r}")
    return _vjp_decomposed(b, opdef, xs, g, attrs, needs)


def _vjp_decomposed(b, opdef, xs, g, attrs, needs):
    tape = Tape(b)
    out = opdef.decompose(tape, *xs, dict(attrs or {}))
    grads: dict[int, Value] = {out.ref: fit(T(b, g), out.shape, out.dtype).v}
    want = {x.ref for x, n in zip(xs, needs) if n}
    for name, ins, at, o in reversed(tape.entries):
        go = grads.pop(o.ref, None)
        if go is None:
            continue
        sub_needs = [_float(v.dtype) and (v.ref in want or v.ref in tape.seen) for v in ins]
        if not any(sub_needs):
            continue
        for v, gv in zip(ins, vjp(b, name, list(ins), o, go, at, sub_needs)):
            if gv is not None:
                prev = grads.get(v.ref)
                grads[v.ref] = gv if prev is None else b.op("add", prev, gv)
    res = []
    for x, n in zip(xs, needs):
        gx = grads.pop(x.ref, None) if n else None  # an input given twice gets its total once
        res.append(fit(T(b, gx), x.shape, x.dtype).v if gx is not None else None)
    return res
