"""References for the fused optimizer updates (``adam_*``, ``sgd_*``): the composite specs the suite checks
them with."""

from __future__ import annotations

import numpy as np


def _decayed_ref(xs, wd):
    return xs[1] + wd * xs[2] if wd else xs[1]


def _adam_param_ref(xs, eps):
    p, m, v, step_size, bc2_sqrt = xs[:5]
    if len(xs) > 5:
        p = p * xs[5]
    return p - step_size * m / (np.sqrt(v) / bc2_sqrt + eps)


def _sgd_update_ref(xs, wd, mom):
    d = xs[1] + wd * xs[0]
    if len(xs) > 3:
        d = d + mom * xs[3]
    return xs[0] - xs[2] * d


def _two_loop_ref(xs):
    """L-BFGS's two-loop recursion, as torch's ``LBFGS.step`` writes it (inputs g, H_diag, ys, ss, ros)."""
    g, h_diag, rest = xs[0], xs[1], xs[2:]
    m = len(rest) // 3
    dirs, stps, ro = rest[:m], rest[m:2 * m], rest[2 * m:]
    q, al = -g, [None] * m
    for i in range(m - 1, -1, -1):
        al[i] = np.dot(stps[i], q) * ro[i]
        q = q - dirs[i] * al[i]
    r = q * h_diag
    for i in range(m):
        r = r + stps[i] * (al[i] - np.dot(dirs[i], r) * ro[i])
    return r


# the fused optimizer updates (positive inputs: exp_avg_sq, bias corrections and lr are never negative)
_OPTIM_SPECS = {
    "adam_exp_avg": [
        ("plain", [(3, 4), (3, 4)], (0.1, 2), {"beta1": 0.9},
         lambda xs, dt: xs[0] + 0.1 * (xs[1] - xs[0])),
        ("l2", [(3, 4), (3, 4), (3, 4)], (0.1, 2), {"beta1": 0.8, "weight_decay": 0.1},
         lambda xs, dt: xs[0] + 0.2 * (_decayed_ref(xs, 0.1) - xs[0]))],
    "adam_exp_avg_sq": [
        ("plain", [(5,), (5,)], (0.1, 2), {"beta2": 0.999},
         lambda xs, dt: 0.999 * xs[0] + 0.001 * xs[1] ** 2),
        ("l2", [(2, 3), (2, 3), (2, 3)], (0.1, 2), {"beta2": 0.9, "weight_decay": 0.5},
         lambda xs, dt: 0.9 * xs[0] + 0.1 * _decayed_ref(xs, 0.5) ** 2)],
    "adam_param": [
        ("plain", [(3, 4), (3, 4), (3, 4), (), ()], (0.1, 2), {"eps": 1e-3},
         lambda xs, dt: _adam_param_ref(xs, 1e-3)),
        ("decoupled", [(4,), (4,), (4,), (), (), ()], (0.1, 2), {"eps": 0.1},
         lambda xs, dt: _adam_param_ref(xs, 0.1))],
    "lbfgs_direction": [
        ("one-pair", [(5,), (), (5,), (5,), ()], (0.1, 2), {}, lambda xs, dt: _two_loop_ref(xs)),
        ("three-pairs", [(4,), ()] + [(4,)] * 6 + [()] * 3, (0.1, 2), {}, lambda xs, dt: _two_loop_ref(xs))],
    "sgd_momentum": [
        ("plain", [(3, 4), (3, 4)], (-2, 2), {"momentum": 0.9},
         lambda xs, dt: 0.9 * xs[0] + xs[1]),
        ("dampening-l2", [(3,), (3,), (3,)], (-2, 2), {"momentum": 0.5, "dampening": 0.25, "weight_decay": 0.1},
         lambda xs, dt: 0.5 * xs[0] + 0.75 * _decayed_ref(xs, 0.1))],
    "sgd_update": [
        ("plain", [(3, 4), (3, 4), ()], (0.1, 2), {},
         lambda xs, dt: _sgd_update_ref(xs, 0, 0)),
        ("l2-nesterov", [(2, 3), (2, 3), (), (2, 3)], (0.1, 2), {"weight_decay": 0.1, "momentum": 0.9},
         lambda xs, dt: _sgd_update_ref(xs, 0.1, 0.9))],
}



