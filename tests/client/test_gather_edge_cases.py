"""torch's gather where an index is empty (of any rank and integer dtype) or an operand is 0-d, and ``normal``'s
``layout=`` (issue 33's op_db leftovers: client/tensor.py's ``gather``, client/random_fills.py's ``normal``)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw

torch = pytest.importorskip("torch", reason="PyTorch is the reference here (pip install torch==2.13.0)")

pytestmark = pytest.mark.usefixtures("session")


@pytest.mark.parametrize(("x", "dim", "index"), [
    (np.arange(5, dtype=np.float32), 0, np.zeros((2, 0), np.uint8)),  # empty, of another rank and dtype
    (np.arange(12, dtype=np.float32).reshape(3, 4), 1, np.zeros(0, np.int64)),
    (np.array(3.0, np.float32), 0, np.array([0, 0], np.int64)),  # a 0-d input counts as 1-d
    (np.array(3.0, np.float32), 0, np.array(0, np.int64)),
    (np.arange(4, dtype=np.float32), -1, np.array(2, np.int64)),  # a 0-d index, likewise
])
def test_gather_matches_torch_with_its_gradient(x, dim, index):
    xt, tx = tw.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    got, want = tw.gather(xt, dim, tw.tensor(index)), torch.gather(tx, dim, torch.tensor(index))
    assert tuple(got.shape) == tuple(want.shape) and got.dtype.name == str(want.dtype).removeprefix("torch.")
    np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())
    (got * 2).sum().backward()
    (want * 2).sum().backward()
    np.testing.assert_array_equal(xt.grad.numpy(), tx.grad.numpy())


def test_gather_refuses_what_torch_refuses():
    with pytest.raises(tw.ShapeError, match="same number of dimensions"):
        tw.gather(tw.ones(3, 4), 0, tw.tensor([0, 1]))
    with pytest.raises(IndexError):
        tw.gather(tw.ones(3), 1, tw.zeros(2, 0, dtype=tw.int64))  # dim out of range, even for an empty index
    with pytest.raises(tw.ShapeError, match="same number of dimensions"):
        tw.gather(tw.tensor(3.0), 0, tw.zeros(2, 3, dtype=tw.int64))


def test_normal_takes_torchs_layout_argument():
    r = tw.normal(1.6, 0.3, (2, 3), layout=tw.strided, dtype=tw.float64)
    assert tuple(r.shape) == (2, 3) and r.dtype is tw.float64 and r.layout == tw.strided
    with pytest.raises(NotImplementedError, match="strided"):
        tw.normal(0.0, 1.0, (2,), layout=tw.sparse_coo)
