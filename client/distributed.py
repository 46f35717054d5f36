"""``tw.distributed``: collectives over tensors on several devices, run by the collectives service.

Each call takes one tensor per device (same shape and dtype, distinct devices) and records one
``collective`` node per device, so it is asynchronous like every other op: ordered after the work that
produces its inputs and before the work that reads its outputs. The data moves between the workers'
buffers with MPI (shared memory to the ranks), never through the dispatcher or the client.
"""

from __future__ import annotations

import itertools

from tensorwire.protocol.errors import DeviceError, DTypeError, ShapeError
from tensorwire.protocol.ops import COLLECTIVES, REDUCE_OPS

from .tensor import Tensor

_keys = itertools.count(1)


def _check(tensors, what: str) -> list[Tensor]:
    ts = list(tensors)
    if not ts:
        raise ValueError(f"{what}: expected a non-empty list of tensors, one per device")
    s0, d0 = ts[0].shape, ts[0].dtype
    devs = [t._dev for t in ts]
    if len(set(devs)) != len(devs):
        raise DeviceError(f"{what}: each tensor must be on a distinct device, got {devs}")
    for t in ts:
        if not isinstance(t, Tensor):
            raise TypeError(f"{what}: expected tw.Tensor, got {type(t).__name__}")
        if t.shape != s0:
            raise ShapeError(f"{what}: all tensors must have the same shape, got {list(s0)} and {list(t.shape)}")
        if t.dtype is not d0:
            raise DTypeError(f"{what}: all tensors must have the same dtype, got {d0} and {t.dtype}")
        if t._s is not ts[0]._s:
            raise DeviceError(f"{what}: all tensors must belong to one session")
    return ts


def _record(kind: str, ts: list[Tensor], **attrs) -> list[Tensor]:
    if kind not in COLLECTIVES:
        raise ValueError(kind)
    key = next(_keys)
    n = len(ts)
    return [t._rec("collective", [t], {"kind": kind, "n": n, "rank": i, "key": key, **attrs})
            for i, t in enumerate(ts)]


def _op(op: str) -> str:
    op = str(op).lower()
    if op == "avg":
        op = "mean"
    if op not in REDUCE_OPS:
        raise ValueError(f"unknown reduction {op!r}; expected one of {', '.join(REDUCE_OPS)}")
    return op


def all_reduce(tensors, op: str = "sum") -> list[Tensor]:
    """In place: every tensor becomes the reduction (sum, mean, max, min, prod) of all of them."""
    ts = _check(tensors, "all_reduce")
    for t, r in zip(ts, _record("all_reduce", ts, op=_op(op))):
        t._assign(r)
    return ts


def broadcast(tensors, src: int = 0) -> list[Tensor]:
    """In place: every tensor becomes a copy of ``tensors[src]``."""
    ts = _check(tensors, "broadcast")
    if not 0 <= src < len(ts):
        raise IndexError(f"broadcast: src {src} out of range for {len(ts)} tensors")
    for t, r in zip(ts, _record("broadcast", ts, src=src)):
        t._assign(r)
    return ts


def all_gather(tensors) -> list[Tensor]:
    """Returns, on each tensor's device, ``stack(tensors)`` (shape ``(n, *shape)``)."""
    ts = _check(tensors, "all_gather")
    return _record("all_gather", ts)


def reduce_scatter(tensors, op: str = "sum") -> list[Tensor]:
    """Reduce all tensors, then give device ``i`` the ``i``-th chunk along dim 0 (``torch.tensor_split`` sizes)."""
    ts = _check(tensors, "reduce_scatter")
    return _record("reduce_scatter", ts, op=_op(op))


def barrier(devices) -> None:
    """Wait until every listed device has finished the work submitted before (and the service has seen them)."""
    from .creation import zeros

    ts = [zeros((), device=d) for d in devices]
    all_reduce(ts)
    ts[0]._s.synchronize()
