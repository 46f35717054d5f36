"""Movement cases: ``reshape``, ``permute``, ``expand``, ``slice``, ``flip``, ``pad``, ``cat`` and ``copy``,
plus a chain of movement ops whose result must not depend on the backend's strides."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from tensorwire.protocol import dtypes as D

from .cases import Case, _Graph
from .inputs import SELECTED_DTYPES, _case, _f64, _vals


def _movement_specs(op: str):
    """(name, input shapes, attrs, reference fn over float64 inputs)."""
    if op == "reshape":
        return [("2x3x4->4x-1", [(2, 3, 4)], {"shape": [4, -1]}, lambda x: x.reshape(4, 6)),
                ("0d->1x1", [()], {"shape": [1, 1]}, lambda x: x.reshape(1, 1)),
                ("0x3->3x0", [(0, 3)], {"shape": [3, 0]}, lambda x: x.reshape(3, 0)),
                ("6->-1", [(6,)], {"shape": [-1]}, lambda x: x.reshape(-1)),
                ("2x1x3->0d?", [(1, 1)], {"shape": []}, lambda x: x.reshape(()))]
    if op == "permute":
        return [("201", [(2, 3, 4)], {"dims": [2, 0, 1]}, lambda x: np.transpose(x, (2, 0, 1))),
                ("neg", [(2, 3, 4)], {"dims": [-1, 0, -2]}, lambda x: np.transpose(x, (2, 0, 1))),
                ("0d", [()], {"dims": []}, lambda x: x),
                ("empty", [(0, 3)], {"dims": [1, 0]}, lambda x: x.T)]
    if op == "expand":
        return [("3x1->2x3x4", [(3, 1)], {"shape": [2, 3, 4]}, lambda x: np.broadcast_to(x, (2, 3, 4))),
                ("-1", [(3, 1)], {"shape": [2, -1, 5]}, lambda x: np.broadcast_to(x, (2, 3, 5))),
                ("0d", [()], {"shape": [2, 2]}, lambda x: np.broadcast_to(x, (2, 2))),
                ("to0", [(1, 3)], {"shape": [0, 3]}, lambda x: np.broadcast_to(x, (0, 3)))]
    if op == "slice":
        return [("step2", [(5, 6)], {"starts": [1, 0], "stops": [5, 6], "steps": [2, 3]}, lambda x: x[1:5:2, 0:6:3]),
                ("empty", [(4, 3)], {"starts": [2, 0], "stops": [2, 3], "steps": [1, 1]}, lambda x: x[2:2, :]),
                ("0d", [()], {"starts": [], "stops": [], "steps": []}, lambda x: x),
                ("3d", [(3, 4, 5)], {"starts": [0, 1, 4], "stops": [3, 4, 5], "steps": [1, 2, 1]},
                 lambda x: x[0:3, 1:4:2, 4:5])]
    if op == "flip":
        return [("d0", [(3, 4)], {"dims": [0]}, lambda x: x[::-1]),
                ("all", [(2, 3, 2)], {}, lambda x: x[::-1, ::-1, ::-1]),
                ("neg", [(2, 3, 2)], {"dims": [-1, 0]}, lambda x: x[::-1, :, ::-1]),
                ("0d", [()], {}, lambda x: x)]
    if op == "pad":
        def pad_ref(pads, value):
            def f(x):
                p = [(max(pads[2 * i], 0), max(pads[2 * i + 1], 0)) for i in range(x.ndim)]
                crop = tuple(slice(max(-pads[2 * i], 0), x.shape[i] - max(-pads[2 * i + 1], 0)) for i in range(x.ndim))
                y = x[crop]
                out = np.full(tuple(n + a + b for n, (a, b) in zip(y.shape, p)), float(value))
                out[tuple(slice(a, a + n) for n, (a, _) in zip(y.shape, p))] = y
                return out
            return f
        return [("pos", [(2, 3)], {"pads": [1, 2, 0, 1], "value": 1}, pad_ref([1, 2, 0, 1], 1)),
                ("crop", [(4, 5)], {"pads": [-1, 0, 1, -2]}, pad_ref([-1, 0, 1, -2], 0)),
                ("0d", [()], {"pads": []}, pad_ref([], 0)),
                ("empty", [(0, 2)], {"pads": [1, 1, 0, 0], "value": 0}, pad_ref([1, 1, 0, 0], 0))]
    if op == "cat":
        return [("dim1", [(2, 3), (2, 0), (2, 1)], {"dim": 1}, lambda *x: np.concatenate(x, 1)),
                ("dim-1", [(2, 2, 1), (2, 2, 3)], {"dim": -1}, lambda *x: np.concatenate(x, -1)),
                ("dim0", [(1, 3), (2, 3), (0, 3)], {"dim": 0}, lambda *x: np.concatenate(x, 0)),
                ("one", [(3,)], {"dim": 0}, lambda *x: np.concatenate(x, 0))]
    if op == "copy":
        return [("2x3", [(2, 3)], {}, lambda x: x), ("0d", [()], {}, lambda x: x), ("empty", [(0,)], {}, lambda x: x)]
    raise KeyError(op)


def _movement_cases(op: str) -> Iterator[Case]:
    for i, dt in enumerate(SELECTED_DTYPES):
        for k, (tag, shapes, attrs, fn) in enumerate(_movement_specs(op)):
            if (k + i) % 2 and k != 0:
                continue

            def build(rng, dt=dt, shapes=shapes, attrs=attrs, fn=fn):
                g = _Graph()
                xs = [_vals(rng, s, dt) for s in shapes]
                g.ref(g.op(op, *[g.input(x) for x in xs], **attrs), fn(*[_f64(x) for x in xs]))
                return g
            yield _case(f"{op}[{dt.name}:{tag}]", op, build)
    if op == "cat":
        def build_mixed(rng):
            g = _Graph()
            a, b, c = _vals(rng, (2, 2), D.int32), _vals(rng, (2, 1), D.float16), _vals(rng, (2, 3), D.bool_)
            ref = np.concatenate([_f64(a), _f64(b), _f64(c)], 1)
            g.ref(g.op("cat", g.input(a), g.input(b), g.input(c), dim=1), ref)
            return g
        yield _case("cat[mixed-dtypes]", op, build_mixed)
    if op == "permute":  # a chain of movement ops: results must be right whatever the backend's strides
        def build_chain(rng):
            g = _Graph()
            x = _vals(rng, (2, 3, 4), D.float32)
            p = g.op("permute", g.input(x), dims=[2, 0, 1])
            s = g.op("slice", p, starts=[1, 0, 0], stops=[4, 2, 3], steps=[2, 1, 2])
            e = g.op("exp", s)
            f = g.op("flip", p, dims=[1])
            r = g.op("reshape", f, shape=[-1])
            x64 = _f64(x).transpose(2, 0, 1)
            g.ref(p, x64)
            g.ref(s, x64[1:4:2, 0:2, 0:3:2])
            g.ref(e, np.exp(x64[1:4:2, 0:2, 0:3:2]))
            g.ref(r, x64[:, ::-1].reshape(-1))
            return g
        yield _case("permute[chain]", op, build_chain)



