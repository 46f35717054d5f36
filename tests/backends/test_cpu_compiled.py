"""The CPU backend's compiled mode: fused C kernels pass the conformance suite, fuse what they should, cache on
disk, and fail cleanly."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from tensorwire.backends import executor as X
from tensorwire.backends import testing as T
from tensorwire.backends.codegen import lower
from tensorwire.backends.codegen.cache import KernelCompileError
from tensorwire.backends.cpu import CompiledBackend, NumpyBackend, compiled, make_backend
from tensorwire.protocol import dtypes as D
from tests._prebuild import prebuild_c_kernels

pytestmark = pytest.mark.skipif(compiled.runtime() is None, reason=f"no C compiler: {compiled.why_not()}")

CASES = T.conformance_cases()
#: cases whose fragments fail on purpose: the fused run raises and the executor re-runs them step by step
EXPECT_FALLBACK = ("failure[", "gather[out-of-range", "scatter[out-of-range", "scatter_add[out-of-range",
                   "scatter_reduce[out-of-range", "index[out-of-range", "index_put[out-of-range", "const[bad-frame")


@pytest.fixture(scope="module")
def backend():
    prebuild_c_kernels(CASES)  # a cold kernel cache's ~1,500 libraries built on every core first (tests/_prebuild.py)
    return CompiledBackend(min_work=0, large_runs=0)  # every fragment compiled, however small


@pytest.fixture
def fallbacks(monkeypatch):
    """Counts the fragments the executor had to interpret step by step."""
    seen = collections.Counter()
    real = X.execute

    def execute(device, plan, *a, **k):
        seen["n"] += 1
        return real(device, plan, *a, **k)
    monkeypatch.setattr(X, "execute", execute)
    return seen


@pytest.mark.parametrize("case", CASES, ids=str)
def test_conformance(backend, case, fallbacks):
    T.check_case(backend, case)
    if not case.name.startswith(EXPECT_FALLBACK):
        assert fallbacks["n"] == 0, f"{case.name} ran step by step: a fused kernel failed"


def _chain_plan(device, n=1 << 10):
    x = ((n,), D.float32)
    nodes = [["full", [], {"shape": [], "dtype": "float32", "value": 2.0}], ["mul", [-1, 0], None],
             ["full", [], {"shape": [], "dtype": "float32", "value": 1.0}], ["add", [1, 2], None],
             ["relu", [3], None], ["exp", [4], None], ["mul", [5, -1], None], ["sum", [6], {"dims": None}]]
    return X.compile_plan(device, nodes, [x])


def test_a_chain_with_its_reduction_is_one_kernel(backend):
    """((x * 2 + 1).relu().exp() * x).sum(): the chain is the reduction's prologue, one pass over memory (two
    kernels when the sum is long enough to split across the cores)."""
    dev = backend.open(0)
    plan = _chain_plan(dev)
    out = plan.node_slot[-1]
    low = lower(plan.program.steps, {out}, dev.lowering_options)
    assert len(low.kernels) == 1
    big = _chain_plan(dev, 1 << 20)
    low = lower(big.program.steps, {big.node_slot[-1]}, dev.lowering_options)
    assert len(low.kernels) == 2  # per-chunk partial sums, then their sum
    x = np.linspace(-2, 2, 1 << 20, dtype=np.float32)
    got = X.run_plan(dev, big, [x], list(range(100, 108)), {}, [], {big.node_slot[-1]})[107]
    ref = np.sum(np.exp(np.maximum(x.astype(np.float64) * 2 + 1, 0)) * x)
    np.testing.assert_allclose(float(got.reshape(())), ref, rtol=1e-5)


def test_a_fragment_too_small_to_compile_keeps_the_numpy_fused_composites():
    """An Adam update on a small tensor runs as the numpy backend's one-call kernels (a compiled kernel would not
    pay its launch); on a large one it decomposes, so the compiled kernel fuses it. Both agree with numpy."""
    nodes = [["adam_exp_avg", [-1, -2], {"beta1": 0.9, "weight_decay": 0}],
             ["adam_exp_avg_sq", [-3, -2], {"beta2": 0.999, "weight_decay": 0}],
             ["adam_param", [-4, 0, 1, -5, -6], {"eps": 1e-8}]]
    dev = CompiledBackend(min_work=1 << 12, large_runs=0).open(0)
    rng = np.random.default_rng(0)
    for n, whole in ((64, True), (1 << 12, False)):
        m, g, v, p = (rng.random(n, dtype=np.float32) for _ in range(4))
        ext = [m, g, v, p, np.float32(0.01), np.float32(0.5)]
        plan = X.compile_plan(dev, nodes, [(np.shape(a), D.float32) for a in ext])
        ops = [s.op for s in plan.program.steps]
        assert (ops == ["adam_exp_avg", "adam_exp_avg_sq", "adam_param"]) is whole, ops
        got = X.run_plan(dev, plan, ext, [10, 11, 12], {}, [], set(plan.node_slot))
        m2 = m.astype(np.float64) + (g - m.astype(np.float64)) * 0.1
        v2 = v * 0.999 + 0.001 * g.astype(np.float64) ** 2
        np.testing.assert_allclose(got[10], m2, rtol=1e-6)
        np.testing.assert_allclose(got[11], v2, rtol=1e-6)
        np.testing.assert_allclose(got[12], p - 0.01 * m2 / (np.sqrt(v2) / 0.5 + 1e-8), rtol=1e-5)


def test_an_adam_update_is_one_kernel_that_stores_the_moments_and_the_parameter(backend):
    """The new moments are kept (they are the optimizer's state) and feed only the new parameter, element for
    element: the parameter's kernel computes and stores them too, one pass over memory instead of three kernels.
    The results equal the three-kernel lowering's, bit for bit."""
    from dataclasses import replace

    nodes = [["adam_exp_avg", [-1, -2], {"beta1": 0.9, "weight_decay": 0}],
             ["adam_exp_avg_sq", [-3, -2], {"beta2": 0.999, "weight_decay": 0}],
             ["adam_param", [-4, 0, 1, -5, -6], {"eps": 1e-8}]]
    dev = backend.open(0)
    rng = np.random.default_rng(0)
    m, g, v, p = (rng.random(1000, dtype=np.float32) for _ in range(4))
    ext = [m, g, v, p, np.float32(0.01), np.float32(0.5)]
    plan = X.compile_plan(dev, nodes, [(np.shape(a), D.float32) for a in ext])
    keep = set(plan.node_slot)
    low = lower(plan.program.steps, keep, dev.lowering_options)
    assert len(low.kernels) == 1
    assert sum(b.out for b in low.kernels[0].bufs) == 3
    apart = lower(plan.program.steps, keep, replace(dev.lowering_options, multi_output=False))
    assert len(apart.kernels) == 3
    got = X.run_plan(dev, plan, list(ext), [10, 11, 12], {}, [], keep)
    ref = CompiledBackend(min_work=0, large_runs=0).open(0)
    ref.lowering_options = replace(dev.lowering_options, multi_output=False)
    want = X.run_plan(ref, X.compile_plan(ref, nodes, [(np.shape(a), D.float32) for a in ext]), list(ext),
                      [10, 11, 12], {}, [], keep)
    for i in (10, 11, 12):
        np.testing.assert_array_equal(got[i], want[i])


def test_a_kept_value_is_stored_by_its_consumer_only_where_read_element_for_element(backend):
    """A kept value the next kernel reads broadcast (a row's sum over a [4, 8] matrix), or that two kernels read,
    keeps a kernel of its own; one read at the consumer's own index is stored by the consumer."""
    dev = backend.open(0)
    x = ((4, 8), D.float32)

    def kernels(nodes, kept):
        plan = X.compile_plan(dev, nodes, [x])
        low = lower(plan.program.steps, {plan.node_slot[j] for j in kept}, dev.lowering_options)
        return [sum(b.out for b in k.bufs) for k in low.kernels]

    # e = exp(x) kept; e * 2 -> one kernel, two outputs
    assert kernels([["exp", [-1], None], ["full", [], {"shape": [], "dtype": "float32", "value": 2.0}],
                    ["mul", [0, 1], None]], [0, 2]) == [2]
    # s = x.sum(1, keepdim) kept; x - s reads s broadcast over each row: two kernels
    assert len(kernels([["sum", [-1], {"dims": [1], "keepdim": True}], ["sub", [-1, 0], None]], [0, 1])) == 2
    # e kept and read by two kernels (e * 2 and e + 1, both kept): e has a kernel of its own, every kernel one output
    got = kernels([["exp", [-1], None], ["full", [], {"shape": [], "dtype": "float32", "value": 2.0}],
                   ["mul", [0, 1], None], ["add", [0, 1], None]], [0, 2, 3])
    assert len(got) >= 3 and set(got) == {1}


def test_a_fragment_too_long_to_compile_runs_on_numpy_without_building_kernels():
    """A fragment of more steps than ``max_steps`` (a loop recorded without reads ships thousands of ops a batch)
    interprets with numpy, however much work it does: no C kernel is built for it. Below the cap it compiles."""
    built = []

    class Counting:
        def __init__(self, inner):
            self.inner = inner

        def build(self, kernels):
            built.append(len(kernels))
            return self.inner.build(kernels)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    n, k = 1 << 12, 40  # k adds alternating with sins: every step its own work, 2k steps in all
    nodes = []
    for j in range(k):
        nodes += [["sin", [-1 if j == 0 else 2 * j - 1], None], ["add", [2 * j, -1], None]]
    x = np.linspace(-1, 1, n, dtype=np.float32)
    ref = x.astype(np.float64)
    for _ in range(k):
        ref = np.sin(ref) + x
    for cap, compiles in ((2 * k - 1, False), (2 * k, True)):
        built.clear()
        dev = CompiledBackend(Counting(compiled.runtime()), min_work=0, max_steps=cap, large_runs=0).open(0)
        plan = X.compile_plan(dev, nodes, [((n,), D.float32)])
        got = X.run_plan(dev, plan, [x], list(range(100, 100 + 2 * k)), {}, [], {plan.node_slot[-1]})
        np.testing.assert_allclose(got[100 + 2 * k - 1], ref, rtol=1e-4, atol=1e-5)
        assert bool(built) is compiles, (cap, built)


def test_views_fold_into_index_arithmetic(backend):
    """permute + slice + flip + expand feeding an add: no copy kernel, one kernel reading strided."""
    dev = backend.open(0)
    nodes = [["permute", [-1], {"dims": [1, 0]}], ["slice", [0], {"starts": [0, 1], "stops": [4, 3], "steps": [2, 1]}],
             ["flip", [1], {"dims": [0]}], ["add", [2, -2], None]]
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.arange(2, dtype=np.float32)
    plan = X.compile_plan(dev, nodes, [((3, 4), D.float32), ((2,), D.float32)])
    low = lower(plan.program.steps, {plan.node_slot[-1]}, dev.lowering_options)
    assert len(low.kernels) == 1
    got = X.run_plan(dev, plan, [a, b], [10, 11, 12, 13], {}, [], {plan.node_slot[-1]})[13]
    np.testing.assert_array_equal(got, np.flip(a.T[0:4:2, 1:3], 0) + b)


def test_kernels_are_cached_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORWIRE_KERNEL_CACHE", str(tmp_path))
    rt = compiled.CRuntime(compiled.runtime().compiler, compiled.runtime().version)
    dev = CompiledBackend(rt, min_work=0, large_runs=0).open(0)
    plan = _chain_plan(dev)
    low = lower(plan.program.steps, {plan.node_slot[-1]}, dev.lowering_options)
    rt.build(low.kernels)
    assert rt.cache.builds == 1 and list(tmp_path.glob("c/*.so")) and list(tmp_path.glob("c/*.c"))
    again = compiled.CRuntime(rt.compiler, rt.version)  # a new process: the library comes from disk
    again.build(low.kernels)
    assert again.cache.builds == 0 and again.cache.hits == 1


def test_debug_kernels_prints_the_source(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("TENSORWIRE_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setenv("TENSORWIRE_DEBUG_KERNELS", "1")
    rt = compiled.CRuntime(compiled.runtime().compiler, compiled.runtime().version)
    dev = CompiledBackend(rt, min_work=0, large_runs=0).open(0)
    plan = _chain_plan(dev)
    rt.build(lower(plan.program.steps, {plan.node_slot[-1]}, dev.lowering_options).kernels)
    err = capfd.readouterr().err
    assert "tensorwire kernel (c)" in err and "expf(" in err and "#pragma omp" in err


def test_a_kernel_that_does_not_compile_names_its_source(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORWIRE_KERNEL_CACHE", str(tmp_path))
    broken = compiled.CRuntime("false", "broken")  # a "compiler" that always fails
    dev = CompiledBackend(broken, min_work=0, large_runs=0).open(0)
    plan = _chain_plan(dev)
    with pytest.raises(KernelCompileError, match=r"kernel source: .*\.c"):
        broken.build(lower(plan.program.steps, {plan.node_slot[-1]}, dev.lowering_options).kernels)
    # through the executor: the fragment still runs (step by step, on the numpy kernels)
    x = np.ones(1 << 10, np.float32)
    res = X.run_plan(dev, plan, [x], list(range(8)), {}, [], {plan.node_slot[-1]})
    np.testing.assert_allclose(float(np.asarray(res[7])), np.exp(3.0) * 1024, rtol=1e-5)


def test_compile_switch_and_status_name(monkeypatch):
    assert isinstance(make_backend(), CompiledBackend)
    assert make_backend().devices()[0].name.startswith("C kernels")
    monkeypatch.setenv("TENSORWIRE_CPU_COMPILE", "0")
    monkeypatch.setattr(compiled, "_RUNTIME", None)
    monkeypatch.setattr(compiled, "_RUNTIME_WHY", "")
    b = make_backend()
    assert type(b) is NumpyBackend and b.devices()[0].name.startswith("numpy")
    assert "TENSORWIRE_CPU_COMPILE=0" in compiled.why_not()


@pytest.mark.parametrize("op,attrs,shape", [("softmax", {"dim": -1}, (4, 3, 5, 5)),
                                           ("layer_norm", {"normalized_shape": [5], "eps": 1e-5}, (6, 5))])
def test_row_reductions_fuse_into_one_kernel_a_row(backend, op, attrs, shape):
    """softmax (max, then the sum of exponentials, then the row) and layer_norm are one kernel; the attention
    pattern (a masked softmax feeding a matmul) keeps it, with the row's values recomputed, not stored."""
    dev = backend.open(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    mask = np.where(rng.random((shape[0],) + (1,) * (len(shape) - 2) + (shape[-1],)) < 0.3, -1e9,
                    0).astype(np.float32)
    v = rng.standard_normal(shape[:-2] + (shape[-1], 7)).astype(np.float32)
    nodes = [["add", [-1, -2], None], [op, [0], attrs], ["matmul", [1, -3], None]]
    plan = X.compile_plan(dev, nodes, [(x.shape, D.float32), (mask.shape, D.float32), (v.shape, D.float32)])
    low = lower(plan.program.steps, {plan.node_slot[-1]}, dev.lowering_options)
    assert len(low.kernels) == 1
    got = X.run_plan(dev, plan, [x, mask, v], [10, 11, 12], {}, [], {plan.node_slot[-1]})[12]
    z = (x + mask).astype(np.float64)
    if op == "softmax":
        e = np.exp(z - z.max(-1, keepdims=True))
        y = e / e.sum(-1, keepdims=True)
    else:
        y = (z - z.mean(-1, keepdims=True)) / np.sqrt(z.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(got, y @ v, rtol=1e-4, atol=1e-5)


def test_training_runs_the_same_compiled_and_interpreted(shared_clusters):
    """Digits MLP Adam steps through real clusters: every fragment compiled (however small) against the numpy
    interpreter, the same losses. (The run's shared clusters of the two CPU modes, ``SharedClusters.cpu_mode``.)"""
    import tensorwire as tw
    from tests.backends._digits import adam_losses

    def losses(mode: str) -> list[float]:
        s = tw.connect(shared_clusters.cpu_mode(mode).address)
        try:
            return adam_losses("cpu:0")
        finally:
            s.close()
            tw.set_session(None)

    fused = losses("compiled")
    numpy = losses("numpy")
    assert fused[-1] < fused[0]
    np.testing.assert_allclose(fused, numpy, rtol=1e-5)


@pytest.mark.parametrize("n", [1, 1023, 1025, 3 * 1024 + 7, (1 << 20) + 3])
def test_float32_sums_add_float32_blocks_in_float64(backend, n):
    """A float32 sum on the C target adds blocks of ``acc_block`` elements in float32 (a loop that vectorises at
    float32's width) and the blocks' sums in float64: as accurate as a float64 accumulator, for every length
    (a partial last block, one block, the two-stage split of long sums)."""
    from tensorwire.backends.codegen.c import CRenderer

    dev = backend.open(0)
    nodes = [["mul", [-1, -1], None], ["sum", [0], {"dims": None}]]
    plan = X.compile_plan(dev, nodes, [((n,), D.float32)])
    low = lower(plan.program.steps, {plan.node_slot[-1]}, dev.lowering_options)
    src = CRenderer().render(low.kernels)
    assert "float accb" in src and f"+= {dev.lowering_options.acc_block}" in src, src
    x = (np.random.default_rng(n).random(n) + 0.5).astype(np.float32)
    got = X.run_plan(dev, plan, [x], [100, 101], {}, [], {plan.node_slot[-1]})[101]
    ref = np.sum(x.astype(np.float64) ** 2)
    np.testing.assert_allclose(float(got.reshape(())), ref, rtol=2e-7)
