"""The checks every device backend's tests make of its device in a cluster (test_cuda.py, test_rocm.py, test_mps.py,
test_opencl.py): moves to and from cpu:0, compute across devices, training as on cpu:0, and a cluster or
``tensorwire status --local`` naming an unavailable device's reason."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tensorwire.protocol import dtypes as D

#: every dtype a tensor moves between devices in
DTYPES = ["bool", "int8", "uint8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]


def assert_moves_between_cpu_and(device: str, dtype: str) -> None:
    """A ``dtype`` tensor moved from cpu:0 to ``device`` and back (and downloaded from there) is the same."""
    import tensorwire as tw

    a = (np.random.default_rng(0).standard_normal((3, 5)) * 4).astype(D.get(dtype).np)
    y = tw.tensor(a, device="cpu:0").to(device)
    assert str(y.device) == device
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
