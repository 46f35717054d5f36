"""PyTorch idioms programs rely on (issue 17), each checked against PyTorch where it is installed: ``Tensor.data``,
the device-availability functions, ``isclose``/``allclose``/``equal``, ``out=``, and the clear errors for what
tensorwire does not do (ONNX export); saving a whole module pickles it, as torch."""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest

import tensorwire as tw

torch = pytest.importorskip("torch", reason="PyTorch is the reference here (pip install torch==2.13.0)")

pytestmark = pytest.mark.usefixtures("session")


# -- Tensor.data -----------------------------------------------------------------------------------------------------

def _manual_sgd(T, steps: int = 40):
    """Linear regression trained by updating ``.data`` in place, the classic pre-optimizer loop."""
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((64, 3)).astype(np.float32)
    ys = xs @ np.array([1.5, -2.0, 0.5], np.float32) + 0.3
    x, y = T.tensor(xs), T.tensor(ys)
    w = T.zeros(3, requires_grad=True)
    b = T.zeros(1, requires_grad=True)
    losses = []
    for _ in range(steps):
        loss = ((x @ w + b - y) ** 2).mean()
        loss.backward()
        w.data.sub_(0.1 * w.grad)
        b.data -= 0.1 * b.grad
        w.grad.zero_()
        b.grad.zero_()
        losses.append(float(loss.detach()))
    return np.array(losses), w.detach().numpy(), (w.requires_grad, w.is_leaf, w.grad_fn is None)


def test_in_place_updates_through_data_train_as_in_torch():
    ours, w_ours, flags = _manual_sgd(tw)
    ref, w_ref, ref_flags = _manual_sgd(torch)
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(w_ours, w_ref, rtol=1e-5, atol=1e-6)
    assert flags == ref_flags == (True, True, True)
    assert ours[-1] < 1e-3 * ours[0]  # it converged (before .data shared updates, it never did)


def test_data_shares_updates_both_ways_and_is_detached():
    p = tw.nn.Parameter(tw.ones(3))
    d = p.data
    assert not d.requires_grad and d.grad_fn is None
    p.data.add_(1)  # no "leaf Variable that requires grad is being used in an in-place operation"
    assert p.tolist() == [2.0, 2.0, 2.0] and d.tolist() == [2.0, 2.0, 2.0]
    with tw.no_grad():
        p.mul_(3)
    assert d.tolist() == [6.0, 6.0, 6.0]  # the earlier .data sees later updates, as torch's shared storage
    m = tw.nn.Linear(3, 2)
    m.weight.data.copy_(tw.ones(2, 3))
    m.weight.data[0].zero_()  # a view of .data writes through too
    assert m.weight.tolist() == [[0.0] * 3, [1.0] * 3] and m.weight.requires_grad and m.weight.is_leaf
    y = m(tw.ones(1, 3)).sum()
    y.backward()
    assert m.weight.grad.tolist() == [[1.0] * 3, [1.0] * 3]


def test_assigning_data_replaces_the_value_and_keeps_the_flags():
    p = tw.nn.Parameter(tw.ones(3))
    p.data = tw.zeros(2, 2)
    assert p.shape == (2, 2) and p.requires_grad and p.tolist() == [[0.0, 0.0], [0.0, 0.0]]
    t = tw.arange(4.0)
    t.data = tw.ones(2)
    assert t.tolist() == [1.0, 1.0]
    with pytest.raises(TypeError, match="Tensor"):
        t.data = [1, 2]


def test_in_place_on_a_leaf_still_refused_without_data():
    p = tw.nn.Parameter(tw.ones(3))
    with pytest.raises(tw.TensorwireError, match="leaf Variable"):
        p.add_(1)


# -- devices ---------------------------------------------------------------------------------------------------------

def test_device_idioms_answer_from_the_cluster():
    """The module's cluster has cpu:0 and cpu:1 only: no accelerator, whatever this host has."""
    assert tw.cuda.is_available() is False and tw.cuda.device_count() == 0
    assert tw.mps.is_available() is False
    assert tw.accelerator.is_available() is False and tw.accelerator.current_accelerator() is None
    dev = tw.device("cuda" if tw.cuda.is_available() else "cpu")
    assert tw.ones(2).to(dev).device == "cpu:0"
    with pytest.raises(ValueError, match="not one of the cluster's devices"):
        tw.cuda.set_device(0)
    assert tw.accelerator.device_indices("cpu") == [0, 1]


def _cluster_with_opencl(shared_clusters):
    """The run's shared cpu:0 + opencl:0 cluster (tests/backends/test_opencl.py's). (The OpenCL driver is never
    loaded in the pytest process: its LLVM and hipRTC's abort one process.)"""
    try:
        return shared_clusters.local(devices=["cpu:0", "opencl:0"], collectives=False)
    except (tw.TensorwireError, RuntimeError) as e:
        pytest.skip(f"no OpenCL device to stand for an accelerator: {e}")


def test_accelerator_found_when_the_cluster_has_one(shared_clusters):
    before = tw.current_session()
    try:
        with tw.connect(_cluster_with_opencl(shared_clusters).address):
            acc = tw.accelerator.current_accelerator()
            assert acc == "opencl:0" and tw.accelerator.is_available() and tw.accelerator.device_count() == 1
            assert tw.ones(2).to(acc).device == "opencl:0"
            assert tw.cuda.is_available() is False
    finally:
        tw.set_session(before)


def test_tensor_attributes_programs_check():
    t = tw.ones(2)
    assert (t.is_cuda, t.is_mps, t.is_cpu, t.is_sparse, t.is_complex(), t.layout) == (False, False, True, False,
                                                                                      False, "strided")
    assert t.to(memory_format=tw.channels_last).shape == (2,)
    assert t.contiguous(memory_format=tw.contiguous_format).shape == (2,)


# -- comparisons -----------------------------------------------------------------------------------------------------

A = np.array([1.0, np.nan, np.inf, -np.inf, 1e-9, 2.0, 3.0, -0.0], np.float32)
B = np.array([1.0 + 1e-6, np.nan, np.inf, np.inf, 0.0, 2.1, np.nan, 0.0], np.float32)


@pytest.mark.parametrize("kw", [{}, {"equal_nan": True}, {"rtol": 0.1}, {"atol": 0.5, "rtol": 0.0}])
def test_isclose_matches_torch(kw):
    got = tw.isclose(tw.tensor(A), tw.tensor(B), **kw).numpy()
    want = torch.isclose(torch.tensor(A), torch.tensor(B), **kw).numpy()
    np.testing.assert_array_equal(got, want)
    assert tw.tensor(A).isclose(tw.tensor(B), **kw).dtype is tw.bool


def test_isclose_on_integers_and_allclose_and_equal():
    a, b = np.array([1, 5, 100, -7]), np.array([1, 6, 101, -7])
    for kw in ({"rtol": 0.01, "atol": 0}, {}, {"atol": 1, "rtol": 0}):
        np.testing.assert_array_equal(tw.isclose(tw.tensor(a), tw.tensor(b), **kw).numpy(),
                                      torch.isclose(torch.tensor(a), torch.tensor(b), **kw).numpy())
    assert tw.allclose(tw.tensor(A[:1]), tw.tensor(B[:1])) is torch.allclose(torch.tensor(A[:1]),
                                                                             torch.tensor(B[:1])) is True
    assert tw.allclose(tw.tensor(A), tw.tensor(B), equal_nan=True) is False
    assert tw.equal(tw.tensor(a), tw.tensor(a)) is True and tw.tensor(a).equal(tw.tensor(b)) is False
    assert tw.equal(tw.tensor(a), tw.tensor(a[:2])) is False
    with pytest.raises(tw.DTypeError, match="same dtype"):
        tw.isclose(tw.tensor(a), tw.tensor(b, dtype=tw.float32))


# -- out= ------------------------------------------------------------------------------------------------------------

def test_out_writes_in_place_resizes_and_refuses_narrowing():
    a = tw.tensor([[1.0, 2.0], [3.0, 4.0]])
    o = tw.zeros(2, 2)
    view = o[0]
    r = tw.add(a, a, out=o)
    assert r is o and o.tolist() == [[2.0, 4.0], [6.0, 8.0]] and view.tolist() == [2.0, 4.0]
    e = tw.empty(0)
    tw.mul(a, 3, out=e)
    assert e.shape == (2, 2) and e.tolist() == [[3.0, 6.0], [9.0, 12.0]]
    d64 = tw.zeros(2, 2, dtype=tw.float64)
    tw.matmul(a, a, out=d64)
    assert d64.dtype is tw.float64 and d64.tolist() == torch.matmul(*[torch.tensor(a.tolist())] * 2).tolist()
    with pytest.raises(tw.DTypeError, match="can't be cast"):
        tw.add(a, a, out=tw.zeros(2, 2, dtype=tw.int64))
    v, i = tw.zeros(2), tw.zeros(2, dtype=tw.int64)
    res = tw.max(a, 1, out=(v, i))
    assert res.values is v and v.tolist() == [2.0, 4.0] and i.tolist() == [1, 1]
    c = tw.zeros(4, 2)
    tw.cat([a, a], out=c)
    s = tw.empty(0)
    tw.stack([a, a], out=s)
    assert c.tolist() == [[1.0, 2.0], [3.0, 4.0]] * 2 and s.shape == (2, 2, 2)
    w = tw.zeros(2, 2)
    tw.where(a > 2, a, tw.zeros(2, 2), out=w)
    assert w.tolist() == [[0.0, 0.0], [3.0, 4.0]]


# -- what tensorwire refuses, clearly ----------------------------------------------------------------------------------

def test_saving_a_whole_module_pickles_it_and_loading_it_needs_weights_only_false():
    """As torch 2.6+: ``save(model)`` pickles; ``load`` refuses the module's class unless allowed (issue 33; the rest
    in tests/client/test_serialization_pickle.py)."""
    m = tw.nn.Linear(2, 3)
    for obj, cls in ((m, "tensorwire.nn.layers.Linear"), (tw.optim.SGD(m.parameters(), lr=0.1),
                                                          "tensorwire.optim.algorithms.SGD")):
        buf = io.BytesIO()
        tw.save(obj, buf)
        with pytest.raises(pickle.UnpicklingError, match=f"GLOBAL {cls} was not an allowed global"):
            tw.load(io.BytesIO(buf.getvalue()))
        assert type(tw.load(io.BytesIO(buf.getvalue()), weights_only=False)) is type(obj)
    buf = io.BytesIO()
    tw.save({"w": m.weight, "step": 3}, buf)  # tensors and state dicts load back as tensors
    buf.seek(0)
    back = tw.load(buf)
    assert back["step"] == 3 and back["w"].tolist() == m.weight.tolist()


def test_onnx_export_says_it_is_not_supported():
    assert tw.onnx.is_in_onnx_export() is False
    with pytest.raises(NotImplementedError, match="state_dict"):
        tw.onnx.export(tw.nn.Linear(2, 2), (tw.ones(1, 2),), "model.onnx")


def test_torch_backends_names_programs_use():
    """torch.backends.* settings are accepted and readable; availability answers from the cluster."""
    tw.backends.cudnn.benchmark = True
    tw.backends.cudnn.deterministic = True
    tw.backends.cuda.matmul.allow_tf32 = True
    assert tw.backends.cudnn.benchmark and tw.backends.cuda.matmul.allow_tf32
    assert tw.backends.mps.is_built() and tw.backends.cuda.is_built()
    assert tw.backends.mps.is_available() is False and tw.backends.cuda.is_available() is False  # cpu:0, cpu:1 only
    assert tw.backends.opt_einsum.enabled is False and tw.backends.mkldnn.enabled is True


def test_cuda_amp_is_amp_for_cuda():
    assert isinstance(tw.cuda.amp.GradScaler(enabled=False), tw.amp.GradScaler)
    ac = tw.cuda.amp.autocast(dtype=tw.float16)
    assert isinstance(ac, tw.amp.autocast) and ac.device == "cuda"


def test_creation_functions_take_out():
    o = tw.empty(0, dtype=tw.float64)
    r = tw.zeros(2, 3, out=o)
    assert r is o and o.shape == (2, 3) and o.dtype is tw.float64 and o.tolist() == [[0.0] * 3] * 2
    a = tw.zeros(4, dtype=tw.int64)
    tw.arange(4, out=a)
    assert a.tolist() == torch.arange(4).tolist()
    f = tw.zeros(5)
    tw.linspace(0, 1, 5, out=f)
    np.testing.assert_allclose(f.numpy(), torch.linspace(0, 1, 5).numpy())
    e = tw.empty(0)
    tw.eye(2, out=e)
    assert e.tolist() == [[1.0, 0.0], [0.0, 1.0]]


def test_cuda_on_a_cluster_without_cuda_names_the_device(session):
    """``x.cuda()`` and ``model.cuda()`` exist (issue 36); without a cuda device the error says what the cluster has."""
    with pytest.raises(tw.DeviceError, match="unknown device 'cuda:0'; the cluster has"):
        tw.ones(2).cuda()
    with pytest.raises(tw.DeviceError, match="unknown device 'cuda:1'"):
        tw.nn.Linear(2, 2).cuda(1)


def test_legacy_tensor_types():
    """``torch.FloatTensor(array)``, ``LongTensor(list)``, ``FloatTensor(2, 3)``, ``isinstance`` and ``.type(...)``,
    as older scripts (pygcn) use them."""
    a = tw.FloatTensor(np.arange(3))
    assert a.dtype is tw.float32 and a.tolist() == [0.0, 1.0, 2.0]
    assert isinstance(a, tw.FloatTensor) and isinstance(a, tw.Tensor) and not isinstance(a, tw.LongTensor)
    b = tw.LongTensor([1, 2])
    assert b.dtype is tw.int64 and b.tolist() == [1, 2] and isinstance(b, tw.LongTensor)
    assert tw.FloatTensor(2, 3).shape == (2, 3) and tw.DoubleTensor().shape == (0,)
    assert tw.BoolTensor(tw.Size([4])).shape == (4,) and tw.ByteTensor([3]).dtype is tw.uint8
    assert a.type(tw.LongTensor).dtype is tw.int64 and a.type(tw.float64).dtype is tw.float64
    # torch's type names, given back by older scripts (``x.type(y.type())``)
    for dt, name in ((tw.float32, "torch.FloatTensor"), (tw.int64, "torch.LongTensor"), (tw.bool, "torch.BoolTensor"),
                     (tw.complex64, "torch.ComplexFloatTensor"), (tw.uint8, "torch.ByteTensor")):
        t = tw.zeros(2, dtype=dt)
        assert t.type() == name and t.type(name) is t and a.type(name).dtype is dt
    with pytest.raises(ValueError, match="invalid type: 'torch.float32'"):
        a.type("torch.float32")
    with pytest.raises(TypeError, match="expected data or sizes"):
        tw.FloatTensor([1.0], [2.0])
