"""Issue 34, findings 1 and 4: the kernel cache runs only what this user built, and it is bounded.

Attacks on the cache folder (``$TENSORWIRE_KERNEL_CACHE``): a library or source planted under the name of a kernel
the worker is about to build, a real library of another computation swapped in, a folder other users can write.
Each must leave the answer right and the planted code not run. Bounds: the cache's bytes on disk, and the kernel
libraries a worker keeps mapped once the plans using them are gone.
"""

from __future__ import annotations

import gc
import logging
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tensorwire.backends import executor as X
from tensorwire.backends.codegen import cache as C
from tensorwire.backends.codegen import lower
from tensorwire.backends.cpu import CompiledBackend, compiled
from tensorwire.protocol import dtypes as D

pytestmark = pytest.mark.skipif(compiled.runtime() is None, reason=f"no C compiler: {compiled.why_not()}")

N = 1024
EXP = [["exp", [-1], None]]
NEG = [["neg", [-1], None]]  # the same kernel signature as EXP: its library loads in EXP's place

#: a library an attacker plants: its constructor runs at load (writes MARKER), its k0 answers 42 everywhere
PLANTED = r"""
#include <stdio.h>
__attribute__((constructor)) static void planted(void) {
  FILE *f = fopen("MARKER", "w");
  if (f) { fputs("planted code ran\n", f); fclose(f); }
}
void k0(float *out, const float *in) { for (long i = 0; i < NUMEL; i++) out[i] = 42.0f; }
""".replace("NUMEL", str(N))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "kernels"
    monkeypatch.setenv(C.CACHE_ENV, str(d))
    return d


def _device():
    base = compiled.runtime()
    rt = compiled.CRuntime(base.compiler, base.version)  # a fresh process's runtime: nothing loaded yet
    return rt, CompiledBackend(rt, min_work=0, large_runs=0).open(0)


def _plan(dev, nodes, n: int = N):
    """The plan and its kernels as the runtime builds them at a structure's first size (``CRuntime.specialise``), so
    their source names the library the worker looks for."""
    plan = X.compile_plan(dev, nodes, [((n,), D.float32)])
    return plan, dev.runtime.specialise(lower(plan.program.steps, {plan.node_slot[-1]}, dev.lowering_options).kernels)


def _run(dev, plan, x):
    out = plan.node_slot[-1]
    return np.asarray(X.run_plan(dev, plan, [x], list(range(len(plan.node_slot))), {}, [],
                                 {out})[len(plan.node_slot) - 1])


def _artifact(rt, kernels, cache_dir: Path) -> tuple[str, Path]:
    key = rt.cache.key(rt.renderer.render(kernels))
    return key, cache_dir.resolve() / "c" / f"{key}.so"


def _plant_library(rt, so: Path, key: str, marker: Path) -> None:
    """Compile the attacker's library to ``so``, with the digest record it would need (the scheme is public)."""
    so.parent.mkdir(parents=True, exist_ok=True)
    src = so.parent.parent / "planted.c"
    src.write_text(PLANTED.replace("MARKER", str(marker)))
    subprocess.run([rt.compiler, "-shared", "-fPIC", str(src), "-o", str(so)], check=True, capture_output=True)
    so.with_name(so.name + C.DIGEST_EXT).write_text(C.digest(key, so.read_bytes()))


def _mapped(pid: int | str, folder: Path) -> set[str]:
    """The files under ``folder`` that process ``pid`` has mapped (evicted ones included)."""
    prefix = str(folder.resolve())
    with open(f"/proc/{pid}/maps") as f:
        paths = {line.split(None, 5)[5].strip() for line in f if len(line.split(None, 5)) == 6}
    return {p.removesuffix(" (deleted)") for p in paths if p.startswith(prefix)}


def _other_users_file(path: Path) -> None:
    os.chmod(path, 0o666)


def _nobodys_file(path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can give a file to another user")
    import pwd
    os.chown(path, pwd.getpwnam("nobody").pw_uid, -1)


@pytest.mark.parametrize("owner", [_other_users_file, _nobodys_file], ids=["world-writable", "nobody's"])
def test_a_library_planted_under_a_kernels_name_never_runs(cache_dir, tmp_path, owner, caplog):
    """Another user drops a library (and a matching digest record) where the worker will look for the fragment's
    kernel: it is refused (not this user's, or writable by others), the kernel is built again over it, and the
    answer is exp(x) with the planted constructor never run."""
    rt, dev = _device()
    plan, kernels = _plan(dev, EXP)
    key, so = _artifact(rt, kernels, cache_dir)
    rt.cache.folder()  # (the folders exist, private, as a worker makes them)
    marker = tmp_path / "marker"
    _plant_library(rt, so, key, marker)
    owner(so)
    x = np.linspace(-2, 2, N, dtype=np.float32)
    with caplog.at_level(logging.WARNING, logger="tensorwire.kernels"):
        got = _run(dev, plan, x)
    np.testing.assert_allclose(got, np.exp(x), rtol=1e-6)
    assert not marker.exists(), "the planted library's constructor ran in the worker"
    assert rt.cache.builds == 1 and rt.cache.rejected == 1
    assert any("refusing the cached kernel" in r.getMessage() for r in caplog.records)
    st = so.stat()
    assert st.st_uid == os.geteuid() and not st.st_mode & 0o077  # replaced by this user's own build, 0600


def test_a_planted_source_is_never_compiled(cache_dir, tmp_path):
    """Another user leaves ``<key>.c`` (no library yet): the worker compiles the source it generated, not that."""
    rt, dev = _device()
    plan, kernels = _plan(dev, EXP)
    key, so = _artifact(rt, kernels, cache_dir)
    marker = tmp_path / "marker"
    so.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    so.with_suffix(".c").write_text(PLANTED.replace("MARKER", str(marker)))
    x = np.linspace(-2, 2, N, dtype=np.float32)
    np.testing.assert_allclose(_run(dev, plan, x), np.exp(x), rtol=1e-6)
    assert not marker.exists(), "the planted source was compiled and loaded"
    assert so.with_suffix(".c").read_text() == rt.renderer.render(kernels)


@pytest.mark.parametrize("with_record", [False, True], ids=["library", "library-and-record"])
def test_a_swapped_library_does_not_change_the_answer(cache_dir, with_record, caplog):
    """The library of -x (a real kernel, same symbols and signature) is copied over exp(x)'s, alone or with its
    digest record: the digest (bound to the key) does not match, the library is rebuilt, the answer is exp(x)."""
    rt, dev = _device()
    neg_plan, neg_kernels = _plan(dev, NEG)
    x = np.linspace(-2, 2, N, dtype=np.float32)
    np.testing.assert_array_equal(_run(dev, neg_plan, x), -x)  # built and cached
    _, neg_so = _artifact(rt, neg_kernels, cache_dir)
    rt2, dev2 = _device()  # a new worker process: the exp kernel comes from disk
    plan, kernels = _plan(dev2, EXP)
    _, so = _artifact(rt2, kernels, cache_dir)
    shutil.copyfile(neg_so, so)
    os.chmod(so, 0o600)
    if with_record:
        shutil.copyfile(neg_so.with_name(neg_so.name + C.DIGEST_EXT), so.with_name(so.name + C.DIGEST_EXT))
    with caplog.at_level(logging.INFO, logger="tensorwire.kernels"):
        got = _run(dev2, plan, x)
    np.testing.assert_allclose(got, np.exp(x), rtol=1e-6)
    assert rt2.cache.rejected == 1 and rt2.cache.builds == 1
    why = "does not match its recorded sha256" if with_record else "has no recorded sha256"
    assert any(why in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("where", ["cache", "target", "above"])
def test_a_folder_other_users_can_write_is_refused(cache_dir, tmp_path, where, caplog):
    """A cache folder (the root, the target's folder, or a folder above them that is not sticky) other users can
    write: nothing is loaded from it or built into it, with a typed error saying why and what to do; the executor
    still answers exp(x), interpreted, and the planted library never runs."""
    rt, dev = _device()
    plan, kernels = _plan(dev, EXP)
    key, so = _artifact(rt, kernels, cache_dir)
    rt.cache.folder()
    marker = tmp_path / "marker"
    _plant_library(rt, so, key, marker)
    os.chmod(so, 0o600)  # (a file that passes every check of its own)
    loose = {"cache": cache_dir, "target": so.parent, "above": tmp_path}[where]
    mode = loose.stat().st_mode
    os.chmod(loose, 0o777)
    try:
        with pytest.raises(C.UnsafeKernelCache, match="writable by other users") as info:
            rt.build(kernels)
        assert "chmod 700" in str(info.value) and C.CACHE_ENV in str(info.value)
        x = np.linspace(-2, 2, N, dtype=np.float32)
        with caplog.at_level(logging.ERROR, logger="tensorwire.kernels"):
            np.testing.assert_allclose(_run(dev, plan, x), np.exp(x), rtol=1e-6)
    finally:
        os.chmod(loose, mode)
    assert not marker.exists(), "the planted library's constructor ran in the worker"
    assert rt.cache.builds == 0 and rt.loaded() == 0


def test_the_recurrent_cells_keep_their_numpy_steps_when_the_cache_is_refused(cache_dir, monkeypatch):
    """The LSTM/GRU cells' library comes from the same cache: refused, the scans use numpy (no error)."""
    from tensorwire.backends.cpu import rnn_cells

    monkeypatch.setattr(rnn_cells, "_CELLS", None)
    base = compiled.runtime()  # a fresh runtime, nothing loaded (an earlier test may have loaded the cells)
    monkeypatch.setattr(compiled, "_RUNTIME", compiled.CRuntime(base.compiler, base.version))
    compiled.runtime().cache.folder()
    os.chmod(cache_dir, 0o777)
    try:
        assert rnn_cells.cells() is None
    finally:
        os.chmod(cache_dir, 0o700)
    assert rnn_cells.cells()[("lstm_fwd", "float32")] is not None  # private again: compiled, from this folder
    assert any(cache_dir.glob("c/*.so"))


def test_the_cache_stays_under_its_byte_bound(cache_dir, monkeypatch):
    """Distinct fragments one after another (a program whose structure keeps changing: chains of 1 to 11 ``exp``;
    sizes alone would not do, the kernels are generic in them): the cache's bytes stay under
    TENSORWIRE_KERNEL_CACHE_BYTES, the least recently used go first, and one used again survives."""
    rt, dev = _device()
    x_kernels = _plan(dev, EXP, 7)[1]
    rt.build(x_kernels)
    folder = rt.cache.folder()
    one = sum(p.stat().st_size for p in folder.iterdir())  # a kernel's library, source and digest
    bound = 4 * one + one // 2
    monkeypatch.setenv(C.BYTES_ENV, str(bound))
    keep = rt.renderer.render(x_kernels)

    def refuse(src, out):
        raise AssertionError("a kernel in the cache was built again")

    for n in range(1, 11):
        chain = EXP + [["exp", [i], None] for i in range(n)]
        rt.build(_plan(dev, chain, 7)[1])
        assert sum(p.stat().st_size for p in folder.iterdir()) <= bound
        C.KernelCache("c", rt.cache.compiler_id).get_or_build(keep, ".c", ".so", refuse)  # a hit: recently used
    assert rt.cache.evicted == 7  # 11 kernels, 4 fit
    assert len(list(folder.glob("*.so"))) == 4


def test_builds_scan_the_cache_only_when_it_may_be_full(cache_dir, monkeypatch):
    """Eviction stats the cache's files (~1 s of CPU for 10,000 of them): at the first build, then only once the
    bytes built since could pass the bound, or every RESCAN_BUILDS builds; the bound still holds."""
    rt, dev = _device()
    scans = []
    folders = C._target_folders
    monkeypatch.setattr(C, "_target_folders", lambda root: scans.append(root) or folders(root))
    rt.build(_plan(dev, EXP, 7)[1])
    assert len(scans) == 1  # the first build: the cache's bytes are not known yet
    for n in range(1, 4):
        rt.build(_plan(dev, EXP + [["exp", [i], None] for i in range(n)], 7)[1])
    assert len(scans) == 1  # far under the bound: counted, not scanned
    folder = rt.cache.folder()
    one = max(p.stat().st_size for p in folder.glob("*.so"))
    monkeypatch.setenv(C.BYTES_ENV, str(sum(p.stat().st_size for p in folder.iterdir()) + one))
    for n in range(4, 7):
        rt.build(_plan(dev, EXP + [["exp", [i], None] for i in range(n)], 7)[1])
    assert len(scans) >= 2 and rt.cache.evicted >= 1  # past the bound: scanned, and the oldest evicted
    assert sum(p.stat().st_size for p in folder.iterdir()) <= int(os.environ[C.BYTES_ENV])


def test_libraries_are_unloaded_when_no_runner_holds_them(cache_dir):
    """Runners of many distinct fragments, all but one dropped (a plan cache evicting them): their libraries are
    closed, the one still held stays mapped and keeps answering (a runner never calls into a closed library)."""
    rt, dev = _device()
    x = np.linspace(-2, 2, 64, dtype=np.float32)
    held, held_kernels = _plan(dev, EXP, 64)
    np.testing.assert_allclose(_run(dev, held, x), np.exp(x), rtol=1e-6)
    for n in range(65, 75):
        plan, _ = _plan(dev, NEG, n)
        np.testing.assert_array_equal(_run(dev, plan, np.ones(n, np.float32)), -np.ones(n, np.float32))
        del plan
    gc.collect()
    _, held_so = _artifact(rt, held_kernels, cache_dir)
    assert _mapped("self", cache_dir) == {str(held_so)}
    assert rt.loaded() == 1 and rt.unloaded[0] == 10
    np.testing.assert_allclose(_run(dev, held, x), np.exp(x), rtol=1e-6)
    del held
    gc.collect()
    assert _mapped("self", cache_dir) == set() and rt.loaded() == 0


#: a fresh process: parallel kernels, every library closed between them, the watchdog thread pytest's conftest runs
#: started and stopped around each (where closing libgomp with its thread pool alive segfaulted)
_OPENMP_SCRIPT = r"""
import faulthandler, gc, sys
import numpy as np
from tensorwire.backends import executor as X
from tensorwire.backends.cpu import CompiledBackend, compiled
from tensorwire.protocol import dtypes as D
rt = compiled.CRuntime(compiled.runtime().compiler, compiled.runtime().version)
dev = CompiledBackend(rt, min_work=0, large_runs=0).open(0)
x = np.linspace(-2, 2, 1 << 20, dtype=np.float32)
for op in ("exp", "tanh"):
    faulthandler.dump_traceback_later(600, exit=True)
    plan = X.compile_plan(dev, [[op, [-1], None], ["sum", [0], {"dims": None}]], [(x.shape, D.float32)])
    got = float(np.asarray(X.run_plan(dev, plan, [x], [10, 11], {}, [], {plan.node_slot[-1]})[11]))
    assert np.isfinite(got), got
    del plan
    gc.collect()
    assert rt.loaded() == 0, rt.loaded()
    assert any(n in line for line in open("/proc/self/maps") for n in ("libgomp", "libomp", "libiomp")), "unloaded"
    faulthandler.cancel_dump_traceback_later()
print("ok", rt.unloaded[0])
"""


def test_closing_every_library_keeps_the_openmp_runtime(cache_dir):
    """Parallel kernels, each library closed after its plan: the OpenMP runtime they brought in stays loaded (its
    idle thread pool would otherwise run unmapped code: a segfault), and the process goes on."""
    import sys

    r = subprocess.run([sys.executable, "-c", _OPENMP_SCRIPT], capture_output=True, text=True, timeout=300,
                       env={**os.environ, C.CACHE_ENV: str(cache_dir)})
    assert r.returncode == 0 and r.stdout.split() == ["ok", "2"], (r.returncode, r.stdout, r.stderr[-3000:])


def test_past_the_library_limit_fragments_run_interpreted(cache_dir, monkeypatch):
    """A worker whose live plans hold TENSORWIRE_CPU_MAX_LIBRARIES libraries: a new fragment runs interpreted (right
    answer, nothing more loaded); once those plans are gone, fragments compile again."""
    monkeypatch.setenv(compiled.MAX_LIBRARIES_ENV, "3")
    rt, dev = _device()
    held = []
    for k in (1, 2, 3):  # three structures (chains of 1, 2 and 3 ``neg``): sizes alone share one generic library
        n = 70 + k
        plan, _ = _plan(dev, NEG + [["neg", [i], None] for i in range(k - 1)], n)
        np.testing.assert_array_equal(_run(dev, plan, np.ones(n, np.float32)), (-1) ** k * np.ones(n, np.float32))
        held.append(plan)
    x = np.linspace(-2, 2, 73, dtype=np.float32)
    plan, _ = _plan(dev, EXP, 73)
    np.testing.assert_allclose(_run(dev, plan, x), np.exp(x), rtol=1e-6)
    assert rt.loaded() == 3 and rt.cache.builds == 3
    del held
    gc.collect()
    x = np.linspace(-2, 2, 74, dtype=np.float32)
    plan, _ = _plan(dev, EXP, 74)
    np.testing.assert_allclose(_run(dev, plan, x), np.exp(x), rtol=1e-6)
    assert rt.loaded() == 1 and rt.cache.builds == 4


# -- through a cluster ------------------------------------------------------------------------------------------------

CACHE_BYTES = 160 << 10
PLAN_BYTES = 256 << 10


@pytest.fixture(scope="module")
def kernel_cluster(tmp_path_factory):
    """A worker compiling every fragment (however small), with a small plan cache and a small kernel cache."""
    import tensorwire as tw

    folder = tmp_path_factory.mktemp("shared") / "kernels"
    env = {C.CACHE_ENV: str(folder), C.BYTES_ENV: str(CACHE_BYTES), "TENSORWIRE_PLAN_CACHE_BYTES": str(PLAN_BYTES),
           compiled.MIN_WORK_ENV: "0", compiled.LARGE_RUNS_ENV: "0"}
    with tw.LocalCluster(devices=["cpu:0"], autograd=False, collectives=False, extra_env=env) as c:
        yield c, folder


def _exp_sum(tw, n: int) -> float:
    return tw.arange(n, dtype=tw.float32).div(n).exp().sum().item()


def test_a_worker_keeps_its_kernels_bounded_on_disk_and_in_memory(kernel_cluster):
    """A session sends fragment after distinct fragment: the worker's plan cache evicts the plans, which closes
    their libraries (its mapped kernel libraries stay few), and the cache folder stays under its bound."""
    import tensorwire as tw

    c, folder = kernel_cluster
    pid = c.services["cpu:0"].proc.pid
    with tw.Session(c.address) as s, tw.use_session(s):
        for n in range(100, 116):
            assert _exp_sum(tw, n) == pytest.approx(float(np.exp(np.arange(n) / n).sum()), rel=1e-5)
    libs = list((folder / "c").glob("*.so"))
    assert libs, "nothing was compiled"
    assert sum(p.stat().st_size for p in (folder / "c").iterdir()) <= CACHE_BYTES
    assert len(_mapped(pid, folder)) <= 6  # 16 fragments compiled; the plans of a few are still cached


def test_a_worker_given_a_world_writable_cache_answers_interpreted(kernel_cluster):
    """The cache folder is made world-writable (as a shared folder would be): the worker refuses it, says so in its
    log (why, and what to do), and every answer is still right."""
    import tensorwire as tw

    c, folder = kernel_cluster
    (folder / "c").mkdir(parents=True, exist_ok=True)
    before = set(folder.glob("c/*.so"))
    mode = folder.stat().st_mode
    os.chmod(folder, 0o777)
    try:
        with tw.Session(c.address) as s, tw.use_session(s):
            for n in (300, 301):  # (a structure the worker has not built yet: sizes no longer make new kernels)
                got = tw.arange(n, dtype=tw.float32).div(n).sin().sum().item()
                assert got == pytest.approx(float(np.sin(np.arange(n) / n).sum()), rel=1e-5)
    finally:
        os.chmod(folder, mode)
    log = (c.log_dir / "cpu-0.log").read_text(errors="replace")
    assert f"the kernel cache {folder.resolve()} is not private" in log and "chmod 700" in log
    assert set(folder.glob("c/*.so")) <= before  # nothing built there
