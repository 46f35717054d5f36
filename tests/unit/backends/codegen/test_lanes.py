"""GPU lanes in the kernel IR (``codegen/lanes.py``, ``Options.lane_bytes``): which loads become vectors, that the
CUDA and ROCm devices lower with them, and what NVRTC makes of the CUDA source (128-bit loads and stores).

The kernels run on the CUDA and HIP stand-ins in tests/backends/test_gpu_lanes.py (odd sizes, offset views,
broadcasts, every dtype); tests/backends/test_render_targets.py compiles every conformance fragment lowered with
lanes and checks each vector access aligned.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest

from tensorwire.backends import executor as X
from tensorwire.backends import gpu_runtime as GR
from tensorwire.backends.codegen import ir, presets
from tensorwire.backends.codegen.c import CRenderer
from tensorwire.backends.codegen.compiler_cuda import compile_ptx, nvrtc_unavailable
from tensorwire.backends.codegen.cuda import CUDARenderer
from tensorwire.backends.codegen.hip import HIPRenderer
from tensorwire.backends.codegen.lanes import chunk, element_lanes, lane_count, vector_offset, vector_stores
from tensorwire.backends.codegen.lower import lower
from tensorwire.backends.codegen.metal import MetalRenderer
from tensorwire.backends.codegen.opencl import OpenCLRenderer
from tensorwire.backends.cpu import CompiledBackend, compiled, make_backend
from tensorwire.protocol import dtypes as D

F32 = D.float32
I = ir.var("i", ir.INDEX, 0, 999)
BASE = ir.gid(250) * 4
NVRTC_WHY = nvrtc_unavailable()


def _loads(xs) -> list[ir.X]:
    seen, out = set(), []

    def walk(x):
        if id(x) in seen:
            return
        seen.add(id(x))
        if x.op == "load":
            out.append(x)
        for s in x.src:
            walk(s)
    for x in xs:
        walk(x)
    return out


def test_lane_counts_and_chunks():
    assert [lane_count(dt, 16) for dt in (F32, D.float16, D.bfloat16, D.float64, D.int64, D.bool_, D.int8)] == \
        [4, 8, 8, 2, 2, 8, 8]
    assert lane_count(F32, 8) == 2 and lane_count(D.float64, 4) == 1
    assert chunk(F32, 8, 16) == 4 and chunk(D.float16, 4, 16) == 4 and chunk(D.float64, 8, 16) == 2


def test_vector_offset_a_known_multiple_or_a_run_time_check():
    s = ir.var("s0", ir.INDEX)  # a dynamic slice start (a kernel scalar)
    assert vector_offset(I, "i", 4) is True and vector_offset(I + 8, "i", 4) is True
    assert vector_offset(I + 1, "i", 4) is False and vector_offset(I + 6, "i", 4) is False
    assert vector_offset(I + 6, "i", 2) is True
    assert vector_offset(I + s, "i", 4) == ir.alu("eq", D.bool_, ir.imod(s, 4), ir.iconst(0))
    assert vector_offset(I * 2, "i", 4) is False and vector_offset(I % 7, "i", 4) is False


def test_contiguous_aligned_loads_become_vectors_the_rest_stay_scalar():
    s = ir.var("s0", ir.INDEX)
    ld = {name: ir.load(name, idx, F32) for name, idx in
          (("a", I), ("b", I + 1), ("c", I % 7), ("d", I + 4), ("e", I + s), ("f", ir.iconst(3)))}
    x = ir.alu("add", F32, ir.alu("mul", F32, ld["a"], ld["b"]), ir.alu("sub", F32, ld["c"], ld["d"]))
    x = ir.alu("add", F32, x, ir.alu("mul", F32, ld["e"], ld["f"]))
    lanes, guards = element_lanes(x, "i", BASE, 4, 16)
    assert len(lanes) == 4
    assert guards == [ir.alu("eq", D.bool_, ir.imod(s, 4), ir.iconst(0))]  # e's offset: checked at run time
    loads = _loads(lanes)
    vec = {(x.arg, x.width) for x in loads if x.width > 1}
    assert vec == {("a", 4), ("d", 4), ("e", 4)}, vec
    assert sum(1 for x in loads if x.arg == "a") == 1  # one vector load, its four lanes read from it
    scalar: dict = {}
    for x in loads:
        if x.width == 1:
            scalar[x.arg] = scalar.get(x.arg, 0) + 1
    assert scalar == {"b": 4, "c": 4, "f": 1}, scalar  # f[3] read once: it does not depend on i
    # 8 lanes of float32: two chunks of 4, lanes 0-3 from the first, 4-7 from the second
    base = ir.gid(125) * 8
    lanes, guards = element_lanes(ld["a"], "i", base, 8, 16)
    assert guards == []
    assert all(x.op == "lane" for x in lanes) and [x.arg for x in lanes] == [0, 1, 2, 3] * 2
    assert [x.src[0].src[0] for x in lanes[::4]] == [base, base + 4]


def test_stores_are_vectors_of_at_most_the_access_width():
    vals = [ir.const(float(j), F32) for j in range(8)]
    st = vector_stores("b0", F32, ir.gid(4) * 8, vals, 16)
    assert [(s.value.op, s.value.width) for s in st] == [("pack", 4), ("pack", 4)]
    assert [repr(s.idx) for s in st][1].endswith("4))")
    st = vector_stores("b0", D.float64, ir.gid(4) * 2, vals[:2], 16)
    assert len(st) == 1 and st[0].value.width == 2


def _plan(nodes, metas):
    dev = (CompiledBackend(min_work=0, large_runs=0) if compiled.runtime() is not None else make_backend()).open(0)
    return X.compile_plan(dev, nodes, metas)


F32S = {"shape": [], "dtype": "float32"}
#: the benchmark's 8-op chain: (((x * 2 + 1).relu().exp().sin() * x) - 0.5).abs()
CHAIN = [["full", [], {**F32S, "value": 2.0}], ["mul", [-1, 0], None], ["full", [], {**F32S, "value": 1.0}],
         ["add", [1, 2], None], ["relu", [3], None], ["exp", [4], None], ["sin", [5], None], ["mul", [6, -1], None],
         ["full", [], {**F32S, "value": 0.5}], ["sub", [7, 8], None], ["abs", [9], None]]


def _chain_kernels(n: int, dtype=F32, opts=None) -> list[ir.Kernel]:
    nodes = CHAIN if dtype is F32 else [[op, ins, dict(a, dtype=dtype.name) if a else a] for op, ins, a in CHAIN]
    plan = _plan(nodes, [((n,), dtype)])
    return lower(plan.program.steps, {plan.node_slot[-1]}, opts or GR.LOWERING_BLAS).kernels


def test_cuda_and_rocm_devices_lower_with_lanes_and_nothing_else_does():
    from tensorwire.backends.cuda import runtime as CRT
    from tensorwire.backends.opencl import runtime as ORT
    from tensorwire.backends.rocm import runtime as RRT

    for opts in (GR.LOWERING_BLAS, GR.LOWERING_KERNELS, CRT.LOWERING, CRT.LOWERING_KERNELS, RRT.LOWERING,
                 RRT.LOWERING_KERNELS):
        assert opts.lane_bytes == 16 and opts.vector == 0, opts
    for opts in (presets.GPU, presets.GPU_BLAS, presets.METAL_MLX, presets.OPENCL_CPU, ORT.LOWERING_GPU):
        assert opts.lane_bytes == 0, opts


def test_the_chain_on_cuda_reads_and_writes_float4():
    (k,) = _chain_kernels(1 << 20)
    src = CUDARenderer().render([k])
    assert "struct __attribute__((aligned(16))) tw_floatx4 { float v[4]; };" in src
    assert "(*(const tw_floatx4*)(b1 + v0))" in src and "*(tw_floatx4*)(b0 + v0) = " in src, src
    assert src.count("sinf(") == 5 and "for (long long i = v0; i < s" in src  # 4 lanes and the scalar tail
    assert k.grid == 1 << 18


def test_one_source_at_every_size():
    """The lanes' source does not depend on the size (the item count and the tail's bound are parameters)."""
    srcs = {CUDARenderer().render([dataclasses.replace(k, name="k")]) for n in (5, 1000, 1001, 4099)
            for k in _chain_kernels(n)}
    assert len(srcs) == 1


def test_elements_that_need_statements_keep_one_item_each():
    plan = _plan([["floor_divide", [-1, -2], None]], [((100,), D.int32), ((100,), D.int32)])
    (k,) = lower(plan.program.steps, {plan.node_slot[-1]}, GR.LOWERING_BLAS).kernels
    assert k.grid == 100 and "tw_int" not in CUDARenderer().render([k])


def test_opencl_renders_lanes_for_the_standins():
    """The CUDA and HIP stand-ins run each kernel's OpenCL twin: memory vectors as vloadN/vstoreN of the storage
    type (16-bit floats as ushortN), lanes as .sN."""
    (k,) = _chain_kernels(1000, D.float16)
    src = OpenCLRenderer().render([k])
    assert "const ushort8 v3 = vload8(0, b1 + v0);" in src and "tw_f16_to_f32(v3.s7)" in src, src
    assert "((ushort8)(tw_f32_to_f16(" in src and "vstore8(" in src


def test_targets_without_memory_vectors_refuse_lanes():
    (k,) = _chain_kernels(1000)
    for r in (CRenderer(), MetalRenderer()):
        with pytest.raises(NotImplementedError, match="no vector"):
            r.render([k])
    assert "tw_floatx4" in HIPRenderer().render([k])


@pytest.mark.skipif(NVRTC_WHY is not None, reason=str(NVRTC_WHY))
@pytest.mark.parametrize("dtype, load, store", [
    (F32, "ld.global.nc.v4.f32", "st.global.v4.f32"),
    (D.float16, "ld.global.nc.v4.u32", "st.global.v4.u32"),
    (D.float64, "ld.global.nc.v2.f64", "st.global.v2.f64"),
])
def test_nvrtc_makes_128_bit_accesses(dtype, load, store):
    """What the CUDA device's lowering of the chain compiles to: one 128-bit load and one 128-bit store a thread
    (the scalar ones left are the tail's, and sinf's table for huge arguments)."""
    ks = _chain_kernels(1 << 16, dtype)
    ptx = compile_ptx(CUDARenderer().render(ks), "compute_90").decode(errors="replace")
    mem = [ln.split()[0] for ln in ptx.splitlines() if "ld.global" in ln or "st.global" in ln]
    assert load in mem and store in mem, mem


def test_a_slice_start_that_is_a_parameter_is_checked_at_run_time():
    """A slice's start is a kernel parameter (a replay may move it): its vector loads run where this run's start is
    a multiple of the chunk, every item's elements in the scalar loop where it is not."""
    plan = _plan([["slice", [-1], {"starts": [4], "stops": [1004], "steps": [1]}], ["sin", [0], None]],
                 [((1010,), F32)])
    (k,) = lower(plan.program.steps, {plan.node_slot[-1]}, GR.LOWERING_BLAS).kernels
    (cond,) = [s.cond for s in k.body if isinstance(s, ir.If)]
    start = [s.name for s in k.scalars if s.dtype is ir.INDEX][0]
    assert ir.alu("eq", D.bool_, ir.imod(ir.var(start, ir.INDEX), 4), ir.iconst(0)) in cond.src, cond
    src = CUDARenderer().render([k])
    assert f"({start} % 4ll)" in src and "(*(const tw_floatx4*)" in src and " ? " in src  # the loop's min(...)


@pytest.mark.parametrize(("value", "expect"), [("0", "0"), ("8", "8"), ("", "16"), ("3", "ConfigurationError"),
                                               ("x", "ConfigurationError")])
def test_the_lane_width_is_a_setting(value, expect):
    """``TENSORWIRE_GPU_LANE_BYTES`` sets the CUDA and ROCm lowering's lane width (0: one element a thread, the way
    back should a driver disagree); anything else is refused at start-up, naming the setting."""
    code = ("from tensorwire.backends import gpu_runtime as g\n"
            "assert g.LOWERING_BLAS.lane_bytes == g.LOWERING_KERNELS.lane_bytes\n"
            "print(g.LOWERING_BLAS.lane_bytes)")
    env = {**os.environ, GR.LANE_ENV: value}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert expect in (r.stdout + r.stderr), r.stdout + r.stderr
    if expect == "ConfigurationError":
        assert GR.LANE_ENV in r.stderr
