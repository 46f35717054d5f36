"""The CUDA backend (cuda:N): discovery without a driver for real, and its host code on the driver stand-in.

Without a GPU (this machine, CI) the backend's own host code runs against ``_cuda_standin.py``, which replaces the
driver API and cuBLAS and executes each launched kernel's OpenCL twin on PoCL; NVRTC still compiles every kernel's
real CUDA source. On the stand-in:

* a sample of the conformance suite (``_child_cases.sample``: the first and middle case of every op, every
  round-trip, replay and failure case; in ``_gpu_child.py``: PoCL must not share a process with hipRTC, see
  test_opencl.py). Its kernels are compiled first in a few NVRTC modules and PoCL programs. The whole suite took
  ~2 min with empty caches (NVRTC 18 s, PoCL 6 s, then ~100 s of runs, mostly PoCL generating each kernel's
  work-group code at its first launch), too much of the test budget for a stand-in: every kernel's CUDA source is
  still compiled by NVRTC in test_render_targets.py, and the OpenCL backend, which shares the lowering, runs the
  same sample (``TENSORWIRE_FULL_CONFORMANCE=1`` runs the whole suite on either);
* the runtime's pieces (``_gpu_child.units``): allocator, OOM, pinned staging, kernel errors, PTX, disk cache, cuBLAS;
* a real cluster whose ``cuda:0`` worker runs with the stand-in installed: moves between devices, a sample of the
  autograd gradchecks (``_gradcheck.STANDIN_GRADCHECKS``: 19 of 36, every kernel kind), digits training, memory
  statistics and out-of-memory errors.

Tests marked ``gpu`` run the same on a real GPU and skip with the reason elsewhere.
"""

from __future__ import annotations

import os
import sys
from functools import partial

import numpy as np
import pytest

from tensorwire.backends import testing as T
from tensorwire.backends.cuda import CUDABackend
from tensorwire.backends.cuda import runtime as RT
from tensorwire.protocol.errors import DeviceError
from tests.backends import _device_checks as DC
from tests.backends import _gpu_clusters as GC
from tests.backends._child_cases import conformance_sample
from tests.backends._child_process import child_fixture, run_child
from tests.backends._gradcheck import STANDIN_GRADCHECKS
from tests.backends._pocl import opencl_available

STANDIN = os.path.join(GC.HERE, "_cuda_standin.py")
#: this host's real GPU (discovery on its driver, or the reason there is none)
HOST = GC.HostGPU(CUDABackend(), "CUDA", "this host has a CUDA GPU; the no-driver path is not here")
REAL = HOST.found
gpu, needs_gpu, needs_no_gpu = pytest.mark.gpu, HOST.needs_gpu, HOST.needs_no_gpu

OPENCL_OK, OPENCL_WHY = opencl_available()
#: why the stand-in cannot run here (None where it can)
STANDIN_WHY = None if OPENCL_OK else f"the CUDA stand-in runs kernels on OpenCL: {OPENCL_WHY}"
needs_standin = pytest.mark.skipif(STANDIN_WHY is not None, reason=str(STANDIN_WHY))
CASES = T.conformance_cases()
#: the cases run on the stand-in (a real GPU runs them all; TENSORWIRE_FULL_CONFORMANCE=1 runs them all here too): see
#: :func:`tests.backends._child_cases.conformance_sample`
SAMPLE = conformance_sample(CASES)
#: ``child(command, tmp_dir, *args)``: ``_gpu_child.py cuda COMMAND``'s JSON result
child = partial(run_child, [GC.CHILD, "cuda"])
#: the device-generic tests' record (``_device_checks``): their cluster and child tests run on the stand-in
UNDER_TEST = DC.DeviceUnderTest(
    "cuda:0", gradchecks=tuple(STANDIN_GRADCHECKS), conformance=tuple(SAMPLE), found=REAL,
    runtime_checks=("allocator_reuses_blocks", "out_of_memory_after_emptying_the_cache",
                    "large_transfers_go_in_pinned_chunks", "kernel_errors_are_raised_and_cleared",
                    "kernel_errors_are_read_once_a_fragment", "modules_are_unloaded_past_max_kernels",
                    "ptx_when_nvrtc_does_not_know_the_gpu", "kernels_are_cached_on_disk", "matmul_runs_on_the_blas"),
    refusal=(REAL.reason[:60], {}), refusal_skip=HOST.has_gpu)


class TestOnTheDevice(DC.ClusterTests, DC.ChildTests, DC.RealGPUTests):
    """The device-generic tests (``_device_checks``) on :data:`UNDER_TEST`."""


# -- discovery, for real --------------------------------------------------------------------------------------------

@needs_no_gpu
def test_no_driver_lists_cuda0_unavailable_with_the_drivers_reason():
    pytest.importorskip("cuda.bindings", reason="cuda-python is not installed (.[cuda]): the reason given is that, "
                                                "not the driver's (test_without_cuda_python_the_plugin_still_loads)")
    info, = CUDABackend().devices()
    assert (info.type, info.index) == ("cuda", 0)
    assert not info.available and info.reason, info
    assert "driver" in info.reason.lower() or "cuinit" in info.reason.lower(), info.reason
    with pytest.raises(DeviceError, match="cuda:0 is not available: "):
        CUDABackend().open(0)


def test_without_cuda_python_the_plugin_still_loads(monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)  # `from cuda.bindings import driver` fails
    monkeypatch.setattr(RT.discover, "found", None)
    info, = CUDABackend().devices()
    assert not info.available and "cuda-python is not installed" in info.reason and ".[cuda]" in info.reason


def test_every_primitive_compiles():
    b = CUDABackend()
    assert not b.missing_primitives() and b.native == frozenset()
    assert RT.LOWERING.host_ops == frozenset({"matmul"}) and RT.LOWERING.group == 256 and RT.LOWERING.tile == 16


def test_compile_target_prefers_the_gpus_own_cubin():
    archs = [70, 75, 80, 86, 89, 90]
    assert RT.compile_target((8, 6), archs) == ("sm_86", "cubin")
    assert RT.compile_target((12, 0), archs) == ("compute_90", "ptx")
    assert RT.compile_target((8, 7), archs) == ("compute_86", "ptx")
    with pytest.raises(DeviceError, match="older than all of them"):
        RT.compile_target((6, 0), archs)


# -- the host code on the stand-in ----------------------------------------------------------------------------------

conformance = child_fixture(child, "conformance", ";".join(c.name for c in SAMPLE), skip=STANDIN_WHY)


@needs_standin
def test_conformance_used_prebuilt_modules_cublas_and_the_pool(conformance):
    stats = conformance["prebuild"]
    assert stats["kernels"] > 250 and stats["modules"] < 20, stats  # the sample's ~320 kernels, a few modules
    assert stats["builds_after_prebuild"] < 20, stats
    assert stats["gemms"] >= 4, stats  # float matmuls (and convolutions) went to cuBLAS
    assert stats["memory"]["cache_hits"] > stats["memory"]["driver_allocs"] * 10, stats["memory"]


units = child_fixture(child, "units", skip=STANDIN_WHY)


# -- a real cluster, its cuda:0 worker on the stand-in --------------------------------------------------------------

#: cpu:0 and a cuda:0 worker process that runs the backend on the stand-in; graphs on (off by default until a real
#: GPU has run them): the compiled training step below replays as graphs
cluster = GC.standin_cluster(STANDIN, "cuda:0", STANDIN_WHY, extra_env={"TENSORWIRE_CUDA_GRAPHS": "1"})


@needs_standin
def test_the_cluster_lists_the_device(session, cluster):
    info = {d["device"]: d for d in session.device_info()}
    assert info["cuda:0"]["available"] and info["cuda:0"]["name"].startswith("Stand-in GPU"), info


@needs_standin
def test_memory_stats_report_allocated_and_reserved_bytes(session):
    import tensorwire as tw

    dev = DC.stats_with_a_small_tensor("cuda:0", 1 << 30)  # the stand-in's 1 GiB
    assert dev["bytes"] >= 4000, dev
    after = tw.memory_stats()["devices"]["cuda:0"]  # the tensor dropped
    assert after["allocated_bytes"] < dev["allocated_bytes"] and after["reserved_bytes"] == dev["reserved_bytes"]


@needs_standin
def test_out_of_memory_is_typed_and_the_worker_keeps_serving(session):
    DC.assert_out_of_memory_leaves_the_worker_serving("cuda:0", 1 << 30, match="out of memory")  # the stand-in's


@needs_standin
def test_torch_cuda_methods_move_to_cuda(session):
    """Issue 36, finding 7: ``x.cuda()`` and ``model.cuda()``, as PyTorch programs write them."""
    import tensorwire as tw

    x = tw.tensor(np.arange(4.0, dtype=np.float32)).cuda()
    assert str(x.device) == "cuda:0" and str(x.cuda(0).device) == "cuda:0"
    m = tw.nn.Linear(4, 2).cuda()
    assert str(m.weight.device) == "cuda:0"
    np.testing.assert_allclose(m(x).cpu().detach().numpy(), m.cpu()(x.cpu()).detach().numpy(), rtol=1e-6)


@needs_standin
def test_two_sessions_mixing_large_and_small_batches(session, cluster):
    """Large batches run on the worker's pool threads, small ones on its main thread: each thread needs the context
    current (the stand-in keeps it per thread, as the driver does) and the runtime's state kept apart."""
    from tensorwire.selftest import mixed_sessions

    assert mixed_sessions(cluster.address, "cuda:0") == []


@needs_standin
def test_a_compiled_training_step_replays_as_cuda_graphs(session):
    """``tw.compile``'d Adam steps on the stand-in worker: after the warm-up runs each plan is captured once and
    replayed as CUDA graphs (the worker's stats count it), and the losses and weights are the CPU's."""
    import tensorwire as tw

    rng = np.random.default_rng(0)
    xn, yn = rng.standard_normal((32, 20)).astype(np.float32), rng.integers(0, 5, 32)

    def train(dev):
        tw.manual_seed(0)
        model = tw.nn.Sequential(tw.nn.Linear(20, 16), tw.nn.ReLU(), tw.nn.Linear(16, 5)).to(dev)
        opt = tw.optim.Adam(model.parameters(), lr=1e-2)
        x, y = tw.tensor(xn, device=dev), tw.tensor(yn, device=dev)

        @tw.compile
        def step():
            loss = tw.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss
        losses = [step().item() for _ in range(9)]
        return losses, model[0].weight.detach().cpu().numpy()

    before = tw.memory_stats()["devices"]["cuda:0"]["graphs"]
    (cpu, wc), (cuda, wg) = train("cpu:0"), train("cuda:0")
    graphs = tw.memory_stats()["devices"]["cuda:0"]["graphs"]
    assert graphs["captured"] > before["captured"] and graphs["replays"] >= before["replays"] + 3, graphs
    assert graphs["fallbacks"] == before["fallbacks"], graphs
    np.testing.assert_allclose(cuda, cpu, rtol=1e-4)
    np.testing.assert_allclose(wg, wc, rtol=1e-3, atol=1e-5)


# -- a real GPU -----------------------------------------------------------------------------------------------------

_GPU_BACKEND = CUDABackend()


@pytest.fixture(scope="module")
def gpu_kernels():
    """Every case's kernels compiled in a few modules first (NVRTC's cost is mostly per module)."""
    if REAL.available:
        T.prebuild_cases(_GPU_BACKEND, CASES)


@gpu
@needs_gpu
@pytest.mark.parametrize("case", CASES, ids=str)
def test_conformance_on_a_gpu(case, gpu_kernels):
    T.check_case(_GPU_BACKEND, case)


#: graphs on: a real GPU is where they are proven (off by default until then)
gpu_session = GC.gpu_session("cuda:0", HOST.no_gpu, extra_env={"TENSORWIRE_CUDA_GRAPHS": "1"})


@gpu
@needs_gpu
def test_matmul_benchmark_row_on_a_gpu():
    """The benchmark's rows run (their figures go to BENCHMARKS.md by hand)."""
    pytest.importorskip("torch")
    from benchmarks import cuda as B

    rows = B.run_all()
    assert rows and all(r.ratio > 0 for r in rows), rows
