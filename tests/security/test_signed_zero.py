"""Issue 34, finding 2: caches must not lose the sign of zero (or fail to find a NaN).

``0.0 == -0.0`` and their hashes agree in Python, so a dict keyed by value merges them: the client's scalar tensors,
the plan of a replayed batch (keyed by its attributes) and ``tw.compile``'s signatures handed back the tensor, plan
or graph made for the other zero, and ``1 / x`` came out +inf where it must be -inf. A NaN key never matched itself
(a new graph, a new scalar tensor every call). All three now key values through ``protocol.graph.freeze``, floats by
their bits. And the compiled ``floor_divide(-0.0, 7.0)`` gave +0.0 where numpy (and the interpreter) give -0.0, so a
result changed when a hot plan swapped in.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

import tensorwire as tw
import tensorwire.nn.functional as F
from tensorwire.backends import executor as X
from tensorwire.backends.cpu import CompiledBackend, compiled
from tensorwire.protocol import dtypes as D

from .conftest import CLIENT_TOKEN

COMPILE_S = 120  # bound on one background compile (gcc, a cold kernel cache, a busy machine)
#: the order a program might use them in: the plan for +0.0 is made and replayed before -0.0 comes
ZEROS = [0.0, 0.0, 0.0, -0.0, -0.0, 0.0, -0.0]


def _same_bits(got, want) -> bool:
    got, want = np.asarray(got), np.asarray(want)
    return got.dtype == want.dtype and got.tobytes() == want.tobytes()


@pytest.fixture(scope="module")
def session(cluster):
    """A user's session on the module's cluster (tests/security/conftest.py), the default one while it runs."""
    s = tw.connect(cluster.address, token=CLIENT_TOKEN)
    yield s
    s.close()
    tw.set_session(None)


def test_a_cached_scalar_for_zero_is_not_handed_out_for_minus_zero(session):
    x = tw.ones(3)
    assert _same_bits((x * 0.0).numpy(), np.zeros(3, np.float32))  # caches the 0-d tensor for 0.0
    assert _same_bits((1 / (x * -0.0)).numpy(), np.full(3, -np.inf, np.float32))
    z = x * -0.0
    assert np.signbit((z + 0.0).numpy()).sum() == 0 and np.signbit((z + -0.0).numpy()).all()


PLANNED = {  # an op whose float attribute reaches the plan: (what the client runs, what numpy gives)
    "pad": (lambda y, v: F.pad(y, (1, 1), value=v), lambda a, v: np.pad(a, 1, constant_values=v)),
    "clamp": (lambda y, v: y.clamp(min=-1.0, max=v), lambda a, v: np.minimum(np.maximum(a, -1), np.float32(v))),
    "nan_to_num": (lambda y, v: (y * float("nan")).nan_to_num(nan=v), lambda a, v: np.full_like(a, v)),
    "leaky_relu": (lambda y, v: F.leaky_relu(-y, negative_slope=v), lambda a, v: -a * np.float32(v)),
    "full": (lambda y, v: tw.full((2,), v), lambda a, v: np.full(2, v, np.float32)),
    "fill_": (lambda y, v: y.clone().fill_(v), lambda a, v: np.full_like(a, v)),
}


@pytest.mark.parametrize("op", sorted(PLANNED))
def test_a_replayed_plan_does_not_keep_the_other_zeros_attribute(session, op):
    """The same batch with -0.0 in place of 0.0 (an attribute, a dynamic value) after its plan was replayed: the
    worker runs the -0.0 one, not the plan made for 0.0."""
    run, ref = PLANNED[op]
    y = tw.ones(2)
    a = y.numpy()
    for v in ZEROS:
        got = (1 / run(y, v)).numpy()
        with np.errstate(divide="ignore", invalid="ignore"):
            want = (np.float32(1) / ref(a, v)).astype(np.float32)
        assert _same_bits(got, want), f"{op} with {v!r}: {got} (numpy: {want})"


def test_a_compiled_function_called_with_minus_zero_does_not_replay_the_zero_graph(session):
    """The graph recorded for ``k=0.0`` replays (the 4th call); then ``k=-0.0`` must record its own."""
    @tw.compile
    def inv(t, k):
        return 1 / (t * k)

    y = tw.ones(2)
    for v in [0.0] * 4 + [-0.0] * 4 + [0.0, -0.0]:
        want = np.full(2, -np.inf if np.signbit(v) else np.inf, np.float32)
        assert _same_bits(inv(y, v).numpy(), want), v
    # each zero: three calls recorded (the first makes the scalar tensor), then replays; no graph shared
    assert inv.stats == {"traces": 6, "replays": 4}


def test_a_nan_argument_finds_its_compiled_graph_again(session):
    """Before: a NaN key never matched (``nan != nan``), so every call with a fresh NaN recorded a new graph."""
    @tw.compile
    def scale(t, k):
        return t * k

    y = tw.ones(2)
    for _ in range(5):
        assert np.isnan(scale(y, float("nan")).numpy()).all()  # a fresh NaN object each call, as computed ones are
    assert scale.stats == {"traces": 3, "replays": 2}  # as for any other scalar (test_compile.py)


VALUES = [0.0, -0.0, 7.0, -7.0, 0.5, -0.5, 3.5, -3.5, 1e-300, -1e-300, 1e300, -1e300, np.inf, -np.inf, np.nan, 2.0]


@pytest.mark.skipif(compiled.runtime() is None, reason=f"no C compiler: {compiled.why_not()}")
@pytest.mark.parametrize("op", ["floor_divide", "remainder"])
@pytest.mark.parametrize("npdt", [np.float64, np.float32])
def test_floor_divide_and_remainder_keep_numpys_signs_when_a_hot_plan_swaps_in(op, npdt, monkeypatch):
    """``-(-(a op b))`` (three numpy calls, one fused kernel: a plan worth compiling) for every pair of signed
    zeros, halves, infinities, NaN and values whose quotient underflows, interpreted and then compiled (the hot plan
    the worker swaps in after two runs): bit for bit numpy's each time, the sign of a zero included."""
    dt = D.from_numpy(np.dtype(npdt))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (1e300 is inf in float32)
        pairs = np.array(list(itertools.product(VALUES, VALUES)), np.float64).astype(npdt)
    a, b = np.ascontiguousarray(pairs[:, 0]), np.ascontiguousarray(pairs[:, 1])
    with np.errstate(all="ignore"):
        want = getattr(np, op)(a, b)
    monkeypatch.setenv(compiled.BUILD_RUNS_ENV, "0")  # (compiled once hot, its kernels cached or not)
    dev = CompiledBackend(min_work=1 << 20, hot_runs=2, trial_runs=0).open(0)  # (taken unmeasured, whatever is faster)
    plan = X.compile_plan(dev, [[op, [-1, -2], None], ["neg", [0], None], ["neg", [1], None]],
                          [(a.shape, dt), (b.shape, dt)])
    out = plan.node_slot[-1]

    def mismatches() -> list[str]:
        with np.errstate(all="ignore"):
            got = X.run_plan(dev, plan, [a, b], [10, 11, 12], {}, [], {out})[12]
        return [f"{op}({a[j]!r}, {b[j]!r}) = {got[j]!r}, numpy {want[j]!r}" for j in range(len(a))
                if got[j:j + 1].tobytes() != want[j:j + 1].tobytes()]

    for _ in range(2):  # interpreted; the second run starts the compile
        assert not mismatches()
    assert plan.tier.done.wait(COMPILE_S) and plan.tier.take(plan) and plan.hot
    bad = mismatches()
    assert not bad, bad[:6]
