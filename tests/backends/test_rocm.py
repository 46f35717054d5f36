"""The ROCm backend (rocm:N): discovery without a GPU for real, compiles with the real HIP compiler, and its host code
on the HIP stand-in.

Without an AMD GPU (this machine, CI) the backend's own host code runs against ``_hip_standin.py``, which replaces
HIP and hipBLAS (hip-python's calls, conventions and enums) and executes each launched kernel's OpenCL twin on PoCL,
over the memory/launch core it shares with the CUDA stand-in (``_gpu_standin.py``); clang's HIP offload still compiles
every kernel's real HIP source for the stand-in GPU's gfx target. On the stand-in:

* a SAMPLE of the conformance suite (:data:`SAMPLE`: the first case of every op, 130 of 2455), in ``_gpu_child.py``
  (PoCL must not share a process with hipRTC). test_cuda.py runs the whole suite through the same shared runtime code
  (``backends/gpu_runtime.py``); here a sample of ~280 cases took 63 s on this loaded 2-core machine (PoCL building
  each kernel's work-group code at its first launch), the whole suite would take ~8 minutes of a 20-minute budget;
* the runtime's pieces (``_gpu_child.units``): allocator, OOM, pinned staging, kernel errors, gfx target, disk cache,
  hipBLAS and its absence;
* a real cluster whose ``rocm:0`` worker runs with the stand-in installed: moves between devices, a sample of the
  autograd gradchecks (``UNDER_TEST.gradchecks``), digits training, memory statistics and out-of-memory errors.

The compile check runs in this process: the backend's own compile path (``ROCmRuntime.prebuild`` with hipRTC where
libamdhip64 has it, else clang) builds the kernels of every third sampled case but the float16 ones
(:data:`COMPILE_SAMPLE`) for gfx90a (and gfx942 where the compiler knows it) in a cold cache.
Tests marked ``gpu`` run on a real AMD GPU and skip with the reason elsewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import partial

import pytest

from tensorwire.backends import testing as T
from tensorwire.backends.codegen.compiler_hip import hip_unavailable
from tensorwire.backends.rocm import ROCmBackend
from tensorwire.backends.rocm import runtime as RT
from tensorwire.backends.testing.suite import _device
from tensorwire.protocol.errors import DeviceError
from tests.backends import _device_checks as DC
from tests.backends import _gpu_clusters as GC
from tests.backends._child_cases import conformance_sample
from tests.backends._child_process import child_fixture, run_child

STANDIN = os.path.join(GC.HERE, "_hip_standin.py")
#: this host's real GPU (discovery on its driver, or the reason there is none)
HOST = GC.HostGPU(ROCmBackend(), "AMD", "this host has an AMD GPU; the no-GPU path is not here")
REAL = HOST.found
gpu, needs_gpu, needs_no_gpu = pytest.mark.gpu, HOST.needs_gpu, HOST.needs_no_gpu


def _standin_why() -> str | None:
    """Why the HIP stand-in cannot run here (hip-python for its enums, clang for the kernels, PoCL to run them)."""
    try:
        import hip  # noqa: F401
    except ImportError as e:
        return f"the HIP stand-in uses hip-python's enums: {e}; pip install -e \".[rocm]\""
    why = hip_unavailable("clang")
    if why:
        return f"the HIP stand-in compiles with clang: {why}"
    code = ("import json; from tensorwire.backends.opencl import OpenCLBackend as B; d = B().devices()[0]; "
            "print(json.dumps([d.available, d.reason]))")  # PoCL stays out of this process
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if r.returncode:
        return f"the HIP stand-in runs kernels on OpenCL: {r.stderr[-500:]}"
    ok, reason = json.loads(r.stdout.strip().splitlines()[-1])
    return None if ok else f"the HIP stand-in runs kernels on OpenCL: {reason}"


STANDIN_WHY = _standin_why()
needs_standin = pytest.mark.skipif(STANDIN_WHY is not None, reason=str(STANDIN_WHY))
CASES = T.conformance_cases()


def _sample(cases: list) -> list:
    """The first case of every op: deterministic, and every op is there."""
    first: dict = {}
    for c in cases:
        first.setdefault(c.op, c)
    return list(first.values())


#: the conformance cases run on the stand-in (see the module doc; TENSORWIRE_FULL_CONFORMANCE=1 runs them all)
SAMPLE = conformance_sample(CASES, _sample)
#: the cases whose kernels the compile check builds cold for each gfx target: every third of :data:`SAMPLE` but its
#: float16 cases (~40 ops, ~50 kernels, ~80 KB of source: ~4 s of hipRTC). The check is of the runtime's compile
#: path (modules of hash-named kernels, the kernel cache, the module loader), which any kernel takes; the float16
#: cases' kernels (the unrolled LSTM, convolution and pooling ones: ~380 KB, 80% of the source, ~17 s of hipRTC on
#: every cold run) are compiled for gfx90a by test_render_targets.py's hipRTC check (every line shape the renderer
#: writes) and by clang in the stand-in's conformance run (every kernel of :data:`SAMPLE`).
COMPILE_SAMPLE = [c for c in SAMPLE[::3] if "float16" not in c.name]
#: ``child(command, tmp_dir, *args)``: ``_gpu_child.py rocm COMMAND``'s JSON result
child = partial(run_child, [GC.CHILD, "rocm"])
#: the device-generic tests' record (``_device_checks``): their cluster and child tests run on the stand-in, with a
#: sample of test_cuda.py's gradchecks (each new fragment is a clang run here: 8 ops took 45 s): a reduction and
#: matmul on hipBLAS
UNDER_TEST = DC.DeviceUnderTest(
    "rocm:0", move_dtypes=("bool", "int8", "int64", "float16", "bfloat16", "float32", "float64"),
    gradchecks=("softmax", "matmul"), conformance=tuple(SAMPLE), found=REAL,
    runtime_checks=("allocator_reuses_blocks", "out_of_memory_after_emptying_the_cache",
                    "large_transfers_go_in_pinned_chunks", "kernel_errors_are_raised_and_cleared",
                    "kernel_errors_are_read_once_a_fragment", "modules_are_unloaded_past_max_kernels",
                    "rocm_compiles_for_the_gpus_gfx_target", "kernels_are_cached_on_disk", "matmul_runs_on_the_blas",
                    "rocm_matmul_without_hipblas_runs_as_kernels"),
    refusal=(REAL.reason[:60], {}), refusal_skip=HOST.has_gpu)


class TestOnTheDevice(DC.ClusterTests, DC.ChildTests, DC.RealGPUTests):
    """The device-generic tests (``_device_checks``) on :data:`UNDER_TEST`."""


# -- discovery, for real --------------------------------------------------------------------------------------------

def test_the_plugin_is_registered_through_its_entry_point():
    from tensorwire.backends import backends

    assert isinstance(backends()["rocm"], ROCmBackend)


@needs_no_gpu
def test_no_gpu_lists_rocm0_unavailable_with_the_runtimes_reason():
    info, = ROCmBackend().devices()
    assert (info.type, info.index) == ("rocm", 0)
    assert not info.available and info.reason, info
    assert any(w in info.reason for w in ("hip-python", "ROCm runtime", "hipInit", "HIP compiler")), info.reason
    with pytest.raises(DeviceError, match="rocm:0 is not available: "):
        ROCmBackend().open(0)


def test_without_hip_python_the_plugin_still_loads(monkeypatch):
    monkeypatch.setitem(sys.modules, "hip", None)  # `from hip import hip` fails
    monkeypatch.setattr(RT.discover, "found", None)
    info, = ROCmBackend().devices()
    assert not info.available and "hip-python is not installed" in info.reason and ".[rocm]" in info.reason


def test_without_the_rocm_runtime_the_reason_is_the_loaders(monkeypatch):
    class NoLibrary:
        def hipInit(self, flags):
            raise RuntimeError("failed to dlopen 'b'libamdhip64.so'': libamdhip64.so: cannot open shared object file")

    monkeypatch.setattr(RT, "load_hip", NoLibrary)
    monkeypatch.setattr(RT.discover, "found", None)
    info, = ROCmBackend().devices()
    assert not info.available and info.reason.startswith("the ROCm runtime is not available (RuntimeError: failed "
                                                         "to dlopen"), info.reason


def test_hiprtc_is_looked_for_in_its_own_library_first(monkeypatch):
    """ROCm 7 has hipRTC only in libhiprtc (hip-python 7.2 loads that name); ROCm 5 kept it in libamdhip64."""
    import ctypes

    from tensorwire.backends.codegen import compiler_hip as H

    tried = []

    def cdll(name):
        tried.append(name)
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", cdll)
    monkeypatch.setattr(H, "_LIB", None)
    monkeypatch.setattr(H, "_LIB_WHY", "")
    assert H._hiprtc_lib() is None
    first_amdhip = min(i for i, n in enumerate(tried) if "amdhip64" in n)
    assert tried[0] == "libhiprtc.so.7" or "hiprtc" in tried[0], tried
    assert all("hiprtc" in n for n in tried[:first_amdhip]), tried
    assert "libhiprtc, libamdhip64" in H._LIB_WHY


def test_every_primitive_compiles():
    b = ROCmBackend()
    assert not b.missing_primitives() and b.native == frozenset()
    assert RT.LOWERING.host_ops == frozenset({"matmul"}) and RT.LOWERING.group == 256 and RT.LOWERING.tile == 16
    assert 120 <= len(SAMPLE) == len({c.op for c in CASES}) and len(SAMPLE) < len(CASES) // 10


# -- the real compiler, through the backend's compile path ------------------------------------------------------------

def _compiles_for(compiler: str, arch: str) -> str | None:
    """None when ``compiler`` builds a small kernel for ``arch``, else why not. Asked in a child: ROCm 5.2's hipRTC
    crashes the process on an architecture it does not know (gfx942) instead of returning an error."""
    code = ("import sys; from tensorwire.backends.codegen.compiler_hip import compile_hip; "
            "compile_hip(sys.argv[3], sys.argv[1], compiler=sys.argv[2])")
    kernel = 'extern "C" __global__ void k(float* a) { a[0] = 1.0f; }'
    r = subprocess.run([sys.executable, "-c", code, arch, compiler, kernel], capture_output=True, text=True,
                       timeout=300)
    return None if r.returncode == 0 else f"exit code {r.returncode}: {r.stderr.strip()[-300:]}"


@needs_standin
@pytest.mark.parametrize("arch", ["gfx90a", "gfx942"])
def test_sampled_conformance_kernels_compile_for(arch, monkeypatch):
    """``ROCmRuntime.prebuild`` (hipRTC where it loads, else clang) compiles the kernels of
    :data:`COMPILE_SAMPLE` (sampled: every third op of :data:`SAMPLE` but the float16 ones) for ``arch``, 16
    kernels to a module (compiled a thread a core), each module compiled now or read back verified from the kernel
    cache, whose key holds the arch, the compiler and its options (a cold cache compiles them all, ~4 s of hipRTC;
    the runtime's compile into a cold cache is checked every run by ``_gpu_child.py``'s
    ``_kernels_are_cached_on_disk``, and this arch by :func:`_compiles_for` here); the stand-in's module loader
    checks each image is an AMDGPU code object that holds its functions (nothing runs, so PoCL stays out of this
    process)."""
    from tests.backends import _gpu_child as C
    from tests.backends import _hip_standin as S

    compiler = RT.load_compiler()
    why = _compiles_for(compiler, arch)
    if why:
        pytest.skip(f"{compiler} does not compile for {arch} here: {why}")
    for name in ("load_hip", "load_blas", "blas_unavailable", "load_compiler"):
        monkeypatch.setattr(RT, name, getattr(RT, name))  # restored after the test
    monkeypatch.setattr(RT.discover, "found", RT.discover.found)
    hip = S.install(RT, arch=arch)
    RT.load_compiler = lambda: compiler
    backend = ROCmBackend()
    lists = C.kernel_lists(backend, COMPILE_SAMPLE)
    dev = _device(backend, 0)
    assert dev.runtime.compiler == compiler and dev.runtime.arch == arch
    modules = dev.runtime.prebuild(lists, 16)
    kernels = sum(len(k) for k in lists)
    assert modules == -(-len(dev.runtime._kernels) // 16) and len(dev.runtime._kernels) > 40 and kernels > 40, (
        modules, kernels)
    cache = dev.runtime.cache
    assert hip.calls["hipModuleLoadData"] == modules and cache.builds + cache.hits == modules, (
        modules, cache.builds, cache.hits)
    print(f"\n{arch} ({compiler}): {len(lists)} fragments, {len(dev.runtime._kernels)} distinct kernels, "
          f"{modules} modules ({cache.builds} compiled, {cache.hits} from the kernel cache)")


# -- the host code on the stand-in ----------------------------------------------------------------------------------

conformance = child_fixture(child, "conformance", ";".join(c.name for c in SAMPLE), skip=STANDIN_WHY)


@needs_standin
def test_conformance_used_prebuilt_modules_hipblas_and_the_pool(conformance):
    stats = conformance["prebuild"]
    # the sample's ~200 distinct kernels compiled together, ``per_module`` to a module (not a module a fragment)
    assert stats["kernels"] > 100 and stats["modules"] == -(-stats["kernels"] // stats["per_module"]), stats
    assert stats["modules"] < stats["fragments"] // 4, stats
    assert stats["builds_after_prebuild"] < 40, stats
    assert stats["gemms"] >= 2, stats  # float matmuls (and convolutions) went to hipBLAS
    assert stats["memory"]["cache_hits"] > stats["memory"]["driver_allocs"] * 5, stats["memory"]


units = child_fixture(child, "units", skip=STANDIN_WHY)


# -- a real cluster, its rocm:0 worker on the stand-in --------------------------------------------------------------

#: cpu:0 and a rocm:0 worker process that runs the backend on the stand-in
cluster = GC.standin_cluster(STANDIN, "rocm:0", STANDIN_WHY)


@pytest.fixture(scope="module")
def second_gpu(cluster):
    """rocm:1 on the stand-in (two GPUs): a thread that never called hipSetDevice works on GPU 0."""
    cluster.start_service("rocm:1", GC.standin_worker(STANDIN, "rocm:1", cluster.service_address))
    return "rocm:1"


@needs_standin
def test_two_sessions_mixing_large_and_small_batches(session, cluster, second_gpu):
    """Large batches run on the worker's pool threads, small ones on its main thread: each thread needs the GPU
    current (the stand-in keeps hipSetDevice per thread, as the runtime does) and the runtime's state kept apart."""
    from tensorwire.selftest import mixed_sessions

    assert mixed_sessions(cluster.address, second_gpu) == []


@needs_standin
def test_the_cluster_lists_the_device(session, cluster):
    info = {d["device"]: d for d in session.device_info()}
    assert info["rocm:0"]["available"] and info["rocm:0"]["name"].startswith("Stand-in AMD GPU"), info
    assert "gfx90a" in info["rocm:0"]["name"] and "matmul on hipBLAS" in info["rocm:0"]["name"], info


@needs_standin
def test_memory_stats_and_out_of_memory(session):
    DC.stats_with_a_small_tensor("rocm:0", 1 << 30)  # the stand-in's 1 GiB
    DC.assert_out_of_memory_leaves_the_worker_serving("rocm:0", 1 << 30, match="out of memory")


# -- a real GPU -----------------------------------------------------------------------------------------------------

_GPU_BACKEND = ROCmBackend()


@gpu
@needs_gpu
@pytest.mark.parametrize("case", CASES, ids=str)
def test_conformance_on_a_gpu(case):
    T.check_case(_GPU_BACKEND, case)


gpu_session = GC.gpu_session("rocm:0", HOST.no_gpu)
