"""The parts of tests/backends/test_opencl.py that load an OpenCL driver, run in a child process.

An OpenCL driver brings its own LLVM into the process (PoCL: libLLVM-15 and libclang-cpp), and a second LLVM in
the same process (hipRTC's comgr, used by test_render_targets.py) aborts it ("CommandLine Error: Option ...
registered more than once"). So the pytest process never enumerates OpenCL platforms: it runs

    python tests/backends/_opencl_child.py COMMAND OUT.json [ARGS...]

and checks the JSON this writes. Commands: ``info`` (discovery), ``conformance`` (every conformance case),
``work_groups`` (named cases in a GPU's lowering: work-group reductions and tiled matmul), ``vectors`` (named
cases with vectors of 4 lanes, so their small tensors have whole vectors and tails), ``units`` (checks of the
runtime's pieces), ``vector_checks`` (vector loops in the device's own lowering), ``grind`` (cases under
Oclgrind, run with its variables set).
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from tensorwire.backends import executor as X
from tensorwire.backends import testing as T
from tensorwire.backends.opencl import OpenCLBackend
from tensorwire.backends.opencl import discovery as DISC
from tensorwire.backends.opencl import runtime as RT
from tensorwire.backends.testing.cases import _compare, _Ref
from tensorwire.backends.testing.elementwise import _DOMAIN, _unary_ref
from tensorwire.backends.testing.suite import _device
from tensorwire.protocol import dtypes as D

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from tests.backends._child_cases import kernel_lists, run_cases  # noqa: E402
from tests.backends._child_process import names, run_checks, serve  # noqa: E402


def info() -> dict:
    return {"devices": [d.to_wire() for d in OpenCLBackend().devices()],
            "oclgrind": _has_platform("Oclgrind")}


def _has_platform(name: str) -> bool:
    try:
        import pyopencl as cl

        return any(p.name.strip() == name for p in cl.get_platforms())
    except Exception:
        return False


# -- conformance ----------------------------------------------------------------------------------------------------

def prebuild(backend, cases) -> dict:
    """Lower every case's fragments without running them, and compile all their kernels in a few programs
    (``CLRuntime.prebuild``: PoCL spends ~0.1 s a program, much the same for one kernel or hundreds)."""
    t0 = time.perf_counter()
    dev = _device(backend, 0)
    lists = kernel_lists(backend, cases)
    programs = dev.runtime.prebuild(lists)
    return {"fragments": len(lists), "programs": programs, "kernels": len(dev.runtime._kernels),
            "work_group_kernels": sum(1 for ks in lists for k in ks if k.local),
            "vector_kernels": sum(1 for ks in lists for k in ks if _vectorised(k)), "seconds": time.perf_counter() - t0}


def _vectorised(kernel) -> bool:
    """Whether ``kernel`` reads or writes memory as vectors."""
    from tensorwire.backends.codegen.opencl import OpenCLRenderer

    src = OpenCLRenderer().render([kernel])
    return "vload" in src or "vstore" in src


def conformance(names: list[str] | None = None, work_groups: bool = False, vectors: int = 0) -> dict:
    """``{"cases": {name: [status, message, ran step by step, a failure was expected]}, "prebuild": ...}`` for
    every case (or those named), in the device's lowering or, with ``work_groups``, the GPU's (``T.WORK_GROUPS``),
    or with ``vectors``, the device's with vectors of that many lanes."""
    import dataclasses

    backend = OpenCLBackend()
    cases = T.conformance_cases()
    if names is not None:
        wanted = set(names)
        cases = [c for c in cases if c.name in wanted]
    if work_groups:
        dev = _device(backend, 0)
        dev.lowering_options = dataclasses.replace(RT.LOWERING_GPU, **T.WORK_GROUPS)
    if vectors:
        dev = _device(backend, 0)
        dev.lowering_options = dataclasses.replace(RT.LOWERING, vector=vectors)
    stats = prebuild(backend, cases)
    builds_before = _device(backend, 0).runtime.builds
    t0 = time.perf_counter()
    out = run_cases(backend, cases)
    stats["run_seconds"] = time.perf_counter() - t0
    stats["builds_after_prebuild"] = _device(backend, 0).runtime.builds - builds_before
    return {"cases": out, "prebuild": stats}


# -- checks of the runtime's pieces ---------------------------------------------------------------------------------

def _discovery_reasons(dev):
    import os

    os.environ[RT.PLATFORM_ENV] = "no-such-platform"
    try:
        found = DISC._discover()
    finally:
        del os.environ[RT.PLATFORM_ENV]
    assert not found.devices and "no OpenCL platform matches" in found.reason, found.reason
    assert "pocl-opencl-icd" in found.reason, found.reason
    probe, DISC._PROBE = DISC._PROBE, "__kernel void tw_probe(__global long* a) { this is not C; }"
    try:
        found = DISC._discover()
    finally:
        DISC._PROBE = probe
    assert not found.devices and "does not build" in found.reason and "error" in found.reason, found.reason
    real = sys.modules["pyopencl"]
    sys.modules["pyopencl"] = None
    try:
        found = DISC._discover()
    finally:
        sys.modules["pyopencl"] = real
    assert not found.devices and 'pip install -e ".[opencl]"' in found.reason, found.reason


def _simulator_listed_only_when_selected(dev):
    assert not any("Oclgrind" in d.name for d in OpenCLBackend().devices())


def _compile_error_names_the_source(dev):
    from tensorwire.backends.codegen.cache import KernelCompileError

    try:
        dev.runtime.compile("__kernel void broken(__global float* a) { a[0] = undefined_name; }", [])
    except KernelCompileError as e:
        assert ".cl" in str(e) and "undefined_name" in str(e), str(e)
    else:
        raise AssertionError("a kernel that does not compile built")


def _buffers_roundtrip_and_memory(dev):
    before = dev.memory()["allocated_bytes"]
    bufs = [dev.upload(np.arange(6, dtype=np.float32).reshape(2, 3)), dev.upload(np.zeros((0, 4), np.int64)),
            dev.upload(np.array(True))]
    assert dev.memory()["allocated_bytes"] == before + 25 and dev.memory()["buffers"] >= 3, dev.memory()
    assert dev.download(bufs[0]).tolist() == [[0, 1, 2], [3, 4, 5]]
    assert dev.download(bufs[1]).shape == (0, 4) and dev.download(bufs[2]).shape == ()
    assert dev.meta(bufs[0]) == ((2, 3), D.float32) and dev.nbytes(bufs[0]) == 24
    del bufs
    assert dev.memory()["allocated_bytes"] == before


def _too_large_allocation_is_out_of_memory(dev):
    from tensorwire.protocol.errors import OutOfMemory

    try:
        dev.runtime.empty((dev.runtime.max_alloc // 4 + 1,), D.float32)
    except OutOfMemory:
        return
    raise AssertionError("no OutOfMemory")


def _kernels_are_shared_between_fragments(dev):
    """A kernel another fragment already built is reused: the second fragment builds only its new kernel."""
    nodes = [["mul", [-1, -1], None], ["exp", [0], None]]
    a = np.arange(5, dtype=np.float32)
    builds, kernels = dev.runtime.builds, len(dev.runtime._kernels)
    for extra in ([], [["neg", [1], None]]):
        plan = X.compile_plan(dev, nodes + extra, [((5,), D.float32)])
        keep = {s for s in plan.node_slot}
        res = X.run_plan(dev, plan, [dev.upload(a)], list(range(len(nodes + extra))), {}, [], keep)
        np.testing.assert_allclose(dev.download(res[1]), np.exp(a * a), rtol=1e-6)
    assert dev.runtime.builds - builds == 2 and len(dev.runtime._kernels) - kernels == 3, "kernels were rebuilt"


def _waiting_for_errors_lets_other_threads_run(dev):
    """The kernel-error check waits for the queue with the GIL released: a thread of the worker's (its heartbeat's)
    keeps running while a long kernel finishes. (pyopencl's event of a non-blocking copy, dropped, waits holding the
    GIL: behind a kernel PoCL generated at its first launch, the worker went silent and was declared lost.)"""
    import threading

    import pyopencl as cl

    rt = dev.runtime
    prg = rt.compile("__kernel void tw_slow(__global double* a) { int g = get_global_id(0); double x = a[g];"
                     " for (int j = 0; j < 4000; j++) x = sin(x) + 1e-3; a[g] = x; }", [])
    slow = cl.Kernel(prg, "tw_slow")
    items = (1 << 13) * rt.units  # (~1.8 s on two PoCL threads here: as long on a device of more units)
    buf = rt.upload(np.linspace(0, 1, items))
    slow.set_arg(0, buf.buf)
    gaps, stop = [], threading.Event()

    def beat():
        last = time.perf_counter()
        while not stop.wait(0.02):
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    th = threading.Thread(target=beat)
    th.start()
    try:
        t0 = time.perf_counter()
        cl.enqueue_nd_range_kernel(rt.queue, slow, (items,), None)
        rt.errors.take("tw_slow", rt.check_errors)  # (as a launch that can raise: its slot is read at the check)
        rt.check_errors()
        waited = time.perf_counter() - t0
    finally:
        stop.set()
        th.join()
    assert waited > 0.3, f"the kernel took {waited:.2f} s: too short to tell"
    assert max(gaps) < waited / 3, f"another thread stood still for {max(gaps):.2f} s of a {waited:.2f} s wait"


UNITS = {"discovery_reasons": _discovery_reasons, "simulator_listed_only_when_selected":
         _simulator_listed_only_when_selected, "compile_error_names_the_source": _compile_error_names_the_source,
         "buffers_roundtrip_and_memory": _buffers_roundtrip_and_memory,
         "too_large_allocation_is_out_of_memory": _too_large_allocation_is_out_of_memory,
         "kernels_are_shared_between_fragments": _kernels_are_shared_between_fragments,
         "waiting_for_errors_lets_other_threads_run": _waiting_for_errors_lets_other_threads_run}


def units() -> dict:
    return run_checks(UNITS, OpenCLBackend().open(0))


# -- vector loops in the device's own lowering (Options.vector) --------------------------------------------------------

def _run_nodes(dev, nodes: list, arrays: list, want: list) -> tuple[dict, list]:
    """Run fragment ``nodes`` on ``arrays`` keeping the nodes ``want``; ``({node: result}, [kernels])``."""
    from tensorwire.backends.codegen.lower import lower

    plan = X.compile_plan(dev, nodes, [(a.shape, D.from_numpy(a.dtype)) for a in arrays])
    keep = {plan.node_slot[j] for j in want}
    res = X.run_plan(dev, plan, [dev.upload(a) for a in arrays], list(range(len(nodes))), {}, [], keep)
    kernels = lower(plan.program.steps, keep, dev.lowering_options).kernels
    return {j: dev.download(res[j]) for j in want}, kernels


def _close(what: str, got: np.ndarray, want: np.ndarray) -> None:
    """``got`` (a float array) is ``want`` (computed in float64) as the conformance suite compares: NaNs and
    infinities where the reference has them, other values within the tolerance of ``got``'s dtype."""
    got = np.asarray(got)
    with np.errstate(all="ignore"):
        msg = _compare(got, _Ref(np.asarray(want, np.float64)), D.from_numpy(got.dtype))
    assert msg is None, f"{what}: {msg}"


def _with_specials(x: np.ndarray) -> np.ndarray:
    """``x`` with NaN, infinities and signed zeros in its first whole vector and in its tail."""
    x = x.astype(np.float32)
    x[:12] = T.SPECIAL
    x[-5:] = [np.nan, np.inf, -np.inf, -0.0, 0.5]
    return x


VECTOR_UNARY = ("exp", "log", "log1p", "expm1", "sqrt", "sin", "cos", "tan", "tanh", "erf", "reciprocal", "asin",
                "acos", "atan", "sinh", "cosh", "neg", "abs", "floor", "ceil", "round", "trunc", "relu", "sigmoid")


def _unary_on_vectors(dev, n: int = 53) -> None:
    """Each unary op on 3 whole vectors of 16 and a tail of 5, special values in both: as numpy computes them."""
    rng = np.random.default_rng(0)
    for op in VECTOR_UNARY:
        lo, hi = _DOMAIN.get(op, (-3.0, 3.0))
        x = _with_specials(rng.uniform(lo, hi, n))
        got, kernels = _run_nodes(dev, [[op, [-1], None]], [x], [0])
        assert all(_vectorised(k) for k in kernels), f"{op} did not run on vectors"
        ref = {"relu": lambda v: np.maximum(v, 0), "sigmoid": lambda v: 1 / (1 + np.exp(-v))}.get(op)
        with np.errstate(all="ignore"):
            want = ref(x.astype(np.float64)) if ref else _unary_ref(op, x, D.float32)
        _close(op, got[0], want)


VECTOR_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "maximum": np.maximum,
                 "minimum": np.minimum, "pow": np.power, "atan2": np.arctan2}


def _binary_on_vectors(dev, n: int = 53) -> None:
    """Binary ops between two vectors, a vector and a 0-d tensor (either side; NaN included), a select on a
    comparison and on a 0-d bool (scalar truth values broadcast into lanes)."""
    rng = np.random.default_rng(1)
    a = _with_specials(rng.uniform(-3, 3, n))
    b = rng.uniform(-3, 3, n).astype(np.float32)
    b[20:25] = [np.nan, 0.0, -np.inf, 2.0, np.inf]
    with np.errstate(all="ignore"):
        for op, f in VECTOR_BINARY.items():
            got, kernels = _run_nodes(dev, [[op, [-1, -2], None]], [a, b], [0])
            assert all(_vectorised(k) for k in kernels), f"{op} did not run on vectors"
            _close(op, got[0], f(a.astype(np.float64), b.astype(np.float64)))
        for s in (np.float32(0.5), np.float32(np.nan)):
            s0 = np.array(s)
            nodes = [["maximum", [-1, -2], None], ["minimum", [-2, -1], None], ["lt", [-1, -2], None],
                     ["where", [2, -1, -2], None], ["mul", [-2, -1], None]]
            got, kernels = _run_nodes(dev, nodes, [a, s0], [0, 1, 3, 4])
            assert all(_vectorised(k) for k in kernels), f"an op with a 0-d {s} did not run on vectors"
            a64, s64 = a.astype(np.float64), np.float64(s)
            for j, want in ((0, np.maximum(a64, s64)), (1, np.minimum(s64, a64)), (3, np.where(a64 < s64, a64, s64)),
                            (4, s64 * a64)):
                _close(f"{nodes[j][0]} with 0-d {s}", got[j], want)
        for c in (True, False):
            got, kernels = _run_nodes(dev, [["where", [-1, -2, -3], None]], [np.array(c), a, b], [0])
            assert all(_vectorised(k) for k in kernels), "where on a 0-d bool did not run on vectors"
            _close(f"where({c}, a, b)", got[0], a if c else b)


def _slices_at_any_offset(dev) -> None:
    """Vector loads from every offset within a vector (vloadN needs only element alignment): an elementwise
    kernel and a reduction over ``x[s:s + 150]`` for s in 0..16; a strided slice runs scalar."""
    x = np.random.default_rng(2).standard_normal(200).astype(np.float32)
    nodes, want = [], {}
    for s in range(17):
        sl = len(nodes)
        nodes += [["slice", [-1], {"starts": [s], "stops": [s + 150], "steps": [1]}], ["sin", [sl], None],
                  ["mul", [sl + 1, sl], None], ["sum", [sl + 2], {"dims": None}]]
        y = x[s:s + 150].astype(np.float64)
        want[sl + 2], want[sl + 3] = np.sin(y) * y, (np.sin(y) * y).sum()
    got, kernels = _run_nodes(dev, nodes, [x], list(want))
    assert sum(_vectorised(k) for k in kernels) == len(kernels) == 34, [_vectorised(k) for k in kernels]
    for j, w in want.items():
        _close(f"node {j}", got[j], w)
    got, kernels = _run_nodes(dev, [["slice", [-1], {"starts": [3], "stops": [200], "steps": [2]}],
                                    ["exp", [0], None]], [x], [1])
    assert not any(_vectorised(k) for k in kernels), "a strided slice ran on vectors"
    _close("exp of x[3::2]", got[1], np.exp(x[3::2].astype(np.float64)))


def _sums_match_float64(dev, sizes=(1, 15, 16, 17, 255, 4099, 100003)) -> None:
    """float32 sums (vector accumulators, scalar tails, split in chunks when long) within float32's tolerance of
    numpy's float64 sum; amax/amin propagate a NaN from a whole vector or from the tail, and infinities."""
    rng = np.random.default_rng(3)
    for n in sizes:
        x = (rng.standard_normal(n) * 3 + 1).astype(np.float32)
        got, kernels = _run_nodes(dev, [["sum", [-1], {"dims": None}], ["exp", [-1], None],
                                        ["sum", [1], {"dims": None}]], [x], [0, 2])
        assert n < 16 or any(_vectorised(k) for k in kernels), f"the sum of {n} did not run on vectors"
        x64 = x.astype(np.float64)
        for j, ref, mag in ((0, x64.sum(), np.abs(x64).sum()), (2, np.exp(x64).sum(), np.exp(x64).sum())):
            assert abs(float(got[j]) - ref) <= 4e-6 * mag, (n, j, float(got[j]), ref)
    x = rng.standard_normal((7, 1005)).astype(np.float32)
    x[2, 40], x[4, 1003], x[5, 7] = np.nan, np.nan, np.inf
    nodes = [["sum", [-1], {"dims": [1]}], ["sum", [-1], {"dims": [0]}], ["amax", [-1], {"dims": [1]}],
             ["amin", [-1], {"dims": [1]}], ["amax", [-1], {"dims": None}]]
    got, kernels = _run_nodes(dev, nodes, [x], [0, 1, 2, 3, 4])
    x64 = x.astype(np.float64)
    with np.errstate(all="ignore"):
        for j, w in enumerate((x64.sum(1), x64.sum(0), x64.max(1), x64.min(1), x64.max())):
            _close(f"{nodes[j][0]}({nodes[j][2]})", got[j], w)
    y = np.full(40, -np.inf, np.float32)
    got, _ = _run_nodes(dev, [["amax", [-1], {"dims": None}], ["amin", [-1], {"dims": None}]], [y], [0, 1])
    assert got[0] == -np.inf and got[1] == -np.inf, got


def _fallbacks_run_scalar(dev) -> None:
    """What has no vector form runs as before, and right: broadcasts that are not scalars, permutes, 16-bit
    floats, integers, index values (arange), random numbers."""
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((5, 40)).astype(np.float32), rng.standard_normal(40).astype(np.float32)
    h, i = a.astype(np.float16), (a * 10).astype(np.int32)
    f32 = {"dtype": "float32"}
    checks = [
        ([["add", [-1, -2], None]], [a, b], a.astype(np.float64) + b),
        ([["permute", [-1], {"dims": [1, 0]}], ["exp", [0], None]], [a], np.exp(a.T.astype(np.float64))),
        ([["exp", [-1], None]], [h], np.exp(h.astype(np.float64))),
        ([["add", [-1, -1], None]], [i], i * 2),
        ([["arange", [], {"start": 0.0, "step": 1.0, "n": 100, **f32}], ["sin", [0], None]], [],
         np.sin(np.arange(100.0))),
    ]
    for nodes, arrays, want in checks:
        got, kernels = _run_nodes(dev, nodes, arrays, [len(nodes) - 1])
        assert not any(_vectorised(k) for k in kernels), f"{nodes} ran on vectors"
        g = got[len(nodes) - 1]
        if g.dtype.kind == "f":
            _close(str(nodes), g, want)
        else:
            np.testing.assert_array_equal(g, want)


def _chain_on_vectors(dev, n: int = 100003) -> None:
    """The benchmark's 8-op chain and sum: two kernels, both on vectors, within tolerance of float64."""
    x = (np.random.default_rng(5).standard_normal(n) * 0.5).astype(np.float32)
    f32 = {"shape": [], "dtype": "float32"}
    nodes = [["full", [], {**f32, "value": 2.0}], ["mul", [-1, 0], None], ["full", [], {**f32, "value": 1.0}],
             ["add", [1, 2], None], ["relu", [3], None], ["full", [], {**f32, "value": 0.5}], ["add", [4, 5], None],
             ["exp", [6], None], ["mul", [7, -1], None], ["sin", [-1], None], ["sub", [8, 9], None],
             ["abs", [10], None], ["full", [], {**f32, "value": 0.25}], ["mul", [11, 12], None],
             ["sum", [13], {"dims": None}]]
    got, kernels = _run_nodes(dev, nodes, [x], [14])
    assert len(kernels) == 2 and all(_vectorised(k) for k in kernels), [_vectorised(k) for k in kernels]
    x64 = x.astype(np.float64)
    terms = np.abs(np.exp(np.maximum(x64 * 2 + 1, 0) + 0.5) * x64 - np.sin(x64)) * 0.25
    assert abs(float(got[14]) - terms.sum()) <= 4e-6 * terms.sum(), (float(got[14]), terms.sum())


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """How many float32 steps ``got`` is from ``want`` rounded to float32 (0 where both are NaN or equal)."""
    g, w = got.astype(np.float32), want.astype(np.float32)
    ig, iw = (v.view(np.int32).astype(np.int64) for v in (g, w))
    ig, iw = (np.where(i < 0, -(i & 0x7FFFFFFF), i) for i in (ig, iw))  # a monotonic integer line through +-0
    same = (g == w) | (np.isnan(g) & np.isnan(w))
    return np.where(same, 0, np.abs(ig - iw))


def _small_lanes_beside_large(dev) -> None:
    """sin, cos and tan of tiny to moderate lanes sharing a vector with lanes of 1e7 and 3e38. PoCL 3.1's own vector
    functions gave sin(1e-30) = 0.0099 there (its large-argument reduction applied to every lane); the renderer's
    own sin and the guarded cos/tan (codegen/opencl_math.py) must not."""
    small = np.array([1e-30, 1e-8, -3e-7, 1e-4, 0.3, -0.7, 1.2, 2.5], np.float32)
    for big in (1e7, 3e38, -1e5, 9999.0):
        x = np.concatenate([small, np.full(8, big, np.float32)] * 3 + [small[:5]]).astype(np.float32)
        for op in ("sin", "cos", "tan"):
            got, kernels = _run_nodes(dev, [[op, [-1], None]], [x], [0])
            assert all(_vectorised(k) for k in kernels), f"{op} did not run on vectors"
            with np.errstate(all="ignore"):
                want = getattr(np, op)(x.astype(np.float64))
            u = _ulps(got[0], want)
            assert u.max() <= 4, f"{op} beside {big:g}: {x[u > 4][:4]} gave {got[0][u > 4][:4]}, want {want[u > 4][:4]}"


def _own_math_within_two_ulp(dev) -> None:
    """The renderer's own float sin and exp (codegen/opencl_math.py) within 2 and 1 ulp of the correctly rounded
    result over normal, wide uniform and random-bit inputs with the special values, on vectors and in tails."""
    rng = np.random.default_rng(7)
    bits = np.frombuffer(rng.integers(0, 2**32, 1 << 16, dtype=np.uint32).tobytes(), np.float32)
    for op, wide, bound in (("sin", (-2e4, 2e4), 2), ("exp", (-105.0, 90.0), 1)):
        x = np.concatenate([rng.standard_normal(1 << 16) * 3, rng.uniform(*wide, 1 << 16), bits,
                            [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 88.72, 88.73, -103.3, -87.3, 1e-30,
                             3.1415927, 9999.5, 10000.5, 6.0e5, 3e38]]).astype(np.float32)
        got, kernels = _run_nodes(dev, [[op, [-1], None]], [x], [0])
        src = "".join(dev.runtime.renderer.render([k]) for k in kernels)
        assert f"tw_{op}_x16(" in src and f"tw_{op}_x1(" in src, f"{op} is not the renderer's own"
        with np.errstate(all="ignore"):
            want = getattr(np, op)(x.astype(np.float64))
        u = _ulps(got[0], want)
        assert u.max() <= bound, f"{op}: {u.max()} ulp at {x[np.argmax(u)]!r}"
        zeros = x == 0
        assert (np.signbit(got[0][zeros]) == np.signbit(want[zeros].astype(np.float32))).all(), f"{op}: sign of zero"


VECTOR_CHECKS = {"unary_on_vectors": _unary_on_vectors, "binary_on_vectors": _binary_on_vectors,
                 "slices_at_any_offset": _slices_at_any_offset, "sums_match_float64": _sums_match_float64,
                 "fallbacks_run_scalar": _fallbacks_run_scalar, "chain_on_vectors": _chain_on_vectors,
                 "small_lanes_beside_large": _small_lanes_beside_large,
                 "own_math_within_two_ulp": _own_math_within_two_ulp}


def vector_checks() -> dict:
    dev = OpenCLBackend().open(0)
    assert dev.lowering_options.vector == 16, dev.lowering_options
    return run_checks(VECTOR_CHECKS, dev)


# -- Oclgrind ---------------------------------------------------------------------------------------------------------

def grind(names: list[str], extras: list[str]) -> dict:
    """Run conformance cases ``names`` (and the ``extras``) on Oclgrind; the caller reads Oclgrind's log."""
    # Oclgrind 21.10's uninitialised-value checker keeps a released buffer's state for the next buffer at that
    # address and then reports reads of it that a kernel has written (plain pyopencl shows it: write a buffer,
    # release it, allocate another, write it in one kernel, read it in the next). Keeping every buffer alive
    # (the cases are small) gives each its own address.
    alive = []
    alloc = RT.CLRuntime.alloc

    def keep_alive(self, *a, **k):
        b = alloc(self, *a, **k)
        alive.append(b.buf)
        return b
    RT.CLRuntime.alloc = keep_alive

    backend = OpenCLBackend()
    info = backend.devices()[0]
    assert info.available and "Oclgrind" in info.name, info
    cases = {c.name: c for c in T.conformance_cases()}
    for n in names:
        T.check_case(backend, cases[n])
    dev = _device(backend, 0)
    if "split" in extras:  # reductions long enough for the two-stage kernels
        a = np.random.default_rng(0).standard_normal((2, 9000)).astype(np.float32)
        plan = X.compile_plan(dev, [["sum", [-1], {"dims": [1]}], ["amax", [-1], None]], [((2, 9000), D.float32)])
        assert len([k for k in _kernels_of(dev, plan)]) >= 3  # two first stages and their ends
        res = X.run_plan(dev, plan, [dev.upload(a)], [10, 11], {}, [], {s for s in plan.node_slot})
        np.testing.assert_allclose(dev.download(res[10]), a.sum(1), rtol=1e-4)
        assert dev.download(res[11]) == a.max()
    if "groups" in extras:  # work-group kernels (a GPU's lowering): the race checker sees their shared memory
        import dataclasses

        dev.lowering_options = dataclasses.replace(RT.LOWERING_GPU, **T.WORK_GROUPS)
        rng = np.random.default_rng(1)
        a, b = rng.standard_normal((5, 11)).astype(np.float32), rng.standard_normal((11, 6)).astype(np.float32)
        nodes = [["matmul", [-1, -2], None], ["exp", [0], None], ["sum", [1], {"dims": [1]}],
                 ["sum", [-1], {"dims": None}], ["softmax", [0], {"dim": -1}]]
        plan = X.compile_plan(dev, nodes, [((5, 11), D.float32), ((11, 6), D.float32)])
        # the tiles, the row sums, the split's first stage, softmax's row kernel
        assert sum(1 for k in _kernels_of(dev, plan) if k.local) >= 4
        res = X.run_plan(dev, plan, [dev.upload(a), dev.upload(b)], [0, 1, 2, 3, 4], {}, [],
                         {s for s in plan.node_slot})
        np.testing.assert_allclose(dev.download(res[0]), a @ b, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(dev.download(res[2]), np.exp(a @ b).sum(1), rtol=1e-5)
        np.testing.assert_allclose(dev.download(res[3]), a.sum(), rtol=1e-5, atol=1e-5)
        e = np.exp(a @ b - (a @ b).max(1, keepdims=True))
        np.testing.assert_allclose(dev.download(res[4]), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)
        dev.lowering_options = RT.LOWERING
    if "vectors" in extras:  # vector loops (the device's own lowering): loads at every offset, tails, sums
        assert dev.lowering_options.vector, dev.lowering_options
        _slices_at_any_offset(dev)
        _binary_on_vectors(dev)
        _sums_match_float64(dev, sizes=(17, 4099))
    if "oob" in extras:  # a generated kernel whose grid overruns its output: the checker must say so
        from tensorwire.backends.base import Step
        from tensorwire.backends.codegen.lower import lower

        st = Step("neg", (0,), {}, (64,), D.float32, 1, 0, in_meta=(((64,), D.float32),))
        k = lower([st], {1}).kernels[0]
        k.grid = 65
        launch = dev.runtime.build([k])[k.name]
        grid = [k.grid] if k.grid_var else []  # (a shape-generic kernel's bound is its grid parameter)
        launch([dev.runtime.empty((64,), D.float32), dev.upload(np.ones(64, np.float32))], grid)
        dev.synchronize()
    return {"cases": len(names), "device": info.name}


def _kernels_of(dev, plan):
    from tensorwire.backends.codegen.lower import lower

    return lower(plan.program.steps, {s for s in plan.node_slot}, dev.lowering_options).kernels


#: command -> what it writes, from the command's arguments
COMMANDS = {
    "info": lambda args: info(),
    "conformance": lambda args: conformance(names(args)),  # the named cases, or every case without a list
    "work_groups": lambda args: conformance(names(args), work_groups=True),  # in a GPU's lowering
    "vectors": lambda args: conformance(names(args), vectors=4),  # with vectors of 4 lanes
    "vector_checks": lambda args: vector_checks(),
    "units": lambda args: units(),
    "grind": lambda args: grind(names(args), args[1:]),
}


def main(argv: list[str]) -> int:
    return serve(COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
