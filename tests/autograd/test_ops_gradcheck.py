"""Every differentiable op of the op table against central finite differences, in float64.

Cases are generated per op (``GENERATORS``): broadcasting shapes, dims/keepdim variants, views,
indexing. An op marked differentiable without a generator fails ``test_every_op_has_a_generator``, so
a new op cannot go untested. All checks are recorded lazily (directional checks ``v^T J u``, as
torch's fast mode) and fetched in one round trip.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensorwire as tw
from tensorwire.autograd_hooks import record
from tensorwire.protocol.ops import OPS
from tests._prebuild import batch_kernel_lists, prebuild_c_fragments, recorded_batches
from tests.conftest import CPU_MODES

RNG = np.random.default_rng(1234)


def R(op, ins, attrs=None, device=None):
    """Record ``op`` exactly as the op table defines it (through the autograd hook)."""
    return record(ins[0]._s, op, list(ins), attrs, device or ins[0]._dev)


def P(shape, lo=-1.0, hi=1.0, away=0.0):
    """A float64 leaf requiring grad, uniform in [lo, hi] with |x| >= away."""
    a = RNG.uniform(lo, hi, size=shape)
    if away:
        a = np.where(np.abs(a) < away, np.sign(a + 1e-12) * away + a, a)
    return tw.tensor(a, dtype=tw.float64, requires_grad=True)


def PC(shape):
    """A complex128 leaf requiring grad (both parts standard normal)."""
    a = RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)
    return tw.tensor(a, dtype=tw.complex128, requires_grad=True)


def _complex_ops():
    """The complex primitives (issue 33): the checks' directions and weights are complex where the values are."""
    return {
        "real": lambda: [case("real", [PC((3, 4))])], "imag": lambda: [case("imag", [PC((3, 4))])],
        "conj": lambda: [case("conj", [PC((3, 4))])],
        "complex": lambda: [case("complex", [P((3, 1)), P((4,))])],
        "fft_c2c": lambda: [case("fft_c2c", [PC((3, 6))], {"dims": [1], "norm": "none", "forward": True}),
                            case("fft_c2c", [PC((4, 3))], {"dims": [0, 1], "norm": "sqrt", "forward": False},
                                 name="2d")],
        "fft_r2c": lambda: [case("fft_r2c", [P((3, 6))], {"dims": [1], "norm": "none"}),
                            case("fft_r2c", [P((4, 5))], {"dims": [1, 0], "norm": "n"}, name="2d")],
        "fft_c2r": lambda: [case("fft_c2r", [PC((3, 5))], {"dims": [1], "norm": "none", "n": 8}),
                            case("fft_c2r", [PC((3, 5))], {"dims": [1], "norm": "sqrt", "n": 9}, name="odd"),
                            case("fft_c2r", [PC((4, 3))], {"dims": [0, 1], "norm": "n", "n": 4}, name="2d")],
    }


def I(arr):  # noqa: E743 - an index tensor
    return tw.tensor(np.asarray(arr, dtype=np.int64))


def case(op, inputs, attrs=None, device=None, name=""):
    return (f"{op}{name}", lambda *xs: R(op, xs, attrs, device), inputs)


BCAST = [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((2, 3, 4), (4,)), ((), (3,))]
REDUCE_DIMS = [(None, False), ([0], False), ([1], True), ([0, 2], False), ([-1], True), ([0, 1, 2], True)]


def unary(op, lo=-1.0, hi=1.0, away=0.0):
    return lambda: [case(op, [P(s, lo, hi, away)], name=str(s)) for s in [(3, 4), (), (2, 1, 3)]]


def binary(op, a=(-1.0, 1.0, 0.0), b=(-1.0, 1.0, 0.0)):
    return lambda: [case(op, [P(sa, *a), P(sb, *b)], name=f"{sa}{sb}") for sa, sb in BCAST]


def reduce_(op, lo=-1.0, hi=1.0, away=0.0, extra=None):
    def gen():
        out = []
        for dims, keep in REDUCE_DIMS:
            attrs = {"dims": dims, "keepdim": keep, **(extra or {})}
            out.append(case(op, [P((2, 3, 4), lo, hi, away)], attrs, name=f"{dims}{keep}"))
        return out
    return gen


def _distinct_pair(shape_a, shape_b):
    a, b = P(shape_a), P(shape_b)
    return [a, b]


def _where():
    out = []
    for sc, sa, sb in [((3, 4), (3, 4), (3, 4)), ((3, 1), (1, 4), (3, 4)), ((4,), (3, 4), ())]:
        c = tw.tensor(RNG.random(sc) > 0.5)
        out.append(case("where", [c, P(sa), P(sb)], name=f"{sc}{sa}{sb}"))
    return out


def _clamp():
    return [case("clamp", [P((3, 4), away=0.05)], {"min": -0.5, "max": 0.5}, name="both"),
            case("clamp", [P((3, 4), away=0.05)], {"min": 0.0, "max": None}, name="min"),
            case("clamp", [P((3, 4), away=0.05)], {"min": None, "max": 0.25}, name="max")]


def _cast():
    return [case("cast", [P((3, 4))], {"dtype": "float64"})]


def _copy():
    return [case("copy", [P((3, 4))], name="same"),
            case("copy", [P((3, 4))], {"shape": [3, 4], "dtype": "float64"}, device="cpu:1", name="cpu1")]


def _prod():
    out = []
    for dims, keep in [(None, False), ([1], False), ([0], True), ([2], False)]:
        out.append(case("prod", [P((2, 3, 4), 0.5, 1.5)], {"dims": dims, "keepdim": keep}, name=f"{dims}{keep}"))
    out.append(case("prod", [P((2, 3, 4), 0.5, 1.5)], {"dims": [0, 2], "keepdim": True}, name="02"))
    return out


def _scan(op):
    return lambda: [case(op, [P((3, 4), 0.5, 1.5)], {"dim": d}, name=str(d)) for d in (0, 1, -1)]


def _softmax(op):
    return lambda: [case(op, [P((3, 4), -2, 2)], {"dim": d}, name=str(d)) for d in (0, 1, -1)] + \
        [case(op, [P((2, 3, 4), -2, 2)], {"dim": 1}, name="3d")]


def _log_softmax_grad():
    """log_softmax's gradient op (differentiated through its decomposition: double backward), by g and by y."""
    return [case("log_softmax_grad", [P((3, 4), -2, 2), P((3, 4), -3, -0.5)], {"dim": d}, name=str(d))
            for d in (1, 0)] + [case("log_softmax_grad", [P((2, 3, 4), -2, 2), P((2, 3, 4), -3, -0.5)], {"dim": 1},
                                     name="3d")]


def _var(op):
    def gen():
        out = []
        for dims, keep in REDUCE_DIMS[:4]:
            for corr in (0, 1):
                out.append(case(op, [P((2, 3, 4))], {"dims": dims, "keepdim": keep, "correction": corr},
                                name=f"{dims}{keep}{corr}"))
        return out
    return gen


def _norm():
    out = []
    for p in (1, 2, 3, 0.5, math.inf, -math.inf):
        for dims, keep in [(None, False), ([1], True), ([0, 2], False)]:
            out.append(case("norm", [P((2, 3, 4), away=0.05)], {"p": p, "dims": dims, "keepdim": keep},
                            name=f"p{p}{dims}{keep}"))
    return out


def _reshape():
    return [case("reshape", [P((2, 3, 4))], {"shape": [6, 4]}), case("reshape", [P((2, 3, 4))], {"shape": [24]}),
            case("reshape", [P(())], {"shape": [1, 1]}, name="0d")]


def _permute():
    return [case("permute", [P((2, 3, 4))], {"dims": [2, 0, 1]}), case("permute", [P((3, 4))], {"dims": [1, 0]})]


def _expand():
    return [case("expand", [P((3, 1))], {"shape": [2, 3, 4]}), case("expand", [P(())], {"shape": [3, 2]}),
            case("expand", [P((1, 4))], {"shape": [3, -1]})]


def _slice():
    return [case("slice", [P((5, 6))], {"starts": [1, 0], "stops": [4, 6], "steps": [1, 1]}, name="s1"),
            case("slice", [P((5, 6))], {"starts": [0, 1], "stops": [5, 6], "steps": [2, 3]}, name="s2"),
            case("slice", [P((2, 5, 3))], {"starts": [0, 2, 1], "stops": [2, 2, 3], "steps": [1, 1, 1]},
                 name="empty")]


def _flip():
    return [case("flip", [P((3, 4))], {"dims": [0]}), case("flip", [P((2, 3, 4))], {"dims": [0, 2]})]


def _pad():
    return [case("pad", [P((3, 4))], {"pads": [1, 2, 0, 1], "value": 0.5}, name="grow"),
            case("pad", [P((3, 4))], {"pads": [-1, 0, 1, -2], "value": 0}, name="crop")]


def _cat():
    return [case("cat", [P((2, 3)), P((4, 3))], {"dim": 0}, name="0"),
            case("cat", [P((2, 3)), P((2, 1)), P((2, 2))], {"dim": 1}, name="1"),
            case("cat", [P((2, 3)), tw.tensor(RNG.random((2, 2)), dtype=tw.float64)], {"dim": -1}, name="const")]


def _gather():
    idx = I(RNG.integers(0, 4, size=(3, 5)))
    idx2 = I(RNG.integers(0, 3, size=(2, 4)))
    return [case("gather", [P((3, 4)), idx], {"dim": 1}, name="1"),
            case("gather", [P((3, 4)), idx2], {"dim": 0}, name="0")]


def _perm_index(shape, dim):
    """An index for scatter with distinct targets along ``dim`` (scatter's result is then well-defined)."""
    out = np.zeros(shape, dtype=np.int64)
    for pos in np.ndindex(*[s for i, s in enumerate(shape) if i != dim]):
        col = RNG.permutation(5)[:shape[dim]]
        sl = list(pos)
        sl.insert(dim, slice(None))
        out[tuple(sl)] = col
    return I(out)


def _scatter():
    return [case("scatter", [P((5, 4)), _perm_index((3, 4), 0), P((3, 4))], {"dim": 0}, name="0"),
            case("scatter", [P((4, 5)), _perm_index((2, 3), 1), P((3, 4))], {"dim": 1}, name="small")]


def _scatter_add():
    return [case("scatter_add", [P((5, 4)), I(RNG.integers(0, 5, size=(3, 4))), P((3, 4))], {"dim": 0}, name="0"),
            case("scatter_add", [P((4, 5)), I(RNG.integers(0, 5, size=(2, 3))), P((3, 4))], {"dim": 1},
                 name="small")]


def _scatter_reduce():
    """Each reduction, with and without ``self``, duplicate targets, a ``src`` larger than the index, both dims
    (values apart by construction: no ties within the finite differences' reach)."""
    def sr(reduce, keep, dim, name):
        shape, ishape, sshape = ((5, 4), (6, 4), (7, 4)) if dim == 0 else ((4, 5), (3, 6), (4, 7))
        return case("scatter_reduce", [P(shape, 0.2, 1.0), I(RNG.integers(0, 5, size=ishape)), P(sshape, 0.2, 1.0)],
                    {"dim": dim, "reduce": reduce, "include_self": keep}, name=name)
    return [sr("prod", True, 0, "prod"), sr("prod", False, 1, "prod_noself"), sr("amax", True, 1, "amax"),
            sr("amax", False, 0, "amax_noself"), sr("amin", True, 0, "amin"), sr("amin", False, 1, "amin_noself")]


def _index():
    return [case("index", [P((5, 3)), I([0, 2, 2, 4])], {"dim": 0}, name="dup"),
            case("index", [P((2, 5, 3)), I([[1, 0], [4, 4]])], {"dim": 1}, name="2d"),
            case("index", [P((4, 5)), I([0, 3, 1]), I([4, 0, 2])], {"dim": 0}, name="two")]


def _index_put():
    return [case("index_put", [P((5, 3)), P((2, 3)), I([1, 3])], {"dim": 0, "accumulate": False}, name="set"),
            case("index_put", [P((5, 3)), P((3,)), I([1, 3, 1])], {"dim": 0, "accumulate": True}, name="acc"),
            case("index_put", [P((3, 5)), P(()), I([0, 2]), I([4, 1])], {"dim": 0, "accumulate": False},
                 name="scalar")]


def _setslice():
    return [case("setslice", [P((4, 5)), P((2, 5))], {"starts": [1, 0], "stops": [3, 5], "steps": [1, 1]}),
            case("setslice", [P((4, 5)), P((5,))], {"starts": [0, 0], "stops": [4, 5], "steps": [2, 1]},
                 name="bcast")]


def _matmul():
    shapes = [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (4, 5)),
              ((2, 1, 3, 4), (5, 4, 2)), ((4,), (2, 4, 3))]
    return [case("matmul", [P(a), P(b)], name=f"{a}{b}") for a, b in shapes]


def _tri(op):
    return lambda: [case(op, [P((4, 5))], {"diagonal": k}, name=str(k)) for k in (0, 1, -2)] + \
        [case(op, [P((2, 3, 3))], {"diagonal": 0}, name="3d")]


def _lerp():
    return [case("lerp", [P((3, 4)), P((3, 4)), P((3, 4))], name="same"),
            case("lerp", [P((3, 1)), P((4,)), P(())], name="bcast")]


def _add_scaled():
    return [case("add_scaled", [P((3, 4)), P((3, 4)), P(())], name="same"),
            case("add_scaled", [P((3, 1)), P((4,)), P(())], name="bcast")]


def _maxmin(op):
    return lambda: [case(op, _distinct_pair(sa, sb), name=f"{sa}{sb}") for sa, sb in BCAST] + \
        [case(op, [P((3, 4)), tw.tensor(0.0, dtype=tw.float64)], name="const")]


def _softplus():
    return [case("softplus", [P((3, 4), -2, 2)], {"beta": 1.0, "threshold": 20.0}, name="plain"),
            case("softplus", [P((3, 4), -2, 2)], {"beta": 2.0, "threshold": 20.0}, name="beta"),
            case("softplus", [P((3, 4), -2, 2, 0.3)], {"beta": 1.0, "threshold": 0.0}, name="threshold")]


def _norm_last(op):
    return lambda: [case(op, [P((3, 4))], {"ndim": 1, "eps": 1e-5}, name="1"),
                    case(op, [P((2, 3, 4))], {"ndim": 2, "eps": 1e-3}, name="2")]


def _batch_norm():
    """Training (the batch statistics depend on x), eval (running statistics: constants), affine or not, 2-D to 5-D."""
    tr = {"training": True, "eps": 1e-5}
    aff = {"has_weight": True, "has_bias": True}
    return [case("batch_norm", [P((4, 3))], tr, name="2d"),
            case("batch_norm", [P((2, 3, 4)), P((3,)), P((3,))], {**tr, **aff}, name="3d-affine"),
            case("batch_norm", [P((2, 2, 3, 2)), P((2,))], {**tr, "has_weight": True}, name="4d-weight"),
            case("batch_norm", [P((2, 2, 2, 2, 2)), P((2,))], {**tr, "has_bias": True}, name="5d-bias"),
            case("batch_norm", [P((2, 3, 4)), tw.tensor(RNG.uniform(-1, 1, 3)), tw.tensor(RNG.uniform(0.5, 2, 3)),
                                P((3,)), P((3,))], {"eps": 1e-5, **aff}, name="eval")]


def _batch_norm_grads(op):
    """The backward ops with their inputs free (the statistics given: a double backward's view of them)."""
    def stats(c):
        return tw.tensor(np.concatenate([RNG.uniform(-1, 1, c), RNG.uniform(0.5, 2, c)]), requires_grad=True)

    if op == "batch_norm_stats":
        return lambda: [case(op, [P((4, 3))], name="2d"), case(op, [P((2, 3, 2, 2))], name="4d")]
    if op == "batch_norm_grad_stats":
        return lambda: [case(op, [P((2, 3, 4)), P((2, 3, 4)), stats(3)], {"eps": 1e-5})]
    return lambda: [case(op, [P((2, 3, 4)), P((2, 3, 4)), stats(3), P((6,)), P((3,))],
                         {"training": True, "eps": 1e-5, "has_weight": True}, name="train"),
                    case(op, [P((2, 3, 4)), P((2, 3, 4)), stats(3)], {"eps": 1e-5}, name="eval")]


def _im2col():
    return [case("im2col", [P((1, 2, 5, 5))], {"kernel": [2, 3], "stride": [1, 2], "padding": [1, 0],
                                                "dilation": [1, 1]}, name="a"),
            case("im2col", [P((2, 1, 4, 4))], {"kernel": [2, 2], "stride": [2, 2], "padding": [0, 0],
                                                "dilation": [1, 1]}, name="b")]


def _conv2d():
    return [case("conv2d", [P((2, 2, 5, 5)), P((3, 2, 3, 3))], {"stride": [1, 1], "padding": [1, 1],
                                                                 "dilation": [1, 1], "groups": 1}, name="pad"),
            case("conv2d", [P((1, 4, 5, 4)), P((4, 2, 2, 3))], {"stride": [2, 1], "padding": [0, 1],
                                                                 "dilation": [1, 1], "groups": 2}, name="groups"),
            case("conv2d", [P((2, 2, 4, 4)), P((3, 2, 2, 2)), P((3,))], {"stride": [1, 1], "padding": [1, 1],
                                                                           "dilation": [1, 1], "groups": 1},
                 name="bias")]


def _conv2d_grad(which):
    """conv2d_grad_input / conv2d_grad_weight (conv2d's VJP ops; conv2d_grad_input is also the transposed
    convolution): double backward, conv2d_grad_input through its VJP rule, conv2d_grad_weight through its
    decomposition. "outpad" has an input_size one row and column above the smallest that fits (a transposed
    convolution's output_padding)."""
    def gen():
        out = []
        for name, sx, sw_, sg, a in (("pad", (2, 2, 5, 5), (3, 2, 3, 3), (2, 3, 5, 5),
                                      {"stride": [1, 1], "padding": [1, 1], "dilation": [1, 1], "groups": 1}),
                                     ("groups", (1, 4, 5, 4), (4, 2, 2, 3), (1, 4, 2, 4),
                                      {"stride": [2, 1], "padding": [0, 1], "dilation": [1, 1], "groups": 2}),
                                     ("dilation", (1, 1, 6, 5), (2, 1, 2, 2), (1, 2, 2, 3),
                                      {"stride": [2, 1], "padding": [0, 0], "dilation": [2, 2], "groups": 1}),
                                     ("outpad", (2, 2, 6, 6), (4, 1, 3, 3), (2, 4, 3, 2),
                                      {"stride": [2, 2], "padding": [1, 0], "dilation": [1, 1], "groups": 2})):
            if which == "input":
                out.append(case("conv2d_grad_input", [P(sg), P(sw_)], {**a, "input_size": list(sx[2:])}, name=name))
            else:
                out.append(case("conv2d_grad_weight", [P(sx), P(sg)], {**a, "kernel": list(sw_[2:])}, name=name))
        return out
    return gen

def _distinct(shape):
    a = RNG.permutation(int(np.prod(shape))).reshape(shape) / 10.0
    return tw.tensor(a, dtype=tw.float64, requires_grad=True)


def _max_pool2d():
    return [case("max_pool2d", [_distinct((1, 2, 5, 5))], {"kernel": [2, 2], "stride": [2, 2], "padding": [0, 0],
                                                            "dilation": [1, 1], "ceil_mode": False}, name="a"),
            case("max_pool2d", [_distinct((1, 1, 5, 5))], {"kernel": [3, 3], "stride": [2, 2], "padding": [1, 1],
                                                            "dilation": [1, 1], "ceil_mode": True}, name="pad")]


def _max_pool2d_grad():
    """max_pool2d's VJP op, differentiated through its decomposition (double backward): linear in the output
    gradient, constant in x (distinct values, so no window changes its maximum under the finite differences)."""
    out = []
    for name, sx, a in (("a", (1, 2, 4, 4), {"kernel": [2, 2], "stride": [2, 2]}),
                        ("pad", (1, 1, 5, 5), {"kernel": [3, 3], "stride": [2, 2], "padding": [1, 1],
                                               "ceil_mode": True})):
        sy = tuple(tw.nn.functional.max_pool2d(tw.zeros(sx), a["kernel"], a["stride"], a.get("padding", 0),
                                               ceil_mode=a.get("ceil_mode", False)).shape)
        out.append(case("max_pool2d_grad", [_distinct(sx), P(sy)], a, name=name))
    return out


def _avg_pool2d():
    return [case("avg_pool2d", [P((1, 2, 5, 5))], {"kernel": [2, 2], "stride": [2, 2], "padding": [0, 0],
                                                    "ceil_mode": False, "count_include_pad": True}, name="a"),
            case("avg_pool2d", [P((1, 1, 5, 5))], {"kernel": [3, 3], "stride": [2, 2], "padding": [1, 1],
                                                    "ceil_mode": True, "count_include_pad": False}, name="pad")]


def _cross_entropy(grad):
    """cross_entropy_index (and its gradient op, differentiated through its decomposition: double backward)."""
    def gen():
        out = []
        for red, t, ii in (("mean", [1, 0, 4, -100], -100), ("sum", [2, 4, 4, 0], 4), ("none", [3, -100, 1, 0], -100)):
            ins = [P((4, 5), -2, 2), I(t)] + ([P((4,) if red == "none" else ())] if grad else [])
            out.append(case("cross_entropy_index" + ("_grad" if grad else ""), ins,
                            {"reduction": red, "ignore_index": ii}, name=red))
        return out
    return gen


def _rnn(op):
    """rnn_scan (its VJP rule: one rnn_scan_grad, a matmul for the weight) and rnn_scan_grad (double backward,
    through its decomposition), every mode, both directions: T=3, B=2, H=2."""
    from tensorwire.protocol.ops.recurrent import GATES, PACKED

    def gen():
        out = []
        for mode in GATES:
            for rev in (False, True):
                g, H = GATES[mode] * 2, 2
                states = [P((2, H)) for _ in range(2 if mode == "lstm" else 1)]
                attrs, name = {"mode": mode, "reverse": rev}, f"{mode}{'-rev' if rev else ''}"
                if op == "rnn_scan":
                    out.append(case(op, [P((3, 2, g)), *states, P((g, H)), P((g,))], attrs, name=name))
                else:
                    w = PACKED[mode] * H
                    out.append(case(op, [P((3, 2, w), 0.1, 0.9), P((3, 2, w)), *states, P((g, H))], attrs, name=name))
                if not rev:  # a cell's one step: 2-D gi / y
                    if op == "rnn_scan":
                        out.append(case(op, [P((2, g)), *states, P((g, H)), P((g,))], attrs, name=name + "-step"))
                    else:
                        w = PACKED[mode] * H
                        out.append(case(op, [P((2, w), 0.1, 0.9), P((2, w)), *states, P((g, H))], attrs,
                                        name=name + "-step"))
        return out
    return gen


GENERATORS = {
    "gelu": lambda: [case("gelu", [P((3, 4), -2, 2)], {"approximate": a}, name=a) for a in ("none", "tanh")],
    "silu": unary("silu", -3, 3), "leaky_relu": lambda: [case("leaky_relu", [P((3, 4), away=0.05)],
                                                             {"negative_slope": 0.1})],
    "linear": lambda: [case("linear", [P((3, 4)), P((5, 4)), P((5,))], name="bias"),
                       case("linear", [P((2, 3, 4)), P((5, 4))], name="nobias")],
    "softplus": _softplus, "layer_norm": _norm_last("layer_norm"), "rms_norm": _norm_last("rms_norm"),
    # the backward ops with every input free (a double backward's view: y, the forward's output, is an input too)
    "gelu_grad": lambda: [case("gelu_grad", [P((3, 4)), P((3, 4), -2, 2)])],
    "add_n": lambda: [case("add_n", [P((3, 4)), P((3, 4)), P((3, 4))], name="3"),
                      case("add_n", [P(()), P(())], name="0d")],
    "layer_norm_grad": lambda: [case("layer_norm_grad", [P((3, 4)), P((3, 4)), P((3, 4))], {"ndim": 1, "eps": 1e-5},
                                     name="1"),
                                case("layer_norm_grad", [P((2, 3, 4)), P((2, 3, 4)), P((2, 3, 4))],
                                     {"ndim": 2, "eps": 1e-3}, name="2")],
    "im2col": _im2col, "conv2d": _conv2d, "conv2d_grad_input": _conv2d_grad("input"),
    "conv2d_grad_weight": _conv2d_grad("weight"), "max_pool2d": _max_pool2d, "max_pool2d_grad": _max_pool2d_grad,
    "avg_pool2d": _avg_pool2d,
    "batch_norm": _batch_norm, "batch_norm_stats": _batch_norm_grads("batch_norm_stats"),
    "batch_norm_grad_stats": _batch_norm_grads("batch_norm_grad_stats"),
    "batch_norm_grad": _batch_norm_grads("batch_norm_grad"),
    "exp": unary("exp"), "log": unary("log", 0.2, 2.0), "log1p": unary("log1p", -0.5, 2.0),
    "expm1": unary("expm1"), "sqrt": unary("sqrt", 0.2, 2.0), "sin": unary("sin", -3, 3),
    "cos": unary("cos", -3, 3), "tan": unary("tan"), "tanh": unary("tanh", -2, 2), "erf": unary("erf", -2, 2),
    "reciprocal": unary("reciprocal", -2, 2, 0.3), "asin": unary("asin", -0.9, 0.9),
    "acos": unary("acos", -0.9, 0.9), "atan": unary("atan", -2, 2), "sinh": unary("sinh"), "cosh": unary("cosh"),
    "neg": unary("neg"), "abs": unary("abs", away=0.05),
    # piecewise constant: 0 away from the steps (at integers, at ±0.5 for round, at 0 for sign)
    "sign": unary("sign", away=0.05), "floor": unary("floor", away=0.05), "ceil": unary("ceil", away=0.05),
    "trunc": unary("trunc", away=0.05), "round": unary("round", -0.45, 0.45, 0.05),
    "add": binary("add"), "sub": binary("sub"), "mul": binary("mul"), "div": binary("div", b=(-2, 2, 0.3)),
    "maximum": _maxmin("maximum"), "minimum": _maxmin("minimum"),
    "remainder": binary("remainder", a=(0.2, 1.8, 0), b=(2.0, 2.5, 0)),
    "floor_divide": binary("floor_divide", a=(0.2, 1.8, 0), b=(2.0, 2.5, 0)),  # (zeros, away from the steps)
    "pow": binary("pow", a=(0.3, 2.0, 0)), "atan2": binary("atan2", a=(-2, 2, 0.2), b=(-2, 2, 0.2)),
    "where": _where, "cast": _cast, "copy": _copy,
    "sum": reduce_("sum"), "prod": _prod, "amax": reduce_("amax"), "amin": reduce_("amin"),
    "cumsum": _scan("cumsum"), "cumprod": _scan("cumprod"),
    "reshape": _reshape, "permute": _permute, "expand": _expand, "slice": _slice, "flip": _flip, "pad": _pad,
    "cat": _cat, "gather": _gather, "scatter": _scatter, "scatter_add": _scatter_add,
    "scatter_reduce": _scatter_reduce, "index": _index,
    "index_put": _index_put, "setslice": _setslice, "matmul": _matmul,
    "relu": unary("relu", away=0.05), "sigmoid": unary("sigmoid", -3, 3), "square": unary("square"),
    "rsqrt": unary("rsqrt", 0.2, 2.0), "exp2": unary("exp2"), "log2": unary("log2", 0.2, 2.0),
    "log10": unary("log10", 0.2, 2.0), "clamp": _clamp, "nan_to_num": unary("nan_to_num"), "lerp": _lerp,
    "add_scaled": _add_scaled,
    "mean": reduce_("mean"), "var": _var("var"), "std": _var("std"), "logsumexp": reduce_("logsumexp", -2, 2),
    "softmax": _softmax("softmax"), "log_softmax": _softmax("log_softmax"), "norm": _norm,
    "log_softmax_grad": _log_softmax_grad,
    "cross_entropy_index": _cross_entropy(False), "cross_entropy_index_grad": _cross_entropy(True),
    "rnn_scan": _rnn("rnn_scan"), "rnn_scan_grad": _rnn("rnn_scan_grad"),
    "tril": _tri("tril"), "triu": _tri("triu"), "relu6": lambda: [case("relu6", [P((3, 4), -1, 7, 0.05)])],
    **_complex_ops(),
}

DIFFERENTIABLE = sorted(n for n, op in OPS.items() if op.differentiable)


def test_every_op_has_a_generator():
    missing = [n for n in DIFFERENTIABLE if n not in GENERATORS]
    assert not missing, f"differentiable ops without a gradcheck generator in {__file__}: {missing}"


@pytest.fixture(scope="module", params=list(CPU_MODES))
def mode(request) -> str:
    """The CPU mode the module's checks run in (``tests/conftest.py``'s ``CPU_MODES``): every fragment compiled to
    fused C kernels, and the numpy interpreter: the gradchecks hold in both."""
    return request.param


@pytest.fixture(scope="module")
def cluster(mode, shared_clusters):
    """The run's shared cluster of the mode."""
    return shared_clusters.cpu_mode(mode)


def record_checks(ops: list | None = None) -> dict:
    """Record every generated check of ``ops`` (default: all) on the current session, nothing fetched:
    {op: [(case, analytic, numeric)]}."""
    recorded = {}
    for op in DIFFERENTIABLE if ops is None else ops:
        gen = GENERATORS.get(op)
        if gen is None:
            continue
        for name, fn, inputs in gen():
            a, n = tw.autograd.gradcheck_terms(fn, inputs, eps=1e-6, directions=2)
            assert a, f"{name}: no gradient path"
            recorded.setdefault(op, []).append((name, a, n))
    return recorded


def _fetch_ids(recorded: dict) -> list:
    return [t._id for cases in recorded.values() for _, a, n in cases for t in a + n]


#: ops whose checks' libraries are looked up in the kernel cache before deciding that it is warm
PROBE_OPS = 10


def _batches(cluster, session, ops: list) -> list:
    """The batches the checks of ``ops`` send, recorded on a session of their own on ``cluster`` and run there (for
    some of the ops, the last, which carries the fetch, left out: the whole run's batch there holds more); the
    checks' random values are drawn again after it, as if it had not run, and ``session`` is the default again."""
    state = RNG.bit_generator.state
    probe = tw.connect(cluster.address)
    try:
        with recorded_batches(probe) as batches:
            recorded = record_checks(ops)  # (held until fetched: a tensor let go is released)
            shipped = len(batches)
            probe.flush(fetch=_fetch_ids(recorded))
    finally:
        probe.close()
        tw.set_session(session)
        RNG.bit_generator.state = state
    return batches if len(ops) == len(DIFFERENTIABLE) else batches[:shipped]


def prebuild_compiled_checks(numpy_cluster, session) -> dict:
    """Build the ~330 libraries the compiled mode's worker builds for the checks (one a batch, each a gcc: ~130 s
    one after another with a cold kernel cache, past pytest-timeout's 300 s under load) ahead, one compiler a core
    (``tests/_prebuild.py``): the checks recorded on the numpy mode's cluster (which compiles nothing), their batches
    planned here as the compiled worker plans them. A warm cache costs the first :data:`PROBE_OPS` ops' checks."""
    env = CPU_MODES["compiled"]
    return prebuild_c_fragments(
        lambda backend, n: batch_kernel_lists(backend, _batches(numpy_cluster, session, DIFFERENTIABLE[:n])),
        min_work=int(env["TENSORWIRE_CPU_COMPILE_MIN_ELEMENTS"]),
        large_runs=int(env["TENSORWIRE_CPU_COMPILE_LARGE_RUNS"]), probe=PROBE_OPS)


@pytest.fixture(scope="module")
def checks(mode, session, shared_clusters):
    """Run every generated check, all fetched in one round trip: {op: [(case, analytic, numeric)]}. The compiled
    mode's libraries are built ahead, in parallel (:func:`prebuild_compiled_checks`)."""
    if mode == "compiled":
        prebuild_compiled_checks(shared_clusters.cpu_mode("numpy"), session)
    recorded = record_checks()
    vals = session.flush(fetch=_fetch_ids(recorded))
    out = {}
    for op, cases in recorded.items():
        out[op] = [(name, [float(vals[t._id]) for t in a], [float(vals[t._id]) for t in n]) for name, a, n in cases]
    return out


@pytest.mark.parametrize("op", DIFFERENTIABLE)
def test_gradcheck(checks, op):
    if op not in GENERATORS:
        pytest.fail(f"no generator for {op}")
    bad = []
    for name, a, n in checks[op]:
        for x, y in zip(a, n):
            if not abs(x - y) <= 1e-6 + 1e-5 * abs(y):
                bad.append((name, x, y))
    assert not bad, f"analytical vs numerical gradients differ: {bad}"


def test_full_gradcheck_small(session):
    """The full-Jacobian gradcheck (tw.autograd.gradcheck) on a few composed functions."""
    x = P((3,))
    y = P((2, 3))
    assert tw.autograd.gradcheck(lambda a, b: (a * b).sin().sum(0), (x, y))
    assert tw.autograd.gradcheck(lambda a: a.softmax(-1), (y,))
    assert tw.autograd.gradcheck(lambda a, b: (a @ b.T).tanh(), (y, P((4, 3))), fast_mode=True)


def test_gradcheck_catches_a_wrong_gradient(session):
    class Bad(tw.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * x

        @staticmethod
        def backward(ctx, g):
            return g  # wrong: should be 2 x g

    x = P((3,), 0.5, 1.0)
    assert not tw.autograd.gradcheck(Bad.apply, (x,), raise_exception=False)
    with pytest.raises(tw.autograd.AutogradError):
        tw.autograd.gradcheck(Bad.apply, (x,))
