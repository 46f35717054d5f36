"""Gaps found by running PyTorch's tutorials with ``import torch`` resolving to tensorwire: the namespaces
``torch.functional``, ``torch.autograd.profiler`` and ``torch.utils.swap_tensors``; ``cat`` of 0-d tensors refused
with torch's message; ``torch.cross`` without ``dim`` warned of once; ``tensor(..., dtype=<integer>)`` refusing
Python values that overflow (and wrapping numpy arrays' values) as torch does; the named tuples' reprs
(``torch.return_types.<name>(...)``). Each against PyTorch where it is installed."""

from __future__ import annotations

import importlib
import pickle
import warnings

import numpy as np
import pytest

import tensorwire as tw

warn_once = importlib.import_module("tensorwire.warn_once")

pytestmark = pytest.mark.usefixtures("session")


# -- torch.functional, torch.autograd.profiler, torch.utils.swap_tensors ----------------------------------------------

def test_torch_functional_gives_the_torch_namespace_functions():
    functional = importlib.import_module("tensorwire.functional")
    assert tw.functional is functional
    for name in functional.__all__:
        assert getattr(functional, name) is getattr(tw, name), name
    assert functional.F is tw.nn.functional
    assert functional.einsum("ij,jk->ik", tw.ones(2, 3), tw.ones(3, 4)).tolist() == [[3.0] * 4] * 2
    assert [t.tolist() for t in functional.split(tw.arange(5), 2)] == [[0, 1], [2, 3], [4]]
    assert functional.atleast_2d(tw.tensor(1.0)).shape == (1, 1)
    torch = pytest.importorskip("torch")
    missing = set(importlib.import_module("torch.functional").__all__) - set(functional.__all__)
    assert missing == {"istft"}  # (tensorwire has no istft)
    assert torch.functional.split(torch.arange(5), 2)[2].tolist() == [4]


def test_autograd_profiler_profiles_as_tw_profiler():
    profiler = tw.autograd.profiler  # (no import of its own: loaded with tw.autograd, as torch's)
    assert profiler is importlib.import_module("tensorwire.autograd.profiler")
    assert profiler.record_function is tw.profiler.record_function
    with profiler.profile(record_shapes=True, use_device=None, profile_memory=True) as prof:
        with profiler.record_function("my block"):
            y = (tw.ones(3) * 2).sum()
        assert y.item() == 6.0
    names = {e.name for e in prof.events()}
    assert "my block" in names and "mul" in names
    assert "my block" in prof.key_averages().table()
    with profiler.profile(enabled=False) as off:
        assert (tw.ones(2) + 1).tolist() == [2.0, 2.0]
    assert off.enabled is False and off.session is None
    with pytest.warns(FutureWarning, match="`use_cuda` will be deprecated soon"):
        profiler.profile(use_cuda=True)


def test_autograd_package_alone_does_not_load_the_session():
    import subprocess
    import sys

    code = ("import sys, tensorwire.autograd; assert 'tensorwire.session' not in sys.modules; "
            "import tensorwire as tw; tw.autograd.profiler.profile; assert 'tensorwire.session' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def _swap(lib):
    a = lib.ones(2)
    b = lib.zeros(3, dtype=lib.int64)
    a_ref = a
    lib.utils.swap_tensors(a, b)
    out = [(a.tolist(), str(a.dtype).split(".")[1], b.tolist(), str(b.dtype).split(".")[1], a is a_ref)]
    p = lib.nn.Parameter(lib.full((2,), 5.0))
    t = lib.arange(2.0)
    lib.utils.swap_tensors(p, t)
    out.append((type(p).__name__, p.tolist(), p.requires_grad, type(t).__name__, t.tolist(), t.requires_grad))
    import weakref

    w = lib.ones(1)
    ref = weakref.ref(w)  # noqa: F841 (held: a tensor with a weak reference is refused)
    with pytest.raises(RuntimeError, match="Cannot swap t1 because it has weakref associated with it"):
        lib.utils.swap_tensors(w, lib.ones(1))
    return out


def test_swap_tensors_swaps_contents_and_classes_as_torchs():
    want = [([0, 0, 0], "int64", [1.0, 1.0], "float32", True),
            ("Tensor", [0.0, 1.0], False, "Parameter", [5.0, 5.0], True)]
    assert _swap(tw) == want
    torch = pytest.importorskip("torch")
    assert _swap(torch) == want


# -- cat of 0-d tensors -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("make,position", [
    (lambda lib: [lib.tensor(1.0), lib.tensor(2.0)], 0),
    (lambda lib: [lib.ones(2), lib.tensor(1.0)], 1),
    (lambda lib: [lib.ones(0), lib.tensor(1.0)], 1),  # (an empty 1-D tensor counts in the positions)
    (lambda lib: [lib.ones(2), lib.ones(3), lib.tensor(3.0)], 2),
    (lambda lib: [lib.tensor(1.0)], 0),
])
def test_cat_refuses_zero_dimensional_tensors_with_torchs_message(make, position):
    msg = f"zero-dimensional tensor \\(at position {position}\\) cannot be concatenated"
    with pytest.raises(tw.ShapeError, match=msg):
        tw.cat(make(tw))
    assert (tw.ones(2) + 1).tolist() == [2.0, 2.0]  # (nothing was recorded: the session works on)
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match=msg):
        torch.cat(make(torch))


def test_cat_inference_refuses_zero_dimensional_inputs():
    from tensorwire.protocol.ops import infer

    with pytest.raises(tw.ShapeError, match=r"zero-dimensional tensor \(at position 1\) cannot be concatenated"):
        infer("cat", [((2,), tw.float32), ((), tw.float32)], {"dim": 0})


def test_hstack_and_vstack_take_zero_dimensional_tensors_as_torch():
    assert tw.hstack([tw.tensor(1.0), tw.tensor(2.0)]).tolist() == [1.0, 2.0]
    assert tw.vstack([tw.tensor(1.0), tw.tensor(2.0)]).tolist() == [[1.0], [2.0]]
    torch = pytest.importorskip("torch")
    assert torch.hstack([torch.tensor(1.0), torch.tensor(2.0)]).tolist() == [1.0, 2.0]
    assert torch.vstack([torch.tensor(1.0), torch.tensor(2.0)]).tolist() == [[1.0], [2.0]]


# -- torch.cross without dim ------------------------------------------------------------------------------------------

CROSS_WARNING = ("Using torch.cross without specifying the dim arg is deprecated.\nPlease either pass the dim "
                 "explicitly or simply use torch.linalg.cross.\nThe default value of dim will change to agree with "
                 "that of linalg.cross in a future release.")


def test_cross_without_dim_warns_once_a_process(monkeypatch):
    monkeypatch.setattr(warn_once, "_WARNED", set())
    a, b = tw.tensor([1.0, 0.0, 0.0]), tw.tensor([0.0, 1.0, 0.0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = a.cross(b)  # (the method: the warning names this line too)
        tw.cross(a, b)
        tw.cross(a, b, dim=0)
    assert r.tolist() == [0.0, 0.0, 1.0]
    assert [(w.category, str(w.message), w.filename) for w in caught] == [(UserWarning, CROSS_WARNING, __file__)]
    with pytest.raises(tw.ShapeError, match="^no dimension of size 3 in input$"):
        tw.cross(tw.ones(2), tw.ones(2))
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match="^no dimension of size 3 in input$"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.cross(torch.ones(2), torch.ones(2))


def test_cross_warning_text_is_torchs():
    torch = pytest.importorskip("torch")
    code = ("import warnings, torch\nwarnings.simplefilter('always')\nwith warnings.catch_warnings(record=True) as w:\n"
            "    torch.cross(torch.ones(3), torch.ones(3))\nprint(repr(str(w[0].message)))")
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120).stdout
    assert eval(out).startswith(CROSS_WARNING)  # (torch's adds where in its C++ source it was raised)
    assert torch is not None


# -- tensor(..., dtype=<integer>) of values out of range -------------------------------------------------------------

CASES = [
    ([1, -200], "int8"), ([300], "uint8"), ([-1], "uint8"), ([-255], "uint8"), ([-256], "uint8"), ([255], "uint8"),
    ([-129], "int8"), ([127], "int8"), ([40000], "int16"), ([2 ** 31], "int32"), ([-2 ** 31], "int32"),
    ([300.0], "uint8"), ([-1.5], "uint8"), ([255.9], "uint8"), ([1.7], "int8"), ([-128.0], "int8"), ([127.5], "int8"),
    ([1e10], "int32"), ([float("nan")], "int32"), ([float("inf")], "int64"), ([[1, 2], [3, 400]], "uint8"),
    ([True, 300], "uint8"), ((1, -200), "int8"), ([1, -200.0], "int8"), ([], "uint8"), (300, "uint8"), (-200, "int8"),
    ([2], "bool"), ([300], "bool"), ([2 ** 63], "int64"), ([2 ** 63], None), ([2 ** 63 - 1], "int64"),
    (np.int64(300), "uint8"), ([np.int64(300)], "uint8"),
    (np.array([300]), "uint8"), (np.array([300.0]), "uint8"), (np.array([-200]), "int8"), (np.array(300), "int8"),
]


def _made(lib, data, dtype):
    try:
        t = lib.tensor(data, dtype=None if dtype is None else getattr(lib, dtype))
    except (RuntimeError, ValueError) as e:
        return type(e).__name__, str(e)
    return t.tolist(), str(t.dtype).split(".")[1]


@pytest.mark.parametrize("data,dtype", CASES)
def test_tensor_of_python_values_refuses_an_integer_overflow_as_torch(data, dtype):
    got = _made(tw, data, dtype)
    torch = pytest.importorskip("torch")
    assert got == _made(torch, data, dtype)


def test_tensor_overflow_values():
    assert _made(tw, [1, -200], "int8") == ("RuntimeError", "value cannot be converted to type int8 without overflow")
    assert _made(tw, [300], "uint8") == ("RuntimeError", "value cannot be converted to type uint8 without overflow")
    assert _made(tw, [-1], "uint8") == ([255], "uint8")  # (a negative int wraps, as torch's)
    assert _made(tw, np.array([300]), "uint8") == ([44], "uint8")  # (an array's values wrap)
    assert _made(tw, [2 ** 63], None) == ("ValueError", "Overflow when unpacking long long")
    assert _made(tw, tw.tensor([300]), "uint8") == ([44], "uint8")  # (a tensor's: cast, as torch's copy)


# -- the named tuples' reprs ------------------------------------------------------------------------------------------

def _results(lib) -> list:
    x = lib.tensor([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]])
    sq = lib.tensor([[2.0, 1.0], [1.0, 3.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch.qr's deprecation)
        return [x.sort(), x.topk(1), x.kthvalue(1, 1), x.cummax(1), x.cummin(1), x.median(1), x.nanmedian(1),
                x.mode(1), lib.frexp(x), lib.linalg.slogdet(sq), lib.slogdet(sq), sq.slogdet(), lib.linalg.eigh(sq),
                lib.linalg.inv_ex(sq), lib.linalg.cholesky_ex(sq), lib.linalg.lu_factor(sq), lib.linalg.lu(sq),
                lib.lu_unpack(*lib.linalg.lu_factor(sq)), lib.triangular_solve(sq, sq), lib.geqrf(sq),
                lib.linalg.qr(sq), lib.qr(sq), lib.linalg.svd(sq), lib.svd(sq), lib.histogram(x.flatten(), bins=2),
                x.max(1), x.min(0), lib.max(x, 1, keepdim=True), x.aminmax()]


def test_return_types_are_torchs():
    got = [(repr(r).split("(", 1)[0], type(r)._fields) for r in _results(tw)]
    names = ["sort", "topk", "kthvalue", "cummax", "cummin", "median", "nanmedian", "mode", "frexp", "linalg_slogdet",
             "slogdet", "slogdet", "linalg_eigh", "linalg_inv_ex", "linalg_cholesky_ex", "linalg_lu_factor",
             "linalg_lu", "lu_unpack", "triangular_solve", "geqrf", "linalg_qr", "qr", "linalg_svd", "svd",
             "histogram", "max", "min", "max", "aminmax"]
    assert [g[0] for g in got] == ["torch.return_types." + n for n in names]
    torch = pytest.importorskip("torch")
    assert got == [(f"torch.return_types.{type(r).__name__}", type(r).__match_args__) for r in _results(torch)]


def test_return_type_repr_is_torchs_one_field_a_line():
    r = tw.svd(tw.tensor([[2.0, 0.0], [0.0, 1.0]]))
    u, s, v = (repr(t) for t in r)
    assert repr(r) == f"torch.return_types.svd(\nU={u},\nS={s},\nV={v})" == str(r)
    sort = tw.tensor([2.0, 1.0]).sort()
    assert repr(sort) == "torch.return_types.sort(\nvalues=tensor([1., 2.]),\nindices=tensor([1, 0]))"
    assert isinstance(sort, tw.return_types.sort) and sort.values is sort[0]
    assert pickle.loads(pickle.dumps(tw.return_types.sort(1, 2))) == (1, 2)
    torch = pytest.importorskip("torch")
    ts = torch.tensor([2.0, 1.0]).sort()
    assert repr(ts) == "torch.return_types.sort(\nvalues=tensor([1., 2.]),\nindices=tensor([1, 0]))"
