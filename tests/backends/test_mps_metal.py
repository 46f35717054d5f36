"""The kernel compiler's Metal kernels in MLX's custom-kernel form (``backends/mps/metal.py``).

Golden-text tests (``golden/mlx/*.metal``; ``TENSORWIRE_UPDATE_GOLDEN=1`` rewrites them) check the MLX form of a
handful of fused kernels as a GPU lowers them. Tests marked ``mps`` run the real thing on a Mac's GPU and skip with
the reason elsewhere (MLX's custom kernels need Metal): the kernels through ``mx.fast.metal_kernel`` against numpy,
and the device's Metal path (fragments as launches, kernel errors, a float32 gradcheck and the digits MLP on a
cluster). Without a Mac, test_mps_standin.py runs that path on a stand-in for ``mx.fast.metal_kernel``.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from tensorwire.backends import executor as X
from tensorwire.backends.codegen.lower import lower
from tensorwire.backends.codegen.metal import MetalRenderer
from tensorwire.backends.codegen.presets import GPU as LOWERING_GPU
from tensorwire.backends.codegen.program import scalar_value
from tensorwire.backends.cpu import NumpyBackend
from tensorwire.backends.mps.metal import STORAGE_MLX, MLXMetalRenderer, mlx_source, scalar_mlx
from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DTypeError

GOLDEN = Path(__file__).parent / "golden" / "mlx"
UPDATE_ENV = "TENSORWIRE_UPDATE_GOLDEN"
f32, f16, i64 = D.float32, D.float16, D.int64


class _NoNative(NumpyBackend):
    """Composites through their decompositions, as a fusing backend runs them."""

    @property
    def native(self):
        return frozenset()


def _lowered(nodes: list, inputs: list):
    device = _NoNative().open(0)
    plan = X.compile_plan(device, nodes, inputs)
    return lower(plan.program.steps, {plan.node_slot[-1]}, LOWERING_GPU).kernels


#: name -> (nodes, input metas, a function of the float64 inputs giving the expected output)
CASES = {
    "broadcast_chain": ([["mul", [-1, -2], None], ["exp", [0], None], ["add", [1, -1], None]],
                        [((4, 3), f32), ((3,), f32)], lambda a, b: np.exp(a * b) + a),
    "softmax_rows": ([["softmax", [-1], {"dim": 1}]], [((6, 300), f32)],
                     lambda a: np.exp(a - a.max(1, keepdims=True)) / np.exp(a - a.max(1, keepdims=True)).sum(
                         1, keepdims=True)),
    "cast_float16": ([["cast", [-1], {"dtype": "float16"}], ["mul", [0, 0], None]], [((6,), f32)],
                     lambda a: (a.astype(np.float16) * a.astype(np.float16)).astype(np.float16)),
    "gather_checked": ([["gather", [-1, -2], {"dim": 1}]], [((3, 4), f32), ((3, 2), i64)],
                       lambda a, i: np.take_along_axis(a, i.astype(np.int64), 1)),
    "matmul_tiled": ([["matmul", [-1, -2], None]], [((37, 20), f32), ((20, 19), f32)], lambda a, b: a @ b),
    "randint": ([["randint", [], {"shape": [7], "dtype": "int32", "seed": 3, "offset": 5, "low": -4, "high": 9}]],
                [], None),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_mlx_metal_golden(name):
    nodes, inputs, _ = CASES[name]
    text = "".join(mlx_source(k).text() for k in _lowered(nodes, inputs))
    path = GOLDEN / f"{name}.metal"
    if os.environ.get(UPDATE_ENV, "") not in ("", "0"):
        GOLDEN.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden file {path}: run with {UPDATE_ENV}=1 to write it"
    assert text == path.read_text(), f"{name}: the MLX Metal source differs from {path} ({UPDATE_ENV}=1 rewrites it)"


def test_mlx_form_differs_from_metal_only_in_spelling():
    """The body is the Metal renderer's kernel body with MLX's thread-index names and without the signature."""
    for nodes, inputs, _ in CASES.values():
        for k in _lowered(nodes, inputs):
            plain = MetalRenderer().render([k])
            src = mlx_source(k)
            assert "kernel void" not in src.body and "[[buffer(" not in src.body
            spelled = (src.body.replace("thread_position_in_grid.x", "tid.x")
                       .replace("thread_position_in_threadgroup.x", "ltid.x")
                       .replace("threadgroup_position_in_grid.x", "tgid.x"))
            assert spelled in plain, k.name
            assert src.header.strip() in plain
            assert set(src.input_names) | set(src.output_names) >= {b.name for b in k.bufs}
            assert ("tw_err" in src.output_names) == k.can_raise


def test_mlx_form_names_work_groups_and_scalars():
    (k,) = _lowered(*CASES["matmul_tiled"][:2])
    src = mlx_source(k)
    assert src.threadgroup == k.local > 0 and "threadgroup_barrier(mem_flags::mem_threadgroup)" in src.body
    (k,) = _lowered(*CASES["randint"][:2])
    src = mlx_source(k)
    assert [s.name for s in k.scalars] == list(src.input_names[-len(k.scalars):]) and src.threadgroup == 0


def test_mlx_form_refuses_float64():
    (k,) = _lowered([["exp", [-1], None]], [((3,), D.float64)])
    with pytest.raises(DTypeError, match=f"Metal has no float64: kernel {k.name}"):
        mlx_source(k)


def test_storage_types_cover_every_metal_dtype():
    assert set(STORAGE_MLX) == set(MLXMetalRenderer.storage)


# -- on a Mac: the kernels through mx.fast.metal_kernel ----------------------------------------------------------------

def _metal_reason() -> str:
    try:
        import mlx.core as mx
    except Exception as e:  # noqa: BLE001
        return f"mlx is not installed ({e})"
    if not mx.metal.is_available():
        return "MLX has no Metal GPU here (mx.fast.metal_kernel needs one: macOS on Apple silicon)"
    return ""


def _single_launch(nodes: list, inputs: list):
    """The one kernel a fragment lowers to, per buffer the external input it reads (or None: an output), and its
    scalars' values (a shape-generic kernel's sizes)."""
    device = _NoNative().open(0)
    plan = X.compile_plan(device, nodes, inputs)
    lowered = lower(plan.program.steps, {plan.node_slot[-1]}, LOWERING_GPU)
    (launch,) = [it for it in lowered.items if hasattr(it, "kernel")]
    ext = [key[1] if key[0] == "slot" and key[1] < len(inputs) else None for key in launch.args]
    return launch.kernel, ext, [scalar_value(s, None) for s in launch.scalars]


#: the cases that are one kernel reading the fragment's inputs (the test binds them directly)
RUNNABLE = [n for n in sorted(CASES) if CASES[n][2] is not None and len(_lowered(*CASES[n][:2])) == 1]


@pytest.mark.mps
@pytest.mark.skipif(bool(_metal_reason()), reason=_metal_reason() or "-")
@pytest.mark.parametrize("name", RUNNABLE)
def test_mlx_metal_kernels_run_on_the_gpu(name):
    import mlx.core as mx

    nodes, inputs, want_fn = CASES[name]
    rng = np.random.default_rng(0)
    arrays = [rng.integers(0, 2, shape) if dt is i64 else rng.standard_normal(shape).astype(dt.np)
              for shape, dt in inputs]
    k, ext, values = _single_launch(nodes, inputs)
    src = mlx_source(k)
    fn = mx.fast.metal_kernel(name=f"tw_{name}", input_names=list(src.input_names),
                              output_names=list(src.output_names), source=src.body, header=src.header)
    ins = [mx.array(arrays[j]).view(getattr(mx, STORAGE_MLX[b.dtype])) for b, j in zip(k.bufs, ext) if not b.out]
    ins += [mx.array(v, dtype=getattr(mx, scalar_mlx(s.dtype))) for s, v in zip(k.scalars, values)]  # (0-d)
    outs = [b for b in k.bufs if b.out]
    res = fn(inputs=ins, grid=(k.grid, 1, 1), threadgroup=(k.local or 64, 1, 1),
             output_shapes=[(b.size,) for b in outs] + ([(2,)] if k.can_raise else []),
             output_dtypes=[getattr(mx, STORAGE_MLX[b.dtype]) for b in outs] + ([mx.int64] if k.can_raise else []),
             init_value=0 if k.can_raise else None)
    if k.can_raise:
        assert np.asarray(res[-1]).tolist() == [0, 0]
    b = outs[-1]
    got = np.asarray(res[len(outs) - 1]).view(b.dtype.np).astype(np.float64)
    want = np.asarray(want_fn(*[a.astype(np.float64) for a in arrays]), dtype=np.float64).reshape(-1)
    np.testing.assert_allclose(got, want, rtol=2e-3 if b.dtype is f16 else 1e-5, atol=1e-6)


def test_some_kernels_are_runnable_on_a_mac():
    assert len(RUNNABLE) >= 3, RUNNABLE


# -- on a Mac: the device's Metal path -----------------------------------------------------------------------------

needs_metal = pytest.mark.skipif(bool(_metal_reason()), reason=_metal_reason() or "-")


def _metal_device():
    from tensorwire.backends.mps import MPSBackend
    from tensorwire.backends.mps import runtime as RT

    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(RT.ON_CPU_ENV, raising=False)
        RT.discover(refresh=True)
        try:
            return MPSBackend().open(0)
        finally:
            mp.undo()
            RT.discover(refresh=True)


@pytest.mark.mps
@needs_metal
def test_fragments_run_as_metal_kernels_on_the_gpu():
    from tensorwire.protocol.errors import IndexOutOfRange

    device = _metal_device()
    assert device.metal and device.gpu
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 300)).astype(np.float32), rng.standard_normal((300,)).astype(np.float32)
    plan = X.compile_plan(device, [["mul", [-1, -2], None], ["softmax", [0], {"dim": 1}]], [((64, 300), f32),
                                                                                             ((300,), f32)])
    launches = device.runtime.launches
    res = X.run_plan(device, plan, [device.upload(a), device.upload(b)], [0, 1], {}, [], {plan.node_slot[-1]})
    assert device.runtime.launches > launches
    e = np.exp(a * b - (a * b).max(1, keepdims=True))
    np.testing.assert_allclose(device.download(res[1]), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    plan = X.compile_plan(device, [["index", [-1, -2], {"dim": 0}]], [((5,), f32), ((2,), i64)])
    res = X.run_plan(device, plan, [device.upload(np.arange(5, dtype=np.float32)), device.upload(np.array([0, 7]))],
                     [0], {}, [], set(plan.node_slot))
    assert isinstance(res[0], X.Fail) and res[0].err["code"] == IndexOutOfRange.code, res[0]


@pytest.fixture(scope="module")
def gpu_session():
    import tensorwire as tw
    from tensorwire.backends.mps import runtime as RT

    if _metal_reason():
        pytest.skip(_metal_reason())
    with tw.LocalCluster(devices=["cpu:0", "mps:0"], collectives=False, extra_env={RT.ON_CPU_ENV: ""}) as c:
        s = tw.connect(c.address)
        yield s
        s.close()
        tw.set_session(None)


@pytest.mark.mps
@needs_metal
def test_gradcheck_float32_on_the_metal_gpu(gpu_session):
    from tests.backends._gradcheck32 import gradcheck_float32
    from tests.backends.test_mps import GRADCHECK_OPS

    gradcheck_float32(gpu_session, "mps:0", GRADCHECK_OPS)


@pytest.mark.mps
@needs_metal
def test_digits_mlp_trains_the_same_on_the_metal_gpu(gpu_session):
    from tests.backends._digits import adam_losses as losses

    cpu, mps = losses("cpu:0"), losses("mps:0")
    assert cpu[-1] < cpu[0]
    np.testing.assert_allclose(mps, cpu, rtol=1e-3)
