"""Creation and random cases: ``full`` and ``arange``, ``const`` frames (bytes, memoryview or a frame-like
object; bad frames fail), and ``rand``/``randn``/``randint`` checked bit for bit against
:mod:`tensorwire.protocol.random`, with replays that take fresh dynamic attributes."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol import random as R

from .cases import Case, _Graph, _Ref
from .inputs import FLOATS, SELECTED_DTYPES, SPECIAL, _case, _sh, _vals


def _full_cases(op: str) -> Iterator[Case]:
    for dt in SELECTED_DTYPES:
        for shape in ((), (0,), (2, 3)):
            value = True if dt is D.bool_ else (-3 if not dt.is_floating_point else 2.5)

            def build(rng, dt=dt, shape=shape, value=value):
                g = _Graph()
                g.ref(g.op("full", shape=list(shape), dtype=dt.name, value=value), np.full(shape, float(value)))
                return g
            yield _case(f"full[{dt.name}:{_sh(shape)}]", op, build)

    def build_special(rng):
        g = _Graph()
        for v in (math.nan, math.inf, -math.inf, -0.0):
            for dt in (D.float16, D.bfloat16, D.float32, D.float64):
                g.ref(g.op("full", shape=[2], dtype=dt.name, value=v), np.full((2,), v))
        g.ref(g.op("full", shape=[2], dtype="float32", value=7), np.full((2,), 7.0))
        g.ref(g.op("full", shape=[2], dtype="bool", value=0), np.zeros(2, bool))
        return g
    yield _case("full[special]", op, build_special)

    def build_dyn(rng):  # `value` is dynamic: a replayed plan takes the new value
        g = _Graph()
        g.ref(g.op("full", shape=[3], dtype="float32", value=1.5), np.full(3, 1.5))
        return g

    def fn(ctx):
        g = build_dyn(None)
        ctx.run(g, repeat=[([], {0: {"value": -4.0}}, {0: _Ref(np.full(3, -4.0))})])
    yield Case("full[replay-dynamic-value]", op, fn)


def _arange_cases(op: str) -> Iterator[Case]:
    specs = [(0, 1, 5, D.int64), (-3, 2, 4, D.int32), (0.5, 0.25, 6, D.float32), (1, -0.5, 5, D.float16),
             (0, 1, 0, D.float64), (1, 1, 3, D.bfloat16), (10, -3, 4, D.int64), (0.5, 1, 3, D.int64),
             (0, 0.1, 10, D.float64)]
    for start, step, n, dt in specs:
        def build(rng, start=start, step=step, n=n, dt=dt):
            g = _Graph()
            ref = start + np.arange(n, dtype=np.float64) * step
            if not dt.is_floating_point:
                ref = np.trunc(ref)
            g.ref(g.op("arange", start=start, step=step, n=n, dtype=dt.name), ref)
            return g
        yield _case(f"arange[{start},{step},{n},{dt.name}]", op, build)


class _FrameLike:
    """What a zmq.Frame looks like to the executor: an object with a ``buffer``."""

    def __init__(self, data: bytes):
        self.buffer = memoryview(data)


def _const_cases(op: str) -> Iterator[Case]:
    for dt in D.ALL:
        def build(rng, dt=dt):
            g = _Graph()
            for k, shape in enumerate(((2, 3), (), (0, 2))):
                x = _vals(rng, shape, dt) if dt in SELECTED_DTYPES else rng.integers(0, 100, shape).astype(dt.np)
                data = np.ascontiguousarray(x).tobytes()
                g.frames.append([data, memoryview(data), _FrameLike(data)][k])
                g.ref(g.op("const", shape=list(shape), dtype=dt.name, frame=len(g.frames) - 1), x, exact=True)
            return g
        yield _case(f"const[{dt.name}]", op, build)

    def build_bad(rng):
        g = _Graph()
        g.frames.append(b"\0" * 7)
        g.err(g.op("const", shape=[2], dtype="float32", frame=0), "ProtocolError")
        g.err(g.op("const", shape=[2], dtype="float32", frame=5), "ProtocolError")
        g.ref(g.op("full", shape=[1], dtype="int32", value=4), np.array([4]))
        return g
    yield _case("const[bad-frames]", op, build_bad)

    def build_special(rng):
        g = _Graph()
        for dt in FLOATS:
            x = SPECIAL.astype(dt.np)
            g.frames.append(x.tobytes())
            g.ref(g.op("const", shape=[x.size], dtype=dt.name, frame=len(g.frames) - 1), x, exact=True)
        return g
    yield _case("const[special-bits]", op, build_special)


_SEEDS = [(0, 0), (7, 12345), (2**63 + 12345, 2**40 + 3), (2**64 - 1, 1)]


def _random_ref(op, seed, offset, shape, dt, low=0, high=10):
    if op == "rand":
        return R.uniform(seed, offset, shape, dt.np)
    if op == "randn":
        return R.normal(seed, offset, shape, dt.np)
    return R.randint(seed, offset, shape, dt.np, low, high)


def _random_cases(op: str) -> Iterator[Case]:
    dts = (D.float16, D.bfloat16, D.float32, D.float64) if op != "randint" else (D.int32, D.int64, D.float32,
                                                                                 D.int16, D.uint8)
    shapes = [(5, 7), (), (0,), (1000,)]
    for i, dt in enumerate(dts):
        for k, (seed, offset) in enumerate(_SEEDS):
            shape = shapes[(i + k) % len(shapes)]
            extra = {}
            if op == "randint":
                extra = {"low": -5, "high": 17} if dt not in (D.uint8,) else {"low": 3, "high": 250}
                if k == 3 and dt is D.int64:
                    extra = {"low": -(2**40), "high": 2**40}

            def build(rng, dt=dt, seed=seed, offset=offset, shape=shape, extra=extra):
                g = _Graph()
                attrs = {"shape": list(shape), "dtype": dt.name, "seed": seed, "offset": offset, **extra}
                ref = _random_ref(op, seed, offset, shape, dt, extra.get("low", 0), extra.get("high", 10))
                g.ref(g.op(op, **attrs), ref, exact=True)
                return g
            yield _case(f"{op}[{dt.name}:{_sh(shape)},seed={seed},offset={offset}]", op, build)

    def fn(ctx):  # seed and offset are dynamic: a replayed plan takes the new ones
        dt = D.float32 if op != "randint" else D.int64
        extra = {"low": 0, "high": 1000} if op == "randint" else {}
        g = _Graph()
        g.op(op, shape=[64], dtype=dt.name, seed=1, offset=0, **extra)
        g.ref(0, _random_ref(op, 1, 0, (64,), dt, 0, 1000), exact=True)
        g.op(op, shape=[64], dtype=dt.name, seed=1, offset=R.counters_used(op, 64), **extra)
        g.ref(1, _random_ref(op, 1, R.counters_used(op, 64), (64,), dt, 0, 1000), exact=True)
        again = {0: _Ref(_random_ref(op, 99, 5, (64,), dt, 0, 1000), exact=True),
                 1: _Ref(_random_ref(op, 1, 7, (64,), dt, 0, 1000), exact=True)}
        ctx.run(g, repeat=[([], {0: {"seed": 99, "offset": 5}, 1: {"offset": 7}}, again)])
    yield Case(f"{op}[replay-dynamic-seed]", op, fn)



