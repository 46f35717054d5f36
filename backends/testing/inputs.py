"""The data the conformance cases are built from: the selected dtypes, a random generator seeded by the
case's name, values on a grid exact in every float dtype, the special values (nan, inf, -0.0 ...), and
:func:`_case`, which makes a case out of a function building its fragment."""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.ops import infer as _infer

from .cases import Case, _Ctx, _Graph

#: the dtypes every op is checked with (where the op table accepts them)
SELECTED_DTYPES: tuple[D.DType, ...] = (D.bool_, D.int32, D.int64, D.float16, D.bfloat16, D.float32, D.float64)
FLOATS = (D.float16, D.bfloat16, D.float32, D.float64)


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def _vals(rng, shape, dt: D.DType, lo: float = -3.0, hi: float = 3.0, q: float | None = 0.125) -> np.ndarray:
    """Random values of ``dt`` in [lo, hi]: floats on a grid of ``q`` (exact in every float dtype), or
    with the dtype's full precision when ``q`` is None."""
    shape = tuple(shape)
    if dt is D.bool_:
        return rng.random(shape) < 0.5
    if not dt.is_floating_point:
        return rng.integers(math.ceil(lo), math.floor(hi) + 1, size=shape).astype(dt.np)
    v = rng.uniform(lo, hi, size=shape)
    if q is not None:
        v = np.round(v / q) * q
    return np.clip(v, lo, hi).astype(dt.np)


def _f64(a: np.ndarray) -> np.ndarray:
    """``a`` in float64 (complex128 if complex): a reference's precision."""
    a = np.asarray(a)
    return a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)


def _accepts(op: str, metas: list, attrs: dict | None = None) -> bool:
    try:
        _infer(op, metas, attrs or {})
        return True
    except Exception:
        return False


def _sh(shape) -> str:
    return "x".join(map(str, shape)) if shape else "0d"


SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -1.5, 2.5, 3.75, -0.25])


def _case(name: str, op: str, build: Callable[[np.random.Generator], _Graph]) -> Case:
    def fn(ctx: _Ctx):
        with np.errstate(all="ignore"):  # references of inf/nan inputs
            g = build(_rng(name))
        ctx.run(g)
    return Case(name, op, fn)
