"""A float32 gradient check on a device without float64 (the Metal GPU), against float64 gradients on cpu:0."""

from __future__ import annotations

import numpy as np


def gradcheck_float32(session, device: str, ops: list[str]) -> None:
    """tests/autograd/test_ops_gradcheck.py's checks of ``ops`` with float32 inputs on ``device`` (the
    Metal GPU has no float64): each analytical directional derivative matches the one computed in float64 on cpu:0,
    which itself matches its central difference (the float64 gradcheck's bound)."""
    import tensorwire as tw
    from tests.autograd import test_ops_gradcheck as G

    def on_device(t):  # a float32 copy of a float64 input (an index stays int64) on ``device``
        if not isinstance(t, tw.Tensor):
            return t
        a = t.detach().numpy()
        return tw.tensor(
            a.astype(np.float32) if a.dtype == np.float64 else a, device=device, requires_grad=t.requires_grad
        )

    rng_state = G.RNG.bit_generator.state  # leave that module's inputs as they would be without us
    try:
        recorded = []
        for op in ops:
            for name, fn, inputs in G.GENERATORS[op]():  # float64, on cpu:0
                a64, n64 = tw.autograd.gradcheck_terms(fn, inputs, eps=1e-6, directions=2)
                ins32 = [on_device(t) for t in inputs]
                assert all(t.device == device for t in ins32 if isinstance(t, tw.Tensor))
                a32, _ = tw.autograd.gradcheck_terms(fn, ins32, eps=1e-3, directions=2)
                recorded.append((name, a64, n64, a32))
        vals = session.flush(fetch=[t._id for r in recorded for ts in r[1:] for t in ts])
    finally:
        G.RNG.bit_generator.state = rng_state
    bad = []
    for name, a64, n64, a32 in recorded:
        assert len(a32) == len(a64), name
        for x, y, z in zip(a64, n64, a32):
            x, y, z = float(vals[x._id]), float(vals[y._id]), float(vals[z._id])
            if not abs(x - y) <= 1e-6 + 1e-5 * abs(y) or not abs(z - x) <= 1e-4 + 1e-3 * abs(x):
                bad.append((name, x, y, z))
    assert not bad, f"(float64 analytical, numerical; float32 analytical on {device}) differ: {bad}"
