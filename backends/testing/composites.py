"""Cases for the built-in composite ops: a spec per op (input shapes, domain, attrs, numpy reference) in
:func:`_composite_specs`, run over the selected dtypes (natively where the backend declares a kernel,
through the decomposition otherwise). The sliding-window, optimizer and cross-entropy references live in
:mod:`.conv_pool`, :mod:`.optim`, :mod:`.cross_entropy` and :mod:`.recurrent`; a composite without a spec falls back to
:mod:`.examples`."""

from __future__ import annotations

import math
from collections.abc import Iterator

import ml_dtypes
import numpy as np

from tensorwire.protocol import dtypes as D

from .cases import Case, _Graph
from .conv_pool import _conv2d_grads_ref, _conv2d_ref, _im2col_ref, _max_pool_grad_ref, _pool_len, _pool_ref
from .cross_entropy import _ce_specs
from .elementwise import _erf
from .examples import _example_cases
from .inputs import SELECTED_DTYPES, SPECIAL, _accepts, _case, _f64, _sh, _vals
from .optim import _OPTIM_SPECS
from .recurrent import recurrent_specs
from .reductions import _axes


def _lse(x, axes, keep):
    if not axes:
        return x.copy()
    moved = np.moveaxis(x, axes, range(x.ndim - len(axes), x.ndim))
    flat = moved.reshape(moved.shape[:x.ndim - len(axes)] + (-1,))
    with np.errstate(all="ignore"):
        out = np.logaddexp.reduce(flat, axis=-1) if flat.shape[-1] else np.full(flat.shape[:-1], -np.inf)
    if keep:
        out = np.expand_dims(out, axes)
    return out


def _norm_ref(x, p, axes, keep):
    a = np.abs(x)
    if p == math.inf:
        return np.max(a, axis=axes, keepdims=keep)
    if p == -math.inf:
        return np.min(a, axis=axes, keepdims=keep)
    if p == 0:
        return np.sum(x != 0, axis=axes, keepdims=keep).astype(np.float64)
    return np.sum(a ** p, axis=axes, keepdims=keep) ** (1.0 / p)


def _finfo_max(dt: D.DType) -> float:
    return float(ml_dtypes.finfo(dt.np).max)


def _composite_specs(op: str):
    """For a built-in composite: list of (tag, input shapes (an ndarray: an input taken as it is), domain, attrs,
    reference(x64s, dtype) -> array)."""
    ew = [(2, 3), (), (0, 4)]
    red = [((2, 3, 4), None, False), ((2, 3, 4), [1], True), ((2, 3, 4), [0, -1], False), ((), None, False),
           ((3, 4), [-1], False)]

    def unary(fn, domain=(-3.0, 3.0)):
        return [(_sh(s), [s], domain, {}, lambda xs, dt, fn=fn: fn(xs[0])) for s in ew]

    def reduction(fn, extra=None, domain=(-3.0, 3.0)):
        out = []
        for s, dims, keep in red:
            attrs = {"keepdim": keep} | ({} if dims is None else {"dims": dims}) | (extra or {})
            out.append((f"{_sh(s)},dims={dims},keepdim={keep}", [s], domain, attrs,
                        lambda xs, dt, dims=dims, keep=keep, s=s: fn(xs[0], _axes(dims, len(s)), keep)))
        return out

    if op == "relu":
        return unary(lambda x: np.maximum(x, 0))
    if op == "relu6":
        return unary(lambda x: np.clip(x, 0, 6), (-3, 8))
    if op == "sigmoid":
        return unary(lambda x: 1 / (1 + np.exp(-x)), (-6, 6))
    if op == "square":
        return unary(lambda x: x * x)
    if op == "rsqrt":
        return unary(lambda x: 1 / np.sqrt(x), (0.25, 4))
    if op == "exp2":
        return unary(lambda x: 2.0 ** x)
    if op == "log2":
        return unary(np.log2, (0.25, 8))
    if op == "log10":
        return unary(np.log10, (0.25, 8))
    if op == "isfinite":
        return unary(np.isfinite) + [("special", ["special"], None, {}, lambda xs, dt: np.isfinite(xs[0]))]
    if op == "clamp":
        out = []
        for tag, attrs in (("min", {"min": -1}), ("max", {"max": 0.5}), ("both", {"min": -1.5, "max": 2}),
                           ("lo>hi", {"min": 2, "max": -1})):
            lo, hi = attrs.get("min", -np.inf), attrs.get("max", np.inf)
            out.append((tag, [(3, 4)], (-3, 3), attrs,
                        lambda xs, dt, lo=lo, hi=hi: np.minimum(np.maximum(xs[0], lo), hi)))
        out.append(("special", ["special"], None, {"min": -1, "max": 1},
                    lambda xs, dt: np.minimum(np.maximum(xs[0], -1), 1)))
        return out
    if op == "nan_to_num":
        return [("defaults", ["special"], None, {},
                 lambda xs, dt: np.nan_to_num(xs[0], nan=0.0, posinf=_finfo_max(dt) if dt.is_floating_point else 0,
                                              neginf=-_finfo_max(dt) if dt.is_floating_point else 0)),
                ("given", ["special"], None, {"nan": 1.5, "posinf": 9.0, "neginf": -7.0},
                 lambda xs, dt: np.nan_to_num(xs[0], nan=1.5, posinf=9.0, neginf=-7.0)),
                ("plain", [(2, 3)], (-3, 3), {}, lambda xs, dt: xs[0])]
    if op == "lerp":
        return [("same", [(2, 3), (2, 3), (2, 3)], (-2, 2), {}, lambda xs, dt: xs[0] + xs[2] * (xs[1] - xs[0])),
                ("bcast", [(2, 3), (3,), ()], (-2, 2), {}, lambda xs, dt: xs[0] + xs[2] * (xs[1] - xs[0]))]
    if op == "add_scaled":
        return [("same", [(2, 3), (2, 3), ()], (-2, 2), {}, lambda xs, dt: xs[0] + xs[1] * xs[2]),
                ("bcast", [(2, 3), (3,), ()], (-2, 2), {}, lambda xs, dt: xs[0] + xs[1] * xs[2])]
    if op == "mean":
        return reduction(lambda x, ax, k: np.mean(x, axis=ax, keepdims=k)) + [
            ("empty", [(0, 3)], (-3, 3), {"dims": [1]}, lambda xs, dt: np.zeros((0,))),
            ("dtype", [(3, 4)], (-3, 3), {"dims": [1], "dtype": "float64"}, lambda xs, dt: np.mean(xs[0], axis=1))]
    if op in ("var", "std"):
        f = np.var if op == "var" else np.std
        out = reduction(lambda x, ax, k: f(x, axis=ax, keepdims=k, ddof=1))
        out = [o for o in out if o[1] != [()]]
        out.append(("correction0", [(3, 4)], (-3, 3), {"dims": [1], "correction": 0},
                    lambda xs, dt: f(xs[0], axis=1, ddof=0)))
        return out
    if op == "logsumexp":
        return reduction(_lse) + [("inf", ["special4"], None, {"dims": [1]}, lambda xs, dt: _lse(xs[0], (1,), False)),
                                  ("empty", [(3, 0)], (-3, 3), {"dims": [1], "keepdim": True},
                                   lambda xs, dt: np.full((3, 1), -np.inf))]
    if op in ("softmax", "log_softmax"):
        def sm(x, dim):
            if x.ndim == 0:
                return np.ones(()) if op == "softmax" else np.zeros(())
            if x.size == 0:
                return x.copy()
            e = np.exp(x - np.max(x, axis=dim, keepdims=True))
            s = e / np.sum(e, axis=dim, keepdims=True)
            return s if op == "softmax" else np.log(s)
        return [(f"{_sh(s)},dim={d}", [s], (-4, 4), {"dim": d}, lambda xs, dt, d=d: sm(xs[0], d))
                for s, d in (((2, 3, 4), 1), ((3, 5), -1), ((), 0), ((0, 3), 1), ((4, 2), 0), ((3, 0), 1))]
    if op == "log_softmax_grad":
        def grad(g, y, dim):
            return g - np.exp(y) * (np.sum(g, axis=dim, keepdims=True) if g.ndim else g)
        return [(f"{_sh(s)},dim={d}", [s, s], (-4, 0), {"dim": d}, lambda xs, dt, d=d: grad(xs[0], xs[1], d))
                for s, d in (((2, 3, 4), 1), ((3, 5), -1), ((), 0), ((0, 3), 1), ((4, 2), 0), ((3, 0), 1),
                             ((64, 97), -1))]
    if op == "norm":
        out = []
        for p, s, dims, keep in ((2, (3, 4), None, False), (1, (3, 4), [1], True), (math.inf, (2, 3, 4), [0, 2], False),
                                 (-math.inf, (3, 4), [0], False), (0, (3, 4), [1], False), (3, (3, 4), [1], False),
                                 (0.5, (3, 4), None, True)):
            attrs = {"p": p, "keepdim": keep} | ({} if dims is None else {"dims": dims})
            out.append((f"p={p},{_sh(s)},dims={dims}", [s], (-2, 2), attrs,
                        lambda xs, dt, p=p, dims=dims, keep=keep, s=s: _norm_ref(xs[0], p, _axes(dims, len(s)), keep)))
        return out
    if op in ("all", "any"):
        f = np.all if op == "all" else np.any
        out = reduction(lambda x, ax, k: f(x != 0, axis=ax, keepdims=k), domain=(0, 1))
        out.append(("empty", [(0, 3)], (0, 1), {"dims": [0]}, lambda xs, dt: f(xs[0] != 0, axis=0)))
        out.append(("empty-all", [(0, 3)], (0, 1), {}, lambda xs, dt: f(xs[0] != 0)))
        return out
    if op in ("tril", "triu"):
        f = np.tril if op == "tril" else np.triu
        return [(f"{_sh(s)},k={k}", [s], (-3, 3), {"diagonal": k}, lambda xs, dt, k=k: f(xs[0], k))
                for s, k in (((3, 4), 0), ((4, 3), -1), ((2, 3, 4), 1), ((0, 3), 0))]
    if op == "eye":
        return [(f"{n}x{m}", [], None, {"n": n, "m": m}, lambda xs, dt, n=n, m=m: np.eye(n, m))
                for n, m in ((3, 3), (2, 4), (0, 2))]
    if op == "gelu":
        return [("erf", [(3, 4)], (-4, 4), {}, lambda xs, dt: 0.5 * xs[0] * (1 + _erf(xs[0] / math.sqrt(2)))),
                ("tanh", [(3, 4)], (-4, 4), {"approximate": "tanh"},
                 lambda xs, dt: 0.5 * xs[0] * (1 + np.tanh(math.sqrt(2 / math.pi) * (xs[0] + 0.044715 * xs[0] ** 3)))),
                ("0d", [()], (-4, 4), {}, lambda xs, dt: 0.5 * xs[0] * (1 + _erf(xs[0] / math.sqrt(2))))]
    if op == "linear":
        return [("bias", [(2, 3, 4), (5, 4), (5,)], (-2, 2), {}, lambda xs, dt: xs[0] @ xs[1].T + xs[2]),
                ("no-bias", [(3, 4), (2, 4)], (-2, 2), {}, lambda xs, dt: xs[0] @ xs[1].T),
                ("1d", [(4,), (3, 4)], (-2, 2), {}, lambda xs, dt: xs[1] @ xs[0])]
    if op == "silu":
        return unary(lambda x: x / (1 + np.exp(-x)), (-6, 6))
    if op == "leaky_relu":
        return [("default", [(3, 4)], (-3, 3), {}, lambda xs, dt: np.where(xs[0] > 0, xs[0], 0.01 * xs[0])),
                ("slope", [(2, 5)], (-3, 3), {"negative_slope": 0.2},
                 lambda xs, dt: np.where(xs[0] > 0, xs[0], 0.2 * xs[0])),
                ("empty", [(0, 2)], (-3, 3), {}, lambda xs, dt: xs[0])]

    def softplus(x, beta=1.0, thr=20.0):
        return np.where(beta * x > thr, x, np.log1p(np.exp(np.minimum(beta * x, thr))) / beta)
    if op == "softplus":
        return [("default", [(3, 4)], (-5, 5), {}, lambda xs, dt: softplus(xs[0])),
                ("beta-threshold", [(3, 4)], (-5, 5), {"beta": 2.0, "threshold": 3.0},
                 lambda xs, dt: softplus(xs[0], 2.0, 3.0))]
    if op in ("layer_norm", "rms_norm"):
        def norm(x, n, eps):
            ax = tuple(range(x.ndim - n, x.ndim))
            if op == "layer_norm":
                xc = x - x.mean(axis=ax, keepdims=True)
                return xc / np.sqrt((xc ** 2).mean(axis=ax, keepdims=True) + eps)
            return x / np.sqrt((x ** 2).mean(axis=ax, keepdims=True) + eps)
        return [("last", [(3, 8)], (-3, 3), {}, lambda xs, dt: norm(xs[0], 1, 1e-5)),
                ("last2", [(2, 3, 4)], (-3, 3), {"ndim": 2, "eps": 1e-3}, lambda xs, dt: norm(xs[0], 2, 1e-3))]
    if op == "layer_norm_grad":
        def ln_grad(xs, n, eps):
            g, x, y = xs
            ax = tuple(range(x.ndim - n, x.ndim))
            xc = x - x.mean(axis=ax, keepdims=True)
            rstd = 1 / np.sqrt((xc ** 2).mean(axis=ax, keepdims=True) + eps)
            return rstd * (g - g.mean(axis=ax, keepdims=True) - y * (g * y).mean(axis=ax, keepdims=True))
        return [("last", [(3, 8)] * 3, (-3, 3), {}, lambda xs, dt: ln_grad(xs, 1, 1e-5)),
                ("last2", [(2, 3, 4)] * 3, (-3, 3), {"ndim": 2, "eps": 1e-3}, lambda xs, dt: ln_grad(xs, 2, 1e-3))]
    if op == "add_n":
        return [("2d-3", [(3, 4)] * 3, (-3, 3), {}, lambda xs, dt: xs[0] + xs[1] + xs[2]),
                ("0d-5", [()] * 5, (-3, 3), {}, lambda xs, dt: xs[0] + xs[1] + xs[2] + xs[3] + xs[4]),
                ("empty-2", [(0, 3)] * 2, (-3, 3), {}, lambda xs, dt: xs[0] + xs[1])]
    if op == "gelu_grad":
        def gelu_grad(xs, dt):
            g, x = xs
            return g * (0.5 * (1 + _erf(x / math.sqrt(2))) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi))
        return [("2d", [(3, 4)] * 2, (-4, 4), {}, gelu_grad), ("0d", [()] * 2, (-4, 4), {}, gelu_grad),
                ("empty", [(0, 3)] * 2, (-4, 4), {}, gelu_grad)]
    if op == "im2col":
        return [("k2", [(2, 3, 4, 5)], (-2, 2), {"kernel": [2, 2]}, lambda xs, dt: _im2col_ref(xs[0], (2, 2))),
                ("strided-padded-dilated", [(1, 2, 5, 6)], (-2, 2),
                 {"kernel": [2, 3], "stride": [2, 1], "padding": [1, 0], "dilation": [1, 2]},
                 lambda xs, dt: _im2col_ref(xs[0], (2, 3), (2, 1), (1, 0), (1, 2)))]
    if op == "conv2d":
        return [("plain", [(2, 3, 5, 5), (4, 3, 3, 3)], (-2, 2), {}, lambda xs, dt: _conv2d_ref(xs[0], xs[1])),
                ("stride-pad-bias", [(1, 2, 6, 5), (3, 2, 3, 2), (3,)], (-2, 2), {"stride": [2, 1], "padding": [1, 1]},
                 lambda xs, dt: _conv2d_ref(xs[0], xs[1], (2, 1), (1, 1)) + xs[2][None, :, None, None]),
                ("groups-dilation", [(2, 4, 6, 6), (6, 2, 2, 2)], (-2, 2), {"groups": 2, "dilation": [2, 1]},
                 lambda xs, dt: _conv2d_ref(xs[0], xs[1], dilation=(2, 1), groups=2))]
    if op in ("conv2d_grad_input", "conv2d_grad_weight"):
        out = []
        for tag, sx, sw_, a in (("plain", (2, 3, 5, 5), (4, 3, 3, 3), {}),
                                ("stride-pad", (1, 2, 6, 5), (3, 2, 3, 2), {"stride": [2, 1], "padding": [1, 1]}),
                                ("groups-dilation", (2, 4, 6, 6), (6, 2, 2, 2), {"groups": 2, "dilation": [2, 1]}),
                                ("uneven-stride", (1, 2, 7, 6), (2, 1, 2, 3),
                                 {"stride": [3, 2], "padding": [0, 2], "groups": 2})):
            geo = {k: tuple(a.get(k, d)) for k, d in (("stride", (1, 1)), ("padding", (0, 0)), ("dilation", (1, 1)))}
            oh = _pool_len(sx[2], sw_[2], geo["stride"][0], geo["padding"][0], geo["dilation"][0], False)
            ow = _pool_len(sx[3], sw_[3], geo["stride"][1], geo["padding"][1], geo["dilation"][1], False)
            sg = (sx[0], sw_[0], oh, ow)
            if op == "conv2d_grad_input":
                def ref(xs, dt, sx=sx, geo=geo, g=a.get("groups", 1)):
                    return _conv2d_grads_ref(np.zeros(sx), xs[1], xs[0], groups=g, **geo)[0]
                out.append((tag, [sg, sw_], (-2, 2), {**a, "input_size": list(sx[2:])}, ref))
            else:
                def ref(xs, dt, sw_=sw_, geo=geo, g=a.get("groups", 1)):
                    return _conv2d_grads_ref(xs[0], np.zeros(sw_), xs[1], groups=g, **geo)[1]
                out.append((tag, [sx, sg], (-2, 2), {**a, "kernel": list(sw_[2:])}, ref))
        return out
    if op == "max_pool2d":
        return [("k2", [(2, 3, 4, 6)], (-3, 3), {"kernel": [2, 2]}, lambda xs, dt: _pool_ref(xs[0], "max", (2, 2))),
                ("pad-stride", [(1, 2, 5, 5)], (-3, 3), {"kernel": [3, 3], "stride": [2, 2], "padding": [1, 1]},
                 lambda xs, dt: _pool_ref(xs[0], "max", (3, 3), (2, 2), (1, 1))),
                ("ceil-dilation", [(1, 2, 6, 7)], (-3, 3),
                 {"kernel": [2, 2], "stride": [2, 2], "dilation": [1, 2], "ceil_mode": True},
                 lambda xs, dt: _pool_ref(xs[0], "max", (2, 2), (2, 2), dilation=(1, 2), ceil_mode=True))]
    if op == "max_pool2d_grad":
        out = []
        for tag, sx, a in (("k2", (2, 3, 4, 6), {"kernel": [2, 2]}),
                           ("pad-stride", (1, 2, 5, 5), {"kernel": [3, 3], "stride": [2, 2], "padding": [1, 1]}),
                           ("ceil-dilation", (1, 2, 6, 7),
                            {"kernel": [2, 2], "stride": [2, 2], "dilation": [1, 2], "ceil_mode": True})):
            geo = ((a["kernel"]), tuple(a.get("stride", a["kernel"])), tuple(a.get("padding", (0, 0))),
                   tuple(a.get("dilation", (1, 1))), a.get("ceil_mode", False))
            sy = (sx[0], sx[1], _pool_len(sx[2], geo[0][0], geo[1][0], geo[2][0], geo[3][0], geo[4]),
                  _pool_len(sx[3], geo[0][1], geo[1][1], geo[2][1], geo[3][1], geo[4]))
            out.append((tag, [sx, sy], (-3, 3), a, lambda xs, dt, geo=geo: _max_pool_grad_ref(xs[0], xs[1], *geo)))
        return out
    if op == "avg_pool2d":
        out = []
        for tag, a in (("k2", {"kernel": [2, 2]}),
                       ("pad", {"kernel": [3, 3], "stride": [2, 2], "padding": [1, 1]}),
                       ("pad-exclude", {"kernel": [3, 3], "stride": [2, 2], "padding": [1, 1],
                                        "count_include_pad": False}),
                       ("ceil", {"kernel": [2, 2], "stride": [2, 2], "ceil_mode": True}),
                       ("ceil-pad", {"kernel": [3, 3], "stride": [2, 2], "padding": [1, 1], "ceil_mode": True}),
                       ("divisor", {"kernel": [2, 2], "divisor_override": 3})):
            def ref(xs, dt, a=a):
                r = _pool_ref(xs[0], "avg", tuple(a["kernel"]), tuple(a.get("stride", a["kernel"])),
                              tuple(a.get("padding", (0, 0))), ceil_mode=a.get("ceil_mode", False),
                              count_include_pad=a.get("count_include_pad", True),
                              divisor_override=a.get("divisor_override"))
                return r if dt.is_floating_point else np.trunc(r)  # int64: torch truncates the quotient
            out.append((tag, [(1, 2, 5, 5)], (-3, 3), a, ref))
        return out
    if op in _OPTIM_SPECS:
        return _OPTIM_SPECS[op]
    if op in ("cross_entropy_index", "cross_entropy_index_grad"):
        return _ce_specs(op)
    if op in ("rnn_scan", "rnn_scan_grad"):
        return recurrent_specs(op)
    return None


def _special_input(tag: str, dt: D.DType) -> np.ndarray:
    if tag == "special4":
        x = np.array([[0.0, -np.inf, 1.0], [-np.inf, -np.inf, -np.inf], [np.inf, 0.0, 1.0], [1.0, 2.0, np.nan]])
        return x.astype(dt.np)
    if not dt.is_floating_point:
        return np.array([0, 1, -2, 3]).astype(dt.np)
    return SPECIAL.astype(dt.np)


def _composite_cases(op: str) -> Iterator[Case]:
    specs = _composite_specs(op)
    if specs is None:
        yield from _example_cases(op)
        return
    for i, dt in enumerate(SELECTED_DTYPES):
        for k, (tag, shapes, domain, attrs, ref) in enumerate(specs):
            if len(specs) > 3 and (k + i) % 2 and k != 0:
                continue
            attrs_dt = dict(attrs)
            if op == "eye":
                attrs_dt["dtype"] = dt.name
            metas = [(s.shape, D.from_numpy(s.dtype)) if isinstance(s, np.ndarray) else
                     ((2,) if isinstance(s, str) else s, dt) for s in shapes]
            if not _accepts(op, metas, attrs_dt):
                continue

            def build(rng, dt=dt, shapes=shapes, domain=domain, attrs=attrs_dt, ref=ref):
                g = _Graph()
                xs = [s if isinstance(s, np.ndarray) else _special_input(s, dt) if isinstance(s, str) else
                      _vals(rng, s, dt, *domain) for s in shapes]
                n = g.op(op, *[g.input(x) for x in xs], **attrs)
                g.ref(n, ref([_f64(x) for x in xs], dt), scale=4.0)
                return g
            yield _case(f"{op}[{dt.name}:{tag}]", op, build)
