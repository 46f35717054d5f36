"""The compiled CPU backend's conformance kernels built ahead of a run, one compiler process a core.

A run of the conformance suite on the compiled CPU backend (every fragment compiled, however small) builds ~1,500
libraries, one gcc process after another: the runtime compiles a fragment when the case reaches it, under its lock.
With a cold kernel cache (a fresh CI clone) that is most of ``tests/backends/test_cpu_compiled.py``'s time. Here
the cases run dry first (``kernel_lists``: each case is lowered up to its first fragment, nothing runs), their
libraries' sources are made as a fresh runtime makes them (``LibraryRuntime.specialise``, in the cases' order), and
those missing from the cache are compiled on one thread a core into the kernel cache. The run itself is unchanged:
it builds and checks every fragment as before, and finds most of them in the cache (a later fragment of a case, or a
source the runtime makes otherwise after other modules' fragments, is still compiled by the run).

A warm cache costs a probe: the first :data:`PROBE` fragments' sources, looked up; when all are there nothing else
is lowered."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

from tensorwire.backends.codegen.cache import KernelCompileError, UnsafeKernelCache
from tensorwire.backends.cpu import CompiledBackend, compiled
from tensorwire.backends.testing.suite import kernel_lists

#: fragments whose sources are looked up before deciding that the cache is warm
PROBE = 100


def prebuild_c_kernels(cases: list, min_work: int = 0, large_runs: int = 0) -> dict:
    """Build the libraries of ``cases`` on the compiled CPU backend (``CompiledBackend(min_work=..., large_runs=...)``)
    into the kernel cache, in parallel; ``{"fragments", "sources", "built"}`` (0 built: the cache held the probe's).
    A source that fails to compile is left to the run, which reports it where a case reaches it; a cache the runtime
    refuses (:class:`UnsafeKernelCache`) builds nothing here, as it builds nothing in the run."""
    try:
        return _prebuild(cases, min_work, large_runs)
    except UnsafeKernelCache:
        return {"fragments": 0, "sources": 0, "built": 0}


def _prebuild(cases: list, min_work: int, large_runs: int) -> dict:
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

    probe = sources(kernel_lists(backend, cases[:PROBE]))
    if not missing(probe):
        return {"fragments": len(probe), "sources": len(probe), "built": 0}
    rt = compiled.CRuntime(base.compiler, base.version)  # (the probe's sizes forgotten: the whole run from the start)
    backend = CompiledBackend(rt, min_work=min_work, large_runs=large_runs)
    lists = kernel_lists(backend, cases)
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
