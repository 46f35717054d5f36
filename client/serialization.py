"""``tw.save`` / ``tw.load``: tensors, state dicts and nested containers in the safetensors format.

Never pickle. Tensors become safetensors tensors named by their path in the object (``"fc.weight"``,
``"state.0.exp_avg"``); everything else (numbers, strings, lists, nested dicts, e.g. an optimizer's
``param_groups``) is kept as JSON in the header's ``__metadata__`` under ``"tensorwire"``, with the tree
that puts the tensors back in place. A flat ``{name: tensor}`` dict writes a file any safetensors reader
loads as the same dict; a safetensors file written by anyone loads as ``{name: tensor}``.
"""

from __future__ import annotations

import json
import os

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.safetensors_io import load_file, metadata_of, save_bytes

from .tensor import Tensor

META_KEY = "tensorwire"
FORMAT_VERSION = 1


def _encode(obj, path: str, tensors: dict):
    """The JSON tree of ``obj``; tensors are moved to ``tensors`` and replaced by ``{"__tensor__": name}``."""
    if isinstance(obj, Tensor) or isinstance(obj, np.ndarray):
        name = path or "tensor"
        if name in tensors:
            raise ValueError(f"tw.save: two tensors would be stored under the name {name!r}")
        tensors[name] = obj
        return {"__tensor__": name}
    if isinstance(obj, dict):
        items = []
        simple = all(isinstance(k, str) for k in obj)
        for k, v in obj.items():
            if not isinstance(k, (str, int, float, bool)) and k is not None:
                raise TypeError(f"tw.save: dict keys must be str, int, float or bool, got {type(k).__name__}")
            items.append([k, _encode(v, f"{path}.{k}" if path else str(k), tensors)])
        if simple and not any(k.startswith("__") for k in obj):
            return {k: v for k, v in items}
        return {"__dict__": items}
    if isinstance(obj, (list, tuple)):
        enc = [_encode(v, f"{path}.{i}" if path else str(i), tensors) for i, v in enumerate(obj)]
        return {"__tuple__": enc} if isinstance(obj, tuple) else enc
    if isinstance(obj, (np.generic,)):
        return obj.item()
    if obj is None or isinstance(obj, (bool, int, float, str)):
        if isinstance(obj, float) and not np.isfinite(obj):
            return {"__float__": repr(obj)}
        return obj
    if isinstance(obj, D.DType):
        return {"__dtype__": obj.name}
    if hasattr(obj, "state_dict") and callable(obj.state_dict):  # a module or an optimizer: torch pickles it
        raise TypeError(f"tw.save cannot store a whole {type(obj).__name__} object: tensorwire never pickles (a "
                        f"file must not carry code). Save its state instead: tw.save(obj.state_dict(), path), then "
                        f"build the {type(obj).__name__} again and call .load_state_dict(tw.load(path))")
    raise TypeError(f"tw.save cannot store a {type(obj).__name__} (tensors, numbers, strings, lists, tuples "
                    "and dicts only: no pickle)")


def _decode(node, tensors: dict):
    if isinstance(node, list):
        return [_decode(v, tensors) for v in node]
    if isinstance(node, dict):
        if "__tensor__" in node and len(node) == 1:
            return tensors[node["__tensor__"]]
        if "__tuple__" in node and len(node) == 1:
            return tuple(_decode(v, tensors) for v in node["__tuple__"])
        if "__dict__" in node and len(node) == 1:
            return {k: _decode(v, tensors) for k, v in node["__dict__"]}
        if "__float__" in node and len(node) == 1:
            return float(node["__float__"])
        if "__dtype__" in node and len(node) == 1:
            return D.BY_NAME[node["__dtype__"]]
        return {k: _decode(v, tensors) for k, v in node.items()}
    return node


def save(obj, f, *, metadata: dict | None = None) -> None:
    """Write ``obj`` (a tensor, a state dict, an optimizer state dict, nested dicts/lists of them) to ``f``
    (a path or a binary file object) as safetensors. Tensor values are fetched from the cluster (one
    batch); the bytes are written exactly as they are (bit-exact round trip)."""
    tensors: dict = {}
    tree = _encode(obj, "", tensors)
    live = [t for t in tensors.values() if isinstance(t, Tensor)]
    if live:
        _prefetch(live)
    arrays = {k: (_value(v) if isinstance(v, Tensor) else np.asarray(v)) for k, v in tensors.items()}
    meta = {"format": "pt"}
    if metadata:
        meta.update({str(k): str(v) for k, v in metadata.items()})
    flat = isinstance(obj, dict) and all(isinstance(k, str) for k in obj) and all(
        isinstance(v, Tensor) for v in obj.values())
    if not flat:
        meta[META_KEY] = json.dumps({"version": FORMAT_VERSION, "tree": tree}, separators=(",", ":"))
    data = save_bytes(arrays, meta)
    if hasattr(f, "write"):
        f.write(data)
        return
    tmp = f"{os.fspath(f)}.tmp-{os.getpid()}"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, f)


def _prefetch(tensors: list[Tensor]) -> None:
    """Fetch many tensors' values in one round trip (each tensor's ``numpy()`` then hits the cache)."""
    by_session: dict = {}
    for t in tensors:
        by_session.setdefault(id(t._s), (t._s, []))[1].append(t)
    for s, ts in by_session.values():
        for t in ts:
            if t._base is not None:
                t._refresh()
        vals = s.flush(fetch=[t._id for t in ts])
        for t in ts:
            _CACHE[id(t)] = (t._id, vals[t._id])


_CACHE: dict = {}


def _value(t: Tensor) -> np.ndarray:
    hit = _CACHE.pop(id(t), None)
    if hit is not None and hit[0] == t._id:
        arr = hit[1]
        return arr.view(D.bfloat16.np) if t.dtype is D.bfloat16 and arr.dtype != D.bfloat16.np else arr
    return t._numpy()


def load(f, device=None, *, map_location=None, session=None, weights_only: bool = True):
    """Read a file written by :func:`save` (or any safetensors file) and upload its tensors to ``device``
    (``map_location`` is accepted as torch's alias). Returns the saved object; a plain safetensors file
    gives ``{name: tensor}``."""
    from .creation import _ctx

    if device is None and map_location is not None and not callable(map_location) and not isinstance(
            map_location, dict):
        device = map_location
    s, dev = _ctx(device, session)
    path = f
    if hasattr(f, "read"):
        import tempfile

        with tempfile.NamedTemporaryFile(suffix=".safetensors", delete=False) as tmp:
            tmp.write(f.read())
            path = tmp.name
    try:
        arrays = load_file(path)
        meta = metadata_of(path)
        tensors = {}
        for name, arr in arrays.items():
            a = np.array(arr, copy=True, order="C")
            tensors[name] = s.const(a, dev, D.from_numpy(a.dtype) if a.dtype != D.bfloat16.np else D.bfloat16)
    finally:
        if path is not f:
            os.unlink(path)
    spec = meta.get(META_KEY)
    if spec is None:
        return tensors
    tree = json.loads(spec)
    if not isinstance(tree, dict) or tree.get("version") != FORMAT_VERSION:
        raise ValueError(f"unsupported tensorwire checkpoint metadata version: {tree.get('version')!r}")
    return _decode(tree["tree"], tensors)
