"""GPU lanes (``codegen/lanes.py``) on the CUDA or HIP stand-in, in a child process (PoCL runs the kernels' OpenCL
twins and must not share a process with hipRTC): ``python tests/backends/_lanes_child.py TARGET OUT.json``.

Each check runs fragments through the backend's host code (its own lowering, ``Options.lane_bytes``) and compares
with numpy in float64: contiguous chains at sizes around the lane count (the scalar tail), every 16-bit, integer
and bool dtype, slices at every offset within a vector, broadcasts, permutes, strided and padded views, sources
(arange, full). Each also says whether the kernels it made read or wrote any vector, so the test knows the vector
path ran where it should. Writes ``{check: "" or the failure}``.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from tensorwire.backends import executor as X  # noqa: E402
from tensorwire.backends.codegen.cuda import CUDARenderer  # noqa: E402
from tensorwire.backends.codegen.lower import lower  # noqa: E402
from tensorwire.backends.testing.cases import _compare, _Ref  # noqa: E402
from tensorwire.protocol import dtypes as D  # noqa: E402
from tests.backends._gpu_child import G, select  # noqa: E402

F32 = {"shape": [], "dtype": "float32"}
#: the benchmark's 8-op chain: (((x * 2 + 1).relu().exp().sin() * x) - 0.5).abs()
CHAIN = [["full", [], {**F32, "value": 2.0}], ["mul", [-1, 0], None], ["full", [], {**F32, "value": 1.0}],
         ["add", [1, 2], None], ["relu", [3], None], ["exp", [4], None], ["sin", [5], None], ["mul", [6, -1], None],
         ["full", [], {**F32, "value": 0.5}], ["sub", [7, 8], None], ["abs", [9], None]]


def _chain64(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return np.abs(np.sin(np.exp(np.maximum(x * 2 + 1, 0))) * x - 0.5)


def _run(dev, nodes: list, arrays: list) -> tuple[np.ndarray, int]:
    """The last node of fragment ``nodes`` on ``arrays`` (only it kept, so the rest fuses), and how many of the
    kernels made for it access memory as vectors."""
    plan = X.compile_plan(dev, nodes, [(a.shape, D.from_numpy(a.dtype)) for a in arrays])
    keep = {plan.node_slot[-1]}
    res = X.run_plan(dev, plan, [dev.upload(a) for a in arrays], list(range(len(nodes))), {}, [], keep)
    kernels = lower(plan.program.steps, keep, dev.lowering_options).kernels
    vec = sum("(*(const tw_" in (src := CUDARenderer().render([k])) or "*(tw_" in src for k in kernels)
    return dev.download(res[len(nodes) - 1]), vec


def _close(what: str, got: np.ndarray, want: np.ndarray) -> None:
    got = np.asarray(got)
    if not D.from_numpy(got.dtype).is_floating_point:
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    with np.errstate(all="ignore"):
        msg = _compare(got, _Ref(np.asarray(want, np.float64)), D.from_numpy(got.dtype))
    assert msg is None, f"{what}: {msg}"


def _odd_sizes(dev) -> None:
    """The chain at sizes below, at and around multiples of the lane count: the tail runs scalar, right."""
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 4, 5, 7, 8, 9, 31, 1023, 4097):
        x = (rng.standard_normal(n) * 0.5).astype(np.float32)
        x[: min(n, 2)] = [np.nan, -0.0][: min(n, 2)]
        got, vec = _run(dev, CHAIN, [x])
        _close(f"chain n={n}", got, _chain64(x))
        assert vec == 1, f"chain n={n}: no vector accesses"


def _dtypes(dev) -> None:
    """16-bit floats (8 lanes, 128-bit loads of their bits), float64 (2 lanes), integers and bools."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 37))
    for dt in (np.float16, np.float64, D.bfloat16.np):
        a = x.astype(dt)
        got, vec = _run(dev, [["exp", [-1], None], ["mul", [0, -1], None]], [a])
        a64 = a.astype(np.float64)
        _close(f"exp(x) * x in {np.dtype(dt).name}", got, np.exp(a64) * a64)
        assert vec == 1, dt
    i, j = (x * 50).astype(np.int32), (x * 30).astype(np.int8)
    got, vec = _run(dev, [["mul", [-1, -2], None], ["add", [0, -1], None]], [i, j])
    _close("int32 * int8 + int32", got, i * j.astype(np.int32) + i)
    b = np.full(x.shape, 0.1, np.float32)
    got, vec2 = _run(dev, [["lt", [-1, -2], None]], [x.astype(np.float32), b])
    _close("float32 < float32 (bool)", got, x.astype(np.float32) < b)
    got, vec3 = _run(dev, [["cast", [-1], {"dtype": "float16"}]], [x.astype(np.float32)])
    _close("float32 -> float16", got, x.astype(np.float32).astype(np.float16))
    assert vec and vec2 and vec3


def _offset_views(dev) -> None:
    """Slices at every start within a vector (only starts that are multiples of the chunk read vectors), with a
    contiguous operand that does read them: right at every offset, and at odd lengths."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal(300).astype(np.float32)
    for s in range(9):
        for n in (150, 157):
            y = rng.standard_normal(n).astype(np.float32)
            nodes = [["slice", [-1], {"starts": [s], "stops": [s + n], "steps": [1]}], ["sin", [0], None],
                     ["mul", [1, -2], None]]
            got, vec = _run(dev, nodes, [x, y])
            _close(f"sin(x[{s}:{s + n}]) * y", got, np.sin(x[s:s + n].astype(np.float64)) * y)
            assert vec == 1
    h = x.astype(np.float16)
    for s in (0, 3, 8):
        got, _ = _run(dev, [["slice", [-1], {"starts": [s], "stops": [s + 99], "steps": [1]}], ["neg", [0], None]],
                      [h])
        _close(f"-h[{s}:]", got, -h[s:s + 99].astype(np.float64))


def _broadcasts_and_views(dev) -> None:
    """Inputs read at other than the element's index: broadcasts of a row, a column and a 0-d scalar, a permute, a
    strided slice, a 2-D slice and a pad."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((6, 45)).astype(np.float32)
    row, col = rng.standard_normal(45).astype(np.float32), rng.standard_normal((6, 1)).astype(np.float32)
    s = np.array(1.5, np.float32)
    a64 = a.astype(np.float64)
    checks = [
        ([["add", [-1, -2], None], ["mul", [0, -3], None], ["sub", [1, -4], None]], [a, row, col, s],
         (a64 + row) * col - 1.5),
        ([["permute", [-1], {"dims": [1, 0]}], ["exp", [0], None], ["mul", [1, -2], None]], [a, a.T.copy()],
         np.exp(a64.T) * a64.T),
        ([["slice", [-1], {"starts": [1], "stops": [45], "steps": [2]}], ["sin", [0], None]], [a[0].copy()],
         np.sin(a64[0, 1::2])),
        ([["slice", [-1], {"starts": [1, 3], "stops": [5, 40], "steps": [1, 1]}], ["abs", [0], None]], [a],
         np.abs(a64[1:5, 3:40])),
        ([["pad", [-1], {"pads": [1, 2, 3, 0], "value": 0.5}], ["exp", [0], None]], [a],
         np.exp(np.pad(a64, ((1, 2), (3, 0)), constant_values=0.5))),
    ]
    for nodes, arrays, want in checks:
        got, _ = _run(dev, nodes, arrays)
        _close(str([n[0] for n in nodes]), got, want)


def _sources(dev) -> None:
    """Sources, whose lanes use the element index as a value: arange and full, at odd sizes."""
    for n in (5, 37, 1001):
        got, vec = _run(dev, [["arange", [], {"start": 0.5, "step": 0.25, "n": n, "dtype": "float32"}],
                              ["sin", [0], None]], [])
        _close(f"sin(arange({n}))", got, np.sin(0.5 + 0.25 * np.arange(n)))
        assert vec == 1
        got, _ = _run(dev, [["arange", [], {"start": 3, "step": 2, "n": n, "dtype": "int64"}]], [])
        _close(f"arange({n}) int64", got, 3 + 2 * np.arange(n))


CHECKS = [_odd_sizes, _dtypes, _offset_views, _broadcasts_and_views, _sources]


def main(argv: list[str]) -> int:
    select(argv[0])
    G.S.install(G.RT)
    dev = G.backend().open(0)
    assert dev.lowering_options.lane_bytes, "the backend's lowering has no lanes"
    out = {}
    for check in CHECKS:
        try:
            check(dev)
            out[check.__name__.lstrip("_")] = ""
        except Exception:  # noqa: BLE001 - reported per check
            out[check.__name__.lstrip("_")] = traceback.format_exc()[-3000:]
    with open(argv[1], "w") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
