"""tensorwire's Python-level signatures against torch 2.13's, and what the parameters they gained do.

:func:`mismatches` compares ``inspect.signature`` of each public callable torch defines in Python (functions, the
``__init__`` and methods of classes, the Python-defined ``Tensor`` methods) in the namespaces of
:data:`NAMESPACES` with tensorwire's callable of the same name: positional order, keyword names, which parameters
are optional, and simple defaults (:func:`_compare`'s rules). ``test_signatures_match_torch`` fails on any mismatch
that :data:`ALLOWED` does not list with its reason. Callables torch implements in C (``torch.add``) have no
inspectable signature and are not compared; neither are tensorwire's own names torch lacks.

Then, against torch: the weighted ``mse_loss``/``l1_loss``/``huber_loss`` (values and gradients), the forward hooks'
``prepend``/``with_kwargs``/``always_call``, ``split``'s parameter names, ``Hardtanh``'s deprecated keywords, the
``out=`` arguments, ``stft``'s ``align_to_window``, ``cdist``'s ``compute_mode``, and the rest of what changed with
the signatures."""

from __future__ import annotations

import importlib
import inspect
import math
import pickle
import warnings

import numpy as np
import pytest

import tensorwire as tw
import tensorwire.nn.functional as F

pytestmark = pytest.mark.usefixtures("session")

#: the namespaces compared, each by its name under ``torch`` and ``tensorwire`` ("": the top level; ``Tensor``: the
#: class, its Python-defined methods); the first a callable is reached through names it in the report
NAMESPACES = (
    "Tensor", "", "nn.functional", "nn", "nn.init", "nn.utils", "nn.utils.rnn", "nn.utils.parametrize",
    "nn.utils.parametrizations", "nn.parallel", "autograd", "autograd.functional", "optim", "optim.lr_scheduler",
    "optim.swa_utils",
    "utils.data", "utils.data.distributed", "utils.checkpoint", "linalg", "fft", "special", "distributions",
    "distributions.transforms", "distributions.constraints", "amp", "testing", "masked", "sparse", "signal.windows",
    "random", "serialization", "cuda", "mps", "accelerator", "backends.cudnn", "onnx", "jit", "cpu", "cpu.amp",
)

#: mismatches kept on purpose: the report's name -> why
ALLOWED: dict[str, str] = {}

#: a default that is none of these is not compared (a module object, a function, a sentinel)
_PLAIN = (type(None), bool, int, float, str)


def _module(root, name: str):
    if name == "Tensor":
        return root.Tensor
    return importlib.import_module(f"{root.__name__}.{name}") if name else root


def _plain(v):
    """``v`` as a comparable value: plain Python values as they are; each library's ``Size`` as a tuple, ``dtype``
    and ``device`` by name (torch's and tensorwire's are equal when they say the same); anything else None (not
    compared)."""
    kind = type(v).__name__
    if kind == "Size":
        return ("tuple", tuple(v))
    if kind in ("dtype", "device"):
        return (kind, str(v).removeprefix("torch."))
    if isinstance(v, (tuple, list)):
        items = [_plain(x) for x in v]
        return None if None in items else (type(v).__name__, tuple(items))
    if isinstance(v, _PLAIN):
        return (type(v).__name__ if not isinstance(v, (int, float)) or isinstance(v, bool) else "number", v)
    return None


def _same_default(a, b) -> bool:
    pa, pb = _plain(a), _plain(b)
    if pa is None or pb is None:
        return True  # (not comparable: a module, a function, a sentinel object)
    if pa[0] == pb[0] == "number" and isinstance(pa[1], float) and math.isnan(pa[1]):
        return isinstance(pb[1], float) and math.isnan(pb[1])
    return pa == pb


def _signature(fn, receiver: bool):
    """``fn``'s parameters (less the first where ``receiver``: a method's ``self``), or None where ``inspect`` has
    no signature for it."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    if receiver:
        if not params or params[0].kind is inspect.Parameter.VAR_POSITIONAL:
            return params  # (``def m(*args)``: the receiver is in ``args``)
        params = params[1:]
    return params


def _member(cls, name: str):
    """The parameters of ``cls.<name>`` as its callers pass them (a method's receiver left out), or None where it
    is no function (a property, a C slot)."""
    try:
        static = inspect.getattr_static(cls, name)
    except AttributeError:
        return None
    if isinstance(static, staticmethod):
        return _signature(static.__func__, False)
    if isinstance(static, classmethod):
        return _signature(static.__func__, True)
    if inspect.isfunction(static):
        return _signature(static, True)
    return None


def _python_defined(fn) -> bool:
    return inspect.isfunction(inspect.unwrap(fn))


def _compare(tp: list, wp: list) -> list[str]:
    """What tensorwire's parameters ``wp`` lack of torch's ``tp`` (each a list of ``inspect.Parameter``)."""
    P = inspect.Parameter
    problems = []
    w_by_name = {p.name: p for p in wp}
    w_args = any(p.kind is P.VAR_POSITIONAL for p in wp)
    w_kwargs = any(p.kind is P.VAR_KEYWORD for p in wp)
    positional = (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)
    tpos = [p for p in tp if p.kind in positional]
    wpos = [p for p in wp if p.kind in positional]
    for i, p in enumerate(tpos):  # torch's positional parameters, at the same places
        if i >= len(wpos):
            if not w_args:
                problems.append(f"positional {i} {p.name!r} missing (ours takes {len(wpos)})")
            break
        if wpos[i].name != p.name and p.kind is not P.POSITIONAL_ONLY:
            problems.append(f"positional {i}: torch {p.name!r}, ours {wpos[i].name!r}")
            break
    t_var = [p for p in tp if p.kind in (P.VAR_POSITIONAL, P.VAR_KEYWORD)]
    if len(t_var) == len(tp):  # torch's ``(*args, **kwargs)``: a dispatching wrapper, which hides its signature
        return []
    for p in tp:
        if p.kind is P.VAR_POSITIONAL:
            if not w_args:
                problems.append(f"*{p.name} missing")
            continue
        if p.kind is P.VAR_KEYWORD:
            if not w_kwargs:
                problems.append(f"**{p.name} missing")
            continue
        q = w_by_name.get(p.name)
        if q is None or q.kind is P.POSITIONAL_ONLY and p.kind is not P.POSITIONAL_ONLY:
            if p.kind is not P.POSITIONAL_ONLY and not w_kwargs:
                problems.append(f"keyword {p.name!r} missing")
            continue
        if p.default is not P.empty and q.default is P.empty:
            problems.append(f"{p.name!r} optional in torch, required in ours")
        elif p.default is not P.empty and not _same_default(p.default, q.default):
            problems.append(f"default {p.name}: torch {p.default!r}, ours {q.default!r}")
    torch_names = {p.name for p in tp}
    for q in wp:  # a parameter torch does not have must not be needed (where torch's ``*args`` cannot pass it)
        needed = q.default is P.empty and q.kind not in (P.VAR_POSITIONAL, P.VAR_KEYWORD)
        if needed and not t_var and q.name not in torch_names:
            problems.append(f"ours requires {q.name!r}, which torch does not have")
    return problems


def _walk(tmod, wmod, prefix: str, seen: set, out: dict) -> None:
    def check(name, tp, wp):
        if tp is not None and wp is not None:
            problems = _compare(tp, wp)
            if problems:
                out[name] = problems

    def members(tcls, wcls, label):
        # (what either class defines itself: a method one of them inherits is compared as the other's override)
        for m in dict.fromkeys([*vars(tcls), *vars(wcls)]):
            if (m.startswith("_") and m != "__init__") or (id(tcls), id(wcls), m) in seen:
                continue
            seen.add((id(tcls), id(wcls), m))
            check(f"{label}.{m}", _member(tcls, m), _member(wcls, m))

    if inspect.isclass(tmod):
        members(tmod, wmod, prefix)
        return
    for name in sorted(dir(tmod)):
        if name.startswith("_"):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                t = getattr(tmod, name)
                w = getattr(wmod, name, None)
            except Exception:  # noqa: BLE001 - a lazy attribute that cannot load here: nothing to compare
                continue
        if w is None or not callable(t) or not callable(w):
            continue
        label = f"{prefix}{name}"
        if inspect.isclass(t):
            if inspect.isclass(w):
                members(t, w, label)
            continue
        if id(t) in seen or not _python_defined(t):
            continue
        seen.add(id(t))
        check(label, _signature(t, False), _signature(w, False))


def mismatches(torch, namespaces=NAMESPACES) -> dict[str, list[str]]:
    """Each callable of ``namespaces`` whose signature differs from torch's: its name -> what differs."""
    out: dict[str, list[str]] = {}
    seen: set = set()
    for name in namespaces:
        try:
            tmod = _module(torch, name)
        except ImportError:  # (a torch module needing an optional package)
            continue
        prefix = "torch." if not name else name if inspect.isclass(tmod) else f"{name}."
        _walk(tmod, _module(tw, name), prefix, seen, out)
    return out


def _torch():
    return pytest.importorskip("torch", reason="PyTorch is the reference here (pip install torch==2.13.0)")


def test_signatures_match_torch():
    torch = _torch()
    if not torch.__version__.startswith("2.13."):
        pytest.skip(f"the signatures compared are torch 2.13's; torch {torch.__version__} is installed")
    found = mismatches(torch)
    new = {k: v for k, v in found.items() if k not in ALLOWED}
    assert not new, "signatures that differ from torch's:\n" + "\n".join(
        f"  {k}: {'; '.join(v)}" for k, v in sorted(new.items()))
    stale = sorted(set(ALLOWED) - set(found))
    assert not stale, f"ALLOWED lists signatures that match torch's now: {stale}"


# -- what the new parameters do, against torch ------------------------------------------------------------------------

_RNG = np.random.default_rng(7)
_X, _Y, _W = (_RNG.standard_normal((3, 4)) * 2 for _ in range(3))


def _weighted_loss(lib, name: str, reduction: str, weight_on: bool, **kw):
    """``F.<name>`` of fixed data with a weight (float64), and the gradients of input, target and weight."""
    x, y, w = (lib.tensor(a, requires_grad=True) for a in (_X, _Y, np.abs(_W) + 0.1))
    loss = getattr(lib.nn.functional, name)(x, y, reduction=reduction, weight=w if weight_on else None, **kw)
    loss.sum().backward()
    return [loss.detach().numpy(), x.grad.numpy(), y.grad.numpy(), None if w.grad is None else w.grad.numpy()]


@pytest.mark.parametrize("name, kw", [("mse_loss", {}), ("l1_loss", {}), ("huber_loss", {}),
                                      ("huber_loss", {"delta": 2.5})])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weight_on", [True, False])
def test_weighted_losses_and_their_gradients_are_torchs(name, kw, reduction, weight_on):
    torch = _torch()
    for ours, ref in zip(_weighted_loss(tw, name, reduction, weight_on, **kw),
                         _weighted_loss(torch, name, reduction, weight_on, **kw)):
        if ref is None:
            assert ours is None
        else:
            np.testing.assert_allclose(ours, ref, rtol=1e-12, atol=1e-12)


def test_weighted_loss_errors_and_legacy_reduction_are_torchs():
    torch = _torch()
    for lib in (tw, torch):
        x, w = lib.ones(2, 3), lib.ones(2, 3)
        for fn in (lib.nn.functional.mse_loss, lib.nn.functional.l1_loss, lib.nn.functional.huber_loss):
            with pytest.raises(ValueError, match="^Weights and input must have the same size.$"):
                fn(x, x, weight=lib.ones(3))  # (a weight that would broadcast is refused too)
            with pytest.raises(ValueError, match="^Invalid reduction mode: max. Expected one of 'none', 'mean', "):
                fn(x, x, reduction="max", weight=w)
        with pytest.warns(UserWarning, match="size_average and reduce args will be deprecated"):
            s = lib.nn.functional.mse_loss(x * 2, x, size_average=False, weight=w * 3)  # (legacy: "sum")
        assert s.item() == 18.0
    assert "weight" not in inspect.signature(tw.nn.MSELoss).parameters  # (torch 2.13's modules take none)


def _hook_scenario(lib) -> list:
    """Forward hooks and pre-hooks with ``prepend``, ``with_kwargs`` and ``always_call``: the calls they get and
    what their returns change."""
    log = []

    class Scale(lib.nn.Module):
        def forward(self, x, scale=1.0, fail=False):
            log.append(("forward", scale))
            if fail:
                raise KeyError("forward failed")
            return x * scale

    m = Scale()
    m.register_forward_pre_hook(lambda mod, args: log.append("pre"))
    m.register_forward_pre_hook(lambda mod, args: log.append("pre first"), prepend=True)
    m.register_forward_pre_hook(lambda mod, args, kwargs: (args, {**kwargs, "scale": kwargs.get("scale", 1.0) * 2}),
                                with_kwargs=True)
    m.register_forward_hook(lambda mod, args, out: log.append(("hook", out.tolist())))
    m.register_forward_hook(lambda mod, args, kwargs, out: out + kwargs["scale"], with_kwargs=True, prepend=True)
    always = m.register_forward_hook(
        lambda mod, args, out: log.append(("always", None if out is None else out.tolist())), always_call=True)
    log.append(m(lib.ones(2), scale=3.0).tolist())
    with pytest.raises(KeyError, match="forward failed"):
        m(lib.ones(2), fail=True)
    always.remove()
    with pytest.raises(KeyError, match="forward failed"):
        m(lib.ones(2), fail=True)
    log.append("removed")
    bad = lib.nn.Identity()  # (an always_call hook's own error after another: a warning, the first error goes on)
    bad.register_forward_pre_hook(lambda mod, args: 1 / 0)
    bad.register_forward_hook(lambda mod, args, out: [][0], always_call=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ZeroDivisionError):
            bad(lib.ones(1))
    log.append([str(w.message) for w in caught])
    wrong = lib.nn.Identity()
    wrong.register_forward_pre_hook(lambda mod, args, kwargs: args, with_kwargs=True)
    with pytest.raises(RuntimeError, match=r"forward pre-hook must return None or a tuple of \(new_args, new_kw"):
        wrong(lib.ones(1), lib.ones(1), lib.ones(1))
    both = Scale()  # (with a backward hook too: the forward hooks run inside its wrapping, as torch's)
    both.register_full_backward_hook(lambda mod, gi, go: log.append(("backward", gi[0].tolist(), go[0].tolist())))
    both.register_forward_hook(lambda mod, args, kwargs, out: out * kwargs["scale"], with_kwargs=True)
    x = lib.ones(2, requires_grad=True)
    both(x, scale=3.0).sum().backward()
    log.append(x.grad.tolist())
    return log


def test_forward_hooks_prepend_with_kwargs_always_call_as_torchs():
    got = _hook_scenario(tw)
    assert got == [
        "pre first", "pre", ("forward", 6.0),  # (the prepended pre-hook first; the kwargs one doubles ``scale``)
        ("hook", [12.0, 12.0]), ("always", [12.0, 12.0]), [12.0, 12.0],  # (the prepended kwargs hook adds it first)
        "pre first", "pre", ("forward", 2.0), ("always", None),  # (forward raised: only the always_call hook)
        "pre first", "pre", ("forward", 2.0), "removed",
        ["module forward hook with ``always_call=True`` raised an exception that was silenced as another error was "
         "raised in forward: list index out of range"],
        ("forward", 3.0), ("backward", [9.0, 9.0], [1.0, 1.0]), [9.0, 9.0]]
    assert got == _hook_scenario(_torch())


def test_modules_keeps_duplicates_when_asked():
    torch = _torch()
    for lib in (tw, torch):
        shared = lib.nn.Linear(2, 2)
        net = lib.nn.Sequential(shared, shared)
        assert [type(m).__name__ for m in net.modules()] == ["Sequential", "Linear"]
        assert [type(m).__name__ for m in net.modules(remove_duplicate=False)] == ["Sequential", "Linear", "Linear"]


def test_split_takes_torchs_parameter_names():
    torch = _torch()
    a = np.arange(10.0).reshape(5, 2)
    for ours, ref in [(tw.tensor(a).split(split_size=2), torch.tensor(a).split(split_size=2)),
                      (tw.tensor(a).split([1, 4], dim=0), torch.tensor(a).split([1, 4], dim=0)),
                      (tw.split(tensor=tw.tensor(a), split_size_or_sections=[1, 1], dim=1),
                       torch.split(tensor=torch.tensor(a), split_size_or_sections=[1, 1], dim=1)),
                      (tw.functional.split(tw.tensor(a), 3), torch.functional.split(torch.tensor(a), 3))]:
        assert [t.tolist() for t in ours] == [t.tolist() for t in ref]
    with pytest.raises(TypeError):
        tw.tensor(a).split(split_size_or_sections=2)  # (as torch's method: not its name)


def test_hardtanh_takes_the_deprecated_keywords():
    torch = _torch()
    x = np.linspace(-3, 3, 7)
    for lib in (tw, torch):
        with pytest.warns(FutureWarning, match="keyword argument `min_value` is deprecated and renamed to `min_val`"):
            m = lib.nn.Hardtanh(min_value=-2.0)
        with pytest.warns(FutureWarning, match="`max_value` is deprecated and renamed to `max_val`"):
            m2 = lib.nn.Hardtanh(-0.5, 1.0, False, None, 0.5)
        assert (m.min_val, m.max_val, m2.min_val, m2.max_val) == (-2.0, 1.0, -0.5, 0.5)
        assert m(lib.tensor(x)).tolist() == [-2.0, -2.0, -1.0, 0.0, 1.0, 1.0, 1.0]
        with pytest.raises(AssertionError, match=r"max_val \(1.0\) must be greater than min_val \(1.0\)"):
            lib.nn.Hardtanh(1.0, 1.0)


def _outs(lib) -> list:
    """``normalize``, ``tensordot`` and ``chain_matmul`` into their ``out=`` tensors (the last one empty: resized)."""
    a, b = (lib.tensor(v) for v in (_X, _Y.T))
    o, o2, o3 = lib.zeros(3, 4, dtype=lib.float64), lib.zeros(3, 3, dtype=lib.float64), lib.zeros(0, dtype=lib.float64)
    assert lib.nn.functional.normalize(a, 2.0, 0, 1e-12, o) is o
    assert lib.tensordot(a, b, 1, o2) is o2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch's deprecation of chain_matmul)
        assert lib.chain_matmul(a, b, a, out=o3) is o3
    return [o.numpy(), o2.numpy(), o3.numpy()]


def test_out_arguments_are_written_as_torchs():
    torch = _torch()
    for got, want in zip(_outs(tw), _outs(torch)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    for lib in (tw, torch):
        with pytest.raises(RuntimeError, match="tensordot expects dims >= 0, but got dims=-1"):
            lib.tensordot(lib.ones(2, 2), lib.ones(2, 2), -1)
        with pytest.raises(RuntimeError, match="tensordot expects dims < ndim_a or ndim_b, but got dims=3"):
            lib.tensordot(lib.ones(2, 2), lib.ones(2, 2), 3)
    np.testing.assert_allclose(tw.tensordot(tw.tensor(_X), tw.tensor(_Y.T), ([-1], [0])).numpy(),
                               torch.tensordot(torch.tensor(_X), torch.tensor(_Y.T), ([-1], [0])).numpy(), rtol=1e-12)


def test_mish_in_place():
    torch = _torch()
    x = np.linspace(-3, 3, 9)
    t, r = tw.tensor(x), torch.tensor(x)
    assert F.mish(t, inplace=True) is t and torch.nn.functional.mish(r, inplace=True) is r
    np.testing.assert_allclose(t.numpy(), r.numpy(), rtol=1e-12)


@pytest.mark.filterwarnings("ignore:A window was not provided")  # (torch's, of a rectangular window)
@pytest.mark.parametrize("L, n_fft, hop, win, window", [(40, 16, 4, 8, "hann"), (40, 16, 4, 8, None),
                                                         (33, 15, 5, 4, "hann"), (40, 16, 4, 16, "hann")])
def test_stft_align_to_window_is_torchs(L, n_fft, hop, win, window):
    torch = _torch()
    x = _RNG.standard_normal((2, L))
    got, want = (lib.stft(lib.tensor(x), n_fft, hop, win, None if window is None else
                          lib.hann_window(win, dtype=lib.float64), center=False, return_complex=True,
                          align_to_window=True) for lib in (tw, torch))
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10, atol=1e-10)
    for lib in (tw, torch):
        with pytest.raises(RuntimeError, match="stft align_to_window should only be set when center = false"):
            lib.stft(lib.tensor(x), n_fft, return_complex=True, align_to_window=False)


def test_cdist_compute_modes_are_torchs():
    torch = _torch()
    a, b = _RNG.standard_normal((30, 5)), _RNG.standard_normal((40, 5))
    for mode in ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist"):
        np.testing.assert_allclose(tw.cdist(tw.tensor(a), tw.tensor(b), compute_mode=mode).numpy(),
                                   torch.cdist(torch.tensor(a), torch.tensor(b), compute_mode=mode).numpy(),
                                   rtol=1e-9)
    for lib in (tw, torch):
        for bad in (None, "fast"):
            with pytest.raises(ValueError, match=f"^{bad} is not a valid value for compute_mode$"):
                lib.cdist(lib.ones(2, 2), lib.ones(2, 2), compute_mode=bad)


def test_container_methods_take_torchs_parameter_names():
    torch = _torch()
    for lib in (tw, torch):
        nn = lib.nn
        ml = nn.ModuleList().append(module=nn.ReLU()).extend(modules=[nn.Tanh()])
        ml.insert(0, module=nn.Sigmoid())
        seq = nn.Sequential().append(module=nn.ReLU()).extend(sequential=[nn.Tanh()]).insert(0, module=nn.Sigmoid())
        md = nn.ModuleDict()
        md.update(modules={"b": nn.ReLU(), "a": nn.Tanh()})
        pd = nn.ParameterDict()
        pd.update(parameters={"b": nn.Parameter(lib.ones(1)), "a": nn.Parameter(lib.ones(1))})  # (sorted, as torch)
        pd.update(parameters=[("c", nn.Parameter(lib.ones(1))), ("0", nn.Parameter(lib.ones(1)))])  # (in order)
        names = [[type(m).__name__ for m in ml], [type(m).__name__ for m in seq], list(md.keys()), list(pd.keys())]
        assert names == [["Sigmoid", "ReLU", "Tanh"], ["Sigmoid", "ReLU", "Tanh"], ["b", "a"], ["a", "b", "c", "0"]]
        assert nn.RMSNorm(3)(x=lib.ones(2, 3)).shape == (2, 3)


def test_rnn_cell_base_takes_num_chunks_and_embedding_from_pretrained_its_options():
    torch = _torch()
    for lib in (tw, torch):
        cell = lib.nn.RNNCellBase(5, 3, False, 2)
        assert tuple(cell.weight_ih.shape) == (6, 5) and tuple(cell.weight_hh.shape) == (6, 3) and cell.bias_ih is None
        assert [tuple(p.shape) for p in lib.nn.LSTMCell(5, 3).parameters()] == [(12, 5), (12, 3), (12,), (12,)]
        emb = lib.nn.Embedding.from_pretrained(lib.ones(4, 2) * 3, True, None, 1.0)
        assert emb.max_norm == 1.0 and not emb.weight.requires_grad
        np.testing.assert_allclose(emb(lib.tensor([1])).numpy(), [[2 ** -0.5] * 2], rtol=1e-6)
        with pytest.raises(AssertionError, match="Embeddings parameter is expected to be 2-dimensional"):
            lib.nn.Embedding.from_pretrained(lib.ones(4))


def test_save_takes_torchs_positional_options_and_protocol(tmp_path):
    p = tmp_path / "o.pt"
    obj = {"s": {1, 2}, "b": b"raw", "t": tw.arange(3)}  # (a set: a pickle, with torch's protocol 2)
    tw.save(obj, p, pickle, 2, True, False)
    back = tw.load(p)
    assert back["s"] == {1, 2} and back["b"] == b"raw" and back["t"].tolist() == [0, 1, 2]
    with pytest.raises(TypeError):
        tw.save(obj, p, _use_new_zipfile_serialisation=False)  # (a misspelt option is refused, not swallowed)
    torch = _torch()
    assert tw.serialization.DEFAULT_PROTOCOL == torch.serialization.DEFAULT_PROTOCOL


def test_compile_takes_torchs_keywords():
    calls = []

    def f(x):
        calls.append(1)
        return x * 2

    g = tw.compile(f, name="double", recompile_limit=2, isolate_recompiles=True, shapes_spec=None)
    assert g(tw.ones(2)).tolist() == [2.0, 2.0] and g.backend == "inductor"
    assert tw.compile(f, disable=True, name="x") is f


def test_ddp_takes_torch_2_13s_buffer_sync_keywords():
    ddp_cls, m = tw.nn.parallel.DistributedDataParallel, tw.nn.Linear(2, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (the new keywords alone: no warning)
        ddp = ddp_cls(m, skip_all_reduce_unused_params=True, bucket_cap_mb_list=[1], batched_grad_copy=True)
    assert ddp.forward_sync_buffers is True
    with pytest.warns(FutureWarning, match="^`broadcast_buffers` is deprecated. Use `forward_sync_buffers` instead"):
        assert ddp_cls(m, broadcast_buffers=False).forward_sync_buffers is False
    with pytest.warns(FutureWarning, match="^Both `broadcast_buffers` and `forward_sync_buffers` were specified"):
        assert ddp_cls(m, broadcast_buffers=False, forward_sync_buffers=True).forward_sync_buffers is True


def test_device_functions_take_torchs_device_keyword():
    for fn in (tw.cuda.set_device, tw.cuda.get_device_name):
        with pytest.raises(ValueError, match="cuda:5 is not one of the cluster's devices"):
            fn(device="cuda:5")
    assert tw.cuda.is_bf16_supported(including_emulation=False) is tw.cuda.is_available()
