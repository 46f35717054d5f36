"""What every compiled device shares, on tinygrad's ``Compiled`` device: discovery, the kernel-module cache, and the
device over a runtime.

A compiled device is a runtime file plus a renderer subclass (``docs/plugins.md``, "A compiled device"). Its runtime
plays tinygrad's three parts, each a few methods: the *allocator* (``empty``, ``upload``, ``download``,
``synchronize``, ``memory``), the *compiler* (:meth:`KernelModules.compile`: a module's source to what the driver
loads, through :class:`~.codegen.cache.KernelCache`) and the *program* (:meth:`KernelModules.load`: the loaded
module's kernels; :meth:`KernelModules.launcher`: a launch). What is the same for every such device lives here once:

* :class:`Found` and :class:`Discovery`: the devices a backend found on this host (or why none), discovered once
  per process;
* :class:`CompilingBackend`: the plugin side; every primitive runs through the kernel compiler
  (:attr:`~.base.Backend.compiles_primitives`), devices are listed and opened from discovery;
* :class:`KernelModules`: each distinct kernel compiled and loaded once per process, whatever fragments it appears
  in, named by the hash of its source so a module's source depends only on what it holds (and the disk cache
  finds it again); many fragments' kernels compiled in a few modules (:meth:`KernelModules.prebuild`);
* :class:`CompiledDevice`: the :class:`~.base.Device` over such a runtime: buffers, fused kernels
  (:func:`~.codegen.program.build_runner`), the step-by-step mode, the worker's own ops as host steps.

Nothing here imports a driver: a plugin imports on any host.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from tensorwire.protocol.errors import DeviceError

from .base import Backend, Device, DeviceInfo, Step
from .codegen.program import StepRunners, build_runner, host_step_call

# -- discovery --------------------------------------------------------------------------------------------------------


class Found:
    """The result of discovery: the usable ``devices`` (each with ``index``, ``name`` and ``memory_bytes``), or the
    ``reason`` there are none; ``driver``: the binding module the devices need (or None)."""

    def __init__(self, devices: list, reason: str = "", driver=None):
        self.devices, self.reason, self.driver = devices, reason, driver

    @property
    def available(self) -> bool:
        return bool(self.devices)


class Discovery:
    """``discover(refresh=False)``: what ``find()`` returns, found once per process (``refresh`` finds it again).
    ``found`` is the cached result (None: not yet; tests set it)."""

    def __init__(self, find: Callable[[], Found]):
        self.find = find
        self.found: Found | None = None
        self._lock = threading.Lock()

    def __call__(self, refresh: bool = False) -> Found:
        with self._lock:
            if self.found is None or refresh:
                self.found = self.find()
            return self.found


class DiscoveringBackend(Backend):
    """A backend whose devices come from discovery: a subclass says how to discover them (:meth:`discover`, a
    :class:`Found`), how to describe one (:meth:`describe`) and how to open one (:meth:`device`). A host without the
    driver or the device lists device 0 as unavailable with the reason discovery gave."""

    def discover(self) -> Found:
        """This host's devices of the backend's kind (cached by the runtime module's :class:`Discovery`)."""
        raise NotImplementedError

    def describe(self, dev) -> str:
        """The name ``devices()`` shows for ``dev``."""
        return dev.name

    def device(self, dev, driver) -> Device:
        """Open ``dev`` (one of :attr:`Found.devices`)."""
        raise NotImplementedError

    def devices(self) -> list[DeviceInfo]:
        found = self.discover()
        if not found.devices:
            return [DeviceInfo(self.name, 0, False, found.reason)]
        return [DeviceInfo(self.name, d.index, True, "", self.describe(d), d.memory_bytes) for d in found.devices]

    def open(self, index: int) -> Device:
        found = self.discover()
        if not found.devices:
            raise DeviceError(f"{self.name}:{index} is not available: {found.reason}")
        if not 0 <= index < len(found.devices):
            raise DeviceError(f"{self.name}:{index} does not exist; this host offers "
                              f"{', '.join(f'{self.name}:{d.index}' for d in found.devices)}")
        return self.device(found.devices[index], found.driver)


class CompilingBackend(DiscoveringBackend):
    """A backend whose every primitive op runs through the kernel compiler; composites always run through their
    decompositions (and fuse)."""

    compiles_primitives = True

    @property
    def native(self) -> frozenset[str]:
        return frozenset()


# -- the kernel-module cache ------------------------------------------------------------------------------------------


class KernelModules:
    """The compiled kernels of one device, each built once per process (by identity: its source under a neutral
    name), the least recently used dropped past :attr:`MAX_KERNELS`.

    A subclass sets ``renderer`` and ``guard`` (a context manager held while kernels are built and looked up: a lock,
    or the GPU runtimes' :class:`~.gpu_runtime.ThreadBinding`) and implements :meth:`compile` (a module's source to
    what :meth:`load` takes, through the disk cache), :meth:`load` (``{identity: entry}`` of a compiled module's
    kernels) and :meth:`launcher` (``launch(buffers, scalars)`` from a kernel and its entry)."""

    MAX_KERNELS = 1 << 15
    #: kernels to a module in :meth:`prebuild` (a compiler's fixed cost per module dominates small kernels)
    PER_MODULE = 256

    renderer = None
    guard = None

    def __init__(self):
        self._kernels: OrderedDict = OrderedDict()  # kernel identity -> what load() made for it
        self.builds = 0  # modules built or loaded by this runtime (for tests and benchmarks)

    def compile(self, source: str, kernels: list):
        """What :meth:`load` takes for ``source`` (the kernels ``kernels``), through the disk cache."""
        raise NotImplementedError

    def load(self, binary, source: str, group: list) -> dict:
        """``{identity: entry}`` for the ``(identity, kernel)`` pairs of ``group``, from the compiled ``binary``."""
        raise NotImplementedError

    def launcher(self, k, *entry):
        """``launch(buffers, scalars)`` running kernel ``k`` (its ``entry`` from :meth:`load`)."""
        raise NotImplementedError

    def _key(self, k) -> str:
        """A kernel's identity: its source (preamble included) under a neutral name."""
        return self.renderer.render([dataclasses.replace(k, name="tw_kernel")])

    def _ensure(self, kernels: list, keys: list, per_module: int) -> int:
        """Compile and load the kernels not loaded yet (by identity), ``per_module`` to a module; returns the modules
        built. Kernels are named by the hash of their identity, so a module's source depends only on what it
        holds (and the disk cache finds it again)."""
        missing: dict = {}
        for k, key in zip(kernels, keys):
            if key not in self._kernels and key not in missing:
                missing[key] = dataclasses.replace(k, name="k" + hashlib.sha256(key.encode()).hexdigest()[:20])
        items = list(missing.items())
        for start in range(0, len(items), per_module):
            group = items[start:start + per_module]
            source = self.renderer.render([k for _, k in group])
            binary = self.compile(source, [k for _, k in group])
            self.builds += 1
            self._kernels.update(self.load(binary, source, group))
        while len(self._kernels) > self.MAX_KERNELS:
            self._kernels.popitem(last=False)
        return -(-len(items) // per_module)

    def build(self, kernels: list) -> dict:
        """``{kernel name: launcher(buffers, scalars)}`` for ``kernels``. Kernels built for an earlier fragment are
        reused (training steps and gradient checks repeat the same few kernels in many fragments); the rest are
        compiled together in one module."""
        keys = [self._key(k) for k in kernels]
        with self.guard:
            self._ensure(kernels, keys, max(1, len(kernels)))
            found = []
            for key in keys:
                self._kernels.move_to_end(key)
                found.append(self._kernels[key])
        return {k.name: self.launcher(k, *entry) for k, entry in zip(kernels, found)}

    def prebuild(self, kernel_lists: list, per_module: int | None = None) -> int:
        """Compile and load the kernels of many fragments (``kernel_lists``, each what :meth:`build` would get) in
        modules of up to ``per_module`` kernels (default :attr:`PER_MODULE`), so that later :meth:`build` calls find
        them; returns the modules built."""
        flat = [k for ks in kernel_lists for k in ks]
        keys = [self._key(k) for k in flat]
        with self.guard:
            return self._ensure(flat, keys, per_module or self.PER_MODULE)


# -- the device -------------------------------------------------------------------------------------------------------


class CompiledDevice(Device):
    """One compiled device over ``runtime`` (a :class:`KernelModules` that is also the allocator: ``empty``,
    ``upload``, ``download``, ``synchronize``, ``memory``): buffers have ``shape``, ``dtype`` and ``nbytes`` and go
    back when their last reference drops; fragments run as fused kernels lowered with ``lowering_options``; steps run
    one at a time (after a kernel raised, or in plans with transfers) are lowered alone and cached by their
    structure."""

    MAX_STEP_RUNNERS = 4096

    def __init__(self, backend: Backend, index: int, runtime, lowering_options):
        self.backend, self.index, self.runtime, self.lowering_options = backend, index, runtime, lowering_options
        self._step_runners = StepRunners(self, self.MAX_STEP_RUNNERS)

    # buffers ------------------------------------------------------------------------------------------
    def upload(self, array):
        a = np.asarray(array)
        return self.runtime.upload(a if a.flags.c_contiguous else np.ascontiguousarray(a))

    def download(self, buf) -> np.ndarray:
        return self.runtime.download(buf)

    def free(self, buf) -> None:
        """Nothing to do: the memory goes back when the last reference (kernels queued on it too) drops."""

    def nbytes(self, buf) -> int:
        return buf.nbytes

    def meta(self, buf):
        return buf.shape, buf.dtype

    def synchronize(self) -> None:
        self.runtime.synchronize()

    def memory(self) -> dict:
        return self.runtime.memory()

    # running ------------------------------------------------------------------------------------------
    def runner(self, plan, keep):
        return build_runner(self, plan, keep)

    def host_call(self, step: Step):
        """A callable for a host step: the worker's own ops (``const``, ``hub_tensor``)."""
        from .executor import WORKER_OPS

        if step.op not in WORKER_OPS:
            raise DeviceError(f"the {self.backend.name} backend has no host kernel for {step.op!r}")
        return host_step_call(self, step)

    def run_step(self, step: Step, args: list, attrs: dict):
        """One step on its own (the executor's step-by-step mode): lowered alone, cached by its structure."""
        return self._step_runners.run(step, args, attrs)


__all__ = ["CompiledDevice", "CompilingBackend", "Discovery", "DiscoveringBackend", "Found", "KernelModules"]
