"""Names third-party training scripts use under ``import tensorwire as torch`` (issue 33): the legacy constructor
``torch.Tensor(*sizes)``, indexing with a ``range``, ``Tensor.is_xpu`` and its kin, ``torch.backends.cudnn`` as a
module, and ``torch.utils.tensorboard.SummaryWriter``; each checked against PyTorch where it is installed."""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest

import tensorwire as tw

from ..programs._harness import tensorwire_as_torch

pytestmark = pytest.mark.usefixtures("session")


def _torch():
    return pytest.importorskip("torch", reason="PyTorch is the reference here (pip install torch==2.13.0)")


# -- tw.Tensor(...): torch's legacy constructor -------------------------------------------------------------------

@pytest.mark.parametrize("args", [(2, 3), (0,), ([1, 2],), ([[1.5, 2], [3, 4]],), ((1, 2),), (), ("size",),
                                  ("array",)])
def test_legacy_tensor_constructor_matches_torch(args):
    torch = _torch()
    conv = {"size": (lambda m: m.Size([2, 3])), "array": (lambda m: np.array([1, 2], np.int64))}
    ours = tw.Tensor(*[conv[a](tw) if isinstance(a, str) else a for a in args])
    ref = torch.Tensor(*[conv[a](torch) if isinstance(a, str) else a for a in args])
    assert type(ours) is tw.Tensor and ours.dtype.name == str(ref.dtype).removeprefix("torch.")
    assert tuple(ours.shape) == tuple(ref.shape)
    if args and not all(isinstance(a, int) for a in args) and args != ("size",):  # data: the values too
        np.testing.assert_array_equal(ours.numpy(), ref.numpy())


def test_legacy_tensor_constructor_follows_default_dtype_and_refuses_what_torch_refuses():
    prev = tw.get_default_dtype()
    try:
        tw.set_default_dtype(tw.float64)
        assert tw.Tensor(2).dtype == tw.float64 and tw.Tensor([1]).dtype == tw.float64
        assert tw.FloatTensor(2).dtype == tw.float32  # the typed constructors keep their type
    finally:
        tw.set_default_dtype(prev)
    for bad in ((2.5,), (True,), (np.float32(2),), ([2], [3])):
        with pytest.raises(TypeError):
            tw.Tensor(*bad)
    with pytest.raises(TypeError, match="dtype"):
        tw.Tensor(2, dtype=tw.float64)
    assert tw.Tensor(2, device=tw.get_default_device()).device == tw.get_default_device()


def test_legacy_tensor_of_a_tensor_shares_its_value():
    x = tw.tensor([1.0, 2.0], dtype=tw.float64)
    y = tw.Tensor(x)
    assert y.dtype == tw.float64 and y is not x
    y.add_(1)  # as torch: the two share their storage
    assert x.tolist() == [2.0, 3.0] and y.tolist() == [2.0, 3.0]
    del y, x  # (each releases its own handle: the checks in the other tests would see a double release)
    assert tw.ones(2).sum().item() == 2.0


def test_internal_construction_does_not_go_through_the_legacy_constructor():
    """The cluster's tensors are made without calling the class: creating many stays as cheap as before."""
    calls = []
    orig = tw.Tensor.__init__
    tw.Tensor.__init__ = lambda self, *a, **k: calls.append(a)
    try:
        x = tw.arange(6.0).reshape(2, 3)
        (x * 2 + 1).sum(0).tolist()
    finally:
        tw.Tensor.__init__ = orig
    assert calls == []


# -- indexing with a range ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("key", ["r2", "r_step", "r_cols", "r_empty", "r_pair", "r_neg"])
def test_range_indexing_matches_torch(key):
    torch = _torch()
    keys = {"r2": range(2), "r_step": range(0, 3, 2), "r_cols": (slice(None), range(1, 3)), "r_empty": range(0),
            "r_pair": (range(2), range(2)), "r_neg": range(-1, -3, -1)}
    k = keys[key]
    a = np.arange(12.0).reshape(3, 4)
    ours, ref = tw.tensor(a), torch.tensor(a)
    np.testing.assert_array_equal(ours[k].numpy(), ref[k].numpy())
    ours[k] = -1.0
    ref[k] = -1.0
    np.testing.assert_array_equal(ours.numpy(), ref.numpy())


def test_range_index_is_a_copy_as_in_torch():
    x = tw.arange(4.0)
    y = x[range(2)]
    y.add_(10)
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0]


# -- Tensor.is_* ---------------------------------------------------------------------------------------------------

def test_is_attributes_match_torch_for_a_dense_tensor():
    torch = _torch()
    a = np.arange(3.0)
    ours, ref = tw.tensor(a), torch.tensor(a)
    for name in ("is_xpu", "is_ipu", "is_xla", "is_vulkan", "is_mkldnn", "is_maia", "is_mtia", "is_nested", "is_mps",
                 "is_meta", "is_quantized", "is_sparse", "is_sparse_csr", "is_cuda", "is_cpu", "is_leaf"):
        assert getattr(ours, name) == getattr(ref, name), name
    for name in ("is_inference", "is_pinned", "is_shared", "is_signed", "is_floating_point", "is_complex"):
        assert getattr(ours, name)() == getattr(ref, name)(), name
    for dt in ("bool", "uint8", "int8", "float16"):
        assert tw.zeros(1).to(getattr(tw, dt)).is_signed() == torch.zeros(1).to(getattr(torch, dt)).is_signed(), dt
    assert ours.is_same_size(tw.zeros(3)) and not ours.is_same_size(tw.zeros(1, 3))
    assert tw.tensor([2.0]).is_nonzero() and not tw.tensor(0).is_nonzero()
    for bad, msg in ((tw.zeros(0), "no values"), (tw.zeros(2), "more than one value")):
        with pytest.raises(RuntimeError, match=msg):
            bad.is_nonzero()


# -- torch.backends.cudnn, .mkldnn, .opt_einsum as modules -----------------------------------------------------------

def test_backends_settings_are_modules_and_keep_their_values():
    cudnn = importlib.import_module("tensorwire.backends.cudnn")
    assert cudnn is tw.backends.cudnn and cudnn.__name__ == "tensorwire.backends.cudnn"
    saved = (cudnn.benchmark, cudnn.deterministic)
    try:
        tw.backends.cudnn.benchmark = True
        assert cudnn.benchmark is True and importlib.import_module("tensorwire.backends.cudnn").benchmark is True
        with cudnn.flags(enabled=True, benchmark=False, deterministic=True):
            assert cudnn.deterministic is True and cudnn.benchmark is False
        assert cudnn.benchmark is True and cudnn.deterministic is saved[1]
    finally:
        cudnn.benchmark, cudnn.deterministic = saved
    assert cudnn.enabled is True and cudnn.allow_tf32 is True and cudnn.is_available() is False
    assert cudnn.version() is None
    mkldnn = importlib.import_module("tensorwire.backends.mkldnn")
    opt_einsum = importlib.import_module("tensorwire.backends.opt_einsum")
    assert mkldnn is tw.backends.mkldnn and mkldnn.enabled is True and mkldnn.is_available() is False
    assert opt_einsum is tw.backends.opt_einsum and opt_einsum.enabled is False and opt_einsum.strategy is None


def test_import_torch_backends_cudnn_as_a_script_does():
    with tensorwire_as_torch():
        import torch.backends.cudnn as cudnn  # noqa: PLC0415 - the aliased import is the point
        from torch.backends import mkldnn  # noqa: PLC0415

        assert cudnn is tw.backends.cudnn and mkldnn is tw.backends.mkldnn
        saved = cudnn.benchmark
        cudnn.benchmark = True
        assert sys.modules["torch.backends.cudnn"].benchmark is True
        cudnn.benchmark = saved


# -- torch.utils.tensorboard -----------------------------------------------------------------------------------------

def test_summary_writer_without_tensorboard_says_how_to_get_it(monkeypatch):
    from tensorwire.utils import tensorboard as tb

    monkeypatch.setattr(tb, "_MISSING", ImportError("No module named 'tensorboard'"))
    with pytest.raises(ImportError, match="pip install tensorboard"):
        tb.SummaryWriter("/nonexistent")


def test_summary_writer_writes_what_torch_writes(tmp_path):
    pytest.importorskip("tensorboard", reason="the tensorboard package reads the event files (pip install "
                        "tensorboard)")
    torch = _torch()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter as TorchWriter

    from tensorwire.utils.tensorboard import SummaryWriter

    rng = np.random.default_rng(0)
    hist = rng.standard_normal(200).astype(np.float32)
    img = rng.random((3, 6, 5)).astype(np.float32)
    imgs = rng.random((5, 1, 4, 4)).astype(np.float32)
    for name, writer, conv in (("ours", SummaryWriter, tw.tensor), ("torch", TorchWriter, torch.tensor)):
        with writer(str(tmp_path / name)) as w:
            for step in range(3):
                w.add_scalar("loss", conv(1.0 / (step + 1)), step)
            w.add_scalars("acc", {"train": 0.5, "val": conv(0.25)}, 1)
            w.add_histogram("w", conv(hist), 0)
            w.add_histogram("w_bins", hist, 0, bins=10, max_bins=4)
            w.add_image("img", conv(img), 0)
            w.add_images("imgs", imgs, 0)
            w.add_text("note", "hello *world*", 0)
            w.add_hparams({"lr": 0.1, "opt": "adam"}, {"hp/acc": 0.9}, run_name="hp")
    got = {}
    for name in ("ours", "torch"):
        ea = EventAccumulator(str(tmp_path / name), size_guidance={"tensors": 0, "images": 0})
        ea.Reload()
        h, hb = ea.Histograms("w")[0].histogram_value, ea.Histograms("w_bins")[0].histogram_value
        sub = EventAccumulator(str(tmp_path / name / "acc_val"))
        sub.Reload()
        hp = EventAccumulator(str(tmp_path / name / "hp"), size_guidance={"tensors": 0})
        hp.Reload()
        got[name] = {
            "loss": [(e.step, e.value) for e in ea.Scalars("loss")],
            "acc_val": [(e.step, e.value) for e in sub.Scalars("acc")],
            "hist": (h.min, h.max, h.num, h.sum, list(h.bucket_limit), list(h.bucket)),
            "hist_bins": (list(hb.bucket_limit), list(hb.bucket)),
            "img": ea.Images("img")[0].encoded_image_string, "imgs": ea.Images("imgs")[0].encoded_image_string,
            "text": ea.Tensors("note/text_summary")[0].tensor_proto.string_val,
            "hp_tags": sorted(hp.Tags()["tensors"]),
            "hp_metric": [(e.step, e.value) for e in hp.Scalars("hp/acc")],
        }
    for key in got["torch"]:
        assert got["ours"][key] == got["torch"][key], key
    assert got["ours"]["loss"][2] == (2, pytest.approx(1 / 3))


def test_summary_writer_add_graph_warns_and_the_rest_say_unsupported(tmp_path):
    pytest.importorskip("tensorboard", reason="pip install tensorboard")
    from tensorwire.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(tmp_path), purge_step=5)
    with pytest.warns(UserWarning, match="add_graph"):
        w.add_graph(tw.nn.Linear(2, 2), tw.ones(1, 2))
    with pytest.raises(NotImplementedError, match="add_embedding"):
        w.add_embedding(np.zeros((2, 2)))
    w.close()
    assert w.get_logdir() == str(tmp_path)
