"""CUDA graphs for replayed plans (``backends/gpu_graphs.py``) on the driver stand-in, whose capture follows the
driver's rules (``_gpu_standin.py``: work recorded by value, a wait or a strict-mode allocation during a capture
refused and the capture invalidated, a graph over an unloaded module refused at launch).

The checks run in a child (``_gpu_child.py graphs``: PoCL runs the kernels, see test_cuda.py): a plan replayed as a
graph gives the plain runner's bits and numpy's float64 values with one capture and no kernel launched from Python
after it, and the outputs it handed out stay intact; dynamic scalars (a replayed ``full``, ``rand``'s seed) are
launched between graph segments with each run's values; a plan that must read back mid-run falls back with the
driver's reason; kernel errors in a graph are read once a replay; another batch size captures its own graph; the
graph is destroyed with its plan; a plan whose replay would copy more than it saves runs without a graph; graphs
are on by default and ``TENSORWIRE_CUDA_GRAPHS=0`` turns them off. test_cuda.py trains a ``tw.compile``'d
step on a stand-in worker with graphs.
"""

from __future__ import annotations

import pytest

from tests.backends.test_cuda import OPENCL_OK, OPENCL_WHY, child

NAMES = ["graphs_replay_as_the_plain_runner", "dynamic_scalars_are_launched_between_segments",
         "a_host_read_mid_plan_falls_back", "kernel_errors_in_a_graph_are_read_once_a_replay",
         "dynamic_launches_keep_their_error_slots",
         "a_new_batch_size_captures_its_own_graph", "the_graph_goes_with_its_plan",
         "copies_larger_than_the_calls_saved_run_plain", "graphs_off_by_the_knob"]


@pytest.fixture(scope="module")
def checks(tmp_path_factory):
    if not OPENCL_OK:
        pytest.skip(f"the CUDA stand-in runs kernels on OpenCL: {OPENCL_WHY}")
    return child("graphs", tmp_path_factory.mktemp("cuda-graphs"))


@pytest.mark.parametrize("name", NAMES)
def test_graphs(checks, name):
    assert checks.get(name) == "", checks.get(name, f"{name} did not run")


def test_every_check_is_listed():
    from tests.backends import _gpu_child as C

    assert [fn.__name__[1:] for fn in C.GRAPH_CHECKS] == NAMES
