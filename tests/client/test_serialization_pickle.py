"""``tw.save`` / ``tw.load`` of whole objects (issue 33): pickled as torch pickles them, loaded by default with
``weights_only=True``'s restricted unpickler (torch 2.6+'s rules: an allowlist, ``add_safe_globals``,
``safe_globals``), tensors through persistent ids to safetensors entries; and what a hostile file cannot do."""

from __future__ import annotations

import collections
import copyreg
import io
import json
import os
import pickle

import numpy as np
import pytest

import tensorwire as tw
from tensorwire import nn
from tensorwire import serialization as S
from tensorwire.protocol.safetensors_io import load_file, metadata_of, save_bytes

pytestmark = pytest.mark.usefixtures("session")


class Config:
    """A user class a checkpoint may hold (module level: pickle finds it by name)."""

    def __init__(self, width: int, name: str):
        self.width, self.name = width, name


def _model():
    tw.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))


def _same(a, b) -> bool:
    return a.detach().numpy().tobytes() == b.detach().numpy().tobytes()


# -- whole objects, as torch ------------------------------------------------------------------------------------------

def test_whole_module_round_trip_needs_its_classes_allowed(tmp_path):
    m = _model()
    p = tmp_path / "m.pt"
    tw.save(m, p)
    with pytest.raises(pickle.UnpicklingError) as e:
        tw.load(p)
    msg = str(e.value)
    assert "Weights only load failed" in msg and "weights_only=False" in msg
    assert "GLOBAL tensorwire.nn.container.Sequential was not an allowed global by default" in msg
    assert "tw.serialization.add_safe_globals([tensorwire.nn.container.Sequential])" in msg
    assert "tw.serialization.safe_globals([tensorwire.nn.container.Sequential])" in msg
    with tw.serialization.safe_globals([nn.Sequential, nn.Linear, nn.ReLU]):
        back = tw.load(p)
    assert tw.serialization.get_safe_globals() == []  # the context manager restores the allowlist
    for loaded in (back, tw.load(p, weights_only=False)):
        assert type(loaded) is nn.Sequential and [type(c) for c in loaded] == [nn.Linear, nn.ReLU, nn.Linear]
        assert isinstance(loaded[0].weight, nn.Parameter) and loaded[0].weight.requires_grad
        assert loaded[0].in_features == 3 and loaded.training
        for (k, a), (k2, b) in zip(m.state_dict().items(), loaded.state_dict().items()):
            assert k == k2 and _same(a, b)
        x = tw.randn(5, 3)
        assert _same(m(x), loaded(x))
        loaded(x).sum().backward()  # a working module: its parameters are leaves that get gradients
        assert loaded[0].weight.grad.shape == (4, 3)


def test_add_safe_globals_and_user_classes(tmp_path):
    p = tmp_path / "c.pt"
    tw.save({"cfg": Config(8, "wide"), "w": tw.ones(2)}, p)
    with pytest.raises(pickle.UnpicklingError, match=f"GLOBAL {__name__}.Config was not an allowed global"):
        tw.load(p)
    try:
        tw.serialization.add_safe_globals([Config])
        assert tw.serialization.get_safe_globals() == [Config]
        back = tw.load(p)
    finally:
        tw.serialization.clear_safe_globals()
    assert isinstance(back["cfg"], Config) and (back["cfg"].width, back["cfg"].name) == (8, "wide")
    assert back["w"].tolist() == [1.0, 1.0]
    with pytest.raises(pickle.UnpicklingError):  # cleared again
        tw.load(p)
    with tw.serialization.safe_globals([(Config, f"{__name__}.Config")]):  # (object, name), as torch takes
        assert tw.load(p)["cfg"].width == 8


def test_torch_default_allowlist_equivalents_load_without_being_told(tmp_path):
    t = tw.arange(6.0).reshape(2, 3)
    obj = {"od": collections.OrderedDict(a=t), "c": collections.Counter("aab"), "s": {1, 2}, "z": 1 + 2j,
           "ba": bytearray(b"xy"), "b": b"raw", "size": t.shape, "dev": t.device, "dt": tw.bfloat16,
           "shared": [t, t], "nested": (t, [None, 1.5, "s"]), (1, 2): "tuple key"}
    p = tmp_path / "o.pt"
    tw.save(obj, p)
    back = tw.load(p)  # weights_only=True: everything here is on the default allowlist
    assert type(back["od"]) is collections.OrderedDict and back["c"] == collections.Counter("aab")
    assert back["s"] == {1, 2} and back["z"] == 1 + 2j and back["ba"] == bytearray(b"xy") and back["b"] == b"raw"
    assert type(back["size"]) is tw.Size and back["size"] == (2, 3)
    assert back["dev"] == t.device and back["dt"] is tw.bfloat16 and back[(1, 2)] == "tuple key"
    assert back["shared"][0] is back["shared"][1] is back["od"]["a"]  # one object saved once, loaded once
    assert back["nested"][0] is back["od"]["a"] and back["nested"][1] == [None, 1.5, "s"]
    assert back["od"]["a"].tolist() == t.tolist()
    tw.save(obj, p, pickle_protocol=2)  # torch's protocol: sets and bytes are calls to allowlisted globals
    back = tw.load(p)
    assert back["s"] == {1, 2} and back["b"] == b"raw" and back["shared"][0] is back["od"]["a"]
    tw.save({"r": range(3)}, p)
    with pytest.raises(pickle.UnpicklingError, match="GLOBAL builtins.range"):  # as torch: not by default
        tw.load(p)


def test_every_dtype_and_grad_flags_survive_a_pickle(tmp_path):
    rng = np.random.default_rng(1)
    ts = {name: tw.tensor(rng.standard_normal((2, 3)) * 50).to(getattr(tw, name))
          for name in ("uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64")}
    ts["bool"] = tw.tensor(rng.standard_normal(4) > 0)
    ts["c64"] = tw.tensor(np.array([1 + 2j, -3j], np.complex64))
    ts["c128"] = tw.tensor(np.array([1 + 2j, np.nan + 1j], np.complex128))  # (safetensors has no C128: bytes)
    leaf = tw.ones(3, requires_grad=True)
    p = tmp_path / "d.pt"
    tw.save({"set": {1}, "ts": ts, "leaf": leaf, "param": nn.Parameter(tw.zeros(2), requires_grad=False)}, p)
    back = tw.load(p)
    for k, v in ts.items():
        assert back["ts"][k].dtype == v.dtype and back["ts"][k].numpy().tobytes() == v.numpy().tobytes(), k
    assert back["leaf"].requires_grad and back["leaf"].is_leaf
    assert isinstance(back["param"], nn.Parameter) and not back["param"].requires_grad



def _torch_round_trip(torch, obj, weights_only: bool):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=weights_only)


def test_parameters_and_grad_flags_in_a_tree_load_as_torch(tmp_path):
    """A tree (no pickle) keeps what torch keeps: an ``nn.Parameter`` loads as one with its ``requires_grad`` (it
    used to load as a plain tensor without grad), a tensor that requires grad as a leaf that does; a flat state dict
    of plain tensors is still a plain safetensors file."""
    torch = pytest.importorskip("torch", reason="PyTorch is the reference here (pip install torch==2.13.0)")

    def obj(lib):
        return {"p": lib.nn.Parameter(lib.ones(2)), "frozen": lib.nn.Parameter(lib.ones(2), requires_grad=False),
                "leaf": lib.ones(2, requires_grad=True), "made": lib.ones(2, requires_grad=True) * 2,
                "plain": lib.arange(3), "nested": [lib.nn.Parameter(lib.zeros(1))]}

    p = tmp_path / "params.pt"
    tw.save(obj(tw), p)
    assert json.loads(metadata_of(p)["tensorwire"])["version"] == S.TREE_FLAGS_VERSION
    assert S.PICKLE_ENTRY not in load_file(p)  # (still a tree: no pickle)
    for wo in (True, False):
        ref = _torch_round_trip(torch, obj(torch), wo)
        back = tw.load(p, weights_only=wo)
        for k in ("p", "frozen", "leaf", "made", "plain"):
            assert isinstance(back[k], nn.Parameter) == isinstance(ref[k], torch.nn.Parameter), k
            assert (back[k].requires_grad, back[k].is_leaf) == (ref[k].requires_grad, ref[k].is_leaf), k
            assert back[k].tolist() == ref[k].tolist()
        assert isinstance(back["nested"][0], nn.Parameter) and back["nested"][0].requires_grad
    for lone in (nn.Parameter(tw.ones(3)), {"w": nn.Parameter(tw.ones(3))}):  # (a flat dict of one too)
        tw.save(lone, p)
        back = tw.load(p)
        back = back if isinstance(lone, tw.Tensor) else back["w"]
        assert isinstance(back, nn.Parameter) and back.requires_grad
    m = _model()
    tw.save(m.state_dict(), p)
    assert "tensorwire" not in metadata_of(p)
    tw.save(m.state_dict(keep_vars=True), p)  # (its parameters: as torch, they load as parameters)
    assert all(isinstance(v, nn.Parameter) for v in tw.load(p).values())


def test_numpy_scalars_keep_their_type_as_torch(tmp_path):
    """A numpy scalar loads back as a numpy scalar of its dtype (``np.float32(1.5)`` used to load as the Python float
    1.5), as ``torch.load(weights_only=False)`` gives it (the tree holds no code: it loads with either
    ``weights_only``, where torch's restricted unpickler refuses numpy's globals)."""
    torch = pytest.importorskip("torch", reason="PyTorch is the reference here (pip install torch==2.13.0)")
    obj = {"f32": np.float32(1.5), "f64": np.float64(0.1), "i64": np.int64(-3), "b": np.bool_(True),
           "c64": np.complex64(1 + 2j), "f16": np.float16(0.1), "inf": np.float32(np.inf), "py": 2.5,
           "seq": [np.int8(4), (np.uint8(5),)]}
    ref = _torch_round_trip(torch, obj, weights_only=False)
    p = tmp_path / "scalars.pt"
    tw.save(obj, p)
    for wo in (True, False):
        back = tw.load(p, weights_only=wo)
        assert list(back) == list(ref)
        for k in ("f32", "f64", "i64", "b", "c64", "f16", "inf", "py"):
            assert type(back[k]) is type(ref[k]) and back[k] == ref[k], k
        assert [type(back["seq"][0]), type(back["seq"][1][0])] == [np.int8, np.uint8] == [
            type(ref["seq"][0]), type(ref["seq"][1][0])]
    tw.save(np.float32(2.25), p)
    assert type(tw.load(p)) is np.float32 and tw.load(p) == 2.25


def test_optimizer_and_module_checkpoint_resumes(tmp_path):
    m = _model()
    opt = tw.optim.Adam(m.parameters(), lr=0.01)
    x = tw.randn(8, 3)
    for _ in range(2):
        opt.zero_grad()
        m(x).pow(2).mean().backward()
        opt.step()
    p = tmp_path / "ck.pt"
    tw.save({"model": m, "opt": opt, "epoch": 2}, p)
    ck = tw.load(p, weights_only=False)
    m2, opt2 = ck["model"], ck["opt"]
    assert ck["epoch"] == 2 and opt2.param_groups[0]["params"][0] is m2[0].weight  # the same objects, as torch
    for model, o in ((m, opt), (m2, opt2)):
        o.zero_grad()
        model(x).pow(2).mean().backward()
        o.step()
    for a, b in zip(m.parameters(), m2.parameters()):
        assert _same(a, b)


def test_numpy_arrays_load_as_arrays(tmp_path):
    p = tmp_path / "a.pt"
    tw.save({"a": np.arange(3), "t": tw.ones(2)}, p)  # a tree (no pickle): loads with either weights_only
    for wo in (True, False):
        back = tw.load(p, weights_only=wo)
        assert type(back["a"]) is np.ndarray and back["a"].tolist() == [0, 1, 2] and back["a"].dtype == np.int64
        assert tw.from_numpy(back["a"]).tolist() == [0, 1, 2] and isinstance(back["t"], tw.Tensor)
    assert json.loads(metadata_of(p)["tensorwire"])["tree"]["a"] == {"__ndarray__": "a"}
    # inside a pickle too: numeric arrays are entries (no numpy globals); an object array pickles as numpy does
    tw.save({"s": {1}, "a": np.eye(2, dtype=np.float16), "u": np.arange(4, dtype=np.uint32)[::2]}, p)
    back = tw.load(p)
    assert back["a"].dtype == np.float16 and back["a"].tolist() == [[1, 0], [0, 1]]
    assert back["u"].dtype == np.uint32 and back["u"].tolist() == [0, 2]
    tw.save({"o": np.array([{"x": 1}], dtype=object)}, p)
    with pytest.raises(pickle.UnpicklingError, match="numpy"):
        tw.load(p)
    assert tw.load(p, weights_only=False)["o"][0] == {"x": 1}


def test_state_dicts_stay_plain_safetensors(tmp_path):
    """State dicts keep their format: a flat dict is a plain safetensors file, nested ones a JSON tree; no pickle."""
    m = _model()
    p = tmp_path / "sd.safetensors"
    tw.save(m.state_dict(), p)
    assert sorted(load_file(p)) == sorted(m.state_dict()) and "tensorwire" not in metadata_of(p)
    opt = tw.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    tw.save({"model": m.state_dict(), "opt": opt.state_dict(), "step": 3}, p)
    assert S.PICKLE_ENTRY not in load_file(p) and json.loads(metadata_of(p)["tensorwire"])["version"] == 1
    tw.save(m, p)
    names = sorted(load_file(p))
    assert S.PICKLE_ENTRY in names and json.loads(metadata_of(p)["tensorwire"])["version"] == 2
    assert len(names) == 1 + len(m.state_dict())  # each tensor its own entry, beside the pickle


def test_zero_dim_tensors_keep_their_shape():
    """A 0-d tensor saved and loaded is 0-d (BatchNorm's ``num_batches_tracked``: a state dict saved to a buffer and
    loaded back into the model failed with a shape mismatch, [1] against [], until session 59: numpy's
    ``ascontiguousarray`` makes a 0-d array 1-d); in a flat state dict, a nested checkpoint and the safetensors bytes
    themselves."""
    bn = nn.BatchNorm1d(4)
    for obj in (bn.state_dict(), {"model": bn.state_dict(), "loss": tw.tensor(0.5)}, tw.tensor(3)):
        buf = io.BytesIO()
        tw.save(obj, buf)
        buf.seek(0)
        back = tw.load(buf)
        if isinstance(obj, dict) and "model" in obj:
            assert back["loss"].shape == () and back["model"]["num_batches_tracked"].shape == ()
            bn.load_state_dict(back["model"])
        elif isinstance(obj, dict):
            assert back["num_batches_tracked"].shape == () and back["running_mean"].shape == (4,)
            bn.load_state_dict(back)
        else:
            assert back.shape == () and back.item() == 3
    raw = save_bytes({"s": np.array(2.5, np.float32), "v": np.arange(3)})
    assert json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])["s"]["shape"] == []


def test_file_objects_and_map_location(session, tmp_path):
    buf = io.BytesIO()
    tw.save({"k": {3}, "t": tw.arange(3)}, buf)
    buf.seek(0)
    back = tw.load(buf, map_location=session.default_device)
    assert back["t"].tolist() == [0, 1, 2] and back["t"].device == session.default_device
    with pytest.raises(RuntimeError, match="explicit pickle_module"):
        tw.load(io.BytesIO(buf.getvalue()), pickle_module=pickle)


def test_a_torch_checkpoint_is_named_as_one(tmp_path):
    torch = pytest.importorskip("torch", reason="PyTorch writes the checkpoint")
    p = tmp_path / "t.pt"
    torch.save({"w": torch.ones(2)}, p)
    with pytest.raises(tw.ProtocolError, match="PyTorch checkpoint"):
        tw.load(p)


# -- what a hostile file cannot do ----------------------------------------------------------------------------------

def _file_with_pickle(path, data: bytes, entries: dict | None = None) -> None:
    arrays = dict(entries or {})
    arrays[S.PICKLE_ENTRY] = np.frombuffer(data, np.uint8)
    meta = {"format": "pt", "tensorwire": json.dumps({"version": S.PICKLE_VERSION, "pickle": S.PICKLE_ENTRY})}
    with open(path, "wb") as f:
        f.write(save_bytes(arrays, meta))


class _Evil:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_code_in_a_pickle_never_runs_by_default(tmp_path):
    marker = tmp_path / "pwned"
    cmd = f"touch {marker}".encode()
    payloads = {
        "GLOBAL os.system": b"cos\nsystem\n(S'" + cmd + b"'\ntR.",
        "INST": b"(S'" + cmd + b"'\nios\nsystem\n.",
        "STACK_GLOBAL": pickle.dumps(_Evil(str(marker)), protocol=4),
        "builtins.eval": b"cbuiltins\neval\n(S'__import__(\"os\").system(\"" + cmd + b"\")'\ntR.",
        "getattr": b"cbuiltins\ngetattr\n(cbuiltins\nobject\nS'__subclasses__'\ntR.",
    }
    for what, data in payloads.items():
        p = tmp_path / f"{what}.pt"
        _file_with_pickle(p, data)
        with pytest.raises(pickle.UnpicklingError, match="was not an allowed global"):
            tw.load(p)
        assert not marker.exists(), what
    # the copyreg extension registry resolves through find_class too
    copyreg.add_extension("os", "system", 0x7A31)
    try:
        p = tmp_path / "ext.pt"
        _file_with_pickle(p, b"\x80\x02\x83\x31\x7a(X" + len(cmd).to_bytes(4, "little") + cmd + b"tR.")
        with pytest.raises(pickle.UnpicklingError, match="GLOBAL os.system"):
            tw.load(p)
    finally:
        copyreg.remove_extension("os", "system", 0x7A31)
    assert not marker.exists()


def test_a_pickle_cannot_set_a_loaded_tensors_state(tmp_path):
    pid = pickle.dumps(("tensor", "0", "float32", [2], False, False), protocol=2)[2:-1]
    state = pickle.dumps((None, {"_id": 1}), protocol=2)[2:-1]
    p = tmp_path / "build.pt"
    _file_with_pickle(p, b"\x80\x02" + pid + b"Q" + state + b"b.", {"0": np.ones(2, np.float32)})
    with pytest.raises(pickle.UnpicklingError, match="sets the state of a tensor"):
        tw.load(p)
    _file_with_pickle(p, b"\x80\x02" + pid + b"Q.", {"0": np.ones(2, np.float32)})
    assert tw.load(p).tolist() == [1.0, 1.0]  # the same file without the BUILD loads


@pytest.mark.parametrize("pid, entries, match", [
    (("tensor", "9", "float32", [2], False, False), {"0": np.ones(2, np.float32)}, "no entry"),
    (("tensor", "0", "float32", [3], False, False), {"0": np.ones(2, np.float32)}, "does not hold"),
    (("tensor", "0", "quint8", [2], False, False), {"0": np.ones(2, np.float32)}, "unknown dtype"),
    (("ndarray", "0", "object", [1]), {"0": np.zeros(8, np.uint8)}, "unknown numpy dtype"),
    (("tensor", S.PICKLE_ENTRY, "uint8", [1], False, False), {}, "no entry"),
    (("tensor", ["0"], "float32", [2], False, False), {"0": np.ones(2, np.float32)}, "unknown persistent id"),
    (("storage", "0"), {"0": np.ones(2, np.float32)}, "unknown persistent id"),
])
def test_malformed_persistent_ids_are_refused(tmp_path, pid, entries, match):
    p = tmp_path / "bad.pt"
    _file_with_pickle(p, b"\x80\x02" + pickle.dumps(pid, protocol=2)[2:-1] + b"Q.", entries)
    with pytest.raises(pickle.UnpicklingError, match=match):
        tw.load(p)


def test_weights_only_false_is_the_users_explicit_choice(tmp_path):
    p = tmp_path / "trusted.pt"
    tw.save({"cfg": Config(2, "x"), "f": os.path.join}, p)
    with pytest.raises(pickle.UnpicklingError):
        tw.load(p)
    back = tw.load(p, weights_only=False)
    assert back["f"] is os.path.join and back["cfg"].name == "x"


def test_plain_pickle_of_modules_and_tensors_still_refuses():
    """Only tw.save pickles (tensors as entries): plain pickle cannot carry a cluster tensor."""
    with pytest.raises(TypeError, match="tw.save"):
        pickle.dumps(_model())
    with pytest.raises(TypeError, match="tw.save"):
        pickle.dumps(nn.Parameter(tw.ones(1)))
