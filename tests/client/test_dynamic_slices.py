"""A slice's bounds are dynamic attributes (issue 37): a loop that slices at new offsets every step, such as the
bigram loader's ``torch.stack([data[i:i + 8] for i in ix])``, reuses one plan and, once the plan is hot, one compiled
kernel whose start is a parameter. The values and gradients stay right at every offset, on the interpreted and the
compiled path. (A replay whose bounds leave the tensor is refused: ``tests/security/test_direct_channels.py``.)"""

from __future__ import annotations

import time

import numpy as np
import pytest

import tensorwire as tw

HOT_RUNS = 3  # the compiler takes a plan after this many runs (TENSORWIRE_CPU_COMPILE_HOT_RUNS)
COMPILE_S = 120  # a compile's bound on a loaded 2-core runner


@pytest.fixture(scope="module")
def hot_session(tmp_path_factory):
    """cpu:0 compiling plans after HOT_RUNS runs, into a kernel cache of this module's own, and taking them
    unmeasured (``..._TRIAL_RUNS=0``: these tests are about the compiled kernels, not whether they are faster)."""
    cache = tmp_path_factory.mktemp("kernels")
    env = {"TENSORWIRE_CPU_COMPILE_HOT_RUNS": str(HOT_RUNS), "TENSORWIRE_KERNEL_CACHE": str(cache),
           "TENSORWIRE_CPU_COMPILE_TRIAL_RUNS": "0", "TENSORWIRE_CPU_COMPILE_BUILD_RUNS": "0"}
    with tw.LocalCluster(devices=["cpu:0"], extra_env=env, autograd=True) as c:
        s = tw.Session(c.address)
        with tw.use_session(s):
            yield s, cache
        s.close()


def test_a_loader_at_new_offsets_reuses_its_plan(hot_session):
    s, _ = hot_session
    rng = np.random.default_rng(0)
    text = rng.integers(0, 27, 500)
    data = tw.tensor(text)
    plans = []
    for step in range(8):
        offsets = rng.integers(0, len(text) - 9, 16)
        ix = tw.from_numpy(offsets)
        x = tw.stack([data[i:i + 8] for i in ix])
        y = tw.stack([data[i + 1:i + 9] for i in ix])
        got = (x * 100 + y).numpy()
        want = np.stack([text[i:i + 8] * 100 + text[i + 1:i + 9] for i in offsets])
        np.testing.assert_array_equal(got, want, err_msg=f"step {step}")
        plans.append(len(s._plans))
    assert plans[-1] == plans[1], plans  # the second step's structures serve every later step


def test_gradients_through_slices_at_moving_offsets(hot_session):
    """Forward, backward and an optimizer step through slices whose start changes every step, compiled once hot:
    every step's loss and the final weights match numpy in float64."""
    rng = np.random.default_rng(1)
    table = rng.standard_normal((64, 5)).astype(np.float32)
    w0 = rng.standard_normal((5,)).astype(np.float32)
    w = tw.tensor(w0.copy(), requires_grad=True)
    data = tw.tensor(table)
    opt = tw.optim.SGD([w], lr=0.1)
    wn = w0.astype(np.float64)
    for step in range(3 * HOT_RUNS + 4):
        i = int(rng.integers(0, 56))
        loss = ((data[i:i + 8, 1:4] * w[1:4]).tanh() ** 2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        block = table[i:i + 8, 1:4].astype(np.float64)
        t = np.tanh(block * wn[1:4])
        want = (t ** 2).sum()
        grad = np.zeros(5)
        grad[1:4] = (2 * t * (1 - t ** 2) * block).sum(axis=0)
        assert loss.item() == pytest.approx(want, rel=1e-5), step
        wn = wn - 0.1 * grad
    np.testing.assert_allclose(w.detach().numpy(), wn, rtol=1e-5, atol=1e-6)


def _hot_plans(s) -> int:
    st = s.cluster_status()
    return st["devices"]["cpu:0"].get(st["session"], {}).get("hot_plans", 0)


def test_the_compiled_kernel_takes_the_start_as_a_parameter(hot_session):
    """Once hot, the plan runs one generated kernel for every offset: the cache holds no kernel per offset. (The
    compile runs beside the interpreter, so the loop goes on until the session counts the plan compiled.)"""
    s, cache = hot_session
    rng = np.random.default_rng(2)
    base = rng.standard_normal((40, 300)).astype(np.float32)
    data = tw.tensor(base)
    before, hot0 = len(list(cache.rglob("*.c"))), _hot_plans(s)
    deadline = time.monotonic() + COMPILE_S
    for step in range(100_000):  # (bounded by the deadline)
        i, j = int(rng.integers(0, 32)), int(rng.integers(0, 200))
        got = (data[i:i + 8, j:j + 100:3].exp() * 2 + 1).sum(dim=1).numpy()
        want = (np.exp(base[i:i + 8, j:j + 100:3].astype(np.float64)) * 2 + 1).sum(axis=1)
        np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=f"step {step}")
        if _hot_plans(s) > hot0 and step > 3 * HOT_RUNS:
            break
        assert time.monotonic() < deadline, "the plan was never compiled"
    for step in range(20):  # compiled: new offsets, the same kernel
        i, j = int(rng.integers(0, 32)), int(rng.integers(0, 200))
        got = (data[i:i + 8, j:j + 100:3].exp() * 2 + 1).sum(dim=1).numpy()
        want = (np.exp(base[i:i + 8, j:j + 100:3].astype(np.float64)) * 2 + 1).sum(axis=1)
        np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=f"compiled step {step}")
    made = len(list(cache.rglob("*.c"))) - before
    # one fused kernel serves every offset (~30 here), not one per offset; up to two more may be the previous test's
    # plans (its step's forward and backward), whose compiles in the background ended during this one (3 once, in a
    # full parallel run)
    assert 1 <= made <= 3, made


def test_values_nobody_reads_are_not_shipped(hot_session, monkeypatch):
    """The loader's ``i`` (an element of ``ix``) and ``i + 8`` are known on the client (known_values) and dead by
    the time the batch ships: the batch leaves them out, and the devices never make them."""
    import tensorwire.session as S

    shipped: list[list[str]] = []
    encode = S.encode_batch

    def spy(pending, where=None):
        b = encode(pending, where)
        shipped.append([n[0] for n in b.nodes])
        return b

    monkeypatch.setattr(S, "encode_batch", spy)
    rng = np.random.default_rng(3)
    text = rng.integers(0, 27, 300)
    data = tw.tensor(text)
    tw.synchronize()
    offsets = rng.integers(0, len(text) - 9, 16)
    shipped.clear()
    x = tw.stack([data[i:i + 8] for i in tw.from_numpy(offsets)])
    np.testing.assert_array_equal(x.numpy(), np.stack([text[i:i + 8] for i in offsets]))
    ops = [op for nodes in shipped for op in nodes]
    # the 16 windows: their positions (the one upload) and one gather (combine._gather_rows); no select of ix, no
    # i + 8, and ix itself is never read by the devices either
    assert ops == ["const", "const", "index"], ops  # (the first: the text's own upload, held until read)
