"""``tw.distributed``: collectives over tensors on several devices, run by the collectives service, and torch's
process-group API mapped onto the cluster.

Each call takes one tensor per device (same shape and dtype, distinct devices) and records one
``collective`` node per device, so it is asynchronous like every other op: ordered after the work that
produces its inputs and before the work that reads its outputs. The data moves between the workers'
buffers with MPI (shared memory to the ranks), never through the dispatcher or the client.
"""

from __future__ import annotations

import itertools
import os

from tensorwire.protocol.errors import DeviceError, DTypeError, ShapeError, TensorwireError
from tensorwire.protocol.ops import COLLECTIVES, REDUCE_OPS

from .context import current_session
from .creation import zeros as _zeros
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
    outs = [t._rec("collective", [t], {"kind": kind, "n": n, "rank": i, "key": key, **attrs})
            for i, t in enumerate(ts)]
    cap = ts[0]._s._capture
    if cap is not None:  # tw.compile: a replay takes a fresh key, as this call did
        cap.provide(outs, lambda: {"key": next(_keys)})
    return outs


def _op(op) -> str:
    op = str(getattr(op, "value", op)).lower()
    if op == "avg":
        op = "mean"
    if op not in REDUCE_OPS:
        raise ValueError(f"unknown reduction {op!r}; expected one of {', '.join(REDUCE_OPS)}")
    return op


def all_reduce(tensors, op: str = "sum", group=None, async_op: bool = False) -> list[Tensor]:
    """In place: every tensor becomes the reduction (sum, mean, max, min, prod) of all of them.

    torch's form ``all_reduce(tensor, op=ReduceOp.SUM)`` (one tensor: this process's contribution) reduces over
    the process group, which is this one process (see :func:`init_process_group`): the tensor is the result."""
    if isinstance(tensors, Tensor):
        _op(op)
        return _Work() if async_op else None
    ts = _check(tensors, "all_reduce")
    for t, r in zip(ts, _record("all_reduce", ts, op=_op(op))):
        t._assign(r)
    return ts


def broadcast(tensors, src: int = 0, group=None, async_op: bool = False) -> list[Tensor]:
    """In place: every tensor becomes a copy of ``tensors[src]`` (torch's one-tensor form: this process is the
    whole group, so the tensor already holds rank 0's value)."""
    if isinstance(tensors, Tensor):
        if src != 0:
            raise ValueError(f"broadcast: src {src} is not a rank of a world of size 1")
        return _Work() if async_op else None
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


def barrier(devices=None, group=None, async_op: bool = False, device_ids=None) -> None:
    """Wait until every listed device (default: every device of the session's cluster) has finished the work
    submitted before (and the service has seen them)."""
    if devices is None:
        devices = current_session().devices()
    ts = [_zeros((), device=d) for d in devices]
    all_reduce(ts)
    ts[0]._s.synchronize()


# ---------------------------------------------------------------------------------------------- process group
#
# torch runs one process per device and joins them in a process group; a tensorwire program is one process that
# drives every device of the cluster. So the process group is this process alone (world size 1, rank 0), and
# ``nn.parallel.DistributedDataParallel`` spreads each batch over the cluster's devices itself.


class ReduceOp:
    """torch's reduction names for :func:`all_reduce`."""

    SUM = "sum"
    AVG = "mean"
    PRODUCT = "prod"
    MIN = "min"
    MAX = "max"


class _Work:
    """What ``async_op=True`` returns: already complete (the collective of a one-process group is a no-op)."""

    def wait(self, timeout=None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


_group: dict = {}


def is_available() -> bool:
    """Distributed support is always there (the cluster's devices)."""
    return True


def init_process_group(backend: str | None = None, init_method: str | None = None, timeout=None,
                       world_size: int = -1, rank: int = -1, store=None, group_name: str = "", pg_options=None,
                       device_id=None) -> None:
    """Join the default process group: this process alone (world size 1, rank 0), whose data parallelism is
    ``DistributedDataParallel`` over the cluster's devices. ``backend`` (nccl, gloo, mpi, ...) and the rendezvous
    arguments are accepted. A launch with several processes (``WORLD_SIZE`` > 1, as ``torchrun
    --nproc_per_node=N`` sets) is refused: launch the program once and the cluster's devices do the work."""
    if _group:
        raise TensorwireError("trying to initialize the default process group twice!")
    ws = world_size if world_size != -1 else int(os.environ.get("WORLD_SIZE", "1"))
    rk = rank if rank != -1 else int(os.environ.get("RANK", "0"))
    if ws != 1 or rk != 0:
        raise TensorwireError(
            f"init_process_group: world_size={ws}, rank={rk}; tensorwire runs one process that drives every device "
            "of the cluster (DistributedDataParallel splits each batch over them), so launch the program once "
            "(world_size 1), not once per device")
    _group.update(backend=str(backend or "tensorwire").lower(), world_size=1, rank=0)


def is_initialized() -> bool:
    """Whether :func:`init_process_group` was called (and not destroyed)."""
    return bool(_group)


def _require(what: str) -> None:
    if not _group:
        raise ValueError(f"{what}: Default process group has not been initialized, please make sure to call "
                         "init_process_group.")


def destroy_process_group(group=None) -> None:
    """Leave the default process group."""
    _group.clear()


def get_rank(group=None) -> int:
    """This process's rank: 0 (the only process)."""
    _require("get_rank")
    return 0


def get_world_size(group=None) -> int:
    """The number of processes: 1 (the cluster's devices are driven by this one)."""
    _require("get_world_size")
    return 1


def get_backend(group=None) -> str:
    """The backend name given to :func:`init_process_group`."""
    _require("get_backend")
    return _group["backend"]
