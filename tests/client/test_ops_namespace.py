"""tw.ops: every op of the op table by name (torch.ops), through the tensor methods' path."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw


def test_an_op_by_name_equals_its_method(session):
    a = tw.tensor([[1.0, -2.0], [0.5, 3.0]], dtype=tw.float64)
    b = tw.tensor([2.0, -1.0], dtype=tw.float64)
    np.testing.assert_array_equal(tw.ops.atan2(a, b).numpy(), tw.atan2(a, b).numpy())
    np.testing.assert_array_equal(tw.ops.add(a, 1).numpy(), (a + 1).numpy())  # numbers become 0-d tensors
    np.testing.assert_array_equal(tw.ops.sum(a, dims=[1]).numpy(), a.sum(1).numpy())  # attributes by keyword
    assert "atan2" in dir(tw.ops) and tw.ops.atan2.__doc__


def test_an_op_by_name_is_differentiable(session):
    a = tw.tensor([0.5, -1.0, 2.0], dtype=tw.float64, requires_grad=True)
    tw.ops.exp(a).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), np.exp([0.5, -1.0, 2.0]), rtol=1e-12)


def test_unknown_names_and_inputs_without_a_tensor_are_refused(session):
    with pytest.raises(AttributeError, match="no op 'definitely_not_an_op'"):
        _ = tw.ops.definitely_not_an_op
    with pytest.raises(TypeError, match="at least one tensor"):
        tw.ops.add(1, 2)
