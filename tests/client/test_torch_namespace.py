"""torch-namespace functions third-party scripts call (``import tensorwire as torch``): the generator's state as a
uint8 tensor, the print options, torch's aliases and small functions (``torch.greater``, ``torch.range``,
``torch.asarray``, the window functions), ``nn.functional``'s ops as ``torch.X`` takes them (ATen's signatures:
``torch.embedding(weight, indices)``, ``torch.batch_norm``'s order, int reductions), and the deterministic mode on
the CPU; each against PyTorch (2.13, CPU)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tensorwire as tw
from tensorwire import context as ctx

pytestmark = pytest.mark.usefixtures("session")


def _torch():
    return pytest.importorskip("torch", reason="PyTorch is the reference here (pip install torch==2.13.0)")


def _same(ours, ref, atol: float = 1e-6):
    """Equal values, shape and dtype name (a tuple: each element)."""
    if isinstance(ref, tuple):
        assert isinstance(ours, tuple) and len(ours) == len(ref)
        for a, b in zip(ours, ref):
            _same(a, b, atol)
        return
    assert ours.dtype.name == str(ref.dtype).removeprefix("torch."), (ours.dtype, ref.dtype)
    assert tuple(ours.shape) == tuple(ref.shape)
    np.testing.assert_allclose(ours.detach().float().numpy(), ref.detach().float().numpy(), atol=atol, rtol=1e-5)


# -- the generator's state ----------------------------------------------------------------------------------------

def test_rng_state_round_trip():
    s = tw.get_rng_state()
    assert s.dtype is tw.uint8 and s.device == tw.device("cpu:0") and tuple(s.shape) == (20,)
    a = tw.rand(3)
    tw.set_rng_state(s)
    b = tw.rand(3)
    assert a.tolist() == b.tolist()
    assert tw.random.get_rng_state is tw.get_rng_state and tw.random.set_rng_state is tw.set_rng_state
    tw.default_generator.set_state(s)  # the Generator takes the tensor too, and gives back its tuple
    assert tw.rand(3).tolist() == a.tolist()
    g = tw.Generator().manual_seed(5)
    state = g.get_state()
    x = tw.randn(4, generator=g)
    g.set_state(state)
    assert tw.randn(4, generator=g).tolist() == x.tolist()


def test_a_torch_state_is_refused_saying_why():
    torch = _torch()
    with pytest.raises(TypeError, match="torch generator state"):
        tw.set_rng_state(torch.get_rng_state())
    with pytest.raises(RuntimeError, match="5056 bytes .*torch's CPU generator"):
        tw.set_rng_state(tw.tensor(torch.get_rng_state().numpy()))  # its bytes, as a tensorwire tensor
    with pytest.raises(RuntimeError, match="16 bytes"):
        tw.set_rng_state(tw.zeros(16, dtype=tw.uint8))
    with pytest.raises(TypeError, match="uint8"):
        tw.set_rng_state(tw.get_rng_state().float())


# -- print options ----------------------------------------------------------------------------------------------------

PRINT_CASES = [
    ({"precision": 2}, "[1.123456, 2.5, -3.0]"),
    ({"precision": 6}, "[[0.1, 2.0], [3.3333333, 4.0]]"),
    ({"threshold": 5}, "list(range(10))"),
    ({"threshold": 5, "edgeitems": 2}, "[[float(i * 7 + j) for j in range(7)] for i in range(7)]"),
    ({"linewidth": 30}, "[0.123456 * i for i in range(12)]"),
    ({"sci_mode": True}, "[1.5, 2.0, 300.0]"),
    ({"sci_mode": False}, "[1e-08, 1.0, 1e10]"),
    ({"profile": "short"}, "[[0.123456 * (i + j) for j in range(8)] for i in range(8)]"),
    ({"profile": "full"}, "list(range(1200))"),
    ({"profile": "short", "precision": 3}, "[1.123456, 2.0]"),
]


@pytest.mark.parametrize("options,literal", PRINT_CASES)
def test_printoptions_are_torchs(options, literal):
    torch = _torch()
    value = eval(literal)  # noqa: S307 - literals above
    try:
        tw.set_printoptions(**options)
        torch.set_printoptions(**options)
        ours, ref = repr(tw.tensor(value)), repr(torch.tensor(value))
    finally:
        tw.set_printoptions(profile="default")
        torch.set_printoptions(profile="default")
    assert ours == ref.replace("torch.", "tensorwire."), f"\n{ours}\n{ref}"
    assert repr(tw.tensor([1.123456])) == "tensor([1.1235])"  # back to the defaults


def test_printoptions_read_back():
    from tensorwire import printing

    try:
        tw.set_printoptions(precision=3, sci_mode=True)
        assert printing.get_printoptions() == {"precision": 3, "threshold": 1000, "edgeitems": 3, "linewidth": 80,
                                               "sci_mode": True}
        tw.set_printoptions(profile="default")  # (sci_mode=None too, as torch's: every call sets it)
        assert printing.get_printoptions()["sci_mode"] is None and printing.PRECISION == 4
    finally:
        tw.set_printoptions(profile="default")


# -- aliases and small functions ------------------------------------------------------------------------------------

def test_comparison_aliases_and_small_functions_are_torchs():
    torch = _torch()
    a, b = [[1.0, -2.0, 3.0], [0.5, 2.0, -1.0]], [[1.0, 2.0, -3.0], [0.5, 1.0, 0.0]]
    for name in ("greater", "greater_equal", "less", "less_equal", "not_equal"):
        _same(getattr(tw, name)(tw.tensor(a), tw.tensor(b)), getattr(torch, name)(torch.tensor(a), torch.tensor(b)))
        _same(getattr(tw, name)(tw.tensor(a), 1.0), getattr(torch, name)(torch.tensor(a), 1.0))
    _same(tw.ravel(tw.tensor(a).t()), torch.ravel(torch.tensor(a).t()))
    _same(tw.clamp_min(tw.tensor(a), 0.5), torch.clamp_min(torch.tensor(a), 0.5))
    _same(tw.clamp_max(tw.tensor(a), tw.tensor(b)), torch.clamp_max(torch.tensor(a), torch.tensor(b)))
    _same(tw.row_stack([tw.tensor([1, 2]), tw.tensor([[3, 4]])]), torch.row_stack([torch.tensor([1, 2]),
                                                                                    torch.tensor([[3, 4]])]))
    assert tw.numel(tw.ones(2, 3, 4)) == torch.numel(torch.ones(2, 3, 4)) == 24
    assert tw.is_nonzero(tw.tensor([0.5])) is torch.is_nonzero(torch.tensor([0.5])) is True
    assert tw.is_nonzero(tw.tensor(0)) is torch.is_nonzero(torch.tensor(0)) is False
    with pytest.raises(RuntimeError, match="ambiguous"):
        tw.is_nonzero(tw.tensor([1, 2]))
    assert tw.is_same_size(tw.ones(2, 3), tw.zeros(2, 3)) and not tw.is_same_size(tw.ones(2, 3), tw.ones(3, 2))
    for dt in ("uint8", "bool", "int8", "float16", "float32", "int64"):
        assert tw.is_signed(tw.ones(1, dtype=getattr(tw, dt))) == torch.is_signed(torch.ones(1, dtype=getattr(
            torch, dt))), dt


@pytest.mark.parametrize("args,kw", [((0, 3), {}), ((1, 2, 0.5), {}), ((0, 1, 0.3), {}), ((3, 0, -1), {}),
                                     ((0.0, 3, 1), {"dtype": "int32"}), ((1, 4, 0.1), {}),
                                     ((-2, 2), {"dtype": "float64"})])
def test_range_is_torchs_end_inclusive_and_warns(args, kw):
    torch = _torch()
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        ours = tw.range(*args, **{k: getattr(tw, v) for k, v in kw.items()})
        ref = torch.range(*args, **{k: getattr(torch, v) for k, v in kw.items()})
    _same(ours, ref)
    assert [str(w.message) for w in got if "range is deprecated" in str(w.message)]


def test_range_refuses_what_torch_refuses():
    torch = _torch()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for args in ((0, 3, 0), (3, 0)):
            with pytest.raises(RuntimeError) as ours:
                tw.range(*args)
            with pytest.raises(RuntimeError) as ref:
                torch.range(*args)
            assert str(ours.value) == str(ref.value)
        with pytest.raises(TypeError):
            tw.range(3)


def test_asarray_is_torchs():
    torch = _torch()
    for obj in (np.arange(3.0), np.float32(2.0), np.int32(3), [1, 2], [1.0, 2], 3, 2.5, True, [[1, 2], [3, 4]],
                (1, 2), np.array([1, 2], dtype=np.int16)):
        _same(tw.asarray(obj), torch.asarray(obj))
    _same(tw.asarray([1, 2], dtype=tw.float64), torch.asarray([1, 2], dtype=torch.float64))
    _same(tw.asarray(torch.tensor([1.5, 2.5], dtype=torch.float64)), torch.tensor([1.5, 2.5], dtype=torch.float64))
    x = tw.tensor([1.0, 2.0])
    assert tw.asarray(x) is x and tw.asarray(x, dtype=tw.float32, device="cpu:0") is x
    c = tw.asarray(x, copy=True)
    assert c is not x and c.tolist() == x.tolist()
    assert tw.asarray(x, dtype=tw.float64).dtype is tw.float64
    assert tw.asarray(x, device="cpu:1").device == tw.device("cpu:1")
    with pytest.raises(ValueError, match="can't alias tensor with dtype"):
        tw.asarray(x, dtype=tw.float64, copy=False)
    with pytest.raises(ValueError, match="can't alias"):
        tw.asarray([1, 2], copy=False)
    with pytest.raises(ValueError, match="can't alias a numpy array"):
        tw.asarray(np.arange(3.0), copy=False)  # (torch aliases it; a tensorwire tensor lives on the cluster)
    r = tw.asarray([1.0, 2.0], requires_grad=True)
    assert r.requires_grad and r.grad_fn is None


WINDOWS = ["hann_window", "hamming_window", "blackman_window", "bartlett_window", "kaiser_window"]


@pytest.mark.parametrize("name", WINDOWS)
def test_windows_are_torchs(name):
    torch = _torch()
    for n in (0, 1, 2, 5, 8):
        for periodic in (True, False):
            for dt, atol in (("float32", 1e-6), ("float64", 1e-12), ("float16", 1e-3), ("bfloat16", 8e-3)):
                ours = getattr(tw, name)(n, periodic, dtype=getattr(tw, dt))
                ref = getattr(torch, name)(n, periodic, dtype=getattr(torch, dt))
                _same(ours, ref, atol)
    _same(getattr(tw, name)(7), getattr(torch, name)(7))  # periodic by default, the default dtype
    w = getattr(tw, name)(4, requires_grad=True, device="cpu:1")
    assert w.requires_grad and w.device == tw.device("cpu:1")
    with pytest.raises(RuntimeError, match="non-negative window_length"):
        getattr(tw, name)(-1)
    with pytest.raises(RuntimeError, match="floating point"):
        getattr(tw, name)(3, dtype=tw.int64)


def test_window_parameters_are_torchs():
    torch = _torch()
    _same(tw.hamming_window(6, True, 0.5, 0.4), torch.hamming_window(6, True, 0.5, 0.4))
    _same(tw.kaiser_window(9, False, 5.0), torch.kaiser_window(9, False, 5.0))
    _same(tw.kaiser_window(10, True, 0.0, dtype=tw.float64), torch.kaiser_window(10, True, 0.0, dtype=torch.float64))


# -- nn.functional's ops as torch.X -------------------------------------------------------------------------------

def _pair(torch, shape, seed: int, positive: bool = False):
    v = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    v = np.abs(v) + 0.1 if positive else v
    return tw.tensor(v), torch.tensor(v)


SHAPES = {"x": (2, 4, 6), "y": (2, 4, 6), "w": (4,), "b": (4,), "k1": (3, 4, 3), "k2": (2, 1, 3, 3),
          "kt": (4, 2, 3), "bw": (3, 6, 6)}

#: (name, call): ``call(m, a)`` with ``m`` the module (torch or tensorwire) and ``a`` the inputs, ATen's signatures
FUNCTIONAL = [
    ("dropout", lambda m, a: m.dropout(a["x"], 0.5, False)),
    ("alpha_dropout", lambda m, a: m.alpha_dropout(a["x"], 0.3, False)),
    ("feature_alpha_dropout", lambda m, a: m.feature_alpha_dropout(a["x"], 0.3, False)),
    ("layer_norm", lambda m, a: m.layer_norm(a["x"], [6])),
    ("layer_norm_affine", lambda m, a: m.layer_norm(a["x"].transpose(1, 2), [4], a["w"], a["b"], 1e-3, True)),
    ("group_norm", lambda m, a: m.group_norm(a["x"], 2, a["w"], a["b"], 1e-5, True)),
    ("batch_norm", lambda m, a: m.batch_norm(a["x"], a["w"], a["b"], None, None, True, 0.1, 1e-5, True)),
    ("instance_norm", lambda m, a: m.instance_norm(a["x"], a["w"], a["b"], None, None, True, 0.1, 1e-5, False)),
    ("rms_norm", lambda m, a: m.rms_norm(a["x"], [6])),
    ("max_pool1d", lambda m, a: m.max_pool1d(a["x"], 2)),
    ("max_pool1d_args", lambda m, a: m.max_pool1d(a["x"], 3, [], 1, 1, True)),
    ("max_pool2d", lambda m, a: m.max_pool2d(a["x"].unsqueeze(0), 2)),
    ("max_pool3d", lambda m, a: m.max_pool3d(a["x"].reshape(1, 1, 2, 4, 6), 2)),
    ("avg_pool1d", lambda m, a: m.avg_pool1d(a["x"], 3, 2, 1)),
    ("adaptive_avg_pool1d", lambda m, a: m.adaptive_avg_pool1d(a["x"], 4)),
    ("adaptive_max_pool1d", lambda m, a: m.adaptive_max_pool1d(a["x"], 3)),
    ("conv1d", lambda m, a: m.conv1d(a["x"], a["k1"], None, 1, 1)),
    ("conv2d", lambda m, a: m.conv2d(a["x"].unsqueeze(1), a["k2"], None, 1, 0, 1, 1)),
    ("conv_transpose1d", lambda m, a: m.conv_transpose1d(a["x"], a["kt"])),
    ("pixel_shuffle", lambda m, a: m.pixel_shuffle(a["x"].reshape(1, 4, 2, 6), 2)),
    ("pixel_unshuffle", lambda m, a: m.pixel_unshuffle(a["x"].reshape(1, 2, 4, 6), 2)),
    ("cosine_similarity", lambda m, a: m.cosine_similarity(a["x"], a["y"])),
    ("pairwise_distance", lambda m, a: m.pairwise_distance(a["x"][0], a["y"][0])),
    ("pdist", lambda m, a: m.pdist(a["x"][0])),
    ("bilinear", lambda m, a: m.bilinear(a["x"][0], a["y"][0], a["bw"])),
    ("prelu", lambda m, a: m.prelu(a["x"], a["w"])),
    ("selu", lambda m, a: m.selu(a["x"])),
    ("celu", lambda m, a: m.celu(a["x"], 0.5)),
    ("rrelu", lambda m, a: m.rrelu(a["x"], 0.1, 0.3, False)),
    ("threshold", lambda m, a: m.threshold(a["x"], 0.1, -1.0)),
    ("hardshrink", lambda m, a: m.hardshrink(a["x"], 0.3)),
]


def test_functional_ops_with_torchs_signatures():
    torch = _torch()
    rng = np.random.default_rng(0)
    values = {k: rng.standard_normal(shape).astype(np.float32) for k, shape in SHAPES.items()}
    ours = {k: tw.tensor(v) for k, v in values.items()}
    ref = {k: torch.tensor(v) for k, v in values.items()}
    for name, call in FUNCTIONAL:
        r = call(torch, ref)
        try:
            _same(call(tw, ours), tuple(r) if isinstance(r, tuple) else r, 1e-4)
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from None


def test_embedding_takes_the_weight_first():
    torch = _torch()
    w, tw_ = _pair(torch, (5, 3), 4)
    w.requires_grad_(True)
    tw_.requires_grad_(True)
    idx, tidx = tw.tensor([[0, 4], [4, 2]]), torch.tensor([[0, 4], [4, 2]])
    for kw in ({}, {"padding_idx": 4}, {"padding_idx": -1}, {"scale_grad_by_freq": True}):
        ours, ref = tw.embedding(w, idx, **kw), torch.embedding(tw_, tidx, **kw)
        _same(ours, ref)
        (gw,) = tw.autograd.grad(ours.sum(), [w])
        (tgw,) = torch.autograd.grad(ref.sum(), [tw_])
        _same(gw, tgw)


def test_losses_take_atens_int_reduction_and_default_to_none_as_torchs():
    torch = _torch()
    x, tx = _pair(torch, (3, 4), 5)
    y, ty = _pair(torch, (3, 4), 6)
    p, tp = _pair(torch, (3, 4), 7, positive=True)
    t, tt = tw.tensor([1.0, -1.0, 1.0]), torch.tensor([1.0, -1.0, 1.0])
    calls = [
        lambda m, x, y, p, t, *r: m.kl_div(x, p, *r),
        lambda m, x, y, p, t, *r: m.kl_div(x, p.log(), *r, log_target=True),
        lambda m, x, y, p, t, *r: m.binary_cross_entropy_with_logits(x, y.sigmoid(), None, p, *r),
        lambda m, x, y, p, t, *r: m.margin_ranking_loss(x[:, 0], y[:, 0], t, 0.1, *r),
        lambda m, x, y, p, t, *r: m.hinge_embedding_loss(x, (y > 0).float() * 2 - 1, 0.5, *r),
        lambda m, x, y, p, t, *r: m.cosine_embedding_loss(x, y, t, 0.2, *r),
        lambda m, x, y, p, t, *r: m.triplet_margin_loss(x, y, p, 1.0, 2.0, 1e-6, True, *r),
    ]
    for fn in calls:
        for r in ((), (0,), (1,), (2,)):
            _same(fn(tw, x, y, p, t, *r), fn(torch, tx, ty, tp, tt, *r), 1e-5)
    for r in (0, 1, 2):
        _same(tw.poisson_nll_loss(x, p, True, False, 1e-8, r), torch.poisson_nll_loss(tx, tp, True, False, 1e-8, r))
        _same(tw.poisson_nll_loss(p, p, False, True, 1e-8, r), torch.poisson_nll_loss(tp, tp, False, True, 1e-8, r))
    with pytest.raises(TypeError):
        tw.dropout(x, 0.5)  # train is required, as torch's


# -- determinism on the CPU ---------------------------------------------------------------------------------------

def test_deterministic_mode_leaves_the_cpus_scatter_adds_and_their_backward_alone():
    """Every CPU kernel is deterministic: with the mode on, scatter_add, index_add, put(accumulate) and the backward
    of gather and indexing (``index_put(accumulate=True)``, recorded whole) run, and twice give the same bits."""
    x = tw.arange(12.0).reshape(3, 4).requires_grad_(True)
    idx = tw.tensor([[0, 1, 1, 0], [2, 2, 0, 1]])
    try:
        tw.use_deterministic_algorithms(True)
        runs = []
        for _ in range(2):
            out = tw.zeros(3, 4).scatter_add(0, idx, tw.ones(2, 4) * 0.1)
            out = out.index_add(0, tw.tensor([0, 0, 2]), tw.ones(3, 4) * 0.3)
            loss = (x.gather(0, idx) * 1.5).sum() + (x[tw.tensor([0, 0, 1])] ** 2).sum()
            (g,) = tw.autograd.grad(loss, [x])
            runs.append((out.tolist(), g.tolist()))
        assert runs[0] == runs[1]
    finally:
        tw.use_deterministic_algorithms(False)


def test_the_mode_checks_every_recorded_op_forward_and_backward(monkeypatch, record_graph_calls):
    """The check sees each op as it is recorded, a backward graph's too, whether its nodes go through
    ``Session.record`` (the first backward) or are recorded whole (``record_graph``, the ones after)."""
    from tensorwire import session as S

    seen: list = []
    monkeypatch.setattr(S, "deterministic_check",
                        lambda op, attrs, device, dtype: seen.append((op, dict(attrs or {}), device, dtype)))
    x = tw.arange(12.0).reshape(3, 4).requires_grad_(True)
    idx = tw.tensor([[0, 1, 1, 0], [2, 2, 0, 1]])
    for _ in range(3):
        seen.clear()
        loss = (x.gather(0, idx) * 1.5).sum() + (x[tw.tensor([0, 0, 1])] ** 2).sum()
        tw.autograd.grad(loss, [x])
        assert ("scatter_add", {"dim": 0}, "cpu:0", tw.float32) in seen
        assert any(op == "index_put" and a.get("accumulate") for op, a, _, _ in seen)
    assert record_graph_calls  # (a backward recorded whole was checked too)


def test_thread_counts_reach_the_next_embedded_cluster(monkeypatch):
    """``tw.set_num_threads``/``set_num_interop_threads`` set the workers' threads of the cluster the next
    ``tw.connect()`` without an address starts (a real one here); the running one keeps its own."""
    monkeypatch.delenv("TENSORWIRE_ADDRESS", raising=False)
    monkeypatch.setattr(ctx, "embedded_threads", None)
    monkeypatch.setattr(ctx, "embedded_exec_threads", None)
    prev = tw.current_session()
    tw.set_num_threads(1)
    tw.set_num_interop_threads(2)
    s = tw.connect()
    try:
        assert s._cluster is not None and s._cluster.threads == 1 and s._cluster.exec_threads == 2
        assert tw.get_num_threads() == 1 and tw.get_num_interop_threads() == 2
        assert (tw.ones(3) * 2).sum().item() == 6.0
        tw.set_num_threads(2)  # (for the next one: the running workers keep theirs)
        assert tw.get_num_threads() == 1
        with pytest.raises(RuntimeError, match="interop threads"):
            tw.set_num_interop_threads(3)
    finally:
        tw.disconnect()
        tw.set_session(prev)
    assert tw.get_num_threads() == 2
