"""The parts of tests/backends/test_cuda.py and test_rocm.py that run a GPU backend on its API stand-in, in a child
process.

The stand-ins (``_cuda_standin.py``, ``_hip_standin.py``) run kernels on PoCL, whose LLVM must not share a process
with hipRTC's (used by test_render_targets.py; see _opencl_child.py), so the pytest process runs

    python tests/backends/_gpu_child.py TARGET COMMAND OUT.json [ARGS...]

and checks the JSON this writes. ``TARGET`` is ``cuda`` or ``rocm`` (:data:`TARGETS`: the backend, its runtime
module, its stand-in and the stand-in's call names). Commands: ``conformance`` (conformance cases, all or the
``;``-separated names given), ``units`` (checks of the runtime's pieces: allocator, staging, out of memory, kernel
errors, the disk cache, BLAS matmul, and per target: CUDA's PTX fallback, ROCm's gfx target).
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from tensorwire.backends import executor as X  # noqa: E402
from tensorwire.backends import gpu_runtime as GR  # noqa: E402
from tensorwire.backends import testing as T  # noqa: E402
from tensorwire.backends.testing import suite as TS  # noqa: E402
from tensorwire.protocol import dtypes as D  # noqa: E402
from tests.backends._child_cases import kernel_lists, run_cases  # noqa: E402
from tests.backends._child_process import checks_named, names, run_checks, serve  # noqa: E402

#: per target: the backend's package, the stand-in module, the stand-in's names of the allocation, free and upload
#: calls, the stand-in configuration a disk-cache check uses (a GPU whose compile target no other check uses), and
#: the kernels to a module of the conformance prebuild (``per_module``; default ``KernelModules.PER_MODULE``)
TARGETS = {
    "cuda": dict(package="tensorwire.backends.cuda", backend="CUDABackend", standin="tests.backends._cuda_standin",
                 alloc="cuMemAlloc", free="cuMemFree", htod="cuMemcpyHtoDAsync", sync="cuStreamSynchronize",
                 unload="cuModuleUnload",
                 cache_gpu={"capability": (8, 6)},
                 cache_arch="sm_86", image_glob="*.cubin"),
    "rocm": dict(package="tensorwire.backends.rocm", backend="ROCmBackend", standin="tests.backends._hip_standin",
                 alloc="hipMalloc", free="hipFree", htod="hipMemcpyHtoDAsync", sync="hipStreamSynchronize",
                 unload="hipModuleUnload",
                 cache_gpu={"arch": "gfx908:xnack-"},
                 cache_arch="gfx908", image_glob="*.co",
                 # clang (a process a module) compiles a prebuild's modules a thread a core: the sample's ~200
                 # kernels (~1 MB of source, ~60 s of clang -O3, most of it a few float16 LSTM, convolution and
                 # pooling kernels) in one module took one core past the 60 s compile bound on a loaded machine; 16
                 # to a module: ~13 modules, the heaviest ~10 s of clang
                 per_module=16),
}
#: the target this process runs (set by :func:`main`): ``backend`` (class), ``RT`` (runtime module), ``S`` (stand-in)
G = SimpleNamespace()


def select(target: str) -> None:
    """Load ``target``'s backend, runtime module and stand-in into :data:`G`."""
    t = TARGETS[target]
    package = importlib.import_module(t["package"])
    G.name, G.t = target, t
    G.backend = getattr(package, t["backend"])
    G.RT = importlib.import_module(t["package"] + ".runtime")
    G.S = importlib.import_module(t["standin"])


def prebuild(backend, drv, cases) -> dict:
    """Lower every case's fragments without running them, then compile all their kernels with the target's compiler in
    a few modules (``GPURuntime.prebuild``) and their OpenCL twins in a few PoCL programs: both compilers' cost is per
    program."""
    t0 = time.perf_counter()
    lists = kernel_lists(backend, cases)
    dev = TS._device(backend, 0)
    per_module = G.t.get("per_module", dev.runtime.PER_MODULE)
    modules = dev.runtime.prebuild(lists, per_module)
    t1 = time.perf_counter()
    programs = drv.prebuild_twins(lists)
    return {"fragments": len(lists), "modules": modules, "per_module": per_module, "programs": programs,
            "kernels": len(dev.runtime._kernels), "compile_seconds": t1 - t0, "pocl_seconds": time.perf_counter() - t1}


def conformance(names: list[str] | None) -> dict:
    """``{"cases": {name: [status, message, ran step by step, a failure was expected]}, "prebuild": ...}``."""
    drv = G.S.install(G.RT)
    backend = G.backend()
    cases = T.conformance_cases()
    if names is not None:
        wanted = set(names)
        cases = [c for c in cases if c.name in wanted]
    stats = prebuild(backend, drv, cases)
    dev = TS._device(backend, 0)
    builds_before = dev.runtime.builds
    t0 = time.perf_counter()
    out = run_cases(backend, cases)
    stats["run_seconds"] = time.perf_counter() - t0
    stats["builds_after_prebuild"] = dev.runtime.builds - builds_before
    stats["launches"] = drv.launches
    stats["gemms"] = dev.runtime.blas.calls
    stats["memory"] = dev.memory()
    return {"cases": out, "prebuild": stats}


# -- checks of the runtime's pieces ---------------------------------------------------------------------------------

def _device(**config):
    drv = G.S.install(G.RT, **config)
    return drv, G.backend().open(0)


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
    allocs = drv.calls[G.t["alloc"]]
    for _ in range(5):
        out = _run(dev, nodes, [a])
        del out
    assert drv.calls[G.t["alloc"]] == allocs, "a repeated step allocated from the driver again"
    m = dev.memory()
    assert m["cache_hits"] > 10 and m["reserved_bytes"] >= m["allocated_bytes"], m
    before = m["allocated_bytes"]
    x = dev.upload(np.zeros(1000, np.float64))  # 8000 bytes -> a block of 8192
    assert dev.memory()["allocated_bytes"] == before + 8192 and dev.nbytes(x) == 8000, dev.memory()
    del x
    assert dev.memory()["allocated_bytes"] == before
    dev.empty_cache()  # what is left: segments with a live block (the error slot's, at least)
    base = dev.memory()
    assert all(any(b.allocated for b in chain) for chain in dev.runtime.pool.segments()), dev.runtime.pool.segments()
    frees = drv.calls.get(G.t["free"], 0)
    y = dev.upload(np.ones((3 << 20) // 4, np.float32))  # 3 MiB: carved from a new 20 MiB segment
    z = dev.upload(np.ones((2 << 20) // 4, np.float32))  # 2 MiB: the same segment's rest
    m = dev.memory()
    assert m["segments"] == base["segments"] + 1 and m["reserved_bytes"] == base["reserved_bytes"] + (20 << 20), m
    np.testing.assert_array_equal(dev.download(z), np.ones((2 << 20) // 4, np.float32))
    del y, z  # the two blocks merge: the segment is wholly free, and empty_cache gives it back
    dev.empty_cache()
    m = dev.memory()
    assert m["reserved_bytes"] == base["reserved_bytes"] and drv.calls[G.t["free"]] == frees + 1, m


def _out_of_memory_after_emptying_the_cache():
    from tensorwire.protocol.errors import OutOfMemory

    drv, dev = _device(memory_bytes=11 << 20)  # a 2 MiB segment for small blocks, 9 MiB for the large ones
    small = dev.upload(np.zeros(16, np.float32))  # the small segment (shared with the error slots when there are any)
    held = dev.upload(np.zeros(1 << 20, np.float32))  # 4 MiB (20 MiB does not fit: a segment of its own size)
    freed = dev.upload(np.zeros((2 << 20) // 4, np.float32))  # a 2 MiB segment, too small for the next request
    del freed  # back to the pool: only an emptied cache makes room for the next request
    frees = drv.calls.get(G.t["free"], 0)
    big = dev.runtime.empty((1 << 20,), D.float32)  # 4 MiB: fits only after the cached block goes back
    assert drv.calls[G.t["free"]] == frees + 1, drv.calls
    del big
    try:
        dev.runtime.empty((4 << 20,), D.float32)  # 16 MiB: never fits
    except OutOfMemory as e:
        assert "out of memory" in str(e) and "cache emptied" in str(e), str(e)
    else:
        raise AssertionError("no OutOfMemory")
    assert dev.download(held).shape == (1 << 20,) and dev.download(small).shape == (16,)  # the device still works


def _large_transfers_go_in_pinned_chunks():
    drv, dev = _device()
    a = np.random.default_rng(1).integers(0, 255, GR.STAGING_CHUNK * 2 + 12345, dtype=np.uint8)
    buf = dev.upload(a)
    assert drv.calls[G.t["htod"]] == 3, drv.calls
    np.testing.assert_array_equal(dev.download(buf), a)
    assert dev.memory()["pinned_staging_bytes"] <= GR.STAGING_LIMIT


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


def _kernel_errors_are_read_once_a_fragment():
    """A fragment of several kernels that can raise waits for the GPU once, at its end, and raises the first
    failing kernel's error (in launch order): the error slots are per launch, not one slot read after each."""
    drv, dev = _device()
    sync = G.t["sync"]
    x = np.arange(6, dtype=np.float32)
    nodes = [["index", [-1, -2], {"dim": 0}], ["exp", [0], None], ["index", [1, -3], {"dim": 0}],
             ["index", [-1, -3], {"dim": 0}]]
    metas = [((6,), D.float32), ((3,), D.int64), ((2,), D.int64)]
    plan = X.compile_plan(dev, nodes, metas)
    keep = set(plan.node_slot)

    def run(i1, i2):
        before = drv.calls.get(sync, 0)
        res = X.run_plan(dev, plan, [dev.upload(a) for a in (x, i1, i2)], list(range(len(nodes))), {}, [], keep)
        return res, drv.calls.get(sync, 0) - before

    def failed(v, text: str) -> bool:
        return isinstance(v, X.Fail) and text in v.err.get("message", "")

    launches = drv.launches
    res, syncs = run(np.array([5, 0, 2], np.int64), np.array([2, 1], np.int64))
    assert drv.launches - launches >= 2, "the fragment should launch several kernels"
    assert syncs == 1, f"{syncs} waits for the GPU in one fragment (one per kernel that can raise?)"
    np.testing.assert_allclose(dev.download(res[2]), np.exp(x[[5, 0, 2]])[[2, 1]], rtol=1e-6)
    np.testing.assert_array_equal(dev.download(res[3]), x[[2, 1]])
    res, _ = run(np.array([5, 0, 2], np.int64), np.array([1, 9], np.int64))  # the gathers by the second index fail
    assert not isinstance(res[0], X.Fail) and failed(res[3], "9"), res
    res, _ = run(np.array([8, 0, 2], np.int64), np.array([1, 9], np.int64))  # both fail, each with its own detail
    assert failed(res[0], "8") and failed(res[3], "9"), res
    res, _ = run(np.array([1, 0, 2], np.int64), np.array([2, 0], np.int64))  # the slots were cleared
    np.testing.assert_array_equal(dev.download(res[3]), x[[2, 0]])


def _modules_are_unloaded_past_max_kernels():
    """With a cache of one kernel, one-kernel fragments evict each other's kernels and their modules are unloaded
    (after the stream's work), while a plan kept alive keeps its module: its launchers are never left pointing at an
    unloaded module. A kernel evicted and asked for again is loaded anew; results stay right throughout. And the
    stand-in is faithful: a launch of a function from an unloaded module fails with the driver's invalid handle."""
    import gc

    drv, dev = _device()
    rt, unload = dev.runtime, G.t["unload"]
    rt.MAX_KERNELS = 1
    a = np.random.default_rng(3).uniform(0.5, 2.0, 40).astype(np.float32)
    refs = {"exp": np.exp, "neg": np.negative, "sin": np.sin, "cos": np.cos, "tanh": np.tanh, "sqrt": np.sqrt,
            "log": np.log, "reciprocal": np.reciprocal}

    def run(op, plan=None, check=True):
        plan = plan or X.compile_plan(dev, [[op, [-1], None]], [((40,), D.float32)])
        res = X.run_plan(dev, plan, [dev.upload(a)], [0], {}, [], set(plan.node_slot))
        if check:
            np.testing.assert_allclose(dev.download(res[0]), refs[op](a), rtol=1e-5, err_msg=op)
        return plan, res[0]

    kept = run("exp")[0]  # its runner's launcher holds exp's module
    (exp_module, _), = {id(rec): (rec, e) for rec, e in rt._loaded.values()}.values()
    stale_fn, queued = None, None
    for op in ["neg", "sin", "cos", "tanh", "sqrt", "log", "reciprocal"]:
        # not read back: the launch may still be queued when the next build unloads its module (which must wait)
        out = run(op, check=False)[1]
        gc.collect()  # (this plan and its launcher are garbage now)
        if queued is not None:
            np.testing.assert_allclose(dev.download(queued[1]), refs[queued[0]](a), rtol=1e-5, err_msg=queued[0])
        queued = (op, out)
        if op == "neg":
            stale_fn = next(e[0] for rec, e in rt._loaded.values() if rec is not exp_module)
        assert len(rt._kernels) <= rt.MAX_KERNELS, len(rt._kernels)
    rt.prebuild([])  # (a build settles the launchers collected since the last one)
    assert drv.calls.get(unload, 0) >= 5 and rt.unloads == drv.calls[unload], (drv.calls.get(unload), rt.unloads)
    assert rt.loaded_modules() <= rt.MAX_KERNELS + 1 and len(drv._modules) == rt.loaded_modules(), (
        rt.loaded_modules(), len(drv._modules))
    assert not exp_module.unloaded, "the kept plan's module was unloaded"
    run("exp", kept)  # its launcher still works: the module stayed
    builds = rt.builds
    run("neg")  # evicted and unloaded long ago: built (from the disk cache) and loaded anew
    assert rt.builds == builds + 1, (rt.builds, builds)
    result = rt.api.launch(stale_fn, 1, 1, 1, 64, 1, 1, 0, rt.stream, 0, rt.api.LAUNCH_EXTRA)
    assert int(result[0]) == 400, result  # CUDA_ERROR_INVALID_HANDLE, hipErrorInvalidHandle
    del kept
    gc.collect()
    rt.MAX_KERNELS = 0
    rt.prebuild([])  # settles and evicts everything: every module goes
    assert rt.loaded_modules() == 0 and len(drv._modules) == 0, (rt.loaded_modules(), drv._modules.keys())


def _ptx_when_nvrtc_does_not_know_the_gpu():
    from tensorwire.backends.codegen.compiler_cuda import supported_archs

    newest = max(supported_archs())
    drv, dev = _device(capability=(99, 0))
    assert dev.runtime.kind == "ptx" and dev.runtime.arch == f"compute_{newest}", dev.runtime.arch
    a = np.arange(6, dtype=np.float64)
    (out,) = _run(dev, [["sqrt", [-1], None]], [a])
    np.testing.assert_allclose(dev.download(out), np.sqrt(a))
    assert G.RT.compile_target((8, 0), supported_archs()) == ("sm_80", "cubin")


def _kernels_are_cached_on_disk():
    import shutil
    import tempfile

    from tensorwire.backends.codegen.cache import CACHE_ENV

    before = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = folder = tempfile.mkdtemp(prefix=f"tw-{G.name}-cache-")  # empty: this process's first build
    try:
        _check_disk_cache()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if before is None:
            del os.environ[CACHE_ENV]
        else:
            os.environ[CACHE_ENV] = before


def _check_disk_cache():
    drv, dev = _device(**G.t["cache_gpu"])
    a = np.arange(7, dtype=np.int32)
    nodes = [["mul", [-1, -1], None], ["neg", [0], None]]
    (_, out) = _run(dev, nodes, [a])
    assert dev.download(out).tolist() == (-(a * a)).tolist()
    assert dev.runtime.cache.builds == 1 and dev.runtime.arch == G.t["cache_arch"], dev.runtime.arch
    folder = dev.runtime.cache.folder()
    assert list(folder.glob(G.t["image_glob"])), list(folder.iterdir())
    drv2, dev2 = _device(**G.t["cache_gpu"])  # a new process would find it: a new runtime does
    (_, out2) = _run(dev2, nodes, [a])
    assert dev2.download(out2).tolist() == (-(a * a)).tolist()
    assert dev2.runtime.cache.builds == 0 and dev2.runtime.cache.hits == 1, (dev2.runtime.cache.builds,
                                                                                 dev2.runtime.cache.hits)


def _matmul_runs_on_the_blas():
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


def _rocm_compiles_for_the_gpus_gfx_target():
    drv, dev = _device(arch="gfx1030")
    assert dev.runtime.arch == "gfx1030" and dev.runtime.compiler == "clang", (dev.runtime.arch, dev.runtime.compiler)
    a = np.arange(6, dtype=np.float64)
    (out,) = _run(dev, [["sqrt", [-1], None]], [a])
    np.testing.assert_allclose(dev.download(out), np.sqrt(a))
    image = next(iter(drv._modules.values()))
    assert b"gfx1030" in image, "the code object is not for the GPU's architecture"
    info = G.backend().devices()[0]
    assert info.available and "gfx1030" in info.name and "clang" in info.name and "hipBLAS" in info.name, info


def _rocm_matmul_without_hipblas_runs_as_kernels():
    from tensorwire.protocol.errors import DeviceError

    def no_blas(stream):
        raise DeviceError("hipBLAS is not available (test)")

    _device()
    G.RT.load_blas, G.RT.blas_unavailable = no_blas, lambda: "hipBLAS is not available (test)"
    dev = G.backend().open(0)
    assert dev.runtime.blas is None and dev.lowering_options.host_ops == frozenset(), dev.lowering_options
    a, b = np.arange(12, dtype=np.float32).reshape(3, 4), np.arange(8, dtype=np.float32).reshape(4, 2)
    (out,) = _run(dev, [["matmul", [-1, -2], None]], [a, b])
    np.testing.assert_allclose(dev.download(out), a @ b)
    assert "matmul as compiled kernels (hipBLAS is not available (test))" in G.backend().devices()[0].name


# -- CUDA graphs (backends/gpu_graphs.py) ----------------------------------------------------------------------------

def _graph_device(graphs: bool = True, **config):
    """A stand-in device with graphs on or off (``TENSORWIRE_CUDA_GRAPHS``, read when a runner is built)."""
    from tensorwire.backends.gpu_graphs import ENV

    os.environ[ENV] = "1" if graphs else "0"
    return _device(**config)


def _runs(dev, plan, inputs_of, n: int, dyn_of=lambda i: {}):
    """``n`` runs of ``plan``, run i on ``inputs_of(i, previous outputs)`` (device buffers) with ``dyn_of(i)``;
    returns every run's kept outputs (all still held: a replay must not overwrite what an earlier one handed out)."""
    keep = {s for s in plan.node_slot if s is not None}
    outs, prev = [], None
    for i in range(n):
        res = X.run_plan(dev, plan, inputs_of(i, prev), list(range(len(plan.node_slot))), dyn_of(i), [], keep)
        prev = [res[j] for j in range(len(plan.node_slot))]
        outs.append(prev)
    return outs


MLP_NODES = [["matmul", [-1, -2], None], ["add", [0, -3], None], ["relu", [1], None], ["sum", [2], {"dims": [1]}],
             ["mul", [-2, -2], None], ["sub", [-2, 4], None], ["exp", [5], None]]


def _mlp_reference(x, w, b):
    h = np.maximum(x.astype(np.float64) @ w + b, 0)
    w2 = w.astype(np.float64) - w.astype(np.float64) ** 2
    return h.sum(1), w2, np.exp(w2)


def _graphs_replay_as_the_plain_runner():
    """A plan with cuBLAS and kernels, replayed 8 times with inputs that are the last run's outputs (as a training
    step's parameters are): the same results as without graphs and as numpy in float64, one capture, one graph
    launch a replay and no kernel launched from Python after the capture; every run's outputs stay as they were
    (a replay writes the graph's own buffers and hands out copies)."""
    from tensorwire.backends.gpu_graphs import GraphedRunner

    rng = np.random.default_rng(5)
    x = rng.standard_normal((16, 12)).astype(np.float32)
    w0 = (rng.standard_normal((12, 12)) * 0.3).astype(np.float32)
    b = rng.standard_normal(12).astype(np.float32)
    metas = [(x.shape, D.float32), (w0.shape, D.float32), (b.shape, D.float32)]
    n, results = 8, {}
    for graphs in (False, True):
        drv, dev = _graph_device(graphs)
        plan = X.compile_plan(dev, MLP_NODES, metas)
        xd, bd = dev.upload(x), dev.upload(b)
        launches = []

        def inputs(i, prev, dev=dev, xd=xd, bd=bd, drv=drv, launches=launches):
            launches.append(drv.calls.get("cuLaunchKernel", 0))
            return [xd, dev.upload(w0) if prev is None else prev[5], bd]  # w <- w - w*w, on the device
        outs = _runs(dev, plan, inputs, n)
        launches.append(drv.calls.get("cuLaunchKernel", 0))
        results[graphs] = [[dev.download(o[j]) for j in (3, 5, 6)] for o in outs]
        stats = dev.memory()["graphs"]
        runner = next(iter(plan.runners.values()))
        if graphs:
            assert isinstance(runner, GraphedRunner) and runner.captured, runner
            warm = runner.warmup
            assert stats["captured"] == 1 and stats["replays"] == n - warm, stats
            assert stats["fallbacks"] == {}, stats
            assert drv.graph_launches == stats["replays"] * stats["segments"], (drv.graph_launches, stats)
            assert stats["segments"] == 1, stats  # no dynamic scalars: one graph
            steady = [b - a for a, b in zip(launches[warm + 1:], launches[warm + 2:])]
            assert steady and set(steady) == {0}, (launches, "kernels launched from Python after the capture")
        else:
            assert stats == {"captured": 0, "segments": 0, "replays": 0, "destroyed": 0, "fallbacks": {}}, stats
            assert drv.graph_launches == 0
    w = w0
    for i in range(n):
        ref = _mlp_reference(x, w, b)
        for got_plain, got_graph, r in zip(results[False][i], results[True][i], ref):
            np.testing.assert_array_equal(got_graph, got_plain)  # the same kernels: the same bits
            np.testing.assert_allclose(got_graph, r, rtol=2e-4, atol=1e-5, err_msg=f"run {i}")
        w = results[True][i][1]


def _dynamic_scalars_are_launched_between_segments():
    """A replayed ``full``'s value and ``rand``'s seed (dynamic attributes) change every run: the launches that take
    them are made between graph segments with this run's values, so each run's results are its own."""
    drv, dev = _graph_device(True)
    x = np.arange(6, dtype=np.float32)
    nodes = [["full", [], {"shape": [], "dtype": "float32", "value": 2.0}], ["mul", [-1, 0], None],
             ["exp", [1], None], ["rand", [], {"shape": [64], "dtype": "float32", "seed": 1, "offset": 0}],
             ["add", [3, 3], None]]
    plan = X.compile_plan(dev, nodes, [((6,), D.float32)])
    xd = dev.upload(x)
    n = 6
    dyn = lambda i: {0: {"value": 1.0 + i}, 3: {"seed": 100 + i}}  # noqa: E731
    outs = _runs(dev, plan, lambda i, prev: [xd], n, dyn)
    stats = dev.memory()["graphs"]
    assert stats["captured"] == 1 and stats["replays"] == n - 2 and stats["segments"] >= 2, stats
    drv2, plain = _graph_device(False)
    plan2 = X.compile_plan(plain, nodes, [((6,), D.float32)])
    ref = _runs(plain, plan2, lambda i, prev: [plain.upload(x)], n, dyn)
    draws = set()
    for i in range(n):
        np.testing.assert_allclose(dev.download(outs[i][2]), np.exp(x * (1.0 + i)), rtol=1e-6, err_msg=f"run {i}")
        got = dev.download(outs[i][4])
        np.testing.assert_array_equal(got, plain.download(ref[i][4]))  # the seed of this run, not the captured one
        draws.add(got.tobytes())
    assert len(draws) == n, "a replay drew the captured seed's numbers"


def _a_host_read_mid_plan_falls_back():
    """A plan that must read its kernels' error slots in the middle of the run (more launches that can raise than a
    thread has slots) waits for the stream there, which the driver refuses during a capture: the capture fails, the
    plan keeps its plain runner for good with the driver's reason counted, and every run is right."""
    from tensorwire.backends.kernel_errors import ErrorSlots

    before = ErrorSlots.PER_THREAD
    ErrorSlots.PER_THREAD = 2
    try:
        drv, dev = _graph_device(True)
        x = np.arange(6, dtype=np.float32)
        nodes = [["index", [-1, -2], {"dim": 0}], ["exp", [0], None], ["index", [1, -3], {"dim": 0}],
                 ["index", [-1, -3], {"dim": 0}]]
        plan = X.compile_plan(dev, nodes, [((6,), D.float32), ((3,), D.int64), ((2,), D.int64)])
        i1, i2 = np.array([5, 0, 2], np.int64), np.array([2, 1], np.int64)
        outs = _runs(dev, plan, lambda i, prev: [dev.upload(a) for a in (x, i1, i2)], 6)
        stats = dev.memory()["graphs"]
        assert stats["captured"] == 0 and stats["replays"] == 0, stats
        assert stats["fallbacks"] == {"cuStreamSynchronize: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED": 1}, stats
        assert drv.calls.get("cuStreamBeginCapture") == 1 and drv.graph_launches == 0, drv.calls
        for o in outs:
            np.testing.assert_allclose(dev.download(o[2]), np.exp(x[i1])[i2], rtol=1e-6)
            np.testing.assert_array_equal(dev.download(o[3]), x[i2])
    finally:
        ErrorSlots.PER_THREAD = before


def _kernel_errors_in_a_graph_are_read_once_a_replay():
    """A captured plan's kernels that can raise write the graph's error slots: a replay waits for the GPU once, a bad
    index fails its node with the kernel's message, and the next replay (slots zeroed by the graph) is right."""
    drv, dev = _graph_device(True)
    sync = G.t["sync"]
    x = np.arange(6, dtype=np.float32)
    nodes = [["index", [-1, -2], {"dim": 0}], ["exp", [0], None], ["index", [-1, -3], {"dim": 0}]]
    plan = X.compile_plan(dev, nodes, [((6,), D.float32), ((3,), D.int64), ((2,), D.int64)])
    keep = {s for s in plan.node_slot if s is not None}

    def run(i1, i2):
        before = drv.calls.get(sync, 0)
        res = X.run_plan(dev, plan, [dev.upload(a) for a in (x, i1, i2)], [0, 1, 2], {}, [], keep)
        return res, drv.calls.get(sync, 0) - before

    good = (np.array([5, 0, 2], np.int64), np.array([2, 1], np.int64))
    for _ in range(3):
        run(*good)
    res, syncs = run(*good)
    assert dev.memory()["graphs"]["replays"] >= 2 and syncs == 1, (dev.memory()["graphs"], syncs)
    np.testing.assert_allclose(dev.download(res[1]), np.exp(x[[5, 0, 2]]), rtol=1e-6)
    res, _ = run(np.array([5, 0, 2], np.int64), np.array([1, 9], np.int64))
    assert isinstance(res[2], X.Fail) and "9" in res[2].err["message"], res
    assert not isinstance(res[1], X.Fail), res  # (the step-by-step rerun names the failing node only)
    replays = dev.memory()["graphs"]["replays"]
    res, _ = run(*good)
    assert dev.memory()["graphs"]["replays"] == replays + 1
    np.testing.assert_array_equal(dev.download(res[2]), x[[2, 1]])


def _dynamic_launches_keep_their_error_slots():
    """Launches with dynamic scalars that can raise, between graph kernels that can raise: each replay makes them
    take the error slots they took when captured, so a replay's error is the failing kernel's own (the runner
    raises it; the executor then reruns step by step)."""
    drv, dev = _graph_device(True)
    nodes = [["full", [], {"shape": [], "dtype": "float32", "value": 2.0}], ["mul", [-1, 0], None],
             ["index", [1, -2], {"dim": 0}], ["index", [-3, -4], {"dim": 0}],
             ["full", [], {"shape": [], "dtype": "float32", "value": 3.0}], ["mul", [-5, 4], None],
             ["index", [5, -4], {"dim": 0}]]
    metas = [((6,), D.float32), ((3,), D.int64), ((8,), D.float32), ((3,), D.int64), ((7,), D.float32)]
    plan = X.compile_plan(dev, nodes, metas)
    keep = {plan.node_slot[j] for j in (2, 3, 6)}
    x, z, w = (np.arange(n, dtype=np.float32) for n in (6, 8, 7))
    i, j = np.array([5, 0, 2]), np.array([1, 6, 0])
    for r in range(4):
        dyn = {0: {"value": 2.0 + r}, 4: {"value": 3.0 + r}}
        res = X.run_plan(dev, plan, [dev.upload(a) for a in (x, i, z, j, w)], list(range(7)), dyn, [], keep)
        assert dev.download(res[6]).tolist() == (w * (3 + r))[j].tolist(), r
        assert dev.download(res[2]).tolist() == (x * (2 + r))[i].tolist(), r
    runner = next(iter(plan.runners.values()))
    assert runner.captured and sum(e[0] == "launch" for e in runner.program) == 2, runner.program
    env = [dev.upload(a) for a in (x, i, z, np.array([1, 7, 0]), w)] + [None] * (plan.nslots - 5)
    try:  # 7 is in range for z (8), the graph's kernel; out of range for w (7), the second dynamic launch
        runner(env, dyn, [])
    except IndexError as e:
        assert "size 7" in str(e), str(e)
    else:
        raise AssertionError("the failing launch's error was not read")


def _a_new_batch_size_captures_its_own_graph():
    """Another batch size is another plan (its shape-generic kernels take the sizes as parameters, fixed per plan):
    it captures its own graph; going back replays the first one; results stay right. A runner handed inputs of
    other shapes runs without its graph (and gives it up when that keeps happening)."""
    drv, dev = _graph_device(True)
    rng = np.random.default_rng(7)
    w = rng.standard_normal((12, 5)).astype(np.float32)
    nodes = [["matmul", [-1, -2], None], ["tanh", [0], None], ["sum", [1], {"dims": [0]}]]
    plans = {}
    for batch in (8, 16, 8, 16):
        plan = plans.get(batch) or X.compile_plan(dev, nodes, [((batch, 12), D.float32), (w.shape, D.float32)])
        plans[batch] = plan
        xs = [rng.standard_normal((batch, 12)).astype(np.float32) for _ in range(4)]
        outs = _runs(dev, plan, lambda i, prev, xs=xs: [dev.upload(xs[i]), dev.upload(w)], 4)
        for xi, o in zip(xs, outs):
            np.testing.assert_allclose(dev.download(o[2]), np.tanh(xi.astype(np.float64) @ w).sum(0), rtol=1e-4)
    stats = dev.memory()["graphs"]
    assert stats["captured"] == 2 and stats["replays"] == 4 * 4 - 2 * 2, stats
    runner = next(iter(plans[8].runners.values()))
    env = [dev.upload(rng.standard_normal((3, 12)).astype(np.float32)), dev.upload(w)] + [None] * (plans[8].nslots - 2)
    runner(env, {}, [])  # (the executor never does this: a plan's inputs have its metas)
    assert dev.memory()["graphs"]["fallbacks"] == {"inputs of other shapes": 1}, dev.memory()["graphs"]
    assert runner.captured


def _the_graph_goes_with_its_plan():
    """An evicted plan's graph is destroyed (executable and graph) before its modules can be unloaded; and the
    stand-in is faithful: a graph launched after its kernel's module was unloaded fails with the driver's invalid
    handle, and the capture rules are the driver's (a wait on the captured stream or an allocation by the capturing
    thread is refused and invalidates the capture, unless the thread relaxed its mode; a launch's parameters are
    recorded by value)."""
    import gc
    import threading

    drv, dev = _graph_device(True)
    rt = dev.runtime
    a = np.arange(40, dtype=np.float32)
    plan = X.compile_plan(dev, [["sin", [-1], None], ["exp", [0], None]], [((40,), D.float32)])
    outs = _runs(dev, plan, lambda i, prev: [dev.upload(a)], 4)
    np.testing.assert_allclose(dev.download(outs[-1][1]), np.exp(np.sin(a)), rtol=1e-6)
    runner = next(iter(plan.runners.values()))
    (graph, exe), = runner.handles
    del plan, runner, outs
    gc.collect()
    assert drv.calls.get("cuGraphExecDestroy") == 1 and drv.calls.get("cuGraphDestroy") == 1, drv.calls
    assert dev.memory()["graphs"]["destroyed"] == 1
    assert int(drv.cuGraphLaunch(exe, rt.stream)[0]) == 1  # CUDA_ERROR_INVALID_VALUE: destroyed
    rt.MAX_KERNELS = 0
    rt.prebuild([])  # the launchers are garbage with their runner: every module goes
    assert rt.loaded_modules() == 0, rt.loaded_modules()
    rt.MAX_KERNELS = 1 << 15

    # a graph over a module unloaded behind its back
    plan = X.compile_plan(dev, [["cos", [-1], None]], [((40,), D.float32)])
    _runs(dev, plan, lambda i, prev: [dev.upload(a)], 3)
    runner = next(iter(plan.runners.values()))
    (_, exe), = runner.handles
    rt.synchronize()
    module, image = next(iter(drv._modules.items()))
    assert int(drv.cuModuleUnload(module)[0]) == 0
    assert int(drv.cuGraphLaunch(exe, rt.stream)[0]) == 400  # CUDA_ERROR_INVALID_HANDLE
    drv._modules[module] = image  # (back, for the runtime that still counts it loaded)

    # the capture rules
    M = drv.CUstreamCaptureMode
    s = rt.stream
    assert int(drv.cuStreamBeginCapture(s, M.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)[0]) == 0
    assert int(drv.cuStreamSynchronize(s)[0]) == 900  # CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
    assert int(drv.cuMemsetD8Async(rt._blas_workspace.ptr, 0, 8, s)[0]) == 901  # ..._INVALIDATED from then on
    assert drv.cuStreamEndCapture(s)[0] == G.S.INVALIDATED
    assert int(drv.cuStreamBeginCapture(s, M.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)[0]) == 0
    other = {}
    t = threading.Thread(target=lambda: (drv.cuCtxSetCurrent(rt.ctx), other.update(
        alloc=drv.cuMemAlloc(64), end=drv.cuStreamEndCapture(s))))
    t.start()
    t.join()
    assert int(other["alloc"][0]) == 0, other  # another thread: thread-local capture, allowed
    assert int(other["end"][0]) == 908, other  # CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD
    old = drv.cuThreadExchangeStreamCaptureMode(M.CU_STREAM_CAPTURE_MODE_RELAXED)[1]
    ok = drv.cuMemAlloc(64)
    drv.cuThreadExchangeStreamCaptureMode(old)
    assert int(ok[0]) == 0, ok  # relaxed: allowed
    assert int(drv.cuMemAlloc(64)[0]) == 900  # the capturing thread, strict: refused, capture invalidated
    assert drv.cuStreamEndCapture(s)[0] == G.S.INVALIDATED
    try:
        blas = G.S.StandInBlas(drv, s)
        drv.cuStreamBeginCapture(s, M.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        blas.gemm(D.float32, 1, 1, 1, ok[1], 1, 0, ok[1], 1, 0, ok[1], 1, 0, 1)
    except Exception as e:  # noqa: BLE001
        assert "cublasSetWorkspace" in str(e), e
    else:
        raise AssertionError("cuBLAS without a workspace of its own allocated during a capture")
    assert drv.cuStreamEndCapture(s)[0] == G.S.INVALIDATED

    # parameters by value: a launch captured with one value replays it after the argument storage changed
    k_plan = X.compile_plan(dev, [["full", [], {"shape": [4], "dtype": "float32", "value": 1.0}]], [])
    lowered_run = dev.runner(k_plan, frozenset({k_plan.node_slot[0]}))
    inner = lowered_run.run
    env = [None] * k_plan.nslots
    assert int(drv.cuStreamBeginCapture(s, M.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)[0]) == 0
    inner(env, {0: {"value": 3.0}}, [])
    _, graph = drv.cuStreamEndCapture(s)
    out3 = env[k_plan.node_slot[0]]
    inner([None] * k_plan.nslots, {0: {"value": 5.0}}, [])  # the same launcher's storage now holds 5
    dev.runtime.zero(out3)
    _, exe = drv.cuGraphInstantiate(graph, 0)
    assert int(drv.cuGraphLaunch(exe, s)[0]) == 0
    assert dev.download(out3).tolist() == [3.0] * 4


def _copies_larger_than_the_calls_saved_run_plain():
    """A graph saves host time per device call, and its replay copies the static inputs in and the outputs out: a
    plan that would copy more than ``COPY_BYTES_PER_CALL`` per call saved keeps its plain runner, with the reason
    counted (here the budget is made small: a one-launch plan over 4 KB), while one within it is captured."""
    from tensorwire.backends import gpu_graphs

    drv, dev = _graph_device(True)
    a = np.arange(1024, dtype=np.float32)
    old = gpu_graphs.COPY_BYTES_PER_CALL
    gpu_graphs.COPY_BYTES_PER_CALL = 3 << 10  # 1024 float32 in and out: 8 KB for one call
    try:
        plan = X.compile_plan(dev, [["exp", [-1], None]], [((1024,), D.float32)])
        outs = _runs(dev, plan, lambda i, prev: [dev.upload(a)], 5)
        np.testing.assert_allclose(dev.download(outs[-1][0]), np.exp(a), rtol=1e-6)
        stats = dev.memory()["graphs"]
        assert stats["captured"] == 0 and stats["fallbacks"] == {"copies outweigh the calls saved": 1}, stats
        assert drv.calls.get("cuStreamBeginCapture", 0) == 0  # decided before capturing: the inputs alone are over
        gpu_graphs.COPY_BYTES_PER_CALL = 8 << 10  # 4 KB in and 4 KB out: within the budget, captured
        plan = X.compile_plan(dev, [["sin", [-1], None]], [((1024,), D.float32)])
        outs = _runs(dev, plan, lambda i, prev: [dev.upload(a)], 5)
        np.testing.assert_allclose(dev.download(outs[-1][0]), np.sin(a), rtol=1e-6)
        stats = dev.memory()["graphs"]
        warm = next(iter(plan.runners.values())).warmup
        assert stats["captured"] == 1 and stats["replays"] == 5 - warm and len(stats["fallbacks"]) == 1, stats
    finally:
        gpu_graphs.COPY_BYTES_PER_CALL = old


def _graphs_off_by_the_knob():
    """Graphs are on by default; ``TENSORWIRE_CUDA_GRAPHS=0``: plans keep their plain runners and nothing is
    captured."""
    from tensorwire.backends.gpu_graphs import ENV, GraphedRunner, enabled

    was = os.environ.pop(ENV, None)
    try:
        assert enabled()
    finally:
        if was is not None:
            os.environ[ENV] = was

    drv, dev = _graph_device(False)
    a = np.arange(10, dtype=np.float32)
    plan = X.compile_plan(dev, [["exp", [-1], None]], [((10,), D.float32)])
    outs = _runs(dev, plan, lambda i, prev: [dev.upload(a)], 5)
    np.testing.assert_allclose(dev.download(outs[-1][0]), np.exp(a), rtol=1e-6)
    assert not isinstance(next(iter(plan.runners.values())), GraphedRunner)
    assert drv.calls.get("cuStreamBeginCapture", 0) == 0 and dev.memory()["graphs"]["captured"] == 0


GRAPH_CHECKS = [_graphs_replay_as_the_plain_runner, _dynamic_scalars_are_launched_between_segments,
                _a_host_read_mid_plan_falls_back, _kernel_errors_in_a_graph_are_read_once_a_replay,
                _dynamic_launches_keep_their_error_slots, _a_new_batch_size_captures_its_own_graph,
                _the_graph_goes_with_its_plan, _copies_larger_than_the_calls_saved_run_plain, _graphs_off_by_the_knob]


def graphs() -> dict:
    return run_checks(checks_named(*GRAPH_CHECKS))


#: the checks of each target
UNITS = {
    "cuda": [_allocator_reuses_blocks, _out_of_memory_after_emptying_the_cache, _large_transfers_go_in_pinned_chunks,
             _kernel_errors_are_raised_and_cleared, _kernel_errors_are_read_once_a_fragment,
             _modules_are_unloaded_past_max_kernels, _ptx_when_nvrtc_does_not_know_the_gpu,
             _kernels_are_cached_on_disk, _matmul_runs_on_the_blas],
    "rocm": [_allocator_reuses_blocks, _out_of_memory_after_emptying_the_cache, _large_transfers_go_in_pinned_chunks,
             _kernel_errors_are_raised_and_cleared, _kernel_errors_are_read_once_a_fragment,
             _modules_are_unloaded_past_max_kernels, _rocm_compiles_for_the_gpus_gfx_target,
             _kernels_are_cached_on_disk,
             _matmul_runs_on_the_blas, _rocm_matmul_without_hipblas_runs_as_kernels],
}


def units() -> dict:
    return run_checks(checks_named(*UNITS[G.name]))


#: command -> what it writes, from the command's arguments
COMMANDS = {"conformance": lambda args: conformance(names(args)), "units": lambda args: units(),
            "graphs": lambda args: graphs()}


def main(argv: list[str]) -> int:
    select(argv[0])
    return serve(COMMANDS, argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
