"""Errors: raised on the recording line (shape, dtype), or deferred to the next sync (execution)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw

from ._ref import check, line_of

pytestmark = pytest.mark.usefixtures("session")

HERE = __file__


def _line_of(marker: str) -> int:
    return line_of(HERE, marker)


def test_error_classes():
    assert issubclass(tw.ShapeError, ValueError) and issubclass(tw.ShapeError, tw.TensorwireError)
    assert issubclass(tw.DTypeError, TypeError) and issubclass(tw.DTypeError, tw.TensorwireError)
    assert issubclass(tw.IndexOutOfRange, IndexError) and issubclass(tw.IndexOutOfRange, tw.TensorwireError)
    assert issubclass(tw.DeviceError, tw.TensorwireError)
    assert issubclass(tw.DependencyFailed, tw.TensorwireError)
    assert issubclass(tw.ExecutionError, tw.TensorwireError)


@pytest.mark.parametrize("label,fn,exc", [
    ("broadcast", lambda: tw.zeros(2, 3) + tw.zeros(4), tw.ShapeError),
    ("matmul", lambda: tw.zeros(2, 3) @ tw.zeros(4, 2), tw.ShapeError),
    ("reshape", lambda: tw.zeros(6).reshape(4, 2), tw.ShapeError),
    ("cat", lambda: tw.cat([tw.zeros(2, 3), tw.zeros(2, 4)]), tw.ShapeError),
    ("expand", lambda: tw.zeros(2, 3).expand(4, 3), tw.ShapeError),
    ("where", lambda: tw.where(tw.zeros(3, dtype=tw.bool), tw.zeros(4), tw.zeros(3)), tw.ShapeError),
    ("gather rank", lambda: tw.zeros(2, 3).gather(1, tw.zeros(3, dtype=tw.int64)), tw.ShapeError),
    ("index_put shape", lambda: tw.zeros(2, 3).__setitem__(0, tw.zeros(4)), tw.ShapeError),
    ("matmul dtype", lambda: tw.zeros(2, 3) @ tw.zeros(3, 2, dtype=tw.float64), tw.DTypeError),
    ("bitwise float", lambda: tw.zeros(3) & tw.zeros(3), tw.DTypeError),
    ("mean int", lambda: tw.zeros(3, dtype=tw.int64).mean(), tw.DTypeError),
    ("index float", lambda: tw.zeros(3)[tw.tensor([0.0])], IndexError),
    ("gather float index", lambda: tw.zeros(3).gather(0, tw.tensor([0.5])), tw.DTypeError),
    ("inplace cast", lambda: tw.zeros(3, dtype=tw.int64).add_(0.5), tw.DTypeError),
    ("dim", lambda: tw.zeros(3).sum(1), IndexError),
    ("int index", lambda: tw.zeros(3)[3], IndexError),
    ("bad dtype", lambda: tw.zeros(3, dtype="complex32"), tw.DTypeError),
])
def test_errors_raised_on_the_recording_line(label, fn, exc):
    with pytest.raises(exc) as info:
        fn()
    assert isinstance(info.value, (tw.TensorwireError, IndexError, TypeError))
    # nothing was queued by the failed op: the session still works
    check(tw.ones(2) + 1, np.full(2, 2.0))


def test_shape_error_message_is_clear():
    with pytest.raises(ValueError, match=r"\[2, 3\].*\[4\]|cannot be broadcast"):
        tw.zeros(2, 3) + tw.zeros(4)
    with pytest.raises(ValueError, match="2x3 and 4x2"):
        tw.zeros(2, 3) @ tw.zeros(4, 2)


def test_deferred_gather_error_names_file_and_line():
    x = tw.tensor([[1.0, 2.0], [3.0, 4.0]])
    bad = x.gather(1, tw.tensor([[0, 5], [1, 0]]))  # MARK-gather
    y = bad * 2  # a dependent op
    ok = x.sum()  # independent work
    with pytest.raises(IndexError) as info:
        tw.synchronize()
    e = info.value
    assert isinstance(e, tw.TensorwireError) and isinstance(e, tw.IndexOutOfRange)
    assert "5" in str(e)
    assert f"{HERE}:{_line_of('MARK-gather')}" in str(e)
    # the error was reported once; independent work went on
    tw.synchronize()
    assert ok.item() == 10.0
    # the failed tensor and its dependents raise when fetched
    with pytest.raises(tw.TensorwireError):
        bad.numpy()
    with pytest.raises(tw.TensorwireError) as dep:
        y.numpy()
    assert f"{HERE}:{_line_of('MARK-gather')}" in str(dep.value)
    # and the session carries on
    check(x + 1, np.array([[2.0, 3.0], [4.0, 5.0]]))


def test_deferred_error_surfaces_at_fetch_of_a_dependent():
    x = tw.arange(4)
    bad = x[tw.tensor([0, 9])]  # MARK-index
    z = tw.ones(3)
    with pytest.raises(tw.TensorwireError) as info:
        (bad + 1).numpy()
    assert f"{HERE}:{_line_of('MARK-index')}" in str(info.value)
    assert "out of bounds" in str(info.value)
    check(z, np.ones(3))


def test_first_sync_after_failure_raises_the_root_error_class():
    x = tw.arange(4)
    bad = x[tw.tensor([0, 9])]
    with pytest.raises(IndexError):
        (bad + 1).numpy()


def test_deferred_error_from_inside_a_library_call_names_the_user_line():
    x = tw.zeros(2, 3)
    idx = tw.tensor([[7, 0, 0]])
    r = x.take_along_dim(idx, 0)  # MARK-library
    with pytest.raises(IndexError) as info:
        r.numpy()
    assert f"{HERE}:{_line_of('MARK-library')}" in str(info.value)


def test_scatter_and_index_put_execution_errors():
    x = tw.zeros(3)
    r = x.scatter(0, tw.tensor([3]), tw.tensor([1.0]))
    with pytest.raises(IndexError):
        r.numpy()
    y = tw.zeros(3)
    y[tw.tensor([5])] = 1.0
    with pytest.raises(IndexError):
        tw.synchronize()
    w = tw.zeros(2, 2)
    w.index_add_(0, tw.tensor([2]), tw.ones(1, 2))
    with pytest.raises(IndexError):
        w.numpy()


def test_integer_division_by_zero_is_an_execution_error():
    r = tw.tensor([1, 2]) // tw.tensor([1, 0])  # MARK-div
    with pytest.raises(tw.TensorwireError) as info:
        r.numpy()
    assert f"{HERE}:{_line_of('MARK-div')}" in str(info.value)
    check(tw.tensor([1.0]) / 0, np.array([np.inf]))  # float division by zero is fine


def test_synchronize_waits_and_is_idempotent():
    tw.synchronize()
    x = tw.randn(50, 50)
    for _ in range(20):
        x = (x @ x.T).tanh()
    tw.synchronize()
    tw.synchronize()
    assert x.shape == (50, 50)
    assert np.isfinite(x.numpy()).all()


def test_unknown_device_lists_devices():
    with pytest.raises(tw.DeviceError) as info:
        tw.zeros(2, device="cpu:7")
    msg = str(info.value)
    assert "cpu:7" in msg and "cpu:0" in msg and "cpu:1" in msg
    with pytest.raises(tw.DeviceError) as info2:
        tw.tensor([1.0]).to("cuda:0")
    assert "cpu:0" in str(info2.value) and "cpu:1" in str(info2.value)
    with pytest.raises(tw.DeviceError):
        tw.set_default_device("gpu:3")
    assert tw.devices() == ["cpu:0", "cpu:1"] or sorted(tw.devices()) == ["cpu:0", "cpu:1"]


def test_every_spelling_of_a_device_names_it_and_an_unknown_one_raises():
    # (the factories take a name the cluster has, or a device object's, as it is: creation._ctx; the rest goes through
    # device_name and the session's check)
    x = tw.zeros(2, device="cpu:1")
    for spelling in ("cpu:1", tw.device("cpu:1"), tw.device("cpu", 1), x.device, 1):
        assert tw.as_tensor((0.5,), device=spelling).device == "cpu:1"
        assert tw.zeros(1, device=spelling).device == "cpu:1"
    assert tw.tensor([1.0], device="cpu").device == "cpu:0"  # (no index: device 0, as torch)
    assert tw.device("cpu:1") == "cpu:1" and hash(tw.device("cpu", 1)) == hash("cpu:1") and str(x.device) == "cpu:1"
    for unknown in ("cpu:7", tw.device("cpu:7"), 7):
        with pytest.raises(tw.DeviceError, match="cpu:7"):
            tw.as_tensor((0.5,), device=unknown)


def test_mixed_devices_raise():
    a = tw.zeros(2, device="cpu:0")
    b = tw.zeros(2, device="cpu:1")
    with pytest.raises(tw.DeviceError, match="cpu:0.*cpu:1|cpu:1.*cpu:0"):
        a + b
    with pytest.raises(tw.DeviceError):
        tw.cat([a, b])
    check(a + b.to("cpu:0"), np.zeros(2))


def test_default_device_switch():
    prev = tw.get_default_device()
    try:
        tw.set_default_device("cpu:1")
        t = tw.ones(2)
        assert t.device == "cpu:1"
        assert repr(t) == "tensor([1., 1.], device='cpu:1')"
    finally:
        tw.set_default_device(prev)
    assert tw.ones(1).device == prev


def test_error_does_not_poison_later_batches():
    for i in range(3):
        bad = tw.zeros(2).gather(0, tw.tensor([i + 2]))
        with pytest.raises(IndexError):
            bad.numpy()
        check(tw.full((2,), float(i)), np.full(2, float(i)))


def test_typed_errors_are_runtime_errors_as_torch_s():
    """torch raises ``RuntimeError`` for shape, dtype and index errors; a torch script's ``except RuntimeError``
    catches tensorwire's typed ones too (which stay ``ValueError``/``TypeError``/``IndexError``)."""
    with pytest.raises(RuntimeError):
        tw.ones(2, 3) @ tw.ones(2, 3)
    with pytest.raises(ValueError):
        tw.ones(2, 3) @ tw.ones(2, 3)
    with pytest.raises(RuntimeError):
        tw.ones(3, dtype=tw.int64).add_(1.5)
    with pytest.raises(RuntimeError):
        tw.ones(3)[5].item()
    for cls in (tw.ShapeError, tw.DTypeError, tw.IndexOutOfRange):
        assert issubclass(cls, RuntimeError) and issubclass(cls, tw.TensorwireError)
