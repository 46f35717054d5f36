"""The MPS backend (mps:0, on MLX): the whole conformance suite, gradchecks, moves between devices, training,
device listing, float64's refusal on the GPU, and zero-copy downloads.

On Linux there is no Metal: these tests run the backend on MLX's CPU device with the test-only switch
``TENSORWIRE_MPS_ON_CPU=1`` (``pip install "mlx[cpu]"``), through the backend's own code (its MLX kernels, its
deferred checks and evaluation). They skip, with the reason, where MLX is not installed. The conformance suite runs
in full: 2417 cases in ~15 s on this 2-core host (the whole module ~20 s). Tests marked ``mps`` run on a Mac's Metal
GPU and skip with the reason elsewhere.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from tensorwire.backends import testing as T
from tensorwire.backends.mps import MPSBackend
from tensorwire.backends.mps import runtime as RT
from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DeviceError, DTypeError
from tests.backends import _device_checks as DC

mx = pytest.importorskip("mlx.core", reason=f"mlx is not installed: {RT.INSTALL}")

CASES = T.conformance_cases()
ON_CPU = {RT.ON_CPU_ENV: "1"}
#: the device-generic tests' record (``_device_checks``), on MLX's CPU device; a cluster with the switch off for its
#: worker refuses mps:0 where there is no Metal GPU
UNDER_TEST = DC.DeviceUnderTest(
    "mps:0", refusal=("no Metal GPU", {"collectives": False, "extra_env": {RT.ON_CPU_ENV: ""}}),
    refusal_skip="this host has a Metal GPU" if mx.metal.is_available() else None)


class TestOnTheDevice(DC.ClusterTests, DC.AcrossDevicesTests):
    """The device-generic tests (``_device_checks``) on :data:`UNDER_TEST`."""


@pytest.fixture(scope="module", autouse=True)
def mlx_cpu_device():
    """The test-only switch for this module's in-process backend (discovery re-read with it, and after it)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(RT.ON_CPU_ENV, "1")
        RT.discover(refresh=True)
        yield
    RT.discover(refresh=True)


BACKEND = MPSBackend()


# -- the conformance suite ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=str)
def test_conformance(case):
    T.check_case(BACKEND, case)


def test_every_primitive_is_an_mlx_kernel():
    from tensorwire.backends.mps import kernels as K

    device = BACKEND.open(0)
    assert isinstance(device, RT.MPSDevice) and not device.gpu
    assert not BACKEND.missing_primitives()
    assert all(BACKEND.kernels[op] is K.KERNELS[op] for op in K.KERNELS)
    assert BACKEND.native == frozenset()  # composites run through their decompositions


# -- discovery ------------------------------------------------------------------------------------------------------

@pytest.mark.skipif(mx.metal.is_available(), reason="this host has a Metal GPU")
def test_without_the_switch_mps_is_unavailable_with_the_reason(monkeypatch):
    monkeypatch.delenv(RT.ON_CPU_ENV)
    try:
        found = RT.discover(refresh=True)
        info, = MPSBackend().devices()
        assert not found.available and not info.available
        assert "no Metal GPU" in info.reason and RT.ON_CPU_ENV in info.reason
        with pytest.raises(DeviceError, match="mps:0 is not available: no Metal GPU"):
            MPSBackend().open(0)
    finally:
        monkeypatch.setenv(RT.ON_CPU_ENV, "1")
        RT.discover(refresh=True)


def test_without_mlx_the_plugin_loads_and_says_how_to_install(monkeypatch):
    import importlib

    import tensorwire.backends.mps as plugin

    monkeypatch.setitem(sys.modules, "mlx", None)  # import mlx fails
    monkeypatch.setitem(sys.modules, "mlx.core", None)
    try:
        importlib.reload(plugin)
        found = RT.discover(refresh=True)
        info, = plugin.MPSBackend().devices()
        assert not found.available and not info.available
        assert "mlx is not installed" in info.reason and 'pip install -e ".[mps]"' in info.reason
        with pytest.raises(DeviceError, match="mps:0 is not available: mlx is not installed"):
            plugin.MPSBackend().open(0)
    finally:
        monkeypatch.undo()
        monkeypatch.setenv(RT.ON_CPU_ENV, "1")
        importlib.reload(plugin)
        RT.discover(refresh=True)


def test_only_mps_0_exists():
    with pytest.raises(DeviceError, match="mps:1 does not exist; this host offers mps:0"):
        BACKEND.open(1)


# -- the device's pieces --------------------------------------------------------------------------------------------

def test_downloads_are_zero_copy_read_only_views():
    device = BACKEND.open(0)
    buf = device.upload(np.arange(12, dtype=np.float32).reshape(3, 4))
    a, b = device.download(buf), device.download(buf)
    assert np.shares_memory(a, b)  # both views of MLX's memory
    assert not a.flags.writeable and a.flags.c_contiguous
    np.testing.assert_array_equal(a, np.arange(12, dtype=np.float32).reshape(3, 4))
    bf = device.upload(np.array([1.5, -2.0], D.bfloat16.np))
    assert device.meta(bf) == ((2,), D.bfloat16) and device.download(bf).dtype == D.bfloat16.np


def test_memory_reports_mlx_active_and_cache():
    device = BACKEND.open(0)
    before = device.memory()
    assert {"active_bytes", "cache_bytes", "peak_bytes", "allocated_bytes"} <= set(before)
    big = device.upload(np.ones(1 << 20, np.float32))
    after = device.memory()
    assert after["active_bytes"] >= before["active_bytes"] + (1 << 22) - 4096
    del big


def test_the_gpu_refuses_float64_naming_the_op():
    """On the Metal GPU float64 is refused as PyTorch's MPS refuses it (checked here by flagging the device GPU)."""
    from tensorwire.backends import executor as X

    device = BACKEND.open(0)
    device.gpu = True
    with pytest.raises(DTypeError, match="upload: the MPS device has no float64"):
        device.upload(np.ones(3))
    plan = X.compile_plan(device, [["exp", [-1], None], ["exp", [-2], None]], [((3,), D.float64), ((3,), D.float32)])
    ext = [mx.array(np.ones(3), dtype=mx.float64), mx.ones(3)]
    res = X.run_plan(device, plan, ext, [10, 11], {}, [], set(plan.node_slot))
    assert isinstance(res[10], X.Fail) and res[10].err["code"] == DTypeError.code
    assert "exp: the MPS device has no float64" in res[10].err["message"]
    np.testing.assert_allclose(device.download(res[11]), np.e * np.ones(3), rtol=1e-6)  # the float32 node ran


def test_an_out_of_range_index_never_runs_the_gather():
    """MLX does not bound-check gathers: the check runs before the fragment's outputs are evaluated, so a bad index
    fails its node with IndexError (before this, a bad scatter corrupted the heap and the process aborted later)."""
    from tensorwire.backends import executor as X

    device = BACKEND.open(0)
    nodes = [["scatter", [-1, -2, -3], {"dim": 0}], ["add", [-3, -3], None]]
    metas = [((4,), D.float32), ((2,), D.int64), ((2,), D.float32)]
    plan = X.compile_plan(device, nodes, metas)
    for _ in range(50):
        ext = [mx.zeros(4), mx.array(np.array([1, 1 << 40], np.int64)), mx.ones(2)]
        res = X.run_plan(device, plan, ext, [1, 2], {}, [], set(plan.node_slot))
        assert isinstance(res[1], X.Fail) and "index 1099511627776 is out of bounds" in res[1].err["message"]
        np.testing.assert_array_equal(device.download(res[2]), [2.0, 2.0])


# -- a real cluster -------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster():
    """cpu:0 beside mps:0 on MLX's CPU device (tests/conftest.py's ``session`` connects to it)."""
    import tensorwire as tw

    with tw.LocalCluster(devices=["cpu:0", "mps:0"], collectives=False, extra_env=ON_CPU) as c:
        yield c


def test_listing_names_the_device(session, cluster):
    info = {d["device"]: d for d in session.device_info()}
    assert info["mps:0"]["available"] and info["mps:0"]["name"].startswith("MLX ")


def test_errors_stay_with_their_node_in_a_cluster(session):
    import tensorwire as tw

    x = tw.arange(4, device="mps:0")
    bad = x // tw.zeros(4, dtype=tw.int64, device="mps:0")
    good = (x * 3).sum()
    with pytest.raises(tw.TensorwireError, match="integer division by zero"):
        bad.numpy()
    assert good.item() == 18


# -- on a Mac: the Metal GPU ----------------------------------------------------------------------------------------

METAL = pytest.mark.skipif(not mx.metal.is_available(), reason="MLX has no Metal GPU here (macOS on Apple silicon)")
#: a sample of the conformance suite on the GPU (float64 cases are refused there, see the test above)
GPU_CASES = [c for c in CASES if "float64" not in c.name][::7]


@pytest.mark.mps
@METAL
@pytest.mark.parametrize("case", GPU_CASES, ids=str)
def test_conformance_on_the_metal_gpu(case):
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(RT.ON_CPU_ENV)
        RT.discover(refresh=True)
        try:
            T.check_case(MPSBackend(), case)
        finally:
            mp.setenv(RT.ON_CPU_ENV, "1")
            RT.discover(refresh=True)
