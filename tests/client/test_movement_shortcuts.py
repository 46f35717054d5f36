"""The client's shortcuts for movement ops and basic indexing (issue 37): ``views.make_view`` (``permute``, ``T``,
``mT``, ``t``, ``transpose``, ``view``/``reshape``, ``unsqueeze``, ``flatten``, ``expand``, with their checked arguments
memoised per shape), ``views.basic_view``'s grad-tracked route and ``indexing._basic_tuple`` (a tuple key read in one
pass) record what the general path (``Tensor._view`` through a view step's ``forward``) records: the same nodes (lazy
or pending, with or without autograd), the same view of the same root base, the same values, gradients and errors."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw
from tensorwire import indexing as I
from tensorwire import session as S
from tensorwire import views as V
from tensorwire.protocol.errors import IndexOutOfRange, ShapeError
from tensorwire.protocol.ops import infer

try:
    import torch
except ImportError:  # (PyTorch is optional: the tests that compare with it skip)
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is the reference here (pip install torch==2.13.0)")

#: view chains over ``w`` (128 x 18), ``w3`` (4 x 8 x 18), ``v`` (3 x 5 x 7), ``e`` (7,) and ``s0`` (0-d)
CHAINS = [
    "w[:, :1]", "w[3]", "w[2:5]", "w[..., 0]", "w[None, 1:3, ::2]", "w[-1, 5:-3]", "w[:, 3]", "w[1][2:4]",
    "w[:, :1].T", "w.T", "w.mT", "w.t()", "w.transpose(0, 1)", "w.transpose(1, 1)", "w.swapaxes(-1, 0)",
    "w3.permute(0, 2, 1)", "w3.permute((2, 0, 1)).permute(1, 2, 0)", "w3.permute(0, 1, 2)", "w.view(64, 36)",
    "w.view(-1)", "w.reshape((2, 64, 18))", "w.reshape(w3.shape[::-1] + (4,))", "w.unsqueeze(0)", "w.unsqueeze(-1)",
    "w3.flatten(1)", "w3.flatten()", "w3.flatten(0, -2)", "w.contiguous()", "w.expand(2, 128, 18)",
    "w[:, :1].expand(128, 4)", "w[:, :1].expand(-1, 4)", "w[:1].expand(w.shape)", "w3.transpose(-2, -1).reshape(4, -1)",
    "w3[1].T[0]", "w.view(128, 18)", "v.T", "v.mT", "w3.squeeze()", "w[:1].squeeze(0)", "w.unsqueeze(1).squeeze(1)",
    "w[:, ::3]", "w[..., None]", "w[1, ..., 2:]", "w[(3,)]", "w[()]", "w[:, :]", "w.data[2]", "w.data.T", "e.T",
    "e.t()", "e.transpose(0, 0)", "s0.T", "s0.reshape(1)", "s0.flatten()", "s0.transpose(0, 0)",
    "w[2:3].view(18).unsqueeze(1)", "w3.movedim(0, -1)",
]


def _general(monkeypatch):
    """Routes basic indexing and the movement methods through the general path (``Tensor._view``). (The replacements
    are compiled as the client's own code, which the search for the user's line of a node skips, as it skips theirs.)
    """
    def client_code(src: str):
        return eval(compile(src, V.__file__, "eval"), {"Slice": V.Slice})

    monkeypatch.setattr(V, "make_view", client_code("lambda x, step, op, attrs, known: x._view(step)"))
    monkeypatch.setattr(V, "basic_view", client_code(
        "lambda x, starts, stops, steps, out, lens=None: x._view(Slice(starts, stops, steps, out, x._shape))"))
    monkeypatch.setattr(I, "_basic_tuple", lambda shape, key: None)


def _no_light_windows(monkeypatch):
    """Makes ``views.basic_view`` give a row slice the lazy view it gives any other slice, not a light window (no node
    until read: ``test_light_windows.py``), so that what the shortcuts record is comparable with the general path."""
    def lazy_view(s, x, b, step, out, dt):
        t = s.defer_view("slice", x, {"starts": step.starts, "stops": step.stops, "steps": step.steps},
                         step._key_meta(x))
        V.mark_view(t, x, step)
        V.derive_view(t, x, step.on_host)
        return t

    monkeypatch.setattr(V, "_light_window", lazy_view)


def _rel(i, base: int):
    """Handle ``i`` counted from ``base`` (a handle made before: as it is)."""
    return i - base if i is not None and i >= base else i


def _grad_chain(t) -> list:
    """``t``'s autograd Nodes, following the first edge that is a Node: ``[(op, attrs, shape, dtype), ...]``."""
    out, g = [], t.grad_fn
    while g is not None:
        out.append((g.op, g.attrs, g.shape, g.dtype, [(e[4], e[5]) for e in g.entries]))
        g = next((e[3] for e in g.entries if e[3] is not None and not isinstance(e[3], tw.Tensor)), None)
    return out


#: a view step's slots that cache what its other fields give (filled when first used)
_CACHES = ("_known", "_key")


def _plain(x):
    """``x`` with the numpy arrays in it (a ``const`` node's frame: a copy's value the client worked out) as
    comparable tuples."""
    if isinstance(x, np.ndarray):
        return ("array", x.dtype.str, x.shape, x.tobytes())
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x


def _trace(session, env: dict, chain: str, grad: bool):
    """What evaluating ``chain`` records: the pending and lazy nodes (handles counted from the first one made), the
    result's meta, view and autograd chain, and its value."""
    session.flush()
    base = next(session._ids)
    code = compile(chain, "<chain>", "eval")  # (one line for every node: the user's line they record)
    if grad:
        r = eval(code, dict(env))
    else:
        with tw.no_grad():
            r = eval(code, dict(env))
    pending = [(_rel(h, base), op, [_rel(i, base) for i in ids], *map(_plain, rest))
               for h, op, ids, *rest in session._pending]
    lazy = sorted((_rel(k, base), op, [_rel(i, base) for i in ids], _plain(attrs), dev, metas, akey,
                   _rel(alias, base), then)
                  for k, (op, ids, attrs, dev, metas, akey, alias, then) in session._lazy.items() if k >= base)
    view = (r._base is None, None if r._base is None else r._base._id, r._base_version,
            [(type(s).__name__, {a: getattr(s, a) for a in getattr(s, "__slots__", ()) if a not in _CACHES})
             for s in (r._vsteps or ())])
    return (pending, lazy, _rel(r._id, base), r.shape, r.dtype, r.requires_grad, view, _grad_chain(r),
            _plain(session._known.gives(r))), r


def _env(requires_grad: bool) -> dict:
    rng = np.random.default_rng(0)
    return dict(w=tw.tensor(rng.standard_normal((128, 18)).astype(np.float32), requires_grad=requires_grad),
                w3=tw.tensor(rng.standard_normal((4, 8, 18)).astype(np.float32), requires_grad=requires_grad),
                v=tw.tensor(rng.standard_normal((3, 5, 7)).astype(np.float32), requires_grad=requires_grad),
                e=tw.tensor(np.arange(7, dtype=np.int64)), s0=tw.tensor(2.5, requires_grad=requires_grad))


@pytest.mark.parametrize("mode", ["grad", "no_grad", "plain"])
def test_the_shortcuts_record_what_the_general_path_records(session, monkeypatch, mode):
    env = _env(mode != "plain")
    _no_light_windows(monkeypatch)
    fast = {}
    for chain in CHAINS:
        _trace(session, env, chain, mode != "no_grad")  # (the first time fills the memos: the second reads them)
        fast[chain], r = _trace(session, env, chain, mode != "no_grad")
        fast[chain] += (r.tolist(),)
    with monkeypatch.context() as m:
        _general(m)
        for chain in CHAINS:
            slow, r = _trace(session, env, chain, mode != "no_grad")
            assert fast[chain] == slow + (r.tolist(),), chain


@needs_torch
def test_grad_tracked_views_record_no_inference_and_give_torch_s_gradients(session, monkeypatch):
    seen = []
    monkeypatch.setattr(S, "infer", lambda op, metas, attrs, akey=None: seen.append(op) or infer(op, metas, attrs,
                                                                                                   akey))
    rng = np.random.default_rng(1)
    a = rng.standard_normal((4, 8, 18)).astype(np.float32)
    w, tw_ = tw.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    coef = rng.standard_normal(2000).astype(np.float32)
    chains = [lambda x: x[:, :1].T, lambda x: x[1].mT[2:], lambda x: x.permute(2, 0, 1)[..., 3],
              lambda x: x.transpose(0, 1).reshape(8, -1)[:, ::5], lambda x: x.flatten(1).unsqueeze(0).expand(3, -1, -1),
              lambda x: x.view(32, 18).t()[None, 4], lambda x: x[-1, 2:6, 1:2].squeeze(-1)]
    for k, f in enumerate(chains):
        seen.clear()
        got = f(w)
        assert seen == [] and got.grad_fn is not None, k  # (each node's key and meta given, still tracked)
        want = f(tw_)
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy())
        c = coef[:want.numel()].reshape(want.shape)
        (got * tw.tensor(c)).sum().backward()
        (want * torch.tensor(c)).sum().backward()
        np.testing.assert_allclose(w.grad.numpy(), tw_.grad.numpy(), rtol=1e-6, atol=1e-6)


@needs_torch
def test_stale_views_are_brought_up_to_date_first(session):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((6, 5)).astype(np.float32)
    x = tw.tensor(a)
    v = x[1:4]  # a view whose base then changes: its views read the base's new value
    x.mul_(2)
    np.testing.assert_array_equal(v.T.numpy(), (a * 2)[1:4].T)
    np.testing.assert_array_equal(v[:, 2].numpy(), (a * 2)[1:4, 2])
    x.add_(1)
    np.testing.assert_array_equal(v.view(-1).numpy(), (a * 2 + 1)[1:4].reshape(-1))
    for lib, w in ((tw, tw.tensor(a, requires_grad=True)), (torch, torch.tensor(a, requires_grad=True))):
        b = w * 1  # a non-leaf, changed in place after a view of it was taken: autograd sees the new value
        vb = b[2:]
        b.mul_(3)
        out = vb.T[1:, ::2] * vb.permute(1, 0)[1:, ::2] + vb[:, :2].unsqueeze(0).sum()
        out.sum().backward()
        if lib is tw:
            g, val = w.grad.numpy(), out.detach().numpy()
        else:
            np.testing.assert_allclose(g, w.grad.numpy(), rtol=1e-5)
            np.testing.assert_allclose(val, out.detach().numpy(), rtol=1e-5)


def test_errors_are_torch_s_whether_or_not_the_arguments_were_seen_before(session):
    x = tw.tensor(np.zeros((2, 3, 4), dtype=np.float32), requires_grad=True)
    y = x.permute(2, 0, 1) + x.transpose(0, 2).permute(0, 2, 1)  # (remembered: the same dims as other types fail)
    y = x.view(6, 4) + x.flatten(0, 1) + x.unsqueeze(1).squeeze(1).reshape(6, 4)
    del y
    cases = [
        (lambda: x.permute(0, 0, 1), ShapeError, r"permute\(\): dims \[0, 0, 1\] do not match the 3 dims"),
        (lambda: x.permute(0, 1), ShapeError, "do not match the 3 dims"),
        (lambda: x.permute(2.0, 0, 1), TypeError, "expected a sequence of ints"),
        (lambda: x.permute(True, 0, 2), TypeError, "expected a sequence of ints"),
        (lambda: x.permute(0, 1, 3), IndexOutOfRange, "dimension out of range"),
        (lambda: x.transpose(0, 3), IndexOutOfRange, r"expected to be in range of \[-3, 2\], but got 3"),
        (lambda: x.transpose(True, 2), Exception, "a dim must be an int"),
        (lambda: x.transpose(np.int64(0), 2), Exception, "a dim must be an int"),
        (lambda: x.view(5, 4), ShapeError, r"shape '\[5, 4\]' is invalid for input of size 24"),
        (lambda: x.view(-1, -1), ShapeError, "only one dimension can be inferred"),
        (lambda: x.view(6.0, 4), TypeError, "expected a sequence of ints"),
        (lambda: x.unsqueeze(4), IndexOutOfRange, "dimension out of range"),
        (lambda: x.unsqueeze(1.0), Exception, "a dim must be an int"),
        (lambda: x.flatten(2, 1), ShapeError, "start_dim cannot come after end_dim"),
        (lambda: x.flatten(0, 3), IndexOutOfRange, "dimension out of range"),
        (lambda: x.expand(3, 3, 4).numpy(), ShapeError, ""),
        (lambda: x[0].t(), None, None),
        (lambda: x.t(), ShapeError, r"t\(\) expects a tensor with <= 2 dimensions"),
        (lambda: x[0, 0].mT, ShapeError, "mT is only supported on matrices"),
        (lambda: x[..., ...], IndexError, "single ellipsis"),
        (lambda: x[0, 0, 0, 0], IndexOutOfRange, "too many indices for tensor of dimension 3"),
        (lambda: x[:, 3], IndexOutOfRange, "index 3 is out of bounds for dimension 1 with size 3"),
        (lambda: x[0, -4], IndexOutOfRange, "index -4 is out of bounds for dimension 1 with size 3"),
        (lambda: x[:, ::0], ValueError, "step must be greater than zero"),
        (lambda: x[1:, ::-1], ValueError, "step must be greater than zero"),
        (lambda: x[0, 1.5], TypeError, "indices must be integers"),
    ]
    for k, (f, err, match) in enumerate(cases):
        if err is None:
            assert tuple(f().shape) == (4, 3), k
            continue
        with pytest.raises(err, match=match):
            f()
    with pytest.raises(IndexOutOfRange):  # (torch: a 0-d tensor takes 0 and -1 as its dim, for 0-d ops)
        tw.tensor(1.0).unsqueeze(2)
    assert x[True, 0].shape == (1, 3, 4) and x[np.int64(1), 0:2].shape == (2, 4)  # (the general path: as before)
    assert x[0, tw.tensor(2)].shape == (4,) and x[0, [0, 2]].shape == (2, 4)
