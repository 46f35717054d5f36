"""The MPS backend's Metal-kernel path (fused chains through ``mx.fast.metal_kernel``) on a stand-in, without a Mac.

On a Metal GPU the backend lowers each fragment for a GPU, renders the kernels with ``mlx_source`` and launches them
through ``mx.fast.metal_kernel`` (``backends/mps/metal_runtime.py``). MLX's custom kernels need Metal, so here
``_metal_standin.py`` replaces the backend's one seam (``metal_runtime.load_metal_kernel``) and switches the device
on MLX's CPU onto that path. The stand-in checks every build and launch against MLX's conventions and runs each
kernel's OpenCL twin on PoCL (the same IR kernel, rendered for OpenCL); the Metal text itself is covered by the
golden tests (test_mps_metal.py) and compiled only on a Mac. Everything else is the backend's own code: lowering,
the kernel cache, bindings, MLX host steps, one ``mx.eval`` per fragment, error slots, float64's refusal.

On the stand-in (measured on this shared 2-core host with PoCL's cache empty: the module ~60 s, of which the
conformance sample ~25 s and the gradcheck ~18 s):

* a deterministic sample of the conformance suite (``_mps_child.sample``: ~270 of ~2450 cases; the whole suite
  through PoCL would cost minutes of the repository's 20-minute test budget), in a child process (PoCL must not
  share a process with hipRTC, see test_opencl.py);
* the path's pieces (``_mps_child.units``): fusion into one launch, matmul on MLX, kernel errors after evaluation,
  the kernel cache, float64 refused;
* a real cluster whose ``mps:0`` worker runs with the stand-in: a gradcheck (float32 on mps:0, as the GPU has no
  float64, against the float64 gradients cpu:0 checks numerically) and the digits training.

The real path is in tests marked ``mps`` (here and in test_mps.py, test_mps_metal.py), which skip with the reason
where MLX has no Metal GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tensorwire.backends import testing as T
from tensorwire.backends.mps import runtime as RT

mx = pytest.importorskip("mlx.core", reason=f"mlx is not installed: {RT.INSTALL}")

from tests.backends import _mps_child as C  # noqa: E402
from tests.backends._gradcheck32 import gradcheck_float32  # noqa: E402
from tests.backends._pocl import opencl_available  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "_mps_child.py")
STANDIN = os.path.join(HERE, "_metal_standin.py")
ON_CPU = {RT.ON_CPU_ENV: "1"}
SAMPLE = [c.name for c in C.sample(T.conformance_cases())]



OPENCL_OK, OPENCL_WHY = opencl_available()
NO_OPENCL = f"the Metal stand-in runs kernels on OpenCL: {OPENCL_WHY}"
needs_standin = pytest.mark.skipif(not OPENCL_OK, reason=NO_OPENCL)


def child(command: str, tmp_dir, timeout: float = 900) -> dict:
    out = os.path.join(str(tmp_dir), f"{command}.json")
    r = subprocess.run(
        [sys.executable, CHILD, command, out],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **ON_CPU},
    )
    if r.returncode != 0 or not os.path.exists(out):
        raise AssertionError(f"{CHILD} {command} exited with {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}")
    with open(out) as f:
        return json.load(f)


# -- the conformance sample and the path's pieces, in a child -------------------------------------------------------


@pytest.fixture(scope="module")
def conformance(tmp_path_factory):
    if not OPENCL_OK:
        pytest.skip(NO_OPENCL)
    return child("conformance", tmp_path_factory.mktemp("mps"))


@needs_standin
@pytest.mark.parametrize("name", SAMPLE)
def test_conformance_sample_on_the_metal_standin(conformance, name):
    """The case passes through the Metal path, fused (step by step only where a node is meant to fail); a case that
    needs float64 tensors is refused with the GPU's DTypeError."""
    status, msg, stepwise, expects_failure = conformance["cases"][name]
    if status == "skip":
        pytest.skip(msg)
    if status == "refused":
        assert "DTypeError" in msg and "Metal GPUs do not support it" in msg, msg
        pytest.skip(f"float64 is refused on the Metal GPU: {msg}")
    assert status == "ok", msg
    assert not stepwise or expects_failure, f"{name} ran step by step although nothing was meant to fail"


@needs_standin
def test_the_sample_ran_on_metal_kernels(conformance):
    stats = conformance["stats"]
    assert stats["metal"] and stats["gpu"] and stats["sampled"] == len(SAMPLE) > 200, stats
    assert stats["launches"] > 300 and 0 < stats["builds"] <= stats["launches"], stats
    assert stats["built"] == stats["builds"], stats  # every kernel the runtime built went through the stand-in
    refused = [n for n, v in conformance["cases"].items() if v[0] == "refused"]
    assert len(refused) <= 5, refused  # only cases that make float64 tensors without saying so in their names


@pytest.fixture(scope="module")
def units(tmp_path_factory):
    if not OPENCL_OK:
        pytest.skip(NO_OPENCL)
    return child("units", tmp_path_factory.mktemp("mps"))


@needs_standin
@pytest.mark.parametrize("name", list(C.UNITS))
def test_metal_path_on_the_standin(units, name):
    assert units[name] == "", units[name]


# -- a real cluster, its mps:0 worker on the stand-in ---------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster():
    """cpu:0 and an mps:0 worker process on MLX's CPU that runs the Metal path on the stand-in."""
    import tensorwire as tw

    if not OPENCL_OK:
        pytest.skip(NO_OPENCL)
    with tw.LocalCluster(devices=["cpu:0"], collectives=False, extra_env=ON_CPU) as c:
        c.start_service(
            "mps:0",
            [
                sys.executable,
                STANDIN,
                "worker",
                "--device",
                "mps:0",
                "--dispatcher",
                c.service_address,
                "--threads",
                "1",
            ],
        )
        yield c


#: a sample of test_mps.py's gradcheck ops, one of each kind of kernel (elementwise, reductions, row kernels, index
#: ops, scans, matmul on MLX, the in-place scatters on MLX, views): PoCL pays ~0.1 s a program and ~15 ms a kernel at
#: its first launch, so test_mps.py's 36 ops took ~80 s here with PoCL's cache empty, these ~15 s
GRADCHECK_OPS = ["div", "amax", "softmax", "matmul", "gather", "index_put", "cat", "cumprod", "layer_norm"]


@needs_standin
def test_gradcheck_on_the_metal_standin(session, cluster):
    gradcheck_float32(session, "mps:0", GRADCHECK_OPS)


@needs_standin
def test_digits_mlp_trains_the_same_on_the_metal_standin(session, cluster):
    """A few Adam steps of the digits MLP give the same losses on mps:0 (Metal kernels) as on cpu:0."""
    from tests.backends._digits import adam_losses as losses

    cpu, mps = losses("cpu:0"), losses("mps:0")
    assert cpu[-1] < cpu[0]
    np.testing.assert_allclose(mps, cpu, rtol=1e-4)


@needs_standin
def test_kernel_errors_reach_the_client_from_the_standin(session, cluster):
    import tensorwire as tw

    x = tw.arange(4, dtype=tw.int64, device="mps:0")
    bad = x // tw.zeros(4, dtype=tw.int64, device="mps:0")
    good = (x * 3).sum()
    with pytest.raises(tw.TensorwireError, match="integer division by zero"):
        bad.numpy()
    assert good.item() == 18
