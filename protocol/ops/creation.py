"""Creation ops: constants, ``full``, ``arange``, the hub's tensors, collectives and the random ops.
"""

from __future__ import annotations

from ..errors import ProtocolError, ShapeError
from ..progress import valid_id as valid_progress_id
from ..shapes import check_shape
from .attrs import a_dtype, a_int, a_ints, a_num
from .table import OpDef, register_op


def _creation_infer(metas, attrs):
    return check_shape(a_ints(attrs, "shape")), a_dtype(attrs)


register_op(OpDef("const", 0, _creation_infer, kind="worker", differentiable=False,
                  attrs=("shape", "dtype", "frame"), dynamic=("frame",),
                  doc="A tensor whose bytes ride in buffer frame `frame` of the message."))
def _full_infer(metas, attrs):
    out = _creation_infer(metas, attrs)
    v = attrs.get("value")
    if type(v) is list and out[1].is_complex:  # a complex value: [real, imag]
        if len(v) != 2 or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
            raise ProtocolError(f"attribute 'value' of a complex full must be [real, imag], got {v!r}")
    else:
        a_num(attrs, "value")
    return out


register_op(OpDef("full", 0, _full_infer, kind="creation", differentiable=False, attrs=("shape", "dtype", "value"),
                  dynamic=("value",), doc="A tensor filled with `value` ([real, imag] for a complex number)."))


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
