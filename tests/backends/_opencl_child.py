"""The parts of tests/backends/test_opencl.py that load an OpenCL driver, run in a child process.

An OpenCL driver brings its own LLVM into the process (PoCL: libLLVM-15 and libclang-cpp), and a second LLVM in
the same process (hipRTC's comgr, used by test_render_targets.py) aborts it ("CommandLine Error: Option ...
registered more than once"). So the pytest process never enumerates OpenCL platforms: it runs

    python tests/backends/_opencl_child.py COMMAND OUT.json [ARGS...]

and checks the JSON this writes. Commands: ``info`` (discovery), ``conformance`` (every conformance case),
``work_groups`` (named cases in a GPU's lowering: work-group reductions and tiled matmul), ``units`` (checks of
the runtime's pieces), ``grind`` (cases under Oclgrind, run with its variables set).
"""

from __future__ import annotations

import json
import sys
import time
import traceback

import numpy as np
import pytest

from tensorwire.backends import executor as X
from tensorwire.backends import testing as T
from tensorwire.backends.opencl import OpenCLBackend
from tensorwire.backends.opencl import runtime as RT
from tensorwire.protocol import dtypes as D


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

class _Dry(Exception):
    pass


def _dry(*args):
    raise _Dry()


def prebuild(backend, cases) -> dict:
    """Lower every case's fragments without running them, and compile all their kernels in a few programs
    (``CLRuntime.prebuild``: PoCL spends ~0.1 s a program, much the same for one kernel or hundreds)."""
    from tensorwire.backends.codegen.lower import lower

    t0 = time.perf_counter()
    dev = T._device(backend, 0)
    lists = []

    def collect(plan, keep):
        lw = lower(plan.program.steps, set(keep), dev.lowering_options)
        if lw.kernels:
            lists.append(lw.kernels)
        return _dry

    dev.runner, dev.run_step = collect, _dry  # instance attributes: every case lowers, nothing runs
    try:
        for case in cases:
            try:
                T.check_case(backend, case)
            except (Exception, pytest.skip.Exception):  # every dry case fails (or skips): only the lowering counts
                pass
    finally:
        del dev.runner, dev.run_step
    programs = dev.runtime.prebuild(lists)
    return {"fragments": len(lists), "programs": programs, "kernels": len(dev.runtime._kernels),
            "work_group_kernels": sum(1 for ks in lists for k in ks if k.local), "seconds": time.perf_counter() - t0}


def conformance(names: list[str] | None = None, work_groups: bool = False) -> dict:
    """``{"cases": {name: [status, message, ran step by step, a failure was expected]}, "prebuild": ...}`` for
    every case (or those named), in the device's lowering or, with ``work_groups``, the GPU's (``T.WORK_GROUPS``)."""
    import dataclasses

    backend = OpenCLBackend()
    cases = T.conformance_cases()
    if names is not None:
        wanted = set(names)
        cases = [c for c in cases if c.name in wanted]
    if work_groups:
        dev = T._device(backend, 0)
        dev.lowering_options = dataclasses.replace(RT.LOWERING_GPU, **T.WORK_GROUPS)
    stats = prebuild(backend, cases)
    builds_before = T._device(backend, 0).runtime.builds
    seen = {"execute": 0, "expects_failure": False}
    real_execute, real_run = X.execute, T._Ctx.run

    def execute(*a, **k):
        seen["execute"] += 1
        return real_execute(*a, **k)

    def run(self, g, **kw):
        if any(isinstance(w, T._Err) for w in g.expect.values()) or any(isinstance(a, X.Fail) for a in g.inputs):
            seen["expects_failure"] = True
        return real_run(self, g, **kw)

    X.execute, T._Ctx.run = execute, run
    out = {}
    t0 = time.perf_counter()
    for case in cases:
        seen.update(execute=0, expects_failure=False)
        try:
            T.check_case(backend, case)
            status, msg = "ok", ""
        except pytest.skip.Exception as e:
            status, msg = "skip", str(e)
        except Exception as e:
            status, msg = "fail", f"{type(e).__name__}: {e}"
        out[case.name] = [status, msg, seen["execute"] > 0, seen["expects_failure"]]
    stats["run_seconds"] = time.perf_counter() - t0
    stats["builds_after_prebuild"] = T._device(backend, 0).runtime.builds - builds_before
    return {"cases": out, "prebuild": stats}


# -- checks of the runtime's pieces ---------------------------------------------------------------------------------

def _discovery_reasons(dev):
    import os

    os.environ[RT.PLATFORM_ENV] = "no-such-platform"
    try:
        found = RT._discover()
    finally:
        del os.environ[RT.PLATFORM_ENV]
    assert not found.devices and "no OpenCL platform matches" in found.reason, found.reason
    assert "pocl-opencl-icd" in found.reason, found.reason
    probe, RT._PROBE = RT._PROBE, "__kernel void tw_probe(__global long* a) { this is not C; }"
    try:
        found = RT._discover()
    finally:
        RT._PROBE = probe
    assert not found.devices and "does not build" in found.reason and "error" in found.reason, found.reason
    real = sys.modules["pyopencl"]
    sys.modules["pyopencl"] = None
    try:
        found = RT._discover()
    finally:
        sys.modules["pyopencl"] = real
    assert not found.devices and 'pip install -e ".[opencl]"' in found.reason, found.reason


def _simulator_listed_only_when_selected(dev):
    assert not any("Oclgrind" in d.name for d in OpenCLBackend().devices())


def _compile_error_names_the_source(dev):
    from tensorwire.backends.codegen.cache import KernelCompileError

    try:
        dev.runtime._build_source("__kernel void broken(__global float* a) { a[0] = undefined_name; }", [])
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


UNITS = {"discovery_reasons": _discovery_reasons, "simulator_listed_only_when_selected":
         _simulator_listed_only_when_selected, "compile_error_names_the_source": _compile_error_names_the_source,
         "buffers_roundtrip_and_memory": _buffers_roundtrip_and_memory,
         "too_large_allocation_is_out_of_memory": _too_large_allocation_is_out_of_memory,
         "kernels_are_shared_between_fragments": _kernels_are_shared_between_fragments}


def units() -> dict:
    dev = OpenCLBackend().open(0)
    out = {}
    for name, fn in UNITS.items():
        try:
            fn(dev)
            out[name] = ""
        except Exception:
            out[name] = traceback.format_exc()
    return out


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
    dev = T._device(backend, 0)
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
    if "oob" in extras:  # a generated kernel whose grid overruns its output: the checker must say so
        from tensorwire.backends.base import Step
        from tensorwire.backends.codegen.lower import lower

        st = Step("neg", (0,), {}, (64,), D.float32, 1, 0, in_meta=(((64,), D.float32),))
        k = lower([st], {1}).kernels[0]
        k.grid = 65
        launch = dev.runtime.build([k])[k.name]
        launch([dev.runtime.empty((64,), D.float32), dev.upload(np.ones(64, np.float32))], [])
        dev.synchronize()
    return {"cases": len(names), "device": info.name}


def _kernels_of(dev, plan):
    from tensorwire.backends.codegen.lower import lower

    return lower(plan.program.steps, {s for s in plan.node_slot}, dev.lowering_options).kernels


def main(argv: list[str]) -> int:
    cmd, out = argv[0], argv[1]
    if cmd == "info":
        result = info()
    elif cmd == "conformance":
        result = conformance()
    elif cmd == "work_groups":  # the named cases (";"-separated) in a GPU's lowering
        result = conformance([n for n in argv[2].split(";") if n], work_groups=True)
    elif cmd == "units":
        result = units()
    elif cmd == "grind":
        result = grind([n for n in argv[2].split(";") if n], argv[3:])
    else:
        raise SystemExit(f"unknown command {cmd!r}")
    with open(out, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
