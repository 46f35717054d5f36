"""torch.nn's modules over functional forms tensorwire already had (3-D convolution and pooling, adaptive max and LP
pooling, unpooling, instance and local-response norm, the activations, padding, shuffles, upsampling, fold/unfold,
the remaining losses, EmbeddingBag, the lazy modules) and ``torch.nn.modules``' submodule names: reprs as torch's,
outputs and input gradients equal to torch's with torch's weights copied in (float64), lazy modules inferring
their sizes at the first call; plus ``F.fold``, ``F.lp_pool*d`` and ``nn.init``'s deprecated names, ``sparse_``
and ``dirac_``'s group check.

torch is the reference (imported through a fixture: it is optional)."""

from __future__ import annotations

import importlib
import warnings

import numpy as np
import pytest

import tensorwire as tw
from tensorwire import nn

pytestmark = pytest.mark.usefixtures("session")


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch", reason="PyTorch is the reference here (pip install torch==2.13.0)")


def _pair_of(torch, shape, seed=0, positive=False):
    a = np.random.default_rng(seed).standard_normal(shape)
    if positive:
        a = np.abs(a) + 0.1
    return tw.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)


def _close(mine, ref, tol=1e-10):
    a, r = mine.detach().numpy(), ref.detach().numpy()
    assert a.shape == r.shape, (a.shape, r.shape)
    np.testing.assert_allclose(a, r, rtol=tol, atol=tol)


def _load_torch_weights(ours, theirs) -> None:
    if theirs.state_dict():
        ours.load_state_dict({k: tw.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})


#: (class name, constructor arguments, input shape): the module's output and the input's gradient against torch's
MODULES = [
    ("LogSigmoid", (), (2, 5)), ("Hardswish", (), (2, 5)), ("Hardsigmoid", (), (2, 5)),
    ("Hardshrink", (0.3,), (2, 5)), ("Softshrink", (0.3,), (2, 5)), ("Tanhshrink", (), (2, 5)),
    ("Softsign", (), (2, 5)), ("CELU", (1.5,), (2, 5)), ("SELU", (), (2, 5)), ("Threshold", (0.1, 2.0), (2, 5)),
    ("PReLU", (3,), (2, 3, 4)), ("Softmax2d", (), (2, 3, 4, 4)),
    ("MaxPool3d", (2, 1), (1, 2, 4, 4, 4)), ("AvgPool3d", (2,), (1, 2, 4, 4, 4)),
    ("AdaptiveMaxPool1d", (3,), (2, 3, 7)), ("AdaptiveMaxPool2d", ((2, None),), (2, 3, 7, 5)),
    ("AdaptiveMaxPool3d", (2,), (1, 2, 5, 4, 5)), ("AdaptiveAvgPool3d", ((2, 3, 2),), (1, 2, 5, 4, 5)),
    ("LPPool1d", (2, 3), (2, 3, 7)), ("LPPool2d", (3, 2, 1), (2, 3, 5, 5)), ("LPPool3d", (2, 2), (1, 2, 4, 4, 4)),
    ("InstanceNorm1d", (3,), (2, 3, 7)), ("InstanceNorm2d", (3,), (3, 5, 5)), ("InstanceNorm3d", (2,), (2, 2, 3, 3, 3)),
    ("LocalResponseNorm", (3,), (2, 5, 4, 4)), ("ChannelShuffle", (2,), (2, 4, 3, 3)),
    ("PixelShuffle", (2,), (1, 8, 3, 3)), ("PixelUnshuffle", (2,), (1, 2, 4, 4)),
    ("Upsample", (None, 2.0, "bilinear"), (1, 2, 3, 3)), ("UpsamplingNearest2d", (None, 2), (1, 2, 3, 3)),
    ("UpsamplingBilinear2d", (5,), (1, 2, 3, 3)), ("Fold", ((4, 5), 2), (2, 12, 12)),
    ("Fold", ((5, 6), (2, 3), 1, 1, 2), (2, 12, 9)), ("Unfold", (2,), (2, 3, 4, 5)),
    ("ConstantPad1d", (2, 3.5), (2, 3, 4)), ("ConstantPad2d", ((1, 2, 0, 1), 1.0), (2, 3, 4)),
    ("ConstantPad3d", (1, 0.0), (1, 2, 2, 2, 2)), ("ZeroPad1d", (2,), (2, 3, 4)), ("ZeroPad2d", (1,), (2, 3, 4)),
    ("ZeroPad3d", ((1, 0, 1, 0, 1, 0),), (1, 2, 2, 2, 2)), ("ReflectionPad1d", (2,), (2, 3, 4)),
    ("ReflectionPad2d", ((1, 2, 0, 1),), (2, 3, 4, 4)), ("ReflectionPad3d", (1,), (1, 2, 3, 3, 3)),
    ("ReplicationPad1d", (2,), (2, 3, 4)), ("ReplicationPad2d", (2,), (2, 3, 4, 4)),
    ("ReplicationPad3d", (1,), (1, 2, 3, 3, 3)), ("CircularPad1d", (2,), (2, 3, 4)),
    ("CircularPad2d", (1,), (2, 3, 4, 4)),
    ("CircularPad3d", (1,), (1, 2, 3, 3, 3)), ("Conv3d", (2, 3, 2), (1, 2, 4, 4, 4)),
    ("Conv3d", (2, 4, (2, 1, 3), 1, 1, 1, 2, True, "reflect"), (1, 2, 4, 4, 4)),
    ("ConvTranspose3d", (2, 3, 2, 2), (1, 2, 3, 3, 3)), ("BatchNorm3d", (2,), (2, 2, 3, 3, 3)),
]


@pytest.mark.parametrize("name,args,shape", MODULES, ids=[f"{m[0]}-{i}" for i, m in enumerate(MODULES)])
def test_module_matches_torch(torch, name, args, shape):
    ref = getattr(torch.nn, name)(*args).double()
    mine = getattr(nn, name)(*args).to(tw.float64)
    assert repr(mine) == repr(ref)
    _load_torch_weights(mine, ref)
    x, xt = _pair_of(torch, shape, positive=name.startswith("LPPool"))
    y, yt = mine(x), ref(xt)
    _close(y, yt)
    g = np.random.default_rng(1).standard_normal(tuple(yt.shape))
    y.backward(tw.tensor(g))
    yt.backward(torch.tensor(g))
    # (torch's hard sigmoid/swish backward multiplies by a float32 1/6, also for float64: ours is g / 6 exactly)
    _close(x.grad, xt.grad, 1e-7 if name in ("Hardsigmoid", "Hardswish") else 1e-10)
    for p, pt in zip(mine.parameters(), ref.parameters()):
        _close(p.grad, pt.grad)


def test_modules_keep_torchs_attributes_and_checks(torch):
    assert repr(nn.RReLU(0.1, 0.2, True)) == repr(torch.nn.RReLU(0.1, 0.2, True))
    x = tw.tensor(np.linspace(-2, 2, 9))
    assert nn.RReLU().eval()(x).tolist() == torch.nn.RReLU().eval()(torch.tensor(x.numpy())).tolist()
    for cls, args in [("MaxUnpool2d", (2,)), ("FractionalMaxPool2d", (2, None, 0.5)), ("BatchNorm1d", (3,)),
                      ("InstanceNorm1d", (3,)), ("InstanceNorm2d", (3, 1e-3, 0.2, True)), ("EmbeddingBag", (10, 3)),
                      ("EmbeddingBag", (10, 3, None, 2.0, False, "sum", False, None, False, -2)),
                      ("MaxUnpool3d", (2, 1, 1)), ("LPPool1d", (1.5, 3, 2, True)), ("Threshold", (0.1, 2.0, True))]:
        assert repr(getattr(nn, cls)(*args)) == repr(getattr(torch.nn, cls)(*args)), cls
    bn = nn.BatchNorm3d(3, bias=False)
    assert bn.bias is None and "bias=False" in repr(bn)
    with pytest.raises(ValueError, match="expected 5D input"):
        nn.BatchNorm3d(2)(tw.ones(2, 2, 3))
    with pytest.raises(ValueError, match="expected 2D or 3D input"):
        nn.CircularPad1d(1)(tw.ones(2, 2, 3, 3))
    with pytest.raises(ValueError, match="only one of output_size and output_ratio"):
        nn.FractionalMaxPool2d(2, output_size=2, output_ratio=0.5)
    with pytest.raises(ValueError, match="expected input's size at dim=1 to match num_features"):
        nn.InstanceNorm1d(4, affine=True)(tw.ones(2, 3, 5))
    with pytest.raises(ValueError, match="Softmax2d: expected input to be 3D or 4D"):
        nn.Softmax2d()(tw.ones(2, 3))


def test_instance_norm_tracks_running_statistics(torch):
    ref = torch.nn.InstanceNorm2d(3, momentum=0.3, affine=True, track_running_stats=True).double()
    mine = nn.InstanceNorm2d(3, momentum=0.3, affine=True, track_running_stats=True).to(tw.float64)
    _load_torch_weights(mine, ref)
    for seed in range(2):
        x, xt = _pair_of(torch, (2, 3, 4, 4), seed)
        _close(mine(x), ref(xt))
    _close(mine.running_mean, ref.running_mean)
    _close(mine.running_var, ref.running_var)
    x, xt = _pair_of(torch, (2, 3, 4, 4), 5)
    _close(mine.eval()(x), ref.eval()(xt))


def test_pooling_with_indices_and_unpooling(torch):
    x, xt = _pair_of(torch, (1, 2, 4, 4, 4))
    o, i = nn.MaxPool3d(2, return_indices=True)(x)
    ot, it = torch.nn.MaxPool3d(2, return_indices=True)(xt)
    assert i.tolist() == it.tolist()
    _close(nn.MaxUnpool3d(2)(o, i), torch.nn.MaxUnpool3d(2)(ot, it))
    o, i = nn.AdaptiveMaxPool2d(3, return_indices=True)(x[0])
    ot, it = torch.nn.AdaptiveMaxPool2d(3, return_indices=True)(xt[0])
    _close(o, ot)
    assert i.tolist() == it.tolist()
    samples = np.random.default_rng(3).random((1, 2, 2))
    y = nn.FractionalMaxPool2d(2, output_size=(3, 3), _random_samples=tw.tensor(samples))(x[0, :, 0])
    yt = torch.nn.FractionalMaxPool2d(2, output_size=(3, 3), _random_samples=torch.tensor(samples))(xt[0, :, 0])
    _close(y, yt)


def test_fold_is_unfolds_adjoint_and_lp_pool_matches(torch):
    F, Ft = tw.nn.functional, torch.nn.functional
    x, xt = _pair_of(torch, (2, 3 * 6, 16))  # 3 channels, 2x3 kernel, 4x4 blocks (stride 2, padding 1, dilation 2)
    args = ((7, 9), (2, 3), 2, 1, 2)
    y, yt = F.fold(x, *args), Ft.fold(xt, *args)
    _close(y, yt)
    y.sum().backward()
    yt.sum().backward()
    _close(x.grad, xt.grad)
    _close(F.fold(x[0].detach(), *args), Ft.fold(xt[0].detach(), *args))  # unbatched
    with pytest.raises(ValueError, match="calculated number of sliding blocks"):
        F.fold(x, (8, 8), (2, 3), 2, 1, 2)
    p, pt = _pair_of(torch, (1, 2, 6, 6), 4)
    for norm in (1, 2.5, float("inf")):
        _close(F.lp_pool2d(p, norm, 3, 2), Ft.lp_pool2d(pt, norm, 3, 2))
    _close(F.lp_pool1d(p[0], 2, 3), Ft.lp_pool1d(pt[0], 2, 3))


LOSSES = [
    ("KLDivLoss", dict(reduction="batchmean"), "logprob"), ("KLDivLoss", dict(log_target=True), "logprob2"),
    ("MarginRankingLoss", dict(margin=0.2), "rank"), ("CosineEmbeddingLoss", dict(margin=0.1), "pair"),
    ("HingeEmbeddingLoss", dict(reduction="sum"), "hinge"), ("GaussianNLLLoss", dict(full=True), "gauss"),
    ("MultiLabelMarginLoss", dict(), "mlm"), ("MultiLabelSoftMarginLoss", dict(), "mlsm"),
    ("MultiMarginLoss", dict(p=2, margin=0.5), "class"), ("SoftMarginLoss", dict(), "sign"),
    ("PoissonNLLLoss", dict(full=True, log_input=False), "pois"), ("TripletMarginLoss", dict(swap=True), "trip"),
    ("TripletMarginWithDistanceLoss", dict(margin=0.5), "trip"), ("NLLLoss2d", dict(), "nll"),
    ("MSELoss", dict(size_average=False), "mse"),
]


def _loss_inputs(lib, kind, x1, x2, rng_seed=0):
    rng = np.random.default_rng(rng_seed)
    sign = lib.tensor(np.sign(rng.standard_normal(4)))
    labels = lib.tensor(rng.integers(0, 5, 4))
    if kind == "logprob":
        return x1.log_softmax(1), x2.softmax(1).detach()
    if kind == "logprob2":
        return x1.log_softmax(1), x2.log_softmax(1).detach()
    if kind == "rank":
        return x1[:, 0], x2[:, 0], sign
    if kind == "pair":
        return x1, x2, sign
    if kind == "hinge":
        return x1[:, 0], sign
    if kind == "gauss":
        return x1, x2, x2.detach().abs() + 0.1
    if kind == "mlm":
        return x1, lib.tensor([[3, 0, -1, 1, 2], [1, 2, 3, -1, 0], [0, -1, 1, 1, 1], [4, 3, 2, 1, 0]])
    if kind == "mlsm":
        return x1, lib.tensor((rng.random((4, 5)) > 0.5).astype(np.float64))
    if kind == "class":
        return x1, labels
    if kind == "sign":
        return x1, x2.detach().sign()
    if kind == "pois":
        return x1.abs() + 0.1, x2.detach().abs() * 3
    if kind == "trip":
        return x1, x2, x1 * 0.5 + 0.1
    if kind == "nll":
        return x1.log_softmax(1), labels
    return x1, x2


@pytest.mark.parametrize("name,kw,kind", LOSSES, ids=[f"{m[0]}-{i}" for i, m in enumerate(LOSSES)])
def test_loss_matches_torch(torch, name, kw, kind):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the deprecated names and arguments warn, as torch's)
        mine, ref = getattr(nn, name)(**kw), getattr(torch.nn, name)(**kw)
    assert repr(mine) == repr(ref)
    x1, t1 = _pair_of(torch, (4, 5), 0)
    x2, t2 = _pair_of(torch, (4, 5), 1)
    out, outt = mine(*_loss_inputs(tw, kind, x1, x2)), ref(*_loss_inputs(torch, kind, t1, t2))
    _close(out, outt)
    out.backward()
    outt.backward()
    _close(x1.grad, t1.grad)


def test_ctc_linear_cross_entropy_and_embedding_bag_modules(torch):
    lp, lpt = _pair_of(torch, (6, 2, 4))
    targets = np.random.default_rng(2).integers(1, 4, (2, 3))
    _close(nn.CTCLoss()(lp.log_softmax(2), tw.tensor(targets), [6, 5], [3, 2]),
           torch.nn.CTCLoss()(lpt.log_softmax(2), torch.tensor(targets), [6, 5], [3, 2]))
    ref = torch.nn.LinearCrossEntropyLoss(5, 3, bias=True, label_smoothing=0.1).double()
    mine = nn.LinearCrossEntropyLoss(5, 3, bias=True, label_smoothing=0.1).to(tw.float64)
    assert repr(mine) == repr(ref)
    _load_torch_weights(mine, ref)
    x, xt = _pair_of(torch, (4, 5))
    labels = np.array([0, 2, 1, 2])
    _close(mine(x, tw.tensor(labels)), ref(xt, torch.tensor(labels)))
    with pytest.raises(ValueError, match="invalid acc_policy"):
        nn.LinearCrossEntropyOptions(acc_policy="fast")
    idx, off = np.array([1, 2, 4, 5, 4, 3, 2, 9]), np.array([0, 3])
    for kw in (dict(mode="sum"), dict(mode="max", padding_idx=2), dict(include_last_offset=True)):
        ref = torch.nn.EmbeddingBag(10, 3, **kw).double()
        mine = nn.EmbeddingBag(10, 3, **kw).to(tw.float64)
        assert repr(mine) == repr(ref)
        _load_torch_weights(mine, ref)
        o = np.append(off, len(idx)) if kw.get("include_last_offset") else off
        y, yt = mine(tw.tensor(idx), tw.tensor(o)), ref(torch.tensor(idx), torch.tensor(o))
        _close(y, yt)
        y.sum().backward()
        yt.sum().backward()
        _close(mine.weight.grad, ref.weight.grad)
    bag = nn.EmbeddingBag.from_pretrained(tw.tensor(np.eye(4)), mode="sum", padding_idx=0)
    assert not bag.weight.requires_grad
    assert bag(tw.tensor([[0, 1], [2, 3]])).tolist() == [[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0]]


LAZY = [("LazyLinear", (3,), (2, 5)), ("LazyConv1d", (4, 3), (2, 3, 8)), ("LazyConv2d", (4, 3, 1, 1, 1, 1), (3, 6, 6)),
        ("LazyConv3d", (2, 2), (1, 3, 4, 4, 4)), ("LazyConvTranspose1d", (4, 3, 2), (2, 3, 5)),
        ("LazyConvTranspose2d", (4, 3), (2, 3, 5, 5)), ("LazyConvTranspose3d", (2, 2), (1, 3, 3, 3, 3)),
        ("LazyBatchNorm1d", (), (4, 3)), ("LazyBatchNorm2d", (), (4, 3, 2, 2)),
        ("LazyBatchNorm3d", (), (2, 3, 2, 2, 2)),
        ("LazyInstanceNorm1d", (), (2, 3, 5)), ("LazyInstanceNorm2d", (), (2, 3, 4, 4)),
        ("LazyInstanceNorm3d", (), (2, 3, 2, 3, 3))]


@pytest.mark.parametrize("name,args,shape", LAZY, ids=[m[0] for m in LAZY])
def test_lazy_module_infers_its_sizes_at_the_first_call(torch, name, args, shape):
    ref, mine = getattr(torch.nn, name)(*args), getattr(nn, name)(*args)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (no "zero-element tensor" warning from the placeholder's initialisation)
        assert repr(mine) == repr(ref)
    assert mine.has_uninitialized_params()
    params = list(mine.parameters())
    opt = tw.optim.SGD(params, lr=0.1) if params else None
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    yt = ref(torch.tensor(x))
    y = mine(tw.tensor(x))
    assert type(mine).__name__ == type(ref).__name__ and not hasattr(mine, "_initialize_hook")
    assert repr(mine) == repr(ref)
    assert [tuple(p.shape) for p in mine.parameters()] == [tuple(p.shape) for p in ref.parameters()]
    assert all(a is b for a, b in zip(params, mine.parameters()))  # the same objects: the optimizer's
    assert sorted(mine.state_dict()) == sorted(ref.state_dict())
    assert tuple(y.shape) == tuple(yt.shape)
    _load_torch_weights(mine, ref)
    _close(mine(tw.tensor(x)), ref(torch.tensor(x)), 1e-5)
    if opt is not None:
        mine(tw.tensor(x)).sum().backward()
        opt.step()


def test_lazy_module_takes_its_shapes_from_a_loaded_state_dict(torch):
    ref = torch.nn.Linear(4, 3)
    mine = nn.LazyLinear(3)
    mine.load_state_dict({k: tw.tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    assert tuple(mine.weight.shape) == (3, 4) and type(mine.weight) is nn.Parameter
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    _close(mine(tw.tensor(x)), ref(torch.tensor(x)), 1e-6)
    assert type(mine) is nn.Linear
    p = nn.UninitializedParameter()
    assert repr(p) == "<UninitializedParameter>" and nn.parameter.is_lazy(p)
    p.materialize((2, 3))
    assert type(p) is nn.Parameter and tuple(p.shape) == (2, 3) and p.requires_grad


def test_torch_nn_modules_submodule_names(torch):
    for sub in ("activation", "batchnorm", "conv", "loss", "module", "pooling", "padding", "linear", "container",
                "normalization", "instancenorm", "dropout", "sparse", "upsampling", "pixelshuffle", "fold", "lazy",
                "utils", "rnn", "transformer", "flatten", "distance", "channelshuffle"):
        ours = importlib.import_module(f"tensorwire.nn.modules.{sub}")
        theirs = importlib.import_module(f"torch.nn.modules.{sub}")
        for name in ours.__all__:
            assert hasattr(theirs, name), (sub, name)
    from tensorwire.nn.modules.batchnorm import _BatchNorm
    from tensorwire.nn.modules.conv import _ConvNd
    from tensorwire.nn.modules.loss import _Loss, _WeightedLoss
    from tensorwire.nn.modules.utils import _ntuple, _pair, _quadruple

    assert isinstance(nn.BatchNorm3d(2), _BatchNorm) and not isinstance(nn.InstanceNorm2d(2), _BatchNorm)
    assert isinstance(nn.Conv3d(1, 1, 1), _ConvNd) and isinstance(nn.KLDivLoss(), _Loss)
    assert isinstance(nn.MultiMarginLoss(), _WeightedLoss)
    assert _pair(3) == (3, 3) and _pair([1, 2]) == (1, 2) and _quadruple(0) == (0,) * 4 and _ntuple(3)((2,)) == (2,)


def test_init_deprecated_names_warn_and_sparse_dirac(torch):
    w = tw.empty(6, 4)
    for name in ("uniform", "normal", "constant", "xavier_uniform", "xavier_normal", "kaiming_uniform",
                 "kaiming_normal", "orthogonal", "sparse", "dirac"):
        fn = getattr(tw.nn.init, name)
        args = {"constant": (0.5,), "sparse": (0.3,)}.get(name, ())
        target = tw.empty(4, 2, 3) if name == "dirac" else w
        with pytest.warns(FutureWarning, match=f"`nn.init.{name}` is now deprecated in favor of `nn.init.{name}_`"):
            assert fn(target, *args) is target
        assert fn.__name__ == name == getattr(torch.nn.init, name).__name__
    tw.manual_seed(0)
    tw.nn.init.sparse_(w, 0.5)
    a = w.numpy()
    assert ((a == 0).sum(0) == 3).all() and (np.abs(a) < 0.1).all()
    tw.manual_seed(0)
    w2 = tw.nn.init.sparse_(tw.empty(6, 4), 0.5)
    assert np.array_equal(w2.numpy(), a)  # reproducible under tw.manual_seed
    d, dt = tw.empty(4, 2, 3), torch.empty(4, 2, 3)
    tw.nn.init.dirac_(d, 2)
    torch.nn.init.dirac_(dt, 2)
    assert d.tolist() == dt.tolist()
    with pytest.raises(ValueError, match="dim 0 must be divisible by groups"):
        tw.nn.init.dirac_(tw.empty(3, 2, 3), 2)
    assert tw.nn.init._calculate_correct_fan(w, "fan_out") == 6


#: arguments for the modules the sweep below would otherwise build at torch's default sizes (a 6-layer, 512-wide
#: Transformer) or that take none of its candidates
_REPR_ARGS = {"Transformer": (8, 2, 2, 2, 16), "TransformerEncoder": "layers", "TransformerDecoder": "layers",
              "Unflatten": (1, (2, 2)), "MultiheadAttention": (8, 2)}
_REPR_CANDIDATES = [(), (4,), (4, 4), (4, 4, 3), (8, 2), (2,), (4, 2, 2), ((2, 2),)]


def _repr_args(torch, name):
    """The arguments the sweep builds ``name`` with: its own, or the first candidate torch accepts."""
    import warnings as w

    args = _REPR_ARGS.get(name)
    if args == "layers":  # (a stack of two equal layers: torch's ModuleList repr folds them into "(0-1): 2 x")
        return lambda nn: (getattr(nn, name + "Layer")(8, 2, 16), 2)
    for cand in ([args] if args is not None else _REPR_CANDIDATES):
        try:
            with w.catch_warnings():
                w.simplefilter("ignore")
                getattr(torch.nn, name)(*cand)
        except Exception:  # noqa: BLE001 - not this candidate
            continue
        return lambda nn, cand=cand: cand
    return None


def test_every_modules_repr_is_torchs(torch):
    """Every ``torch.nn`` module class tensorwire has, built with the same arguments, prints as torch's (a sweep:
    found ELU, GLU, Hardtanh, GroupNorm and LayerNorm without their defaults or ``bias``, AvgPool1d's sizes not
    tuples, and ModuleList's runs of equal layers not folded)."""
    import inspect
    import warnings as w

    checked = []
    for name in sorted(dir(torch.nn)):
        ref_cls = getattr(torch.nn, name)
        if name.startswith("_") or not (inspect.isclass(ref_cls) and issubclass(ref_cls, torch.nn.Module)):
            continue
        if not hasattr(nn, name) or name in ("RNNBase", "RNNCellBase", "DataParallel"):  # (DataParallel wraps a
            # module of its library: tests/collectives/test_data_parallel.py checks its repr)
            continue
        make = _repr_args(torch, name)
        if make is None:
            continue
        with w.catch_warnings():
            w.simplefilter("ignore")
            ref, mine = ref_cls(*make(torch.nn)), getattr(nn, name)(*make(nn))
        assert repr(mine) == repr(ref), name
        checked.append(name)
    assert len(checked) >= 150, len(checked)
