"""Collectives against numpy on 2 and 4 devices: every op, several dtypes and sizes, errors, faults. (The cluster beats
twice as often as the default, tests/_liveness.py: a killed worker or MPI job is found lost after 2.5 s.)"""

from __future__ import annotations

import importlib.util
import time

import numpy as np
import pytest

import tensorwire as tw
from tests._liveness import FAST_HEARTBEAT

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None,
                                reason="mpi4py/mpich not installed (pip install 'tensorwire[mpi]')")

DEVICES = ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]


@pytest.fixture(scope="module")
def cluster():
    with tw.LocalCluster(devices=DEVICES, autograd=False, extra_env=FAST_HEARTBEAT) as c:
        assert "collectives" in c.services
        yield c


def _inputs(n, shape, dtype, seed):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        if dtype == "bool":
            a = rng.random(shape) > 0.5
        elif dtype.startswith("int"):
            a = rng.integers(-50, 50, shape).astype(dtype)
        else:
            a = rng.standard_normal(shape).astype(dtype)
        out.append(a)
    return out


REDUCE = {"sum": lambda xs: np.sum(xs, axis=0), "max": lambda xs: np.max(xs, axis=0),
          "min": lambda xs: np.min(xs, axis=0), "prod": lambda xs: np.prod(xs, axis=0),
          "mean": lambda xs: np.mean(xs, axis=0)}


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("shape", [(), (7,), (5, 3), (1 << 16,)], ids=["0d", "7", "5x3", "64k"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "float16"])
def test_all_reduce(session, n, shape, dtype):
    arrs = _inputs(n, shape, dtype, seed=n)
    for op in ("sum", "max", "min", "mean") if dtype.startswith("float") else ("sum", "max", "min"):
        parts = [tw.tensor(a, device=DEVICES[i]) for i, a in enumerate(arrs)]
        tw.distributed.all_reduce(parts, op=op)
        ref = REDUCE[op](np.stack([a.astype(np.float64) for a in arrs]))
        tol = 2e-2 if dtype == "float16" else 1e-5
        for p in parts:
            assert p.dtype == tw.get_default_dtype() or p.dtype.name == dtype
            np.testing.assert_allclose(p.numpy().astype(np.float64), ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("rows", [1, 5, 8, 0], ids=lambda r: f"rows{r}")
def test_reduce_scatter_and_all_gather(session, n, rows):
    arrs = _inputs(n, (rows, 3), "float64", seed=rows)
    outs = tw.distributed.reduce_scatter([tw.tensor(a, device=DEVICES[i]) for i, a in enumerate(arrs)])
    total = np.sum(arrs, axis=0)
    for i, (o, ref) in enumerate(zip(outs, np.array_split(total, n))):
        assert o.device == DEVICES[i]
        np.testing.assert_allclose(o.numpy(), ref, rtol=1e-12)
    gathered = tw.distributed.all_gather([tw.tensor(a, device=DEVICES[i]) for i, a in enumerate(arrs)])
    for i, g in enumerate(gathered):
        assert g.device == DEVICES[i] and g.shape == (n, rows, 3)
        np.testing.assert_array_equal(g.numpy(), np.stack(arrs))


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "bfloat16"])
def test_broadcast_and_gather_dtypes(session, dtype):
    src = 1
    if dtype == "bfloat16":
        arrs = [np.arange(6, dtype=np.float32).reshape(2, 3) + 10 * i for i in range(4)]
        parts = [tw.tensor(a, device=DEVICES[i]).to(tw.bfloat16) for i, a in enumerate(arrs)]
    else:
        arrs = _inputs(4, (2, 3), dtype, seed=3)
        parts = [tw.tensor(a, device=DEVICES[i]) for i, a in enumerate(arrs)]
    tw.distributed.broadcast(parts, src=src)
    for p in parts:
        np.testing.assert_array_equal(p.numpy().astype(np.float64), arrs[src].astype(np.float64))
    g = tw.distributed.all_gather(parts[:2])
    np.testing.assert_array_equal(g[1].numpy().astype(np.float64), np.stack([arrs[src]] * 2).astype(np.float64))


def test_collectives_are_ordered_with_other_work(session):
    # produce on each device, reduce, consume: all recorded before any sync
    xs = [tw.arange(4.0, device=d) * (i + 1) for i, d in enumerate(DEVICES[:2])]
    tw.distributed.all_reduce(xs)
    ys = [x * 2 for x in xs]
    tw.distributed.all_reduce(ys, op="max")
    np.testing.assert_array_equal(ys[1].numpy(), np.arange(4.0) * 6)
    np.testing.assert_array_equal(xs[0].numpy(), np.arange(4.0) * 3)


def test_loop_replays_plan(session):
    xs = [tw.ones(16, device=d) for d in DEVICES]
    for _ in range(5):
        xs = [x * 0.5 for x in xs]
        tw.distributed.all_reduce(xs, op="sum")
    np.testing.assert_allclose(xs[3].numpy(), np.full(16, 2.0 ** 5), rtol=1e-6)


def test_bad_calls_are_clear(session):
    a = tw.ones(3, device="cpu:0")
    with pytest.raises(tw.ShapeError):
        tw.distributed.all_reduce([a, tw.ones(4, device="cpu:1")])
    with pytest.raises(tw.DTypeError):
        tw.distributed.all_reduce([a, tw.ones(3, device="cpu:1", dtype=tw.float64)])
    with pytest.raises(tw.DeviceError):
        tw.distributed.all_reduce([a, tw.ones(3, device="cpu:0")])
    with pytest.raises(ValueError):
        tw.distributed.all_reduce([a, tw.ones(3, device="cpu:1")], op="median")
    with pytest.raises(tw.ShapeError):
        tw.distributed.reduce_scatter([tw.ones((), device="cpu:0"), tw.ones((), device="cpu:1")])
    tw.distributed.barrier(DEVICES)


def test_parts_that_disagree_on_dtype_past_the_client_fail_typed_and_the_ranks_serve_on(session):
    """A client that skips ``_check`` (a modified one) sends one collective with a float32 part and a float64 part:
    the dispatcher refuses to release the ranks (MPI would mix the two buffers' bytes, or abort the job)."""
    parts = tw.distributed._record("all_reduce", [tw.ones(3, device="cpu:0"),
                                                  tw.ones(3, device="cpu:1", dtype=tw.float64)], op="sum")
    for p in parts:
        with pytest.raises(tw.ProtocolError, match="disagree on dtype, shape or transport"):
            p.numpy()
    xs = [tw.ones(3, device=d) for d in DEVICES[:2]]
    tw.distributed.all_reduce(xs)
    assert [x.numpy().tolist() for x in xs] == [[2.0] * 3] * 2


def test_rank_death_gives_error_then_restart_works(cluster, session):
    xs = [tw.ones(8, device=d) for d in DEVICES[:2]]
    tw.synchronize()
    cluster.services["collectives"].kill()
    t0 = time.monotonic()
    with pytest.raises(tw.TensorwireError, match="collectives"):
        tw.distributed.all_reduce(xs)
        xs[0].numpy()
    assert time.monotonic() - t0 < 30
    cluster.start_collectives()
    ys = [tw.ones(8, device=d) * 2 for d in DEVICES[:2]]
    tw.distributed.all_reduce(ys)
    np.testing.assert_array_equal(ys[1].numpy(), np.full(8, 4.0))


def test_orphaned_mpich_segments_are_removed_and_live_ones_kept(cluster, session, tmp_path):
    """A segment a killed job left behind would fail the MPI_Init of a later job whose launcher reuses its pid:
    old segments that no process maps are removed before a job starts; live, mapped or fresh ones stay."""
    import mmap
    import os
    import uuid

    from tensorwire.cluster import ORPHAN_SEGMENT_AGE_S, _mapped_files, _mpich_segments, _remove_orphan_mpich_segments

    live = _mpich_segments() & _mapped_files()  # the running job's
    assert live, "the cluster's MPI job maps no segment: nothing to check the sweep against"
    stem = f"/dev/shm/mpich_shm_twtest{uuid.uuid4().hex[:8]}"
    orphan, mapped, fresh = f"{stem}_o", f"{stem}_m", f"{stem}_f"
    old = time.time() - ORPHAN_SEGMENT_AGE_S - 60
    for path in (orphan, mapped, fresh):
        with open(path, "wb") as f:
            f.write(b"\0" * 4096)
    os.utime(orphan, (old, old))
    os.utime(mapped, (old, old))
    with open(mapped, "r+b") as f:
        m = mmap.mmap(f.fileno(), 4096)
    try:
        removed = _remove_orphan_mpich_segments()
        assert orphan in removed and not os.path.exists(orphan)
        assert os.path.exists(mapped) and os.path.exists(fresh)
        # everything counts as old an hour from now: the running jobs' segments are mapped, so they stay (those of
        # jobs still running: another test's, in a parallel run, may end meanwhile, and its segment with it; a
        # removed segment a process still maps shows in its maps, " (deleted)")
        _remove_orphan_mpich_segments(now=time.time() + 3600)
        assert os.path.exists(mapped) and live & _mapped_files() <= _mpich_segments()
        ys = [tw.ones(8, device=d) for d in DEVICES[:2]]
        tw.distributed.all_reduce(ys)
        np.testing.assert_array_equal(ys[0].numpy(), np.full(8, 2.0))
    finally:
        m.close()
        for path in (orphan, mapped, fresh):
            if os.path.exists(path):
                os.unlink(path)


def test_a_live_jobs_segment_is_not_taken_for_a_leftover(cluster, session):
    """A job's leftovers are the segments that appeared while it ran and that no process maps: another job started
    meanwhile (this cluster's, running) keeps its own, and the sweep takes only the unmapped one."""
    import mmap
    import os
    import uuid

    from tensorwire.cluster import _mapped_files, _mpich_segments, _remove_mpich_leftovers

    live = _mpich_segments() & _mapped_files()
    assert live, "the cluster's MPI job maps no segment: nothing to check the sweep against"
    stem = f"/dev/shm/mpich_shm_twtest{uuid.uuid4().hex[:8]}"
    left, mapped = f"{stem}_l", f"{stem}_m"
    for path in (left, mapped):
        with open(path, "wb") as f:
            f.write(b"\0" * 4096)
    with open(mapped, "r+b") as f:
        m = mmap.mmap(f.fileno(), 4096)
    try:
        # (the running job's segments and these two count as new, as if they had appeared while a job ran: only
        # being mapped keeps one; other tests' segments are left out of it)
        _remove_mpich_leftovers(_mpich_segments() - live - {left, mapped}, 0.0)
        assert not os.path.exists(left) and os.path.exists(mapped) and live & _mapped_files() <= _mpich_segments()
        ys = [tw.ones(8, device=d) for d in DEVICES[:2]]
        tw.distributed.all_reduce(ys)
        np.testing.assert_array_equal(ys[0].numpy(), np.full(8, 2.0))
    finally:
        m.close()
        for path in (left, mapped):
            if os.path.exists(path):
                os.unlink(path)


def _process_tree(pid: int) -> set[int]:
    """``pid`` and its descendants (an MPI launcher, its proxies and ranks), from /proc's parent pids."""
    import os

    parents: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    parents[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):  # the process ended
                pass
    tree, grew = {pid}, True
    while grew:
        more = {p for p, pp in parents.items() if pp in tree} - tree
        tree |= more
        grew = bool(more)
    return tree


def _mapped_by(pids: set[int]) -> set[str]:
    """The /dev/shm files the processes ``pids`` map."""
    out: set[str] = set()
    for p in pids:
        try:
            with open(f"/proc/{p}/maps") as f:
                out |= {line[line.index("/dev/shm/"):].rstrip("\n").removesuffix(" (deleted)")
                        for line in f if "/dev/shm/" in line}
        except OSError:  # the process ended
            pass
    return out


def test_a_launcher_that_reuses_a_killed_jobs_pid_still_starts(cluster, session):
    """The failure the orphan sweep fixes, reproduced: kill the MPI job (its segment stays behind), make the next
    launcher get the killed launcher's pid, start the collectives again: they start and work. Without the sweep
    the new ranks attach to the stale segment and MPI_Init fails. Needs root (to pick the next pid)."""
    import os

    from tensorwire.cluster import ORPHAN_SEGMENT_AGE_S, _mapped_files, _mpich_segments

    if not os.access("/proc/sys/kernel/ns_last_pid", os.W_OK):
        pytest.skip("choosing the next pid (/proc/sys/kernel/ns_last_pid) needs root")
    svc = cluster.services["collectives"]
    pid = svc.proc.pid
    # this job's segments only: another cluster's live MPI job (the run's shared cluster, another user's) maps its
    # own, which stay mapped, and waiting for those to go cost the full 30 s below
    ours = _mpich_segments() & _mapped_by(_process_tree(pid))
    assert ours, "the cluster's MPI job maps no segment: nothing to reproduce"
    svc.kill()  # the launcher; its ranks die with it (PR_SET_PDEATHSIG) and cannot unlink their segment
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (ours & _mapped_files() or os.path.exists(f"/proc/{pid}")):
        time.sleep(0.05)
    stale = {p for p in ours if os.path.exists(p)}
    assert stale, "the killed job left no segment behind: nothing to reproduce"
    old = time.time() - ORPHAN_SEGMENT_AGE_S - 60  # as old as a pid's reuse takes on a machine with default pid_max
    for p in stale:
        os.utime(p, (old, old))
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(pid - 1))
    new = cluster.start_collectives()
    if new.proc.pid != pid:
        pytest.skip(f"another process took pid {pid} first")
    ys = [tw.ones(8, device=d) * 5 for d in DEVICES[:2]]
    tw.distributed.all_reduce(ys)
    np.testing.assert_array_equal(ys[0].numpy(), np.full(8, 10.0))


def test_worker_death_during_collective_is_bounded(cluster, session):
    big = tw.randn(1200, 1200, device="cpu:1")
    slow = (big @ big @ big).sum(dim=1)[:8]  # cpu:1 is busy while cpu:0 already waits in the collective
    xs = [tw.ones(8, device="cpu:0"), slow]
    tw.distributed.all_reduce(xs)
    session.flush()
    cluster.services["cpu:1"].kill()
    t0 = time.monotonic()
    with pytest.raises(tw.TensorwireError):
        xs[0].numpy()
    assert time.monotonic() - t0 < 30
    with pytest.raises(tw.WorkerLost):  # the session also hears, once, that cpu:1's tensors are gone
        tw.synchronize()
    tw.synchronize()
    cluster.start_workers(["cpu:1"])
    # the MPI job aborted itself (a collective cannot be cancelled); start a new one
    cluster.start_collectives()
    ys = [tw.ones(8, device=d) * 3 for d in DEVICES[:2]]
    tw.distributed.all_reduce(ys)
    np.testing.assert_array_equal(ys[1].numpy(), np.full(8, 6.0))
