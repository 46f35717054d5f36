"""NCCL for collectives whose devices are all CUDA: a ctypes binding and the worker's side of the data path.

The library is the ``nvidia-nccl-cu12`` wheel's ``libnccl.so.2`` (the ``cuda`` extra), found by ``cuda.pathfinder``
like NVRTC and cuBLAS and loaded on first use through :func:`load_nccl`, the one entry point (tests may replace
it). Nothing here loads at import time.

The protocol around it (see ``docs/architecture.md``, "Collectives over NCCL"):

* A CUDA worker whose NCCL loads registers ``"collectives": "nccl"``; a collectives rank whose NCCL loads registers
  ``"transports": ["nccl"]``. The dispatcher sends a collective over NCCL when every device of its group and every
  rank serving them says so (the run message lists it in ``coll_direct``); otherwise the shared-memory path runs.
* The worker keeps its input on the device and answers ``coll_ready`` with ``"direct": true`` (no file) when
  :meth:`NcclTransport.supports` takes the collective; every part of a group decides alike (same kind, op, dtype and
  shape, which the dispatcher checks before it releases the ranks).
* Rank 0 of the group (in the collectives service) makes the NCCL unique id (``ncclGetUniqueId``) once per group and
  broadcasts it over MPI to the group's ranks; each rank hands it to its worker in ``coll_done`` (``"direct"``:
  the id, the rank, the group's devices).
* The worker builds the group's communicator once (``ncclCommInitRank``) and queues the collective on its stream on
  device buffers (:meth:`NcclTransport.run`); later kernels on the stream are ordered after it.
* A failed NCCL call fails that collective with :class:`NcclError` (a :class:`DeviceError`). A call that leaves the
  communicator unusable (anything but an invalid argument) aborts it (``ncclCommAbort``), and the worker names the
  aborted id in its next ``coll_ready``s (``"broken"``) so that rank 0 makes a new one; a lost worker makes rank 0
  forget the ids of its groups too.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import threading

from tensorwire.collectives.network import bind_env
from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DeviceError

from .wheels import library_path

log = logging.getLogger("tensorwire.nccl")

INSTALL = 'pip install -e ".[cuda]" (or pip install nvidia-nccl-cu12; nvidia-nccl-cu13 with CUDA 13)'
TRANSPORT = "nccl"
UNIQUE_ID_BYTES = 128  # NCCL_UNIQUE_ID_BYTES

# ncclResult_t (nccl.h)
SUCCESS, UNHANDLED_CUDA_ERROR, SYSTEM_ERROR, INTERNAL_ERROR, INVALID_ARGUMENT, INVALID_USAGE, REMOTE_ERROR, \
    IN_PROGRESS = range(8)
RESULT_NAMES = {0: "ncclSuccess", 1: "ncclUnhandledCudaError", 2: "ncclSystemError", 3: "ncclInternalError",
                4: "ncclInvalidArgument", 5: "ncclInvalidUsage", 6: "ncclRemoteError", 7: "ncclInProgress"}
#: results after which the communicator still works (the call was refused before anything was queued)
HARMLESS = frozenset({INVALID_ARGUMENT})

# ncclDataType_t (nccl.h): ncclInt8 0, ncclUint8 1, ncclInt32 2, ncclUint32 3, ncclInt64 4, ncclUint64 5,
# ncclFloat16 6, ncclFloat32 7, ncclFloat64 8, ncclBfloat16 9
DATATYPES = {D.int8: 0, D.uint8: 1, D.int32: 2, D.int64: 4, D.float16: 6, D.float32: 7, D.float64: 8,
             D.bfloat16: 9, D.bool_: 1}  # bool moves as uint8 (its reductions are mapped below)
# ncclRedOp_t (nccl.h): ncclSum 0, ncclProd 1, ncclMax 2, ncclMin 3, ncclAvg 4
SUM, PROD, MAX, MIN, AVG = range(5)
REDOPS = {"sum": SUM, "prod": PROD, "max": MAX, "min": MIN, "mean": AVG}
#: bool reductions as the shared-memory path computes them (sum and max: any; prod, min and mean: all)
BOOL_REDOPS = {"sum": MAX, "max": MAX, "prod": MIN, "min": MIN, "mean": MIN}


class NcclError(DeviceError):
    """An NCCL call failed (the message names the call, NCCL's result and its text)."""

    def __init__(self, message: str, result: int = INTERNAL_ERROR):
        super().__init__(message)
        self.result = result


class UniqueId(ctypes.Structure):
    """``ncclUniqueId``: 128 opaque bytes, passed by value."""

    _fields_ = [("internal", ctypes.c_char * UNIQUE_ID_BYTES)]


class Nccl:
    """The NCCL calls tensorwire makes, on ``libnccl.so.2`` through ctypes (pointers and streams are ints)."""

    def __init__(self, path: str):
        lib = ctypes.CDLL(path)
        p, i, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
        self.lib = lib
        lib.ncclGetVersion.argtypes = [ctypes.POINTER(i)]
        lib.ncclGetUniqueId.argtypes = [ctypes.c_char_p]
        lib.ncclCommInitRank.argtypes = [ctypes.POINTER(p), i, UniqueId, i]
        lib.ncclAllReduce.argtypes = [p, p, sz, i, i, p, p]
        lib.ncclBroadcast.argtypes = [p, p, sz, i, i, p, p]
        lib.ncclAllGather.argtypes = [p, p, sz, i, p, p]
        lib.ncclReduceScatter.argtypes = [p, p, sz, i, i, p, p]
        lib.ncclCommDestroy.argtypes = [p]
        lib.ncclCommAbort.argtypes = [p]
        lib.ncclGetErrorString.argtypes = [i]
        lib.ncclGetErrorString.restype = ctypes.c_char_p
        for f in ("ncclGetVersion", "ncclGetUniqueId", "ncclCommInitRank", "ncclAllReduce", "ncclBroadcast",
                  "ncclAllGather", "ncclReduceScatter", "ncclCommDestroy", "ncclCommAbort"):
            getattr(lib, f).restype = i
        self.last_error = getattr(lib, "ncclGetLastError", None)  # NCCL >= 2.13: the detail of the last failure
        if self.last_error is not None:
            self.last_error.argtypes = [p]
            self.last_error.restype = ctypes.c_char_p

    def check(self, result: int, what: str) -> None:
        """Raise :class:`NcclError` unless ``result`` is ``ncclSuccess``."""
        if result == SUCCESS:
            return
        text = (self.lib.ncclGetErrorString(result) or b"").decode(errors="replace")
        detail = (self.last_error(None) or b"").decode(errors="replace").strip() if self.last_error else ""
        name = RESULT_NAMES.get(result, f"ncclResult {result}")
        raise NcclError(f"{what} failed ({name}: {text}{'; ' + detail if detail else ''})", result)

    def version(self) -> int:
        """``ncclGetVersion``: e.g. 22809 for 2.28.9 (a host-only call)."""
        v = ctypes.c_int()
        self.check(self.lib.ncclGetVersion(ctypes.byref(v)), "ncclGetVersion")
        return v.value

    def unique_id(self) -> bytes:
        """``ncclGetUniqueId``: a new id (128 bytes); the calling process hosts the id's bootstrap root."""
        buf = ctypes.create_string_buffer(UNIQUE_ID_BYTES)
        self.check(self.lib.ncclGetUniqueId(buf), "ncclGetUniqueId")
        return buf.raw

    def comm_init_rank(self, nranks: int, uid: bytes, rank: int) -> int:
        """``ncclCommInitRank`` on the calling thread's current CUDA device; blocks until every rank joined."""
        comm, handle = ctypes.c_void_p(), UniqueId()
        ctypes.memmove(ctypes.addressof(handle), uid, UNIQUE_ID_BYTES)
        self.check(self.lib.ncclCommInitRank(ctypes.byref(comm), nranks, handle, rank),
                   f"ncclCommInitRank (rank {rank} of {nranks})")
        return comm.value

    def all_reduce(self, send: int, recv: int, count: int, datatype: int, op: int, comm: int, stream: int) -> int:
        return self.lib.ncclAllReduce(send, recv, count, datatype, op, comm, stream)

    def broadcast(self, send: int, recv: int, count: int, datatype: int, root: int, comm: int, stream: int) -> int:
        return self.lib.ncclBroadcast(send, recv, count, datatype, root, comm, stream)

    def all_gather(self, send: int, recv: int, sendcount: int, datatype: int, comm: int, stream: int) -> int:
        return self.lib.ncclAllGather(send, recv, sendcount, datatype, comm, stream)

    def reduce_scatter(self, send: int, recv: int, recvcount: int, datatype: int, op: int, comm: int,
                       stream: int) -> int:
        return self.lib.ncclReduceScatter(send, recv, recvcount, datatype, op, comm, stream)

    def comm_destroy(self, comm: int) -> int:
        return self.lib.ncclCommDestroy(comm)

    def comm_abort(self, comm: int) -> int:
        return self.lib.ncclCommAbort(comm)


_NCCL: Nccl | None = None
_NCCL_LOCK = threading.Lock()


def load_nccl() -> Nccl:
    """The process's :class:`Nccl` (loaded once); :class:`DeviceError` naming the cause when NCCL is not installed.

    NCCL's bootstrap sockets bind the interface the collectives' MPI job uses (``NCCL_SOCKET_IFNAME``, set by
    :func:`tensorwire.collectives.network.bind_env` unless the operator set it): loopback by default."""
    global _NCCL
    with _NCCL_LOCK:
        if _NCCL is None:
            bind_env()  # before NCCL initialises (it reads its environment once)
            try:
                _NCCL = Nccl(library_path("nccl"))
            except Exception as e:  # ImportError, or the library missing (cuda.pathfinder's DynamicLibNotFoundError)
                raise DeviceError(f"NCCL is not available ({type(e).__name__}: {' '.join(str(e).split())}); "
                                  f"{INSTALL}") from None
        return _NCCL


def id_tag(uid: bytes) -> str:
    """A short name for a unique id (what ``coll_ready``'s ``broken`` lists; the id itself stays private)."""
    return hashlib.sha256(uid).hexdigest()[:16]


class NcclTransport:
    """A CUDA worker's side of NCCL collectives: one communicator per group of devices, collectives queued on the
    device's stream on device buffers. Calls may come from any of the worker's threads: each holds the runtime's
    binding (the GPU current on the calling thread, NCCL's device; see ``gpu_runtime.ThreadBinding``)."""

    name = TRANSPORT
    MAX_BROKEN = 16

    def __init__(self, device, nccl: Nccl):
        self.device, self.nccl = device, nccl
        self.comms: dict[tuple, tuple[bytes, int]] = {}  # group devices -> (unique id, ncclComm_t)
        self.broken: list[str] = []  # tags of ids whose communicator this worker aborted, newest last

    @staticmethod
    def supports(kind: str, op: str | None, dtype: D.DType, shape: tuple, n: int, out_dtype: D.DType) -> bool:
        """Whether NCCL runs this collective as the shared-memory path would (else that path runs; 16-bit float sums
        and products over three or more ranks round at each hop of NCCL's ring, as torch.distributed's NCCL backend
        does, where the shared-memory path rounds once):
        dtypes NCCL has (bool as uint8 with any/all), ``mean`` only for floating types (NCCL's integer average
        truncates; ours floors), and ``reduce_scatter`` only when dim 0 splits evenly (NCCL's chunks are equal)."""
        if dtype not in DATATYPES or out_dtype is not dtype:
            return False
        if kind in ("all_reduce", "reduce_scatter"):
            if op not in REDOPS or (op == "mean" and not dtype.is_floating_point and dtype is not D.bool_):
                return False
        if kind == "reduce_scatter":
            return len(shape) >= 1 and shape[0] % n == 0
        return kind in ("all_reduce", "broadcast", "all_gather")

    def _comm(self, group: tuple, uid: bytes, rank: int) -> int:
        held = self.comms.get(group)
        if held is not None and held[0] == uid:
            return held[1]
        if held is not None:  # rank 0 made a new id for this group: the old communicator is done with
            self._abort(group)
        comm = self.nccl.comm_init_rank(len(group), uid, rank)
        self.comms[group] = (uid, comm)
        log.info("%s: NCCL communicator for %s (rank %d of %d)", group[rank], ",".join(group), rank, len(group))
        return comm

    def _abort(self, group: tuple) -> None:
        uid, comm = self.comms.pop(group)
        self.broken = [*self.broken, id_tag(uid)][-self.MAX_BROKEN:]
        try:
            self.nccl.comm_abort(comm)
        except Exception:  # noqa: BLE001 - the communicator is being thrown away
            log.exception("ncclCommAbort failed")

    def run(self, kind: str, op: str | None, src: int, buf, group: tuple, uid: bytes, rank: int, out_shape: tuple):
        """Queue collective ``kind`` on the stream for this device's input ``buf``; returns the output buffer.

        ``group`` is the collective's devices in rank order (this device is ``group[rank]``), ``uid`` the group's
        NCCL unique id from the collectives service."""
        if len(uid) != UNIQUE_ID_BYTES or not 0 <= rank < len(group):
            raise NcclError(f"malformed NCCL id or rank from the collectives service (rank {rank} of {len(group)})",
                            INVALID_ARGUMENT)
        rt = self.device.runtime
        with rt.bound:  # NCCL takes the calling thread's current device
            return self._run(rt, kind, op, src, buf, group, uid, rank, out_shape)

    def _run(self, rt, kind, op, src, buf, group, uid, rank, out_shape):
        n = len(group)
        count = buf.nbytes // buf.dtype.itemsize
        out = rt.empty(out_shape, buf.dtype)
        if count == 0:
            return out
        comm = self._comm(group, uid, rank)
        dt = DATATYPES[buf.dtype]
        red = (BOOL_REDOPS if buf.dtype is D.bool_ else REDOPS).get(op)
        stream = int(rt.stream)
        nc = self.nccl
        if kind == "all_reduce":
            what, result = "ncclAllReduce", nc.all_reduce(buf.ptr, out.ptr, count, dt, red, comm, stream)
        elif kind == "broadcast":
            what, result = "ncclBroadcast", nc.broadcast(buf.ptr, out.ptr, count, dt, int(src), comm, stream)
        elif kind == "all_gather":
            what, result = "ncclAllGather", nc.all_gather(buf.ptr, out.ptr, count, dt, comm, stream)
        elif kind == "reduce_scatter":
            # dim 0 splits evenly (supports): every rank's chunk is count / n elements
            what, result = "ncclReduceScatter", nc.reduce_scatter(buf.ptr, out.ptr, count // n, dt, red, comm, stream)
        else:
            raise NcclError(f"NCCL has no collective {kind!r}", INVALID_ARGUMENT)
        if result != SUCCESS and result not in HARMLESS:
            self._abort(group)
        nc.check(result, f"{what} ({buf.dtype.name}, {count} elements) on {group[rank]}")
        return out


def transport_for(device) -> NcclTransport | None:
    """The NCCL transport of a CUDA device, or None (with the reason in the log) when NCCL does not load."""
    try:
        nccl = load_nccl()
        version = nccl.version()
    except DeviceError as e:
        log.warning("cuda:%d: collectives go through host shared memory: %s", device.index, e.message)
        return None
    log.info("cuda:%d: NCCL %d.%d.%d for collectives among CUDA devices", device.index, version // 10000,
             version // 100 % 100, version % 100)
    return NcclTransport(device, nccl)
