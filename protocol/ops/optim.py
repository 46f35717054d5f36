"""Fused optimizer updates (tw.optim): one node per updated tensor instead of ~10 elementwise nodes. One output per
node, so an update that changes several tensors records one op per tensor (Adam: adam_exp_avg, adam_exp_avg_sq,
adam_param); where two need the same intermediate (the L2-decayed gradient) each decomposition recomputes it.
Constant hyperparameters are attributes; values that change between steps (lr, bias corrections) are 0-d tensor
inputs (`full` nodes the client records with a dynamic value), so a decomposed composite never bakes a stale value
into a replayed plan.
"""

from __future__ import annotations

from ..errors import DTypeError, ProtocolError, ShapeError
from .attrs import a_num
from .table import _scalar, composite


def _opt_infer(required: str, optional: str, nums: tuple[str, ...], param_last: bool = False):
    """Inference for an update op whose inputs follow ``required + optional`` ("T": a tensor of the updated
    tensor's shape, input 0 being it; "S": a 0-d scalar); numeric attributes ``nums``. The output is input 0's
    shape and dtype. ``param_last``: the optional last input is the parameter, needed for a nonzero
    ``weight_decay``."""
    layout = required + optional

    def fn(metas, attrs):
        if not len(required) <= len(metas) <= len(layout):
            raise ProtocolError(f"takes {len(required)} to {len(layout)} inputs, got {len(metas)}")
        for k in nums:
            a_num(attrs, k, 0)
        if param_last and a_num(attrs, "weight_decay", 0) and len(metas) == len(required):
            raise ProtocolError("a nonzero weight_decay needs the parameter as an input")
        s, d = metas[0]
        for i, ((si, di), kind) in enumerate(zip(metas, layout)):
            if not di.is_floating_point:
                raise DTypeError(f"optimizer updates need floating tensors, got {di.name} for input {i}")
            want = s if kind == "T" else ()
            if tuple(si) != tuple(want):
                raise ShapeError(f"input {i} of an optimizer update has shape {list(si)}, expected {list(want)}")
        return s, d
    return fn


def _upd_in(g, v, dt):
    return v if v.dtype is dt else g.op("cast", v, dtype=dt.name)


def _decayed(g, grad, param, attrs, dt):
    """grad + weight_decay * param (torch's coupled, L2 weight decay) when weight_decay != 0."""
    wd = a_num(attrs, "weight_decay", 0)
    grad = _upd_in(g, grad, dt)
    if not wd or param is None:
        return grad
    return g.op("add", grad, g.op("mul", _upd_in(g, param, dt), _scalar(g, wd, dt)))


@composite("adam_exp_avg", None, _opt_infer("TT", "T", ("beta1", "weight_decay"), True),
           attrs=("beta1", "weight_decay"), differentiable=False)
def _adam_exp_avg(g, m, grad, *rest):
    """Adam's first moment: lerp(exp_avg, grad', 1 - beta1), grad' = grad + weight_decay * param (inputs
    exp_avg, grad[, param])."""
    *p, attrs = rest
    dt = m.dtype
    gd = _decayed(g, grad, p[0] if p else None, attrs, dt)
    return g.op("lerp", m, gd, _scalar(g, 1 - a_num(attrs, "beta1", 0), dt))


@composite("adam_exp_avg_sq", None, _opt_infer("TT", "T", ("beta2", "weight_decay"), True),
           attrs=("beta2", "weight_decay"), differentiable=False)
def _adam_exp_avg_sq(g, v, grad, *rest):
    """Adam's second moment: exp_avg_sq * beta2 + (1 - beta2) * grad' * grad' (torch's mul_ + addcmul_;
    inputs exp_avg_sq, grad[, param])."""
    *p, attrs = rest
    dt = v.dtype
    gd = _decayed(g, grad, p[0] if p else None, attrs, dt)
    b2 = a_num(attrs, "beta2", 0)
    return g.op("add", g.op("mul", v, _scalar(g, b2, dt)), g.op("mul", g.op("mul", gd, _scalar(g, 1 - b2, dt)), gd))


@composite("adam_param", None, _opt_infer("TTTSS", "S", ("eps",)), attrs=("eps",), differentiable=False)
def _adam_param(g, p, m, v, step_size, bc2_sqrt, *rest):
    """Adam's parameter update: param * decay - step_size * exp_avg / (sqrt(exp_avg_sq) / bc2_sqrt + eps)
    (inputs param, exp_avg, exp_avg_sq (or its running max), step_size, bc2_sqrt[, decay]: 0-d scalars that
    change every step; decay is AdamW's 1 - lr * weight_decay)."""
    *decay, attrs = rest
    dt = p.dtype
    denom = g.op("add", g.op("div", g.op("sqrt", _upd_in(g, v, dt)), _upd_in(g, bc2_sqrt, dt)),
                 _scalar(g, a_num(attrs, "eps", 0), dt))
    upd = g.op("mul", g.op("div", _upd_in(g, m, dt), denom), _upd_in(g, step_size, dt))
    if decay:
        p = g.op("mul", p, _upd_in(g, decay[0], dt))
    return g.op("sub", p, upd)


@composite("sgd_momentum", None, _opt_infer("TT", "T", ("momentum", "dampening", "weight_decay"), True),
           attrs=("momentum", "dampening", "weight_decay"), differentiable=False)
def _sgd_momentum(g, buf, grad, *rest):
    """SGD's momentum buffer: buf * momentum + (1 - dampening) * grad', grad' = grad + weight_decay * param
    (inputs buf, grad[, param])."""
    *p, attrs = rest
    dt = buf.dtype
    gd = _decayed(g, grad, p[0] if p else None, attrs, dt)
    damp = a_num(attrs, "dampening", 0)
    if damp:
        gd = g.op("mul", gd, _scalar(g, 1 - damp, dt))
    return g.op("add", g.op("mul", buf, _scalar(g, a_num(attrs, "momentum", 0), dt)), gd)


@composite("sgd_update", None, _opt_infer("TTS", "T", ("weight_decay", "momentum")),
           attrs=("weight_decay", "momentum"), differentiable=False)
def _sgd_update(g, p, d, lr, *rest):
    """SGD's parameter update: param - lr * (d + weight_decay * param [+ momentum * buf]) (inputs param, d (the
    gradient, or the momentum buffer), lr (0-d)[, buf: Nesterov])."""
    *buf, attrs = rest
    dt = p.dtype
    d = _decayed(g, d, p, attrs, dt)
    if buf:
        d = g.op("add", d, g.op("mul", _upd_in(g, buf[0], dt), _scalar(g, a_num(attrs, "momentum", 0), dt)))
    return g.op("sub", p, g.op("mul", d, _upd_in(g, lr, dt)))


def _two_loop_infer(metas, attrs):
    """``lbfgs_direction``: inputs ``g`` ``[n]``, ``H_diag`` (0-d), then ``m >= 1`` each of the curvature pairs'
    ``y`` ``[n]``, their ``s`` ``[n]`` and ``ro = 1 / y.s`` (0-d), oldest first; all one float dtype. Output ``[n]``."""
    if len(metas) < 5 or (len(metas) - 2) % 3:
        raise ProtocolError(f"lbfgs_direction takes g, H_diag and m >= 1 triples (y, s, ro), got {len(metas)} inputs")
    m = (len(metas) - 2) // 3
    (s, d) = metas[0]
    if len(s) != 1:
        raise ShapeError(f"lbfgs_direction: g must be 1-D, got shape {list(s)}")
    for i, (si, di) in enumerate(metas):
        if not di.is_floating_point or di is not d:
            raise DTypeError(f"lbfgs_direction: every input must be {d.name}, got {di.name} for input {i}")
        want = () if i == 1 or i >= 2 + 2 * m else tuple(s)
        if tuple(si) != want:
            raise ShapeError(f"lbfgs_direction: input {i} has shape {list(si)}, expected {list(want)}")
    return tuple(s), d


@composite("lbfgs_direction", None, _two_loop_infer, differentiable=False)
def _lbfgs_direction(g, grad, h_diag, *rest):
    """L-BFGS's direction ``-H g`` by the two-loop recursion over the memory (torch's ``LBFGS.step``), as one node
    where the recursion records ~11 elementwise nodes a remembered pair: ``q = -g``; newest to oldest
    ``al_i = (s_i . q) ro_i``, ``q -= y_i al_i``; ``r = q H_diag``; oldest to newest ``be_i = (y_i . r) ro_i``,
    ``r += s_i (al_i - be_i)`` (inputs ``g``, ``H_diag``, the ``y``s, the ``s``s, the ``ro``s)."""
    *rest, _attrs = rest
    m = len(rest) // 3
    dirs, stps, ro = rest[:m], rest[m:2 * m], rest[2 * m:]

    def dot(a, b):
        return g.op("sum", g.op("mul", a, b), dims=None, keepdim=False)

    q = g.op("neg", grad)
    al = [None] * m
    for i in range(m - 1, -1, -1):
        al[i] = g.op("mul", dot(stps[i], q), ro[i])
        q = g.op("sub", q, g.op("mul", dirs[i], al[i]))
    r = g.op("mul", q, h_diag)
    for i in range(m):
        be = g.op("mul", dot(dirs[i], r), ro[i])
        r = g.op("add", r, g.op("mul", stps[i], g.op("sub", al[i], be)))
    return r
