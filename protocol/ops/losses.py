"""Fused cross entropy (tw.nn.functional.cross_entropy's common case: [N, C] logits, class-index targets, no class
weight, no label smoothing): one node forward and, through its VJP rule, one node backward, instead of ~12 + ~13
elementwise/index nodes. Both are composites, so every backend runs them through the decompositions (the general
log_softmax / gather / mask path) and the grad op stays differentiable (double backward).
"""

from __future__ import annotations

from ..errors import DTypeError, ShapeError
from .attrs import a_int, a_str
from .indexing import _index_dtype
from .table import _scalar, composite

_CE_REDUCTIONS = ("mean", "sum", "none")


def _ce_check(metas, attrs, what):
    red = a_str(attrs, "reduction", _CE_REDUCTIONS)
    a_int(attrs, "ignore_index", -100)
    (sx, dx), (st, dt_) = metas[0], metas[1]
    if not dx.is_floating_point:
        raise DTypeError(f"{what}: expected a floating input, got {dx.name}")
    _index_dtype(dt_, what)
    if len(sx) != 2 or len(st) != 1:
        raise ShapeError(f"{what}: expected input [N, C] and target [N], got input {list(sx)} and target {list(st)}")
    if sx[1] == 0:
        raise ShapeError(f"{what}: the input has no classes (shape {list(sx)})")
    if st[0] != sx[0]:
        raise ShapeError(f"Expected input batch_size ({sx[0]}) to match target batch_size ({st[0]}).")
    return red, (() if red != "none" else (sx[0],))


def _ce_infer(metas, attrs):
    _, out = _ce_check(metas, attrs, "cross_entropy_index")
    return out, metas[0][1]


def _ce_grad_infer(metas, attrs):
    _, out = _ce_check(metas, attrs, "cross_entropy_index_grad")
    sg, dg = metas[2]
    if not dg.is_floating_point or tuple(sg) != out:
        raise ShapeError(f"cross_entropy_index_grad: the output gradient must be a floating tensor of shape "
                         f"{list(out)}, got {dg.name} {list(sg)}")
    return metas[0]


def _ce_rows(g, t, attrs):
    """(valid [N] bool: target != ignore_index, the class index [N] with ignored targets reading class 0)."""
    valid = g.op("ne", t, _scalar(g, a_int(attrs, "ignore_index", -100), t.dtype))
    idx = g.op("where", valid, t, _scalar(g, 0, t.dtype))
    return valid, idx


@composite("cross_entropy_index", 2, _ce_infer, attrs=("reduction", "ignore_index"))
def _cross_entropy_index(g, x, t, attrs):
    """torch's cross_entropy(input [N, C], target [N] class indices, reduction, ignore_index): -log_softmax(x)
    at the target, 0 where target == ignore_index; "mean" divides the sum by the number of non-ignored
    targets (nan if there are none, as torch)."""
    n = x.shape[0]
    dt = x.dtype
    valid, idx = _ce_rows(g, t, attrs)
    lp = g.op("log_softmax", x, dim=1)
    picked = g.op("reshape", g.op("gather", lp, g.op("reshape", idx, shape=[n, 1]), dim=1), shape=[n])
    loss = g.op("where", valid, g.op("neg", picked), _scalar(g, 0, dt))
    red = a_str(attrs, "reduction", _CE_REDUCTIONS)
    if red == "none":
        return loss
    total = g.op("sum", loss, dims=[0], keepdim=False)
    if red == "sum":
        return total
    return g.op("div", total, g.op("sum", g.op("cast", valid, dtype=dt.name), dims=[0], keepdim=False))


@composite("cross_entropy_index_grad", 3, _ce_grad_infer, attrs=("reduction", "ignore_index"))
def _cross_entropy_index_grad(g, x, t, gy, attrs):
    """The gradient of cross_entropy_index with respect to its input, given the output gradient gy (0-d, or [N]
    for reduction "none"): (softmax(x) - onehot(target)) * s[:, None], s = gy (/ the number of non-ignored
    targets for "mean") where the target is not ignored, 0 where it is."""
    n, c = x.shape
    dt = x.dtype
    valid, idx = _ce_rows(g, t, attrs)
    gy = gy if gy.dtype is dt else g.op("cast", gy, dtype=dt.name)
    if a_str(attrs, "reduction", _CE_REDUCTIONS) == "mean":
        gy = g.op("div", gy, g.op("sum", g.op("cast", valid, dtype=dt.name), dims=[0], keepdim=False))
    s = g.op("reshape", g.op("where", valid, gy, _scalar(g, 0, dt)), shape=[n, 1])
    cols = g.op("arange", start=0, step=1, n=c, dtype="int64")
    onehot = g.op("cast", g.op("eq", g.op("reshape", idx, shape=[n, 1]), cols), dtype=dt.name)
    return g.op("mul", g.op("sub", g.op("softmax", x, dim=1), onehot), s)
