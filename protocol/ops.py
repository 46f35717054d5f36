"""The op table: every op defined once.

Each :class:`OpDef` gives the op's name, how many inputs it takes, its shape and dtype inference
(``infer``), and either nothing (a *primitive*, which every backend must implement) or a
decomposition into other ops (a *composite*, which runs through its decomposition unless a backend
registers a native kernel for it). The client, the dispatcher, the workers and autograd all read
this table; nobody else derives shapes.

Attributes are plain msgpack values (ints, floats, bools, strings, lists). Dtypes travel by name.
A decomposition is written against a :class:`~tensorwire.protocol.graph.Builder`: ``g.op(name,
*inputs, **attrs)`` records an op and returns a value with ``.shape`` and ``.dtype``.

Plugins add ops with :func:`register_op` (the ``tensorwire_ops`` hook calls it).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from . import dtypes as D
from .errors import DTypeError, ProtocolError, ShapeError
from .progress import valid_id as valid_progress_id
from .shapes import (
    Shape,
    broadcast,
    broadcast_many,
    check_shape,
    infer_reshape,
    norm_dim,
    norm_dims,
    numel,
    reduced,
    slice_len,
)

Meta = tuple[Shape, D.DType]
InferFn = Callable[[list[Meta], dict], Meta]


@dataclass
class OpDef:
    """One op: name, arity, attributes, inference and (for composites) decomposition."""

    name: str
    nin: int | None  # None: variadic (at least one)
    infer: InferFn
    decompose: Callable | None = None  # (g, *inputs: Value, attrs: dict) -> Value
    kind: str = "other"  # unary | binary | reduce | movement | creation | random | index | worker | other
    differentiable: bool = True
    doc: str = ""
    attrs: tuple[str, ...] = ()
    dynamic: tuple[str, ...] = ()  # attrs that may change between replays of one plan (values, seeds)
    extra: dict = field(default_factory=dict)

    @property
    def primitive(self) -> bool:
        return self.decompose is None


OPS: dict[str, OpDef] = {}


def register_op(op: OpDef, *, replace: bool = False) -> OpDef:
    """Add an op to the table (plugins: custom ops with their shape rule and decomposition)."""
    if op.name in OPS and not replace:
        raise ValueError(f"op {op.name!r} is already defined")
    OPS[op.name] = op
    return op


def get_op(name) -> OpDef:
    try:
        return OPS[name]
    except (KeyError, TypeError):
        raise ProtocolError(f"unknown op {name!r}") from None


_INFER_CACHE: dict = {}


def infer(name: str, metas: list[Meta], attrs: dict, attrs_key=None) -> Meta:
    """Shape and dtype of ``name`` applied to inputs with ``metas``; raises ShapeError/DTypeError.

    Results are memoised for ops without attributes, and for ops without dynamic attributes when the caller
    passes ``attrs_key``, the hashable form of ``attrs`` (:func:`tensorwire.protocol.graph.attrs_key`): recording
    ``x + y`` or ``x.reshape(...)`` in a loop infers once.
    """
    if not attrs:
        key = (name, D._default_float, *metas)  # results may depend on the default float dtype
    elif attrs_key is not None and not get_op(name).dynamic:
        key = (name, D._default_float, attrs_key, *metas)
    else:
        return _infer(name, metas, attrs)
    try:
        r = _INFER_CACHE.get(key)
    except TypeError:  # unhashable junk from a peer: validate the slow way
        r = key = None
    if r is not None:
        return r
    r = _infer(name, metas, attrs or {})
    if key is not None:
        if len(_INFER_CACHE) > 65536:
            _INFER_CACHE.clear()
        _INFER_CACHE[key] = r
    return r


def _infer(name: str, metas: list[Meta], attrs: dict) -> Meta:
    op = get_op(name)
    if op.nin is not None and len(metas) != op.nin:
        raise ProtocolError(f"op {name} takes {op.nin} inputs, got {len(metas)}")
    if op.nin is None and not metas:
        raise ProtocolError(f"op {name} needs at least one input")
    return op.infer(metas, attrs)


# ----------------------------------------------------------------------------------------------
# attribute readers (attributes may come from a hostile peer: check types)

def a_int(attrs: dict, key: str, default=None) -> int:
    v = attrs.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ProtocolError(f"attribute {key!r} must be an int, got {v!r}")
    return v


def a_ints(attrs: dict, key: str, default=None) -> tuple[int, ...]:
    v = attrs.get(key, default)
    if not isinstance(v, (list, tuple)) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise ProtocolError(f"attribute {key!r} must be a list of ints, got {v!r}")
    if len(v) > 64:
        raise ProtocolError(f"attribute {key!r} is too long")
    return tuple(v)


def a_num(attrs: dict, key: str, default=None):
    v = attrs.get(key, default)
    if not isinstance(v, (int, float, bool)):
        raise ProtocolError(f"attribute {key!r} must be a number, got {v!r}")
    return v


def a_bool(attrs: dict, key: str, default=False) -> bool:
    v = attrs.get(key, default)
    if not isinstance(v, bool):
        raise ProtocolError(f"attribute {key!r} must be a bool, got {v!r}")
    return v


def a_dtype(attrs: dict, key: str = "dtype", default=None) -> D.DType:
    v = attrs.get(key, default)
    if isinstance(v, D.DType):
        return v
    if not isinstance(v, str) or v not in D.BY_NAME:
        raise ProtocolError(f"attribute {key!r} must be a dtype name, got {v!r}")
    return D.BY_NAME[v]


def a_dims(attrs: dict, ndim: int, key: str = "dims") -> tuple[int, ...]:
    v = attrs.get(key)
    if v is None:
        return tuple(range(ndim))
    return norm_dims(a_ints(attrs, key) if isinstance(v, (list, tuple)) else a_int(attrs, key), ndim)


# ----------------------------------------------------------------------------------------------
# creation

def _creation_infer(metas, attrs):
    return check_shape(a_ints(attrs, "shape")), a_dtype(attrs)


register_op(OpDef("const", 0, _creation_infer, kind="worker", differentiable=False,
                  attrs=("shape", "dtype", "frame"), dynamic=("frame",),
                  doc="A tensor whose bytes ride in buffer frame `frame` of the message."))
register_op(OpDef("full", 0, lambda m, a: (a_num(a, "value"), _creation_infer(m, a))[1], kind="creation",
                  differentiable=False, attrs=("shape", "dtype", "value"), dynamic=("value",),
                  doc="A tensor filled with `value`."))


def _hub_tensor_infer(metas, attrs):
    for k in ("repo", "commit", "path", "name"):
        if not isinstance(attrs.get(k), str):
            raise ProtocolError(f"attribute {k!r} must be a string")
    for k in ("endpoint", "token"):  # optional: the worker downloads from the cluster's hub only
        if attrs.get(k) is not None and not isinstance(attrs[k], str):
            raise ProtocolError(f"attribute {k!r} must be a string")
    if attrs.get("progress") is not None and not valid_progress_id(attrs["progress"]):
        raise ProtocolError("attribute 'progress' must be a positive int (the client's id for the load)")
    return _creation_infer(metas, attrs)


register_op(OpDef("hub_tensor", 0, _hub_tensor_infer, kind="worker", differentiable=False,
                  attrs=("endpoint", "repo", "commit", "path", "name", "shape", "dtype", "token", "progress"),
                  doc="Tensor `name` of safetensors file `path` at `commit` of hub repository `repo`: the worker "
                      "downloads the file from the cluster's hub itself (cached by sha256 on its host, hash verified) "
                      "and loads the tensor into device memory; the bytes never pass through the client. "
                      "`endpoint`, when given, must be the cluster's hub (workers fetch from no other); `token` is "
                      "the client's hub token; `progress`, when given, the client's id for the load: the worker "
                      "reports the download's progress to the session under it (protocol/progress.py)."))


COLLECTIVES = ("all_reduce", "broadcast", "all_gather", "reduce_scatter")
REDUCE_OPS = ("sum", "mean", "max", "min", "prod")


def split_sizes(n: int, parts: int) -> list[int]:
    """How ``reduce_scatter`` splits dim 0 of size ``n`` across ``parts`` devices (torch.tensor_split)."""
    q, r = divmod(n, parts)
    return [q + 1] * r + [q] * (parts - r)


def _collective_infer(metas, attrs):
    (s, d), = metas
    kind = attrs.get("kind")
    if kind not in COLLECTIVES:
        raise ProtocolError(f"unknown collective {kind!r}; known: {', '.join(COLLECTIVES)}")
    n, rank = a_int(attrs, "n"), a_int(attrs, "rank")
    a_int(attrs, "key")
    if not 1 <= n <= 4096 or not 0 <= rank < n:
        raise ProtocolError(f"collective rank {rank} / size {n} out of range")
    if kind in ("all_reduce", "reduce_scatter") and attrs.get("op") not in REDUCE_OPS:
        raise ProtocolError(f"reduction {attrs.get('op')!r} unknown; known: {', '.join(REDUCE_OPS)}")
    if kind == "all_gather":
        return check_shape((n,) + s), d
    if kind == "reduce_scatter":
        if not s:
            raise ShapeError("reduce_scatter needs at least one dimension to scatter along")
        return (split_sizes(s[0], n)[rank],) + s[1:], d
    if kind == "broadcast":
        a_int(attrs, "src")
    return s, d


register_op(OpDef("collective", 1, _collective_infer, kind="worker", differentiable=False,
                  attrs=("kind", "op", "n", "rank", "key", "src"), dynamic=("key",),
                  doc="This device's part of a collective across n devices (all_reduce, broadcast, all_gather, "
                      "reduce_scatter); the collectives service moves the data between the workers' buffers "
                      "with MPI, never through the dispatcher. `key` pairs the parts of one collective."))


def _arange_infer(metas, attrs):
    a_num(attrs, "start")
    a_num(attrs, "step")
    return check_shape((a_int(attrs, "n"),)), a_dtype(attrs)


register_op(OpDef("arange", 0, _arange_infer, kind="creation", differentiable=False,
                  attrs=("start", "step", "n", "dtype"),
                  doc="out[i] = start + i * step, computed in float64 (int64 for integer dtypes) then cast."))


def _random_infer(metas, attrs):
    a_int(attrs, "seed")
    a_int(attrs, "offset")
    return _creation_infer(metas, attrs)


def _randint_infer(metas, attrs):
    low, high = a_int(attrs, "low"), a_int(attrs, "high")
    if low >= high:
        raise ProtocolError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
    return _random_infer(metas, attrs)


for _name, _doc in (("rand", "Uniform [0, 1) from the counter-based generator (see backends/random.py)."),
                    ("randn", "Standard normal from the counter-based generator (Box-Muller)."),
                    ("randint", "Integers in [low, high) from the counter-based generator.")):
    register_op(OpDef(_name, 0, _randint_infer if _name == "randint" else _random_infer, kind="random",
                      differentiable=False,
                      attrs=("shape", "dtype", "seed", "offset") + (("low", "high") if _name == "randint" else ()),
                      dynamic=("seed", "offset"),
                      doc=_doc))

# ----------------------------------------------------------------------------------------------
# elementwise

FLOAT_UNARY = ("exp", "log", "log1p", "expm1", "sqrt", "sin", "cos", "tan", "tanh", "erf", "reciprocal",
               "asin", "acos", "atan", "sinh", "cosh")
SAME_UNARY = ("neg", "abs", "sign", "floor", "ceil", "round", "trunc")
BOOL_UNARY = ("isnan", "isinf")


def _unary_float(metas, attrs):
    (s, d), = metas
    return s, D.float_of(d)


def _unary_same(metas, attrs):
    (s, d), = metas
    return s, d


def _unary_bool(metas, attrs):
    return metas[0][0], D.bool_


def _bitwise_not(metas, attrs):
    (s, d), = metas
    if d.is_floating_point:
        raise DTypeError(f"bitwise_not is only supported for integer and bool tensors, got {d}")
    return s, d


for _n in FLOAT_UNARY:
    register_op(OpDef(_n, 1, _unary_float, kind="unary"))
def _neg_infer(metas, attrs):
    (s, d), = metas
    if d is D.bool_:
        raise DTypeError("Negation, the `-` operator, on a bool tensor is not supported. If you are trying to "
                         "invert a mask, use the `~` or `logical_not()` operator instead.")
    return s, d


for _n in SAME_UNARY:
    register_op(OpDef(_n, 1, _neg_infer if _n == "neg" else _unary_same, kind="unary",
                      differentiable=_n in ("neg", "abs")))
for _n in BOOL_UNARY:
    register_op(OpDef(_n, 1, _unary_bool, kind="unary", differentiable=False))
register_op(OpDef("logical_not", 1, _unary_bool, kind="unary", differentiable=False))
register_op(OpDef("bitwise_not", 1, _bitwise_not, kind="unary", differentiable=False))


def binary_dtype(metas: list[Meta]) -> D.DType:
    """The common dtype of a binary op's inputs (PyTorch's result_type over (dtype, ndim))."""
    if len(metas) == 2:
        (sa, da), (sb, db) = metas
        if da is db:
            return da
        return D.result_type((da, len(sa)), (db, len(sb)))
    return D.result_type(*((d, len(s)) for s, d in metas))


def _binary_same(metas, attrs):
    return broadcast(metas[0][0], metas[1][0]), binary_dtype(metas)


def _binary_float(metas, attrs):
    return broadcast(metas[0][0], metas[1][0]), D.float_of(binary_dtype(metas))


def _binary_bool(metas, attrs):
    broadcast(metas[0][0], metas[1][0])
    return broadcast(metas[0][0], metas[1][0]), D.bool_


def _binary_int(name):
    def f(metas, attrs):
        d = binary_dtype(metas)
        if d.is_floating_point:
            raise DTypeError(f"{name} is only supported for integer and bool tensors, got {d}")
        return broadcast(metas[0][0], metas[1][0]), d
    return f


def _sub_infer(metas, attrs):
    out = _binary_same(metas, attrs)
    if out[1] is D.bool_:
        raise DTypeError("Subtraction, the `-` operator, with two bool tensors is not supported. "
                         "Use the `^` or `logical_xor()` operator instead.")
    return out


for _n in ("add", "sub", "mul", "maximum", "minimum", "floor_divide", "remainder"):
    register_op(OpDef(_n, 2, _sub_infer if _n == "sub" else _binary_same, kind="binary",
                      differentiable=_n not in ("floor_divide",)))


def _pow_infer(metas, attrs):
    return _binary_same(metas, attrs)


register_op(OpDef("pow", 2, _pow_infer, kind="binary"))
register_op(OpDef("div", 2, _binary_float, kind="binary", doc="True division (ints give floats)."))
register_op(OpDef("atan2", 2, _binary_float, kind="binary"))
for _n in ("eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor"):
    register_op(OpDef(_n, 2, _binary_bool, kind="binary", differentiable=False))
for _n in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    register_op(OpDef(_n, 2, _binary_int(_n), kind="binary", differentiable=False))


def _where_infer(metas, attrs):
    (sc, dc), (sa, da), (sb, db) = metas
    return broadcast_many(sc, sa, sb), binary_dtype([(sa, da), (sb, db)])


register_op(OpDef("where", 3, _where_infer, kind="other",
                  doc="where(cond, a, b): a where cond is true, else b (cond is read as bool)."))


def _cast_infer(metas, attrs):
    return metas[0][0], a_dtype(attrs)


register_op(OpDef("cast", 1, _cast_infer, kind="unary", attrs=("dtype",),
                  doc="Convert to `dtype` (float to int truncates toward zero, as torch)."))

# ----------------------------------------------------------------------------------------------
# reductions


def _reduce_infer(kind):
    def f(metas, attrs):
        (s, d), = metas
        dims = a_dims(attrs, len(s))
        keep = a_bool(attrs, "keepdim")
        if kind == "sum":
            out = a_dtype(attrs) if attrs.get("dtype") is not None else (
                D.int64 if d.category < 2 else d)
        elif kind in ("all", "any"):
            out = D.bool_
        else:
            out = d
            if kind in ("amax", "amin") and any(s[i] == 0 for i in dims if i < len(s)):
                raise ShapeError(f"{kind}(): expected reduction dim to have non-zero size")
        return reduced(s, dims, keep), out
    return f


for _n in ("sum", "prod", "amax", "amin"):
    register_op(OpDef(_n, 1, _reduce_infer("sum" if _n in ("sum", "prod") else _n), kind="reduce",
                      attrs=("dims", "keepdim") + (("dtype",) if _n in ("sum", "prod") else ())))


def _arg_infer(metas, attrs):
    (s, d), = metas
    keep = a_bool(attrs, "keepdim")
    if attrs.get("dim") is None:
        if numel(s) == 0:
            raise ShapeError("argmax/argmin of an empty tensor")
        return ((1,) * len(s) if keep else ()), D.int64
    dim = norm_dim(a_int(attrs, "dim"), len(s))
    if s and s[dim] == 0:
        raise ShapeError("argmax/argmin: expected reduction dim to have non-zero size")
    return reduced(s, (dim,) if s else (), keep), D.int64


for _n in ("argmax", "argmin"):
    register_op(OpDef(_n, 1, _arg_infer, kind="reduce", differentiable=False, attrs=("dim", "keepdim")))


def _argsort_infer(metas, attrs):
    (s, d), = metas
    if s:
        norm_dim(a_int(attrs, "dim"), len(s))
    a_bool(attrs, "descending")
    return s, D.int64


register_op(OpDef("argsort", 1, _argsort_infer, kind="index", differentiable=False, attrs=("dim", "descending"),
                  doc="The indices that sort ``x`` along ``dim``: stable (equal elements keep their order), NaN "
                      "last when ascending and first when descending, as torch.sort(stable=True)."))


def _scan_infer(metas, attrs):
    (s, d), = metas
    norm_dim(a_int(attrs, "dim"), len(s))
    out = a_dtype(attrs) if attrs.get("dtype") is not None else (D.int64 if d.category < 2 else d)
    return s, out


for _n in ("cumsum", "cumprod"):
    register_op(OpDef(_n, 1, _scan_infer, kind="reduce", attrs=("dim", "dtype")))

# ----------------------------------------------------------------------------------------------
# movement


def _reshape_infer(metas, attrs):
    (s, d), = metas
    return infer_reshape(s, a_ints(attrs, "shape")), d


def _permute_infer(metas, attrs):
    (s, d), = metas
    dims = a_ints(attrs, "dims")
    if len(dims) != len(s):
        raise ShapeError(f"permute(sparse_coo): number of dimensions in the tensor input does not match "
                         f"the length of the desired ordering of dimensions i.e. input.dim() = {len(s)} "
                         f"is not equal to len(dims) = {len(dims)}")
    nd = tuple(norm_dim(x, len(s)) for x in dims)
    if len(set(nd)) != len(nd):
        raise ShapeError(f"permute(): duplicate dims are not allowed in {list(dims)}")
    return tuple(s[i] for i in nd), d


def _expand_infer(metas, attrs):
    (s, d), = metas
    target = a_ints(attrs, "shape")
    if len(target) < len(s):
        raise ShapeError(f"expand: the number of sizes provided ({len(target)}) must be greater or equal "
                         f"to the number of dimensions in the tensor ({len(s)})")
    pad = (1,) * (len(target) - len(s)) + s
    out = []
    for i, (have, want) in enumerate(zip(pad, target)):
        if want == -1:
            if i < len(target) - len(s):
                raise ShapeError("expand: -1 is not allowed in a leading, non-existing dimension")
            want = have
        if have != want and have != 1:
            raise ShapeError(f"The expanded size of the tensor ({want}) must match the existing size ({have}) "
                             f"at non-singleton dimension {i}.  Target sizes: {list(target)}.  "
                             f"Tensor sizes: {list(s)}")
        out.append(want)
    return check_shape(out), d


def _slice_infer(metas, attrs):
    (s, d), = metas
    starts, stops, steps = a_ints(attrs, "starts"), a_ints(attrs, "stops"), a_ints(attrs, "steps")
    if not len(starts) == len(stops) == len(steps) == len(s):
        raise ShapeError("slice: starts, stops and steps need one entry per dimension")
    out = []
    for n, a, b, st in zip(s, starts, stops, steps):
        if not (0 <= a <= n and 0 <= b <= n):
            raise ShapeError(f"slice bounds [{a}:{b}] out of range for size {n}")
        out.append(slice_len(a, b, st))
    return tuple(out), d


def _flip_infer(metas, attrs):
    (s, d), = metas
    a_dims(attrs, len(s))
    return s, d


def _pad_infer(metas, attrs):
    (s, d), = metas
    pads = a_ints(attrs, "pads")  # [lo0, hi0, lo1, hi1, ...] for every dim, in dim order
    a_num(attrs, "value", 0)
    if len(pads) != 2 * len(s):
        raise ShapeError("pad: need a (low, high) pair for every dimension")
    out = []
    for i, n in enumerate(s):
        m = n + pads[2 * i] + pads[2 * i + 1]
        if m < 0:
            raise ShapeError(f"pad: resulting size of dim {i} would be negative")
        out.append(m)
    return check_shape(out), d


def _cat_infer(metas, attrs):
    s0, _ = metas[0]
    dim = norm_dim(a_int(attrs, "dim"), len(s0))
    dt = metas[0][1]
    total = 0
    for s, d in metas:
        if len(s) != len(s0) or any(a != b for i, (a, b) in enumerate(zip(s, s0)) if i != dim):
            raise ShapeError(f"cat: sizes of tensors must match except in dimension {dim}; "
                             f"got {list(s0)} and {list(s)}")
        total += s[dim]
        dt = D.promote_types(dt, d)
    return check_shape(s0[:dim] + (total,) + s0[dim + 1:]), dt


register_op(OpDef("reshape", 1, _reshape_infer, kind="movement", attrs=("shape",)))
register_op(OpDef("permute", 1, _permute_infer, kind="movement", attrs=("dims",)))
register_op(OpDef("expand", 1, _expand_infer, kind="movement", attrs=("shape",)))
register_op(OpDef("slice", 1, _slice_infer, kind="movement", attrs=("starts", "stops", "steps"),
                  doc="Strided slice with positive steps; bounds already clamped to [0, size]."))
register_op(OpDef("flip", 1, _flip_infer, kind="movement", attrs=("dims",)))
register_op(OpDef("pad", 1, _pad_infer, kind="movement", attrs=("pads", "value"),
                  doc="Constant padding; pads = [low0, high0, low1, high1, ...] (negative crops)."))
register_op(OpDef("cat", None, _cat_infer, kind="movement", attrs=("dim",)))


def _copy_infer(metas, attrs):
    return metas[0]


register_op(OpDef("copy", 1, _copy_infer, kind="movement",
                  doc="A fresh copy; across devices (the node's device differs from its input's) it is "
                      "the transfer that `.to(device)` records."))

# ----------------------------------------------------------------------------------------------
# indexing


def _index_dtype(d: D.DType, what: str):
    if d not in (D.int64, D.int32, D.int16, D.int8, D.uint8):
        raise DTypeError(f"{what}: index tensor must be an integer tensor, got {d}")


def _gather_infer(metas, attrs):
    (s, d), (si, di) = metas
    _index_dtype(di, "gather")
    dim = norm_dim(a_int(attrs, "dim"), len(s))
    if len(si) != len(s):
        raise ShapeError("gather(): index tensor must have the same number of dimensions as input tensor")
    for i, (a, b) in enumerate(zip(s, si)):
        if i != dim and b > a:
            raise ShapeError(f"gather(): size of index {list(si)} does not fit input {list(s)} at dim {i}")
    return si, d


def _scatter_infer(metas, attrs):
    (s, d), (si, di), (ss, ds) = metas
    _index_dtype(di, "scatter")
    dim = norm_dim(a_int(attrs, "dim"), len(s))
    if not (len(si) == len(s) == len(ss)):
        raise ShapeError("scatter(): index, src and self must have the same number of dimensions")
    for i in range(len(s)):
        if si[i] > ss[i] or (i != dim and si[i] > s[i]):
            raise ShapeError(f"scatter(): index {list(si)} does not fit src {list(ss)} / self {list(s)}")
    return s, d


def _index_infer(metas, attrs):
    (s, d), *idx = metas
    dim = a_int(attrs, "dim")
    if not idx:
        raise ShapeError("index needs at least one index tensor")
    if not 0 <= dim or dim + len(idx) > len(s):
        raise ShapeError(f"too many indices for tensor of dimension {len(s)}")
    for _, di in idx:
        _index_dtype(di, "index")
    b = broadcast_many(*(si for si, _ in idx))
    return check_shape(s[:dim] + b + s[dim + len(idx):]), d


def _index_put_infer(metas, attrs):
    (s, d), (sv, dv), *idx = metas
    a_bool(attrs, "accumulate")
    target, _ = _index_infer([(s, d), *idx], attrs)
    if broadcast(target, sv) != target:
        raise ShapeError(f"shape mismatch: value tensor of shape {list(sv)} cannot be broadcast to "
                         f"indexing result of shape {list(target)}")
    return s, d


def _setslice_infer(metas, attrs):
    (s, d), (sv, dv) = metas
    out, _ = _slice_infer([(s, d)], attrs)
    if broadcast(out, sv) != out:
        raise ShapeError(f"shape mismatch: value tensor of shape {list(sv)} cannot be broadcast to "
                         f"indexing result of shape {list(out)}")
    return s, d


register_op(OpDef("gather", 2, _gather_infer, kind="index", attrs=("dim",)))
register_op(OpDef("scatter", 3, _scatter_infer, kind="index", attrs=("dim",),
                  doc="out = self with out[index[i]][j] = src[i][j] along dim (torch.scatter)."))
register_op(OpDef("scatter_add", 3, _scatter_infer, kind="index", attrs=("dim",)))
register_op(OpDef("index", None, _index_infer, kind="index", attrs=("dim",),
                  doc="Advanced indexing: x[:, ..., i1, ..., ik] with the k index tensors (broadcast together) "
                      "on consecutive dims starting at `dim`, numpy semantics; negative indices count from "
                      "the end; out-of-range raises IndexError."))
register_op(OpDef("index_put", None, _index_put_infer, kind="index", attrs=("dim", "accumulate"),
                  doc="index_put(x, value, *indices): x with x[..., i1, ..., ik, ...] = value (+= if accumulate)."))
register_op(OpDef("setslice", 2, _setslice_infer, kind="index", attrs=("starts", "stops", "steps"),
                  doc="out = x with x[slices] = value (value broadcast to the slice)."))

# ----------------------------------------------------------------------------------------------
# matmul


def _matmul_infer(metas, attrs):
    (sa, da), (sb, db) = metas
    if not sa or not sb:
        raise ShapeError("both arguments to matmul need to be at least 1D, but they are "
                         f"{len(sa)}D and {len(sb)}D")
    if da is not db:
        raise DTypeError(f"expected m1 and m2 to have the same dtype, but got: {da.name} != {db.name}")
    a2 = (1,) + sa if len(sa) == 1 else sa
    b2 = sb + (1,) if len(sb) == 1 else sb
    if a2[-1] != b2[-2]:
        raise ShapeError(f"mat1 and mat2 shapes cannot be multiplied ({a2[-2]}x{a2[-1]} and {b2[-2]}x{b2[-1]})")
    batch = broadcast(a2[:-2], b2[:-2])
    out = batch + (a2[-2], b2[-1])
    if len(sa) == 1:
        out = out[:-2] + out[-1:]
    if len(sb) == 1:
        out = out[:-1]
    return out, da


register_op(OpDef("matmul", 2, _matmul_infer, kind="other",
                  doc="torch.matmul: batched with broadcasting; 1-D operands as torch."))

# ----------------------------------------------------------------------------------------------
# composites: each written once, in terms of other ops


def _same_float(metas, attrs):
    return _unary_float(metas, attrs)


def composite(name: str, nin, infer_fn: InferFn, attrs: tuple[str, ...] = (), kind: str = "other",
              differentiable: bool = True, doc: str = ""):
    """Decorator registering a composite op whose decomposition is the decorated function."""
    def deco(fn):
        register_op(OpDef(name, nin, infer_fn, decompose=fn, kind=kind, differentiable=differentiable,
                          doc=doc or (fn.__doc__ or "").strip(), attrs=attrs))
        return fn
    return deco


def _scalar(g, v, dtype):
    return g.op("full", shape=[], dtype=dtype.name, value=v)


@composite("relu", 1, _unary_same, kind="unary")
def _relu(g, x, attrs):
    """max(x, 0)."""
    return g.op("maximum", x, _scalar(g, 0, x.dtype))


@composite("sigmoid", 1, _unary_float, kind="unary")
def _sigmoid(g, x, attrs):
    """1 / (1 + exp(-x))."""
    x = _to_float(g, x)
    return g.op("reciprocal", g.op("add", g.op("exp", g.op("neg", x)), _scalar(g, 1, x.dtype)))


def _to_float(g, x):
    fd = D.float_of(x.dtype)
    return x if x.dtype is fd else g.op("cast", x, dtype=fd.name)


@composite("square", 1, lambda m, a: (m[0][0], D.int64 if m[0][1] is D.bool_ else m[0][1]), kind="unary")
def _square(g, x, attrs):
    """x * x (bool as int64, as torch)."""
    if x.dtype is D.bool_:
        x = g.op("cast", x, dtype="int64")
    return g.op("mul", x, x)


@composite("rsqrt", 1, _unary_float, kind="unary")
def _rsqrt(g, x, attrs):
    """1 / sqrt(x)."""
    return g.op("reciprocal", g.op("sqrt", x))


@composite("exp2", 1, _unary_float, kind="unary")
def _exp2(g, x, attrs):
    """2 ** x."""
    x = _to_float(g, x)
    return g.op("exp", g.op("mul", x, _scalar(g, math.log(2.0), x.dtype)))


@composite("log2", 1, _unary_float, kind="unary")
def _log2(g, x, attrs):
    """log(x) / log(2)."""
    y = g.op("log", x)
    return g.op("mul", y, _scalar(g, 1.0 / math.log(2.0), y.dtype))


@composite("log10", 1, _unary_float, kind="unary")
def _log10(g, x, attrs):
    """log(x) / log(10)."""
    y = g.op("log", x)
    return g.op("mul", y, _scalar(g, 1.0 / math.log(10.0), y.dtype))


@composite("isfinite", 1, _unary_bool, kind="unary", differentiable=False)
def _isfinite(g, x, attrs):
    """not (isnan or isinf)."""
    return g.op("logical_not", g.op("logical_or", g.op("isnan", x), g.op("isinf", x)))


def _clamp_infer(metas, attrs):
    s, d = metas[0]
    lo, hi = attrs.get("min"), attrs.get("max")
    if lo is None and hi is None:
        raise ShapeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    for v in (lo, hi):
        if v is not None:
            d = D.result_type((d, len(s)), v) if len(s) else D.result_type((d, 1), v)
    return s, d


@composite("clamp", 1, _clamp_infer, attrs=("min", "max"), kind="unary")
def _clamp(g, x, attrs):
    """minimum(maximum(x, min), max)."""
    lo, hi = attrs.get("min"), attrs.get("max")
    _, d = _clamp_infer([(x.shape, x.dtype)], attrs)
    if x.dtype is not d:
        x = g.op("cast", x, dtype=d.name)
    if lo is not None:
        x = g.op("maximum", x, _scalar(g, lo, d))
    if hi is not None:
        x = g.op("minimum", x, _scalar(g, hi, d))
    return x


def _nan_to_num_infer(metas, attrs):
    return metas[0]


@composite("nan_to_num", 1, _nan_to_num_infer, attrs=("nan", "posinf", "neginf"), kind="unary")
def _nan_to_num(g, x, attrs):
    """Replace NaN by `nan`, +inf by `posinf`, -inf by `neginf` (defaults: 0 and the dtype's extremes)."""
    if not x.dtype.is_floating_point:
        return g.op("copy", x)
    big = D.finfo_max(x.dtype)
    nan = attrs.get("nan") or 0.0
    pos = attrs.get("posinf")
    neg = attrs.get("neginf")
    pos = big if pos is None else pos
    neg = -big if neg is None else neg
    y = g.op("where", g.op("isnan", x), _scalar(g, nan, x.dtype), x)
    inf = g.op("isinf", y)
    sgn = g.op("gt", y, _scalar(g, 0, x.dtype))
    return g.op("where", g.op("logical_and", inf, sgn), _scalar(g, pos, x.dtype),
                g.op("where", inf, _scalar(g, neg, x.dtype), y))


def _lerp_infer(metas, attrs):
    s = broadcast_many(*(m[0] for m in metas))
    d = binary_dtype(metas[:2])
    if d is D.bool_:  # the decomposition subtracts
        raise DTypeError("lerp is not supported for bool tensors")
    return s, d


@composite("lerp", 3, _lerp_infer)
def _lerp(g, a, b, w, attrs):
    """a + w * (b - a)."""
    return g.op("add", a, g.op("mul", w, g.op("sub", b, a)))


def _mean_infer(metas, attrs):
    (s, d), = metas
    if attrs.get("dtype") is not None:
        d = a_dtype(attrs)
    if not d.is_floating_point:
        raise DTypeError(f"mean(): could not infer output dtype. Input dtype must be either a floating point "
                         f"or complex dtype. Got: {d.name.capitalize()}")
    return reduced(s, a_dims(attrs, len(s)), a_bool(attrs, "keepdim")), d


@composite("mean", 1, _mean_infer, attrs=("dims", "keepdim", "dtype"), kind="reduce")
def _mean(g, x, attrs):
    """sum(x, dims) / count."""
    _, d = _mean_infer([(x.shape, x.dtype)], attrs)
    dims = a_dims(attrs, len(x.shape))
    if x.dtype is not d:
        x = g.op("cast", x, dtype=d.name)
    n = numel(tuple(x.shape[i] for i in dims))
    s = g.op("sum", x, dims=list(dims), keepdim=a_bool(attrs, "keepdim"))
    return g.op("div", s, _scalar(g, n, d))


def _var_infer(metas, attrs):
    (s, d), = metas
    a_num(attrs, "correction", 1)
    return reduced(s, a_dims(attrs, len(s)), a_bool(attrs, "keepdim")), D.float_of(d)


@composite("var", 1, _var_infer, attrs=("dims", "keepdim", "correction"), kind="reduce")
def _var(g, x, attrs):
    """sum((x - mean)^2) / (N - correction)."""
    x = _to_float(g, x)
    dims = list(a_dims(attrs, len(x.shape)))
    n = numel(tuple(x.shape[i] for i in dims))
    mu = g.op("mean", x, dims=dims, keepdim=True)
    dev = g.op("sub", x, mu)
    ss = g.op("sum", g.op("mul", dev, dev), dims=dims, keepdim=a_bool(attrs, "keepdim"))
    denom = max(n - a_num(attrs, "correction", 1), 0)
    return g.op("div", ss, _scalar(g, float(denom), x.dtype))


@composite("std", 1, _var_infer, attrs=("dims", "keepdim", "correction"), kind="reduce")
def _std(g, x, attrs):
    """sqrt(var)."""
    return g.op("sqrt", g.op("var", x, **attrs))


@composite("logsumexp", 1, lambda m, a: (reduced(m[0][0], a_dims(a, len(m[0][0])), a_bool(a, "keepdim")),
                                         D.float_of(m[0][1])), attrs=("dims", "keepdim"), kind="reduce")
def _logsumexp(g, x, attrs):
    """max + log(sum(exp(x - max))), stable; infinite maxima are handled like torch."""
    x = _to_float(g, x)
    dims = list(a_dims(attrs, len(x.shape)))
    keep = a_bool(attrs, "keepdim")
    if any(x.shape[d] == 0 for d in dims if d < len(x.shape)):  # log of an empty sum (amax would refuse)
        return g.op("full", shape=list(reduced(x.shape, tuple(dims), keep)), dtype=x.dtype.name, value=-math.inf)
    m = g.op("amax", x, dims=dims, keepdim=True)
    m = g.op("where", g.op("isinf", m), _scalar(g, 0.0, x.dtype), m)
    s = g.op("sum", g.op("exp", g.op("sub", x, m)), dims=dims, keepdim=keep)
    mm = m if keep else g.op("reshape", m, shape=list(reduced(x.shape, tuple(dims), False)))
    return g.op("add", g.op("log", s), mm)


def _softmax_infer(metas, attrs):
    (s, d), = metas
    norm_dim(a_int(attrs, "dim"), len(s))
    return s, D.float_of(d)


@composite("softmax", 1, _softmax_infer, attrs=("dim",))
def _softmax(g, x, attrs):
    """exp(x - max) / sum(exp(x - max)) along dim."""
    x = _to_float(g, x)
    dim = [a_int(attrs, "dim")]
    if numel(x.shape) == 0:  # nothing to normalise (amax over an empty dim would refuse)
        return g.op("full", shape=list(x.shape), dtype=x.dtype.name, value=0)
    e = g.op("exp", g.op("sub", x, g.op("amax", x, dims=dim, keepdim=True)))
    return g.op("div", e, g.op("sum", e, dims=dim, keepdim=True))


@composite("log_softmax", 1, _softmax_infer, attrs=("dim",))
def _log_softmax(g, x, attrs):
    """x - logsumexp(x) along dim."""
    x = _to_float(g, x)
    return g.op("sub", x, g.op("logsumexp", x, dims=[a_int(attrs, "dim")], keepdim=True))


def _norm_infer(metas, attrs):
    (s, d), = metas
    a_num(attrs, "p", 2)
    return reduced(s, a_dims(attrs, len(s)), a_bool(attrs, "keepdim")), D.float_of(d)


@composite("norm", 1, _norm_infer, attrs=("p", "dims", "keepdim"), kind="reduce")
def _norm(g, x, attrs):
    """Vector p-norm: (sum |x|^p)^(1/p); p = inf / -inf give max / min of |x|."""
    x = _to_float(g, x)
    p = a_num(attrs, "p", 2)
    dims = list(a_dims(attrs, len(x.shape)))
    keep = a_bool(attrs, "keepdim")
    ax = g.op("abs", x)
    if p == math.inf:
        return g.op("amax", ax, dims=dims, keepdim=keep)
    if p == -math.inf:
        return g.op("amin", ax, dims=dims, keepdim=keep)
    if p == 0:
        return g.op("sum", g.op("cast", g.op("ne", x, _scalar(g, 0, x.dtype)), dtype=x.dtype.name),
                    dims=dims, keepdim=keep)
    if p == 1:
        return g.op("sum", ax, dims=dims, keepdim=keep)
    if p == 2:
        return g.op("sqrt", g.op("sum", g.op("mul", x, x), dims=dims, keepdim=keep))
    s = g.op("sum", g.op("pow", ax, _scalar(g, float(p), x.dtype)), dims=dims, keepdim=keep)
    return g.op("pow", s, _scalar(g, 1.0 / p, x.dtype))


def _allany_infer(metas, attrs):
    (s, d), = metas
    return reduced(s, a_dims(attrs, len(s)), a_bool(attrs, "keepdim")), D.bool_


@composite("all", 1, _allany_infer, attrs=("dims", "keepdim"), kind="reduce", differentiable=False)
def _all(g, x, attrs):
    """amin of x read as bool."""
    b = x if x.dtype is D.bool_ else g.op("ne", x, _scalar(g, 0, x.dtype))
    if numel(x.shape) == 0:
        return g.op("full", shape=list(_allany_infer([(x.shape, x.dtype)], attrs)[0]), dtype="bool", value=True)
    return g.op("amin", b, **attrs)


@composite("any", 1, _allany_infer, attrs=("dims", "keepdim"), kind="reduce", differentiable=False)
def _any(g, x, attrs):
    """amax of x read as bool."""
    b = x if x.dtype is D.bool_ else g.op("ne", x, _scalar(g, 0, x.dtype))
    if numel(x.shape) == 0:
        return g.op("full", shape=list(_allany_infer([(x.shape, x.dtype)], attrs)[0]), dtype="bool",
                    value=False)
    return g.op("amax", b, **attrs)


def _tri_infer(metas, attrs):
    (s, d), = metas
    a_int(attrs, "diagonal", 0)
    if len(s) < 2:
        raise ShapeError("tril/triu: input tensor must have at least 2 dimensions")
    return s, d


def _tri(g, x, attrs, lower: bool):
    n, m = x.shape[-2], x.shape[-1]
    k = a_int(attrs, "diagonal", 0)
    rows = g.op("reshape", g.op("arange", start=0, step=1, n=n, dtype="int64"), shape=[n, 1])
    cols = g.op("arange", start=0, step=1, n=m, dtype="int64")
    diff = g.op("sub", cols, rows)  # [n, m]: col - row
    mask = g.op("le" if lower else "ge", diff, _scalar(g, k, D.int64))
    return g.op("where", mask, x, _scalar(g, 0, x.dtype))


@composite("tril", 1, _tri_infer, attrs=("diagonal",))
def _tril(g, x, attrs):
    """Keep elements with col - row <= diagonal, zero the rest."""
    return _tri(g, x, attrs, True)


@composite("triu", 1, _tri_infer, attrs=("diagonal",))
def _triu(g, x, attrs):
    """Keep elements with col - row >= diagonal, zero the rest."""
    return _tri(g, x, attrs, False)


def _eye_infer(metas, attrs):
    return check_shape((a_int(attrs, "n"), a_int(attrs, "m"))), a_dtype(attrs)


@composite("eye", 0, _eye_infer, attrs=("n", "m", "dtype"), kind="creation", differentiable=False)
def _eye(g, attrs):
    """Ones on the diagonal: arange(n)[:, None] == arange(m)."""
    n, m = a_int(attrs, "n"), a_int(attrs, "m")
    rows = g.op("reshape", g.op("arange", start=0, step=1, n=n, dtype="int64"), shape=[n, 1])
    cols = g.op("arange", start=0, step=1, n=m, dtype="int64")
    return g.op("cast", g.op("eq", rows, cols), dtype=attrs["dtype"])


@composite("relu6", 1, lambda m, a: _clamp_infer(m, {"min": 0, "max": 6}), kind="unary")
def _relu6(g, x, attrs):
    """min(max(x, 0), 6)."""
    return g.op("clamp", x, min=0, max=6)


# ----------------------------------------------------------------------------------------------
# neural-network composites (tw.nn.functional): activations, normalisation, im2col/conv, pooling


@composite("gelu", 1, lambda m, a: (a_str(a, "approximate", ("none", "tanh")), _unary_float(m, a))[1],
           attrs=("approximate",), kind="unary")
def _gelu(g, x, attrs):
    """x * Phi(x): 0.5 x (1 + erf(x / sqrt 2)); approximate="tanh": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    x = _to_float(g, x)
    d = x.dtype
    if attrs.get("approximate", "none") == "tanh":
        x3 = g.op("mul", g.op("mul", x, x), x)
        inner = g.op("mul", g.op("add", x, g.op("mul", x3, _scalar(g, 0.044715, d))),
                     _scalar(g, math.sqrt(2.0 / math.pi), d))
        t = g.op("tanh", inner)
    else:
        t = g.op("erf", g.op("mul", x, _scalar(g, 1.0 / math.sqrt(2.0), d)))
    return g.op("mul", g.op("mul", x, _scalar(g, 0.5, d)), g.op("add", t, _scalar(g, 1.0, d)))


@composite("silu", 1, _unary_float, kind="unary")
def _silu(g, x, attrs):
    """x * sigmoid(x)."""
    x = _to_float(g, x)
    return g.op("mul", x, g.op("sigmoid", x))


def _leaky_infer(metas, attrs):
    a_num(attrs, "negative_slope", 0.01)
    return _unary_float(metas, attrs)


@composite("leaky_relu", 1, _leaky_infer, attrs=("negative_slope",), kind="unary")
def _leaky_relu(g, x, attrs):
    """where(x > 0, x, negative_slope * x)."""
    x = _to_float(g, x)
    slope = a_num(attrs, "negative_slope", 0.01)
    zero = _scalar(g, 0, x.dtype)
    return g.op("where", g.op("gt", x, zero), x, g.op("mul", x, _scalar(g, slope, x.dtype)))


def _softplus_infer(metas, attrs):
    a_num(attrs, "beta", 1.0)
    a_num(attrs, "threshold", 20.0)
    return _unary_float(metas, attrs)


@composite("softplus", 1, _softplus_infer, attrs=("beta", "threshold"), kind="unary")
def _softplus(g, x, attrs):
    """log1p(exp(beta x)) / beta, and x itself where beta x > threshold (as torch)."""
    x = _to_float(g, x)
    beta, thr = a_num(attrs, "beta", 1.0), a_num(attrs, "threshold", 20.0)
    bx = g.op("mul", x, _scalar(g, beta, x.dtype))
    big = g.op("gt", bx, _scalar(g, thr, x.dtype))
    safe = g.op("where", big, _scalar(g, 0.0, x.dtype), bx)
    sp = g.op("div", g.op("log1p", g.op("exp", safe)), _scalar(g, beta, x.dtype))
    return g.op("where", big, x, sp)


def a_str(attrs: dict, key: str, choices: tuple[str, ...], default=None) -> str:
    v = attrs.get(key, default if default is not None else choices[0])
    if v not in choices:
        raise ProtocolError(f"attribute {key!r} must be one of {list(choices)}, got {v!r}")
    return v


def _norm_last_infer(metas, attrs):
    (s, d), = metas
    n = a_int(attrs, "ndim", 1)
    a_num(attrs, "eps", 1e-5)
    if not 0 < n <= len(s):
        raise ShapeError(f"normalisation over the last {n} dims of a tensor of shape {list(s)}")
    return s, D.float_of(d)


@composite("layer_norm", 1, _norm_last_infer, attrs=("ndim", "eps"))
def _layer_norm(g, x, attrs):
    """(x - mean) / sqrt(var + eps) over the last `ndim` dims (biased variance; the affine part is separate)."""
    x = _to_float(g, x)
    n = a_int(attrs, "ndim", 1)
    dims = list(range(len(x.shape) - n, len(x.shape)))
    mu = g.op("mean", x, dims=dims, keepdim=True)
    xc = g.op("sub", x, mu)
    var = g.op("mean", g.op("mul", xc, xc), dims=dims, keepdim=True)
    return g.op("mul", xc, g.op("rsqrt", g.op("add", var, _scalar(g, a_num(attrs, "eps", 1e-5), x.dtype))))


@composite("rms_norm", 1, _norm_last_infer, attrs=("ndim", "eps"))
def _rms_norm(g, x, attrs):
    """x / sqrt(mean(x^2) + eps) over the last `ndim` dims (the weight is separate)."""
    x = _to_float(g, x)
    n = a_int(attrs, "ndim", 1)
    dims = list(range(len(x.shape) - n, len(x.shape)))
    ms = g.op("mean", g.op("mul", x, x), dims=dims, keepdim=True)
    return g.op("mul", x, g.op("rsqrt", g.op("add", ms, _scalar(g, a_num(attrs, "eps", 1e-5), x.dtype))))


def _linear_infer(metas, attrs):
    if len(metas) not in (2, 3):
        raise ProtocolError(f"op linear takes 2 or 3 inputs (input, weight[, bias]), got {len(metas)}")
    (sx, dx), (sw, dw) = metas[0], metas[1]
    if len(sw) != 2 or not sx:
        raise ShapeError(f"linear: expected a 2-D weight and an input with at least 1 dim, got input {list(sx)} "
                         f"and weight {list(sw)}")
    if sx[-1] != sw[1]:
        raise ShapeError(f"mat1 and mat2 shapes cannot be multiplied ({numel(sx[:-1])}x{sx[-1]} and "
                         f"{sw[1]}x{sw[0]})")
    if dx is not dw:
        raise DTypeError(f"mat1 and mat2 must have the same dtype, but got {dx.name} and {dw.name}")
    out = sx[:-1] + (sw[0],)
    if len(metas) == 3:
        sb, db = metas[2]
        if broadcast(out, sb) != out:
            raise ShapeError(f"linear: bias of shape {list(sb)} does not broadcast to the output {list(out)}")
        return out, binary_dtype([(out, dx), (sb, db)])
    return out, dx


@composite("linear", None, _linear_infer)
def _linear(g, x, w, *rest):
    """input @ weight^T (+ bias), as torch's F.linear."""
    *b, attrs = rest
    y = g.op("matmul", x, g.op("permute", w, dims=[1, 0]))
    return g.op("add", y, b[0]) if b else y


def _pair_attr(attrs, key, default):
    v = a_ints(attrs, key, default)
    if len(v) != 2:
        raise ProtocolError(f"attribute {key!r} must hold 2 ints, got {list(v)}")
    return v


def _window_out(n: int, k: int, s: int, p: int, d: int, ceil: bool = False) -> int:
    """Output length of a sliding window (torch's formula, ceil_mode included)."""
    if k < 1 or s < 1 or d < 1 or p < 0:
        raise ShapeError(f"window: kernel {k}, stride {s}, padding {p} and dilation {d} are invalid")
    span = n + 2 * p - d * (k - 1) - 1
    if span < 0:
        raise ShapeError(f"window: input size {n} (padded {n + 2 * p}) is smaller than the kernel extent "
                         f"{d * (k - 1) + 1}")
    out = (span + (s - 1 if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= n + p:
        out -= 1
    return out


def _window_geometry(shape, attrs, ceil=False):
    kh, kw = _pair_attr(attrs, "kernel", None)
    sh, sw = _pair_attr(attrs, "stride", [kh, kw])
    ph, pw = _pair_attr(attrs, "padding", [0, 0])
    dh, dw = _pair_attr(attrs, "dilation", [1, 1])
    if len(shape) != 4:
        raise ShapeError(f"expected a 4-D input (N, C, H, W), got shape {list(shape)}")
    oh = _window_out(shape[2], kh, sh, ph, dh, ceil)
    ow = _window_out(shape[3], kw, sw, pw, dw, ceil)
    return (kh, kw), (sh, sw), (ph, pw), (dh, dw), (oh, ow)


def _padded_size(geom, h: int, w: int) -> tuple[int, int]:
    """Height and width of an h x w input as the windows read it: torch's padding on both sides, and more on the
    high side where ceil_mode's last window runs past that."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw), (oh, ow) = geom
    return max(h + 2 * ph, (oh - 1) * sh + dh * (kh - 1) + 1), max(w + 2 * pw, (ow - 1) * sw + dw * (kw - 1) + 1)


def _window_slices(geom) -> list[tuple[slice, slice]]:
    """The (row, column) slices of the padded input that each kernel position reads, row-major over the kernel
    (torch's order): its value at every output position."""
    (kh, kw), (sh, sw), _, (dh, dw), (oh, ow) = geom
    return [(slice(i * dh, i * dh + (oh - 1) * sh + 1, sh), slice(j * dw, j * dw + (ow - 1) * sw + 1, sw))
            for i in range(kh) for j in range(kw)]


def _windows(g, x, geom, value=0.0):
    """The kh*kw strided slices [N, C, oh, ow] of x padded with `value` (one per kernel position)."""
    _, (sh, sw), (ph, pw), _, (oh, ow) = geom
    n, c, h, w = x.shape
    hp, wp = _padded_size(geom, h, w)
    if (hp, wp) != (h, w):
        x = g.op("pad", x, pads=[0, 0, 0, 0, ph, hp - h - ph, pw, wp - w - pw], value=value)
    out = []
    for r, q in _window_slices(geom):
        if (oh, ow) == (hp, wp) and (r.start, q.start) == (0, 0) and (sh, sw) == (1, 1):
            out.append(x)
            continue
        out.append(g.op("slice", x, starts=[0, 0, r.start, q.start], stops=[n, c, r.stop, q.stop],
                        steps=[1, 1, sh, sw]))
    return out


def _window_max(g, ws):
    """The elementwise maximum of the windows (a NaN propagates)."""
    out = ws[0]
    for v in ws[1:]:
        out = g.op("maximum", out, v)
    return out


def _im2col_infer(metas, attrs):
    (s, d), = metas
    (kh, kw), _, _, _, (oh, ow) = _window_geometry(s, {"stride": [1, 1], **attrs})  # torch's unfold: stride 1
    return check_shape((s[0], s[1] * kh * kw, oh * ow)), d


@composite("im2col", 1, _im2col_infer, attrs=("kernel", "stride", "padding", "dilation"))
def _im2col(g, x, attrs):
    """torch's F.unfold: [N, C, H, W] -> [N, C*kh*kw, L] (rows ordered channel, then kernel row, then column)."""
    geom = _window_geometry(x.shape, {"stride": [1, 1], **attrs})
    (kh, kw), _, _, _, (oh, ow) = geom
    n, c = x.shape[0], x.shape[1]
    cols = [g.op("reshape", v, shape=[n, c, 1, oh * ow]) for v in _windows(g, x, geom)]
    stacked = cols[0] if len(cols) == 1 else g.op("cat", *cols, dim=2)
    return g.op("reshape", stacked, shape=[n, c * kh * kw, oh * ow])


def _conv2d_infer(metas, attrs):
    if len(metas) not in (2, 3):
        raise ProtocolError(f"op conv2d takes 2 or 3 inputs (input, weight[, bias]), got {len(metas)}")
    (s, d), (sw_, dw_) = metas[0], metas[1]
    groups = a_int(attrs, "groups", 1)
    if len(sw_) != 4:
        raise ShapeError(f"conv2d: expected a 4-D weight (out, in/groups, kh, kw), got {list(sw_)}")
    if len(s) != 4:
        raise ShapeError(f"conv2d: expected a 4-D input (N, C, H, W), got {list(s)}")
    if d is not dw_:
        raise DTypeError(f"conv2d: input type ({d.name}) and weight type ({dw_.name}) should be the same")
    if groups < 1 or s[1] % groups or sw_[0] % groups or s[1] // groups != sw_[1]:
        raise ShapeError(f"conv2d: expected input{list(s)} to have {sw_[1] * groups} channels (weight {list(sw_)}, "
                         f"groups={groups}), but got {s[1]} channels instead")
    if len(metas) == 3:
        sb, db = metas[2]
        if tuple(sb) != (sw_[0],):
            raise ShapeError(f"conv2d: expected a bias of shape {[sw_[0]]}, got {list(sb)}")
        if db is not d:
            raise DTypeError(f"conv2d: input type ({d.name}) and bias type ({db.name}) should be the same")
    geom_attrs = {**attrs, "kernel": list(sw_[2:]), "stride": attrs.get("stride", [1, 1])}
    _, _, _, _, (oh, ow) = _window_geometry(s, geom_attrs)
    return check_shape((s[0], sw_[0], oh, ow)), d


@composite("conv2d", None, _conv2d_infer, attrs=("stride", "padding", "dilation", "groups"))
def _conv2d(g, x, w, *rest):
    """Cross-correlation as torch's conv2d: im2col, then a (grouped) matmul with the weight (+ the bias [O] per
    output channel)."""
    *b, attrs = rest
    o, cg, kh, kw = w.shape
    groups = a_int(attrs, "groups", 1)
    ia = {"kernel": [kh, kw], "stride": list(attrs.get("stride", [1, 1])),
          "padding": list(attrs.get("padding", [0, 0])), "dilation": list(attrs.get("dilation", [1, 1]))}
    n = x.shape[0]
    cols = g.op("im2col", x, **ia)  # [N, C*kh*kw, L]
    L = cols.shape[2]
    (_, _, _, _, (oh, ow)) = _window_geometry(x.shape, ia)
    k = cg * kh * kw
    if groups == 1:
        y = g.op("matmul", g.op("reshape", w, shape=[o, k]), cols)  # [N, O, L]
    else:
        cols = g.op("reshape", cols, shape=[n, groups, k, L])
        y = g.op("matmul", g.op("reshape", w, shape=[groups, o // groups, k]), cols)  # [N, G, O/G, L]
    y = g.op("reshape", y, shape=[n, o, oh, ow])
    return g.op("add", y, g.op("reshape", b[0], shape=[1, o, 1, 1])) if b else y

# conv2d's gradients (its VJP rule records one op per input, where differentiating the im2col decomposition records
# ~40): composites, so every backend runs them through these decompositions (im2col / matmul / setslice) and they
# stay differentiable (double backward); the CPU backend has native kernels.

def _conv_grad_check(what, sx, sw_, sg, attrs, dts):
    """(kernel, stride, padding, dilation, groups, (oh, ow)) of the conv2d with input shape sx, weight shape sw_ and
    output shape sg, after checking that they fit together."""
    groups = a_int(attrs, "groups", 1)
    if any(not d.is_floating_point for d in dts) or any(d is not dts[0] for d in dts):
        raise DTypeError(f"{what}: expected floating inputs of one dtype, got {[d.name for d in dts]}")
    if len(sx) != 4 or len(sw_) != 4 or len(sg) != 4:
        raise ShapeError(f"{what}: expected 4-D shapes, got input {list(sx)}, weight {list(sw_)}, grad {list(sg)}")
    if groups < 1 or sx[1] % groups or sw_[0] % groups or sx[1] // groups != sw_[1]:
        raise ShapeError(f"{what}: input {list(sx)} and weight {list(sw_)} do not fit groups={groups}")
    ia = {"kernel": [sw_[2], sw_[3]], "stride": list(_pair_attr(attrs, "stride", [1, 1])),
          "padding": list(_pair_attr(attrs, "padding", [0, 0])),
          "dilation": list(_pair_attr(attrs, "dilation", [1, 1]))}
    _, _, _, _, (oh, ow) = _window_geometry(sx, ia)
    if tuple(sg) != (sx[0], sw_[0], oh, ow):
        raise ShapeError(f"{what}: expected an output gradient of shape {[sx[0], sw_[0], oh, ow]}, got {list(sg)}")
    return ia, groups, (oh, ow)


def _conv_grad_input_infer(metas, attrs):
    (sg, dg), (sw_, dw_) = metas
    h, w = _pair_attr(attrs, "input_size", None)
    sx = (sg[0] if len(sg) == 4 else 0, (sw_[1] if len(sw_) == 4 else 0) * a_int(attrs, "groups", 1), h, w)
    _conv_grad_check("conv2d_grad_input", sx, sw_, sg, attrs, (dg, dw_))
    return check_shape(sx), dg


def _conv_grad_weight_infer(metas, attrs):
    (sx, dx), (sg, dg) = metas
    kh, kw = _pair_attr(attrs, "kernel", None)
    groups = a_int(attrs, "groups", 1)
    sw_ = (sg[1] if len(sg) == 4 else 0, sx[1] // max(groups, 1) if len(sx) == 4 else 0, kh, kw)
    _conv_grad_check("conv2d_grad_weight", sx, sw_, sg, attrs, (dx, dg))
    return check_shape(sw_), dx


@composite("conv2d_grad_input", 2, _conv_grad_input_infer,
           attrs=("stride", "padding", "dilation", "groups", "input_size"))
def _conv2d_grad_input(g, gy, w, attrs):
    """The gradient of conv2d with respect to its input [N, C, H, W] (H, W = input_size), given the output gradient
    gy [N, O, oh, ow] and the weight: the columns W^T @ gy, each kernel position's [N, C, oh, ow] slice added at
    its strided place in the padded input (col2im), the padding cropped."""
    o, cg, kh, kw = w.shape
    h, wd = _pair_attr(attrs, "input_size", None)
    n = gy.shape[0]
    ia, groups, (oh, ow) = _conv_grad_check("conv2d_grad_input", (n, cg * a_int(attrs, "groups", 1), h, wd), w.shape,
                                            gy.shape, attrs, (gy.dtype, w.dtype))
    (sh, sw), (ph, pw), (dh, dw) = ia["stride"], ia["padding"], ia["dilation"]
    c, k = cg * groups, cg * kh * kw
    wt = g.op("permute", g.op("reshape", w, shape=[groups, o // groups, k]), dims=[0, 2, 1])  # [G, k, O/G]
    cols = g.op("matmul", wt, g.op("reshape", gy, shape=[n, groups, o // groups, oh * ow]))  # [N, G, k, L]
    cols = g.op("reshape", cols, shape=[n, c, kh, kw, oh, ow])
    hp, wp = h + 2 * ph, wd + 2 * pw
    zero = g.op("expand", _scalar(g, 0, gy.dtype), shape=[n, c, hp, wp])
    out = None
    for i in range(kh):
        for j in range(kw):
            piece = g.op("reshape", g.op("slice", cols, starts=[0, 0, i, j, 0, 0], stops=[n, c, i + 1, j + 1, oh, ow],
                                         steps=[1] * 6), shape=[n, c, oh, ow])
            a, b = i * dh, j * dw
            placed = g.op("setslice", zero, piece, starts=[0, 0, a, b],
                          stops=[n, c, a + (oh - 1) * sh + 1, b + (ow - 1) * sw + 1], steps=[1, 1, sh, sw])
            out = placed if out is None else g.op("add", out, placed)
    if ph or pw:
        out = g.op("slice", out, starts=[0, 0, ph, pw], stops=[n, c, ph + h, pw + wd], steps=[1, 1, 1, 1])
    return out


@composite("conv2d_grad_weight", 2, _conv_grad_weight_infer,
           attrs=("stride", "padding", "dilation", "groups", "kernel"))
def _conv2d_grad_weight(g, x, gy, attrs):
    """The gradient of conv2d with respect to its weight [O, C/groups, kh, kw] (kh, kw = kernel), given the input x
    and the output gradient gy: gy @ im2col(x)^T per group, summed over the batch."""
    n, c = x.shape[0], x.shape[1]
    o = gy.shape[1]
    kh, kw = _pair_attr(attrs, "kernel", None)
    groups = a_int(attrs, "groups", 1)
    cg = c // groups
    ia, _, (oh, ow) = _conv_grad_check("conv2d_grad_weight", x.shape, (o, cg, kh, kw), gy.shape, attrs,
                                       (x.dtype, gy.dtype))
    cols = g.op("im2col", x, **ia)  # [N, C*kh*kw, L]
    k, L = cg * kh * kw, oh * ow
    cols = g.op("reshape", g.op("permute", g.op("reshape", cols, shape=[n, groups, k, L]), dims=[1, 0, 3, 2]),
                shape=[groups, n * L, k])
    gm = g.op("reshape", g.op("permute", g.op("reshape", gy, shape=[n, groups, o // groups, L]), dims=[1, 2, 0, 3]),
              shape=[groups, o // groups, n * L])
    return g.op("reshape", g.op("matmul", gm, cols), shape=[o, cg, kh, kw])



def _pool_infer(metas, attrs):
    (s, d), = metas
    a_bool(attrs, "ceil_mode", False)
    geom = _window_geometry(s, attrs, a_bool(attrs, "ceil_mode", False))
    (kh, kw), _, (ph, pw), _, (oh, ow) = geom
    if ph * 2 > kh or pw * 2 > kw:
        raise ShapeError(f"pad should be at most half of effective kernel size, but got pad={[ph, pw]}, "
                         f"kernel_size={[kh, kw]}")
    return (s[0], s[1], oh, ow), d


def _lowest(dt: D.DType):
    if dt.is_floating_point:
        return -math.inf
    if dt is D.bool_:
        return False
    import numpy as np

    return int(np.iinfo(dt.np).min)


@composite("max_pool2d", 1, _pool_infer, attrs=("kernel", "stride", "padding", "dilation", "ceil_mode"))
def _max_pool2d(g, x, attrs):
    """Elementwise maximum over the kh*kw strided windows (padding is -inf, as torch)."""
    geom = _window_geometry(x.shape, attrs, a_bool(attrs, "ceil_mode", False))
    return _window_max(g, _windows(g, x, geom, _lowest(x.dtype)))


def _max_pool_grad_infer(metas, attrs):
    (sx, dx), (sg, dg) = metas
    if not dx.is_floating_point or dg is not dx:
        raise DTypeError(f"max_pool2d_grad: expected a floating input and an output gradient of its dtype, got "
                         f"{dx.name} and {dg.name}")
    sy, _ = _pool_infer([(sx, dx)], attrs)
    if tuple(sg) != tuple(sy):
        raise ShapeError(f"max_pool2d_grad: expected an output gradient of shape {list(sy)}, got {list(sg)}")
    return tuple(sx), dx


@composite("max_pool2d_grad", 2, _max_pool_grad_infer,
           attrs=("kernel", "stride", "padding", "dilation", "ceil_mode"))
def _max_pool2d_grad(g, x, gy, attrs):
    """The gradient of max_pool2d with respect to its input x, given the output gradient gy: each window's
    gradient goes to the first position holding its maximum (a NaN counts as the maximum), as torch's
    max_pool2d backward routes it through the saved indices. Windows are visited in order; a position is
    taken once per window, and overlapping windows add up."""
    geom = _window_geometry(x.shape, attrs, a_bool(attrs, "ceil_mode", False))
    _, (sh, sw), (ph, pw), _, _ = geom
    n, c, h, w = x.shape
    ws = _windows(g, x, geom, _lowest(x.dtype))
    y = _window_max(g, ws)
    hp, wp = _padded_size(geom, h, w)
    zero = _scalar(g, 0, x.dtype)
    canvas = g.op("expand", zero, shape=[n, c, hp, wp])
    taken = out = None
    for k, (v, (r, q)) in enumerate(zip(ws, _window_slices(geom))):
        hit = g.op("logical_or", g.op("eq", v, y), g.op("ne", v, v))  # v is the window's max, or a NaN
        if taken is not None:
            hit = g.op("logical_and", hit, g.op("logical_not", taken))
        if k < len(ws) - 1:
            taken = hit if taken is None else g.op("logical_or", taken, hit)
        placed = g.op("setslice", canvas, g.op("where", hit, gy, zero), starts=[0, 0, r.start, q.start],
                      stops=[n, c, r.stop, q.stop], steps=[1, 1, sh, sw])
        out = placed if out is None else g.op("add", out, placed)
    if (hp, wp) != (h, w):
        out = g.op("slice", out, starts=[0, 0, ph, pw], stops=[n, c, ph + h, pw + w], steps=[1, 1, 1, 1])
    return out


def _avg_pool_infer(metas, attrs):
    a_bool(attrs, "count_include_pad", True)
    if attrs.get("divisor_override") is not None:
        a_int(attrs, "divisor_override")
    s, d = _pool_infer(metas, attrs)
    return s, D.float_of(d)


@composite("avg_pool2d", 1, _avg_pool_infer,
           attrs=("kernel", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override"))
def _avg_pool2d(g, x, attrs):
    """Sum over the windows divided by the window size (or the count of non-padding elements, as torch)."""
    x = _to_float(g, x)
    ceil = a_bool(attrs, "ceil_mode", False)
    geom = _window_geometry(x.shape, attrs, ceil)
    ws = _windows(g, x, geom, 0.0)
    total = ws[0]
    for v in ws[1:]:
        total = g.op("add", total, v)
    div = attrs.get("divisor_override")
    (kh, kw), _, (ph, pw), _, (oh, ow) = geom
    if div is not None:
        return g.op("div", total, _scalar(g, float(div), x.dtype))
    include = a_bool(attrs, "count_include_pad", True)
    if (include and not ceil) or (not ph and not pw and not ceil):
        return g.op("div", total, _scalar(g, float(kh * kw), x.dtype))
    # per-position counts: pool a map of ones (padding counted as ones when count_include_pad, except the
    # extra high-side padding that ceil_mode adds, which torch never counts)
    h, w = x.shape[2], x.shape[3]
    ones = g.op("full", shape=[1, 1, h, w], dtype=x.dtype.name, value=1.0)
    if include:
        ones = g.op("pad", ones, pads=[0, 0, 0, 0, ph, ph, pw, pw], value=1.0)
        geom = (geom[0], geom[1], (0, 0), geom[3], geom[4])
    cnt = _windows(g, ones, geom, 0.0)
    c = cnt[0]
    for v in cnt[1:]:
        c = g.op("add", c, v)
    return g.op("div", total, c)


# ----------------------------------------------------------------------------------------------
# fused cross entropy (tw.nn.functional.cross_entropy's common case: [N, C] logits, class-index targets, no
# class weight, no label smoothing): one node forward and, through its VJP rule, one node backward, instead of
# ~12 + ~13 elementwise/index nodes. Both are composites, so every backend runs them through the decompositions
# (the general log_softmax / gather / mask path) and the grad op stays differentiable (double backward).

_CE_REDUCTIONS = ("mean", "sum", "none")


def _ce_check(metas, attrs, what):
    red = a_str(attrs, "reduction", _CE_REDUCTIONS)
    a_int(attrs, "ignore_index", -100)
    (sx, dx), (st, dt_) = metas[0], metas[1]
    if not dx.is_floating_point:
        raise DTypeError(f"{what}: expected a floating input, got {dx.name}")
    _index_dtype(dt_, what)
    if len(sx) != 2 or len(st) != 1:
        raise ShapeError(f"{what}: expected input [N, C] and target [N], got input {list(sx)} and target {list(st)}")
    if sx[1] == 0:
        raise ShapeError(f"{what}: the input has no classes (shape {list(sx)})")
    if st[0] != sx[0]:
        raise ShapeError(f"Expected input batch_size ({sx[0]}) to match target batch_size ({st[0]}).")
    return red, (() if red != "none" else (sx[0],))


def _ce_infer(metas, attrs):
    _, out = _ce_check(metas, attrs, "cross_entropy_index")
    return out, metas[0][1]


def _ce_grad_infer(metas, attrs):
    _, out = _ce_check(metas, attrs, "cross_entropy_index_grad")
    sg, dg = metas[2]
    if not dg.is_floating_point or tuple(sg) != out:
        raise ShapeError(f"cross_entropy_index_grad: the output gradient must be a floating tensor of shape "
                         f"{list(out)}, got {dg.name} {list(sg)}")
    return metas[0]


def _ce_rows(g, t, attrs):
    """(valid [N] bool: target != ignore_index, the class index [N] with ignored targets reading class 0)."""
    valid = g.op("ne", t, _scalar(g, a_int(attrs, "ignore_index", -100), t.dtype))
    idx = g.op("where", valid, t, _scalar(g, 0, t.dtype))
    return valid, idx


@composite("cross_entropy_index", 2, _ce_infer, attrs=("reduction", "ignore_index"))
def _cross_entropy_index(g, x, t, attrs):
    """torch's cross_entropy(input [N, C], target [N] class indices, reduction, ignore_index): -log_softmax(x)
    at the target, 0 where target == ignore_index; "mean" divides the sum by the number of non-ignored
    targets (nan if there are none, as torch)."""
    n = x.shape[0]
    dt = x.dtype
    valid, idx = _ce_rows(g, t, attrs)
    lp = g.op("log_softmax", x, dim=1)
    picked = g.op("reshape", g.op("gather", lp, g.op("reshape", idx, shape=[n, 1]), dim=1), shape=[n])
    loss = g.op("where", valid, g.op("neg", picked), _scalar(g, 0, dt))
    red = a_str(attrs, "reduction", _CE_REDUCTIONS)
    if red == "none":
        return loss
    total = g.op("sum", loss, dims=[0], keepdim=False)
    if red == "sum":
        return total
    return g.op("div", total, g.op("sum", g.op("cast", valid, dtype=dt.name), dims=[0], keepdim=False))


@composite("cross_entropy_index_grad", 3, _ce_grad_infer, attrs=("reduction", "ignore_index"))
def _cross_entropy_index_grad(g, x, t, gy, attrs):
    """The gradient of cross_entropy_index with respect to its input, given the output gradient gy (0-d, or [N]
    for reduction "none"): (softmax(x) - onehot(target)) * s[:, None], s = gy (/ the number of non-ignored
    targets for "mean") where the target is not ignored, 0 where it is."""
    n, c = x.shape
    dt = x.dtype
    valid, idx = _ce_rows(g, t, attrs)
    gy = gy if gy.dtype is dt else g.op("cast", gy, dtype=dt.name)
    if a_str(attrs, "reduction", _CE_REDUCTIONS) == "mean":
        gy = g.op("div", gy, g.op("sum", g.op("cast", valid, dtype=dt.name), dims=[0], keepdim=False))
    s = g.op("reshape", g.op("where", valid, gy, _scalar(g, 0, dt)), shape=[n, 1])
    cols = g.op("arange", start=0, step=1, n=c, dtype="int64")
    onehot = g.op("cast", g.op("eq", g.op("reshape", idx, shape=[n, 1]), cols), dtype=dt.name)
    return g.op("mul", g.op("sub", g.op("softmax", x, dim=1), onehot), s)


# ----------------------------------------------------------------------------------------------
# fused optimizer updates (tw.optim): one node per updated tensor instead of ~10 elementwise nodes.
# One output per node, so an update that changes several tensors records one op per tensor (Adam:
# adam_exp_avg, adam_exp_avg_sq, adam_param); where two need the same intermediate (the L2-decayed
# gradient) each decomposition recomputes it. Constant hyperparameters are attributes; values that change
# between steps (lr, bias corrections) are 0-d tensor inputs (`full` nodes the client records with a
# dynamic value), so a decomposed composite never bakes a stale value into a replayed plan.

def _opt_infer(required: str, optional: str, nums: tuple[str, ...], param_last: bool = False):
    """Inference for an update op whose inputs follow ``required + optional`` ("T": a tensor of the updated
    tensor's shape, input 0 being it; "S": a 0-d scalar); numeric attributes ``nums``. The output is input 0's
    shape and dtype. ``param_last``: the optional last input is the parameter, needed for a nonzero
    ``weight_decay``."""
    layout = required + optional

    def fn(metas, attrs):
        if not len(required) <= len(metas) <= len(layout):
            raise ProtocolError(f"takes {len(required)} to {len(layout)} inputs, got {len(metas)}")
        for k in nums:
            a_num(attrs, k, 0)
        if param_last and a_num(attrs, "weight_decay", 0) and len(metas) == len(required):
            raise ProtocolError("a nonzero weight_decay needs the parameter as an input")
        s, d = metas[0]
        for i, ((si, di), kind) in enumerate(zip(metas, layout)):
            if not di.is_floating_point:
                raise DTypeError(f"optimizer updates need floating tensors, got {di.name} for input {i}")
            want = s if kind == "T" else ()
            if tuple(si) != tuple(want):
                raise ShapeError(f"input {i} of an optimizer update has shape {list(si)}, expected {list(want)}")
        return s, d
    return fn


def _upd_in(g, v, dt):
    return v if v.dtype is dt else g.op("cast", v, dtype=dt.name)


def _decayed(g, grad, param, attrs, dt):
    """grad + weight_decay * param (torch's coupled, L2 weight decay) when weight_decay != 0."""
    wd = a_num(attrs, "weight_decay", 0)
    grad = _upd_in(g, grad, dt)
    if not wd or param is None:
        return grad
    return g.op("add", grad, g.op("mul", _upd_in(g, param, dt), _scalar(g, wd, dt)))


@composite("adam_exp_avg", None, _opt_infer("TT", "T", ("beta1", "weight_decay"), True),
           attrs=("beta1", "weight_decay"), differentiable=False)
def _adam_exp_avg(g, m, grad, *rest):
    """Adam's first moment: lerp(exp_avg, grad', 1 - beta1), grad' = grad + weight_decay * param (inputs
    exp_avg, grad[, param])."""
    *p, attrs = rest
    dt = m.dtype
    gd = _decayed(g, grad, p[0] if p else None, attrs, dt)
    return g.op("lerp", m, gd, _scalar(g, 1 - a_num(attrs, "beta1", 0), dt))


@composite("adam_exp_avg_sq", None, _opt_infer("TT", "T", ("beta2", "weight_decay"), True),
           attrs=("beta2", "weight_decay"), differentiable=False)
def _adam_exp_avg_sq(g, v, grad, *rest):
    """Adam's second moment: exp_avg_sq * beta2 + (1 - beta2) * grad' * grad' (torch's mul_ + addcmul_;
    inputs exp_avg_sq, grad[, param])."""
    *p, attrs = rest
    dt = v.dtype
    gd = _decayed(g, grad, p[0] if p else None, attrs, dt)
    b2 = a_num(attrs, "beta2", 0)
    return g.op("add", g.op("mul", v, _scalar(g, b2, dt)), g.op("mul", g.op("mul", gd, _scalar(g, 1 - b2, dt)), gd))


@composite("adam_param", None, _opt_infer("TTTSS", "S", ("eps",)), attrs=("eps",), differentiable=False)
def _adam_param(g, p, m, v, step_size, bc2_sqrt, *rest):
    """Adam's parameter update: param * decay - step_size * exp_avg / (sqrt(exp_avg_sq) / bc2_sqrt + eps)
    (inputs param, exp_avg, exp_avg_sq (or its running max), step_size, bc2_sqrt[, decay]: 0-d scalars that
    change every step; decay is AdamW's 1 - lr * weight_decay)."""
    *decay, attrs = rest
    dt = p.dtype
    denom = g.op("add", g.op("div", g.op("sqrt", _upd_in(g, v, dt)), _upd_in(g, bc2_sqrt, dt)),
                 _scalar(g, a_num(attrs, "eps", 0), dt))
    upd = g.op("mul", g.op("div", _upd_in(g, m, dt), denom), _upd_in(g, step_size, dt))
    if decay:
        p = g.op("mul", p, _upd_in(g, decay[0], dt))
    return g.op("sub", p, upd)


@composite("sgd_momentum", None, _opt_infer("TT", "T", ("momentum", "dampening", "weight_decay"), True),
           attrs=("momentum", "dampening", "weight_decay"), differentiable=False)
def _sgd_momentum(g, buf, grad, *rest):
    """SGD's momentum buffer: buf * momentum + (1 - dampening) * grad', grad' = grad + weight_decay * param
    (inputs buf, grad[, param])."""
    *p, attrs = rest
    dt = buf.dtype
    gd = _decayed(g, grad, p[0] if p else None, attrs, dt)
    damp = a_num(attrs, "dampening", 0)
    if damp:
        gd = g.op("mul", gd, _scalar(g, 1 - damp, dt))
    return g.op("add", g.op("mul", buf, _scalar(g, a_num(attrs, "momentum", 0), dt)), gd)


@composite("sgd_update", None, _opt_infer("TTS", "T", ("weight_decay", "momentum")),
           attrs=("weight_decay", "momentum"), differentiable=False)
def _sgd_update(g, p, d, lr, *rest):
    """SGD's parameter update: param - lr * (d + weight_decay * param [+ momentum * buf]) (inputs param, d (the
    gradient, or the momentum buffer), lr (0-d)[, buf: Nesterov])."""
    *buf, attrs = rest
    dt = p.dtype
    d = _decayed(g, d, p, attrs, dt)
    if buf:
        d = g.op("add", d, g.op("mul", _upd_in(g, buf[0], dt), _scalar(g, a_num(attrs, "momentum", 0), dt)))
    return g.op("sub", p, g.op("mul", d, _upd_in(g, lr, dt)))


def primitives() -> list[str]:
    """Names of the ops every backend must implement (``kind="worker"`` ops are the worker's own)."""
    return [n for n, op in OPS.items() if op.primitive and op.kind != "worker"]


def composites() -> list[str]:
    return [n for n, op in OPS.items() if not op.primitive]
