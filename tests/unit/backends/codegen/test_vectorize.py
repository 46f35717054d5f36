"""Vector loops in the kernel IR (``codegen/vectorize.py``, ``Options.vector``): which expressions get a vector
form, how the lowering uses it, and that only targets with vector types ever see one.

No driver is loaded here: the kernels run on PoCL in test_opencl.py (``test_vector_loops``,
``test_conformance_with_vectors``) and under Oclgrind there.
"""

from __future__ import annotations

import pytest

from tensorwire.backends import executor as X
from tensorwire.backends.codegen import ir
from tensorwire.backends.codegen.c import CRenderer
from tensorwire.backends.codegen.cuda import CUDARenderer
from tensorwire.backends.codegen.hip import HIPRenderer
from tensorwire.backends.codegen.lower import lower
from tensorwire.backends.codegen.metal import MetalRenderer
from tensorwire.backends.codegen.opencl import OpenCLRenderer
from tensorwire.backends.codegen.schedule import Options
from tensorwire.backends.codegen.vectorize import stride, vectorize
from tensorwire.backends.cpu import CompiledBackend, compiled, make_backend
from tensorwire.protocol import dtypes as D

F32 = D.float32
I = ir.var("i", ir.INDEX, 0, 999)
S = ir.var("s0", F32)  # a kernel scalar


def _vector_nodes(k: ir.Kernel) -> int:
    """How many expressions of ``k`` are vectors."""
    seen: set = set()

    def walk(x):
        if id(x) in seen:
            return 0
        seen.add(id(x))
        return (x.width > 1) + sum(walk(s) for s in x.src)

    def stmts(body):
        n = 0
        for s in body:
            for v in vars(s).values():
                if isinstance(v, ir.X):
                    n += walk(v)
                elif isinstance(v, list):
                    n += stmts(v)
        return n

    return stmts(k.body)


def test_stride_of_index_expressions():
    assert stride(I, "i") == 1
    assert stride(I * 3 + 7, "i") == 3
    assert stride(ir.var("gid", ir.INDEX, 0, 9) * 1000 + I, "i") == 1
    assert stride(ir.iconst(5), "i") == 0
    assert stride(I // 3, "i") is None
    assert stride(I % 7, "i") is None


def test_contiguous_float32_expressions_become_vectors():
    x = ir.load("b1", I + 3, F32)
    e = ir.alu("mul", F32, ir.alu("sin", F32, x), S)
    v = vectorize(e, "i", 8)
    assert v.width == 8 and v.op == "alu" and v.arg == "mul"
    assert v.src[0].src[0] == ir.load("b1", I + 3, F32, 8)  # the lane-0 index, 8 elements from there
    assert v.src[1] == ir.bcast(S, 8)  # the scalar stays scalar, broadcast where the vector op reads it
    relu = ir.where(ir.alu("lor", D.bool_, ir.fn("isnan", D.bool_, x), ir.alu("gt", D.bool_, x, S)), x, S)
    assert vectorize(relu, "i", 8).op == "where"  # NaN semantics kept: a select on isnan, no fmax
    assert vectorize(S, "i", 8) == ir.bcast(S, 8)


@pytest.mark.parametrize(
    "expr",
    [
        ir.load("b1", I * 2, F32),  # strided
        ir.load("b1", I % 7, F32),  # a broadcast that is not a scalar
        ir.load("b1", I, D.float16),  # 16-bit storage
        ir.cast(ir.load("b1", I, D.int32), F32),  # a cast
        ir.cast(I, F32),  # the index as a value (arange)
        ir.fn("fdiv_floor", F32, ir.load("b1", I, F32), S),  # a helper without a vector form
        ir.alu("add", D.float64, ir.load("b1", I, D.float64), ir.const(1.0, D.float64)),  # float64
    ],
    ids=["strided", "broadcast", "float16", "cast", "index", "helper", "float64"],
)
def test_what_has_no_vector_form(expr):
    assert vectorize(expr, "i", 8) is None


def _chain_plan():
    f32 = {"shape": [], "dtype": "float32"}
    nodes = [
        ["full", [], {**f32, "value": 2.0}],
        ["mul", [-1, 0], None],
        ["sin", [-1], None],
        ["sub", [1, 2], None],
        ["relu", [3], None],
        ["sum", [4], {"dims": None}],
    ]
    # the compiled CPU's plan (decomposed for fusion), however small the fragment
    dev = (CompiledBackend(min_work=0, large_runs=0) if compiled.runtime() is not None else make_backend()).open(0)
    return X.compile_plan(dev, nodes, [((100003,), F32)])


def test_the_lowering_uses_vectors_only_when_asked():
    plan = _chain_plan()
    keep = {plan.node_slot[-1]}
    scalar = lower(plan.program.steps, keep, Options())
    vec = lower(plan.program.steps, keep, Options(vector=16))
    assert [_vector_nodes(k) for k in scalar.kernels] == [0, 0]
    assert all(_vector_nodes(k) for k in vec.kernels)
    src = OpenCLRenderer().render(vec.kernels)
    assert "vload16(0, b1 + r)" in src and "sin(v" in src and "select(" in src and ".sf;" in src
    assert "fmax" not in src


def test_targets_without_vector_types_refuse_them():
    plan = _chain_plan()
    k = lower(plan.program.steps, {plan.node_slot[-1]}, Options(vector=8)).kernels[0]
    for renderer in (CRenderer(), CUDARenderer(), HIPRenderer(), MetalRenderer()):
        with pytest.raises(NotImplementedError, match="no vector types"):
            renderer.render([k])


def test_only_cpu_opencl_lowering_sets_vectors():
    from tensorwire.backends.opencl import runtime as RT

    assert RT.LOWERING.vector == 16 and RT.LOWERING_GPU.vector == 0
    assert make_backend().open(0).lowering_options.vector == 0  # C: gcc vectorises with libmvec
