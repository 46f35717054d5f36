"""torch API that model and training code calls, against PyTorch (2.13, CPU): ``torch.jit``'s TorchScript API as
in eager form (``is_scripting``, ``@ignore``, ``Final``, ``script``, ``trace``, ``fork`` ...), the
``torch._foreach_*`` functions (EMA updates, clipping), the top-level autocast switches and ``torch.cpu.amp``,
``is_inference_mode_enabled``, the optimizer step hooks, ``Module.to(memory_format=...)`` and
``nn.utils.clip_grads_with_norm_``."""

from __future__ import annotations

import importlib
import inspect
import math
import typing
import warnings

import numpy as np
import pytest

import tensorwire as tw

pytestmark = pytest.mark.usefixtures("session")


def _torch():
    return pytest.importorskip("torch", reason="PyTorch is the reference here (pip install torch==2.13.0)")


def _values(ts) -> list:
    return [np.asarray(t.detach().tolist()) for t in ts]


def _close(ours, ref) -> None:
    assert len(ours) == len(ref)
    for a, b in zip(_values(ours), _values(ref)):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


# -- torch.jit ----------------------------------------------------------------------------------------------------

def _scripted_style_model(lib):
    """A module written for TorchScript, as timm's and torchvision's are."""

    class Block(lib.nn.Module):
        fused_attn: lib.jit.Final[bool]

        def __init__(self):
            super().__init__()
            self.fused_attn = True
            self.scale = 2.0

        @lib.jit.ignore
        def no_weight_decay(self):
            return {"scale"}

        @lib.jit.ignore(drop=False)
        def debug(self, x):
            return x

        @lib.jit.unused
        def memory_efficient(self, x):
            return x * 3

        @lib.jit.export
        def extra(self, x):
            return x - 1

        def forward(self, x):
            if not lib.jit.is_scripting() and not lib.jit.is_tracing():
                x = self.debug(x)
            rows = lib.jit.annotate(list[int], [])
            rows.append(int(x.shape[0]))
            return self.extra(x * self.scale) + rows[0]

    return Block()


def test_model_code_written_for_torchscript_runs_eagerly_as_torchs():
    torch = _torch()
    x = np.linspace(-1, 1, 6).reshape(2, 3)
    outs = []
    for lib in (tw, torch):
        m = _scripted_style_model(lib)
        assert typing.get_type_hints(type(m), localns={"lib": lib})["fused_attn"] == typing.Final[bool]
        assert m.no_weight_decay() == {"scale"} and m.memory_efficient(lib.ones(1)).tolist() == [3.0]
        outs.append(m(lib.tensor(x)).numpy())
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-12)
    assert tw.jit.Final is torch.jit.Final is typing.Final
    assert tw.jit.is_scripting() is False and tw.jit.is_tracing() is False


def test_script_and_trace_give_the_function_or_module_back():
    torch = _torch()
    m = _scripted_style_model(tw)

    def f(x):
        return x * 2

    with pytest.warns(DeprecationWarning, match=r"^`torch.jit.script` is deprecated. Please switch to"):
        assert tw.jit.script(m) is m
    with pytest.warns(DeprecationWarning, match=r"^`torch.jit.trace` is deprecated. Please switch to"):
        assert tw.jit.trace(f, (tw.ones(2),)) is f
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert tw.jit.trace(m, example_inputs=tw.ones(2, 3), check_trace=False, strict=False) is m
        assert tw.jit.trace_module(m, {"forward": tw.ones(2, 3)}) is m
        traced = torch.jit.trace(f, (torch.ones(2),))
        assert tw.jit.script(f)(tw.arange(3.0)).tolist() == traced(torch.arange(3.0)).tolist()
    assert list(inspect.signature(tw.jit.trace).parameters) == list(inspect.signature(torch.jit.trace).parameters)
    assert list(inspect.signature(tw.jit.script).parameters) == list(inspect.signature(torch.jit.script).parameters)
    with pytest.warns(DeprecationWarning, match=r"^`torch.jit.freeze` is deprecated. Please use `torch.compile`"):
        assert tw.jit.freeze(m.eval()) is m
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert tw.jit.optimize_for_inference(m) is m
        with pytest.raises(RuntimeError, match="only implemented for modules in eval mode"):
            tw.jit.freeze(m.train())


def test_the_compile_recording_module_no_longer_hides_trace():
    recording = importlib.import_module("tensorwire.jit.recording")
    assert recording.Trace.__name__ == "Trace" and callable(tw.jit.trace)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("tensorwire.jit.trace")


def test_ignore_with_arguments_as_torchs():
    torch = _torch()
    for lib in (tw, torch):
        with pytest.raises(RuntimeError, match="Argument to @torch.jit.ignore must be a bool or a function but got 3"):
            lib.jit.ignore(3)
        with pytest.warns(FutureWarning, match=r"ignore\(True\) has been deprecated"):
            dropped = lib.jit.ignore(True)
        assert dropped(lambda v: v + 1)(1) == 2
        with pytest.warns(FutureWarning, match=r"ignore\(drop_on_export=True\) has been deprecated"):
            lib.jit.ignore(drop_on_export=True)
        assert lib.jit.unused(property(lambda self: 1)).fget(None) == 1


def test_fork_and_wait_as_torchs():
    torch = _torch()
    for lib in (tw, torch):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            fut = lib.jit.fork(lambda a, b=1: a * b, lib.arange(3.0), b=2)
            assert fut.done() and fut.wait().tolist() == [0.0, 2.0, 4.0]
            assert lib.jit.wait(fut).tolist() == [0.0, 2.0, 4.0]
            with pytest.raises(KeyError, match="failed"):  # (raised by fork itself, as torch's eager fork)
                lib.jit.fork(lambda: {}["failed"])
        with pytest.warns(DeprecationWarning, match=r"^`torch.jit.fork` is deprecated. Please use `torch.compile`"):
            lib.jit.fork(len, "ab")
    fut = tw.jit.Future()
    chained = fut.then(lambda f: f.value() + 1)
    assert not fut.done()
    fut.set_result(41)
    assert fut.wait() == 41 and chained.wait() == 42
    with pytest.raises(RuntimeError, match="only be marked completed once"):
        fut.set_result(0)


def test_torchscript_archives_are_refused_saying_so(tmp_path):
    m = tw.nn.Linear(2, 2)
    with pytest.raises(NotImplementedError, match="TorchScript archives are not supported.*state_dict"):
        tw.jit.save(m, tmp_path / "m.pt")
    with pytest.raises(NotImplementedError, match="TorchScript archives"):
        tw.jit.load(tmp_path / "m.pt", map_location="cpu")


def test_jit_has_torchs_names_and_helpers():
    torch = _torch()
    missing = set(torch.jit.__all__) - set(dir(tw.jit))
    assert missing == {"CompilationUnit", "export_opnames"}  # (a TorchScript compiler's own objects)
    optional = typing.Optional[int]  # noqa: UP045 - (the typing form, as scripts write it)
    for obj, kind in [([1, 2], list[int]), ([1, "a"], list[int]), ({"a": 1}, dict[str, int]),
                      ((1, "a"), tuple[int, str]), (None, optional), (3, int | str), ("a", list[str])]:
        assert tw.jit.isinstance(obj, kind) is torch.jit.isinstance(obj, kind), (obj, kind)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)

        class Scripted(tw.jit.ScriptModule):
            def __init__(self):
                super().__init__()
                self.rate = tw.jit.Attribute(0.5, float)

            @tw.jit.script_method
            def forward(self, x):
                return x * self.rate

        assert Scripted()(tw.ones(2)).tolist() == [0.5, 0.5] and isinstance(Scripted(), tw.nn.Module)
        assert not isinstance(tw.jit.script(tw.nn.ReLU()), tw.jit.RecursiveScriptModule)
        prev = tw.jit.set_fusion_strategy([("DYNAMIC", 3)])
        assert prev == torch.jit.set_fusion_strategy(prev) and tw.jit.set_fusion_strategy(prev) == [("DYNAMIC", 3)]
    for lib in (tw, torch):
        with pytest.warns(UserWarning, match="^Only works in script mode$"), lib.jit.strict_fusion():
            pass
        with lib.jit.optimized_execution(False):
            pass


# -- torch._foreach_* ---------------------------------------------------------------------------------------------

_DATA = [np.linspace(0.5, 2.0, 4), np.linspace(1.0, 3.0, 6).reshape(2, 3), np.array(1.25)]


def _lists(lib):
    """Three lists of float64 tensors of the same shapes (positive values)."""
    return [[lib.tensor(x * k) for x in _DATA] for k in (1.0, 2.0, 0.5)]


#: (op, the arguments after it from (lib, a, b, c)): each run as ``_foreach_<op>`` and, where torch has it, in place
_CASES = [
    ("sqrt", lambda lib, a, b, c: ((a,), {})),
    ("exp", lambda lib, a, b, c: ((a,), {})),
    ("neg", lambda lib, a, b, c: ((a,), {})),
    ("reciprocal", lambda lib, a, b, c: ((a,), {})),
    ("sigmoid", lambda lib, a, b, c: ((a,), {})),
    ("add", lambda lib, a, b, c: ((a, 2.5), {})),
    ("add", lambda lib, a, b, c: ((a, [1.0, 2, 3.5]), {})),
    ("add", lambda lib, a, b, c: ((a, b), {"alpha": 0.5})),
    ("add", lambda lib, a, b, c: ((a, lib.tensor(1.5, dtype=lib.float64)), {"alpha": 2})),
    ("add", lambda lib, a, b, c: ((a,), {"scalars": [1, 2, 3]})),
    ("sub", lambda lib, a, b, c: ((a, b), {"alpha": 2})),
    ("sub", lambda lib, a, b, c: ((a, 1), {})),
    ("mul", lambda lib, a, b, c: ((a, lib.tensor(3.0, dtype=lib.float64)), {})),
    ("mul", lambda lib, a, b, c: ((a, b), {})),
    ("div", lambda lib, a, b, c: ((a, [2.0, 4.0, 8.0]), {})),
    ("div", lambda lib, a, b, c: ((a, c), {})),
    ("pow", lambda lib, a, b, c: ((a, 2), {})),
    ("pow", lambda lib, a, b, c: ((a, b), {})),
    ("pow", lambda lib, a, b, c: ((2.0, a), {})),
    ("clamp_min", lambda lib, a, b, c: ((a, 1.2), {})),
    ("clamp_max", lambda lib, a, b, c: ((a, c), {})),
    ("maximum", lambda lib, a, b, c: ((a, [1.0, 2.0, 0.5]), {})),
    ("minimum", lambda lib, a, b, c: ((a, c), {})),
    ("addcdiv", lambda lib, a, b, c: ((a, b, c), {"value": 0.25})),
    ("addcdiv", lambda lib, a, b, c: ((a, b, c, lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64)), {})),
    ("addcmul", lambda lib, a, b, c: ((a, b, c), {"scalars": [0.5, 1.0, -2.0]})),
    ("addcmul", lambda lib, a, b, c: ((a, b, c), {})),
    ("lerp", lambda lib, a, b, c: ((a, b, 0.1), {})),
    ("lerp", lambda lib, a, b, c: ((a, b), {"weight": [0.1, 0.5, 0.9]})),
    ("lerp", lambda lib, a, b, c: ((a, b), {"weights": c})),
    ("norm", lambda lib, a, b, c: ((a,), {})),
    ("norm", lambda lib, a, b, c: ((a, 1), {})),
    ("norm", lambda lib, a, b, c: ((a, float("inf")), {"dtype": lib.float64})),
    ("norm", lambda lib, a, b, c: (([t.float() for t in a], 2), {"dtype": lib.float64})),
    ("powsum", lambda lib, a, b, c: ((a, 3), {})),
    ("max", lambda lib, a, b, c: ((a,), {})),
    ("clone", lambda lib, a, b, c: ((a,), {})),
]


@pytest.mark.parametrize("case", range(len(_CASES)), ids=[f"{op}-{i}" for i, (op, _) in enumerate(_CASES)])
def test_foreach_ops_are_torchs(case):
    torch = _torch()
    op, make = _CASES[case]
    got, want = ({}, {})
    for lib, out in ((tw, got), (torch, want)):
        a, b, c = _lists(lib)
        args, kwargs = make(lib, a, b, c)
        res = getattr(lib, f"_foreach_{op}")(*args, **kwargs)
        assert isinstance(res, tuple)
        out["result"] = res
        if hasattr(torch, f"_foreach_{op}_"):
            a, b, c = _lists(lib)
            args, kwargs = make(lib, a, b, c)
            if not isinstance(args[0], list):
                continue  # (pow's number base: no in-place form)
            before = list(args[0])
            back = getattr(lib, f"_foreach_{op}_")(*args, **kwargs)
            assert back is args[0] and all(t is u for t, u in zip(back, before))  # (the same list and tensors)
            out["in place"] = back
    assert got.keys() == want.keys()
    for key in got:
        assert [t.dtype.name for t in got[key]] == [str(t.dtype).removeprefix("torch.") for t in want[key]]
        _close(got[key], want[key])


def test_foreach_in_place_forms_without_a_result_and_mm():
    torch = _torch()
    res = []
    for lib in (tw, torch):
        a, b, _ = _lists(lib)
        assert lib._foreach_copy_(a, b) is a
        copied = _values(a)
        assert lib._foreach_zero_(a) is a
        mats = [lib.tensor(np.arange(6.0).reshape(2, 3)), lib.tensor(np.eye(3))]
        res.append((copied, _values(a), _values(lib._foreach_mm(mats, [mats[1], mats[1]]))))
    for ours, ref in zip(res[0], res[1]):
        for x, y in zip(ours, ref):
            np.testing.assert_allclose(x, y)


def test_foreach_updates_an_ema_as_torchs():
    """ModelEmaV3's update: ``_foreach_lerp_`` of the shadow weights toward the model's, and a decay with
    ``_foreach_mul_``/``_foreach_add_``; the shadow tensors keep their identity."""
    torch = _torch()
    out = []
    for lib in (tw, torch):
        lib.manual_seed(0)
        model = [lib.tensor(np.linspace(-1, 1, 5)), lib.tensor(np.ones((2, 2)))]
        ema = [p.clone() * 0.5 for p in model]
        ids = [id(t) for t in ema]
        for step in range(3):
            model = [p + 0.1 * (step + 1) for p in model]
            lib._foreach_lerp_(ema, model, weight=1.0 - 0.9)
            lib._foreach_mul_(ema, 0.99)
            lib._foreach_add_(ema, model, alpha=0.01)
        assert [id(t) for t in ema] == ids
        out.append(ema)
    _close(out[0], out[1])


def test_foreach_errors_are_torchs():
    torch = _torch()
    for lib in (tw, torch):
        a, b, _ = _lists(lib)
        with pytest.raises(RuntimeError, match="^Tensor lists must have the same number of tensors, got 3 and 2$"):
            lib._foreach_add(a, b[:2])
        with pytest.raises(RuntimeError, match="^Tensor lists must have the same number of tensors, got 3 and 1$"):
            lib._foreach_lerp_(a, b[:1], 0.5)
        with pytest.raises(RuntimeError, match="^Tensor lists must have the same number of tensors, got 3 and 2$"):
            lib._foreach_addcmul(a, b, b[:2])
        with pytest.raises(RuntimeError, match="^Tensor list must have same number of elements as scalar list.$"):
            lib._foreach_mul_(a, [1.0, 2.0])
        with pytest.raises(RuntimeError, match="^Tensor list must have at least one tensor.$"):
            lib._foreach_sqrt([])
        with pytest.raises(RuntimeError, match="^scalar tensor expected to be 0 dim but it has 1 dimensions and 2 "):
            lib._foreach_mul(a, lib.ones(2, dtype=lib.float64))
        with pytest.raises(RuntimeError, match="^Expected packed scalar Tensor to be of dimension 1. Got 0 instead.$"):
            lib._foreach_addcdiv(a, a, b, lib.tensor(2.0))
        with pytest.raises(RuntimeError, match="^Expected length of scalars to match input of length 3 but got 2 "):
            lib._foreach_addcdiv(a, a, b, lib.tensor([1.0, 2.0]))
        with pytest.raises(TypeError):
            lib._foreach_add(a, 1.0, alpha=2)  # (alpha goes with a list of tensors)
        with pytest.raises(TypeError):
            lib._foreach_clamp_min(a, lib.ones(2))  # (a tensor operand: 0-d only)
        with pytest.raises(TypeError, match="must be tuple of Tensors, not Tensor"):
            lib._foreach_abs(a[0])
        with pytest.raises(TypeError, match="expected Tensor as element 1 in argument 1, but got float"):
            lib._foreach_mul(a, [a[0], 3.5])
        ints = [lib.tensor([1, 2])]
        with pytest.raises((RuntimeError, TypeError), match="can't be cast to the desired output type"):
            lib._foreach_add_(ints, 1.5)


def test_foreach_names_are_torchs():
    torch = _torch()
    ours = {n for n in dir(tw) if n.startswith("_foreach_")}
    assert ours == {n for n in dir(torch) if n.startswith("_foreach_")}
    assert all(callable(getattr(tw, n)) and getattr(tw, n).__doc__ for n in ours)
    from tensorwire import foreach

    assert set(foreach.FUNCTIONS) == ours


# -- autocast switches, inference mode ----------------------------------------------------------------------------

def _autocast_scenario(lib) -> list:
    log = [lib.is_autocast_enabled(), lib.is_autocast_enabled("cpu"), str(lib.get_autocast_dtype("cpu")),
           str(lib.get_autocast_dtype("cuda"))]
    x = lib.ones(2, 2)
    with lib.autocast("cpu"):
        log += [lib.is_autocast_enabled(), lib.is_autocast_enabled("cpu"), str((x @ x).dtype)]
        lib.set_autocast_enabled("cpu", False)
        log += [lib.is_autocast_enabled("cpu"), str((x @ x).dtype)]
    log += [lib.is_autocast_enabled("cpu")]
    lib.set_autocast_dtype("cpu", lib.float16)
    try:
        log += [str(lib.get_autocast_dtype("cpu")), lib.is_autocast_enabled("cpu")]
        with lib.autocast("cpu") as ac:
            log += [str(ac.fast_dtype)]
        with lib.autocast("cpu", dtype=lib.bfloat16):
            log += [str(lib.get_autocast_dtype("cpu"))]
        log += [str(lib.get_autocast_dtype("cpu"))]
    finally:
        lib.set_autocast_dtype("cpu", lib.bfloat16)
    lib.set_autocast_enabled("cpu", True)
    try:
        log += [lib.is_autocast_enabled("cpu"), str((x @ x).dtype)]
    finally:
        lib.set_autocast_enabled("cpu", False)
    log += [str((x @ x).dtype)]
    with pytest.warns(DeprecationWarning, match=r"torch.is_autocast_cpu_enabled\(\) is deprecated. Please use "):
        log += [lib.is_autocast_cpu_enabled()]
    with pytest.warns(DeprecationWarning, match=r"torch.get_autocast_cpu_dtype\(\) is deprecated"):
        log += [str(lib.get_autocast_cpu_dtype())]
    with pytest.warns(DeprecationWarning, match=r"torch.set_autocast_cpu_enabled\(enabled\) is deprecated"):
        lib.set_autocast_cpu_enabled(True)
    log += [lib.is_autocast_enabled("cpu")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        lib.set_autocast_cpu_enabled(False)
        log += [str(lib.get_autocast_gpu_dtype())]
    with pytest.raises(RuntimeError, match="device type at start of device string: tpu"):
        lib.is_autocast_enabled("tpu")
    with pytest.warns(FutureWarning, match=r"`torch.cpu.amp.autocast\(args...\)` is deprecated"):
        ac = lib.cpu.amp.autocast()
    with ac:
        log += [str((x @ x).dtype), lib.is_autocast_cache_enabled()]
    return [v.removeprefix("torch.").removeprefix("tensorwire.") if isinstance(v, str) else v for v in log]


def test_autocast_switches_at_the_top_level_as_torchs():
    torch = _torch()
    from tensorwire import autocast_state

    got = _autocast_scenario(tw)
    assert autocast_state._active[0] == 0  # (every switch counted once: recording's fast path is back)
    assert got == _autocast_scenario(torch)
    assert got[:7] == [False, False, "bfloat16", "float16", False, True, "bfloat16"]


def _inference_scenario(lib) -> list:
    log = [lib.is_inference_mode_enabled()]
    with lib.inference_mode():
        log += [lib.is_inference_mode_enabled(), lib.is_grad_enabled()]
        with lib.inference_mode(False):
            log += [lib.is_inference_mode_enabled(), lib.is_grad_enabled()]
        log += [lib.is_inference_mode_enabled()]

    @lib.inference_mode()
    def predict():
        return lib.is_inference_mode_enabled(), lib.is_grad_enabled()

    log += [predict(), lib.is_inference_mode_enabled(), lib.autograd.inference_mode is lib.inference_mode]
    return log


def test_is_inference_mode_enabled_as_torchs():
    torch = _torch()
    assert _inference_scenario(tw) == _inference_scenario(torch) == [False, True, False, False, True, True,
                                                                    (True, False), False, True]


# -- optimizer step hooks -----------------------------------------------------------------------------------------

def _hook_scenario(lib) -> list:
    log = []
    p = lib.nn.Parameter(lib.tensor([1.0, 2.0]))
    opt = lib.optim.SGD([p], lr=0.1)
    p.grad = lib.ones(2)
    pre = opt.register_step_pre_hook(lambda o, args, kwargs: log.append(("pre", o is opt, len(args), sorted(kwargs))))
    post = opt.register_step_post_hook(lambda o, args, kwargs: log.append(("post", args[0] is o, sorted(kwargs))))
    optimizer = importlib.import_module(f"{lib.__name__}.optim.optimizer")
    g_pre = optimizer.register_optimizer_step_pre_hook(lambda o, args, kwargs: log.append("global pre"))
    g_post = optimizer.register_optimizer_step_post_hook(lambda o, args, kwargs: log.append("global post"))
    opt.step()
    log.append(p.tolist())
    swap = opt.register_step_pre_hook(lambda o, args, kwargs: (args, {"closure": lambda: 7.0}))
    log.append(opt.step())  # (the pre-hook's arguments: the closure's loss)
    swap.remove()
    for h in (pre, post, g_pre, g_post):
        h.remove()
    opt.step()
    log.append(p.tolist())
    bad = opt.register_step_pre_hook(lambda o, args, kwargs: 3)
    with pytest.raises(RuntimeError, match=r"must return None or a tuple of \(new_args, new_kwargs\), but got 3."):
        opt.step()
    bad.remove()
    return log


def test_optimizer_step_hooks_as_torchs():
    torch = _torch()
    got = _hook_scenario(tw)
    assert got == _hook_scenario(torch)
    assert got[:4] == ["global pre", ("pre", True, 1, []), ("post", True, []), "global post"]  # (args: the optimizer)


def test_a_subclass_step_runs_the_hooks_once():
    calls = []

    class Halved(tw.optim.SGD):
        def step(self, closure=None):
            calls.append("step")
            return super().step(closure)

    p = tw.nn.Parameter(tw.tensor([1.0]))
    p.grad = tw.ones(1)
    opt = Halved([p], lr=0.5)
    opt.register_step_pre_hook(lambda o, a, k: calls.append("pre"))
    opt.register_step_post_hook(lambda o, a, k: calls.append("post"))
    opt.step()
    assert calls == ["pre", "step", "post"] and p.tolist() == [0.5]


# -- Module.to(memory_format=...), clip_grads_with_norm_ ----------------------------------------------------------

def test_module_to_accepts_a_memory_format():
    torch = _torch()
    for lib in (tw, torch):
        m = lib.nn.Conv2d(2, 3, 3)
        before = m.weight.detach().clone()
        assert m.to(memory_format=lib.channels_last) is m
        assert m.to(lib.float64, memory_format=lib.contiguous_format).weight.dtype == lib.float64
        np.testing.assert_allclose(m.weight.detach().numpy(), before.double().numpy())
        with pytest.raises(TypeError):
            m.to(memory_format="sideways")


def test_clip_grads_with_norm_and_get_total_norm_as_torchs():
    torch = _torch()
    grads = [np.linspace(-3, 3, 6).reshape(2, 3), np.array([4.0, -1.0])]
    out = []
    for lib in (tw, torch):
        ps = [lib.nn.Parameter(lib.zeros(*g.shape, dtype=lib.float64)) for g in grads]
        for p, g in zip(ps, grads):
            p.grad = lib.tensor(g)
        total = lib.nn.utils.get_total_norm([p.grad for p in ps], 3.0)
        assert lib.nn.utils.clip_grads_with_norm_(ps, 2.0, total) is None
        out.append([total.item(), *_values([p.grad for p in ps])])
        lib.nn.utils.clip_grads_with_norm_(ps, 100.0, lib.tensor(1.0, dtype=lib.float64))  # (scale clamped to 1)
        out[-1] += _values([p.grad for p in ps])
    np.testing.assert_allclose(out[0][0], out[1][0], rtol=1e-12)
    for a, b in zip(out[0][1:], out[1][1:]):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_torchs_constants():
    """``torch.inf``, ``nan``, ``pi``, ``e``, ``newaxis`` (``x.masked_fill(mask, -torch.inf)``: AttributeError until
    session 59)."""
    torch = pytest.importorskip("torch")
    assert tw.inf == torch.inf and tw.pi == torch.pi and tw.e == torch.e and tw.newaxis is torch.newaxis
    assert math.isnan(tw.nan) and math.isnan(torch.nan)


def test_small_data_keeps_its_inferred_dtype(session):
    """A list of Python numbers made a tensor twice is kept and aliased (``Session.small_data``): keyed by the dtype
    asked for and the default dtype, not by ``dtype or the default``, under which ``x.new_tensor([1, 2])`` of a float32
    ``x`` made every later ``tw.tensor([1, 2])`` float32 (and ``new_ones`` of it, ``add`` of two of them ...)."""
    for _ in range(3):
        a = tw.tensor([1.0, 2.0]).new_tensor([1, 2])
        b = tw.tensor([1, 2])
        assert a.dtype == tw.float32 and b.dtype == tw.int64 and b.new_ones(2).dtype == tw.int64
        assert tw.tensor([1, 2], dtype=tw.float64).dtype == tw.float64 and tw.tensor([True, False]).dtype == tw.bool
        assert tw.add(b, b, alpha=2).tolist() == [3, 6] and b.new_full((2,), 2.5).tolist() == [2, 2]


def test_unique_keeps_each_nan_as_torchs():
    """``unique`` keeps every NaN (torch's; numpy's default merges them, and so did tw until session 59)."""
    torch = pytest.importorskip("torch")
    nan = float("nan")
    for data, kw in (([3.0, nan, 1.0, nan], {}), ([[1.0, nan], [1.0, nan], [0.0, 2.0]], {"dim": 0})):
        want = torch.tensor(data).unique(return_inverse=True, return_counts=True, **kw)
        got = tw.tensor(data).unique(return_inverse=True, return_counts=True, **kw)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a.numpy(), b.numpy())

