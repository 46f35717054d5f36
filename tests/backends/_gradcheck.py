"""The autograd gradchecks run on a device backend's device (tests/backends/test_cuda.py, test_rocm.py, test_mps.py,
test_opencl.py)."""

from __future__ import annotations

GRADCHECK_OPS = ["add", "mul", "div", "pow", "exp", "log", "tanh", "sigmoid", "sum", "mean", "amax", "prod",
                 "softmax", "log_softmax", "logsumexp", "matmul", "linear", "gather", "scatter_add", "scatter_reduce",
                 "index", "index_put", "cat", "pad", "slice", "permute", "expand", "cumsum", "cumprod", "where",
                 "layer_norm", "cross_entropy_index", "conv2d", "max_pool2d", "avg_pool2d", "norm", "var"]
#: the gradchecks a stand-in runs (a real GPU runs them all): one or more per kernel kind (elementwise, reductions,
#: row reductions, matmul, gathers and scatters, views, scans, the nn composites). Through PoCL the whole list took
#: ~70 s of a cold CI run; the OpenCL backend, which shares the lowering, runs it whole
STANDIN_GRADCHECKS = ["mul", "pow", "tanh", "sum", "amax", "prod", "logsumexp", "softmax", "matmul", "gather",
                    "scatter_add", "index_put", "cat", "permute", "cumsum", "layer_norm", "cross_entropy_index",
                    "conv2d", "max_pool2d"]


def gradcheck_on(session, device: str, ops=GRADCHECK_OPS) -> None:
    """tests/autograd/test_ops_gradcheck.py's checks of ``ops`` on ``device`` (float64)."""
    import tensorwire as tw
    from tests.autograd import test_ops_gradcheck as G

    rng_state = G.RNG.bit_generator.state  # leave that module's inputs as they would be without us
    tw.set_default_device(device)
    try:
        recorded = []
        for op in ops:
            for name, fn, inputs in G.GENERATORS[op]():
                assert all(t.device == device for t in inputs)
                a, n = tw.autograd.gradcheck_terms(fn, inputs, eps=1e-6, directions=2)
                recorded.append((name, a, n))
        vals = session.flush(fetch=[t._id for _, a, n in recorded for t in a + n])
    finally:
        tw.set_default_device("cpu:0")
        G.RNG.bit_generator.state = rng_state
    bad = [(name, float(vals[x._id]), float(vals[y._id])) for name, a, n in recorded for x, y in zip(a, n)
           if not abs(float(vals[x._id]) - float(vals[y._id])) <= 1e-6 + 1e-5 * abs(float(vals[y._id]))]
    assert not bad, f"analytical vs numerical gradients differ on {device}: {bad}"
