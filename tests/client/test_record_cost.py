"""What a recorded program costs the client (issue 37): ops recorded per Python call, round trips per value read,
and the collector's settings in a client process. Ops are counted at ``Session.record``, round trips at
``Session._wait`` (every answer the client waits for)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import tensorwire as tw
from tensorwire import views as V
from tensorwire.indexing import _basic_parts, _expand_key
from tensorwire.protocol.graph import attrs_key

from ._calls import counted


@pytest.mark.parametrize("dim", [0, 1, -2, 2])
def test_stack_records_one_cat_and_one_reshape(session, dim):
    xs = [np.random.default_rng(i).standard_normal((3, 4)).astype(np.float32) for i in range(16)]
    ts = [tw.tensor(x) for x in xs]
    with counted(session, "record") as (n, ops):
        out = tw.stack(ts, dim)
    assert ops == ["cat", "reshape"] if dim != 2 else ops.count("cat") == 1
    np.testing.assert_array_equal(out.numpy(), np.stack(xs, dim))


def test_stack_gradient_reaches_every_input(session):
    rng = np.random.default_rng(0)
    xs = [tw.tensor(rng.standard_normal((2, 3)).astype(np.float32), requires_grad=True) for _ in range(3)]
    w = rng.standard_normal((2, 3, 3)).astype(np.float32)
    (tw.stack(xs, 1) * tw.tensor(w)).sum().backward()
    for i, x in enumerate(xs):
        np.testing.assert_allclose(x.grad.numpy(), w[:, i, :])


def test_stack_of_0d_and_empty_tensors(session):
    assert tw.stack([tw.tensor(1.0), tw.tensor(2.0)]).tolist() == [1.0, 2.0]
    assert tuple(tw.stack([tw.zeros(0), tw.zeros(0)]).shape) == (2, 0)


def test_a_slice_is_recorded_with_the_key_inference_would_give(session):
    """A view step hands ``Session.record`` its node's attrs key and meta (no inference): they must be what
    ``attrs_key`` and inference give, or plans would be keyed wrongly."""
    t = tw.zeros(5, 6, 7)
    for key in [(1,), (slice(1, 4),), (slice(None), 2), (slice(0, 5, 2), slice(1, 6, 3), 3), (-1, slice(2, 2))]:
        step = V.Slice(*_basic_parts(t, _expand_key(t, key)), t._shape)
        s = step._sliced(t)
        attrs = {"starts": step.starts, "stops": step.stops, "steps": step.steps}
        assert step._known[0] == attrs_key("slice", attrs)
        assert step._known[1] == (s._shape, s.dtype)
    for shape in [(2, 3), (), (1,)]:
        assert V.reshape_key(shape) == attrs_key("reshape", {"shape": list(shape)})


def test_indexing_an_element_records_a_slice_and_a_reshape_in_one_call(session):
    x = tw.rand(6, 1, 57)  # (a device's value: the add below is the device's, not the client's)
    with counted(session, "record") as (n, ops), counted(session, "defer_view") as (_, deferred):
        e = x[2]  # (one lazy node for both, see test_lazy_nodes; made by Session.defer_view, indexing's shortcut)
        w = x[1:3]  # (rows: a light window, views.basic_view, no node until read)
        assert ops == [] and deferred == ["slice"]
        w._refresh()  # (read: its lazy slice, made by Session.defer_view too)
    assert ops == [] and deferred == ["slice", "slice"]
    session.flush()
    e + 0
    assert [n[1] for n in session._pending[-3:]] == ["slice", "reshape", "add"]


def test_a_view_of_a_known_value_stays_right_after_its_parent_changes(session):
    ix = tw.tensor([3, 1, 4, 1, 5])
    e, part = ix[2], ix[1:4]
    ix.add_(10)  # the views see the update, as torch's do
    assert int(e) == 14 and part.tolist() == [11, 14, 11]
    f = ix[0]
    ix[0] = 7
    assert int(f) == 7 and ix.tolist() == [7, 11, 14, 11, 15]


def test_reading_a_list_of_losses_after_a_loop_costs_one_round_trip(session):
    w = tw.randn(8, 8)
    losses = []
    for _ in range(12):
        w = w * 0.5 + 0.1
        losses.append((w * w).mean().detach())
    want = [float(x) for x in np.asarray([lv.numpy() for lv in losses[:1]])]  # (one read: warms nothing else)
    with counted(session, "_wait") as (n, _):
        got = [lv.item() for lv in losses]
    assert n[0] == 1
    assert got[0] == want[0]
    ref = w.numpy()  # the last one, checked against a value fetched on its own
    np.testing.assert_allclose(got[-1], np.float32((ref * ref).mean()), rtol=1e-5)


def test_values_fetched_along_are_the_right_ones(session):
    a = [tw.tensor(float(i)) * 2 for i in range(20)]
    b = tw.arange(10).float().sum()  # 45
    assert [x.item() for x in a] == [2.0 * i for i in range(20)]
    assert b.item() == 45.0
    c = a[3]
    c.add_(1)  # a new value under the same tensor: read again, right
    assert c.item() == 7.0 and a[3].item() == 7.0


def test_a_failed_value_fetched_along_does_not_fail_the_read(session):
    bad = tw.zeros(3)[tw.tensor([0, 5])].sum()  # (an index out of range on the device: fails when it runs)
    good = tw.ones(4).sum()
    assert good.item() == 4.0  # (bad, unread, went along: its failure is its reader's)
    with pytest.raises(tw.TensorwireError):
        bad.item()


_GC_SCRIPT = """
import gc, sys
import tensorwire as tw
if sys.argv[1] == "custom":
    gc.set_threshold(1000, 20, 20)
s = tw.connect(sys.argv[2])
print(gc.get_threshold(), gc.get_freeze_count() > 0)
s.close()
"""


@pytest.mark.parametrize("mode, want", [
    ("default", "(20000, 10, 10) True"),
    ("off", "(700, 10, 10) False"),  # TENSORWIRE_CLIENT_GC=0
    ("custom", "(1000, 20, 20) False"),  # the process chose its own: left alone
])
def test_a_client_process_tunes_the_collector_once_unless_told_not_to(mode, want, cluster):
    """(The client process connects to the module's cluster: the tuning is the client's, at connect.)"""
    env = dict(os.environ)
    if mode == "off":
        env["TENSORWIRE_CLIENT_GC"] = "0"
    out = subprocess.run([sys.executable, "-c", _GC_SCRIPT, mode, cluster.address], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == want


def test_scalar_integer_host_arithmetic_matches_the_cpu_kernels():
    """The client's own int64 add/sub/mul of two 0-d values (``known_values.host_op``'s fast path) gives what the
    CPU worker's numpy kernels give, overflow included."""
    import itertools

    from tensorwire.backends.cpu.kernels import KERNELS
    from tensorwire.known_values import host_op
    from tensorwire.protocol import dtypes as D

    vals = [0, 1, -1, 7, -5, 2**62, 2**63 - 1, -2**63, 123456789012345]
    for op in ["add", "sub", "mul"]:
        for a, b in itertools.product(vals, vals):
            x, y = np.array(a, np.int64), np.array(b, np.int64)
            with np.errstate(all="ignore"):
                want = np.asarray(KERNELS[op]([x, y], {}, (), D.int64), dtype=np.int64)
            got = host_op(op, [x, y], None, (), D.int64)
            assert got.dtype == want.dtype and got.shape == want.shape and got == want, (op, a, b)
