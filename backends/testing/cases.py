"""The conformance suite's machinery: a :class:`Case`, the fragment a case builds (:class:`_Graph`, with
its expectations :class:`_Ref` / :class:`_Err`), the context that runs a fragment the way a worker does and
checks every node (:class:`_Ctx`), the comparison with a reference under per-dtype tolerances, and the
rewrite of a fragment into primitive ops (``decompose=True``)."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.graph import ExpandingBuilder, Value

from .. import executor as X

# relative tolerance per result dtype (also used as absolute tolerance, scaled by the result's magnitude)
_RTOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 4e-6, "float64": 1e-12}


class ConformanceError(AssertionError):
    """A backend's result differs from the reference (the message says where and how)."""


class CaseSkipped(Exception):
    """Raised by :func:`check_case` outside pytest when a case does not apply to the backend."""


def running_pytest():
    """The ``pytest`` module when this process runs under pytest (which has imported it), else None: a case that
    does not apply is then a pytest skip, elsewhere a :class:`CaseSkipped` (nothing here imports pytest)."""
    return sys.modules.get("pytest")


def skip_exceptions() -> tuple[type[BaseException], ...]:
    """The exceptions :func:`_skip` may raise in this process."""
    pytest = running_pytest()
    return (CaseSkipped,) if pytest is None else (CaseSkipped, pytest.skip.Exception)


def _skip(reason: str):
    pytest = running_pytest()
    if pytest is None:
        raise CaseSkipped(reason)
    pytest.skip(reason)


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
        complex_values = getattr(self.device, "complex_values", False)
        if not complex_values and any(not isinstance(a, X.Fail) and a.dtype.kind == "c" for a in g.inputs):
            _skip("the device has no complex kernels (Device.complex_values)")
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
        if not complex_values and any(not isinstance(m, X.Fail) and m[1].is_complex for m in plan.node_meta):
            _skip("the device has no complex kernels (Device.complex_values)")
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
    if dt.is_complex:  # the real and imaginary parts, each at its value type's tolerance
        parts = np.asarray(ref, np.complex128)
        return _compare(np.stack([got.real, got.imag], -1), _Ref(np.stack([parts.real, parts.imag], -1), want.scale,
                                                                  want.exact), D.to_real(dt))
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
