"""The kernel-module cache (``KernelModules`` in ``backends/compiled_device.py``): kernels past ``MAX_KERNELS`` are
dropped, and a module is unloaded once none of its kernels is cached and no launcher made from them is alive.

:class:`Modules` is a ``KernelModules`` whose "driver" is a dict of loaded modules: a launcher checks, when called,
that its module is still loaded (as a GPU launch of an unloaded module's function fails), so a test that used a
launcher after its module went would fail. The CUDA and ROCm runtimes' own check on their stand-ins is
``tests/backends/_gpu_child._modules_are_unloaded_past_max_kernels``.
"""

from __future__ import annotations

import dataclasses
import gc
import threading

import pytest

from tensorwire.backends.compiled_device import KernelModules


@dataclasses.dataclass
class K:
    """A kernel as KernelModules needs one: a dataclass with a ``name`` (and what makes its identity)."""

    name: str
    body: str


class Renderer:
    def render(self, kernels) -> str:
        return "\n".join(f"{k.name}: {k.body}" for k in kernels)


class Modules(KernelModules):
    UNLOADS = True

    def __init__(self, max_kernels: int):
        super().__init__()
        self.MAX_KERNELS = max_kernels
        self.renderer, self.guard = Renderer(), threading.RLock()
        self.loaded: dict[int, set] = {}  # module handle -> the kernel names it holds
        self.handles = 0
        self.unloaded: list[int] = []

    def compile(self, source, kernels):
        return source

    def load_module(self, binary, source, group):
        self.handles += 1
        self.loaded[self.handles] = {k.name for _, k in group}
        return self.handles, {key: (self.handles, k.name) for key, k in group}

    def unload(self, handles):
        for h in handles:
            assert h in self.loaded, f"module {h} unloaded twice"
            del self.loaded[h]
            self.unloaded.append(h)

    def launcher(self, k, module, name):
        if k.body == "refused":
            raise ValueError("this kernel cannot be launched here")

        def launch():
            assert name in self.loaded.get(module, ()), f"{k.body}: a launch of module {module}, unloaded"
            return k.body
        return launch


def kernels(*bodies: str) -> list[K]:
    return [K(f"frag_{b}", b) for b in bodies]


def test_modules_are_unloaded_once_no_kernel_is_cached_and_no_launcher_alive():
    m = Modules(max_kernels=2)
    held = m.build(kernels("a"))  # a launcher kept alive (a cached plan's)
    for body in "bcdef":
        launchers = m.build(kernels(body))
        assert [f() for f in launchers.values()] == [body]
        del launchers
        assert len(m._kernels) <= 2
    m.prebuild([])  # (settles the launchers dropped since the last build)
    assert held["frag_a"]() == "a", "the kept launcher's module was unloaded"
    assert len(m.loaded) == 3 and m.loaded_modules() == 3, m.loaded  # a (held), e and f (cached)
    assert sorted(m.unloaded) == [2, 3, 4], m.unloaded  # b, c, d
    del held
    gc.collect()
    m.build(kernels("g"))
    assert 1 in m.unloaded and m.builds == 7


def test_a_dropped_kernel_comes_back_from_its_loaded_module_or_is_built_again():
    m = Modules(max_kernels=1)
    held = m.build(kernels("a"))
    m.build(kernels("b"))  # a leaves the cache; its module stays (held)
    assert m._key(kernels("a")[0]) not in m._kernels and m.builds == 2 and m.unloaded == []
    again = m.build(kernels("a"))  # from the loaded module: nothing built (b, dropped, has no launcher: unloaded)
    assert m.builds == 2 and again["frag_a"]() == "a" and m.unloaded == [2]
    del held, again
    m.build(kernels("b"))  # built again; a leaves the cache with no launcher left: unloaded
    assert m.builds == 3 and m.unloaded == [2, 1], m.unloaded
    builds = m.builds
    assert m.build(kernels("a"))["frag_a"]() == "a" and m.builds == builds + 1  # built and loaded anew
    assert m.unloaded == [2, 1, 3] and list(m.loaded) == [4], (m.unloaded, m.loaded)


def test_a_fragment_larger_than_the_cache_keeps_all_its_kernels():
    m = Modules(max_kernels=2)
    launchers = m.build(kernels("a", "b", "c", "d"))  # one module of four kernels
    assert [f() for f in launchers.values()] == ["a", "b", "c", "d"]
    assert len(m._kernels) == 4 and m.unloaded == []
    del launchers
    m.build(kernels("e"))
    m.build(kernels("f"))
    assert m.unloaded == [1], m.unloaded


def test_a_launcher_that_cannot_be_made_releases_its_hold():
    m = Modules(max_kernels=1)
    with pytest.raises(ValueError):
        m.build([K("x", "ok"), K("y", "refused")])
    m.build(kernels("b"))
    assert m.unloaded == [1] and m.loaded_modules() == 1, (m.unloaded, m.loaded)


def test_a_runtime_that_does_not_unload_only_drops_kernels():
    class Plain(Modules):
        UNLOADS = False

        def load_module(self, binary, source, group):
            return None, super().load_module(binary, source, group)[1]

    m = Plain(max_kernels=1)
    for body in "abc":
        m.build(kernels(body))
    assert list(m._kernels) == [m._key(kernels("c")[0])] and m.unloaded == [] and len(m._loaded) == 1
