"""Autograd semantics on a real cluster: backward, grad, create_graph, caching, in-place rules, Function."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw

# test_service_down_then_up kills the autograd service and starts another: a cluster of its own (tests/conftest.py)
pytestmark = pytest.mark.own_cluster


def T(a, requires_grad=True):
    return tw.tensor(np.asarray(a, dtype=np.float64), requires_grad=requires_grad)


def test_polynomial_fit_matches_numpy(session):
    """The issue's example (300 steps) against the same loop with hand-written gradients in numpy."""
    xn = np.linspace(-3.14, 3.14, 2000, dtype=np.float32)
    x = tw.linspace(-3.14, 3.14, 2000)
    y = tw.sin(x)
    params = [tw.randn((), requires_grad=True) for _ in range(4)]
    a, b, c, d = params
    pn = [np.float32(p.item()) for p in params]
    for _ in range(300):
        y_pred = a + b * x + c * x ** 2 + d * x ** 3
        loss = (y_pred - y).pow(2).sum()
        loss.backward()
        with tw.no_grad():
            for p in params:
                p -= 1e-6 * p.grad
                p.grad = None
    yn = np.sin(xn)
    for _ in range(300):
        an, bn, cn, dn = pn
        yp = an + bn * xn + cn * xn ** 2 + dn * xn ** 3
        gy = 2.0 * (yp - yn)
        grads = [gy.sum(), (gy * xn).sum(), (gy * xn ** 2).sum(), (gy * xn ** 3).sum()]
        pn = [p - np.float32(1e-6) * g for p, g in zip(pn, grads)]
    an, bn, cn, dn = pn
    ref = float(((an + bn * xn + cn * xn ** 2 + dn * xn ** 3 - yn) ** 2).sum())
    last = float(((a + b * x + c * x ** 2 + d * x ** 3 - y) ** 2).sum().item())
    assert loss.grad_fn is not None and "Backward" in repr(loss)
    np.testing.assert_allclose(last, ref, rtol=1e-3)
    for p, q in zip(params, pn):
        assert p.is_leaf and p.requires_grad and p.grad is None
        np.testing.assert_allclose(p.item(), q, rtol=1e-3, atol=1e-5)


def test_training_loop_asks_the_service_once(session):
    w = tw.randn(4, 3, requires_grad=True)
    xs = tw.randn(8, 4)
    before = tw.autograd.service_stats()
    first = tw.autograd.stats.requests
    for step in range(5):
        loss = (xs @ w).tanh().pow(2).mean()
        loss.backward()
        with tw.no_grad():
            w -= 0.1 * w.grad
            w.grad = None
        if step == 0:
            after_first = tw.autograd.stats.requests
    after = tw.autograd.service_stats()
    assert after_first == first + 1
    assert tw.autograd.stats.requests == after_first  # steps 2..5 replay the cached backward graph
    # one backward request reached the service (and the two stats requests themselves)
    assert after["backward"] == before["backward"] + 1
    assert after["requests"] == before["requests"] + 2


def test_grad_accumulates_and_retain_graph(session):
    x = T([1.0, 2.0, 3.0])
    y = (x * x).sum()
    y.backward(retain_graph=True)
    g1 = x.grad
    np.testing.assert_allclose(x.grad.numpy(), [2, 4, 6])
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [4, 8, 12])
    assert x.grad is g1  # accumulated in place, as torch
    with pytest.raises(tw.autograd.AutogradError, match="backward through the graph a second time"):
        y.backward()
    # a graph that needs no saved value can be walked again
    z = (x + 1).sum()
    z.backward()
    z.backward()
    np.testing.assert_allclose(x.grad.numpy(), [6, 10, 14])


def test_second_derivative(session):
    x = T([1.0, -2.0, 3.0])
    y = x ** 3
    (g,) = tw.autograd.grad(y.sum(), x, create_graph=True)
    assert g.requires_grad and g.grad_fn is not None
    np.testing.assert_allclose(g.detach().numpy(), 3 * np.array([1.0, 4.0, 9.0]))
    (g2,) = tw.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(g2.numpy(), 6 * np.array([1.0, -2.0, 3.0]))
    # backward(create_graph=True) then backward through x.grad
    w = T([0.5, 2.0])
    (w.sin() * w).sum().backward(create_graph=True)
    gw = w.grad
    w.grad = None
    gw.sum().backward()
    wn = np.array([0.5, 2.0])
    np.testing.assert_allclose(w.grad.numpy(), 2 * np.cos(wn) - wn * np.sin(wn), rtol=1e-12)


def test_no_grad_detach_and_modes(session):
    x = T([1.0, 2.0])
    with tw.no_grad():
        y = x * 2
    assert not y.requires_grad and y.grad_fn is None
    assert tw.is_grad_enabled()
    with tw.no_grad():
        assert not tw.is_grad_enabled()
        with tw.enable_grad():
            z = x * 2
    assert z.requires_grad
    tw.set_grad_enabled(False)
    try:
        assert not (x * 2).requires_grad
    finally:
        tw.set_grad_enabled(True)

    @tw.no_grad()
    def f(t):
        return t * 3

    assert not f(x).requires_grad
    d = (x * 2).detach()
    assert not d.requires_grad and d.is_leaf
    np.testing.assert_allclose(d.numpy(), [2, 4])
    loss = (x * d).sum()
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), [2, 4])  # d is a constant
    i = tw.tensor([1, 2])
    assert not (x.argmax() + i).requires_grad and not (x > 1).requires_grad


def test_is_leaf_grad_fn_and_retain_grad(session):
    x = T([1.0, 2.0, 3.0])
    assert x.is_leaf and x.grad_fn is None
    h = x * 2
    assert not h.is_leaf and h.grad_fn.name() == "MulBackward0"
    assert "grad_fn=<MulBackward0>" in repr(h)
    h.retain_grad()
    assert h.retains_grad
    out = (h ** 2).sum()
    out.backward()
    np.testing.assert_allclose(h.grad.numpy(), [4, 8, 12])
    np.testing.assert_allclose(x.grad.numpy(), [8, 16, 24])
    k = x + 1
    (k * 3).sum().backward()
    assert k.grad is None  # not retained
    c = tw.tensor([1.0]).requires_grad_()
    assert c.requires_grad and c.is_leaf
    with pytest.raises(TypeError):
        tw.tensor([1, 2]).requires_grad_()


def test_autograd_grad_allow_unused_and_seeds(session):
    x = T([1.0, 2.0])
    y = T([3.0, 4.0])
    u = T([5.0])
    out = x * y
    gx, gy = tw.autograd.grad(out, [x, y], grad_outputs=tw.tensor([1.0, 10.0], dtype=tw.float64),
                              retain_graph=True)
    np.testing.assert_allclose(gx.numpy(), [3, 40])
    np.testing.assert_allclose(gy.numpy(), [1, 20])
    assert x.grad is None and y.grad is None  # grad() accumulates nothing
    with pytest.raises(tw.autograd.AutogradError, match="not have been used"):
        tw.autograd.grad(out.sum(), [x, u], retain_graph=True)
    gx, gu = tw.autograd.grad(out.sum(), [x, u], allow_unused=True, retain_graph=True)
    assert gu is None
    np.testing.assert_allclose(gx.numpy(), [3, 4])
    # gradient w.r.t. an intermediate value
    h = x.exp()
    z = (h * h).sum()
    (gh,) = tw.autograd.grad(z, h)
    np.testing.assert_allclose(gh.numpy(), 2 * np.exp([1.0, 2.0]))
    with pytest.raises(tw.autograd.AutogradError, match="only for scalar outputs"):
        (x * 2).backward()
    with pytest.raises(tw.autograd.AutogradError, match="does not require grad"):
        tw.tensor([1.0]).sum().backward()


def test_autograd_grad_and_backward_take_torchs_arguments(session):
    """torch's full signatures: ``grad(..., only_inputs=True)`` as WGAN-GP's ``gan_toy.py`` and its forks call it (a
    TypeError until session 59), a sixth positional argument that is ``only_inputs`` (not ``allow_unused``), inputs
    given as a dict, ``is_grads_batched``, and ``backward``'s deprecated ``grad_variables``; against torch where it
    is installed."""
    import warnings

    def run(lib):
        x = lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)
        y = lib.tensor([3.0], dtype=lib.float64, requires_grad=True)
        out = (x * x).sum() * 3
        (g,) = lib.autograd.grad(outputs=out, inputs=x, grad_outputs=lib.ones_like(out), create_graph=True,
                                 retain_graph=True, only_inputs=True)
        (g2,) = lib.autograd.grad(out, x, None, True, False, True)  # (the sixth: only_inputs)
        with pytest.raises(RuntimeError, match="appears to not have been used"):
            lib.autograd.grad(out, [x, y], None, True, False, True)
        d = lib.autograd.grad(out, {"a": x, "b": y}, retain_graph=True, allow_unused=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            lib.autograd.grad(out, x, retain_graph=True, only_inputs=False)
        assert any(issubclass(w.category, FutureWarning) for w in caught)
        with pytest.raises(ValueError, match="allow_unused"):
            lib.autograd.grad(out, x, retain_graph=True, materialize_grads=True, allow_unused=False)
        with pytest.raises(RuntimeError, match="cannot be empty"):
            lib.autograd.grad(out, [], retain_graph=True)
        with pytest.raises(TypeError, match="must be a dict"):
            lib.autograd.grad(out, _Mapping({"a": x}), retain_graph=True)
        with pytest.warns(FutureWarning, match="grad_variables"):
            lib.autograd.backward(out, grad_variables=lib.ones_like(out), retain_graph=True)
        with pytest.raises(RuntimeError, match="both passed"), pytest.warns(FutureWarning):
            lib.autograd.backward(out, lib.ones_like(out), True, False, lib.ones_like(out))
        lib.autograd.backward([out], inputs={"y": y, "x": x})  # (a dict of inputs: its values)
        return (g.detach().numpy().copy(), g2.detach().numpy().copy(), sorted(d), d["b"],
                d["a"].detach().numpy().copy(), x.grad.numpy().copy())

    got = run(tw)
    np.testing.assert_allclose(got[0], [6.0, 12.0])
    np.testing.assert_allclose(got[1], [6.0, 12.0])
    assert got[2] == ["a", "b"] and got[3] is None
    np.testing.assert_allclose(got[4], [6.0, 12.0])
    np.testing.assert_allclose(got[5], [12.0, 24.0])  # (grad_variables' backward, then the one with inputs)
    x = T([1.0])
    with pytest.raises(NotImplementedError, match="is_grads_batched"):
        tw.autograd.grad((x * 2).sum(), x, is_grads_batched=True)
    torch = pytest.importorskip("torch")
    want = run(torch)
    for a, b in zip(got, want):
        if isinstance(a, np.ndarray):
            np.testing.assert_allclose(a, b)
        else:
            assert a == b


class _Mapping(dict):
    """A mapping that is not a ``dict`` (torch refuses it as ``inputs``, and so do we)."""


def test_broadcast_views_indexing_and_devices(session):
    w = T(np.arange(6.0).reshape(2, 3))
    b = T([1.0, 2.0, 3.0])
    idx = tw.tensor([1, 0, 1])
    out = (w + b)[:, 1:].T.reshape(-1) * 2
    loss = out.sum() + w[idx].sum() + w.to("cpu:1").square().sum().to("cpu:0")
    loss.backward()
    wn = np.arange(6.0).reshape(2, 3)
    expect_w = np.array([[0, 2, 2], [0, 2, 2]], dtype=np.float64) + np.array([[1.0], [2.0]]) + 2 * wn
    np.testing.assert_allclose(w.grad.numpy(), expect_w)
    np.testing.assert_allclose(b.grad.numpy(), [0, 4, 4])
    assert w.grad.device == "cpu:0"


def test_inplace_rules(session):
    leaf = T([1.0, 2.0])
    with pytest.raises(tw.autograd.AutogradError, match="leaf Variable that requires grad"):
        leaf.add_(1)
    with pytest.raises(tw.autograd.AutogradError, match="view of a leaf Variable"):
        leaf[0:1].mul_(2)
    with tw.no_grad():
        leaf.add_(1)  # allowed
    assert leaf.is_leaf and leaf.requires_grad
    np.testing.assert_allclose(leaf.detach().numpy(), [2, 3])

    # a saved value modified in place: error at backward, naming the op
    x = T([1.0, 2.0])
    e = x.exp()
    loss = (e * 1.0).sum()
    e.add_(1)
    with pytest.raises(tw.autograd.AutogradError, match="modified by an inplace operation"):
        loss.backward()

    # in-place on a non-leaf whose old value nobody needs: fine, grad flows through the in-place op
    x = T([1.0, 2.0])
    h = x * 3
    h.add_(1)
    h.mul_(2)
    assert h.grad_fn.name() == "MulBackward0"
    h.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [6, 6])
    h = x * 3
    h.add_(1)
    h.mul_(h)  # needs h's old value, which the update overwrote: torch's error (and versions)
    with pytest.raises(tw.autograd.AutogradError, match="output 0 of AddBackward0, is at version 2; expected "
                                                        "version 1"):
        h.sum().backward()

    # writing a grad-requiring value into a plain tensor makes it part of the graph
    x = T([1.0, 2.0])
    buf = tw.zeros(4, dtype=tw.float64)
    buf[1:3] = x * x
    assert buf.requires_grad
    buf.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2, 4])
    # and a view of it is updated too
    x = T([1.0, 2.0])
    base = tw.zeros(2, 2, dtype=tw.float64)
    row = base[0]
    row.copy_(x * 5)
    assert base.requires_grad
    (base.sum() + row.sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), [10, 10])


def test_custom_function(session):
    class Cube(tw.autograd.Function):
        @staticmethod
        def forward(ctx, x, k):
            ctx.save_for_backward(x)
            ctx.k = k
            return x ** 3 * k

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3 * x ** 2 * ctx.k, None

    x = T([1.0, 2.0])
    y = Cube.apply(x, 2.0)
    assert y.requires_grad and y.grad_fn.name() == "CubeBackward"
    (y.sin()).sum().backward()
    xn = np.array([1.0, 2.0])
    np.testing.assert_allclose(x.grad.numpy(), np.cos(2 * xn ** 3) * 6 * xn ** 2, rtol=1e-12)

    class TwoOut(tw.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            return a * b, a + b

        @staticmethod
        def backward(ctx, gp, gs):
            return gp * 2 + gs, gp * 3 + gs  # deliberately not the true gradient: the engine must use it

    a, b = T([1.0]), T([2.0])
    p, s = TwoOut.apply(a, b)
    (p * 5 + s * 7).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [17])
    np.testing.assert_allclose(b.grad.numpy(), [22])
    assert tw.autograd.gradcheck(Cube.apply, (T([0.5, 1.5]), 3.0))
    # a custom function's input that comes through other ops, and a saved tensor modified in place
    x = T([1.0, 2.0])
    h = x * 1.0
    y = Cube.apply(h, 1.0)
    h.add_(1)
    with pytest.raises(tw.autograd.AutogradError, match="modified by an inplace operation"):
        y.sum().backward()


def test_service_down_then_up(cluster, session):
    x = T([1.0, 2.0])
    (x * x).sum().backward()  # warm
    tw.autograd.clear_cache()  # force a request
    cluster.services["autograd"].kill()
    with pytest.raises(tw.ServiceUnavailable, match="autograd"):
        (x.sin()).sum().backward()
    # the session and its tensors are unharmed
    np.testing.assert_allclose((x + 1).detach().numpy(), [2, 3])
    np.testing.assert_allclose(x.grad.numpy(), [2, 4])
    cluster.start_autograd()
    x.grad = None
    (x.sin()).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.cos([1.0, 2.0]))


def test_malformed_requests_do_not_harm_the_service(session):
    bad = [{"op": "backward", "g": {"nodes": [["no_such_op", [], None, 0]], "devs": ["cpu:0"]}},
           {"op": "backward", "g": {"nodes": [["exp", [-5], None, 0]], "devs": ["cpu:0"], "ext": []}},
           {"op": "backward", "g": "junk"},
           {"op": "backward", "g": {"ext": [[[2], "float64", 0], [[3], "float64", 0]],
                                    "nodes": [["matmul", [-1, -2], None, 0]], "devs": ["cpu:0"], "roots": [0],
                                    "targets": [-1]}},
           {"op": "backward", "g": {"ext": [[[2], "float64", 7]], "devs": ["cpu:0"]}},
           {"op": "nope"}]
    for h in bad:
        with pytest.raises(tw.TensorwireError):
            session.service_request("autograd", h)
    g = {"ext": [[[3], "float64", 0]], "nodes": [["exp", [-1], None, 0]], "devs": ["cpu:0"], "roots": [0],
         "targets": [-1]}
    h, _ = session.service_request("autograd", {"op": "backward", "g": g})
    bw = h["bw"]
    assert bw["grads"] == [len(bw["nodes"]) - 1]
    assert sorted(map(tuple, bw["ext"])) == [("n", 0), ("s", 0)]  # exp's rule reads its output, not its input
