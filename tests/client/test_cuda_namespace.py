"""``tw.cuda``'s torch.cuda functions beyond the device-type ones (client/cuda.py): memory figures, device
properties, the generator's state, init.

(a) On the shared cluster (cpu:0, cpu:1: no cuda device) each answers as torch without CUDA does: the same value
(0, an empty dict, None, ``[]``, False) or the same exception (``AssertionError``; ``KeyError`` from
``memory_summary``), checked against the installed torch.
(b) On a cluster whose ``cuda:0`` worker runs the CUDA backend on the driver stand-in (``tests/backends/
_cuda_standin.py``, as test_cuda.py starts it: ``_gpu_clusters.standin_cluster``), the answers come from that worker:
its allocator's figures, the stand-in GPU's name, memory and capability. Only uploads and frees run there (no
kernel is compiled), so the cluster takes a few seconds.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw
from tests.backends import _gpu_clusters as GC
from tests.backends._pocl import opencl_available

pytestmark = pytest.mark.usefixtures("session")

MiB = 1 << 20


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch", reason="torch is not installed: the reference for the behaviour without CUDA")


@pytest.fixture
def no_cuda(torch):
    """torch and the shared session, both without CUDA."""
    if torch.cuda.is_available():
        pytest.skip("this torch has CUDA: the reference needs a torch without it")
    assert not tw.cuda.is_available()
    return torch


# -- (a) no cuda device, as torch without CUDA ----------------------------------------------------------------------

VALUES = ["memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved", "memory_stats",
          "seed", "seed_all", "get_rng_state_all", "is_initialized", "device_count", "empty_cache"]
RAISES = ["mem_get_info", "get_device_properties", "get_device_capability", "get_rng_state", "initial_seed", "init",
          "ipc_collect"]


@pytest.mark.parametrize("name", VALUES)
def test_without_cuda_the_values_are_torchs(no_cuda, name):
    ours, theirs = getattr(tw.cuda, name)(), getattr(no_cuda.cuda, name)()
    assert ours == theirs and type(ours) is type(theirs), (ours, theirs)


@pytest.mark.parametrize("name", RAISES)
def test_without_cuda_the_errors_are_torchs(no_cuda, name):
    with pytest.raises(AssertionError, match="not compiled with CUDA"):
        getattr(no_cuda.cuda, name)()
    with pytest.raises(AssertionError, match="the connected cluster has no cuda device"):
        getattr(tw.cuda, name)()


def test_without_cuda_memory_summary_fails_as_torchs(no_cuda):
    with pytest.raises(KeyError, match="allocated_bytes.all.current"):
        no_cuda.cuda.memory_summary()
    with pytest.raises(KeyError, match="allocated_bytes.all.current"):
        tw.cuda.memory_summary()


def test_without_cuda_set_rng_state_restores_the_one_generator(no_cuda):
    assert no_cuda.cuda.set_rng_state(no_cuda.get_rng_state()) is None
    state = tw.get_rng_state()
    first = tw.rand(4).numpy()
    assert tw.cuda.set_rng_state(state) is None
    np.testing.assert_array_equal(tw.rand(4).numpy(), first)


def test_the_functions_left_out_are_absent():
    """No streams, events, graphs or NVTX (tensorwire exposes no streams), no peak reset (no request resets the
    worker's peak), no utilization (workers do not report it)."""
    for name in ("Event", "Stream", "current_stream", "default_stream", "stream", "nvtx", "CUDAGraph", "graph",
                 "reset_peak_memory_stats", "reset_max_memory_allocated", "utilization"):
        assert not hasattr(tw.cuda, name), name
    assert set(tw.cuda.__all__) <= set(dir(tw.cuda))


# -- (b) on the CUDA stand-in ----------------------------------------------------------------------------------------

_OPENCL_OK, _OPENCL_WHY = opencl_available()
standin_cluster = GC.standin_cluster(
    GC.os.path.join(GC.HERE, "_cuda_standin.py"), "cuda:0",
    None if _OPENCL_OK else f"the CUDA stand-in runs kernels on OpenCL: {_OPENCL_WHY}")


@pytest.fixture(scope="module")
def standin_session(standin_cluster):
    pytest.importorskip("cuda.bindings", reason="the CUDA stand-in needs cuda-python's enums (.[cuda])")
    s = tw.connect(standin_cluster.address)
    yield s
    s.close()


@pytest.fixture
def on_standin(standin_session, session):
    """The stand-in cluster's session as the current one for the test (the shared one again after)."""
    tw.set_session(standin_session)
    yield standin_session
    tw.set_session(session)


def _device() -> dict:
    return tw.memory_stats()["devices"]["cuda:0"]


def test_memory_figures_are_the_workers_allocator(on_standin):
    x = tw.tensor(np.ones(300_000, np.float32), device="cuda:0")  # 1.2 MB: a 20 MiB segment of the large pool
    dev = _device()
    assert dev["allocated_bytes"] >= x.numel() * 4 and dev["reserved_bytes"] >= 20 * MiB, dev
    assert tw.cuda.memory_reserved() == tw.cuda.memory_reserved("cuda:0") == dev["reserved_bytes"]
    assert tw.cuda.max_memory_allocated(0) == dev["peak_allocated_bytes"] >= dev["allocated_bytes"]
    assert tw.cuda.max_memory_reserved(tw.device("cuda:0")) == dev["peak_reserved_bytes"] >= dev["reserved_bytes"]
    stats = tw.cuda.memory_stats()
    assert list(stats) == sorted(stats)
    assert stats["allocated_bytes.all.current"] == dev["allocated_bytes"]
    assert stats["allocated_bytes.all.peak"] == dev["peak_allocated_bytes"]
    assert stats["reserved_bytes.all.current"] == dev["reserved_bytes"]
    assert stats["reserved_bytes.all.peak"] == dev["peak_reserved_bytes"]
    assert stats["requested_bytes.all.current"] == dev["requested_bytes"]
    assert stats["segment.all.current"] == dev["segments"] >= 1
    assert stats["allocation.all.current"] == dev["buffers"] >= 1
    assert stats["num_device_alloc"] == dev["driver_allocs"]
    free, total = tw.cuda.mem_get_info()
    assert total == 1 << 30 and free == total - dev["reserved_bytes"]  # the stand-in's 1 GiB
    summary = tw.cuda.memory_summary()
    assert "cuda:0" in summary and "Allocated memory" in summary and "Reserved memory" in summary
    peak = dev["peak_allocated_bytes"]
    del x
    after = _device()
    assert after["allocated_bytes"] < dev["allocated_bytes"]
    assert tw.cuda.max_memory_allocated() == peak  # the peak stays
    assert tw.cuda.memory_reserved() == dev["reserved_bytes"]  # the freed block stays cached


def test_device_properties_and_capability(on_standin):
    p = tw.cuda.get_device_properties(0)
    assert (p.name, p.total_memory, p.major, p.minor) == ("Stand-in GPU (PoCL)", 1 << 30, 8, 0)
    assert tw.cuda.get_device_capability() == tw.cuda.get_device_capability("cuda:0") == (8, 0)
    assert "Stand-in GPU (PoCL)" in repr(p)
    with pytest.raises(ValueError, match="cuda:3 is not one of the cluster's devices"):
        tw.cuda.get_device_properties(3)


def test_the_generator_is_the_one_every_device_shares(on_standin):
    tw.manual_seed(7)
    assert tw.cuda.initial_seed() == tw.initial_seed() == 7
    state = tw.cuda.get_rng_state()
    assert bytes(state.numpy()) == bytes(tw.get_rng_state().numpy())
    assert [bytes(s.numpy()) for s in tw.cuda.get_rng_state_all()] == [bytes(state.numpy())]
    first = tw.rand(4).numpy()
    tw.cuda.set_rng_state(state)
    np.testing.assert_array_equal(tw.rand(4).numpy(), first)
    tw.cuda.set_rng_state_all([state])
    np.testing.assert_array_equal(tw.rand(4).numpy(), first)
    assert tw.cuda.seed_all() is None and tw.cuda.seed() is None  # (torch's return nothing)
    assert tw.cuda.initial_seed() == tw.initial_seed()  # a random seed, of the one generator


def test_init_and_ipc_collect(on_standin):
    assert not tw.cuda.is_initialized()
    tw.cuda.init()
    assert tw.cuda.is_initialized()
    assert tw.cuda.ipc_collect() is None


def test_init_is_the_sessions(on_standin, session):
    tw.cuda.init()
    with tw.use_session(session):  # the shared cluster's session: init never found cuda there
        assert not tw.cuda.is_initialized()
    assert tw.cuda.is_initialized()
