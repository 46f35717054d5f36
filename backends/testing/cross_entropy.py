"""References and specs for ``cross_entropy_index`` and its gradient: fixed targets, ignored targets,
every reduction, all-ignored and empty batches."""

from __future__ import annotations

import numpy as np


def _ce_parts(xs, ii):
    x, t = xs[0], xs[1].astype(np.int64)
    valid = t != ii
    idx = np.where(valid, t, 0)
    return x - np.logaddexp.reduce(x, axis=1, keepdims=True), valid, idx  # log_softmax


def _ce_ref(xs, red, ii):
    lp, valid, idx = _ce_parts(xs, ii)
    loss = np.where(valid, -lp[np.arange(lp.shape[0]), idx], 0.0)
    if red == "none":
        return loss
    return loss.sum() / (valid.sum() if red == "mean" else 1.0)


def _ce_grad_ref(xs, red, ii):
    lp, valid, idx = _ce_parts(xs, ii)
    s = np.where(valid, xs[2] / (valid.sum() if red == "mean" else 1.0), 0.0)
    return (np.exp(lp) - np.eye(lp.shape[1])[idx]) * s[:, None]


def _ce_specs(op: str):
    """cross_entropy_index[_grad]: [N, C] inputs with fixed int64 targets (ndarray entries of a spec are inputs
    taken as they are), ignored targets included; "all-ignored" gives a nan mean (and a zero gradient)."""
    t6 = np.array([1, 0, 4, -100, 3, 2])
    grad = op.endswith("_grad")
    out = []
    for tag, t, red, ii in (("mean", t6, "mean", -100), ("sum-ignore4", np.array([1, 0, 4, 4, 3, 2]), "sum", 4),
                            ("none", t6, "none", -100), ("all-ignored", np.full(6, -100), "mean", -100),
                            ("empty", np.zeros(0, np.int64), "sum", -100)):
        n = t.shape[0]
        shapes = [(n, 5), t] + ([(n,) if red == "none" else ()] if grad else [])
        ref = _ce_grad_ref if grad else _ce_ref
        out.append((tag, shapes, (-4, 4), {"reduction": red, "ignore_index": ii},
                    lambda xs, dt, red=red, ii=ii, ref=ref: ref(xs, red, ii)))
    return out



