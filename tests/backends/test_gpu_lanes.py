"""GPU lanes (``codegen/lanes.py``: an elementwise thread computes 16 bytes of its output with 128-bit loads and
stores) through the CUDA and ROCm backends' host code on their stand-ins: results against numpy in float64 for odd
sizes (the scalar tail), every 16-bit, integer and bool dtype, slices at every offset within a vector, broadcasts,
permutes, strided and padded views and sources. The checks run in a child process (``_lanes_child.py``: PoCL runs
the kernels' OpenCL twins and must not share a process with hipRTC)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.backends._pocl import opencl_available

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "_lanes_child.py")
CHECKS = ["odd_sizes", "dtypes", "offset_views", "broadcasts_and_views", "sources"]



@pytest.fixture(scope="module", params=["cuda", "rocm"])
def results(request, tmp_path_factory):
    ok, why = opencl_available()
    if not ok:
        pytest.skip(f"the GPU stand-ins run kernels on OpenCL: {why}")
    out = tmp_path_factory.mktemp(request.param) / "lanes.json"
    r = subprocess.run([sys.executable, CHILD, request.param, str(out)], capture_output=True, text=True, timeout=600)
    if r.returncode != 0 or not out.exists():
        raise AssertionError(f"{CHILD} {request.param} exited with {r.returncode}:\n{r.stdout[-3000:]}\n"
                             f"{r.stderr[-5000:]}")
    return json.loads(out.read_text())


@pytest.mark.parametrize("check", CHECKS)
def test_lanes_on_the_standin(results, check):
    assert results[check] == "", results[check]
