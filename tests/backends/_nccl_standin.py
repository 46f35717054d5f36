"""A stand-in for the NCCL calls of ``backends/cuda/nccl.py``, for running the backend's NCCL host code without GPUs.

It is not NCCL. :class:`StandInNccl` has :class:`~tensorwire.backends.cuda.nccl.Nccl`'s methods (raw device pointers,
element counts, ``ncclDataType_t``/``ncclRedOp_t`` values, a communicator handle and a stream) and works on the CUDA
driver stand-in's device memory (``_cuda_standin.StandInDriver.view``). Ranks in different processes really exchange
their data: through a rendezvous directory keyed by a hash of the NCCL unique id (which the collectives service made
with the real ``ncclGetUniqueId``), under ``$TENSORWIRE_SHM_DIR`` (LocalCluster's private shared-memory directory).
For its ``seq``-th call each rank writes its input to ``<seq>.<rank>`` (atomically, by rename), waits until every
rank's file is there (bounded: :data:`TIMEOUT_S`, then ``ncclSystemError``), reads them all and computes its own
result with numpy; ``ncclCommInitRank`` is the same exchange with no data (every rank must join, as in NCCL).

Its enum tables are written out from ``nccl.h`` here, not imported from the backend, so a wrong value in the
backend's tables shows as a wrong result. Fault injection: ``fail_count=N`` makes every call on ``N`` elements return
``ncclUnhandledCudaError`` (as a failing CUDA call inside NCCL would), on every rank alike.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time

import ml_dtypes
import numpy as np

TIMEOUT_S = 60.0
# nccl.h: ncclDataType_t and ncclRedOp_t
NCCL_TYPES = {0: np.int8, 1: np.uint8, 2: np.int32, 3: np.uint32, 4: np.int64, 5: np.uint64, 6: np.float16,
              7: np.float32, 8: np.float64, 9: ml_dtypes.bfloat16}
NCCL_OPS = {0: "sum", 1: "prod", 2: "max", 3: "min", 4: "avg"}
SUCCESS, UNHANDLED_CUDA_ERROR, SYSTEM_ERROR, INVALID_ARGUMENT = 0, 1, 2, 4
ERRORS = {0: b"no error", 1: b"unhandled cuda error (stand-in)", 2: b"unhandled system error (stand-in)",
          4: b"invalid argument (stand-in)", 5: b"invalid usage (stand-in)"}


class _Comm:
    def __init__(self, folder: str, nranks: int, rank: int):
        self.folder, self.nranks, self.rank, self.seq = folder, nranks, rank, 0
        self.aborted = False


class StandInNccl:
    """NCCL's calls on the driver stand-in's memory, exchanging through files (see the module doc)."""

    def __init__(self, driver, stream: int = 1, fail_count: int | None = None):
        self.driver, self.stream, self.fail_count = driver, stream, fail_count
        self.comms: dict[int, _Comm] = {}
        self.calls: dict[str, int] = {}
        self.last = b""

    # -- the Nccl interface ------------------------------------------------------------------------------------------
    def check(self, result: int, what: str) -> None:
        from tensorwire.backends.cuda.nccl import NcclError

        if result != SUCCESS:
            raise NcclError(f"{what} failed (stand-in result {result}: {ERRORS.get(result, b'?').decode()}; "
                            f"{self.last.decode(errors='replace')})", result)

    def version(self) -> int:
        return 22809

    def unique_id(self) -> bytes:
        return os.urandom(128)

    def comm_init_rank(self, nranks: int, uid: bytes, rank: int) -> int:
        self._count("ncclCommInitRank")
        base = os.environ.get("TENSORWIRE_SHM_DIR") or tempfile.gettempdir()
        folder = os.path.join(base, "nccl-standin-" + hashlib.sha256(uid).hexdigest()[:24])
        os.makedirs(folder, exist_ok=True)
        comm = _Comm(folder, nranks, rank)
        result = self._exchange(comm, np.zeros(0, np.uint8))
        self.check(result if isinstance(result, int) else SUCCESS, f"ncclCommInitRank (rank {rank} of {nranks})")
        handle = len(self.comms) + 1
        self.comms[handle] = comm
        return handle

    def all_reduce(self, send, recv, count, datatype, op, comm, stream) -> int:
        return self._collective("ncclAllReduce", send, recv, count, count, datatype, op, comm, stream)

    def broadcast(self, send, recv, count, datatype, root, comm, stream) -> int:
        return self._collective("ncclBroadcast", send, recv, count, count, datatype, None, comm, stream, root=root)

    def all_gather(self, send, recv, sendcount, datatype, comm, stream) -> int:
        c = self.comms.get(comm)
        total = sendcount * c.nranks if c else 0
        return self._collective("ncclAllGather", send, recv, sendcount, total, datatype, None, comm, stream)

    def reduce_scatter(self, send, recv, recvcount, datatype, op, comm, stream) -> int:
        c = self.comms.get(comm)
        total = recvcount * c.nranks if c else 0
        return self._collective("ncclReduceScatter", send, recv, total, recvcount, datatype, op, comm, stream)

    def comm_destroy(self, comm) -> int:
        self.comms.pop(comm, None)
        return SUCCESS

    def comm_abort(self, comm) -> int:
        self._count("ncclCommAbort")
        c = self.comms.pop(comm, None)
        if c is not None:
            c.aborted = True
        return SUCCESS

    # -- the data path ---------------------------------------------------------------------------------------------
    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def _collective(self, what, send, recv, n_in, n_out, datatype, op, comm, stream, root=None) -> int:
        self._count(what)
        c = self.comms.get(comm)
        if c is None or datatype not in NCCL_TYPES or (op is not None and op not in NCCL_OPS) or stream != self.stream:
            self.last = f"{what}: bad communicator, datatype {datatype}, op {op} or stream {stream}".encode()
            return INVALID_ARGUMENT
        if root is not None and not 0 <= root < c.nranks:
            self.last = f"{what}: root {root} of {c.nranks} ranks".encode()
            return INVALID_ARGUMENT
        if self.fail_count is not None and n_in == self.fail_count:
            self.last = f"{what} on {n_in} elements: the injected failure".encode()
            return UNHANDLED_CUDA_ERROR
        dt = np.dtype(NCCL_TYPES[datatype])
        self.driver.drain()  # the work queued before the collective on its stream (the stand-in exchanges at once)
        mine = self.driver.view(send, n_in * dt.itemsize).view(dt).copy()
        parts = self._exchange(c, mine)
        if isinstance(parts, int):
            return parts
        parts = [p.view(dt) for p in parts]
        if what == "ncclBroadcast":
            out = parts[root]
        elif what == "ncclAllGather":
            out = np.concatenate(parts)
        else:
            red = _reduce(np.stack(parts), NCCL_OPS[op], dt)
            out = red if what == "ncclAllReduce" else red[c.rank * n_out:(c.rank + 1) * n_out]
        self.driver.view(recv, n_out * dt.itemsize)[:] = np.ascontiguousarray(out).view(np.uint8)
        return SUCCESS

    def _exchange(self, c: _Comm, data: np.ndarray):
        """Every rank's ``data`` for this call of the communicator (in rank order), or an NCCL error code."""
        seq = c.seq
        c.seq += 1
        mine = os.path.join(c.folder, f"{seq}.{c.rank}")
        with open(mine + ".tmp", "wb") as f:
            f.write(data.tobytes())
        os.replace(mine + ".tmp", mine)
        if seq >= 2:  # every rank wrote seq - 1, so every rank has read seq - 2
            old = os.path.join(c.folder, f"{seq - 2}.{c.rank}")
            if os.path.exists(old):
                os.unlink(old)
        deadline = time.monotonic() + TIMEOUT_S
        paths = [os.path.join(c.folder, f"{seq}.{r}") for r in range(c.nranks)]
        while not all(os.path.exists(p) for p in paths):
            if time.monotonic() > deadline:
                self.last = f"rank {c.rank}: the other ranks did not reach call {seq} in {TIMEOUT_S:g}s".encode()
                return SYSTEM_ERROR
            time.sleep(0.001)
        out = []
        for p in paths:
            with open(p, "rb") as f:
                out.append(np.frombuffer(f.read(), np.uint8))
        return out


def _reduce(stack: np.ndarray, op: str, dt: np.dtype) -> np.ndarray:
    """The reduction as NCCL computes it: 16-bit floats are added (or multiplied) one rank at a time, in ring order,
    each partial result rounded to the 16-bit type, as each hop of NCCL's ring does; so with three or more ranks a
    16-bit sum can differ from one rounded once."""
    if dt in (np.float16, ml_dtypes.bfloat16) and op in ("sum", "prod", "avg"):
        acc = stack[0]
        for part in stack[1:]:
            a, b = acc.astype(np.float32), part.astype(np.float32)
            acc = (a * b if op == "prod" else a + b).astype(dt)
        return (acc.astype(np.float32) / len(stack)).astype(dt) if op == "avg" else acc
    wide = np.float32 if dt in (np.float16, ml_dtypes.bfloat16) else dt
    x = stack.astype(wide)
    if op == "sum":
        r = x.sum(axis=0)
    elif op == "prod":
        r = x.prod(axis=0)
    elif op == "max":
        r = x.max(axis=0)
    elif op == "min":
        r = x.min(axis=0)
    else:  # avg: floating types only here (NCCL's integer average truncates)
        r = x.sum(axis=0) / len(stack)
    return r.astype(dt)
