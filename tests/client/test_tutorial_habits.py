"""What PyTorch's own tutorials do, as they write it (found by running pytorch/tutorials with ``import torch``
resolving to tensorwire): the in-place shape methods (``target.unsqueeze_(-1)``), the deprecated
``p.data.add_(-lr, p.grad.data)``, walking ``grad_fn.next_functions`` of ``2 * b``, ``with torch.device(...)``,
``print(param)``, a wrong ``x.grad = ...`` refused at the line that assigns it, and ``loss[0]`` of a 0-d loss. Each
against PyTorch where it is installed."""

from __future__ import annotations

import importlib
import warnings

import numpy as np
import pytest

import tensorwire as tw

warn_once = importlib.import_module("tensorwire.warn_once")

pytestmark = pytest.mark.usefixtures("session")


def _inplace_shapes(lib):
    out = []
    a = lib.ones(3)
    a.unsqueeze_(-1)
    out.append(tuple(a.shape))
    c = lib.ones(2, 3)
    v = c[0]
    v.unsqueeze_(0)  # (a view stays a view of its base: the add shows in c)
    v.add_(1)
    out.append((tuple(v.shape), c.tolist()))
    x = lib.arange(6.0).reshape(2, 3)
    x.t_()
    out.append((tuple(x.shape), x.tolist()))
    x.transpose_(0, 1)
    x.swapdims_(0, 1)
    x.swapaxes_(1, 0)
    out.append(x.tolist())
    y = lib.ones(1, 3, 1)
    y.squeeze_(0)
    out.append(tuple(y.shape))
    y.squeeze_()
    out.append(tuple(y.shape))
    w = lib.ones(3, requires_grad=True)
    z = w * 2
    z.t_()
    z.unsqueeze_(1)
    (z.squeeze() * lib.arange(3.0)).sum().backward()
    out.append(w.grad.tolist())
    with lib.no_grad():  # (a leaf that requires grad may change shape outside autograd)
        w.unsqueeze_(0)
    out.append((tuple(w.shape), w.requires_grad, w.grad_fn is None))
    return out


def test_the_inplace_shape_methods_change_the_tensor_as_torchs():
    want = [(3, 1), ((1, 3), [[2.0, 2.0, 2.0], [1.0, 1.0, 1.0]]), ((3, 2), [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]),
            [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], (3, 1), (3,), [0.0, 2.0, 4.0], ((1, 3), True, True)]
    assert _inplace_shapes(tw) == want
    torch = pytest.importorskip("torch")
    assert _inplace_shapes(torch) == want


def test_an_inplace_shape_method_of_a_leaf_that_requires_grad_is_refused():
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        tw.ones(3, requires_grad=True).unsqueeze_(0)


def test_the_deprecated_alpha_first_overloads_warn_once_and_compute_torchs_values(monkeypatch):
    monkeypatch.setattr(warn_once, "_WARNED", set())
    p = tw.ones(2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        p.add_(-0.5, tw.ones(2))
        p.add_(-0.5, tw.ones(2))
        q = p.sub(2, tw.ones(2))
    assert p.tolist() == [0.0, 0.0] and q.tolist() == [-2.0, -2.0]
    assert [str(w.message).splitlines()[1].strip() for w in caught] == ["add_(Number alpha, Tensor other)",
                                                                       "sub(Number alpha, Tensor other)"]
    with pytest.raises(TypeError, match="takes 1 positional argument but 2 were given"):
        p.add_(tw.ones(2), tw.ones(2))


def test_a_python_number_on_the_left_is_the_graphs_second_input_as_torchs():
    b = tw.sin(tw.ones(3, requires_grad=True))
    for y in (2 * b, 1 + b):
        (first, _), (second, _) = y.grad_fn.next_functions
        assert first is not None and second is None  # (the autograd tutorial walks next_functions[0][0])
    np.testing.assert_allclose((3 - b).numpy(force=True), 3 - np.sin(np.ones(3, np.float32)), rtol=1e-6)


def test_a_device_is_a_context_for_the_tensors_made_inside():
    before = tw.get_default_device()
    with tw.device("cpu:0") as d:
        assert d == tw.device("cpu:0") and tw.zeros(2).device == d
    assert tw.get_default_device() == before


def test_print_of_a_parameter_says_so():
    p = tw.nn.Parameter(tw.zeros(2))
    assert str(p) == repr(p) == "Parameter containing:\ntensor([0., 0.], requires_grad=True)"
    assert f"{p}".startswith("Parameter containing:")


@pytest.mark.parametrize("make, error, message", [
    (lambda x: 0.0, TypeError, "assigned grad expected to be a Tensor or None but got grad of type float"),
    (lambda x: x, RuntimeError, "can't assign Variable as its own grad"),
    (lambda x: tw.ones(2, dtype=tw.int64), RuntimeError,
     "attempting to assign a gradient with dtype 'long int' to a tensor with grad_dtype 'Float'."),
    (lambda x: tw.ones(3), RuntimeError,
     "attempting to assign a gradient of size '[3]' to a tensor of size '[2]'. Please ensure that the gradient "
     "and the tensor are the same size")])
def test_a_wrong_grad_is_refused_where_it_is_assigned(make, error, message):
    x = tw.ones(2, requires_grad=True)
    with pytest.raises(error) as e:
        x.grad = make(x)
    assert str(e.value).startswith(message)
    assert x.grad is None
    x.grad = tw.full((2,), 3.0)
    del x.grad
    assert x.grad is None


def test_a_wrong_grad_raises_torchs_error():
    torch = pytest.importorskip("torch")
    for make in (lambda m, x: 0.0, lambda m, x: m.ones(2, dtype=m.int64), lambda m, x: m.ones(3)):
        msgs = []
        for m in (tw, torch):
            x = m.ones(2, requires_grad=True)
            with pytest.raises((TypeError, RuntimeError)) as e:
                x.grad = make(m, x)
            msgs.append((type(e.value).__name__, str(e.value)))
        assert msgs[0] == msgs[1]


def test_an_int_index_of_a_0d_tensor_says_to_use_item():
    with pytest.raises(IndexError, match=r"invalid index of a 0-dim tensor. Use `tensor.item\(\)`"):
        tw.tensor(1.5)[0]
    with pytest.raises(IndexError, match="too many indices for tensor of dimension 0"):
        tw.tensor(1.5)[0, 0]


def test_an_out_with_elements_resized_warns_as_torch():
    out = tw.empty(2)
    with pytest.warns(UserWarning, match=r"An output with one or more elements was resized since it had shape \[2\]"):
        tw.add(tw.ones(3), 1, out=out)
    assert out.tolist() == [2.0, 2.0, 2.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (an out of no elements is resized silently)
        tw.add(tw.ones(3), 1, out=tw.empty(0))
