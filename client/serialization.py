"""``tw.save`` / ``tw.load``: local files in the safetensors format; whole objects pickled, as torch pickles them.

One file format, two ways to describe the object (the ``"tensorwire"`` entry of the header's ``__metadata__``):

- **A tree** (tensors, numpy arrays and scalars, numbers, strings, ``None``, lists, tuples, dicts, dtypes: every
  state dict and optimizer state dict). Tensors become safetensors tensors named by their path in the object
  (``"fc.weight"``, ``"state.0.exp_avg"``); the rest is JSON with the tree that puts the tensors back. No pickle:
  such a file holds no code, and loads whatever ``weights_only`` says. A flat ``{name: tensor}`` dict writes a file
  any safetensors reader loads as the same dict; a safetensors file written by anyone loads as ``{name: tensor}``.
  As torch's, an ``nn.Parameter`` loads back as one (with its ``requires_grad``), a tensor that requires grad loads
  as a leaf that does, and a numpy scalar (``np.float32(1.5)``) as a numpy scalar of its dtype (a 0-d entry): a
  tree with such nodes is written as :data:`TREE_FLAGS_VERSION`, which readers older than these nodes refuse
  rather than misread.
- **A pickle** (anything else: a whole ``nn.Module``, an optimizer, sets, objects of your classes), as
  ``torch.save`` does. The pickle's bytes are one ``uint8`` entry, :data:`PICKLE_ENTRY`; every tensor (and every
  numeric numpy array) in the object is a persistent id naming its own safetensors entry, never pickled bytes.
  ``tw.load`` unpickles with ``weights_only=True`` by default (torch's default since 2.6): a restricted
  :class:`pickle.Unpickler` whose ``find_class`` answers only the allowlisted globals
  (:func:`get_safe_globals` and torch's defaults' equivalents: ``OrderedDict``, ``Counter``, ``set``, ``complex``,
  ``bytearray``, ``tw.Size``, ``tw.device``, dtypes) and refuses every other with :class:`pickle.UnpicklingError`
  naming it; :func:`add_safe_globals` and the :class:`safe_globals` context manager allow more.
  ``weights_only=False`` runs the pickle as it is: only for files from a source you trust (``docs/security.md``).

Pickles stay on local files: the wire (msgpack) and the hub (safetensors) never carry one.
"""

from __future__ import annotations

import codecs
import contextvars
import copyreg
import io
import json
import os
import pickle
import struct
import sys
import tempfile
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import ProtocolError
from tensorwire.protocol.safetensors_io import MAX_HEADER, TW_TO_ST, load_file, metadata_of, save_bytes

from . import sparse as _sparse
from .creation import _ctx
from .tensor import Size, Tensor, device

__all__ = ["save", "load", "add_safe_globals", "clear_safe_globals", "get_safe_globals", "safe_globals",
           "DEFAULT_PROTOCOL"]

META_KEY = "tensorwire"
FORMAT_VERSION = 1  # the JSON tree
#: the JSON tree with parameters, tensors that require grad or numpy scalars in it (nodes version 1 readers lack)
TREE_FLAGS_VERSION = 3
PICKLE_VERSION = 2  # a pickle (a file version 1 readers refuse with a clear error)
#: the safetensors entry holding a pickled object's bytes
PICKLE_ENTRY = "__tensorwire_pickle__"
#: the pickle protocol ``tw.save`` writes (``pickle_protocol=`` another), torch's ``DEFAULT_PROTOCOL``: 2, whose
#: ``bytes`` are ``_codecs.encode`` calls (allowlisted); a whole object's pickle is small (its tensors and arrays are
#: entries of their own), so 4's frames and large objects would not help it
DEFAULT_PROTOCOL = 2


class _NeedsPickle(Exception):
    """The object is not a tree of tensors and plain values: it is pickled."""


# -- the tree (JSON + safetensors) ------------------------------------------------------------------------------------

def _storable(dt: D.DType) -> bool:
    return dt.name in TW_TO_ST


def _encode(obj, path: str, tensors: dict):
    """The JSON tree of ``obj``; tensors and arrays are moved to ``tensors`` and replaced by ``{"__tensor__": name}``
    (``{"__ndarray__": name}`` for a numpy array, which loads back as one). Raises :class:`_NeedsPickle` for what
    a tree cannot hold."""
    if isinstance(obj, (Tensor, np.ndarray)):
        name = path or "tensor"
        if name in tensors:
            raise _NeedsPickle(f"two tensors would be stored under the name {name!r}")
        if isinstance(obj, Tensor):
            if obj._sparse or not _storable(obj.dtype):
                raise _NeedsPickle(f"a {obj.layout} {obj.dtype.name} tensor")
            tensors[name] = obj
            if _is_parameter(obj):
                return {"__parameter__": [name, bool(obj.requires_grad)]}
            return {"__grad_tensor__": name} if obj.requires_grad else {"__tensor__": name}
        name_np = _np_dtype_name(obj.dtype) if type(obj) is np.ndarray else None
        if name_np is None or name_np not in D.BY_NAME or not _storable(D.BY_NAME[name_np]):
            raise _NeedsPickle(f"a numpy array of {obj.dtype}")
        tensors[name] = obj
        return {"__ndarray__": name}
    if isinstance(obj, dict):
        items = []
        simple = all(isinstance(k, str) for k in obj)
        for k, v in obj.items():
            if not isinstance(k, (str, int, float, bool)) and k is not None:
                raise _NeedsPickle(f"a dict key of type {type(k).__name__}")
            items.append([k, _encode(v, f"{path}.{k}" if path else str(k), tensors)])
        if simple and not any(k.startswith("__") for k in obj):
            return {k: v for k, v in items}
        return {"__dict__": items}
    if isinstance(obj, (list, tuple)):
        enc = [_encode(v, f"{path}.{i}" if path else str(i), tensors) for i, v in enumerate(obj)]
        return {"__tuple__": enc} if isinstance(obj, tuple) else enc
    if isinstance(obj, np.generic):
        name_np = _np_dtype_name(obj.dtype)
        if name_np is None or name_np not in D.BY_NAME or not _storable(D.BY_NAME[name_np]):
            return obj.item()  # (a string, or a dtype safetensors lacks: its Python value)
        name = path or "tensor"
        if name in tensors:
            raise _NeedsPickle(f"two tensors would be stored under the name {name!r}")
        tensors[name] = np.asarray(obj)
        return {"__npscalar__": name}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        if isinstance(obj, float) and not np.isfinite(obj):
            return {"__float__": repr(obj)}
        return obj
    if isinstance(obj, D.DType):
        return {"__dtype__": obj.name}
    raise _NeedsPickle(type(obj).__name__)


def _parameter(t: Tensor, requires_grad: bool) -> Tensor:
    """``nn.Parameter(t, requires_grad)``, for a loaded file that holds one."""
    # lazy: the nn package loads only for a file that holds a Parameter
    from .nn.parameter import Parameter

    return Parameter(t, requires_grad)


def _is_parameter(t: Tensor) -> bool:
    param = sys.modules.get("tensorwire.nn.parameter")  # (not loaded: there is no Parameter to be)
    return param is not None and isinstance(t, param.Parameter)


#: the tree's nodes that only :data:`TREE_FLAGS_VERSION` files hold
_FLAG_NODES = ("__parameter__", "__grad_tensor__", "__npscalar__")


def _tree_has_flags(node) -> bool:
    """Whether a tree holds a node of :data:`_FLAG_NODES` (it is then written as :data:`TREE_FLAGS_VERSION`)."""
    if isinstance(node, list):
        return any(_tree_has_flags(v) for v in node)
    if isinstance(node, dict):
        if len(node) == 1 and next(iter(node)) in _FLAG_NODES:
            return True
        return any(_tree_has_flags(v) for v in node.values())
    return False


def _decode(node, tensors: dict, arrays: dict):
    if isinstance(node, list):
        return [_decode(v, tensors, arrays) for v in node]
    if isinstance(node, dict):
        if len(node) == 1:
            (key, val), = node.items()
            if key == "__tensor__":
                return tensors[val]
            if key == "__ndarray__":
                return arrays[val]
            if key == "__parameter__":
                name, requires_grad = val
                return _parameter(tensors[name], bool(requires_grad))
            if key == "__grad_tensor__":
                t = tensors[val]
                return t.requires_grad_(True) if t.dtype.is_inexact else t
            if key == "__npscalar__":
                return arrays[val][()]
            if key == "__tuple__":
                return tuple(_decode(v, tensors, arrays) for v in val)
            if key == "__dict__":
                return {k: _decode(v, tensors, arrays) for k, v in val}
            if key == "__float__":
                return float(val)
            if key == "__dtype__":
                return D.BY_NAME[val]
        return {k: _decode(v, tensors, arrays) for k, v in node.items()}
    return node


def _tree_ndarrays(node, out: set) -> set:
    """The names of the numpy arrays a tree holds (they load as arrays, not as tensors)."""
    if isinstance(node, list):
        for v in node:
            _tree_ndarrays(v, out)
    elif isinstance(node, dict):
        if len(node) == 1 and ("__ndarray__" in node or "__npscalar__" in node):
            out.add(next(iter(node.values())))
        else:
            for v in node.values():
                _tree_ndarrays(v, out)
    return out


# -- the pickle ------------------------------------------------------------------------------------------------------

#: numpy dtypes whose arrays a pickle stores as safetensors entries (numbers only: never an object array's pointers)
_NP_DTYPES: dict[str, np.dtype] = {np.dtype(t).name: np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.float16,
    np.float32, np.float64, np.complex64, np.complex128)}
_NP_DTYPES["bfloat16"] = np.dtype(D.bfloat16.np)


def _np_dtype_name(dt: np.dtype) -> str | None:
    name = dt.name if dt.byteorder in ("=", "|", "<") or dt.itemsize == 1 else None
    return name if name in _NP_DTYPES and _NP_DTYPES[name] == dt else None


def _payload(arr: np.ndarray) -> np.ndarray:
    """``arr`` as a safetensors entry: itself when the format has its dtype, else its bytes (``uint8``)."""
    arr = np.asarray(arr, order="C")  # (not ascontiguousarray: it makes a 0-d array 1-d)
    name = _np_dtype_name(arr.dtype)
    if name in D.BY_NAME and _storable(D.BY_NAME[name]):
        return arr
    return arr.reshape(-1).view(np.uint8)


class _Pickler(pickle.Pickler):
    """``tw.save``'s pickler: tensors and numeric numpy arrays leave the pickle as persistent ids
    (``("tensor", key, dtype, shape, requires_grad, is_parameter)``, ``("ndarray", key, dtype, shape)``) naming
    their safetensors entries; tensorwire's modules and optimizers are stored as torch stores them (their class
    and their ``__dict__``: plain ``pickle`` refuses them, since it cannot carry their cluster tensors)."""

    def __init__(self, file, protocol: int):
        super().__init__(file, protocol, fix_imports=False)  # (Python 3's names: ``builtins.set``, as allowlisted)
        self.tensors: dict[str, Tensor] = {}
        self.arrays: dict[str, np.ndarray] = {}
        self._keys: dict[int, str] = {}  # id(object) -> key: one entry per object, shared where the object is
        param = sys.modules.get("tensorwire.nn.parameter")
        self._param = param.Parameter if param is not None else ()

    def _key(self, obj) -> tuple[str, bool]:
        key = self._keys.get(id(obj))
        if key is not None:
            return key, False
        key = self._keys[id(obj)] = str(len(self._keys))
        return key, True

    def persistent_id(self, obj):
        if isinstance(obj, Tensor):
            if obj._sparse:
                return None  # (reducer_override: its indices and values tensors)
            key, new = self._key(obj)
            if new:
                self.tensors[key] = obj
            return ("tensor", key, obj.dtype.name, list(obj._shape), bool(obj.requires_grad),
                    isinstance(obj, self._param))
        if type(obj) is np.ndarray and _np_dtype_name(obj.dtype) is not None:
            key, new = self._key(obj)
            if new:
                self.arrays[key] = obj
            return ("ndarray", key, _np_dtype_name(obj.dtype), list(obj.shape))
        return None

    def reducer_override(self, obj):
        cls = type(obj)
        if isinstance(obj, Tensor) and obj._sparse:
            return _rebuild_sparse, (str.__str__(obj._lay), obj._ind, obj._val, list(obj._shape), obj._coal)
        for mod, name in (("tensorwire.nn.module", "Module"), ("tensorwire.optim.optimizer", "Optimizer")):
            base = getattr(sys.modules.get(mod), name, None)
            if base is not None and isinstance(obj, base) and cls.__getstate__ is base.__getstate__:
                return copyreg.__newobj__, (cls,), dict(obj.__dict__)
        return NotImplemented


def _rebuild_sparse(lay: str, indices: Tensor, values: Tensor, size: list, coalesced: bool):
    """A sparse tensor from a pickle (checked as ``sparse_coo_tensor(check_invariants=True)`` checks a new one)."""
    if lay not in ("sparse_coo", "sparse_csr") or not isinstance(indices, Tensor) or not isinstance(values, Tensor):
        raise pickle.UnpicklingError(f"tw.load: a malformed sparse tensor ({lay!r})")
    t = _sparse.sparse_coo_tensor(indices, values, size, check_invariants=True)
    if coalesced or lay == "sparse_csr":
        t = t.coalesce()
    t = t.to_sparse_csr() if lay == "sparse_csr" else t
    entries = _LOADING.get()
    if entries is not None:
        entries.track(t)
    return t


# -- the allowlist ---------------------------------------------------------------------------------------------------

def _dtype_by_name(name) -> D.DType:
    """``dtypes.get`` as a ``weights_only`` load admits it: a dtype's own name, nothing else."""
    if not isinstance(name, str) or name not in D.BY_NAME:
        raise pickle.UnpicklingError(f"tw.load: not a dtype name: {name!r}")
    return D.BY_NAME[name]


def _default_globals() -> dict[str, object]:
    """What a ``weights_only`` load admits without being told: torch's default allowlist, in tensorwire's names."""
    return {"collections.OrderedDict": OrderedDict, "collections.Counter": Counter, "builtins.set": set,
            "builtins.bytearray": bytearray, "builtins.complex": complex,
            "_codecs.encode": codecs.encode,  # (bytes, in pickle protocol 2)
            "tensorwire.tensor.Size": Size, "tensorwire.tensor.device": device,
            "tensorwire.protocol.dtypes.get": _dtype_by_name,  # (how a dtype pickles: dtypes.get of its name)
            "tensorwire.serialization._rebuild_sparse": _rebuild_sparse}


_DEFAULT_GLOBALS = _default_globals()
#: the load in progress (its :class:`_Entries`), for the rebuild functions a pickle calls
_LOADING: contextvars.ContextVar = contextvars.ContextVar("tensorwire_loading", default=None)
#: the globals :func:`add_safe_globals` allowed: ``(object, "module.qualname" or None)``
_user_globals: list[tuple[object, str | None]] = []


def _global_name(obj) -> str:
    return f"{getattr(obj, '__module__', None)}.{getattr(obj, '__qualname__', getattr(obj, '__name__', obj))}"


def add_safe_globals(safe_globals: Iterable) -> None:
    """Allow these globals (classes, functions) in ``weights_only`` loads (``torch.serialization.add_safe_globals``).

    Each entry is the object, or ``(object, "module.name")`` where a pickle names it otherwise than its
    ``__module__`` and ``__qualname__`` say. Allow a class only if you trust it: a pickle may construct it with any
    arguments and set any of its attributes."""
    for g in safe_globals:
        if isinstance(g, tuple):
            if len(g) != 2 or not isinstance(g[1], str):
                raise TypeError(f"add_safe_globals: expected an object or (object, 'module.name'), got {g!r}")
            _user_globals.append((g[0], g[1]))
        else:
            _user_globals.append((g, None))


def get_safe_globals() -> list:
    """The globals :func:`add_safe_globals` allowed (each as it was given)."""
    return [obj if name is None else (obj, name) for obj, name in _user_globals]


def clear_safe_globals() -> None:
    """Forget every global :func:`add_safe_globals` allowed (the defaults stay)."""
    _user_globals.clear()


class safe_globals:  # noqa: N801 - torch's name
    """``with tw.serialization.safe_globals([MyModel]): tw.load(path)``: allow these globals inside the block only
    (``torch.serialization.safe_globals``)."""

    def __init__(self, safe_globals: Iterable):
        self.safe_globals = list(safe_globals)

    def __enter__(self):
        self._saved = list(_user_globals)
        add_safe_globals(self.safe_globals)

    def __exit__(self, *exc) -> None:
        _user_globals[:] = self._saved


def _allowed() -> dict[str, object]:
    allowed = dict(_DEFAULT_GLOBALS)
    for obj, name in _user_globals:
        allowed[name or _global_name(obj)] = obj
    return allowed


def _refusal(name: str) -> str:
    return ("Weights only load failed. This file can still be loaded, to do so you have two options, do those steps "
            "only if you trust the source of the checkpoint.\n"
            "\t(1) tw.load loads with weights_only=True by default, as torch.load does since PyTorch 2.6. Re-running "
            "tw.load with weights_only=False will likely succeed, but it can result in arbitrary code execution. Do "
            "it only if you got the file from a trusted source.\n"
            "\t(2) Alternatively, to load with weights_only=True please check the recommended steps in the following "
            "error message.\n"
            f"\tWeightsUnpickler error: Unsupported global: GLOBAL {name} was not an allowed global by default. "
            f"Please use `tw.serialization.add_safe_globals([{name}])` or the "
            f"`tw.serialization.safe_globals([{name}])` context manager to allowlist this global if you trust this "
            "class/function.")


class _Unpickler(pickle.Unpickler):
    """``tw.load``'s unpickler. With ``allowed`` (``weights_only=True``) ``find_class`` answers from that table and
    never imports: a global it lacks is an :class:`pickle.UnpicklingError`. Persistent ids become the tensors and
    arrays of the file's entries (each entry one object, however often the pickle names it)."""

    def __init__(self, file, resolve: Callable[[object], object], allowed: dict[str, object] | None, **options):
        super().__init__(file, **options)
        self._resolve = resolve
        self._allowed = allowed

    def find_class(self, module: str, name: str):
        if self._allowed is None:
            return super().find_class(module, name)
        obj = self._allowed.get(f"{module}.{name}")
        if obj is None:
            raise pickle.UnpicklingError(_refusal(f"{module}.{name}"))
        return obj

    def persistent_load(self, pid):
        return self._resolve(pid)


def _bad(msg: str) -> pickle.UnpicklingError:
    return pickle.UnpicklingError(f"tw.load: malformed checkpoint: {msg}")


_UNSET = object()


def _slot_values(t: Tensor) -> list[tuple[object, object]]:
    """``(slot descriptor, value)`` of every slot of ``t`` (read through the descriptors: a subclass's property of the
    same name, as SparseTensor's ``_id``, is not the slot)."""
    out = []
    for cls in type(t).__mro__:
        for name in cls.__dict__.get("__slots__", ()):
            d = cls.__dict__.get(name)
            if name != "__weakref__" and hasattr(d, "__set__"):
                try:
                    out.append((d, d.__get__(t, cls)))
                except AttributeError:
                    out.append((d, _UNSET))
    return out


class _Entries:
    """The persistent ids of a pickled file, resolved to its entries (uploaded once each); and the tensors the load
    made, whose state a pickle's ``BUILD`` must not change (their handles, shapes and dtypes come from the entries
    alone: :meth:`verify`)."""

    def __init__(self, arrays: dict, session, dev: str):
        self._arrays, self._s, self._dev = arrays, session, dev
        self._done: dict[str, object] = {}
        self._made: list[tuple[Tensor, list]] = []

    def track(self, t: Tensor) -> None:
        self._made.append((t, _slot_values(t)))

    def verify(self) -> None:
        """Raise :class:`pickle.UnpicklingError` if the pickle set a loaded tensor's state (each is put back first,
        so that no tensor releases a handle it does not own)."""
        bad = False
        for t, before in self._made:
            for d, v in before:
                try:
                    now = d.__get__(t, type(t))
                except AttributeError:
                    now = _UNSET
                if now is not v:
                    bad = True
                    if v is _UNSET:
                        d.__delete__(t)
                    else:
                        d.__set__(t, v)
        if bad:
            raise _bad("the pickle sets the state of a tensor (a tensor comes from its entry alone)")

    def _array(self, key, want: np.dtype, shape) -> np.ndarray:
        if not isinstance(key, str) or key not in self._arrays:
            raise _bad(f"no entry {key!r}")
        if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
            raise _bad(f"entry {key!r}: bad shape {shape!r}")
        arr = self._arrays[key]
        if arr.dtype != want:
            if arr.dtype != np.uint8 or arr.nbytes != int(np.prod(shape, dtype=np.int64)) * want.itemsize:
                raise _bad(f"entry {key!r} does not hold a {want} array of shape {shape}")
            arr = arr.view(want)
        if arr.size != int(np.prod(shape, dtype=np.int64)):
            raise _bad(f"entry {key!r} does not hold {shape}")
        return np.array(arr, copy=True, order="C").reshape(shape)

    def __call__(self, pid):
        if not isinstance(pid, tuple) or len(pid) < 2 or pid[0] not in ("tensor", "ndarray") or not isinstance(
                pid[1], str):
            raise _bad(f"unknown persistent id {pid!r}")
        if pid[0] == "tensor" and len(pid) == 6:
            _, key, dname, shape, requires_grad, is_param = pid
            if dname not in D.BY_NAME:
                raise _bad(f"unknown dtype {dname!r}")
            dt = D.BY_NAME[dname]
            hit = self._done.get(key)
            if hit is None:
                a = self._array(key, np.dtype(dt.np), shape)
                hit = self._s.const(a, self._dev, dt)
                if is_param is True:
                    hit = _parameter(hit, bool(requires_grad))
                elif requires_grad is True and dt.is_inexact:
                    hit.requires_grad_(True)
                self._done[key] = hit
                self.track(hit)
            return hit
        if pid[0] == "ndarray" and len(pid) == 4:
            _, key, dname, shape = pid
            if dname not in _NP_DTYPES:
                raise _bad(f"unknown numpy dtype {dname!r}")
            hit = self._done.get(key)
            if hit is None:
                hit = self._done[key] = self._array(key, _NP_DTYPES[dname], shape)
            return hit
        raise _bad(f"unknown persistent id {pid!r}")


# -- save / load -----------------------------------------------------------------------------------------------------

def save(obj, f, pickle_module=pickle, pickle_protocol: int = DEFAULT_PROTOCOL,
         _use_new_zipfile_serialization: bool = True, _disable_byteorder_record: bool = False, *,
         metadata: dict | None = None) -> None:
    """Write ``obj`` to ``f`` (a path or a binary file object), as ``torch.save`` does, in the safetensors format.

    A tensor, a state dict, an optimizer state dict, nested dicts/lists/tuples of tensors, numpy arrays and plain
    values are written as a tree (no pickle; see the module's documentation). Anything else (a whole module, an
    optimizer, objects of your classes) is pickled with ``pickle_protocol``; its tensors are stored as entries of
    their own, never in the pickle. Tensor values are fetched from the cluster in one batch and written bit-exactly.
    ``metadata``: strings added to the header's ``__metadata__``. Accepted as torch's and ignored: ``pickle_module``
    (the pickler is ``pickle``'s), ``_use_new_zipfile_serialization`` and ``_disable_byteorder_record`` (the file is
    always safetensors, whose byte order is fixed: little-endian)."""
    tensors: dict = {}
    try:
        tree = _encode(obj, "", tensors)
    except _NeedsPickle:
        tree = None
    meta = {"format": "pt"}
    if metadata:
        meta.update({str(k): str(v) for k, v in metadata.items()})
    if tree is not None:
        flags = _tree_has_flags(tree)
        flat = not flags and isinstance(obj, dict) and all(isinstance(k, str) for k in obj) and all(
            isinstance(v, Tensor) for v in obj.values())
        if not flat:
            version = TREE_FLAGS_VERSION if flags else FORMAT_VERSION
            meta[META_KEY] = json.dumps({"version": version, "tree": tree}, separators=(",", ":"))
        arrays = _fetch(tensors)
    else:
        buf = io.BytesIO()
        p = _Pickler(buf, pickle_protocol)
        p.dump(obj)
        arrays = _fetch({**p.tensors, **p.arrays})
        arrays = {k: _payload(v) for k, v in arrays.items()}
        arrays[PICKLE_ENTRY] = np.frombuffer(buf.getbuffer(), np.uint8)
        meta[META_KEY] = json.dumps({"version": PICKLE_VERSION, "pickle": PICKLE_ENTRY}, separators=(",", ":"))
    data = save_bytes(arrays, meta)
    if hasattr(f, "write"):
        f.write(data)
        return
    tmp = f"{os.fspath(f)}.tmp-{os.getpid()}"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, f)


def _fetch(entries: dict) -> dict[str, np.ndarray]:
    """The values of ``entries`` (tensors fetched from the cluster in one round trip per session; arrays as they
    are)."""
    live = [t for t in entries.values() if isinstance(t, Tensor)]
    if live:
        _prefetch(live)
    return {k: (_value(v) if isinstance(v, Tensor) else np.asarray(v)) for k, v in entries.items()}


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


def _check_format(path) -> None:
    """A clear error for a PyTorch checkpoint (a zip archive, or torch's legacy pickle file), which no safetensors
    file can start like (its first 8 bytes would be a header length out of bounds)."""
    with open(path, "rb") as fh:
        head = fh.read(8)
    if len(head) == 8 and struct.unpack("<Q", head)[0] > MAX_HEADER and (
            head[:4] == b"PK\x03\x04" or head[:4] == b"\x80\x02\x8a\x0a"):
        raise ProtocolError(f"{os.fspath(path)!s} is a PyTorch checkpoint (torch.save's zip or legacy format): "
                            "tw.load reads the files tw.save writes (safetensors). Convert a state dict once where "
                            "PyTorch is installed: safetensors.torch.save_file(torch.load(path), 'model.safetensors')")


def load(f, map_location=None, pickle_module=None, *, weights_only: bool | None = None, mmap: bool | None = None,
         device=None, session=None, **pickle_load_args):
    """Read a file written by :func:`save` (or any safetensors file); its tensors are uploaded to ``device``
    (``map_location``, torch's name, when it is a device). A plain safetensors file gives ``{name: tensor}``.

    A pickled object (see :func:`save`) is unpickled with ``weights_only=True`` unless told otherwise (``None``
    means ``True``, as in torch): only allowlisted globals are admitted (:func:`add_safe_globals`,
    :class:`safe_globals`), anything else raises :class:`pickle.UnpicklingError` naming it. ``weights_only=False``
    admits anything: the pickle may then run any code, so use it only for files from a source you trust. ``mmap``
    changes nothing (the file is read once and its tensors uploaded); ``pickle_module`` may not be given with
    ``weights_only=True`` (as torch); ``pickle_load_args`` (``encoding=``...) go to the unpickler."""
    if weights_only is None:
        weights_only = True
    if weights_only and pickle_module is not None:
        raise RuntimeError("Can not safely load weights when explicit pickle_module is specified")
    if device is None and map_location is not None and not callable(map_location) and not isinstance(
            map_location, dict):
        device = map_location
    s, dev = _ctx(device, session)
    path = f
    if hasattr(f, "read"):
        with tempfile.NamedTemporaryFile(suffix=".safetensors", delete=False) as tmp:
            tmp.write(f.read())
            path = tmp.name
    try:
        _check_format(path)
        arrays = load_file(path)
        meta = metadata_of(path)
        spec = meta.get(META_KEY)
        spec = json.loads(spec) if spec is not None else None
        if spec is not None and (not isinstance(spec, dict) or spec.get("version") not in (
                FORMAT_VERSION, PICKLE_VERSION, TREE_FLAGS_VERSION)):
            raise ValueError("unsupported tensorwire checkpoint metadata version: "
                             f"{spec.get('version') if isinstance(spec, dict) else spec!r}")
        if spec is not None and spec["version"] == PICKLE_VERSION:
            entry = spec.get("pickle")
            if not isinstance(entry, str) or entry not in arrays or arrays[entry].dtype != np.uint8:
                raise _bad("the pickle entry is missing")
            data = np.array(arrays[entry], copy=True).tobytes()
            entries = _Entries({k: v for k, v in arrays.items() if k != entry}, s, dev)
            token = _LOADING.set(entries)
            try:
                obj = _Unpickler(io.BytesIO(data), entries, _allowed() if weights_only else None,
                                 **pickle_load_args).load()
            finally:
                _LOADING.reset(token)
            entries.verify()
            return obj
        keep = _tree_ndarrays(spec["tree"], set()) if spec is not None else set()
        tensors, nd = {}, {}
        for name, arr in arrays.items():
            a = np.array(arr, copy=True, order="C")
            if name in keep:
                nd[name] = a
            else:
                tensors[name] = s.const(a, dev, D.from_numpy(a.dtype) if a.dtype != D.bfloat16.np else D.bfloat16)
    finally:
        if path is not f:
            os.unlink(path)
    if spec is None:
        return tensors
    return _decode(spec["tree"], tensors, nd)
