"""A device's name is cluster-wide, its index on its host is the worker's: ``tensorwire worker --device cuda:5
--local-index 1`` serves its host's second GPU as cuda:5 (issue 35: Slurm jobs and Kubernetes pods of several GPU
nodes number node k's devices after node k-1's; see client/slurm.py and the Helm chart's workers)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import tensorwire as tw

pytestmark = pytest.mark.own_cluster


@pytest.fixture(scope="module")
def cluster():
    with tw.LocalCluster(devices=["cpu:0"], autograd=False, collectives=False) as c:
        c.start_service("cpu:6", [sys.executable, "-m", "tensorwire.cli", "worker", "--device", "cpu:6",
                                  "--local-index", "1", "--dispatcher", c.service_address, "--threads", "1"])
        yield c


def test_a_worker_serves_its_hosts_device_under_the_cluster_wide_name(cluster):
    with tw.Session(cluster.address) as s:
        info = {d["device"]: d for d in s.device_info()}
        assert info["cpu:6"]["available"] and info["cpu:6"]["local_device"] == "cpu:1", info
        assert "local_device" not in info["cpu:0"], info
        x = tw.tensor(np.arange(6, dtype=np.float32), device="cpu:6", session=s)
        y = (x * 3).to("cpu:0") + 1
        np.testing.assert_array_equal(y.numpy(), np.arange(6) * 3 + 1)


def test_a_local_index_that_does_not_exist_is_named():
    r = subprocess.run([sys.executable, "-m", "tensorwire.cli", "worker", "--device", "cpu:6", "--local-index", "99",
                        "--dispatcher", "tcp://127.0.0.1:1"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "cpu:99 on this host does not exist" in r.stderr, r.stderr
