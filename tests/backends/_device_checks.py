"""The tests every device backend's test module makes of its device (test_cuda.py, test_rocm.py, test_mps.py,
test_opencl.py), written once: moves to and from cpu:0, compute across devices, gradchecks, training as on cpu:0, the
conformance sample and the runtime checks its child process ran, and a cluster or ``tensorwire status --local``
naming an unavailable device's reason.

A device's test module says what differs in one :class:`DeviceUnderTest`, ``UNDER_TEST``, and runs the groups of
tests that apply in one class (``class TestOnTheDevice(DC.ClusterTests, DC.ChildTests): ...``):
tests/backends/conftest.py hands each test that record (the ``device_under_test`` fixture) and parametrises it by its
lists (dtypes, conformance cases, runtime checks). Where a test needs the device's cluster (``session``) or child
process (``conformance``, ``units``), it uses the module's fixtures of those names, which skip with the module's
reason where the device (or its stand-in) cannot run. The ``assert_*`` helpers serve the tests that differ by device.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest

from tensorwire.protocol import dtypes as D
from tests.backends._child_cases import assert_case_passed
from tests.backends._gradcheck import GRADCHECK_OPS, gradcheck_on

#: every dtype a tensor moves between devices in
DTYPES = ("bool", "int8", "uint8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64")


@dataclasses.dataclass(frozen=True)
class DeviceUnderTest:
    """What a device's test module tells the shared tests about its device."""

    #: the device, e.g. ``cuda:0``
    device: str
    #: the dtypes ``test_moves_between_cpu_and_the_device`` moves
    move_dtypes: tuple[str, ...] = DTYPES
    #: the ops ``test_gradcheck`` checks (tests/autograd/test_ops_gradcheck.py's names)
    gradchecks: tuple[str, ...] = tuple(GRADCHECK_OPS)
    #: the conformance cases the module's ``conformance`` child ran (``test_conformance``)
    conformance: tuple = ()
    #: the checks the module's ``units`` child ran (``test_runtime``)
    runtime_checks: tuple[str, ...] = ()
    #: discovery's record of this host's device (``test_status_local_lists_the_device``), None where not asked
    found: object = None
    #: ``(reason, LocalCluster settings)``: a cluster asked for the device with those settings refuses it, giving
    #: that reason (``test_a_cluster_asked_for_it_fails_at_once_with_the_reason``)
    refusal: tuple[str, dict] | None = None
    #: why that cannot be shown here (the device is available), None where it can
    refusal_skip: str | None = None

    def parameters(self) -> dict[str, tuple[tuple, object]]:
        """The shared tests' parameters: ``{argument: (values, ids)}``."""
        return {"move_dtype": (self.move_dtypes, None), "conformance_case": (self.conformance, str),
                "runtime_check": (self.runtime_checks, None)}


# -- the shared tests ---------------------------------------------------------------------------------------------

class ClusterTests:
    """Every device's: moves to and from cpu:0, gradchecks and training in the module's cluster (``session``), and a
    cluster refusing the device where it is not available."""

    def test_moves_between_cpu_and_the_device(self, session, device_under_test, move_dtype):
        assert_moves_between_cpu_and(device_under_test.device, move_dtype)

    def test_gradcheck(self, session, device_under_test):
        """A representative set of tests/autograd/test_ops_gradcheck.py's checks on the device (float64)."""
        gradcheck_on(session, device_under_test.device, list(device_under_test.gradchecks))

    def test_digits_mlp_trains_the_same(self, session, device_under_test):
        """A few Adam steps of the digits MLP give the same losses on the device as on cpu:0 (float32, within
        1e-4)."""
        assert_digits_train_as_on_cpu(device_under_test.device, rtol=1e-4)

    def test_a_cluster_asked_for_it_fails_at_once_with_the_reason(self, device_under_test):
        if device_under_test.refusal_skip:
            pytest.skip(device_under_test.refusal_skip)
        reason, settings = device_under_test.refusal
        assert_cluster_refuses(device_under_test.device, reason, **settings)


class AcrossDevicesTests:
    """Work moved between cpu:0 and the device in one program (MPS, OpenCL)."""

    def test_compute_across_devices(self, session, device_under_test):
        assert_computes_across_devices(device_under_test.device)


class ChildTests:
    """What the module's child process (which loads the driver or the stand-in) ran: the conformance sample
    (``conformance``) and the runtime's pieces (``units``)."""

    def test_conformance(self, conformance, conformance_case):
        """Every sampled case passes through the backend's host code, as fused kernels (step by step only where a
        node is meant to fail)."""
        assert_case_passed(conformance["cases"], conformance_case.name)

    def test_runtime(self, units, runtime_check):
        assert units[runtime_check] == "", units[runtime_check]


class RealGPUTests:
    """A GPU backend's device on this host for real: ``tensorwire status --local`` lists it, and on a real GPU
    (``gpu_session``) training and gradchecks give the CPU's results."""

    def test_status_local_lists_the_device(self, device_under_test):
        assert_status_local_lists(device_under_test.device, device_under_test.found)

    @pytest.mark.gpu
    def test_digits_mlp_trains_the_same_on_a_gpu(self, gpu_session, device_under_test):
        assert_digits_train_as_on_cpu(device_under_test.device, rtol=1e-3)

    @pytest.mark.gpu
    def test_gradcheck_on_a_gpu(self, gpu_session, device_under_test):
        gradcheck_on(gpu_session, device_under_test.device, GRADCHECK_OPS)


# -- the checks the tests that differ by device share -----------------------------------------------------------------


def assert_moves_between_cpu_and(device: str, dtype: str) -> None:
    """A ``dtype`` tensor moved from cpu:0 to ``device`` and back (and downloaded from there) is the same."""
    import tensorwire as tw

    a = (np.random.default_rng(0).standard_normal((3, 5)) * 4).astype(D.get(dtype).np)
    y = tw.tensor(a, device="cpu:0").to(device)
    assert y.device == device
    np.testing.assert_array_equal(y.to("cpu:0").numpy(), a)
    np.testing.assert_array_equal(y.numpy(), a)


def assert_computes_across_devices(device: str) -> None:
    """Work moved to ``device``, computed there and moved back gives numpy's values; mixing the devices in one op is a
    DeviceError."""
    import tensorwire as tw

    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = tw.tensor(a, device="cpu:0")
    y = (x.to(device) * 2 + 1).sum(0)  # on the device
    z = (y.to("cpu:0") - 1).softmax(0)  # back on cpu:0
    want = np.exp((a * 2 + 1).sum(0) - 1)
    np.testing.assert_allclose(z.numpy(), want / want.sum(), rtol=1e-5)
    with pytest.raises(tw.DeviceError):
        (x + y).numpy()


def assert_digits_train_as_on_cpu(device: str, rtol: float) -> None:
    """A few Adam steps of the digits MLP give the same losses on ``device`` as on cpu:0 (within ``rtol``)."""
    from tests.backends._digits import adam_losses as losses

    cpu, there = losses("cpu:0"), losses(device)
    assert cpu[-1] < cpu[0]
    np.testing.assert_allclose(there, cpu, rtol=rtol)


def assert_cluster_refuses(device: str, reason: str, **settings) -> None:
    """A local cluster asked for the unavailable ``device`` (with ``settings``) fails at once (issue 34) with a
    DeviceError that gives ``reason`` and the devices that are there."""
    import tensorwire as tw

    with pytest.raises(tw.TensorwireError) as e:
        tw.LocalCluster(devices=[device], autograd=False, **settings)
    msg = str(e.value)
    assert isinstance(e.value, tw.DeviceError) and "; available devices: cpu:0" in msg, msg
    assert f"{device} is not available: {reason}" in msg, msg


def assert_status_local_lists(device: str, found) -> None:
    """``tensorwire status --local`` lists ``device`` as discovery ``found`` it: available with its name, or not
    available with the reason."""
    r = subprocess.run([sys.executable, "-m", "tensorwire.cli", "status", "--local"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith(device))
    if found.available:
        assert "available" in line and found.name[:20] in line, line
    else:
        assert "not available" in line and found.reason[:40] in line, r.stdout


def stats_with_a_small_tensor(device: str, total_bytes: int) -> dict:
    """``device``'s memory statistics while a 1000-float tensor lives there (it is dropped on return): allocated bytes
    (at least its block), reserved at least as many, ``total_bytes`` in all."""
    import tensorwire as tw

    x = tw.ones((1000,), device=device) * 2
    x.numpy()
    dev = tw.memory_stats()["devices"][device]
    assert dev["allocated_bytes"] >= 4096 and dev["reserved_bytes"] >= dev["allocated_bytes"], dev
    assert dev["total_bytes"] == total_bytes, dev
    return dev


def assert_out_of_memory_leaves_the_worker_serving(device: str, total_bytes: int, match: str | None = None) -> None:
    """A tensor larger than ``device``'s ``total_bytes`` fails with OutOfMemory (its message matching ``match``), and
    the worker goes on serving."""
    import tensorwire as tw

    huge = tw.zeros((total_bytes // 4 + 1,), device=device)
    with pytest.raises(tw.OutOfMemory, match=match):
        huge.numpy()
    assert tw.ones(3, device=device).sum().item() == 3.0
