"""What every compiled device shares, on tinygrad's ``Compiled`` device: discovery, the kernel-module cache, and the
device over a runtime.

A compiled device is a runtime file plus a renderer subclass (``docs/plugins.md``, "A compiled device"). Its runtime
plays tinygrad's three parts, each a few methods: the *allocator* (``empty``, ``upload``, ``download``,
``synchronize``, ``memory``), the *compiler* (:meth:`KernelModules.compile`: a module's source to what the driver
loads, through :class:`~.codegen.cache.KernelCache`) and the *program* (:meth:`KernelModules.load`: the loaded
module's kernels; :meth:`KernelModules.launcher`: a launch). What is the same for every such device lives here once:

* :class:`Found` and :class:`Discovery`: the devices a backend found on this host (or why none), discovered once
  per process; :func:`load_binding` and :meth:`Found.failed` say why a driver's binding or its start failed;
* :class:`CompilingBackend`: the plugin side; every primitive runs through the kernel compiler
  (:attr:`~.base.Backend.compiles_primitives`), devices are listed and opened from discovery;
* :class:`Allocations` and :class:`CountedBuffer`: an allocator for a driver that keeps no pool of its own (OpenCL):
  buffers counted while alive, allocations checked against the device's limits;
* :class:`KernelModules`: each distinct kernel compiled and loaded once per process, whatever fragments it appears
  in, named by the hash of its source so a module's source depends only on what it holds (and the disk cache
  finds it again); many fragments' kernels compiled in a few modules (:meth:`KernelModules.prebuild`); a driver
  that keeps its own binaries compiles through :meth:`KernelModules.compile_in_driver`;
* :class:`CompiledDevice`: the :class:`~.base.Device` over such a runtime: buffers, fused kernels
  (:func:`~.codegen.program.build_runner`), the step-by-step mode, the worker's own ops as host steps, and host
  steps on the backend's kernels (:meth:`CompiledDevice.kernel_call`); :func:`has_complex`, :func:`refuse_complex`
  and :func:`complex_error` for the complex values the kernel compiler has no arithmetic for.

Two families share one more layer: kernels that are C functions in shared libraries (the CPU's compiled mode) share
:mod:`.c_library` (loading and closing libraries, size specialisation, the cffi launcher), and CUDA and ROCm share
:mod:`.gpu_runtime` (memory, staging, module loading and launches over a table of driver calls).

Kernel error slots (:mod:`.kernel_errors`) are shared the same way: a launcher takes a slot with
:meth:`~.kernel_errors.ErrorSlots.take`, a runtime's ``check_errors`` reads them with
:meth:`~.kernel_errors.ErrorSlots.check`.

Nothing here imports a driver: a plugin imports on any host.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import math
import os
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DeviceError, OutOfMemory

from .base import Backend, Device, DeviceInfo, Step
from .codegen.program import StepRunners, build_runner, host_step_call
from .jobs import uninterrupted
from .worker_ops import WORKER_OPS

# -- discovery --------------------------------------------------------------------------------------------------------


def one_line(e: BaseException, limit: int | None = None) -> str:
    """A driver's error message on one line (its white space folded), cut to its first ``limit`` characters."""
    return " ".join(str(e).split())[:limit]


class Found:
    """The result of discovery: the usable ``devices`` (each with ``index``, ``name`` and ``memory_bytes``), or the
    ``reason`` there are none; ``driver``: the binding module the devices need (or None)."""

    def __init__(self, devices: list, reason: str = "", driver=None):
        self.devices, self.reason, self.driver = devices, reason, driver

    @property
    def available(self) -> bool:
        return bool(self.devices)

    @classmethod
    def failed(cls, what: str, e: BaseException) -> Found:
        """No devices: ``what`` (the driver's start, its device listing) raised ``e``."""
        return cls([], f"{what} ({type(e).__name__}: {one_line(e)})")


def load_binding(load: Callable[[], object], binding: str, install: str) -> tuple[object, Found | None]:
    """``(module, None)`` with the driver's Python binding ``load()`` imports, or ``(None, found)`` where it does not
    import: no devices, because ``binding`` is not installed (``install`` says how to get it)."""
    try:
        return load(), None
    except ImportError as e:
        return None, Found([], f"{binding} is not installed ({e}); {install}")


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

    def runtime_module(self):
        """The ``runtime`` module of the backend class's package, imported when devices are first listed or opened
        (every worker builds every plugin's backend; a runtime brings its driver's modules: ``gpu_runtime``, a
        compiler's, a BLAS's)."""
        # lazy: the runtime of whichever backend class this is, named by its package, with its driver's modules
        return importlib.import_module(".runtime", sys.modules[type(self).__module__].__package__)

    def discover(self):
        return self.runtime_module().discover()


# -- the allocator ---------------------------------------------------------------------------------------------------


class Allocations:
    """What is allocated on a device whose driver keeps no pool of its own (OpenCL): the bytes and buffers alive,
    and the device's limits, checked before each allocation (:meth:`allocate`)."""

    def __init__(self, device: str, total: int, largest: int):
        self.device, self.total, self.largest = device, total, largest
        self.bytes = self.buffers = 0

    def allocate(self, shape, dtype: D.DType, make: Callable[[int], object]) -> CountedBuffer:
        """A buffer of ``shape`` and ``dtype`` over ``make(nbytes)`` (the driver's allocation), or
        :class:`OutOfMemory` where it is larger than the device allocates at once or than what is left of it."""
        shape = tuple(int(n) for n in shape)
        nbytes = math.prod(shape) * dtype.itemsize
        what = f"{dtype.name}{list(shape)} needs {nbytes} bytes"
        if nbytes > self.largest:
            raise OutOfMemory(f"{what}; the largest buffer {self.device} allocates is {self.largest} bytes")
        if self.bytes + nbytes > self.total:  # (a CPU driver would take it from the host's RAM regardless)
            raise OutOfMemory(f"{what}; {self.bytes} of the {self.total} bytes of {self.device} are in use")
        return CountedBuffer(make(nbytes), shape, dtype, nbytes, self)

    def stats(self) -> dict:
        """``memory()``'s figures: bytes and buffers alive, the device's total."""
        return {"allocated_bytes": self.bytes, "buffers": self.buffers, "total_bytes": self.total}


class CountedBuffer:
    """A device buffer: the driver's ``buf`` holding a tensor of ``shape`` and ``dtype`` (``nbytes``), counted in
    its device's :class:`Allocations` until the last reference drops."""

    __slots__ = ("buf", "shape", "dtype", "nbytes", "_count", "__weakref__")

    def __init__(self, buf, shape: tuple, dtype: D.DType, nbytes: int, count: Allocations):
        self.buf, self.shape, self.dtype, self.nbytes, self._count = buf, shape, dtype, nbytes, count
        count.bytes += nbytes
        count.buffers += 1

    def __del__(self):
        self._count.bytes -= self.nbytes
        self._count.buffers -= 1

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.dtype.name}{list(self.shape)})"


# -- the kernel-module cache ------------------------------------------------------------------------------------------


class _Module:
    """A loaded module as :class:`KernelModules` counts it: its ``handle`` (what :meth:`KernelModules.unload` takes),
    the identities of its kernels, how many of them the cache keeps (``kernels``) and how many launchers made from
    them are alive (``launchers``)."""

    __slots__ = ("handle", "keys", "kernels", "launchers", "unloaded")

    def __init__(self, handle, keys: list):
        self.handle, self.keys, self.kernels, self.launchers, self.unloaded = handle, keys, 0, 0, False

    @property
    def idle(self) -> bool:
        return self.kernels == 0 and self.launchers == 0 and not self.unloaded


class KernelModules:
    """The compiled kernels of one device, each built once per process (by identity: its source under a neutral
    name), the least recently used dropped past :attr:`MAX_KERNELS`.

    A subclass sets ``renderer`` and ``guard`` (a context manager held while kernels are built and looked up: a lock,
    or the GPU runtimes' :class:`~.gpu_runtime.ThreadBinding`) and implements :meth:`compile` (a module's source to
    what :meth:`load` takes, through the disk cache), :meth:`load` (``{identity: entry}`` of a compiled module's
    kernels) and :meth:`launcher` (``launch(buffers, scalars)`` from a kernel and its entry).

    A runtime whose modules must be unloaded (a GPU driver's ``cuModuleUnload``) sets :attr:`UNLOADS`, implements
    :meth:`load_module` (the module's handle with the entries) and :meth:`unload`. A module is then unloaded, under
    ``guard``, once none of its kernels is in the cache *and* no launcher made from them is alive: a fragment's
    launchers (held by its cached plan) keep their module loaded, so no launch ever uses an unloaded module, and a
    kernel dropped from the cache and asked for again is taken back from its module while that is still loaded, else
    built and loaded anew. Launchers are counted by a finalizer that only notes the module (it may run on any thread,
    during garbage collection); the counts are settled at the next :meth:`build` or :meth:`prebuild`."""

    MAX_KERNELS = 1 << 15
    #: kernels to a module in :meth:`prebuild` (a compiler's fixed cost per module dominates small kernels)
    PER_MODULE = 256
    #: whether modules are unloaded (:meth:`load_module`, :meth:`unload`; launchers are then counted)
    UNLOADS = False

    renderer = None
    guard = None
    #: whether :meth:`compile` may run on several threads at once (a prebuild's modules compile in parallel)
    PARALLEL_COMPILE = False

    def __init__(self):
        self._kernels: OrderedDict = OrderedDict()  # kernel identity -> what load() made for it (least recent first)
        self._loaded: dict = {}  # kernel identity -> (_Module, entry), for every kernel whose module is loaded
        self._dropped: list = []  # modules one of whose launchers died (appended by finalizers, on any thread)
        self.builds = 0  # modules built or loaded by this runtime (for tests and benchmarks)
        self.unloads = 0  # modules unloaded

    def compile(self, source: str, kernels: list):
        """What :meth:`load` takes for ``source`` (the kernels ``kernels``), through the disk cache."""
        raise NotImplementedError

    def compile_in_driver(self, source: str, kernels: list, suffix: str, make: Callable[[str, str], object]):
        """:meth:`compile` for a driver that keeps its own binaries (PoCL's ``POCL_CACHE_DIR``): ``make(source,
        path)`` builds the program in this process (raising :class:`~.codegen.cache.KernelCompileError` that names
        ``path``); the kernel cache (``self.cache``) keeps the source under ``suffix``, so an error names a file, and
        a marker that it built."""
        made = []

        def build(src_path: str, out_path: str) -> None:
            made.append(make(source, src_path))
            with open(out_path, "wb") as f:
                f.write(b"built\n")

        self.cache.get_or_build(source, suffix, ".built", build, kernels)
        return made[0] if made else make(source, str(self.cache.folder() / f"{self.cache.key(source)}{suffix}"))

    def load(self, binary, source: str, group: list) -> dict:
        """``{identity: entry}`` for the ``(identity, kernel)`` pairs of ``group``, from the compiled ``binary``."""
        raise NotImplementedError

    def load_module(self, binary, source: str, group: list) -> tuple:
        """``(handle, {identity: entry})``: :meth:`load`'s entries and what :meth:`unload` takes to unload the module
        (None here: a runtime that does not set :attr:`UNLOADS` leaves its modules to the garbage collector)."""
        return None, self.load(binary, source, group)

    def unload(self, handles: list) -> None:
        """Unload the modules ``handles`` (from :meth:`load_module`); no kernel of theirs is kept or launchable."""

    def launcher(self, k, *entry):
        """``launch(buffers, scalars)`` running kernel ``k`` (its ``entry`` from :meth:`load`)."""
        raise NotImplementedError

    def loaded_modules(self) -> int:
        """How many modules are loaded (for tests and stats)."""
        with self.guard:
            return len({id(rec) for rec, _ in self._loaded.values()})

    def _key(self, k) -> str:
        """A kernel's identity: its source (preamble included) under a neutral name."""
        return self.renderer.render([dataclasses.replace(k, name="tw_kernel")])

    def _ensure(self, kernels: list, keys: list, per_module: int) -> int:
        """Compile and load the kernels not loaded yet (by identity), ``per_module`` to a module; returns the modules
        built. Kernels are named by the hash of their identity, so a module's source depends only on what it
        holds (and the disk cache finds it again). A kernel dropped from the cache whose module is still loaded is
        taken back from it."""
        self._settle()
        missing: dict = {}
        for k, key in zip(kernels, keys):
            if key in self._kernels or key in missing:
                continue
            if key in self._loaded:  # dropped from the cache, its module still loaded (a launcher holds it)
                rec, entry = self._loaded[key]
                self._kernels[key] = entry
                rec.kernels += 1
                continue
            missing[key] = dataclasses.replace(k, name="k" + hashlib.sha256(key.encode()).hexdigest()[:20])
        items = list(missing.items())
        groups = [items[start:start + per_module] for start in range(0, len(items), per_module)]
        sources = [self.renderer.render([k for _, k in group]) for group in groups]
        binaries = self._compile_all(sources, [[k for _, k in group] for group in groups])
        for group, source, binary in zip(groups, sources, binaries):
            self.builds += 1
            handle, made = self.load_module(binary, source, group)
            rec = _Module(handle, list(made))
            for key, entry in made.items():
                self._kernels[key] = entry
                self._loaded[key] = (rec, entry)
                rec.kernels += 1
        return -(-len(items) // per_module)

    def _compile_all(self, sources: list[str], kernels: list[list]) -> list:
        """:meth:`compile` of each module; several at once on threads where the runtime says its compiler allows it
        (:attr:`PARALLEL_COMPILE`: NVRTC and hipRTC run outside the GIL, and the disk cache writes each entry
        atomically)."""
        if len(sources) < 2 or not self.PARALLEL_COMPILE:
            return [self.compile(src, ks) for src, ks in zip(sources, kernels)]
        with ThreadPoolExecutor(min(len(sources), os.cpu_count() or 1), thread_name_prefix="tensorwire-compile") as ex:
            with uninterrupted():  # (its threads start as the compiles are submitted: jobs.uninterrupted says why)
                futures = [ex.submit(self.compile, src, ks) for src, ks in zip(sources, kernels)]
            return [f.result() for f in futures]

    def _evict(self, keep=frozenset()) -> None:
        """Drop the least recently used kernels past :attr:`MAX_KERNELS` (never those of ``keep``, which the caller
        moved to the end), and unload the modules that leaves idle."""
        idle = []
        while len(self._kernels) > self.MAX_KERNELS:
            key = next(iter(self._kernels))
            if key in keep:
                break
            del self._kernels[key]
            rec = self._loaded[key][0]
            rec.kernels -= 1
            if rec.idle:
                idle.append(rec)
        self._release(idle)

    def _settle(self) -> None:
        """Count the launchers that died since the last call, and unload the modules that leaves idle."""
        idle = []
        while self._dropped:
            rec = self._dropped.pop()
            rec.launchers -= 1
            if rec.idle:
                idle.append(rec)
        self._release(idle)

    def _release(self, idle: list) -> None:
        recs = [rec for rec in dict.fromkeys(idle) if rec.idle]
        if not recs:
            return
        for rec in recs:
            rec.unloaded = True
            for key in rec.keys:
                if self._loaded.get(key, (None,))[0] is rec:
                    del self._loaded[key]
        handles = [rec.handle for rec in recs if rec.handle is not None]
        if handles:
            self.unload(handles)
            self.unloads += len(handles)

    def _hold(self, launch, rec: _Module):
        """``launch``, counted as holding ``rec`` loaded until it is garbage."""
        weakref.finalize(launch, self._dropped.append, rec).atexit = False
        return launch

    def build(self, kernels: list) -> dict:
        """``{kernel name: launcher(buffers, scalars)}`` for ``kernels``. Kernels built for an earlier fragment are
        reused (training steps and gradient checks repeat the same few kernels in many fragments); the rest are
        compiled together in one module."""
        keys = [self._key(k) for k in kernels]
        track = self.UNLOADS
        with self.guard:
            self._ensure(kernels, keys, max(1, len(kernels)))
            found = []
            for key in keys:
                self._kernels.move_to_end(key)
                rec, entry = self._loaded[key]
                if track:
                    rec.launchers += 1  # (held from here: a launcher made outside the guard takes the hold over)
                found.append((rec, entry))
            self._evict(frozenset(keys))
        out = {}
        for i, (k, (rec, entry)) in enumerate(zip(kernels, found)):
            try:
                launch = self.launcher(k, *entry)
            except BaseException:
                if track:
                    self._dropped.extend(r for r, _ in found[i:])
                raise
            out[k.name] = self._hold(launch, rec) if track else launch
        return out

    def prebuild(self, kernel_lists: list, per_module: int | None = None) -> int:
        """Compile and load the kernels of many fragments (``kernel_lists``, each what :meth:`build` would get) in
        modules of up to ``per_module`` kernels (default :attr:`PER_MODULE`), so that later :meth:`build` calls find
        them; returns the modules built."""
        flat = [k for ks in kernel_lists for k in ks]
        keys = [self._key(k) for k in flat]
        with self.guard:
            built = self._ensure(flat, keys, per_module or self.PER_MODULE)
            self._evict()
            return built


# -- the device -------------------------------------------------------------------------------------------------------


_LAST_COMPLEX: tuple = (None, 0, False)  # (the steps has_complex answered last, their count, its answer)


def has_complex(steps) -> bool:
    """Whether any step of a fragment makes or reads a complex value (an ``expansion_counts.StepCounts``, which has
    no steps, answers False: its fragment's steps are checked when it is planned). The answer for the last steps
    asked about is kept: planning a fragment asks several times (the CPU's ``interpreted``, ``compiles_first``...)."""
    global _LAST_COMPLEX
    if not isinstance(steps, (list, tuple)):
        return False
    last = _LAST_COMPLEX
    if last[0] is steps and last[1] == len(steps):  # (a plan's steps do not change once it is made)
        return last[2]
    got = any(s.complex_dtype() is not None for s in steps)
    _LAST_COMPLEX = (steps, len(steps), got)
    return got


def remember_complex(steps, answer: bool) -> None:
    """Give :func:`has_complex` its answer for ``steps``, which the planner knows already (summed per remembered
    expansion: ``executor._Expansion``; a pass over a shape-changing loop's every plan had cost ~0.5 us a step)."""
    global _LAST_COMPLEX
    _LAST_COMPLEX = (steps, len(steps), answer)


def complex_error(device, what: str) -> NotImplementedError:
    """The error for ``what`` (an op on complex values, an upload of them) on ``device``, whose kernels have no
    complex arithmetic."""
    b = device.backend.name
    return NotImplementedError(f"{what} values: the {b} backend ({b}:{device.index}) has no complex kernels")


def refuse_complex(device, steps) -> None:
    """:func:`complex_error` naming the op for a step that makes or reads a complex value: the kernel compiler has
    no complex arithmetic (the CPU backend runs such fragments on its numpy kernels instead)."""
    for s in steps:
        dt = s.complex_dtype()
        if dt is not None:
            raise complex_error(device, f"{s.op} on {dt.name}")


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
        refuse_complex(self, plan.program.steps)
        return build_runner(self, plan, keep)

    def host_call(self, step: Step):
        """A callable for a host step: the worker's own ops (``const``, ``hub_tensor``)."""
        if step.op not in WORKER_OPS:
            raise DeviceError(f"the {self.backend.name} backend has no host kernel for {step.op!r}")
        return host_step_call(self, step)

    def run_step(self, step: Step, args: list, attrs: dict):
        """One step on its own (the executor's step-by-step mode): lowered alone, cached by its structure."""
        refuse_complex(self, [step])
        return self._step_runners.run(step, args, attrs)

    def kernel_call(self, step: Step):
        """``call(args, dyn, frames)`` running a host step with the backend's kernel (``step.kernel``, else
        ``backend.kernels[step.op]``), the step's own dynamic attributes picked from ``dyn``."""
        kernel = step.kernel or self.backend.kernels[step.op]
        attrs, shape, dtype, origin, dynamic = step.attrs, tuple(step.shape), step.dtype, step.origin, step.dynamic

        def call(args, dyn, frames):
            d = dyn.get(origin) if dyn and dynamic else None
            return kernel(args, {**attrs, **d} if d else attrs, shape, dtype)
        return call


__all__ = ["Allocations", "CompiledDevice", "CompilingBackend", "CountedBuffer", "Discovery", "DiscoveringBackend",
           "Found", "KernelModules", "complex_error", "has_complex", "load_binding", "one_line", "refuse_complex",
           "remember_complex"]
