"""Reduction cases: ``sum``/``prod``/``amax``/``amin`` over dims and keepdim variants, ``argmax``/``argmin``,
``argsort`` (stable, NaN placement) and the scans ``cumsum``/``cumprod``."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from tensorwire.protocol import dtypes as D

from .cases import Case, _Graph
from .inputs import SELECTED_DTYPES, _accepts, _case, _f64, _sh, _vals

_RED_NP = {"sum": np.sum, "prod": np.prod, "amax": np.max, "amin": np.min}
_RED_VARIANTS = [((2, 3, 4), None, False), ((2, 3, 4), [1], False), ((2, 3, 4), [-1], True),
                 ((2, 3, 4), [0, 2], False), ((2, 3, 4), [0, 2], True), ((), None, False), ((), [0], True),
                 ((0, 3), [1], False), ((0, 3), None, True), ((0, 3), [0], False), ((5,), 0, False)]


def _axes(dims, ndim):
    if dims is None:
        return tuple(range(ndim))
    dims = [dims] if isinstance(dims, int) else dims
    return tuple(sorted(d % ndim for d in dims)) if ndim else ()


def _reduce_cases(op: str) -> Iterator[Case]:
    fn = _RED_NP[op]
    for i, dt in enumerate(SELECTED_DTYPES):
        for k, (shape, dims, keep) in enumerate(_RED_VARIANTS):
            if (k + i) % 3 and k not in (0, 5, 7):  # a rotating selection keeps the count down
                continue
            attrs = {"keepdim": keep} | ({} if dims is None else {"dims": dims})
            if not _accepts(op, [((2,), dt)], {}):
                continue
            empty_err = op in ("amax", "amin") and 0 in shape and not _accepts(op, [(shape, dt)], attrs)

            def build(rng, dt=dt, shape=shape, dims=dims, keep=keep, attrs=attrs, empty_err=empty_err):
                g = _Graph()
                x = _vals(rng, shape, dt, 0.5, 1.5, None) if op == "prod" and dt.is_floating_point else (
                    _vals(rng, shape, dt, -2, 2) if op == "prod" else _vals(rng, shape, dt, q=None))
                n = g.op(op, g.input(x), **attrs)
                if empty_err:
                    g.err(n, "ShapeError")
                else:
                    g.ref(n, fn(_f64(x), axis=_axes(dims, len(shape)), keepdims=keep))
                return g
            yield _case(f"{op}[{dt.name}:{_sh(shape)},dims={dims},keepdim={keep}]", op, build)
    if op in ("sum", "prod"):
        for src, dst in ((D.int32, D.float64), (D.float16, D.float32), (D.bool_, D.int32), (D.float32, D.float64)):
            def build_dt(rng, src=src, dst=dst):
                g = _Graph()
                x = _vals(rng, (3, 4), src, -2, 2, 0.5)
                g.ref(g.op(op, g.input(x), dims=[1], dtype=dst.name), fn(_f64(x), axis=1))
                return g
            yield _case(f"{op}[{src.name}->dtype={dst.name}]", op, build_dt)
    if op in ("amax", "amin"):
        def build_nan(rng):
            g = _Graph()
            x = np.array([[1.0, np.nan, 3.0], [np.inf, -1.0, 2.0]], np.float32)
            g.ref(g.op(op, g.input(x), dims=[1]), fn(x.astype(np.float64), axis=1))
            return g
        yield _case(f"{op}[float32:nan]", op, build_nan)


def _arg_cases(op: str) -> Iterator[Case]:
    fn = np.argmax if op == "argmax" else np.argmin
    variants = [((3, 4), None, False), ((3, 4), 0, False), ((3, 4), -1, True), ((2, 3, 4), 1, False),
                ((), None, False), ((), 0, True), ((3, 4), None, True), ((0, 3), 1, False)]
    for i, dt in enumerate(SELECTED_DTYPES):
        if not _accepts(op, [((2,), dt)]):
            continue
        for k, (shape, dim, keep) in enumerate(variants):
            if (k + i) % 2 and k != 0:
                continue

            def build(rng, dt=dt, shape=shape, dim=dim, keep=keep):
                g = _Graph()
                x = _vals(rng, shape, dt, -2, 2, 1.0)  # small grid: ties (the first one wins)
                attrs = {"keepdim": keep} | ({} if dim is None else {"dim": dim})
                x64 = _f64(x)
                if dim is None or x.ndim == 0:
                    ref = np.asarray(fn(x64.reshape(-1))).reshape((1,) * x.ndim if keep else ())
                else:
                    ref = fn(x64, axis=dim % x.ndim, keepdims=keep)
                g.ref(g.op(op, g.input(x), **attrs), ref)
                return g
            yield _case(f"{op}[{dt.name}:{_sh(shape)},dim={dim},keepdim={keep}]", op, build)


def _sort_ref(x: np.ndarray, dim: int, descending: bool) -> np.ndarray:
    """Stable sort order by Python's ``sorted`` over each row (NaN last ascending, first descending)."""
    x = np.moveaxis(x, dim, -1)
    out = np.empty(x.shape, np.int64)
    for idx in np.ndindex(x.shape[:-1]):
        row = [float(v) if x.dtype.kind == "f" else int(v) for v in x[idx]]

        def key(i, row=row):
            v = row[i]
            nan = v != v
            return (not nan, -v if not nan else 0, i) if descending else (nan, v if not nan else 0, i)
        out[idx] = sorted(range(len(row)), key=key)
    return np.moveaxis(out, -1, dim)


def _argsort_cases(op: str) -> Iterator[Case]:
    variants = [((7,), -1, False), ((7,), 0, True), ((3, 5), 1, False), ((3, 5), 0, True), ((2, 3, 4), 1, True),
                ((2, 3, 4), -1, False), ((), 0, False), ((0, 3), 1, True), ((4, 40), 1, True)]
    for i, dt in enumerate(SELECTED_DTYPES):
        for k, (shape, dim, desc) in enumerate(variants):
            if (k + i) % 2 and k not in (0, 8):
                continue

            def build(rng, dt=dt, shape=shape, dim=dim, desc=desc):
                g = _Graph()
                x = _vals(rng, shape, dt, -3, 3, 1.0)  # a coarse grid: many ties
                if dt.is_floating_point and x.size >= 5:
                    flat = x.reshape(-1)
                    flat[[0, 3]] = np.nan
                    flat[1], flat[4] = np.inf, -np.inf
                    flat[2] = -0.0
                ref = _sort_ref(_f64(x), dim % x.ndim, desc) if x.ndim else np.zeros((), np.int64)
                g.ref(g.op(op, g.input(x), dim=dim, descending=desc), ref)
                return g
            yield _case(f"{op}[{dt.name}:{_sh(shape)},dim={dim},descending={desc}]", op, build)


def _scan_cases(op: str) -> Iterator[Case]:
    fn = np.cumsum if op == "cumsum" else np.cumprod
    variants = [((3, 4), 0), ((3, 4), -1), ((), 0), ((0, 3), 1), ((2, 3, 2), 1)]
    for i, dt in enumerate(SELECTED_DTYPES):
        if not _accepts(op, [((2,), dt)], {"dim": 0}):
            continue
        for k, (shape, dim) in enumerate(variants):
            if (k + i) % 2 and k != 0:
                continue

            def build(rng, dt=dt, shape=shape, dim=dim):
                g = _Graph()
                x = _vals(rng, shape, dt, 0.5, 1.5, None) if op == "cumprod" and dt.is_floating_point else (
                    _vals(rng, shape, dt, -2, 2, None))
                x64 = _f64(x)
                ref = x64 if x.ndim == 0 else fn(x64, axis=dim % x.ndim)
                g.ref(g.op(op, g.input(x), dim=dim), ref)
                return g
            yield _case(f"{op}[{dt.name}:{_sh(shape)},dim={dim}]", op, build)
    for src, dst in ((D.int32, D.float32), (D.float16, D.float64)):
        def build_dt(rng, src=src, dst=dst):
            g = _Graph()
            x = _vals(rng, (2, 5), src, -2, 2, 0.5)
            g.ref(g.op(op, g.input(x), dim=1, dtype=dst.name), fn(_f64(x), axis=1))
            return g
        yield _case(f"{op}[{src.name}->dtype={dst.name}]", op, build_dt)



