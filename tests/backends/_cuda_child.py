"""The parts of tests/backends/test_cuda.py that run the CUDA backend on the driver stand-in, in a child process.

The stand-in (``_cuda_standin.py``) runs kernels on PoCL, whose LLVM must not share a process with hipRTC's (used by
test_render_targets.py; see _opencl_child.py), so the pytest process runs

    python tests/backends/_cuda_child.py COMMAND OUT.json [ARGS...]

and checks the JSON this writes. Commands: ``conformance`` (conformance cases, all or the ``;``-separated names
given), ``units`` (checks of the runtime's pieces: allocator, staging, out of memory, kernel errors, PTX fallback,
the disk cache).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from tensorwire.backends import executor as X  # noqa: E402
from tensorwire.backends import testing as T  # noqa: E402
from tensorwire.backends.cuda import CUDABackend  # noqa: E402
from tensorwire.backends.cuda import runtime as RT  # noqa: E402
from tensorwire.protocol import dtypes as D  # noqa: E402
from tests.backends import _cuda_standin as S  # noqa: E402
from tests.backends._lowered import kernel_lists  # noqa: E402


def prebuild(backend, drv, cases) -> dict:
    """Lower every case's fragments without running them, then compile all their kernels with NVRTC in a few modules
    (``CUDARuntime.prebuild``) and their OpenCL twins in a few PoCL programs: both compilers' cost is per program."""
    t0 = time.perf_counter()
    dev = T._device(backend, 0)
    lists = kernel_lists(backend, cases)
    modules = dev.runtime.prebuild(lists)
    t1 = time.perf_counter()
    programs = drv.prebuild_twins(lists)
    return {"fragments": len(lists), "modules": modules, "programs": programs, "kernels": len(dev.runtime._kernels),
            "nvrtc_seconds": t1 - t0, "pocl_seconds": time.perf_counter() - t1}


def conformance(names: list[str] | None) -> dict:
    """``{"cases": {name: [status, message, ran step by step, a failure was expected]}, "prebuild": ...}``."""
    drv = S.install(RT)
    backend = CUDABackend()
    cases = T.conformance_cases()
    if names is not None:
        wanted = set(names)
        cases = [c for c in cases if c.name in wanted]
    stats = prebuild(backend, drv, cases)
    dev = T._device(backend, 0)
    builds_before = dev.runtime.builds
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
    stats["builds_after_prebuild"] = dev.runtime.builds - builds_before
    stats["launches"] = drv.launches
    stats["gemms"] = dev.runtime.blas.calls
    stats["memory"] = dev.memory()
    return {"cases": out, "prebuild": stats}


# -- checks of the runtime's pieces ---------------------------------------------------------------------------------

def _device(**config):
    drv = S.install(RT, **config)
    return drv, CUDABackend().open(0)


def _run(dev, nodes, inputs):
    plan = X.compile_plan(dev, nodes, [(a.shape, D.from_numpy(a.dtype)) for a in inputs])
    keep = set(plan.node_slot)
    res = X.run_plan(dev, plan, [dev.upload(a) for a in inputs], list(range(len(nodes))), {}, [], keep)
    return [res[i] for i in range(len(nodes))]


def _allocator_reuses_blocks():
    drv, dev = _device()
    a = np.random.default_rng(0).standard_normal((64, 33)).astype(np.float32)
    nodes = [["exp", [-1], None], ["sum", [0], {"dims": [1]}]]
    for _ in range(5):  # the same shapes every step: blocks come back from the pool
        out = _run(dev, nodes, [a])
        np.testing.assert_allclose(dev.download(out[1]), np.exp(a).sum(1), rtol=1e-5)
        del out
    allocs = drv.calls["cuMemAlloc"]
    for _ in range(5):
        out = _run(dev, nodes, [a])
        del out
    assert drv.calls["cuMemAlloc"] == allocs, "a repeated step allocated from the driver again"
    m = dev.memory()
    assert m["cache_hits"] > 10 and m["reserved_bytes"] >= m["allocated_bytes"], m
    before = m["allocated_bytes"]
    x = dev.upload(np.zeros(1000, np.float64))  # 8000 bytes -> a block of 8192
    assert dev.memory()["allocated_bytes"] == before + 8192 and dev.nbytes(x) == 8000, dev.memory()
    del x
    assert dev.memory()["allocated_bytes"] == before
    dev.empty_cache()
    m = dev.memory()
    assert m["reserved_bytes"] == m["allocated_bytes"] and drv.calls["cuMemFree"] > 0, m


def _out_of_memory_after_emptying_the_cache():
    from tensorwire.protocol.errors import OutOfMemory

    drv, dev = _device(memory_bytes=9 << 20)  # 8 MiB of tensors and the error slot's block
    held = dev.upload(np.zeros(1 << 20, np.float32))  # 4 MiB
    freed = dev.upload(np.zeros((2 << 20) // 4, np.float32))  # 2 MiB, a size class the next request does not reuse
    del freed  # back to the pool: only an emptied cache makes room for the next request
    frees = drv.calls.get("cuMemFree", 0)
    big = dev.runtime.empty((1 << 20,), D.float32)  # 4 MiB: fits only after the cached block goes back
    assert drv.calls["cuMemFree"] == frees + 1, drv.calls
    del big
    try:
        dev.runtime.empty((4 << 20,), D.float32)  # 16 MiB: never fits
    except OutOfMemory as e:
        assert "out of memory" in str(e) and "cache emptied" in str(e), str(e)
    else:
        raise AssertionError("no OutOfMemory")
    assert dev.download(held).shape == (1 << 20,)  # the device still works


def _large_transfers_go_in_pinned_chunks():
    drv, dev = _device()
    a = np.random.default_rng(1).integers(0, 255, RT.STAGING_CHUNK * 2 + 12345, dtype=np.uint8)
    buf = dev.upload(a)
    assert drv.calls["cuMemcpyHtoDAsync"] == 3, drv.calls
    np.testing.assert_array_equal(dev.download(buf), a)
    assert dev.memory()["pinned_staging_bytes"] <= RT.STAGING_LIMIT


def _kernel_errors_are_raised_and_cleared():
    drv, dev = _device()
    x = np.arange(5, dtype=np.float32)
    bad = np.array([0, 7], np.int64)
    plan = X.compile_plan(dev, [["index", [-1, -2], {"dim": 0}]], [((5,), D.float32), ((2,), D.int64)])
    step = plan.program.steps[0]
    try:
        dev.run_step(step, [dev.upload(x), dev.upload(bad)], step.attrs)
    except IndexError as e:
        assert "7" in str(e), str(e)
    else:
        raise AssertionError("an index out of range did not raise")
    good = dev.run_step(step, [dev.upload(x), dev.upload(np.array([4, 1], np.int64))], step.attrs)
    assert dev.download(good).tolist() == [4.0, 1.0]  # the error slot was cleared


def _ptx_when_nvrtc_does_not_know_the_gpu():
    from tensorwire.backends.codegen.cuda import supported_archs

    newest = max(supported_archs())
    drv, dev = _device(capability=(99, 0))
    assert dev.runtime.kind == "ptx" and dev.runtime.arch == f"compute_{newest}", dev.runtime.arch
    a = np.arange(6, dtype=np.float64)
    (out,) = _run(dev, [["sqrt", [-1], None]], [a])
    np.testing.assert_allclose(dev.download(out), np.sqrt(a))
    assert RT.compile_target((8, 0), supported_archs()) == ("sm_80", "cubin")


def _kernels_are_cached_on_disk():
    import shutil
    import tempfile

    from tensorwire.backends.codegen.cache import CACHE_ENV

    before = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = folder = tempfile.mkdtemp(prefix="tw-cuda-cache-")  # empty: this process's first build
    try:
        _check_disk_cache()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if before is None:
            del os.environ[CACHE_ENV]
        else:
            os.environ[CACHE_ENV] = before


def _check_disk_cache():
    drv, dev = _device(capability=(8, 6))
    a = np.arange(7, dtype=np.int32)
    nodes = [["mul", [-1, -1], None], ["neg", [0], None]]
    (_, out) = _run(dev, nodes, [a])
    assert dev.download(out).tolist() == (-(a * a)).tolist()
    assert dev.runtime.cache.builds == 1 and dev.runtime.arch == "sm_86"
    folder = dev.runtime.cache.folder()
    assert list(folder.glob("*.cubin")), list(folder.iterdir())
    drv2, dev2 = _device(capability=(8, 6))  # a new process would find it: a new runtime does
    (_, out2) = _run(dev2, nodes, [a])
    assert dev2.download(out2).tolist() == (-(a * a)).tolist()
    assert dev2.runtime.cache.builds == 0 and dev2.runtime.cache.hits == 1, (dev2.runtime.cache.builds,
                                                                                 dev2.runtime.cache.hits)


def _matmul_runs_on_cublas():
    drv, dev = _device()
    rng = np.random.default_rng(2)
    cases = [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((4,), (2, 4, 3)), ((2, 1, 3, 4), (5, 4, 2)),
             ((3, 1, 2, 4), (1, 5, 4, 3)), ((4,), (4,))]
    for dt in (np.float32, np.float64):
        for sa, sb in cases:
            a, b = rng.standard_normal(sa).astype(dt), rng.standard_normal(sb).astype(dt)
            calls = dev.runtime.blas.calls
            (out,) = _run(dev, [["matmul", [-1, -2], None]], [a, b])
            np.testing.assert_allclose(dev.download(out), np.matmul(a, b), rtol=1e-5, atol=1e-5)
            assert dev.runtime.blas.calls > calls, (sa, sb)
    ai, bi = np.arange(6, dtype=np.int64).reshape(2, 3), np.arange(6, dtype=np.int64).reshape(3, 2)
    calls = dev.runtime.blas.calls
    (out,) = _run(dev, [["matmul", [-1, -2], None]], [ai, bi])
    assert dev.download(out).tolist() == (ai @ bi).tolist() and dev.runtime.blas.calls == calls  # a kernel


UNITS = {f.__name__[1:]: f for f in (_allocator_reuses_blocks, _out_of_memory_after_emptying_the_cache,
                                      _large_transfers_go_in_pinned_chunks, _kernel_errors_are_raised_and_cleared,
                                      _ptx_when_nvrtc_does_not_know_the_gpu, _kernels_are_cached_on_disk,
                                      _matmul_runs_on_cublas)}


def units() -> dict:
    out = {}
    for name, fn in UNITS.items():
        try:
            fn()
            out[name] = ""
        except Exception:
            out[name] = traceback.format_exc()
    return out


def main(argv: list[str]) -> int:
    cmd, out = argv[0], argv[1]
    if cmd == "conformance":
        result = conformance([n for n in argv[2].split(";") if n] if len(argv) > 2 else None)
    elif cmd == "units":
        result = units()
    else:
        raise SystemExit(f"unknown command {cmd!r}")
    with open(out, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
