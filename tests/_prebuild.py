"""The compiled CPU backend's kernels built ahead of a run, one compiler process a core.

A run of the conformance suite on the compiled CPU backend (every fragment compiled, however small) builds ~1,500
libraries, one gcc process after another: the runtime compiles a fragment when the case reaches it, under its lock.
With a cold kernel cache (a fresh CI clone) that is most of ``tests/backends/test_cpu_compiled.py``'s time; the
gradient checks of ``tests/autograd/test_ops_gradcheck.py`` in the compiled mode make a worker build ~330 more, one
a batch. Here the fragments are found without running them: the conformance cases run dry (``kernel_lists``: each
case is lowered up to its first fragment, nothing runs), or the batches a session sent to a worker that compiles
nothing (:func:`recorded_batches`) are planned as a compiling worker plans them (:func:`batch_kernel_lists`). Their
libraries' sources are made as a fresh runtime makes them (``LibraryRuntime.specialise``, in the fragments' order),
and those missing from the cache are compiled on one thread a core into the kernel cache, the one the workers read.
The run itself is unchanged: it builds and checks every fragment as before, and finds most of them in the cache (a
later fragment of a case, a batch split across devices, or a source the runtime makes otherwise after other modules'
fragments, is still compiled by the run).

A warm cache costs a probe: the fragments of the first units of work (:data:`PROBE` conformance cases), their
sources looked up; when all are there nothing else is lowered."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from tensorwire.backends.codegen.cache import KernelCompileError, UnsafeKernelCache
from tensorwire.backends.codegen.lower import lower
from tensorwire.backends.cpu import CompiledBackend, compiled
from tensorwire.backends.executor import builds_runner, compile_plan
from tensorwire.backends.testing.suite import kernel_lists
from tensorwire.protocol.batch_ids import check_temps, kept_nodes, out_ids

#: conformance cases whose fragments' sources are looked up before deciding that the cache is warm
PROBE = 100

#: ``fragments(backend, n)``: the kernel lists (one a fragment) of the first ``n`` units of work (None: all of them)
#: on ``backend``'s device 0, in the order a run meets them
Fragments = Callable[[CompiledBackend, "int | None"], list]


def prebuild_c_kernels(cases: list, min_work: int = 0, large_runs: int = 0) -> dict:
    """Build the libraries of the conformance ``cases`` on the compiled CPU backend
    (``CompiledBackend(min_work=..., large_runs=...)``) into the kernel cache, in parallel: see
    :func:`prebuild_c_fragments`."""
    return prebuild_c_fragments(lambda backend, n: kernel_lists(backend, cases[:n]), min_work, large_runs)


def prebuild_c_fragments(fragments: Fragments, min_work: int = 0, large_runs: int = 0, probe: int = PROBE) -> dict:
    """Build the libraries of ``fragments`` on ``CompiledBackend(min_work=..., large_runs=...)`` into the kernel
    cache, one compiler a core; ``{"fragments", "sources", "built"}`` (0 built: the cache held the probe's, the
    first ``probe`` units' fragments). A source that fails to compile is left to the run, which reports it where
    it reaches it; a cache the runtime refuses (:class:`UnsafeKernelCache`) builds nothing here, as it builds nothing
    in the run."""
    try:
        return _prebuild(fragments, min_work, large_runs, probe)
    except UnsafeKernelCache:
        return {"fragments": 0, "sources": 0, "built": 0}


def _prebuild(fragments: Fragments, min_work: int, large_runs: int, probe_units: int) -> dict:
    base = compiled.runtime()
    rt = compiled.CRuntime(base.compiler, base.version)  # a fresh runtime: the sizes it binds are a fresh run's
    backend = CompiledBackend(rt, min_work=min_work, large_runs=large_runs)

    def sources(lists: list) -> dict:
        out: dict = {}
        for ks in lists:
            ks = rt.specialise(ks)
            src = rt.renderer.render(ks)
            out.setdefault(rt.cache.key(src), (src, ks))
        return out

    def missing(found: dict) -> list:
        folder = rt.cache.folder()
        return [v for k, v in found.items() if rt.cache._cached(k, folder / f"{k}.so") is None]

    probe = sources(fragments(backend, probe_units))
    if not missing(probe):
        return {"fragments": len(probe), "sources": len(probe), "built": 0}
    rt = compiled.CRuntime(base.compiler, base.version)  # (the probe's sizes forgotten: the whole run from the start)
    backend = CompiledBackend(rt, min_work=min_work, large_runs=large_runs)
    lists = fragments(backend, None)
    todo = missing(sources(lists))

    def build(item) -> int:
        src, ks = item
        try:
            rt.cache.get_or_build(src, ".c", ".so", rt.compile_library, ks)
        except KernelCompileError:
            return 0
        return 1

    with ThreadPoolExecutor(os.cpu_count() or 1, thread_name_prefix="prebuild-c") as ex:
        built = sum(ex.map(build, todo))
    return {"fragments": len(lists), "sources": len(todo), "built": built}


@contextmanager
def recorded_batches(session) -> Iterator[list]:
    """The batch messages ``session`` sends while the block runs, each header as the client made it (its nodes, or
    the plan number it replays, its inputs, outputs and releases), appended to the list it yields. Run the work on a
    cluster that compiles nothing (the numpy mode): :func:`batch_kernel_lists` plans them as a compiling worker
    would."""
    batches: list = []
    post = session._post

    def recording(header: dict, *args, **kwargs):
        if header.get("t") == "batch":
            batches.append(dict(header))  # (before the path it takes rewrites it)
        return post(header, *args, **kwargs)

    session._post = recording  # (an instance attribute over the method: this session only)
    try:
        yield batches
    finally:
        del session._post


def batch_kernel_lists(backend, batches: list) -> list:
    """The kernels of every fragment ``backend``'s device 0 would compile for ``batches`` (:func:`recorded_batches`,
    in the order sent), one list a runner, planned as its worker plans them (``compile_plan`` from the inputs'
    metas, the kept slots of ``Executor._admit``, ``builds_runner``, ``lower``) and never run. A batch the
    dispatcher splits across devices, or whose inputs are not known here, is left out (its run compiles it)."""
    dev = backend.open(0)
    metas: dict = {}  # handle id -> (shape, dtype) or a Fail: what each batch made
    plans: dict = {}  # plan number -> the plan its first batch made
    lists = []
    for h in batches:
        nodes, plan_no = h.get("nodes"), h.get("plan")
        if nodes is not None:
            try:
                plan = compile_plan(dev, nodes, [metas[i] for i in h.get("ext") or []])
            except Exception:  # noqa: BLE001 - an input made elsewhere, or a batch its worker refuses: the run's
                continue
            if plan_no is not None:
                plans[plan_no] = plan
        else:
            plan = plans.get(plan_no)
            if plan is None:
                continue
        n = len(plan.node_slot)
        outs = out_ids(h, n) if "out_first" in h else (h.get("outs") or [])
        metas.update(zip(outs, plan.node_meta))
        if len(h.get("devs") or ()) > 1 or len(outs) != n:
            continue
        temps = h.get("temps")
        kept = kept_nodes(n, temps) if temps is not None and check_temps(temps, n) else None
        keep = plan.kept_slots(outs, kept, h.get("release"))
        if builds_runner(dev, plan, keep):
            plan.runners[keep] = None  # (built once a plan and kept set, as the worker caches its runner)
            try:
                kernels = lower(plan.program.steps, set(keep), dev.lowering_options).kernels
            except Exception:  # noqa: BLE001 - a fragment that does not lower: its run reports it
                continue
            if kernels:
                lists.append(kernels)
    return lists
