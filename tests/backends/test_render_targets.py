"""The GPU renderers (CUDA, HIP, Metal) on every kernel the conformance suite makes.

The kernels are collected by running :func:`tensorwire.backends.testing.conformance_cases` on the compiled
CPU backend with a recording runtime (the CPU still compiles and runs every fragment): each fragment's
kernels as the CPU lowers them, and the same steps lowered the way a GPU device lowers them (every op a
kernel, float32 accumulators, split reductions; CUDA and ROCm with their elementwise lanes). Each distinct fragment
is then

* rendered as CUDA and compiled by NVRTC to CUBIN for sm_80 and sm_90 (no GPU or driver needed);
* rendered as HIP and compiled for gfx90a (hipRTC, else clang; a second test checks the clang path);
* for CUDA and ROCm, every vector access (``codegen/lanes.py``) checked aligned to its width;
* rendered as Metal, which has no compiler on this platform: every fragment renders, or (float64) raises
  ``DTypeError`` naming its kernel, and a handful of kernels match the golden sources in ``golden/``.

Compiling one program per fragment costs a fixed NVRTC/hipRTC start-up each time, so fragments are batched
(:data:`BATCH` per program on average, cut by content: :func:`_batches`; kernels renamed ``f<j>_<name>``): about 5x
faster with NVRTC, 20x with hipRTC.
When a batch fails, its fragments are compiled one by one to name the failing ones. Set
``TENSORWIRE_UPDATE_GOLDEN=1`` to rewrite the golden files from the current renderer.

Sampled compiles (:func:`_covering`): every fragment renders (CUDA, HIP and Metal) on every run, but NVRTC and hipRTC
compile the distinct fragments whose source has a line of a shape no earlier fragment's had (names and numbers
aside: ``const float v# = tw_erf(b#[gid]);``), ~830 of ~3,250: every line shape the renderers write goes through
both compilers each run. An empty kernel cache (a fresh CI machine) compiled all of them in ~230 s on 2 cores under
load, the sample in a quarter of it. ``TENSORWIRE_FULL_CONFORMANCE=1`` compiles every distinct fragment (and every
one for sm_90).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import re
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tensorwire.backends import executor as X
from tensorwire.backends import testing as T
from tensorwire.backends.codegen import ir
from tensorwire.backends.codegen.cache import KernelCache, KernelCompileError
from tensorwire.backends.codegen.compiler_cuda import NVRTC_OPTIONS, compile_cubin, nvrtc_unavailable, nvrtc_version
from tensorwire.backends.codegen.compiler_hip import (
    HIP_OPTIONS,
    compile_hip,
    compiler_id,
    hip_compiler,
    hip_unavailable,
)
from tensorwire.backends.codegen.cuda import CUDARenderer
from tensorwire.backends.codegen.hip import HIPRenderer
from tensorwire.backends.codegen.lower import lower
from tensorwire.backends.codegen.metal import MetalRenderer
from tensorwire.backends.codegen.presets import GPU as LOWERING_GPU
from tensorwire.backends.cpu import CompiledBackend, CompiledDevice, NumpyBackend, compiled
from tensorwire.backends.gpu_runtime import LOWERING_KERNELS as LOWERING_CUDA
from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DTypeError
from tests._prebuild import prebuild_c_kernels
from tests.backends._child_cases import full_conformance

GOLDEN = Path(__file__).parent / "golden"
UPDATE_ENV = "TENSORWIRE_UPDATE_GOLDEN"
#: fragments per compiled program (measured on 2 cores: 100 is the fastest for NVRTC, near it for hipRTC)
BATCH = 100
#: how a GPU device lowers (every op a kernel, float32 accumulators, long reductions by work groups or split over
#: many, tiled matmul), and the same with tiny groups and tiles so that small cases take every work-group path
GPU_OPTIONS = LOWERING_GPU
GPU_SMALL_GROUPS = dataclasses.replace(LOWERING_GPU, **T.WORK_GROUPS)
#: how the CUDA and ROCm devices lower (as a GPU, with elementwise lanes: vector loads and stores), and with tiny groups
CUDA_OPTIONS = LOWERING_CUDA
CUDA_SMALL_GROUPS = dataclasses.replace(LOWERING_CUDA, **T.WORK_GROUPS)

NVRTC_WHY = nvrtc_unavailable()
HIP_WHY = hip_unavailable()


# -- collecting the kernels ------------------------------------------------------------------------------------------

class _RecordingRuntime:
    """The CPU runtime, noting the kernels of every fragment it builds."""

    def __init__(self, inner, sink: list):
        self.inner, self.sink = inner, sink

    def build(self, kernels):
        self.sink.append(list(kernels))
        return self.inner.build(kernels)

    def __getattr__(self, name):
        return getattr(self.inner, name)


class _RecordingDevice(CompiledDevice):
    """Also lowers each fragment as a GPU device would."""

    def runner(self, plan, keep):
        for plain, small, sink in ((GPU_OPTIONS, GPU_SMALL_GROUPS, self.backend.gpu_sink),
                                   (CUDA_OPTIONS, CUDA_SMALL_GROUPS, self.backend.cuda_sink)):
            for opts in (plain, small):
                try:
                    got = lower(plan.program.steps, set(keep), opts).kernels
                except Exception as e:  # noqa: BLE001 - reported by test_gpu_lowering_never_fails
                    self.backend.gpu_errors.append(f"{[s.op for s in plan.program.steps]}: {type(e).__name__}: {e}")
                    break
                if got and (opts is plain or any(k.local for k in got)):
                    sink.append(got)
        return super().runner(plan, keep)


class _RecordingBackend(CompiledBackend):
    def __init__(self, runtime, gpu_sink: list, cuda_sink: list):
        super().__init__(runtime, min_work=0, large_runs=0)  # every fragment compiled, however small
        self.gpu_sink, self.cuda_sink = gpu_sink, cuda_sink
        self.gpu_errors: list = []

    def open(self, index: int):
        super().open(index)
        return _RecordingDevice(self, index, self.runtime)


@pytest.fixture(scope="module")
def fragments():
    """``(kernel lists, GPU lowering errors, CUDA kernel lists)``: every fragment's kernels, CPU-lowered and
    GPU-lowered; the third the CPU-lowered ones and those lowered as the CUDA and ROCm devices do."""
    rt = compiled.runtime()
    if rt is None:
        pytest.skip(f"collecting the kernels runs the compiled CPU backend: {compiled.why_not()}")
    cpu: list = []
    gpu: list = []
    cuda: list = []
    backend = _RecordingBackend(_RecordingRuntime(rt, cpu), gpu, cuda)
    t0 = time.perf_counter()
    cases = T.conformance_cases()
    prebuild_c_kernels(cases)  # (tests/_prebuild.py: after test_cpu_compiled.py in a run, the cache has them all)
    failed = []
    for case in cases:
        try:
            T.check_case(backend, case)
        except (T.ConformanceError, T.CaseSkipped, pytest.skip.Exception) as e:  # judged by test_cpu_compiled.py
            failed.append(f"{case.name}: {str(e)[:200]}")
    stats = {"cases": len(cases), "cpu fragments": len(cpu), "gpu fragments": len(gpu), "not passing": len(failed),
             "seconds": round(time.perf_counter() - t0, 1)}
    print(f"\ncollected: {stats}")
    assert len(cpu) > 500 and len(gpu) > 500 and len(cuda) > 500, stats
    return cpu + gpu, backend.gpu_errors, cpu + cuda


def test_gpu_lowering_never_fails(fragments):
    _, errors, _ = fragments
    assert not errors, f"{len(errors)} fragments do not lower with GPU options; the first: {errors[0]}"


def _distinct(renderer, frags: list) -> list:
    """One fragment per distinct source."""
    return list(_by_source(renderer, frags).values())


def _by_source(renderer, frags: list) -> dict:
    """``{source: the first fragment rendered as it}``, in the fragments' order."""
    seen: dict = {}
    for f in frags:
        seen.setdefault(renderer.render(f), f)
    return seen


#: a number in a source (decimal, hex, float, with C's suffixes) and a name's numbered tail (``v12``, ``b3``, ``k0``)
_NUMBER = re.compile(r"\b(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)[fFuUlL]*\b")
_NUMBERED = re.compile(r"\b([A-Za-z_]+?)\d+\b")


def _line_shapes(source: str) -> set[str]:
    """The shapes of ``source``'s lines: each stripped line with its numbers as ``N`` and its names' numbers as ``#``
    (``const float v3 = tw_erf(b0[gid]);`` is ``const float v# = tw_erf(b#[gid]);``)."""
    return {_NUMBERED.sub(r"\1#", _NUMBER.sub("N", line.strip())) for line in source.splitlines() if line.strip()}


def _covering(renderer, frags: list) -> list:
    """The distinct fragments (in order) whose source has a line of a shape (:func:`_line_shapes`) that no earlier
    one's had: together they hold every line shape of every fragment's source, so each construct the renderer writes
    (a statement, an expression's spelling at its types, a helper call, a declaration) is compiled. All the distinct
    fragments under ``TENSORWIRE_FULL_CONFORMANCE=1`` (``_child_cases.FULL_ENV``)."""
    by_source = _by_source(renderer, frags)
    if full_conformance():
        return list(by_source.values())
    seen: set = set()
    out = []
    for source, f in by_source.items():
        shapes = _line_shapes(source)
        if not shapes <= seen:
            out.append(f)
            seen |= shapes
    return out


def _batches(renderer, frags: list, size: int = BATCH):
    """``(fragments, source)`` per batch: the fragments' kernels renamed apart (``f<j>_``, ``j`` its place in the
    batch), rendered as one program. The batches are cut by content, so that the kernel cache keeps serving them when
    the fragments change: the fragments go in the order of their source's hash, and a batch ends after a fragment
    whose hash is 0 modulo ``size`` (``size`` on average; at ``2 size`` at most). A fragment added or gone (a new op,
    or a plugin op an earlier test of the run registered) then changes its own batch only, where cutting the list
    every ``size`` fragments shifted every batch after it and compiled them all again. All in one batch when they
    are at most ``size``."""
    if len(frags) <= size:
        cuts = [frags]
    else:
        keyed = sorted(((hashlib.blake2b(renderer.render(f).encode(), digest_size=8).digest(), i) for i, f in
                        enumerate(frags)))
        cuts, part = [], []
        for digest, i in keyed:
            part.append(frags[i])
            if int.from_bytes(digest, "little") % size == 0 or len(part) >= 2 * size:
                cuts.append(part)
                part = []
        if part:
            cuts.append(part)
    for part in cuts:
        ks = [dataclasses.replace(k, name=f"f{j}_{k.name}") for j, f in enumerate(part) for k in f]
        yield part, renderer.render(ks)


def _through_cache(target: str, compiler: str, compile_source):
    """``compile_source`` (source -> binary) through the kernel cache, in a target folder of its own
    (``check-<target>``): a batch whose source compiled before with this compiler and these options is read back
    verified instead of compiled again, as the backends' own compiles are, so a warm run compiles what changed
    (~330 s of NVRTC and hipRTC on 2 cores when cold)."""
    cache = KernelCache(f"check-{target}", compiler)
    return lambda source: cache.get_or_build_bytes(source, ".src", ".bin",
                                                   lambda path: compile_source(Path(path).read_text()))


def _compile_all(renderer, frags: list, compile_one, every: int = 1) -> tuple[int, int, float]:
    """Compile distinct fragments (the sample :func:`_covering` chose; every ``every``-th of them) in batches;
    ``(fragments, kernels, seconds)``. A failing batch is split to name each failing fragment (its kernels'
    buffers, the compiler's log). The batches
    compile on one thread a core, as the GPU runtimes' own prebuilds do (``KernelModules.PARALLEL_COMPILE``; the
    kernel cache writes each entry atomically): hipRTC (through ctypes) and clang (a process) compile side by side
    with a cold cache; NVRTC through cuda-python was measured no faster (two compiles at once took twice one's
    time); a warm cache only reads."""
    frags = frags[::every]
    t0 = time.perf_counter()

    def batch(item) -> list[str]:
        part, source = item
        try:
            compile_one(source)
            return []
        except KernelCompileError:
            pass
        failures = []
        for f in part:
            try:
                compile_one(renderer.render(f))
            except KernelCompileError as e:
                what = "; ".join(f"{k.name}({', '.join(b.dtype.name for b in k.bufs)})" for k in f)
                failures.append(f"{what}: {str(e)[:1500]}\n--- source:\n{renderer.render(f)[-3000:]}")
        return failures

    with ThreadPoolExecutor(os.cpu_count() or 1, thread_name_prefix="render-targets") as ex:
        failures = [msg for found in ex.map(batch, _batches(renderer, frags)) for msg in found]
    assert not failures, f"{len(failures)} fragments do not compile; the first:\n{failures[0]}"
    return len(frags), sum(len(f) for f in frags), time.perf_counter() - t0


# -- CUDA -------------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cuda_sample(fragments) -> list:
    """The CUDA renderings' sample (:func:`_covering`), chosen once for both archs."""
    return _covering(CUDARenderer(), fragments[2])


@pytest.mark.skipif(NVRTC_WHY is not None, reason=str(NVRTC_WHY))
@pytest.mark.parametrize("arch, every", [("sm_80", 1), ("sm_90", 1 if full_conformance() else 4)])
def test_cuda_compiles_every_line_shape(cuda_sample, arch, every):
    """The fragments that cover every line shape (:func:`_covering`; every distinct fragment under
    ``TENSORWIRE_FULL_CONFORMANCE=1``) for sm_80; for sm_90 (the same sources, another target) every 4th of them,
    which keeps the suite in its time budget."""
    cubin_of = _through_cache("cuda", f"{arch} nvrtc {nvrtc_version()} {' '.join(NVRTC_OPTIONS)}",
                              lambda source: compile_cubin(source, arch))

    def build(source):
        cubin = cubin_of(source)
        assert cubin[:4] == b"\x7fELF"
    n, k, dt = _compile_all(CUDARenderer(), cuda_sample, build, every)
    print(f"\nCUDA {arch} (NVRTC {nvrtc_version()}): {n} fragments, {k} kernels, {dt:.1f} s")


@pytest.mark.skipif(NVRTC_WHY is not None, reason=str(NVRTC_WHY))
def test_nvrtc_error_names_the_problem():
    bad = 'extern "C" __global__ void k(float* b0) { b0[0] = undefined_thing; }'
    with pytest.raises(KernelCompileError, match="undefined_thing") as e:
        compile_cubin(bad, "sm_80")
    assert "sm_80" in str(e.value)


def _vector_accesses(k: ir.Kernel) -> list[tuple[str, ir.X, int, list]]:
    """``(buffer, index, width, the conditions of the ifs around it)`` of every vector load and store of ``k`` (the
    memory vectors of ``codegen/lanes.py``)."""
    out = []

    def walk(x, conds, seen):
        if id(x) in seen:
            return
        seen.add(id(x))
        if x.op == "load" and x.width > 1:
            out.append((x.arg, x.src[0], x.width, conds))
        for s in x.src:
            walk(s, conds, seen)

    def stmts(body, conds):
        seen: set = set()
        for st in body:
            if isinstance(st, ir.Store) and st.value.width > 1:
                out.append((st.buf, st.idx, st.value.width, conds))
            if isinstance(st, ir.If):
                stmts(st.body, [*conds, st.cond])
                stmts(st.orelse, [*conds, ir.alu("lnot", D.bool_, st.cond)])
                continue
            for v in vars(st).values():
                if isinstance(v, ir.X):
                    walk(v, conds, seen)
                elif isinstance(v, list):
                    stmts(v, conds)
    stmts(k.body, [])
    return out


_OPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
        "idiv": lambda a, b: int(a / b), "mod": lambda a, b: int(math.fmod(a, b)), "min": min, "max": max,
        "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
        "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b, "land": lambda a, b: a and b,
        "lor": lambda a, b: a or b, "lnot": lambda a: not a}


def _value(x: ir.X, env: dict):
    """An index or bool expression's value (C's integer division and remainder) with its variables from ``env``."""
    if x.op == "const":
        return x.arg
    if x.op == "var":
        return env[x.arg]
    a = [_value(s, env) for s in x.src]
    if x.op == "where":
        return a[1] if a[0] else a[2]
    assert x.op == "alu", x
    return _OPS[x.arg](*a)


def _variables(x: ir.X, out: set) -> set:
    if x.op == "var":
        out.add(x.arg)
    for s in x.src:
        _variables(s, out)
    return out


def _offset_fragments() -> list[list[ir.Kernel]]:
    """Contiguous reads at every offset within a vector (1-D slices of 16-, 32- and 64-bit dtypes beside a
    contiguous operand), lowered as the CUDA device lowers them: the accesses the alignment rules are about."""
    out = []
    for dt in (D.float16, D.float32, D.float64):
        for s in range(9):
            nodes = [["slice", [-1], {"starts": [s], "stops": [s + 50], "steps": [1]}], ["mul", [0, -2], None]]
            out.append(_lowered(nodes, [((60,), dt), ((50,), dt)], CUDA_OPTIONS))
    return out


def test_cuda_vector_accesses_are_aligned(fragments):
    """Every vector load and store of the CUDA/ROCm lowering starts at a multiple of its width (the buffers start
    on 256-byte boundaries) wherever it runs: its index, and the conditions it runs under, evaluated over items and
    kernel parameters (a slice's start, the sizes) that put it at every offset within a vector. A CUDA vector access
    must be aligned to its size (OpenCL's vloadN, which the stand-ins run, is not), so this is where a misaligned
    one would show."""
    import random

    _, _, frags = fragments
    rnd = random.Random(0)
    count = ran = 0
    bad = []
    for f in [*frags, *_offset_fragments()]:
        for k in f:
            for buf, idx, width, conds in _vector_accesses(k):
                count += 1
                names = set()
                for x in (idx, *conds):
                    _variables(x, names)
                names.discard(ir.GID)
                for _ in range(12):
                    env = {n: rnd.choice((rnd.randrange(0, 40), 1 << 30)) for n in names}
                    env[ir.GID] = rnd.randrange(0, 9)
                    if all(_value(c, env) for c in conds):
                        ran += 1
                        if _value(idx, env) % width:
                            bad.append(f"{k.name}: {buf} at {idx!r} ({width} lanes) with {env}")
                            break
    assert not bad, f"{len(bad)} vector accesses not aligned to their width; the first: {bad[0]}"
    assert count > 1000 and ran > count, (count, ran)


# -- HIP --------------------------------------------------------------------------------------------------------------

@pytest.mark.skipif(HIP_WHY is not None, reason=str(HIP_WHY))
def test_hip_compiles_every_line_shape(fragments):
    """The fragments that cover every line shape (:func:`_covering`; every distinct fragment under
    ``TENSORWIRE_FULL_CONFORMANCE=1``) for gfx90a, with hipRTC where it loads, else clang."""
    _, _, frags = fragments
    which = hip_compiler()[0]

    image_of = _through_cache("rocm", f"gfx90a {compiler_id(which)} {' '.join(HIP_OPTIONS)}",
                              lambda source: compile_hip(source, "gfx90a", compiler=which))

    def build(source):
        assert image_of(source)[:4] == b"\x7fELF"
    renderer = HIPRenderer.for_compiler(which)
    n, k, dt = _compile_all(renderer, _covering(renderer, frags), build)
    print(f"\nHIP gfx90a ({which}): {n} fragments, {k} kernels, {dt:.1f} s")


@pytest.mark.skipif(hip_unavailable("clang") is not None, reason=str(hip_unavailable("clang")))
def test_hip_clang_path(fragments):
    """The clang path (used without hipRTC) on a sample, with the runtime include its renderer adds. The sample's
    program, and a source rendered for hipRTC, go through the kernel cache as the other compile checks do (a warm
    run reads back the image clang made for this source, version and options; clang itself runs on every run in
    ``test_hip_error_names_the_problem[clang]``)."""
    _, _, frags = fragments
    r = HIPRenderer.for_compiler("clang")
    assert r.render(frags[0]).startswith("#include <hip/hip_runtime.h>")
    sample = _distinct(r, frags)[::40]
    _, source = next(_batches(r, sample, len(sample)))
    image_of = _through_cache("rocm", f"gfx90a {compiler_id('clang')} {' '.join(HIP_OPTIONS)}",
                              lambda src: compile_hip(src, "gfx90a", compiler="clang"))
    assert image_of(source)[:4] == b"\x7fELF"
    # a source rendered for hipRTC gets the include added (compile_hip adds it: the cache keys the source as given)
    hiprtc_source = HIPRenderer(False).render(frags[0])
    assert "hip/hip_runtime.h" not in hiprtc_source
    assert image_of(hiprtc_source)[:4] == b"\x7fELF"


@pytest.mark.parametrize("which", ["hiprtc", "clang"])
def test_hip_error_names_the_problem(which):
    if hip_unavailable(which):
        pytest.skip(hip_unavailable(which))
    bad = HIPRenderer.for_compiler(which).headers + 'extern "C" __global__ void k(float* b0) { b0[0] = oops_42; }'
    with pytest.raises(KernelCompileError, match="oops_42") as e:
        compile_hip(bad, "gfx90a", compiler=which)
    assert "gfx90a" in str(e.value)


# -- Metal ------------------------------------------------------------------------------------------------------------

def _uses_float64(frag) -> bool:
    from tensorwire.backends.codegen.metal import float64_use
    return any(float64_use(k) for k in frag)


def test_metal_renders_every_fragment_or_refuses_float64(fragments):
    frags, _, _ = fragments
    r = MetalRenderer()
    rendered = refused = 0
    for f in frags:
        if _uses_float64(f):
            with pytest.raises(DTypeError, match=r"Metal has no float64: kernel k\d+"):
                r.render(f)
            refused += 1
            continue
        src = r.render(f)
        assert src.count("{") == src.count("}") and "double" not in src and "long long" not in src, src
        assert all(f"kernel void {k.name}(" in src for k in f)
        rendered += 1
    print(f"\nMetal: {rendered} fragments rendered, {refused} refused (float64)")
    assert rendered > refused


class _NoNative(NumpyBackend):
    """Composites through their decompositions, as a fusing backend runs them."""

    @property
    def native(self):
        return frozenset()


def _lowered(nodes: list, inputs: list, opts=GPU_OPTIONS) -> list[ir.Kernel]:
    device = _NoNative().open(0)
    plan = X.compile_plan(device, nodes, inputs)
    keep = {plan.node_slot[-1]}
    return lower(plan.program.steps, keep, opts).kernels


f32, f16, i64 = D.float32, D.float16, D.int64
#: name -> (nodes, input metas): the kernels whose Metal source is checked in
GOLDEN_CASES = {
    "broadcast_chain": ([["mul", [-1, -2], None], ["exp", [0], None], ["add", [1, -1], None]],
                        [((4, 3), f32), ((3,), f32)]),
    "row_sum": ([["sum", [-1], {"dims": [1]}]], [((5, 7), f32)]),
    "cast_float16": ([["cast", [-1], {"dtype": "float16"}], ["mul", [0, 0], None]], [((6,), f32)]),
    "argmax": ([["argmax", [-1], {"dim": 1}]], [((4, 5), f32)]),
    "gather": ([["gather", [-1, -2], {"dim": 1}]], [((3, 4), f32), ((3, 2), i64)]),
    "matmul_tiled": ([["matmul", [-1, -2], None]], [((5, 6), f32), ((6, 3), f32)]),
    "row_sum_groups": ([["exp", [-1], None], ["sum", [0], {"dims": [1]}]], [((5, 7), f32)], GPU_SMALL_GROUPS),
}


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_metal_golden(name):
    source = MetalRenderer().render(_lowered(*GOLDEN_CASES[name]))
    path = GOLDEN / f"{name}.metal"
    if os.environ.get(UPDATE_ENV, "") not in ("", "0"):
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(source)
    assert path.exists(), f"no golden file {path}: run with {UPDATE_ENV}=1 to write it"
    assert source == path.read_text(), f"{name}: the Metal source differs from {path} ({UPDATE_ENV}=1 rewrites it)"


def test_metal_refuses_float64_by_kernel():
    ks = _lowered([["exp", [-1], None]], [((3,), D.float64)])
    with pytest.raises(DTypeError, match=rf"kernel {ks[0].name} uses it \(buffer b\d\)"):
        MetalRenderer().render(ks)
    ks = _lowered([["arange", [], {"start": 0, "n": 4, "step": 1, "dtype": "float32"}]], [])
    with pytest.raises(DTypeError, match="float64"):
        MetalRenderer().render(ks)


def test_metal_emits_only_the_helpers_it_uses():
    plain = MetalRenderer().render(_lowered(*GOLDEN_CASES["row_sum"]))
    assert "tw_f16_to_f32" not in plain and "tw_rng_bits" not in plain and "tw_erf" not in plain
    src = MetalRenderer().render(_lowered([["erf", [-1], None]], [((3,), f16)]))
    assert "tw_erf(" in src and "tw_f16_to_f32(" in src and "tw_rng_bits" not in src
    src = MetalRenderer().render(_lowered([["randint", [], {"shape": [5], "dtype": "int32", "seed": 1, "offset": 0,
                                                            "low": 0, "high": 10}]], []))
    assert "tw_randint(" in src and "tw_rng_bits(" in src and "double" not in src and "tw_u53" not in src


# -- Metal's own helpers, checked on the host (there is no Metal compiler here) -----------------------------------

def _run_host(tmp_path, compiler: str, name: str, source: str) -> str:
    src, exe = tmp_path / name, tmp_path / "a.out"
    src.write_text(source)
    r = subprocess.run([compiler, "-O2", "-ffp-contract=off", "-fwrapv", str(src), "-o", str(exe), "-lm"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


_RANDINT_MAIN = r"""
#define TW_CLZ64(x) __builtin_clzll(x)
#define TW_MULHI64(a, b) ((unsigned long long)(((unsigned __int128)(a) * (b)) >> 64))
METAL_RNG
static const unsigned long long edge[][4] = {EDGES};  /* counter, low, high, expected (seed 0) */
static unsigned long long st = 88172645463325252ull;
static unsigned long long nx(void) { st ^= st << 13; st ^= st >> 7; st ^= st << 17; return st; }
int main(void) {
  long long bad = 0, n = 0;
  for (unsigned i = 0; i < sizeof(edge) / sizeof(edge[0]); i++, n++) {
    long long got = m_randint(0, (long long)edge[i][0], (long long)edge[i][1], (long long)edge[i][2]);
    if (got != (long long)edge[i][3] && bad++ < 5)
      printf("edge %u [%lld, %lld): %lld, metal %lld\n", i, (long long)edge[i][1], (long long)edge[i][2],
             (long long)edge[i][3], got);
  }
  for (int it = 0; it < 600000; it++) {
    long long seed = (long long)nx(), ctr = (long long)nx(), low, high;
    unsigned long long a = nx();
    switch (it % 6) {  /* small ranges, ranges around 2**53, and ranges up to 2**63 */
      case 0: low = -(long long)(a % 1000); high = low + 1 + (long long)(nx() % 1000); break;
      case 1: low = (long long)(a >> 2) - (1ll << 61); high = low + 1 + (long long)(nx() >> (nx() % 64 | 2)); break;
      case 2: low = -(1ll << 62) - (long long)(a % 1000); high = (1ll << 62) + (long long)(nx() % 100000); break;
      case 3: low = 0; high = (long long)((1ull << 53) + (nx() % 4096)); break;
      case 4: low = -5; high = (long long)(nx() >> 1); break;
      default: low = (long long)(a % 7); high = low + (1ll << (nx() % 62)) + (long long)(nx() % 3);
    }
    if (high <= low || (unsigned long long)high - (unsigned long long)low >= (1ull << 63)) continue;
    n++;
    long long x = tw_randint(seed, ctr, low, high), y = m_randint(seed, ctr, low, high);
    if (x != y && bad++ < 5)
      printf("seed %lld counter %lld [%lld, %lld): %lld, metal %lld\n", seed, ctr, low, high, x, y);
  }
  printf("checked %lld, %lld differ\n", n, bad);
  return bad != 0;
}
"""

_M64 = (1 << 64) - 1


def _splitmix_counter(w: int) -> int:
    """The counter whose SplitMix64 word (seed 0) is ``w``: the finalizer inverted, less seed 0's part ``(0 + 1) *
    GOLDEN`` (protocol/random.py)."""
    def unshift(z, k):
        x = z
        for _ in range(64 // k + 1):
            x = z ^ (x >> k)
        return x & _M64
    z = unshift(w, 31) * pow(0x94D049BB133111EB, -1, 1 << 64) & _M64
    z = unshift(z, 27) * pow(0xBF58476D1CE4E5B9, -1, 1 << 64) & _M64
    return (unshift(z, 30) - 0x9E3779B97F4A7C15) & _M64


def _randint_edges() -> list[tuple]:
    """Words just below and above each place where ``u53 * range`` crosses an integer (where the product's and
    the range's rounding to 53 bits decide the result), with the float64 answer Python computes."""
    out = []
    for r in (2, 3, 7, 1000003, (1 << 53) - 1, (1 << 53) + 1, (1 << 53) + 3, (1 << 54) + 1, 3 * (1 << 52) + 5,
              (1 << 62) + 12345, (1 << 63) - 1):
        ms = {0, 1, (1 << 53) - 1}
        for k in (*range(1, 5), *range(r - 4, r)):
            if k > 0:
                base = -(-k * (1 << 53) // r)  # the least m with m * r >= k * 2**53
                ms.update(m for m in range(base - 3, base + 3) if 0 <= m < 1 << 53)
        for m in sorted(ms):
            for low in (0, -7):
                high = low + r
                if high >= 1 << 63:
                    continue
                v = min(math.floor(m * 2.0 ** -53 * float(r)) + low, high - 1)
                out.append((_splitmix_counter((m << 11) | 0x5A5), low & _M64, high & _M64, v & _M64))
    return out


@pytest.mark.skipif(compiled.runtime() is None, reason="needs a C compiler")
def test_metal_randint_matches_the_float64_spelling(tmp_path):
    """Metal's integer-only randint against the C target's float64 one and Python's float64 on the rounding edges,
    bit for bit, ranges up to 2**63."""
    from tensorwire.backends.codegen.c import CRenderer
    from tensorwire.backends.codegen.metal import PREAMBLE_RNG_METAL
    c = CRenderer().render(_lowered([["randint", [], {"shape": [5], "dtype": "int64", "seed": 1, "offset": 0,
                                                      "low": 0, "high": 10}]], []))
    assert "tw_randint(" in c
    metal = PREAMBLE_RNG_METAL.replace("tw_", "m_")
    edges = ", ".join("{" + ", ".join(f"{x}ull" for x in e) + "}" for e in _randint_edges())
    main = _RANDINT_MAIN.replace("METAL_RNG", metal).replace("EDGES", edges)
    out = _run_host(tmp_path, compiled.runtime().compiler, "randint.c", "#include <stdio.h>\n" + c + main)
    assert "checked" in out and ", 0 differ" in out, out


_MATH_MAIN = r"""
#include <cmath>
#include <cstdio>
#include <cstring>
namespace metal {
namespace precise { inline float log(float x) { return logf(x); } inline float exp(float x) { return expf(x); } }
inline float fabs(float x) { return fabsf(x); }
inline float fma(float a, float b, float c) { return fmaf(a, b, c); }
inline float copysign(float a, float b) { return copysignf(a, b); }
}
using std::isinf;
#define TW_FN static inline
METAL_MATH
static double ulps(float got, double ref) {
  if (std::isnan(ref)) return std::isnan(got) ? 0 : 1e9;
  float r = (float)ref;
  if (std::isinf(r) || r == 0) return got == r && std::signbit(got) == std::signbit(r) ? 0 : 1e9;
  return std::fabs(got - ref) / (std::nextafter(std::fabs(r), INFINITY) - std::fabs(r));
}
int main() {
  double worst[3] = {0, 0, 0};
  unsigned s = 12345;
  for (long i = 0; i < 3000000; i++) {  /* random bit patterns: every binade, both signs */
    s = s * 1664525u + 1013904223u;
    float x;
    memcpy(&x, &s, 4);
    if (std::isnan(x)) continue;
    double e[3] = {ulps(tw_log1p(x), log1p((double)x)), ulps(tw_expm1(x), expm1((double)x)),
                   ulps(tw_erf(x), erf((double)x))};
    for (int k = 0; k < 3; k++) worst[k] = e[k] > worst[k] ? e[k] : worst[k];
  }
  float sp[] = {0.0f, -0.0f, -1.0f, INFINITY, -INFINITY, NAN, 88.7f, -104.0f};
  for (float x : sp) {
    double e[3] = {ulps(tw_log1p(x), log1p((double)x)), ulps(tw_expm1(x), expm1((double)x)),
                   ulps(tw_erf(x), erf((double)x))};
    for (int k = 0; k < 3; k++) worst[k] = e[k] > worst[k] ? e[k] : worst[k];
  }
  printf("%.3f %.3f %.3f\n", worst[0], worst[1], worst[2]);
}
"""


@pytest.mark.skipif(not shutil.which("c++"), reason="needs a C++ compiler")
def test_metal_math_helpers_are_accurate(tmp_path):
    """Metal's log1p, expm1 and erf (with the host's logf/expf standing in for metal::precise) on 3M floats."""
    from tensorwire.backends.codegen.metal import PREAMBLE_MATH
    out = _run_host(tmp_path, shutil.which("c++"), "math.cc", _MATH_MAIN.replace("METAL_MATH", PREAMBLE_MATH))
    log1p, expm1, erf = map(float, out.split())
    assert log1p <= 4 and expm1 <= 4 and erf <= 1, out
