"""Shared fixtures and the suite's tiers.

Tiers (``-m`` selects, the default run takes everything): ``tests/unit`` (``unit``) needs no cluster and runs in
seconds; the other folders start real services on free local ports. Each test of a folder in :data:`FOLDER_MARKERS`
carries that folder's marker, and the modules in :data:`SLOW` (and any test marked ``slow``) carry ``slow``:
``pytest -m "not slow"``, ``pytest -m "not faults and not deploy"``.

Clusters: a module that asks for ``cluster`` (or ``session``) gets the run's shared LocalCluster, unless it changes
its cluster (kills or restarts services, floods it, times its workers): the modules of :data:`OWN_CLUSTER_FOLDERS`
and any module marked ``own_cluster`` start one of their own. Each module still gets a session of its own, closed
when the module ends, so no module sees another's tensors. Modules that need other settings, alike, and do not change
the cluster share one too: ``shared_clusters.local(devices=[...], ...)`` (the OpenCL modules)."""

from __future__ import annotations

import faulthandler
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests._bytecode import compile_tree, writing_bytecode

os.environ.setdefault("TENSORWIRE_START_TIMEOUT", "120")
# A large fragment whose kernels are not cached compiles once its runs have paid for the build in time
# (backends/hot.py, TENSORWIRE_CPU_COMPILE_BUILD_TIME): a decision that depends on how fast this machine runs. The
# suite pins the run-count rule (0: built when hot) so that which plans compile does not change with the load or
# with a cold kernel cache; tests/backends/test_hot_plans.py and tests/unit/backends/test_hot_build_cost.py set the
# time rule themselves and test it.
os.environ.setdefault("TENSORWIRE_CPU_COMPILE_BUILD_TIME", "0")
# A compile's wall-time bound (60 s, for a runaway compile) is wider here: with a cold cache, two xdist workers on 2
# cores compile at once, and gcc's largest fragments (20-25 s alone) or clang's largest HIP modules then took a core
# past 60 s of wall time. tests/faults/test_slow_compile.py sets its own bound and tests what a timeout does.
os.environ.setdefault("TENSORWIRE_COMPILE_TIMEOUT", "240")
compile_tree()  # (before any process starts: each would compile every module it imports from source)

# pytest-timeout (300 s, pyproject) fails a test stuck in Python; a test stuck inside native code (a driver, MLX, a
# compiler) never returns to the interpreter to see its signal. This watchdog runs in C, without the GIL: past it,
# the run prints every thread's stack and exits, so a hang costs minutes and names itself instead of eating CI.
HARD_LIMIT_S = 900

TESTS = Path(__file__).resolve().parent
#: the folders under tests/ whose tests carry a marker of the same name (pyproject's ``markers``)
FOLDER_MARKERS = ("unit", "faults", "security", "programs", "deploy")
#: test modules (paths under tests/) marked ``slow``: each takes 30 s or more on 2 cores (``--durations``)
SLOW = (
    "faults/", "programs/", "deploy/",
    "autograd/test_ops_gradcheck.py",  # every op's gradient, interpreted and compiled (a cold cache compiles ~150 s)
    "backends/test_render_targets.py",  # every conformance kernel through NVRTC and hipRTC
    "backends/test_opencl.py", "backends/test_cuda.py", "backends/test_rocm.py", "backends/test_mps.py",
    "backends/test_mps_standin.py", "backends/test_cpu_compiled.py",  # the conformance suite on each backend
    "backends/test_plugin.py", "backends/test_selftest.py", "opinfo/",
    "hub/test_minilm.py", "collectives/", "dispatcher/test_cli.py",
)
#: the CPU backend's two modes (``SharedClusters.cpu_mode``): every fragment compiled to fused C kernels, however
#: small (backends/cpu/compiled.py's MIN_WORK_ENV and LARGE_RUNS_ENV at 0), and the numpy interpreter
CPU_MODES = {"compiled": {"TENSORWIRE_CPU_COMPILE_MIN_ELEMENTS": "0", "TENSORWIRE_CPU_COMPILE_LARGE_RUNS": "0"},
             "numpy": {"TENSORWIRE_CPU_COMPILE": "0"}}
#: folders whose modules each start a cluster of their own (``cluster`` below): the fault tests kill, stop, restart
#: and flood services and time the workers, which must not reach other modules' tests (tests/faults/conftest.py
#: lets the few of its modules that change nothing share one cluster of the folder's own)
OWN_CLUSTER_FOLDERS = ("faults",)


def _module_markers(path: str) -> tuple:
    """The markers of the tests in the module at ``path``: its folder's (:data:`FOLDER_MARKERS`), ``slow``
    (:data:`SLOW`)."""
    try:
        rel = Path(path).resolve().relative_to(TESTS).as_posix()
    except ValueError:
        return ()
    folder = rel.split("/", 1)[0]
    marks = [getattr(pytest.mark, folder)] if folder in FOLDER_MARKERS else []
    if any(rel == s or (s.endswith("/") and rel.startswith(s)) for s in SLOW):
        marks.append(pytest.mark.slow)
    return tuple(marks)


@pytest.hookimpl(hookwrapper=True)
def pytest_collection(session):
    """Collect with bytecode written (``tests/_bytecode.py``): pytest caches each test module's rewritten asserts
    instead of rewriting ~330 modules on every run."""
    with writing_bytecode():
        yield


def pytest_collection_modifyitems(config, items):
    """Mark each test by its folder (:data:`FOLDER_MARKERS`) and its module's cost (:data:`SLOW`), worked out once a
    module (~22,000 tests in ~330 modules), and run the slow modules first.

    The order is for the README's ``-n auto`` run (pytest-xdist, ``--dist loadfile --no-loadscope-reorder`` in
    pyproject's ``addopts``): each worker takes the next whole module when it is nearly done with its last, so the
    long modules start first and the many short ones fill in at the end, instead of a 30 s module starting last
    while the other worker sits idle. A stable sort: each module's tests stay together and in their order."""
    by_module: dict[str, tuple] = {}
    for item in items:
        path = str(item.path)
        marks = by_module.get(path)
        if marks is None:
            marks = by_module[path] = _module_markers(path)
        for mark in marks:
            item.add_marker(mark)
    slow_modules = {path for path, marks in by_module.items() if pytest.mark.slow in marks}
    items.sort(key=lambda item: str(item.path) not in slow_modules)


def _stderr_fd(config) -> int:
    """The terminal's stderr, past pytest's capture (the descriptor pytest's own faulthandler plugin writes to)."""
    try:
        from _pytest.faulthandler import fault_handler_stderr_fd_key

        return config.stash[fault_handler_stderr_fd_key]
    except (ImportError, KeyError):
        return sys.__stderr__.fileno()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Arm the native watchdog for the test's setup, call and teardown."""
    faulthandler.dump_traceback_later(HARD_LIMIT_S, exit=True, file=_stderr_fd(item.config))
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def _healthy(cluster) -> bool:
    """Every service the cluster started is still running (none died, none was killed by a test)."""
    return not cluster.down() and all(svc.alive() for svc in cluster.services.values())


class SharedClusters:
    """The run's shared clusters, one per kind (``get(kind, start)``), started when a module first asks and closed
    when the run ends. One found unhealthy (a module's test killed a service, or one crashed) is closed and started
    afresh, so a failure stays in the module that caused it."""

    def __init__(self) -> None:
        self._by_kind: dict[str, object] = {}

    def get(self, kind: str, start: Callable[[], object]):
        c = self._by_kind.get(kind)
        if c is not None and not _healthy(c):
            sys.stderr.write(f"\nshared cluster {kind!r} found unhealthy ({c.down() or 'a service exited'}); "
                             f"starting a new one\n")
            c.close()  # (its logs stay when a service failed; close says where)
            c = None
        if c is None:
            c = self._by_kind[kind] = start()
        return c

    def default(self):
        """The run's shared cluster that ``cluster`` gives: cpu:0 and cpu:1, the autograd and collectives services,
        no hub."""
        return self.get("cpu:0,cpu:1", _two_cpus)

    def local(self, **settings):
        """The run's shared ``tw.LocalCluster(**settings)``: modules that ask with the same settings (and do not
        change the cluster) share one."""
        import tensorwire as tw

        kind = ",".join(f"{k}={settings[k]!r}" for k in sorted(settings))
        return self.get(kind, lambda: tw.LocalCluster(**settings))

    def cpu_mode(self, mode: str):
        """The run's shared cluster whose CPU workers (cpu:0, cpu:1; the autograd service, no collectives) all run in
        ``mode`` of :data:`CPU_MODES`: the modules that compare or check the two modes share them."""
        return self.local(devices=["cpu:0", "cpu:1"], collectives=False, extra_env=CPU_MODES[mode])

    def close(self) -> None:
        for c in self._by_kind.values():
            c.close()
        self._by_kind.clear()


@pytest.fixture(scope="session")
def shared_clusters():
    """The run's :class:`SharedClusters`."""
    pool = SharedClusters()
    yield pool
    pool.close()


def own_cluster(module_node) -> bool:
    """Whether a test module starts a cluster of its own: it is in :data:`OWN_CLUSTER_FOLDERS` or marked
    ``own_cluster`` (``pytestmark = pytest.mark.own_cluster``, with a comment saying how it changes the cluster)."""
    try:
        folder = Path(str(module_node.path)).resolve().relative_to(TESTS).parts[0]
    except ValueError:
        folder = ""
    return folder in OWN_CLUSTER_FOLDERS or module_node.get_closest_marker("own_cluster") is not None


def _two_cpus():
    import tensorwire as tw

    return tw.LocalCluster(devices=["cpu:0", "cpu:1"])


@pytest.fixture(scope="module")
def cluster(request, shared_clusters):
    """A LocalCluster with cpu:0 and cpu:1 (and the autograd and collectives services) for the test module: the
    run's shared one, or the module's own (:func:`own_cluster`)."""
    if own_cluster(request.node):
        with _two_cpus() as c:
            yield c
    else:
        yield shared_clusters.default()


@pytest.fixture(scope="module")
def session(cluster):
    """A session of the module's own on its cluster, the default one while the module runs."""
    import tensorwire as tw

    s = tw.connect(cluster.address)
    yield s
    s.close()
    tw.set_session(None)


@pytest.fixture
def record_graph_calls(monkeypatch) -> list:
    """A list that gets one entry per call of ``Session.record_graph`` (a backward graph recorded whole) while the
    test runs."""
    from tensorwire import session as S

    calls: list = []
    orig = S.Session.record_graph

    def record_graph(self, *a):
        calls.append(1)
        return orig(self, *a)

    monkeypatch.setattr(S.Session, "record_graph", record_graph)
    return calls
