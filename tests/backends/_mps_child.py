"""The parts of tests/backends/test_mps.py that run the MPS backend's Metal-kernel path on the stand-in, in a child.

The stand-in for ``mx.fast.metal_kernel`` (``_metal_standin.py``) runs kernels on PoCL, whose LLVM must not share a
process with hipRTC's (used by test_render_targets.py; see _opencl_child.py), so the pytest process runs

    TENSORWIRE_MPS_ON_CPU=1 python tests/backends/_mps_child.py COMMAND OUT.json

and checks the JSON this writes. Commands: ``conformance`` (a deterministic sample of the conformance suite, see
:func:`sample`), ``units`` (checks of the Metal path's pieces: fusion, kernel errors, the kernel cache, float64).
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from tensorwire.backends import executor as X  # noqa: E402
from tensorwire.backends import testing as T  # noqa: E402
from tensorwire.backends.mps import MPSBackend  # noqa: E402
from tensorwire.backends.mps import metal_runtime as MR  # noqa: E402
from tensorwire.backends.testing import suite as TS  # noqa: E402
from tensorwire.protocol import dtypes as D  # noqa: E402
from tests.backends import _metal_standin as S  # noqa: E402
from tests.backends._child_cases import kernel_lists, run_cases  # noqa: E402
from tests.backends._child_cases import sample as _sample  # noqa: E402
from tests.backends._child_process import checks_named, run_checks, serve  # noqa: E402

#: the Metal GPU refuses float64 tensors (as PyTorch's MPS): a case that needs them is "refused", not failed. A
#: kernel that needs float64 inside ("Metal has no float64: kernel ...") is a failure.
REFUSED = "the MPS device has no float64"


def sample(cases: list) -> list:
    """:func:`tests.backends._child_cases.sample` without the cases named float64 (the GPU refuses float64)."""
    return _sample(cases, float64=False)


def conformance() -> dict:
    """``{"cases": {name: [status, message, ran step by step, a failure was expected]}, "stats": ...}``."""
    metal = S.install(MR)
    backend = MPSBackend()
    cases = sample(T.conformance_cases())
    t0 = time.perf_counter()
    lists = kernel_lists(backend, cases)
    programs = metal.prebuild_twins(lists)
    stats = {
        "sampled": len(cases),
        "fragments": len(lists),
        "programs": programs,
        "prebuild_seconds": time.perf_counter() - t0,
    }
    dev = TS._device(backend, 0)
    t0 = time.perf_counter()
    out = run_cases(backend, cases, lambda e: "refused" if REFUSED in str(e) else "fail")
    stats.update(
        run_seconds=time.perf_counter() - t0,
        launches=metal.launches,
        built=metal.built,
        builds=dev.runtime.builds,
        metal=dev.metal,
        gpu=dev.gpu,
    )
    return {"cases": out, "stats": stats}


# -- checks of the Metal path's pieces ------------------------------------------------------------------------------


def _device():
    metal = S.install(MR)
    return metal, MPSBackend().open(0)


def _run(dev, nodes, inputs, last_only: bool = False):
    """Every node's result (or only the last one's, the others fused away)."""
    plan = X.compile_plan(dev, nodes, [(a.shape, D.from_numpy(a.dtype)) for a in inputs])
    keep = {plan.node_slot[-1]} if last_only else set(plan.node_slot)
    res = X.run_plan(dev, plan, [dev.upload(a) for a in inputs], list(range(len(nodes))), {}, [], keep)
    return [res.get(i) for i in range(len(nodes))]


def _a_chain_is_one_launch_and_matmul_an_mlx_op():
    metal, dev = _device()
    assert dev.metal and dev.gpu and isinstance(dev.runtime, MR.MetalKernels)
    rng = np.random.default_rng(0)
    a, b, w = (rng.standard_normal(s).astype(np.float32) for s in ((4, 3), (3,), (3, 5)))
    nodes = [["mul", [-1, -2], None], ["exp", [0], None], ["add", [1, -1], None], ["matmul", [2, -3], None]]
    launches = metal.launches
    out = _run(dev, nodes, [a, b, w], last_only=True)
    assert metal.launches == launches + 1, metal.launches - launches  # mul, exp, add: one kernel; matmul: MLX
    np.testing.assert_allclose(dev.download(out[3]), (np.exp(a * b) + a) @ w, rtol=1e-5)
    half = rng.standard_normal((6, 7)).astype(D.bfloat16.np)
    mask = rng.standard_normal((6, 7)) > 0
    (got,) = _run(dev, [["where", [-2, -1, -3], None]], [half, mask, np.zeros((), D.bfloat16.np)])
    want = np.where(mask, half, np.zeros((), D.bfloat16.np))
    assert dev.download(got).dtype == D.bfloat16.np and (dev.download(got) == want).all()


def _kernel_errors_are_raised_after_evaluation():
    from tensorwire.protocol.errors import IndexOutOfRange

    metal, dev = _device()
    x = np.arange(5, dtype=np.float32)
    nodes = [["index", [-1, -2], {"dim": 0}], ["mul", [-1, -1], None]]
    launches = metal.launches
    bad, ok = _run(dev, nodes, [x, np.array([0, 7], np.int64)])
    assert metal.launches > launches  # the fused run launched the kernel; its error slot failed the fragment
    assert isinstance(bad, X.Fail) and bad.err["code"] == IndexOutOfRange.code and "index 7" in bad.err["message"], bad
    np.testing.assert_array_equal(dev.download(ok), x * x)  # the independent node still ran
    (good, _) = _run(dev, nodes, [x, np.array([4, 1], np.int64)])
    assert dev.download(good).tolist() == [4.0, 1.0]
    zero = _run(dev, [["floor_divide", [-1, -2], None]], [np.arange(3), np.array([1, 0, 2])])[0]
    assert isinstance(zero, X.Fail) and "integer division by zero" in zero.err["message"], zero


def _kernels_are_built_once_per_source_and_buffers():
    metal, dev = _device()
    nodes = [["neg", [-1], None], ["abs", [0], None]]
    _run(dev, nodes, [np.arange(12, dtype=np.int32)])
    built = dev.runtime.builds
    for _ in range(3):
        _run(dev, nodes, [np.arange(12, dtype=np.int32)])
    assert dev.runtime.builds == built, "a kernel was built again"
    (out,) = _run(dev, [["logical_not", [-1], None]], [np.array([True, False, True])])[:1]
    assert dev.download(out).tolist() == [False, True, False]
    names = [n for n, k in metal.registry.items() if n.startswith("tw_") and n != "tw_kernel"]
    assert len(names) == len(set(names)) and metal.built == dev.runtime.builds, (metal.built, dev.runtime.builds)


def _float64_is_refused_naming_the_op():
    from tensorwire.protocol.errors import DTypeError

    metal, dev = _device()
    try:
        dev.upload(np.ones(3))
    except DTypeError as e:
        assert "upload: the MPS device has no float64" in str(e), str(e)
    else:
        raise AssertionError("a float64 upload was not refused")
    plan = X.compile_plan(dev, [["cast", [-1], {"dtype": "float64"}], ["exp", [-1], None]], [((3,), D.float32)])
    res = X.run_plan(dev, plan, [dev.upload(np.zeros(3, np.float32))], [10, 11], {}, [], set(plan.node_slot))
    assert isinstance(res[10], X.Fail) and "cast: the MPS device has no float64" in res[10].err["message"], res
    np.testing.assert_allclose(dev.download(res[11]), np.ones(3))  # the float32 node ran (as a Metal kernel)


UNITS = checks_named(_a_chain_is_one_launch_and_matmul_an_mlx_op, _kernel_errors_are_raised_after_evaluation,
                     _kernels_are_built_once_per_source_and_buffers, _float64_is_refused_naming_the_op)


def units() -> dict:
    return run_checks(UNITS)


#: command -> what it writes, from the command's arguments
COMMANDS = {"conformance": lambda args: conformance(), "units": lambda args: units()}


def main(argv: list[str]) -> int:
    if os.environ.get("TENSORWIRE_MPS_ON_CPU", "") in ("", "0"):
        raise SystemExit("run with TENSORWIRE_MPS_ON_CPU=1 (the stand-in runs on MLX's CPU device)")
    return serve(COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
