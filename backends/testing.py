"""A conformance suite that any tensorwire backend runs against itself.

The suite is generated from the op table (:data:`tensorwire.protocol.ops.OPS`): every primitive op
gets cases over a selection of dtypes (bool, int32, int64, float16, bfloat16, float32, float64,
where the op table accepts them), broadcasting shapes, 0-d and empty tensors, and dims/keepdim
variants for reductions. Every composite op is checked too: natively where the backend declares a
kernel for it (:attr:`Backend.native`), through its decomposition otherwise. The random ops are
checked bit for bit against the numpy reference in :mod:`tensorwire.protocol.random`; everything
else is compared with numpy float64 references written in this module (never with the CPU
backend's kernels), with tolerances that fit the result dtype. Further cases check host
round trips (upload/download/meta/nbytes), ``const`` frames, plan replay with fresh dynamic
attributes, out-of-range indices (a ``Fail`` coded ``IndexError``) and failure propagation (the
dependents of a failing node fail with ``DependencyFailed``, independent nodes still succeed).

A primitive op the suite has no generator for yields a case that FAILS, so a new primitive cannot
go untested (``kind="worker"`` ops such as ``hub_tensor`` are the worker's own, not the backend's, and
are left out; ``const`` is checked, as it exercises ``Device.upload``). Custom ops (``tensorwire_ops``)
are covered when their :class:`OpDef` carries ``extra["examples"]``: a list of ``(inputs, attrs)``
with ``inputs`` a list of numpy arrays, plus optionally ``extra["reference"]``:
``fn(inputs_as_float64, attrs) -> np.ndarray``. Without a reference the op's native kernel (if any)
is compared with its own decomposition.

Fragments run through the same path a worker uses: ``device = backend.open(i)``,
``plan = executor.compile_plan(device, nodes, ext_metas)``, then :func:`executor.run_plan` (the
prepared runner, falling back to the step-by-step interpreter when a step fails). Uploaded inputs
are read-only arrays (as frames received from the wire are), so a kernel
that writes into its input fails.

Using it from a plugin's test suite (pytest)::

    import pytest
    from tensorwire.backends.testing import check_case, conformance_cases

    from my_plugin import MyBackend

    @pytest.mark.parametrize("case", conformance_cases(), ids=str)
    def test_conformance(case):
        check_case(MyBackend(), case)

or without pytest::

    from tensorwire.backends.testing import run_conformance
    report = run_conformance(MyBackend(), device_index=0)
    print(report.summary())
    assert report.ok, report.summary()

:func:`check_case` raises :class:`ConformanceError` (an ``AssertionError``) with a message that
names the case, the node and what differed. ``check_case(..., decompose=True)`` runs composite ops
through their decomposition even where the backend has a native kernel (to compare both paths).
A composite that the suite has no reference for and the backend runs through its decomposition
is skipped (``pytest.skip`` under pytest); if the backend declares it native, the case fails.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol import random as R
from tensorwire.protocol.graph import ExpandingBuilder, Value
from tensorwire.protocol.ops import FLOAT_UNARY, OPS, OpDef
from tensorwire.protocol.ops import infer as _infer

from . import executor as X

__all__ = ["Case", "ConformanceError", "ConformanceReport", "CaseSkipped", "SELECTED_DTYPES",
           "check_case", "conformance_cases", "run_conformance"]

#: the dtypes every op is checked with (where the op table accepts them)
SELECTED_DTYPES: tuple[D.DType, ...] = (D.bool_, D.int32, D.int64, D.float16, D.bfloat16, D.float32, D.float64)
FLOATS = (D.float16, D.bfloat16, D.float32, D.float64)

# relative tolerance per result dtype (also used as absolute tolerance, scaled by the result's magnitude)
_RTOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 4e-6, "float64": 1e-12}


class ConformanceError(AssertionError):
    """A backend's result differs from the reference (the message says where and how)."""


class CaseSkipped(Exception):
    """Raised by :func:`check_case` outside pytest when a case does not apply to the backend."""


def _skip(reason: str):
    try:
        import pytest
    except ImportError:  # pragma: no cover - pytest is the usual runner
        raise CaseSkipped(reason) from None
    pytest.skip(reason)


# ------------------------------------------------------------------------------------------------
# cases


@dataclass(frozen=True)
class Case:
    """One named check. ``str(case)`` is its name (use ``ids=str`` with pytest)."""

    name: str
    op: str
    fn: Callable = field(repr=False, compare=False)

    def __str__(self) -> str:
        return self.name


@dataclass
class _Ref:
    value: np.ndarray
    scale: float = 1.0
    exact: bool = False  # bit-for-bit (random ops)


@dataclass
class _Err:
    code: str


@dataclass
class _Graph:
    """A fragment to run: external inputs, ``[op, refs, attrs]`` nodes, expectations by node index."""

    inputs: list = field(default_factory=list)
    nodes: list = field(default_factory=list)
    expect: dict = field(default_factory=dict)
    frames: list = field(default_factory=list)
    dyn: dict = field(default_factory=dict)

    def input(self, arr) -> int:
        self.inputs.append(arr)
        return -len(self.inputs)

    def op(self, name: str, *refs: int, **attrs) -> int:
        self.nodes.append([name, list(refs), attrs or None])
        return len(self.nodes) - 1

    def ref(self, node: int, value, scale: float = 1.0, exact: bool = False) -> None:
        self.expect[node] = _Ref(np.asarray(value), scale, exact)

    def err(self, node: int, code: str) -> None:
        self.expect[node] = _Err(code)


class _Ctx:
    def __init__(self, backend, device, decompose: bool, case: Case):
        self.backend = backend
        self.device = device
        self.decompose = decompose
        self.case = case

    def fail(self, msg: str):
        raise ConformanceError(f"{self.case.name}: {msg}")

    # -- running a fragment the way a worker does ------------------------------------------------
    def upload(self, arr: np.ndarray):
        host = np.array(arr, order="C", copy=True)  # (ascontiguousarray would make a 0-d array 1-d)
        host.setflags(write=False)
        buf = self.device.upload(host)
        return buf

    def run(self, g: _Graph, *, repeat: list[tuple[list, dict]] | None = None) -> list[dict]:
        """Run ``g`` (and replays of its plan with other inputs/dyn), checking every expectation.

        Returns, for each run, the result of every node of ``g`` by node index.
        """
        bufs = [a if isinstance(a, X.Fail) else self.upload(a) for a in g.inputs]
        metas = []
        for a, b in zip(g.inputs, bufs):
            if isinstance(a, X.Fail):
                metas.append(a)
                continue
            m = self.device.meta(b)
            want = (tuple(a.shape), D.from_numpy(a.dtype))
            if (tuple(m[0]), m[1]) != want:
                self.fail(f"meta of an uploaded {want[1].name} {list(want[0])} array is {m}")
            metas.append((tuple(m[0]), m[1]))
        nodes, expect, node_map = g.nodes, g.expect, {j: j for j in range(len(g.nodes))}
        if self.decompose:
            nodes, expect, node_map = _expand(nodes, expect, metas)
        try:
            plan = X.compile_plan(self.device, nodes, metas)
        except Exception as e:
            self.fail(f"compile_plan raised {type(e).__name__}: {e}")
        outs = [1000 + j for j in range(len(nodes))]
        keep = {s for s in plan.node_slot if s is not None}
        results = []
        runs = [(bufs, g.inputs, g.dyn, expect)]
        for inputs, dyn, exp in repeat or ():
            runs.append(([self.upload(a) for a in inputs], inputs, dyn, exp))
        for run_no, (rbufs, host_inputs, dyn, exp) in enumerate(runs):
            if plan.has_transfers:
                self.fail("a conformance fragment asked for a transfer")
            try:
                result = X.run_plan(self.device, plan, list(rbufs), outs, dyn, list(g.frames), keep)
            except Exception as e:
                self.fail(f"run_plan raised {type(e).__name__}: {e}")
            tag = f" (replay {run_no})" if run_no else ""
            for j, want in exp.items():
                self._check_node(nodes, plan, j, outs[j], result.get(outs[j]), want, tag)
            # buffers are immutable: inputs must be untouched
            for k, (a, b) in enumerate(zip(host_inputs, rbufs)):
                if isinstance(a, X.Fail):
                    continue
                after = self.device.download(b)
                if after.size != a.size or after.tobytes() != np.ascontiguousarray(a).tobytes():
                    self.fail(f"external input {k} changed while the fragment ran (buffers are immutable)")
            results.append({j: result.get(outs[i]) for j, i in node_map.items()})
        return results

    def _check_node(self, nodes, plan, j, out_id, got, want, tag):
        where = f"node {j} ({nodes[j][0]}){tag}"
        if isinstance(want, _Err):
            if not isinstance(got, X.Fail):
                self.fail(f"{where}: expected a Fail coded {want.code}, got a value")
            if got.err.get("code") != want.code:
                self.fail(f"{where}: expected a Fail coded {want.code}, got {got.err}")
            if got.err.get("node") != out_id:
                self.fail(f"{where}: the Fail should name node id {out_id}, it says {got.err}")
            return
        if got is None:
            self.fail(f"{where}: no result")
        if isinstance(got, X.Fail):
            self.fail(f"{where}: failed with {got.err.get('code')}: {got.err.get('message')}")
        meta = plan.node_meta[j]
        if isinstance(meta, X.Fail):
            self.fail(f"{where}: inference failed: {meta.err}")
        shape, dt = meta
        gm = self.device.meta(got)
        if (tuple(gm[0]), gm[1]) != (tuple(shape), dt):
            self.fail(f"{where}: device.meta gives {list(gm[0])} {gm[1].name}, the op table says "
                      f"{list(shape)} {dt.name}")
        arr = self.device.download(got)
        if not isinstance(arr, np.ndarray):
            self.fail(f"{where}: download returned {type(arr).__name__}, not a numpy array")
        if not arr.flags.c_contiguous:
            self.fail(f"{where}: download returned a non-C-contiguous array")
        if arr.dtype != dt.np or arr.size != math.prod(shape):
            self.fail(f"{where}: downloaded {arr.dtype} {list(arr.shape)}, expected {dt.name} {list(shape)}")
        # the worker takes the shape from device.meta, so a download may come back flat (0-d as [1])
        arr = arr.reshape(shape)
        nb = self.device.nbytes(got)
        if nb != arr.size * dt.itemsize:
            self.fail(f"{where}: nbytes {nb}, expected {arr.size * dt.itemsize}")
        msg = _compare(arr, want, dt)
        if msg:
            self.fail(f"{where}: {msg}")


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _as_dtype(ref: np.ndarray, dt: D.DType) -> np.ndarray:
    """An exact reference (ints, bools) in dtype ``dt``."""
    if dt is D.bool_:
        return np.asarray(ref) != 0
    if ref.dtype.kind == "f":
        r = np.asarray(ref, np.float64)
        if not np.all(np.isfinite(r)) or np.any(r != np.trunc(r)):
            raise ConformanceError(f"internal: integer reference is not integral: {r}")
        return r.astype(np.int64).astype(dt.np)
    return np.asarray(ref).astype(np.int64).astype(dt.np)


def _compare(got: np.ndarray, want: _Ref, dt: D.DType) -> str | None:
    ref = np.broadcast_to(want.value, got.shape) if want.value.shape != got.shape else want.value
    if want.value.shape != got.shape and want.value.size != 1:
        return f"reference has shape {list(want.value.shape)}, result {list(got.shape)}"
    if want.exact and dt.is_floating_point:
        exp = np.asarray(ref).astype(dt.np)
        if not np.array_equal(_bits(got), _bits(exp)):
            bad = np.flatnonzero(_bits(got).ravel() != _bits(exp).ravel())
            return (f"not bit-for-bit equal to the reference at {bad.size} of {got.size} elements; first at flat "
                    f"index {bad[0]}: got {got.ravel()[bad[0]]!r}, expected {exp.ravel()[bad[0]]!r}")
        return None
    if not dt.is_floating_point:
        exp = _as_dtype(np.asarray(ref), dt)
        if not np.array_equal(got, exp):
            bad = np.flatnonzero(got.ravel() != exp.ravel())
            return (f"{bad.size} of {got.size} elements differ; first at flat index {bad[0]}: got "
                    f"{got.ravel()[bad[0]]!r}, expected {exp.ravel()[bad[0]]!r}\n got: {got.tolist()}\n"
                    f" expected: {exp.tolist()}")
        return None
    g = got.astype(np.float64)
    r = np.asarray(ref, np.float64)
    rtol = _RTOL[dt.name] * want.scale
    fin = r[np.isfinite(r)]
    atol = rtol * max(1.0, float(np.max(np.abs(fin))) if fin.size else 1.0)
    if want.exact:
        rtol = atol = 0.0
    same_nan = np.isnan(g) == np.isnan(r)
    same_inf = (np.isinf(g) == np.isinf(r)) & np.where(np.isinf(r), np.sign(g) == np.sign(r), True)
    with np.errstate(invalid="ignore"):
        close = np.isnan(r) | np.isinf(r) | (np.abs(g - r) <= atol + rtol * np.abs(r))
    ok = same_nan & same_inf & close
    if not np.all(ok):
        bad = np.flatnonzero(~ok.ravel())
        i = bad[0]
        return (f"{bad.size} of {got.size} elements differ beyond rtol={rtol:.3g} atol={atol:.3g} ({dt.name}); "
                f"first at flat index {i}: got {g.ravel()[i]!r}, expected {r.ravel()[i]!r}")
    return None


def _expand(nodes: list, expect: dict, metas: list):
    """Rewrite a fragment into primitive ops only (every composite through its decomposition)."""
    b = ExpandingBuilder(native=frozenset())
    ext = [m if isinstance(m, X.Fail) else Value(m[0], m[1], -(k + 1)) for k, m in enumerate(metas)]
    identity = {j: j for j in range(len(nodes))}
    if any(isinstance(m, X.Fail) for m in ext):
        return nodes, expect, identity
    mapping = {}
    vals: list = []
    try:
        for j, (op, refs, attrs) in enumerate(nodes):
            ins = [ext[-r - 1] if r < 0 else vals[r] for r in refs]
            v = b.op(op, *ins, **(attrs or {}))
            if v.ref < 0 or v.ref in mapping.values():  # the decomposition returned an existing value
                v = b.op("copy", v)
            vals.append(v)
            mapping[j] = v.ref
    except Exception:  # the fragment fails inference: run it as it is (the expectation covers that)
        return nodes, expect, identity
    new_nodes = [[op, list(refs), attrs or None] for op, refs, attrs, _s, _d, _o in b.nodes]
    return new_nodes, {mapping[j]: w for j, w in expect.items()}, mapping


# ------------------------------------------------------------------------------------------------
# input data


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
    return np.asarray(a).astype(np.float64)


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


# ------------------------------------------------------------------------------------------------
# references

def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x) if np.size(x) else np.asarray(x, np.float64)


def _round_half_even(x):
    f = np.floor(x)
    d = x - f
    return np.where(d > 0.5, f + 1, np.where(d < 0.5, f, np.where(np.fmod(f, 2) == 0, f, f + 1)))


UNARY_REF: dict[str, Callable] = {
    "exp": np.exp, "log": np.log, "log1p": np.log1p, "expm1": np.expm1, "sqrt": np.sqrt, "sin": np.sin,
    "cos": np.cos, "tan": np.tan, "tanh": np.tanh, "erf": _erf, "reciprocal": lambda x: 1.0 / x,
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh,
    "neg": lambda x: -x, "abs": np.abs, "sign": np.sign, "floor": np.floor, "ceil": np.ceil,
    "round": _round_half_even, "trunc": np.trunc, "isnan": np.isnan, "isinf": np.isinf,
    "logical_not": lambda x: x == 0, "bitwise_not": None,  # dtype dependent, see _unary_case
}
assert set(FLOAT_UNARY) <= set(UNARY_REF)

_DOMAIN = {"log": (0.125, 4.0), "log1p": (-0.5, 3.0), "sqrt": (0.0, 4.0), "reciprocal": (0.25, 4.0),
           "asin": (-0.875, 0.875), "acos": (-0.875, 0.875), "tan": (-1.25, 1.25), "exp": (-3.0, 3.0)}


def _unary_ref(op: str, x: np.ndarray, dt_in: D.DType):
    x64 = _f64(x)
    if op == "bitwise_not":
        return ~x if dt_in is D.bool_ else -x64 - 1
    return UNARY_REF[op](x64)


def _unary_cases(op: str) -> Iterator[Case]:
    extra_shapes = [(), (0, 4), (3, 1, 2)]
    lo, hi = _DOMAIN.get(op, (-3.0, 3.0))
    q = None if op in FLOAT_UNARY else 0.25  # full precision, or a grid with halves (round, floor...)
    for i, dt in enumerate(SELECTED_DTYPES):
        if not _accepts(op, [((2,), dt)]):
            continue
        for shape in ((2, 3), extra_shapes[i % len(extra_shapes)]):
            yield _case(f"{op}[{dt.name}:{_sh(shape)}]", op,
                        lambda rng, dt=dt, shape=shape: _unary_graph(op, rng, dt, shape, lo, hi, q))
    for dt in (D.float32, D.float16, D.bfloat16):
        if not _accepts(op, [((2,), dt)]) or op == "bitwise_not":
            continue

        def build_special(rng, dt=dt):
            g = _Graph()
            x = SPECIAL.astype(dt.np)
            g.ref(g.op(op, g.input(x)), _unary_ref(op, x, dt))
            return g
        yield _case(f"{op}[{dt.name}:special]", op, build_special)


def _unary_graph(op, rng, dt, shape, lo, hi, q) -> _Graph:
    g = _Graph()
    x = _vals(rng, shape, dt, lo, hi, q)
    if op == "reciprocal" and dt.is_floating_point:
        x = (x * np.where(rng.random(shape) < 0.5, -1, 1)).astype(dt.np)
    g.ref(g.op(op, g.input(x)), _unary_ref(op, x, dt))
    return g


BINARY_REF: dict[str, Callable] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": lambda a, b: a / b,
    "maximum": np.maximum, "minimum": np.minimum,
    "floor_divide": lambda a, b: np.floor(a / b), "remainder": lambda a, b: a - b * np.floor(a / b),
    "pow": np.power, "atan2": np.arctan2,
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal,
    "logical_and": lambda a, b: (a != 0) & (b != 0), "logical_or": lambda a, b: (a != 0) | (b != 0),
    "logical_xor": lambda a, b: (a != 0) ^ (b != 0),
    "bitwise_and": None, "bitwise_or": None, "bitwise_xor": None,  # on int64, see _binary_ref
}
_BITWISE = {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor}


def _binary_ref(op, a, b):
    if op in _BITWISE:
        if a.dtype == np.bool_ and b.dtype == np.bool_:
            return _BITWISE[op](a, b)
        return _BITWISE[op](a.astype(np.int64), b.astype(np.int64))
    return BINARY_REF[op](_f64(a), _f64(b))


def _binary_inputs(op, rng, sa, da, sb, db):
    if op == "pow":
        a = _vals(rng, sa, da, 0.25 if da.is_floating_point else 0, 2.0 if da.is_floating_point else 3, None)
        b = _vals(rng, sb, db, -2.0 if db.is_floating_point else 0, 2.0 if db.is_floating_point else 3, 0.5)
        return a, b
    # a coarse grid gives ties for comparisons and exact quotients for floor_divide/remainder; arithmetic
    # gets the dtype's full precision (so a backend computing in a narrower type is caught)
    q = 0.5 if op in ("eq", "ne", "lt", "le", "gt", "ge", "maximum", "minimum") else (
        0.25 if op in ("floor_divide", "remainder") else None)
    a = _vals(rng, sa, da, -4, 4, q)
    b = _vals(rng, sb, db, -4, 4, q)
    if op in ("floor_divide", "remainder", "div"):  # no zero divisors
        if db is D.bool_:
            b = np.ones(sb, bool)
        else:
            mag = _vals(rng, sb, db, 1, 4, 0.25)
            sign = np.where(rng.random(sb) < 0.5, -1, 1)
            b = (mag * sign).astype(db.np) if db.is_signed or db.is_floating_point else mag
    return a, b


def _binary_cases(op: str) -> Iterator[Case]:
    shapes = [((2, 3), (2, 3)), ((2, 3), (3,)), ((2, 1, 4), (3, 1)), ((), (2, 3)), ((0, 3), (1, 3)), ((), ()),
              ((4, 1), (0,))]
    specs = []
    for i, dt in enumerate(SELECTED_DTYPES):
        sa, sb = shapes[i % len(shapes)]
        specs.append((dt, sa, dt, sb))
    for sa, sb in shapes:
        specs.append((D.float32, sa, D.float32, sb))
    for da, db in ((D.int32, D.int64), (D.bool_, D.float32), (D.int64, D.float16), (D.float16, D.bfloat16),
                   (D.int32, D.bfloat16), (D.float32, D.float64), (D.bool_, D.int32)):
        specs.append((da, (2, 3), db, (2, 3)))
    # 0-d tensors only raise the category: float64 0-d with float32 -> float32; int64 0-d with int32 -> int32
    specs += [(D.float32, (3,), D.float64, ()), (D.int32, (3,), D.int64, ()), (D.int64, (2, 2), D.float32, ())]
    seen = set()
    for da, sa, db, sb in specs:
        if not _accepts(op, [(sa, da), (sb, db)]):
            continue
        name = f"{op}[{da.name}:{_sh(sa)},{db.name}:{_sh(sb)}]"
        if name in seen:
            continue
        seen.add(name)

        def build(rng, da=da, sa=sa, db=db, sb=sb):
            g = _Graph()
            a, b = _binary_inputs(op, rng, sa, da, sb, db)
            g.ref(g.op(op, g.input(a), g.input(b)), _binary_ref(op, a, b))
            return g
        yield _case(name, op, build)
    if op not in ("floor_divide", "remainder", "pow") and op not in _BITWISE:
        for dt in (D.float32, D.float16):
            def build_special(rng, dt=dt):
                g = _Graph()
                a = np.repeat(SPECIAL, SPECIAL.size).astype(dt.np)
                b = np.tile(SPECIAL, SPECIAL.size).astype(dt.np)
                g.ref(g.op(op, g.input(a), g.input(b)), _binary_ref(op, a, b))
                return g
            yield _case(f"{op}[{dt.name}:special]", op, build_special)


def _where_cases(op: str) -> Iterator[Case]:
    specs = [((2, 1, 3), D.float32, (3,), D.float32, (2, 4, 1)), ((2, 3), D.int32, (2, 3), D.float16, ()),
             ((), D.bool_, (2, 2), D.bfloat16, (2, 2)), ((0, 2), D.int64, (1, 2), D.int64, (2,)),
             ((3,), D.float64, (3,), D.int32, (3,)), ((2, 3), D.bool_, (2, 3), D.bool_, (2, 3))]
    for sc, da, sa, db, sb in specs:
        for cdt in (D.bool_, D.int32) if sc == (2, 1, 3) else (D.bool_,):
            def build(rng, sc=sc, cdt=cdt, da=da, sa=sa, db=db, sb=sb):
                g = _Graph()
                c = _vals(rng, sc, cdt, -1, 1)
                a, b = _vals(rng, sa, da), _vals(rng, sb, db)
                g.ref(g.op(op, g.input(c), g.input(a), g.input(b)), np.where(c != 0, _f64(a), _f64(b)))
                return g
            yield _case(f"where[{cdt.name}:{_sh(sc)},{da.name}:{_sh(sa)},{db.name}:{_sh(sb)}]", op, build)
    # large, irregular masks (a ReLU's backward): backends may select arithmetically there, which must stay exact,
    # and fall back where the values are not finite
    for tag, sc, sa, dt, sb, special in (("relu-grad", (64, 128), (64, 128), D.float32, (), False),
                                         ("broadcast", (64, 1), (64, 128), D.float64, (128,), False),
                                         ("non-finite", (64, 128), (64, 128), D.float32, (), True)):
        def build(rng, sc=sc, sa=sa, dt=dt, sb=sb, special=special):
            g = _Graph()
            c = rng.random(sc) > 0.5
            a, b = _vals(rng, sa, dt), np.zeros(sb, dt.np) if not sb else _vals(rng, sb, dt)
            if special:
                a[0, :4] = [np.inf, -np.inf, np.nan, -0.0]
                c[0, :4] = [True, False, True, True]
            g.ref(g.op(op, g.input(c), g.input(a), g.input(b)), np.where(c, _f64(a), _f64(b)))
            return g
        yield _case(f"where[large:{tag}]", op, build)


_CAST_VALUES = np.array([-2.75, -1.5, -0.5, 0.0, 0.5, 1.25, 3.0, 100.0, -100.0, 7.875])


def _cast_cases(op: str) -> Iterator[Case]:
    for src in SELECTED_DTYPES:
        for dst in SELECTED_DTYPES:
            def build(rng, src=src, dst=dst):
                g = _Graph()
                if src is D.bool_:
                    x = np.array([True, False, True, True])
                elif src.is_floating_point:
                    x = _CAST_VALUES.astype(src.np)
                else:
                    x = np.array([-3, -1, 0, 1, 2, 100, -100, 7]).astype(src.np)
                x64 = _f64(x)
                ref = (x64 != 0) if dst is D.bool_ else (np.trunc(x64) if not dst.is_floating_point else x64)
                g.ref(g.op("cast", g.input(x), dtype=dst.name), ref)
                return g
            yield _case(f"cast[{src.name}->{dst.name}]", op, build)

    def build_special(rng):
        g = _Graph()
        x = SPECIAL.astype(np.float32)
        g.ref(g.op("cast", g.input(x), dtype="bool"), x != 0)
        big = np.array([1e5, -1e5, 65504.0, 3e38, -3.5e38], np.float32)
        g.ref(g.op("cast", g.input(big), dtype="float16"), np.array([np.inf, -np.inf, 65504.0, np.inf, -np.inf]))
        g.ref(g.op("cast", g.input(x), dtype="float64"), _f64(x))
        g.ref(g.op("cast", g.input(x), dtype="bfloat16"), _f64(x))
        r = np.random.default_rng(0).uniform(-10, 10, 64)
        g.ref(g.op("cast", g.input(r), dtype="float16"), r)
        g.ref(g.op("cast", g.input(r), dtype="bfloat16"), r)
        g.ref(g.op("cast", g.input(r), dtype="float32"), r)
        return g
    yield _case("cast[special]", op, build_special)


# reductions ----------------------------------------------------------------------------------------

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


# movement ------------------------------------------------------------------------------------------


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


# indexing -------------------------------------------------------------------------------------------

def _gather_ref(x, idx, dim):
    out = np.empty(idx.shape, np.float64)
    for pos in np.ndindex(*idx.shape):
        src = list(pos)
        src[dim] = idx[pos]
        out[pos] = x[tuple(src)]
    return out


def _scatter_ref(x, idx, src, dim, add):
    out = x.copy()
    for pos in np.ndindex(*idx.shape):
        tgt = list(pos)
        tgt[dim] = idx[pos]
        out[tuple(tgt)] = out[tuple(tgt)] + src[pos] if add else src[pos]
    return out


def _distinct_index(rng, n, shape, dim):
    """An index of ``shape`` with values < n, distinct along ``dim`` (scatter without duplicates)."""
    idx = np.empty(shape, np.int64)
    other = [s for i, s in enumerate(shape) if i != dim]
    for pos in np.ndindex(*other):
        perm = rng.permutation(n)[:shape[dim]]
        key = list(pos)
        key.insert(dim, slice(None))
        idx[tuple(key)] = perm
    return idx


def _index_cases(op: str) -> Iterator[Case]:
    for i, dt in enumerate(SELECTED_DTYPES):
        idt = D.int64 if i % 2 == 0 else D.int32

        if op == "gather":
            def build(rng, dt=dt, idt=idt):
                g = _Graph()
                x = _vals(rng, (3, 4), dt)
                i0 = rng.integers(0, 3, size=(2, 3)).astype(idt.np)
                i1 = rng.integers(0, 4, size=(3, 5)).astype(idt.np)
                g.ref(g.op("gather", g.input(x), g.input(i0), dim=0), _gather_ref(_f64(x), i0, 0))
                g.ref(g.op("gather", g.input(x), g.input(i1), dim=-1), _gather_ref(_f64(x), i1, 1))
                e = np.zeros((0, 4), idt.np)
                g.ref(g.op("gather", g.input(x), g.input(e), dim=0), np.zeros((0, 4)))
                return g
        elif op in ("scatter", "scatter_add"):
            add = op == "scatter_add"

            def build(rng, dt=dt, idt=idt, add=add):
                g = _Graph()
                x = _vals(rng, (4, 3), dt)
                src = _vals(rng, (3, 3), dt)
                if add:
                    i0 = rng.integers(0, 4, size=(3, 2)).astype(idt.np)  # duplicates accumulate
                else:
                    i0 = _distinct_index(rng, 4, (2, 3), 0).astype(idt.np)
                g.ref(g.op(op, g.input(x), g.input(i0), g.input(src), dim=0),
                      _scatter_ref(_f64(x), i0, _f64(src), 0, add))
                i1 = (rng.integers(0, 3, size=(4, 2)) if add else _distinct_index(rng, 3, (4, 2), 1)).astype(idt.np)
                src1 = _vals(rng, (4, 3), dt)
                g.ref(g.op(op, g.input(x), g.input(i1), g.input(src1), dim=1),
                      _scatter_ref(_f64(x), i1, _f64(src1), 1, add))
                return g
        elif op == "index":
            def build(rng, dt=dt, idt=idt):
                g = _Graph()
                x = _vals(rng, (4, 3, 5), dt)
                x64 = _f64(x)
                a = rng.integers(-4, 4, size=(2, 3)).astype(idt.np)
                g.ref(g.op("index", g.input(x), g.input(a), dim=0), x64[a.astype(np.int64)])
                b = rng.integers(-3, 3, size=(2, 1)).astype(idt.np)
                c = rng.integers(-5, 5, size=(4,)).astype(np.int64)
                g.ref(g.op("index", g.input(x), g.input(b), g.input(c), dim=1), x64[:, b.astype(np.int64), c])
                z = np.array(2, idt.np)
                g.ref(g.op("index", g.input(x), g.input(z), dim=2), x64[:, :, 2])
                return g
        elif op == "index_put":
            def build(rng, dt=dt, idt=idt):
                g = _Graph()
                x = _vals(rng, (5, 3), dt)
                x64 = _f64(x)
                a = rng.permutation(5)[:3].astype(idt.np)
                v = _vals(rng, (3, 3), dt)
                out = x64.copy()
                out[a.astype(np.int64)] = _f64(v)
                g.ref(g.op("index_put", g.input(x), g.input(v), g.input(a), dim=0, accumulate=False), out)
                d = np.array([0, 2, 0, -1], idt.np)  # duplicates accumulate; negative counts from the end
                w = _vals(rng, (3,), dt)
                out = x64.copy()
                np.add.at(out, d.astype(np.int64), np.broadcast_to(_f64(w), (4, 3)))
                g.ref(g.op("index_put", g.input(x), g.input(w), g.input(d), dim=0, accumulate=True), out)
                r, c = np.array([1, 3], idt.np), np.array([2, 0], np.int64)
                s = _vals(rng, (), dt)
                out = x64.copy()
                out[r.astype(np.int64), c] = _f64(s)
                g.ref(g.op("index_put", g.input(x), g.input(s), g.input(r), g.input(c), dim=0), out)
                return g
        elif op == "setslice":
            def build(rng, dt=dt, idt=idt):
                g = _Graph()
                x = _vals(rng, (5, 4), dt)
                v = _vals(rng, (2, 1), dt)
                out = _f64(x).copy()
                out[1:5:2, 0:4:1] = _f64(v)
                g.ref(g.op("setslice", g.input(x), g.input(v), starts=[1, 0], stops=[5, 4], steps=[2, 1]), out)
                e = _vals(rng, (0, 4), dt)
                g.ref(g.op("setslice", g.input(x), g.input(e), starts=[2, 0], stops=[2, 4], steps=[1, 1]), _f64(x))
                return g
        else:  # pragma: no cover
            raise KeyError(op)
        yield _case(f"{op}[{dt.name},index={idt.name}]", op, build)
    yield from _oob_cases(op)


def _oob_cases(op: str) -> Iterator[Case]:
    def build(rng):
        g = _Graph()
        x = _vals(rng, (3, 4), D.float32)
        if op == "gather":
            n = g.op("gather", g.input(x), g.input(np.array([[0, 3], [1, 2]])), dim=0)
            m = g.op("gather", g.input(x), g.input(np.array([[0, -1]])), dim=1)
            g.err(m, "IndexError")
        elif op in ("scatter", "scatter_add"):
            n = g.op(op, g.input(x), g.input(np.array([[4, 0]])), g.input(np.ones((1, 2), np.float32)), dim=1)
        elif op == "index":
            n = g.op("index", g.input(x), g.input(np.array([0, -4])), dim=0)
            m = g.op("index", g.input(x), g.input(np.array([4])), dim=1)
            g.err(m, "IndexError")
        elif op == "index_put":
            n = g.op("index_put", g.input(x), g.input(np.float32(1.0).reshape(())), g.input(np.array([3])), dim=0)
        else:
            return None
        g.err(n, "IndexError")
        g.ref(g.op("neg", g.input(x)), -_f64(x))  # independent work still runs
        return g
    if op in ("gather", "scatter", "scatter_add", "index", "index_put"):
        yield _case(f"{op}[out-of-range]", op, build)


# matmul ----------------------------------------------------------------------------------------------


def _matmul_cases(op: str) -> Iterator[Case]:
    shapes = [((3,), (3,)), ((3,), (3, 2)), ((2, 3), (3,)), ((2, 3), (3, 4)), ((2, 1, 3, 4), (5, 4, 2)),
              ((2, 0), (0, 3)), ((0, 3), (3, 2)), ((4, 2, 3), (3,))]
    for i, dt in enumerate(SELECTED_DTYPES):
        if not _accepts(op, [((2, 2), dt), ((2, 2), dt)]):
            continue
        for k, (sa, sb) in enumerate(shapes):
            if (k + i) % 2 and k != 3:
                continue

            def build(rng, dt=dt, sa=sa, sb=sb):
                g = _Graph()
                a, b = _vals(rng, sa, dt, -2, 2, None), _vals(rng, sb, dt, -2, 2, None)
                g.ref(g.op("matmul", g.input(a), g.input(b)), np.matmul(_f64(a), _f64(b)), scale=2.0)
                return g
            yield _case(f"matmul[{dt.name}:{_sh(sa)}@{_sh(sb)}]", op, build)


# creation and random -----------------------------------------------------------------------------------


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


# composites --------------------------------------------------------------------------------------------


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


def _pool_len(n, k, s, p, d, ceil):
    """torch's output length of a sliding window (ceil_mode: a last window may start in the padding
    on the left/inside, never entirely in the right padding)."""
    span = n + 2 * p - d * (k - 1) - 1
    out = (span + (s - 1 if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= n + p:
        out -= 1
    return out


def _im2col_ref(x, kernel, stride=(1, 1), padding=(0, 0), dilation=(1, 1)):
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    oh, ow = _pool_len(h, kh, sh, ph, dh, False), _pool_len(w, kw, sw, pw, dw, False)
    xp = np.zeros((n, c, h + 2 * ph, w + 2 * pw))
    xp[:, :, ph:ph + h, pw:pw + w] = x
    out = np.zeros((n, c, kh, kw, oh, ow))
    for i in range(kh):
        for j in range(kw):
            for a in range(oh):
                for b in range(ow):
                    out[:, :, i, j, a, b] = xp[:, :, a * sh + i * dh, b * sw + j * dw]
    return out.reshape(n, c * kh * kw, oh * ow)


def _conv2d_ref(x, w, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    oh, ow = _pool_len(h, kh, sh, ph, dh, False), _pool_len(wd, kw, sw, pw, dw, False)
    xp = np.zeros((n, c, h + 2 * ph, wd + 2 * pw))
    xp[:, :, ph:ph + h, pw:pw + wd] = x
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for oc in range(o):
        grp = oc // og
        for a in range(oh):
            for b in range(ow):
                patch = xp[:, grp * cg:(grp + 1) * cg, a * sh:a * sh + dh * (kh - 1) + 1:dh,
                           b * sw:b * sw + dw * (kw - 1) + 1:dw]
                out[:, oc, a, b] = np.sum(patch * w[oc], axis=(1, 2, 3))
    return out


def _conv2d_grads_ref(x, w, gy, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    """(input gradient, weight gradient) of _conv2d_ref's conv2d given its output gradient gy, window by window."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    xp = np.zeros((n, c, h + 2 * ph, wd + 2 * pw))
    xp[:, :, ph:ph + h, pw:pw + wd] = x
    gxp = np.zeros_like(xp)
    gw = np.zeros(w.shape)
    og = o // groups
    for oc in range(o):
        grp = oc // og
        for a in range(gy.shape[2]):
            for b in range(gy.shape[3]):
                win = (slice(None), slice(grp * cg, (grp + 1) * cg), slice(a * sh, a * sh + dh * (kh - 1) + 1, dh),
                       slice(b * sw, b * sw + dw * (kw - 1) + 1, dw))
                gxp[win] += gy[:, oc, a, b][:, None, None, None] * w[oc]
                gw[oc] += np.tensordot(gy[:, oc, a, b], xp[win], axes=(0, 0))
    return gxp[:, :, ph:ph + h, pw:pw + wd], gw

def _max_pool_grad_ref(x, gy, kernel, stride, padding, dilation, ceil_mode):
    """max_pool2d's input gradient, window by window: each window's gradient goes to its first maximum (or first
    NaN) among the positions inside the input."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    gx = np.zeros(x.shape)
    for a in range(gy.shape[2]):
        for b in range(gy.shape[3]):
            pos = [(a * sh - ph + i * dh, b * sw - pw + j * dw) for i in range(kh) for j in range(kw)]
            pos = [(r, q) for r, q in pos if 0 <= r < h and 0 <= q < w]
            idx = np.argmax(np.stack([x[:, :, r, q] for r, q in pos]), axis=0)
            for k, (r, q) in enumerate(pos):
                gx[:, :, r, q] += np.where(idx == k, gy[:, :, a, b], 0.0)
    return gx


def _pool_ref(x, kind, kernel, stride=None, padding=(0, 0), dilation=(1, 1), ceil_mode=False,
              count_include_pad=True, divisor_override=None):
    n, c, h, w = x.shape
    (kh, kw), (ph, pw), (dh, dw) = kernel, padding, dilation
    sh, sw = stride or kernel
    oh, ow = _pool_len(h, kh, sh, ph, dh, ceil_mode), _pool_len(w, kw, sw, pw, dw, ceil_mode)
    out = np.zeros((n, c, oh, ow))
    for a in range(oh):
        for b in range(ow):
            if kind == "max":
                rows = [a * sh - ph + i * dh for i in range(kh)]
                cols = [b * sw - pw + j * dw for j in range(kw)]
                vals = [x[:, :, r, q] for r in rows for q in cols if 0 <= r < h and 0 <= q < w]
                out[:, :, a, b] = np.max(vals, axis=0)
                continue
            h0, w0 = a * sh - ph, b * sw - pw  # torch's avg_pool2d window arithmetic
            h1, w1 = min(h0 + kh, h + ph), min(w0 + kw, w + pw)
            size = (h1 - h0) * (w1 - w0)
            h0, w0, h1, w1 = max(h0, 0), max(w0, 0), min(h1, h), min(w1, w)
            total = x[:, :, h0:h1, w0:w1].sum(axis=(2, 3))
            div = divisor_override or (size if count_include_pad else (h1 - h0) * (w1 - w0))
            out[:, :, a, b] = total / div
    return out


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
                return _pool_ref(xs[0], "avg", tuple(a["kernel"]), tuple(a.get("stride", a["kernel"])),
                                 tuple(a.get("padding", (0, 0))), ceil_mode=a.get("ceil_mode", False),
                                 count_include_pad=a.get("count_include_pad", True),
                                 divisor_override=a.get("divisor_override"))
            out.append((tag, [(1, 2, 5, 5)], (-3, 3), a, ref))
        return out
    if op in _OPTIM_SPECS:
        return _OPTIM_SPECS[op]
    if op in ("cross_entropy_index", "cross_entropy_index_grad"):
        return _ce_specs(op)
    return None


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


def _example_cases(op: str) -> Iterator[Case]:
    """Cases for an op without a built-in generator: its ``OpDef.extra["examples"]``."""
    opdef: OpDef = OPS[op]
    examples = opdef.extra.get("examples")
    if not examples:
        if opdef.primitive:
            def missing(ctx):
                ctx.fail(f"primitive op {op!r} has no conformance generator: add one to "
                         f"tensorwire.backends.testing (or give OpDef.extra['examples'] and ['reference'])")
        else:
            def missing(ctx):
                if op in ctx.backend.native:
                    ctx.fail(f"the backend has a native kernel for composite {op!r} but the suite has no reference "
                             f"for it: give OpDef.extra['examples'] (and ['reference'])")
                _skip(f"composite {op!r} has no conformance reference (it runs through its decomposition)")
        yield Case(f"{op}[no-generator]", op, missing)
        return
    reference = opdef.extra.get("reference")
    for k, (inputs, attrs) in enumerate(examples):
        def fn(ctx, inputs=inputs, attrs=attrs):
            g = _Graph()
            n = g.op(op, *[g.input(np.asarray(x)) for x in inputs], **(attrs or {}))
            if reference is not None:
                g.ref(n, reference([_f64(x) for x in inputs], attrs or {}), scale=4.0)
                ctx.run(g)
                return
            if opdef.primitive:
                ctx.fail(f"primitive op {op!r} has examples but no OpDef.extra['reference']")
            # no reference: the native kernel must agree with the decomposition
            res = _Ctx(ctx.backend, ctx.device, True, ctx.case).run(_no_expect(g))[0]
            if isinstance(res[n], X.Fail):
                ctx.fail(f"the decomposition of {op!r} failed on example {inputs}: {res[n].err}")
            base = ctx.device.download(res[n]).reshape(_res_shape(ctx, res[n]))
            g.ref(n, _f64(base), scale=4.0)
            ctx.run(g)
        yield Case(f"{op}[example{k}]", op, fn)


def _res_shape(ctx: _Ctx, buf) -> tuple:
    return tuple(ctx.device.meta(buf)[0])


def _no_expect(g: _Graph) -> _Graph:
    return _Graph(g.inputs, g.nodes, {}, g.frames, g.dyn)


# failures, round trips ---------------------------------------------------------------------------------


def _failure_cases() -> Iterator[Case]:
    def build_dep(rng):
        g = _Graph()
        x = _vals(rng, (3, 4), D.float32)
        xi = g.input(x)
        bad = g.op("gather", xi, g.input(np.array([[0, 9, 1, 2]])), dim=0)  # out of range at run time
        g.err(bad, "IndexError")
        d1 = g.op("neg", bad)
        g.err(d1, "DependencyFailed")
        ok = g.op("exp", xi)
        g.ref(ok, np.exp(_f64(x)))
        d2 = g.op("add", d1, ok)
        g.err(d2, "DependencyFailed")
        g.ref(g.op("mul", ok, xi), np.exp(_f64(x)) * _f64(x))
        return g
    yield _case("failure[index-error-propagates]", "<failure>", build_dep)

    def build_infer(rng):
        g = _Graph()
        x = _vals(rng, (2, 3), D.float32)
        xi = g.input(x)
        bad = g.op("add", xi, g.input(_vals(rng, (4,), D.float32)))  # fails inference
        g.err(bad, "ShapeError")
        g.err(g.op("relu", bad), "DependencyFailed")
        g.err(g.op("softmax", bad, dim=0), "DependencyFailed")
        g.ref(g.op("abs", xi), np.abs(_f64(x)))
        return g
    yield _case("failure[shape-error-propagates]", "<failure>", build_infer)

    def build_ext(rng):
        g = _Graph()
        x = _vals(rng, (2,), D.float32)
        failed = X.Fail({"code": "NotFound", "message": "handle 5 is gone"})
        fi = g.input(failed)
        xi = g.input(x)
        g.err(g.op("neg", fi), "DependencyFailed")
        g.ref(g.op("neg", xi), -_f64(x))
        return g
    yield _case("failure[failed-input-propagates]", "<failure>", build_ext)


def _roundtrip_cases() -> Iterator[Case]:
    for dt in D.ALL:
        def fn(ctx, dt=dt):
            rng = _rng(f"roundtrip-{dt.name}")
            arrays = [_vals(rng, s, dt) if dt in SELECTED_DTYPES else rng.integers(0, 50, s).astype(dt.np)
                      for s in ((3, 4), (), (0,), (2, 0, 3), (257,))]
            if dt.is_floating_point:
                arrays.append(SPECIAL.astype(dt.np))
            for a in arrays:
                buf = ctx.upload(a)
                m = ctx.device.meta(buf)
                if (tuple(m[0]), m[1]) != (a.shape, dt):
                    ctx.fail(f"meta of an uploaded {dt.name} {list(a.shape)} array is {m}")
                if ctx.device.nbytes(buf) != a.nbytes:
                    ctx.fail(f"nbytes of a {dt.name} {list(a.shape)} buffer is {ctx.device.nbytes(buf)}, "
                             f"expected {a.nbytes}")
                back = ctx.device.download(buf)
                if not isinstance(back, np.ndarray) or back.dtype != dt.np or back.size != a.size:
                    ctx.fail(f"download of a {dt.name} {list(a.shape)} buffer gave {type(back).__name__} "
                             f"{getattr(back, 'dtype', None)} {list(getattr(back, 'shape', ()))}")
                if not back.flags.c_contiguous:
                    ctx.fail("download returned a non-C-contiguous array")
                if back.tobytes() != a.tobytes():
                    ctx.fail(f"{dt.name} {list(a.shape)}: the downloaded bytes differ from the uploaded ones")
                ctx.device.free(buf)
        yield Case(f"roundtrip[{dt.name}]", "<roundtrip>", fn)

    def fn_replay(ctx):  # a replayed plan reads its fresh inputs (a compiling backend must not cache buffers)
        rng = _rng("replay")
        a, b = _vals(rng, (2, 3), D.float32), _vals(rng, (3,), D.float32)
        g = _Graph()
        s = g.op("add", g.input(a), g.input(b))
        g.ref(s, _f64(a) + _f64(b))
        g.ref(g.op("sum", g.op("exp", s), dims=[1]), np.exp(_f64(a) + _f64(b)).sum(1))
        a2, b2 = _vals(rng, (2, 3), D.float32), _vals(rng, (3,), D.float32)
        ref2 = {0: _Ref(_f64(a2) + _f64(b2)), 2: _Ref(np.exp(_f64(a2) + _f64(b2)).sum(1))}
        ctx.run(g, repeat=[([a2, b2], {}, ref2)])
    yield Case("replay[fresh-inputs]", "<replay>", fn_replay)


# ------------------------------------------------------------------------------------------------
# the generator table and the public API

_GENERATORS: dict[str, Callable[[str], Iterator[Case]]] = {}
for _n in UNARY_REF:
    _GENERATORS[_n] = _unary_cases
for _n in BINARY_REF:
    _GENERATORS[_n] = _binary_cases
for _n in _RED_NP:
    _GENERATORS[_n] = _reduce_cases
for _n in ("reshape", "permute", "expand", "slice", "flip", "pad", "cat", "copy"):
    _GENERATORS[_n] = _movement_cases
for _n in ("gather", "scatter", "scatter_add", "index", "index_put", "setslice"):
    _GENERATORS[_n] = _index_cases
for _n in ("rand", "randn", "randint"):
    _GENERATORS[_n] = _random_cases
_GENERATORS.update({"argsort": _argsort_cases})
_GENERATORS.update({"where": _where_cases, "cast": _cast_cases, "argmax": _arg_cases, "argmin": _arg_cases,
                    "cumsum": _scan_cases, "cumprod": _scan_cases, "matmul": _matmul_cases, "full": _full_cases,
                    "arange": _arange_cases, "const": _const_cases})


def has_reference(op: str) -> bool:
    """Whether the suite can check ``op`` (a built-in generator, or ``OpDef.extra['examples']``)."""
    opdef = OPS[op]
    if opdef.primitive:
        return op in _GENERATORS or bool(opdef.extra.get("examples"))
    return _composite_specs(op) is not None or bool(opdef.extra.get("examples"))


def conformance_cases(*, load_plugins: bool = True, ops: list[str] | None = None) -> list[Case]:
    """Every conformance case, generated from the op table (plugins' custom ops included).

    ``ops`` restricts the op cases to those ops (the round-trip and failure cases come only with the
    full list). Cheap: the data of a case is built when it is checked.
    """
    if load_plugins:
        from . import load_ops

        load_ops()
    cases: list[Case] = []
    for name, opdef in list(OPS.items()):
        if ops is not None and name not in ops:
            continue
        if opdef.primitive:
            if opdef.kind == "worker" and name not in _GENERATORS:
                continue  # the worker's own op (hub_tensor ...), not the backend's; `const` is covered below
            gen = _GENERATORS.get(name, _example_cases)
        else:
            gen = _composite_cases
        cases.extend(gen(name))
    if ops is None:
        cases.extend(_roundtrip_cases())
        cases.extend(_failure_cases())
    names: dict[str, int] = {}
    out = []
    for c in cases:  # unique names (pytest ids)
        k = names.get(c.name, 0)
        names[c.name] = k + 1
        out.append(c if not k else Case(f"{c.name}#{k}", c.op, c.fn))
    return out


#: lowering options (fields of ``codegen.Options``) that make the conformance cases' small tensors take every
#: work-group path a GPU's lowering has: groups of 4 items (reductions longer than a group, two-stage splits) and
#: 4 x 4 matmul tiles cut at the matrices' edges
WORK_GROUPS = {"group": 4, "tile": 4, "split_min": 16, "chunk": 8, "max_chunks": 4}

_DEVICES: dict[int, tuple] = {}


def _device(backend, index: int):
    entry = _DEVICES.get(id(backend))
    if entry is None or entry[0] is not backend:
        entry = _DEVICES[id(backend)] = (backend, {})
    devs = entry[1]
    if index not in devs:
        devs[index] = backend.open(index)
    return devs[index]


def check_case(backend, case: Case, device_index: int = 0, *, decompose: bool = False) -> None:
    """Run one case on ``backend``'s device ``device_index``; raise :class:`ConformanceError` if it fails.

    The device is opened once per backend object and index, and reused. With ``decompose=True``
    composite ops run through their decomposition even where the backend has a native kernel.
    """
    device = _device(backend, device_index)
    case.fn(_Ctx(backend, device, decompose, case))


@dataclass
class ConformanceReport:
    """What :func:`run_conformance` found: case names that passed, failed (with why) or were skipped."""

    backend: str
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failed

    def summary(self, max_failures: int = 20) -> str:
        lines = [f"tensorwire conformance of backend {self.backend!r}: {len(self.passed)} passed, "
                 f"{len(self.failed)} failed, {len(self.skipped)} skipped"]
        for name, why in list(self.failed.items())[:max_failures]:
            lines.append(f"FAILED {name}: {why}")
        if len(self.failed) > max_failures:
            lines.append(f"... and {len(self.failed) - max_failures} more")
        return "\n".join(lines)

    __str__ = summary


def run_conformance(backend, device_index: int = 0, *, cases: list[Case] | None = None,
                    decompose: bool = False) -> ConformanceReport:
    """Run every case (or ``cases``) on ``backend`` and report; never raises for a failing case."""
    report = ConformanceReport(getattr(backend, "name", type(backend).__name__))
    try:
        import pytest
        skip_exc: tuple = (CaseSkipped, pytest.skip.Exception)
    except ImportError:  # pragma: no cover
        skip_exc = (CaseSkipped,)
    for case in cases if cases is not None else conformance_cases():
        try:
            check_case(backend, case, device_index, decompose=decompose)
        except skip_exc as e:
            report.skipped[case.name] = str(e)
        except Exception as e:
            report.failed[case.name] = f"{type(e).__name__}: {e}"
        else:
            report.passed.append(case.name)
    return report
