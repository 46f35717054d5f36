"""``x[mask] = value`` with a bool tensor mask and a scalar value is torch's masked fill, recorded as one ``where`` on
the device with nothing read back (``indexing._mask_fill``): minGPT's and nanoGPT's top-k sampling,
``logits[logits < v[:, [-1]]] = -float('Inf')``, read the mask back once a generated token. Values against PyTorch,
gradients through it against torch's, and the round trips counted."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw

from .test_known_values import round_trips

TORCH_WHY = "PyTorch is the reference here (pip install torch==2.13.0)"


@pytest.fixture
def torch():
    return pytest.importorskip("torch", reason=TORCH_WHY)


CASES = {
    "same shape, -inf": (lambda t: t < 0, -float("inf"), "float32"),
    "leading dims": (lambda t: t[:, 0] > 0, 7.0, "float32"),
    "an int into floats": (lambda t: t > 0.5, 3, "float32"),
    "a 0-d tensor": (lambda t: t < 0, "tensor", "float32"),
    "a float into ints": (lambda t: t > 0, 2.7, "int64"),
    "bools": (lambda t: t > 0, True, "bool"),
    "float64": (lambda t: t > 0, 1.5, "float64"),
}


def _made(lib, a, dtype):
    t = lib.tensor(a)
    if dtype == "int64":
        return (t * 10).long()
    if dtype == "bool":
        return t > 1
    return t.double() if dtype == "float64" else t


@pytest.mark.parametrize("case", list(CASES))
def test_a_masked_write_is_torch_s_and_reads_nothing_back(session, torch, case):
    mask_of, value, dtype = CASES[case]
    a = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    ref, got = _made(torch, a, dtype), _made(tw, a, dtype).clone()  # (cloned: a value on the device)
    ref[mask_of(ref)] = torch.tensor(5.0) if value == "tensor" else value
    with round_trips(session) as n:
        got[mask_of(got)] = tw.tensor(5.0) if value == "tensor" else value
        assert n[0] == 0
    assert got.dtype == getattr(tw, dtype)
    np.testing.assert_array_equal(got.numpy(), ref.numpy())


def test_top_k_sampling_s_mask_reads_nothing_back_and_differentiates(session, torch):
    rng = np.random.default_rng(1)
    w = rng.standard_normal((2, 6)).astype(np.float32)
    tw_w, t_w = tw.tensor(w, requires_grad=True), torch.tensor(w, requires_grad=True)
    outs = []
    for lib, p in ((tw, tw_w), (torch, t_w)):
        logits = p * 2
        v, _ = lib.topk(logits, 3)
        logits[logits < v[:, [-1]]] = -float("Inf")
        (lib.softmax(logits, -1) * lib.arange(6.0)).sum().backward()
        outs.append((logits.detach().numpy(), p.grad.numpy()))
    np.testing.assert_array_equal(outs[0][0], outs[1][0])
    np.testing.assert_allclose(outs[0][1], outs[1][1], rtol=1e-6, atol=1e-7)


def test_what_is_not_a_masked_fill_takes_the_general_path(session):
    x = tw.arange(6.0).reshape(2, 3).clone()
    x[x > 2] = tw.tensor([7.0, 8.0, 9.0])  # (a value per selected element: the positions are read)
    assert x.tolist() == [[0.0, 1.0, 2.0], [7.0, 8.0, 9.0]]
    for mask in (tw.tensor([True, False, True]), tw.tensor([True])):  # (masks that fit no leading dims: torch's error)
        with pytest.raises(IndexError, match=r"The shape of the mask \[\d\] at index 0 does not match"):
            x[mask] = 1.0
        with pytest.raises(IndexError, match="The shape of the mask"):
            x[mask.numpy().tolist()]
    assert x.tolist() == [[0.0, 1.0, 2.0], [7.0, 8.0, 9.0]]  # (unchanged)


def test_a_mask_among_other_indices_fills_without_a_round_trip(session, torch):
    """A bool mask in a key of ints, full slices and 0-d index tensors, with a scalar value (PyTorch-YOLOv3's
    ``noobj_mask[b[i], anchor_ious > 0.5, gj[i], gi[i]] = 0``, once a target of every step): the part the other
    entries select, filled with ``where`` (``indexing._masked_part_fill``); the values as torch's, nothing read back
    (until session 59 the mask was read for its positions: a round trip each)."""

    def run(lib):
        out = []
        x = lib.ones(2, 3, 4, 5)
        b, gj, gi = lib.tensor(1), lib.tensor(2), lib.tensor(3)
        x[b, lib.tensor([0.2, 0.7, 0.9]) > 0.5, gj, gi] = 0
        out.append(x)
        y = lib.arange(24.0).reshape(2, 3, 4)
        m = lib.tensor([[True, False, True, False], [False, False, True, True], [True, True, False, False]])
        y[0, m] = -1.0
        y[:, m] = y.new_tensor(7.0)
        out.append(y)
        z = lib.zeros(3, 4, dtype=lib.int64)
        z[lib.tensor([True, False, True]), 1] = 5
        z[1, lib.tensor([True, False, False, True])] = True
        out.append(z)
        return out

    got = run(tw)
    for a, b in zip(got, run(torch)):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    x = tw.ones(2, 3, 4, 5)
    iou = tw.rand(3)
    x.numpy()
    with round_trips(session) as n:
        x[tw.tensor(1), iou > 0.5, tw.tensor(2), tw.tensor(3)] = 0
    assert n[0] == 0

