"""Collectives among CUDA devices over NCCL: the real library's host-only calls, and the whole protocol on stand-ins.

Without GPUs (this machine, CI):

* the ``nvidia-nccl-cu12`` wheel's real ``libnccl`` is loaded through the backend's binding (``load_nccl``) in a
  child process: ``ncclGetVersion``, ``ncclGetUniqueId`` (its bootstrap root listens on loopback only), errors as
  :class:`NcclError`, and a real ``ncclCommInitRank`` failing typed for lack of a GPU;
* a real cluster (dispatcher, collectives service under MPI, a cpu:0 worker) with two worker processes ``cuda:0`` and
  ``cuda:1`` that run the CUDA backend on the driver stand-in and the NCCL stand-in (``_nccl_standin.py``; it is not
  NCCL: it exchanges the ranks' data through files keyed by the unique id, which the collectives service made with
  the real ``ncclGetUniqueId`` and broadcast over MPI). Every collective among the two goes through the backend's
  own NCCL host code (``NcclTransport``) and never through host shared memory; a mixed cpu/cuda group still does;
  failures are typed and the cluster keeps serving.

Tests marked ``gpu`` run real NCCL communicators; they skip with the reason elsewhere.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tensorwire as tw
from tensorwire.backends.cuda import CUDABackend
from tensorwire.protocol.shm_paths import shm_prefix
from tests.backends._pocl import opencl_available

HERE = os.path.dirname(os.path.abspath(__file__))
STANDIN = os.path.join(HERE, "_cuda_standin.py")
FAIL_COUNT = 4099  # the NCCL stand-in fails every call on this many elements (on every rank)
DEVICES = ["cpu:0", "cuda:0", "cuda:1"]  # the collectives service's ranks, in this order

_have_mpi = importlib.util.find_spec("mpi4py") is not None


def _probe() -> dict:
    """The real NCCL's answers, from a child process (NCCL reads its environment once per process)."""
    code = r"""
import json, os
from tensorwire.backends.cuda import nccl as N
out = {}
try:
    lib = N.load_nccl()
except Exception as e:
    print(json.dumps({"missing": str(e)})); raise SystemExit
out["version"] = lib.version()
out["env"] = os.environ.get("NCCL_SOCKET_IFNAME")
a, b = lib.unique_id(), lib.unique_id()
out["id_bytes"], out["ids_differ"] = len(a), a != b
port = int.from_bytes(a[10:12], "big")  # ncclBootstrapHandle: magic, then the root's sockaddr_in
with open("/proc/net/tcp") as f:  # the root's listener: local address (hex, little-endian IPv4) and state 0A
    out["listeners"] = [line.split()[1] for line in f.readlines()[1:] if line.split()[3] == "0A"
                        and int(line.split()[1].split(":")[1], 16) == port]
try:
    lib.check(4, "a test call")
except N.NcclError as e:
    out["check"] = [e.code, str(e), e.result]
try:
    lib.comm_init_rank(1, a, 0)
    out["init"] = "ok"
except N.NcclError as e:
    out["init"] = [e.code, str(e)]
print(json.dumps(out))
"""
    env = {k: v for k, v in os.environ.items() if k != "NCCL_SOCKET_IFNAME"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


PROBE = _probe()
needs_nccl = pytest.mark.skipif("missing" in PROBE, reason=f"the NCCL wheel is not here: {PROBE.get('missing')}")


# -- the real library, host-only calls --------------------------------------------------------------------------------

#: the NCCL wheels, by the CUDA major they are built for (the ``cuda`` and ``cuda13`` extras)
NCCL_WHEELS = ("nvidia-nccl-cu12", "nvidia-nccl-cu13")


def _nccl_wheel_version(version) -> str:
    """The installed NCCL wheel's version (``importlib.metadata.version``), whichever CUDA major it is for."""
    from importlib.metadata import PackageNotFoundError

    for name in NCCL_WHEELS:
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    raise AssertionError(f"libnccl loaded, but none of {NCCL_WHEELS} is installed")


@needs_nccl
def test_the_wheels_libnccl_answers_its_version_and_makes_unique_ids_on_loopback():
    from importlib.metadata import version

    major, minor, patch = (int(x) for x in _nccl_wheel_version(version).split(".")[:3])
    assert PROBE["version"] == major * 10000 + minor * 100 + patch, PROBE
    assert PROBE["id_bytes"] == 128 and PROBE["ids_differ"], PROBE
    assert PROBE["env"] == "lo", PROBE  # load_nccl bound NCCL's sockets to the collectives' interface
    assert PROBE["listeners"] and all(x.startswith("0100007F:") for x in PROBE["listeners"]), PROBE  # 127.0.0.1


@needs_nccl
def test_nccl_errors_are_typed_and_name_the_call():
    code, msg, result = PROBE["check"]
    assert code == "DeviceError" and result == 4 and msg.startswith("a test call failed (ncclInvalidArgument: "), msg
    if CUDABackend().devices()[0].available:
        pytest.skip("this host has a GPU: ncclCommInitRank does not fail here")
    code, msg = PROBE["init"]
    assert code == "DeviceError" and "ncclCommInitRank (rank 0 of 1) failed (" in msg, msg


# -- the protocol on the stand-ins ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster():
    """cpu:0, stand-in cuda:0 and cuda:1 worker processes, and a collectives service with a rank for each."""
    if not _have_mpi:
        pytest.skip("mpi4py/mpich not installed (pip install 'tensorwire[mpi]')")
    if "missing" in PROBE:
        pytest.skip(f"the collectives service makes NCCL ids with the real library, which is not here: "
                    f"{PROBE['missing']}")
    ok, why = opencl_available()
    if not ok:  # (a GPU host may lack PoCL: the H200's image, session 37)
        pytest.skip(f"the CUDA stand-in runs kernels on OpenCL: {why}")
    from tensorwire.collectives.network import launcher

    with tw.LocalCluster(devices=["cpu:0"], collectives=False, autograd=False) as c:
        for d in ("cuda:0", "cuda:1"):
            c.start_service(d, [sys.executable, STANDIN, "worker", "--device", d, "--dispatcher", c.service_address,
                                "--threads", "1", "--standin-nccl-fail-count", str(FAIL_COUNT)])
        c.start_service("collectives", [*launcher(len(DEVICES)), sys.executable, "-m", "tensorwire.cli",
                                        "collectives", "--dispatcher", c.service_address, "--devices",
                                        ",".join(DEVICES)], launcher=True)
        yield c


def _shm_files(c, device: str) -> list[str]:
    """The shared-memory files the worker of ``device`` made for collectives (``<prefix>-N``; its data plane's pool,
    ``<prefix>-io-N``, is for clients' uploads and fetches on this host, not collectives)."""
    prefix = os.path.basename(shm_prefix(c.services[device].proc.pid, device))
    return glob.glob(os.path.join(c.env["TENSORWIRE_SHM_DIR"], prefix + "-[0-9]*"))


def _rendezvous(c) -> list[str]:
    """The NCCL stand-in's rendezvous folders: one per communicator (per unique id)."""
    return glob.glob(os.path.join(c.env["TENSORWIRE_SHM_DIR"], "nccl-standin-*"))


def _inputs(dtype: str, shape, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return [rng.random(shape) > 0.5 for _ in range(2)]
    if dtype.startswith(("int", "uint")):
        return [rng.integers(-20 if dtype.startswith("int") else 0, 20, shape).astype(dtype) for _ in range(2)]
    return [rng.standard_normal(shape).astype(dtype) for _ in range(2)]


def _close(got, want, dtype):
    tol = 2e-2 if dtype in ("float16", "bfloat16") else 1e-6
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=tol, atol=tol)


# (kind, op, dtype): each NCCL datatype once, each reduction once, bool's mapped reductions; sampled, not the full
# product (every case costs a round trip through five processes)
CASES = [("all_reduce", "sum", "float32"), ("all_reduce", "max", "int32"), ("all_reduce", "min", "int64"),
         ("all_reduce", "prod", "float64"), ("all_reduce", "mean", "float32"), ("all_reduce", "sum", "float16"),
         ("all_reduce", "mean", "bfloat16"), ("all_reduce", "sum", "int8"), ("all_reduce", "max", "uint8"),
         ("all_reduce", "sum", "bool"), ("all_reduce", "prod", "bool"), ("broadcast", None, "float32"),
         ("broadcast", None, "int64"), ("all_gather", None, "float32"), ("all_gather", None, "bool"),
         ("reduce_scatter", "sum", "float32"), ("reduce_scatter", "mean", "float64")]
NP_REDUCE = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod, "mean": np.mean}


def test_collectives_among_cuda_devices_run_over_the_nccl_standin_not_shared_memory(session, cluster):
    shape = (6, 5)
    for i, (kind, op, dtype) in enumerate(CASES):
        arrs = _inputs(dtype, shape, seed=i)
        parts = [tw.tensor(a, device=d) for a, d in zip(arrs, ("cuda:0", "cuda:1"))]
        stacked = np.stack(arrs)
        if kind == "all_reduce":
            tw.distributed.all_reduce(parts, op=op)
            wide = stacked.astype(np.float64) if dtype != "bool" else stacked
            want = [NP_REDUCE[op](wide, axis=0).astype(dtype)] * 2
            if dtype == "bool":
                want = [(np.any if op == "sum" else np.all)(stacked, axis=0)] * 2
            outs = parts
        elif kind == "broadcast":
            tw.distributed.broadcast(parts, src=1)
            want, outs = [arrs[1]] * 2, parts
        elif kind == "all_gather":
            outs = tw.distributed.all_gather(parts)
            want = [stacked] * 2
        else:
            outs = tw.distributed.reduce_scatter(parts, op=op)
            red = NP_REDUCE[op](stacked.astype(np.float64), axis=0).astype(dtype)
            want = [red[:3], red[3:]]
        for o, w, d in zip(outs, want, ("cuda:0", "cuda:1")):
            assert o.device == d and o.dtype.name == dtype, (kind, op, dtype, o.device, o.dtype)
            _close(o.numpy(), w, dtype) if dtype != "bool" else np.testing.assert_array_equal(o.numpy(), w)
    assert _shm_files(cluster, "cuda:0") == [] and _shm_files(cluster, "cuda:1") == []  # nothing through the host
    assert len(_rendezvous(cluster)) == 1  # one communicator for the group, made once, reused by every collective


def test_what_nccl_cannot_do_exactly_still_works_through_shared_memory(session, cluster):
    """int16 (no NCCL type), an integer mean (NCCL's truncates) and an uneven reduce_scatter (NCCL's chunks are
    equal) take the shared-memory path, with the same results as on CPU devices."""
    a, b = _inputs("int16", (5, 3), seed=7)
    parts = [tw.tensor(a, device="cuda:0"), tw.tensor(b, device="cuda:1")]
    tw.distributed.all_reduce(parts, op="sum")
    for p in parts:
        np.testing.assert_array_equal(p.numpy(), a + b)
    x, y = _inputs("float32", (5, 3), seed=8)
    outs = tw.distributed.reduce_scatter([tw.tensor(x, device="cuda:0"), tw.tensor(y, device="cuda:1")])
    np.testing.assert_allclose(outs[0].numpy(), (x + y)[:3], rtol=1e-6)
    np.testing.assert_allclose(outs[1].numpy(), (x + y)[3:], rtol=1e-6)
    assert _shm_files(cluster, "cuda:0") and _shm_files(cluster, "cuda:1")


def test_a_mixed_cpu_cuda_group_keeps_the_shared_memory_path(session, cluster):
    a, b = _inputs("float32", (4, 4), seed=3)
    parts = [tw.tensor(a, device="cpu:0"), tw.tensor(b, device="cuda:0")]
    tw.distributed.all_reduce(parts, op="sum")
    for p in parts:
        np.testing.assert_allclose(p.numpy(), a + b, rtol=1e-6)
    gathered = tw.distributed.all_gather([tw.tensor(a, device="cuda:1"), tw.tensor(b, device="cpu:0"),
                                          tw.tensor(a * 2, device="cuda:0")])
    for g in gathered:
        np.testing.assert_allclose(g.numpy(), np.stack([a, b, a * 2]), rtol=1e-6)
    assert _shm_files(cluster, "cuda:0")  # the cuda worker staged its part in shared memory for MPI


def test_a_failing_nccl_call_fails_that_collective_typed_and_the_next_gets_a_new_communicator(session, cluster):
    before = set(_rendezvous(cluster))
    a, b = _inputs("float32", (FAIL_COUNT,), seed=5)
    keep = tw.tensor(a, device="cuda:0") * 1
    parts = [tw.tensor(a, device="cuda:0"), tw.tensor(b, device="cuda:1")]
    tw.distributed.all_reduce(parts, op="sum")
    for p in parts:
        with pytest.raises(tw.DeviceError, match=r"ncclAllReduce \(float32, 4099 elements\) on cuda:\d failed "
                                                 r"\(stand-in result 1: unhandled cuda error"):
            p.numpy()
    np.testing.assert_array_equal(keep.numpy(), a)  # the session's other tensors are untouched
    # the workers aborted that communicator and said so: the next collective runs on a new one
    x, y = _inputs("float32", (8,), seed=6)
    parts = [tw.tensor(x, device="cuda:0"), tw.tensor(y, device="cuda:1")]
    tw.distributed.all_reduce(parts, op="max")
    for p in parts:
        np.testing.assert_allclose(p.numpy(), np.maximum(x, y))
    assert len(set(_rendezvous(cluster)) - before) == 1


def test_when_the_service_cannot_make_an_nccl_id_the_collective_fails_typed_and_the_service_serves_on(
        session, cluster):
    """A collectives service whose NCCL finds no network interface (a misconfigured ``NCCL_SOCKET_IFNAME``): each
    all-CUDA collective fails on every part with the cause; mixed collectives still run on the same MPI job."""
    from tensorwire.collectives.network import launcher

    cluster.services["collectives"].stop()
    old = cluster.env.get("NCCL_SOCKET_IFNAME")
    cluster.env["NCCL_SOCKET_IFNAME"] = "tw-no-such-if"
    try:
        cluster.start_service("collectives", [*launcher(len(DEVICES)), sys.executable, "-m", "tensorwire.cli",
                                              "collectives", "--dispatcher", cluster.service_address, "--devices",
                                              ",".join(DEVICES)], launcher=True)
    finally:
        if old is None:
            cluster.env.pop("NCCL_SOCKET_IFNAME")
        else:
            cluster.env["NCCL_SOCKET_IFNAME"] = old
    for _ in range(2):
        parts = [tw.tensor(np.ones(3, np.float32), device=d) for d in ("cuda:0", "cuda:1")]
        tw.distributed.all_reduce(parts)
        for p in parts:
            with pytest.raises(tw.DeviceError, match=r"NCCL for cuda:0, cuda:1: the collectives service could not "
                                                     r"make the group's unique id \(ncclGetUniqueId failed"):
                p.numpy()
    parts = [tw.tensor(np.ones(3, np.float32), device=d) for d in ("cpu:0", "cuda:1")]
    tw.distributed.all_reduce(parts)
    assert [p.numpy().tolist() for p in parts] == [[2.0] * 3] * 2
    assert cluster.services["collectives"].alive() and cluster.services["cuda:0"].alive()


# -- real GPUs --------------------------------------------------------------------------------------------------------

GPUS = [d for d in CUDABackend().devices() if d.available]


@pytest.mark.gpu
@pytest.mark.skipif(not GPUS, reason=f"no usable CUDA GPU here: {CUDABackend().devices()[0].reason}")
@needs_nccl
def test_a_real_single_rank_communicator_runs_every_collective_on_a_gpu():
    from tensorwire.backends.cuda import nccl as N
    from tensorwire.protocol import dtypes as D

    dev = CUDABackend().open(0)
    t = N.transport_for(dev)
    assert t is not None
    uid = N.load_nccl().unique_id()
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    buf = dev.upload(x)
    group = ("cuda:0",)
    assert t.supports("all_reduce", "sum", D.float32, x.shape, 1, D.float32)
    np.testing.assert_array_equal(dev.download(t.run("all_reduce", "sum", 0, buf, group, uid, 0, x.shape)), x)
    np.testing.assert_array_equal(dev.download(t.run("broadcast", None, 0, buf, group, uid, 0, x.shape)), x)
    np.testing.assert_array_equal(dev.download(t.run("all_gather", None, 0, buf, group, uid, 0, (1, 4, 3))), x[None])
    np.testing.assert_array_equal(dev.download(t.run("reduce_scatter", "sum", 0, buf, group, uid, 0, x.shape)), x)
    assert len(t.comms) == 1  # one communicator for the group, built once


@pytest.mark.gpu
@pytest.mark.skipif(len(GPUS) < 2 or not _have_mpi,
                    reason="needs two CUDA GPUs and mpi4py (NCCL puts one rank on each GPU)")
@needs_nccl
def test_collectives_over_real_nccl_between_two_gpus():
    with tw.LocalCluster(devices=["cuda:0", "cuda:1"], autograd=False) as c:
        s = tw.connect(c.address)
        try:
            a, b = _inputs("float32", (1 << 16,), seed=1)
            parts = [tw.tensor(a, device="cuda:0"), tw.tensor(b, device="cuda:1")]
            tw.distributed.all_reduce(parts, op="sum")
            for p in parts:
                np.testing.assert_allclose(p.numpy(), a + b, rtol=1e-6)
            outs = tw.distributed.all_gather(parts)
            for o in outs:
                np.testing.assert_allclose(o.numpy(), np.stack([a + b, a + b]), rtol=1e-6)
            assert _shm_files(c, "cuda:0") == [] and _shm_files(c, "cuda:1") == []
        finally:
            s.close()
            tw.set_session(None)
