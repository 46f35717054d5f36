"""Shape-generic kernels (issues 31 and 37): a fragment's kernels take their sizes (the grid, a row's length, a
reduction's length) as parameters, so the same structure at another batch size renders the same source and reuses
the compiled kernel instead of compiling again.

On the CPU the kernels of a fragment are one C library, cached by its source: over 30 batch sizes an elementwise
chain with a softmax, an elementwise op with broadcasts and a row sum, whose row lengths change too, compile two
libraries each (the first size's with its row length written in, then the generic one), and one when only the batch
changes; every result matches numpy in float64. The GPU lowerings
(CUDA, OpenCL on a CPU driver with vector loops) render one source a kernel structure over the same sizes.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tensorwire.backends import executor as X
from tensorwire.backends.codegen.cuda import CUDARenderer
from tensorwire.backends.codegen.lower import lower
from tensorwire.backends.codegen.opencl import OpenCLRenderer
from tensorwire.backends.codegen.presets import GPU, OPENCL_CPU
from tensorwire.backends.cpu import CompiledBackend, compiled
from tensorwire.protocol import dtypes as D

F32 = D.float32
#: 30 batch sizes (rows), with a row length that changes too, and one that stays
BATCHES = [3 + 7 * i for i in range(30)]
VARYING = [(rows, 24 + 5 * (i % 6)) for i, rows in enumerate(BATCHES)]
FIXED = [(rows, 40) for rows in BATCHES]

#: (x * 2 + 1).tanh().softmax(-1): the chain is recomputed in the row kernel
CHAIN_SOFTMAX = ([["full", [], {"shape": [], "dtype": "float32", "value": 2.0}], ["mul", [-1, 0], None],
                  ["full", [], {"shape": [], "dtype": "float32", "value": 1.0}], ["add", [1, 2], None],
                  ["tanh", [3], None], ["softmax", [4], {"dim": -1}]], 1)
#: (x - m) * w + 3: a [rows, 1] column and a 0-d scalar broadcast over [rows, length], and an [rows, length] operand
BROADCAST = ([["sub", [-1, -2], None], ["mul", [0, -3], None],
              ["full", [], {"shape": [], "dtype": "float32", "value": 3.0}], ["add", [1, 2], None]], 3)
#: x.exp().sum(-1): a row reduction with its prologue, one work item a row
ROW_SUM = ([["exp", [-1], None], ["sum", [0], {"dims": [-1]}]], 1)


def _inputs(name: str, rows: int, length: int) -> list[np.ndarray]:
    rng = np.random.default_rng(rows * 1000 + length)
    x = rng.standard_normal((rows, length)).astype(np.float32)
    if name == "broadcast":
        return [x, rng.standard_normal((rows, 1)).astype(np.float32), rng.standard_normal((rows, length))
                .astype(np.float32)]
    return [x]


def _want(name: str, arrays: list[np.ndarray]) -> np.ndarray:
    a = [v.astype(np.float64) for v in arrays]
    if name == "chain_softmax":
        z = np.tanh(a[0] * 2 + 1)
        e = np.exp(z - z.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    if name == "broadcast":
        return (a[0] - a[1]) * a[2] + 3
    return np.exp(a[0]).sum(-1)


FRAGMENTS = {"chain_softmax": CHAIN_SOFTMAX, "broadcast": BROADCAST, "row_sum": ROW_SUM}
#: the fragments whose row length is a parameter where the lowering fuses rows (a broadcast's inner size is a
#: constant of its kernel: a model's width, not its batch)
ROW_GENERIC = {"chain_softmax", "row_sum"}


def _plan(dev, name: str, arrays: list[np.ndarray]):
    nodes, _ = FRAGMENTS[name]
    return X.compile_plan(dev, nodes, [(v.shape, F32) for v in arrays])


def _run(dev, name: str, rows: int, length: int) -> None:
    arrays = _inputs(name, rows, length)
    plan = _plan(dev, name, arrays)
    slots = list(range(100, 100 + len(plan.node_slot)))
    got = X.run_plan(dev, plan, arrays, slots, {}, [], {plan.node_slot[-1]})[slots[-1]]
    np.testing.assert_allclose(np.asarray(got, np.float64), _want(name, arrays), rtol=2e-5, atol=1e-6,
                               err_msg=f"{name} {rows}x{length}")


def _counting_device(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORWIRE_KERNEL_CACHE", str(tmp_path))
    base = compiled.runtime()
    rt = compiled.CRuntime(base.compiler, base.version)  # a cold cache of its own: every build is counted
    return rt, CompiledBackend(rt, min_work=0, large_runs=0).open(0)  # every fragment compiled before its first run


@pytest.mark.skipif(compiled.runtime() is None, reason=f"no C compiler: {compiled.why_not()}")
@pytest.mark.parametrize("name", sorted(FRAGMENTS))
def test_thirty_batch_sizes_compile_each_structure_twice_at_most(name, tmp_path, monkeypatch):
    """A fragment over 30 batch sizes and 6 row lengths. Its kernels are built first with the row length written
    in (a row's or a reduction's loop, a broadcast's divisor) and the grid a parameter; at the second row length,
    the generic library, which every later size reuses; the first size again finds its own. Every result is right
    to float32 rounding."""
    rt, dev = _counting_device(tmp_path, monkeypatch)
    _run(dev, name, *VARYING[0])
    (first,) = tmp_path.glob("c/*.c")
    assert "_items(0, s" in first.read_text()  # the grid is a parameter from the first size on (its items' bound)
    for rows, length in VARYING[1:]:
        _run(dev, name, rows, length)
    assert rt.cache.builds == 2, f"{name}: {rt.cache.builds} compiles over {len(VARYING)} sizes"
    (generic,) = [p for p in tmp_path.glob("c/*.c") if p != first]
    written_in = f" {VARYING[0][1]}ll"  # the first row length, as C writes a constant
    assert written_in in first.read_text() and written_in not in generic.read_text()
    _run(dev, name, *VARYING[0])
    assert rt.cache.builds == 2


@pytest.mark.skipif(compiled.runtime() is None, reason=f"no C compiler: {compiled.why_not()}")
@pytest.mark.parametrize("name", sorted(FRAGMENTS))
def test_a_batch_that_changes_under_a_fixed_row_length_compiles_once(name, tmp_path, monkeypatch):
    """Issue 37: only the batch changes (a layer norm, a bias over a model's width): the row length written in at
    the first size serves every batch size, so the structure compiles once."""
    rt, dev = _counting_device(tmp_path, monkeypatch)
    for rows, length in FIXED:
        _run(dev, name, rows, length)
    assert rt.cache.builds == 1, f"{name}: {rt.cache.builds} compiles over {len(FIXED)} batch sizes"


def _kernels(name: str, opts, rows: int, length: int) -> list:
    """The kernels of fragment ``name`` at one size, lowered with ``opts``."""
    plan = _plan(CompiledBackend(min_work=0, large_runs=0).open(0), name, _inputs(name, rows, length))
    return lower(plan.program.steps, {plan.node_slot[-1]}, opts).kernels


@pytest.mark.skipif(compiled.runtime() is None, reason=f"planning runs the compiled CPU backend: {compiled.why_not()}")
@pytest.mark.parametrize("name", sorted(FRAGMENTS))
@pytest.mark.parametrize("target", ["cuda", "opencl-cpu"])
def test_gpu_lowerings_render_one_source_a_kernel_structure(name, target):
    """Each kernel alone under one name, as a GPU runtime's kernel cache keys them: 30 sizes, one source a kernel
    (OpenCL's CPU lowering fuses no rows: there the softmax's broadcast kernels keep the row length)."""
    opts, renderer = (GPU, CUDARenderer()) if target == "cuda" else (OPENCL_CPU, OpenCLRenderer())
    sizes = VARYING if name in ROW_GENERIC and (opts.row_fusion or name == "row_sum") else FIXED
    sources = {renderer.render([dataclasses.replace(k, name="k")])
               for rows, length in sizes for k in _kernels(name, opts, rows, length)}
    kernels = len(_kernels(name, opts, *sizes[0]))
    assert len(sources) == kernels, f"{len(sources)} sources for {kernels} kernels over {len(sizes)} sizes"
