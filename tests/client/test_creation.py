"""Creation, random numbers, attributes, conversion and printing."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw

from ._ref import DTYPE_NAMES, FLOAT_NAMES, check, check_torch, npd, thd, torch, twd

pytestmark = pytest.mark.usefixtures("session")


# ------------------------------------------------------------------ tensor / as_tensor / from_numpy

@pytest.mark.parametrize("data,dtype", [
    ([1, 2, 3], "int64"),
    ([1.0, 2, 3], "float32"),
    ([[1, 2], [3, 4]], "int64"),
    ([True, False], "bool"),
    (3, "int64"),
    (2.5, "float32"),
    (True, "bool"),
    ([[1.5], [2.5]], "float32"),
    ([], "float32"),
    ([[]], "float32"),
    (np.float64(1.5), "float64"),
    (np.array([1, 2], dtype=np.int16), "int16"),
    (np.array(7, dtype=np.uint8), "uint8"),
    (np.array([[1.5, 2]], dtype=np.float16), "float16"),
])
def test_tensor_infers_dtype_like_torch(data, dtype):
    t = tw.tensor(data)
    ref = np.asarray(data)
    check(t, ref, dtype=dtype)
    assert t.shape == ref.shape
    if torch is not None:
        check_torch(t, torch.tensor(data))


@pytest.mark.parametrize("dt", DTYPE_NAMES)
def test_tensor_with_dtype(dt):
    vals = [[0, 1, 2], [3, 1, 0]]
    t = tw.tensor(vals, dtype=twd(dt))
    check(t, np.array(vals).astype(npd(dt)), dtype=dt)
    t2 = tw.tensor([1.7, -0.2, 2.9], dtype=twd(dt)) if dt not in ("uint8", "bool") else None
    if t2 is not None:
        want = np.array([1.7, -0.2, 2.9]).astype(npd(dt)) if dt in FLOAT_NAMES else np.array([1, 0, 2])
        check(t2, want, dtype=dt)
        if torch is not None:
            check_torch(t2, torch.tensor([1.7, -0.2, 2.9], dtype=thd(dt)))
    assert tw.tensor(vals, dtype=dt).dtype is twd(dt)  # dtype by name too


def test_tensor_from_numpy_bfloat16_and_0d():
    import ml_dtypes

    a = np.array([1.5, -2.25], dtype=ml_dtypes.bfloat16)
    t = tw.tensor(a)
    assert t.dtype is tw.bfloat16
    check(t, a.astype(np.float64))
    z = tw.from_numpy(np.array(3.5))
    assert z.shape == () and z.ndim == 0 and z.dtype is tw.float64
    assert z.item() == 3.5
    z2 = tw.tensor(np.array(4, dtype=np.int32))
    assert z2.shape == () and z2.dtype is tw.int32 and z2.item() == 4


def test_tensor_copies_and_from_nested_tensors():
    a = np.arange(6.0).reshape(2, 3)
    t = tw.tensor(a)
    a[0, 0] = 100.0  # tw.tensor copies
    check(t, np.arange(6.0).reshape(2, 3), dtype="float64")
    rows = [tw.tensor([1.0, 2.0]), tw.tensor([3.0, 4.0])]
    check(tw.tensor([r.tolist() for r in rows]), np.array([[1.0, 2.0], [3.0, 4.0]]), dtype="float32")


def test_tensor_rejects_bad_data():
    with pytest.raises(TypeError):
        tw.tensor(["a", "b"])
    with pytest.raises(TypeError):
        tw.from_numpy([1, 2])
    with pytest.raises(TypeError):
        tw.tensor(np.array([1 + 2j], dtype=np.clongdouble))  # (complex64 and complex128 are tensorwire dtypes)


def test_from_numpy_keeps_dtype():
    for dt in ("float64", "float32", "float16", "int8", "int16", "int32", "int64", "uint8", "bool"):
        a = np.arange(6).reshape(2, 3).astype(dt)
        t = tw.from_numpy(a)
        check(t, a, dtype=dt)
    nc = np.arange(12.0).reshape(3, 4).T  # not contiguous
    check(tw.from_numpy(nc), nc, dtype="float64")
    check(tw.from_numpy(nc[::2]), nc[::2], dtype="float64")


def test_as_tensor():
    t = tw.tensor([1.0, 2.0])
    assert tw.as_tensor(t) is t
    d = tw.as_tensor(t, dtype=tw.float64)
    check(d, np.array([1.0, 2.0]), dtype="float64")
    check(tw.as_tensor([1, 2]), np.array([1, 2]), dtype="int64")
    check(tw.as_tensor(np.array([1.5])), np.array([1.5]), dtype="float64")
    moved = tw.as_tensor(t, device="cpu:1")
    assert moved.device == "cpu:1"
    check(moved, np.array([1.0, 2.0]))


# ------------------------------------------------------------------ zeros / ones / full / empty / *_like

@pytest.mark.parametrize("fn,value", [(tw.zeros, 0), (tw.ones, 1), (tw.empty, 0)])
def test_zeros_ones_empty(fn, value):
    for args in [(2, 3), ((2, 3),), ([4],), (tw.Size([1, 2, 3]),), ((),), (0,), (2, 0)]:
        t = fn(*args)
        shape = args if isinstance(args[0], int) else tuple(args[0])
        check(t, np.full(shape, value, dtype=np.float32), dtype="float32")
    for dt in DTYPE_NAMES:
        check(fn(2, 2, dtype=twd(dt)), np.full((2, 2), value, npd(dt)), dtype=dt)
    t = fn(3, device="cpu:1")
    assert t.device == "cpu:1" and str(t.device) == "cpu:1"
    check(t, np.full(3, value, np.float32))
    if torch is not None:
        tf = getattr(torch, fn.__name__)
        if fn is not tw.empty:
            check_torch(fn(2, 3, dtype=tw.int32), tf(2, 3, dtype=torch.int32))


def test_full():
    check(tw.full((2, 3), 7), np.full((2, 3), 7), dtype="int64")
    check(tw.full((2,), 1.5), np.full(2, 1.5), dtype="float32")
    check(tw.full((2,), True), np.full(2, True), dtype="bool")
    check(tw.full((2,), 3, dtype=tw.float64), np.full(2, 3.0), dtype="float64")
    check(tw.full([], -2.5), np.asarray(-2.5), dtype="float32")
    check(tw.full((2, 2), float("inf")), np.full((2, 2), np.inf), dtype="float32")
    if torch is not None:
        check_torch(tw.full((2, 3), 7), torch.full((2, 3), 7))
        check_torch(tw.full((2,), True), torch.full((2,), True))


def test_like_functions():
    x = tw.tensor(np.arange(6, dtype=np.int32).reshape(2, 3), device="cpu:1")
    for fn, v in ((tw.zeros_like, 0), (tw.ones_like, 1), (tw.empty_like, 0)):
        t = fn(x)
        assert t.device == "cpu:1"
        check(t, np.full((2, 3), v, np.int32), dtype="int32")
        check(fn(x, dtype=tw.float16), np.full((2, 3), v), dtype="float16")
    f = tw.full_like(x, 9)
    check(f, np.full((2, 3), 9), dtype="int32")
    check(tw.full_like(x, 2.5, dtype=tw.float64), np.full((2, 3), 2.5), dtype="float64")
    assert tw.zeros_like(x, device="cpu:0").device == "cpu:0"
    r = tw.rand_like(tw.zeros(3, 4, dtype=tw.float64))
    assert r.shape == (3, 4) and r.dtype is tw.float64
    ri = tw.randint_like(x, 5)
    assert ri.dtype is tw.int32 and ri.device == "cpu:1"
    assert ((ri.numpy() >= 0) & (ri.numpy() < 5)).all()


def test_new_methods():
    x = tw.tensor([1, 2], dtype=tw.int16, device="cpu:1")
    for t, want in ((x.new_zeros(2, 3), np.zeros((2, 3))), (x.new_ones((3,)), np.ones(3)),
                    (x.new_full((2,), 5), np.full(2, 5)), (x.new_tensor([7, 8]), np.array([7, 8])),
                    (x.new_empty(2), np.zeros(2))):
        assert t.device == "cpu:1"
        check(t, want, dtype="int16")


# ------------------------------------------------------------------ arange / linspace / eye

@pytest.mark.parametrize("args,kw", [
    ((5,), {}), ((2, 7), {}), ((0, 10, 3), {}), ((10, 0, -2), {}), ((0.0, 1.0, 0.1), {}), ((1, 2.5, 0.5), {}),
    ((5,), {"dtype": "float64"}), ((0, 5), {"dtype": "int32"}), ((-3, 3), {"dtype": "float16"}),
    ((0, 0), {}), ((0, 1, 0.3), {}), ((5, 1, -1), {}),
])
def test_arange(args, kw):
    t = tw.arange(*args, **{k: twd(v) for k, v in kw.items()})
    want = np.arange(*args, dtype=np.float64)
    exp_dt = kw.get("dtype") or ("float32" if any(isinstance(a, float) for a in args) else "int64")
    check(t, want.astype(npd(exp_dt)), dtype=exp_dt)
    if torch is not None:
        check_torch(t, torch.arange(*args, **{k: thd(v) for k, v in kw.items()}))


def test_arange_errors():
    with pytest.raises(ValueError):
        tw.arange(3, 1)
    with pytest.raises(ValueError):
        tw.arange(0, 3, 0)


@pytest.mark.parametrize("start,end,steps", [(0, 1, 5), (-2, 2, 9), (1, 1, 3), (3, 0, 4), (0, 10, 1), (0, 1, 0),
                                             (0.5, 2.5, 11)])
def test_linspace(start, end, steps):
    t = tw.linspace(start, end, steps)
    check(t, np.linspace(start, end, steps), dtype="float32")
    t64 = tw.linspace(start, end, steps, dtype=tw.float64)
    check(t64, np.linspace(start, end, steps), dtype="float64", rtol=1e-12, atol=1e-12)
    if torch is not None:
        check_torch(t, torch.linspace(start, end, steps))
        check_torch(t64, torch.linspace(start, end, steps, dtype=torch.float64))


def test_eye():
    check(tw.eye(3), np.eye(3), dtype="float32")
    check(tw.eye(2, 4), np.eye(2, 4), dtype="float32")
    check(tw.eye(4, 2, dtype=tw.int64), np.eye(4, 2), dtype="int64")
    check(tw.eye(3, dtype=tw.bool), np.eye(3, dtype=bool), dtype="bool")
    check(tw.eye(0), np.eye(0), dtype="float32")
    e = tw.eye(2, device="cpu:1", requires_grad=False)
    assert e.device == "cpu:1"
    if torch is not None:
        check_torch(tw.eye(2, 4), torch.eye(2, 4))


def test_requires_grad_flag_accepted():
    for t in (tw.zeros(2, requires_grad=True), tw.ones(2, requires_grad=True), tw.tensor([1.0], requires_grad=True),
              tw.randn(2, requires_grad=True), tw.full((2,), 1.0, requires_grad=True)):
        assert t.requires_grad is True
    assert tw.zeros(2).requires_grad is False
    assert tw.zeros(2).requires_grad_().requires_grad is True
    assert repr(tw.ones(2, requires_grad=True)) == "tensor([1., 1.], requires_grad=True)"


def test_format_is_torchs():
    """``format``/f-strings as torch: a 0-d tensor is its Python number with or without a spec (minGPT's adder prints
    ``f"new top score of {score}"`` for a sum: ``675.0``), another tensor its ``str``, and a spec for it a
    ``TypeError``."""
    cases = [(tw.tensor(675.0), ""), (tw.tensor(2.5), ".3f"), (tw.tensor(7), "d"), (tw.tensor(7), ">4"),
             (tw.tensor(True), ""), (tw.tensor([1.0, 2.0]), ""), (tw.tensor([[3]]), "")]
    got = [format(t, spec) for t, spec in cases]
    assert got == ["675.0", "2.500", "7", "   7", "True", "tensor([1., 2.])", "tensor([[3]])"]
    if torch is not None:
        assert got == [format(torch.tensor(t.numpy()), spec) for t, spec in cases]
    with pytest.raises(TypeError, match="unsupported format string"):
        format(tw.tensor([1.0]), ".2f")


# ------------------------------------------------------------------ random

def test_manual_seed_reproducible_across_devices():
    outs = {}
    for dev in ("cpu:0", "cpu:1"):
        tw.manual_seed(1234)
        outs[dev] = [tw.rand(3, 4, device=dev), tw.randn(5, device=dev), tw.randint(0, 10, (6,), device=dev),
                     tw.randn(2, 2, dtype=tw.float64, device=dev), tw.rand(4, dtype=tw.float16, device=dev)]
    for a, b in zip(outs["cpu:0"], outs["cpu:1"]):
        assert a.device == "cpu:0" and b.device == "cpu:1"
        assert a.dtype is b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    # successive draws differ; the same seed restarts the stream
    tw.manual_seed(1234)
    r1, r2 = tw.rand(100), tw.rand(100)
    assert not np.array_equal(r1.numpy(), r2.numpy())
    tw.manual_seed(1234)
    np.testing.assert_array_equal(tw.rand(100).numpy(), r1.numpy())
    tw.manual_seed(99)
    assert not np.array_equal(tw.rand(100).numpy(), r1.numpy())


def test_random_distributions():
    tw.manual_seed(7)
    u = tw.rand(20000, dtype=tw.float64).numpy()
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.02 and abs(u.var() - 1 / 12) < 0.01
    n = tw.randn(20000, dtype=tw.float64).numpy()
    assert abs(n.mean()) < 0.05 and abs(n.std() - 1.0) < 0.05
    n32 = tw.randn(100, 100)
    assert n32.dtype is tw.float32 and n32.shape == (100, 100)
    r = tw.randint(-3, 4, (5000,)).numpy()
    assert r.dtype == np.int64 and r.min() == -3 and r.max() == 3
    assert set(np.unique(r)) == set(range(-3, 4))
    r2 = tw.randint(5, (3, 3), dtype=tw.int32)
    assert r2.dtype is tw.int32 and r2.shape == (3, 3)
    assert ((r2.numpy() >= 0) & (r2.numpy() < 5)).all()
    with pytest.raises(TypeError):
        tw.rand(3, dtype=tw.int64)
    with pytest.raises(ValueError):
        tw.randint(5, 5, (2,))


def test_generator_object():
    g = tw.Generator().manual_seed(5)
    a = tw.randn(10, generator=g).numpy()
    g.manual_seed(5)
    np.testing.assert_array_equal(tw.randn(10, generator=g).numpy(), a)
    st = g.get_state()
    b = tw.rand(3, generator=g).numpy()
    g.set_state(st)
    np.testing.assert_array_equal(tw.rand(3, generator=g).numpy(), b)
    assert tw.manual_seed(3).initial_seed() == 3


def test_randperm():
    tw.manual_seed(0)
    p = tw.randperm(10)
    assert p.dtype is tw.int64
    assert sorted(p.tolist()) == list(range(10))


# ------------------------------------------------------------------ attributes and conversion

def test_attributes():
    x = tw.zeros(2, 3, 4, dtype=tw.float64, device="cpu:1")
    assert x.shape == (2, 3, 4) and isinstance(x.shape, tuple) and x.shape == tw.Size([2, 3, 4])
    assert x.size() == (2, 3, 4) and x.size(1) == 3 and x.size(-1) == 4
    assert x.ndim == 3 and x.dim() == 3 and x.numel() == 24 and len(x) == 2
    assert x.dtype is tw.float64 and x.dtype == tw.double
    assert x.device == tw.device("cpu", 1) and x.device == "cpu:1" and x.device.type == "cpu"
    assert x.device.index == 1
    assert x.element_size() == 8 and x.is_floating_point() and tw.is_floating_point(x)
    assert tw.is_tensor(x) and not tw.is_tensor(np.zeros(2))
    assert repr(x.shape) == "tensorwire.Size([2, 3, 4])"
    assert tw.Size([2, 3]).numel() == 6
    s = tw.tensor(5)
    assert s.shape == () and s.ndim == 0 and s.numel() == 1
    with pytest.raises(TypeError):
        len(s)
    with pytest.raises(IndexError):
        x.size(3)


@pytest.mark.parametrize("src", ["float32", "float64", "int32", "int64", "bool", "float16", "bfloat16", "uint8"])
def test_conversions(src):
    a = np.array([[-1.75, 0.0, 2.5], [3.25, -0.5, 1.0]])
    if src == "uint8":
        a = np.abs(a)
    x = tw.tensor(a, dtype=twd(src))
    base = np.asarray(x.numpy())
    b64 = base.astype(np.float32).astype(np.float64) if src == "bfloat16" else base.astype(np.float64)
    cases = {"float": ("float32", b64), "double": ("float64", b64), "half": ("float16", b64),
             "long": ("int64", np.trunc(b64)), "int": ("int32", np.trunc(b64)), "bool": ("bool", b64 != 0),
             "bfloat16": ("bfloat16", b64), "short": ("int16", np.trunc(b64))}
    for meth, (dt, want) in cases.items():
        y = getattr(x, meth)()
        check(y, want, dtype=dt)
        if torch is not None:
            tx = torch.tensor(b64).to(thd(src))
            check_torch(y, getattr(tx, meth)())
    for dt in DTYPE_NAMES:
        y = x.to(twd(dt))
        assert y.dtype is twd(dt)
        y2 = x.to(dtype=dt)
        assert y2.dtype is twd(dt)
        if torch is not None:
            check_torch(y, torch.tensor(b64).to(thd(src)).to(thd(dt)))


def test_to_device_and_back():
    a = np.arange(6.0).reshape(2, 3)
    x = tw.tensor(a, dtype=tw.float32)
    assert x.device == "cpu:0"
    y = x.to("cpu:1")
    assert y.device == "cpu:1" and y.dtype is tw.float32
    check(y, a)
    z = y.to(tw.device("cpu:0"), tw.float64)
    assert z.device == "cpu:0" and z.dtype is tw.float64
    check(z, a)
    assert x.to("cpu:0") is x
    assert x.to(x) is x
    w = x.to(y)
    assert w.device == "cpu:1"
    check(y * 2 + 1, a * 2 + 1)  # computed on cpu:1
    check(y.cpu(), a)
    assert y.cpu().device == "cpu:0"
    c = x.to("cpu:0", copy=True)
    assert c is not x
    check(c, a)
    with pytest.raises(tw.DeviceError):
        x + y
    w2 = tw.tensor([1.0]).to(tw.tensor([1], dtype=tw.int16, device="cpu:1"))
    assert w2.device == "cpu:1" and w2.dtype is tw.int16


def test_clone_detach_contiguous():
    a = np.arange(4.0)
    x = tw.tensor(a)
    c, d, k = x.clone(), x.detach(), x.contiguous()
    for t in (c, d, k):
        check(t, a)
    assert x.is_contiguous()
    x.add_(1)
    check(c, a)
    check(d, a + 1)  # (a leaf's detach() shares its updates, as torch's shares the storage)
    check(x, a + 1)


@pytest.mark.parametrize("n", [4, 1000, 5000, 100_000, 3_000_000])
def test_numpy_gives_a_writable_array_whose_writes_change_nothing(n):
    """``t.numpy()`` is writable, as torch's (``img = t.numpy(); img *= 255``, which raised for values in a message's
    header or a shared-memory file until session 59), and a write to it changes neither the tensor nor what the
    client knows of it (a value between 4 and 64 KiB came on a writable frame and was kept as a view of it: the next
    ``numpy()`` gave the write back). The sizes cover the header, a frame, a frame the client keeps, and a file."""
    t = tw.arange(float(n)) * 1
    a = t.numpy()
    assert a.flags.writeable
    a *= 255
    a[0] = -1.0
    assert t.numpy()[0] == 0.0 and t.numpy()[1] == 1.0 and t.tolist()[0] == 0.0 and (t + 0).numpy()[0] == 0.0


def test_numpy_item_tolist_array():
    a = np.array([[1.5, 2.0], [3.0, -4.25]])
    x = tw.tensor(a, dtype=tw.float64)
    n = x.numpy()
    assert isinstance(n, np.ndarray) and n.dtype == np.float64
    np.testing.assert_array_equal(n, a)
    assert x.tolist() == a.tolist()
    assert tw.tensor([1, 2]).tolist() == [1, 2]
    assert tw.tensor([True]).tolist() == [True]
    assert x[1, 1].item() == -4.25 and isinstance(x[1, 1].item(), float)
    assert tw.tensor(3).item() == 3 and isinstance(tw.tensor(3).item(), int)
    assert tw.tensor([True]).item() is True
    assert tw.tensor(2.5).tolist() == 2.5
    assert tw.tensor([1.5], dtype=tw.float16).tolist() == [1.5]
    assert tw.tensor([1.5], dtype=tw.bfloat16).tolist() == [1.5]
    with pytest.raises(ValueError):
        x.item()
    np.testing.assert_array_equal(np.asarray(x), a)
    np.testing.assert_array_equal(np.array(x, dtype=np.float32), a.astype(np.float32))
    assert float(tw.tensor(2.5)) == 2.5 and int(tw.tensor(7)) == 7
    assert bool(tw.tensor([1])) is True and bool(tw.tensor(0.0)) is False
    with pytest.raises(RuntimeError):
        bool(tw.tensor([1, 2]))
    assert [1, 2, 3][tw.tensor(1)] == 2  # __index__
    assert f"{tw.tensor(2.5):.2f}" == "2.50"
    rows = list(x)
    assert len(rows) == 2
    check(rows[1], a[1])
    assert tw.tensor([1.5], dtype=tw.bfloat16).numpy().dtype == npd("bfloat16")


# ------------------------------------------------------------------ printing

REPR_CASES = [
    ("[1.0, 2.0, 3.0]", None),
    ("[[1.0, 2.5], [3.0, 4.0]]", None),
    ("[1, 2, 3]", None),
    ("[True, False]", None),
    ("3.5", None),
    ("7", None),
    ("[0.1, 0.25, 123.456]", None),
    ("[1.0, 2.0]", "float64"),
    ("[1.5, 2.25]", "float16"),
    ("[1.5, 2.25]", "bfloat16"),
    ("[1, 2]", "int32"),
    ("[1, 2]", "uint8"),
    ("[-1.0, 0.5]", "float64"),
    ("[]", None),
    ("[1e-05, 1.0]", None),
    ("[1e10, 1.0]", None),
    ("[1.0, float('nan'), float('inf')]", None),
    ("[[1, 2, 3], [4, 5, 6]]", "float32"),
    ("[-0.5, 0.0, 2.0]", None),
    ("[[1e-05, 2.0], [3.0, 40000.0]]", "float64"),
    ("[123456789.0, 1.0]", "float64"),
    ("[0.0, 0.0]", None),
    ("[-1.0, 0.0, float('-inf')]", None),
    ("[[True, False], [False, False]]", None),
    ("list(range(30))", None),
    ("[[0.123456 * i for i in range(12)] for _ in range(3)]", None),
    ("[[[1, 2], [3, 4]], [[5, 6], [7, 8]]]", None),
    ("[]", "int64"),
    ("[]", "float64"),
    ("[[]]", None),
    ("0.0", None),
    ("-3", "int8"),
    ("True", None),
    ("1e-8", None),
    ("float('nan')", None),
    ("[[1.5] * 40] * 40", "float16"),
    ("[[-1] * 5] * 300", "int32"),
]


@pytest.mark.parametrize("literal,dt", REPR_CASES)
def test_repr_like_torch(literal, dt):
    value = eval(literal)  # noqa: S307 - literals above
    t = tw.tensor(value, dtype=twd(dt) if dt else None)
    text = repr(t)
    assert text.startswith("tensor(") and text.endswith(")")
    assert str(t) == text
    if dt not in (None, "float32", "int64", "bool") or (dt is not None and dt != "float32" and value == []):
        assert f"dtype=tensorwire.{dt}" in text
    else:
        assert "dtype=" not in text
    if torch is not None:
        ref = repr(torch.tensor(value, dtype=thd(dt) if dt else None))
        assert text == ref.replace("torch.", "tensorwire."), f"\n{text}\n{ref}"


def test_repr_with_device_requires_wrap():
    t = tw.tensor([[0.123456 * i for i in range(6)]], dtype=tw.float64, device="cpu:1")
    # torch's rule: a suffix that would pass 80 columns goes on its own line, indented under "tensor("
    assert repr(t) == ("tensor([[0.0000, 0.1235, 0.2469, 0.3704, 0.4938, 0.6173]], device='cpu:1',\n"
                       "       dtype=tensorwire.float64)")


def test_repr_device_and_large():
    t = tw.tensor([1, 2], device="cpu:1")
    assert repr(t) == "tensor([1, 2], device='cpu:1')"
    big = tw.arange(2000)
    text = repr(big)
    assert "..." in text and text.startswith("tensor([   0,    1,    2,")
    if torch is not None:
        assert text == repr(torch.arange(2000))
        m = tw.arange(12.0).reshape(3, 4) / 7
        assert repr(m) == repr(torch.arange(12.0).reshape(3, 4) / 7)


@pytest.mark.parametrize("n", [10, 1 << 20], ids=["small-copied", "large-sent-at-once"])
def test_from_numpy_and_tensor_snapshot_the_array(session, n):
    a = np.arange(n, dtype=np.float32)
    t1 = tw.from_numpy(a)
    t2 = tw.tensor(a)
    a[:] = -1  # the caller reuses its buffer before anything was fetched
    np.testing.assert_array_equal(t1.numpy(), np.arange(n, dtype=np.float32))
    np.testing.assert_array_equal(t2.numpy(), np.arange(n, dtype=np.float32))


@pytest.mark.parametrize("call", ["zeros", "ones", "empty", "rand", "randn"])
def test_factories_take_the_size_by_keyword(call):
    """torch's ``torch.zeros(size=(2, 3))`` (pytorch/examples' GAT: ``torch.empty(size=(n, m))``), the methods'
    ``x.new_zeros(size=...)`` too; a size given both ways is a TypeError."""
    fn = getattr(tw, call)
    assert fn(size=(2, 3)).shape == fn(2, 3).shape == fn((2, 3)).shape == (2, 3)
    assert fn(size=[4]).shape == (4,)
    with pytest.raises(TypeError, match="given twice"):
        fn(2, size=(3,))
    if call in ("zeros", "ones", "empty"):
        x = tw.ones(2, dtype=tw.float64)
        made = getattr(x, "new_" + call)(size=(3, 1))
        assert made.shape == (3, 1) and made.dtype == tw.float64


def test_arange_and_randint_like_by_keyword():
    """``arange(end=5)`` and ``randint_like(x, high=3)`` as torch takes them; ``arange()`` names what is missing."""
    assert tw.arange(end=5).tolist() == list(range(5))
    assert tw.arange(start=1, end=6, step=2).tolist() == [1, 3, 5]
    with pytest.raises(TypeError, match="end"):
        tw.arange()
    tw.manual_seed(0)
    x = tw.zeros(1000, dtype=tw.int64)
    for got in (tw.randint_like(x, high=3), tw.randint_like(x, 3), tw.randint_like(x, 0, 3)):
        assert got.shape == (1000,) and set(np.unique(got.numpy())) == {0, 1, 2}
