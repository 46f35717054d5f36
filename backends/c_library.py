"""Kernels as C functions in shared libraries: what any device whose kernels a host C compiler builds shares.

The CPU's compiled mode (:mod:`.cpu.compiled`) is one: its runtime is a :class:`LibraryRuntime` that says only which
compiler, flags and cache it uses (:meth:`LibraryRuntime.compile_library`). What lives here once:

* :func:`find_c_compiler`: the first of some compilers on ``PATH`` that answers ``--version``;
* :class:`Library`: a loaded library, closed (``dlclose``) once nothing refers to it, the OpenMP runtime it brought in
  kept (:func:`pin_openmp`);
* :class:`LibraryRuntime`: a fragment's kernels with the sizes a C compiler gains from knowing written in
  (:meth:`~LibraryRuntime.specialise`), rendered into one source, built through the kernel cache and loaded (at most
  ``max_libraries`` at once: past it, :class:`TooManyLibraries`); each kernel a cffi function pointer
  (:func:`c_function`) called by a launcher on numpy arrays (:meth:`~LibraryRuntime.launcher`).

A loaded library stays loaded while a launcher made from it lives (each holds its :class:`Library`; a plan's
runners hold the launchers): when the worker's plan cache evicts the last plan using it, the library is closed, so
a worker that sees endless distinct fragments keeps a bounded number mapped.
"""

from __future__ import annotations

import _ctypes
import ctypes
import functools
import gc
import logging
import operator
import os
import shutil
import subprocess
import threading
import time
import weakref
from collections import OrderedDict

import numpy as np
from cffi import FFI

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DeviceError

from .codegen.ir import bind_sizes, costly_sizes
from .codegen.program import kernel_error

#: most kernel libraries loaded at once: each maps 5 regions, and Linux allows a process 65,530
#: (``vm.max_map_count``; ~13,000 libraries). Libraries close as the plans using them leave the plan cache; past this
#: many, new fragments run interpreted until some have (issue 34)
MAX_LIBRARIES = 4096
#: structures whose first sizes a runtime remembers (to write in the sizes that do not change: specialise)
SHAPES_REMEMBERED = 1 << 16
#: OpenMP runtimes a kernel library may load (gcc's, LLVM's, Intel's): once loaded, they stay (:func:`pin_openmp`)
OPENMP_RUNTIMES = ("libgomp.so.1", "libomp.so.5", "libomp.so", "libiomp5.so")

#: the process's cffi instance: it parses each distinct function type once
ffi = FFI()
#: ``ffi.from_buffer(array)`` (a ``char[]`` over the array's memory) without the Python wrapper around cffi's own call
#: (~0.3 us a buffer, a kernel launch's largest cost after the call: issue 37); the public call where cffi lacks it
_FROM_BUFFER = (functools.partial(ffi._backend.from_buffer, ffi.BCharA)
                if hasattr(ffi, "_backend") and hasattr(ffi, "BCharA") else ffi.from_buffer)
#: ``(from_buffer, ctype)``: ``from_buffer(ctype, array)`` is :data:`_FROM_BUFFER`'s call without the partial in
#: between (~0.15 us less; a runner's loop over its kernels' buffers: :func:`.codegen.program._run_on_pointers`)
RAW_FROM_BUFFER = ((ffi._backend.from_buffer, ffi.BCharA) if hasattr(ffi, "_backend") and hasattr(ffi, "BCharA")
                   else (lambda _ctype, b: ffi.from_buffer(b), None))
log = logging.getLogger("tensorwire.kernels")
_PINNED: list = []


def find_c_compiler(names) -> tuple[str, str] | None:
    """``(path, version)`` of the first of ``names`` (empty ones skipped) found on ``PATH`` whose ``--version``
    answers, its version the first line of that answer; None when none does."""
    for name in filter(None, names):
        path = shutil.which(name)
        if path:
            try:
                out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
            except (OSError, subprocess.SubprocessError):
                continue
            if out.returncode == 0:
                return path, out.stdout.splitlines()[0].strip() if out.stdout else name
    return None


class TooManyLibraries(DeviceError):
    """This process has its runtime's ``max_libraries`` kernel libraries loaded, each held by a live plan: the
    fragment runs interpreted (the worker's plan cache evicts plans, which closes their libraries)."""


def _dlclose(handle: int, path: str, unloaded: list) -> None:
    """Unload a kernel library nothing refers to any more (a :class:`Library`'s finalizer)."""
    try:
        _ctypes.dlclose(handle)
        unloaded[0] += 1
    except (AttributeError, OSError):  # (no dlclose here: the library stays mapped)
        log.debug("could not unload %s", path)


def pin_openmp() -> None:
    """Keep the OpenMP runtime loaded for good once a kernel library brought it in. Its thread pool outlives every
    parallel region: closing the last library that needed it would unload the code those idle threads sleep in (a
    segfault). A reference of our own (and ``RTLD_NODELETE``) keeps it mapped."""
    if _PINNED:
        return
    flags = getattr(os, "RTLD_NOLOAD", 0) | getattr(os, "RTLD_NODELETE", 0)
    for name in OPENMP_RUNTIMES:
        try:
            _PINNED.append(ctypes.CDLL(name, mode=flags))  # (NOLOAD: only one that is loaded already)
        except OSError:
            continue


class Library:
    """A loaded kernel library, closed (``dlclose``) once nothing refers to it: every launcher made from it holds
    it, so no live launcher can call into a closed library. Not at exit: a daemon thread may still be in a
    kernel. The OpenMP runtime it brings in stays loaded (:func:`pin_openmp`)."""

    def __init__(self, path: str, unloaded: list):
        self.path = path
        self.cdll = ctypes.CDLL(path)
        pin_openmp()
        fin = weakref.finalize(self, _dlclose, self.cdll._handle, path, unloaded)
        fin.atexit = False


def signature(k, renderer) -> str:
    """The C function pointer type of kernel ``k`` for cffi: every buffer (and the error slot) a ``void *``, then
    its scalars as ``renderer`` declares them. cffi parses each distinct type once; a library's symbols are found by
    ctypes (a ``cdef`` of every kernel would parse ~0.15 ms a kernel each time a library loads)."""
    params = ["void *"] * (len(k.bufs) + (1 if k.can_raise else 0)) + [renderer.scalar_type(s.dtype)
                                                                        for s in k.scalars]
    return f"void (*)({', '.join(params) or 'void'})"


def c_function(lib: ctypes.CDLL, k, renderer):
    """Kernel ``k`` of the loaded library ``lib`` as a cffi function pointer (``lib`` must stay loaded)."""
    return ffi.cast(signature(k, renderer), ctypes.cast(getattr(lib, k.name), ctypes.c_void_p).value)


_dtype_of = operator.attrgetter("dtype")


def pointer(buf, dtype: np.dtype):
    """A kernel's pointer to ``buf`` as a C-contiguous array of ``dtype`` (a ``char[]`` cdata that keeps the array
    alive; copied where it is not one: a view, another dtype). A launcher's ``pointers(ptrs, scalars)`` runs its
    kernel on such pointers, in its ``dtypes``: a runner whose kernels read a buffer several times asks once
    (~0.5 us a buffer; issue 30: a polynomial fit's 7 kernels take 47 buffers, 29 of them distinct). The launcher
    carries this function (``launch.pointer``) and :data:`RAW_FROM_BUFFER` (``launch.raw_from_buffer``) for the
    runner (:func:`.codegen.program._run_on_pointers`), which does not import this module (it imports the runner)."""
    if isinstance(buf, (np.ndarray, np.generic)) and (buf.dtype is dtype or buf.dtype == dtype):
        try:  # (cffi takes a C-contiguous buffer and refuses any other; a numpy scalar's, read in place: only a
            # kernel's input can be one, its outputs are arrays the run makes)
            return _FROM_BUFFER(buf)
        except ValueError:
            pass
    return _FROM_BUFFER(np.ascontiguousarray(buf, dtype=dtype))


class LibraryRuntime:
    """Builds fragments' kernels into shared libraries (through the kernel cache) and calls them on numpy arrays.

    A subclass gives ``renderer`` (a C renderer: buffers ``void *``, an error slot ``int64[2]`` after them), ``cache``
    (a :class:`~.codegen.cache.KernelCache`), ``max_libraries`` and ``limit_env`` (the variable that sets it, which
    :class:`TooManyLibraries` names) to ``__init__``, and implements :meth:`compile_library`."""

    target = "c"

    def __init__(self, renderer, cache, max_libraries: int, limit_env: str):
        self.renderer, self.cache = renderer, cache
        #: the libraries loaded now, by cache key (an entry goes when its last launcher does)
        self._libs: weakref.WeakValueDictionary[str, Library] = weakref.WeakValueDictionary()
        self.unloaded = [0]  # libraries closed so far (a list: the finalizers count into it)
        self.max_libraries, self.limit_env = max_libraries, limit_env
        self._collected = -1e9  # (monotonic) when _room last collected garbage
        self._lock = threading.Lock()
        self.err = np.zeros(2, np.int64)
        #: generic source's cache key -> (its costly sizes' first values, those that changed since; see specialise)
        self._first_sizes: OrderedDict = OrderedDict()

    def compile_library(self, src_path: str, out_path: str, flags: tuple[str, ...] = ()) -> None:
        """Build the source ``src_path`` into the shared library ``out_path`` (a temporary of the cache's), with
        ``flags`` after the runtime's own (:meth:`load`'s)."""
        raise NotImplementedError

    def load(self, source: str, kernels=None, what: str = "", flags: tuple[str, ...] = ()) -> Library:
        """The library of ``source``, loaded from the kernel cache (built there if absent or not trusted). Raises
        :class:`~.codegen.cache.UnsafeKernelCache` for a cache that is not private, :class:`TooManyLibraries` past
        ``max_libraries``. Hold the result while using its functions: it closes when nothing holds it. ``flags``:
        compiler flags this library is built with after the runtime's (a hand-written library that builds faster
        without an optimisation that does nothing for it: the host library's conv part, ``host_c.PART_FLAGS``);
        its source's first line names them, so the cache keys the library with them."""
        build = self.compile_library
        if flags:
            source = f"/* built with {' '.join(flags)} after the runtime's flags */\n{source}"
            build = functools.partial(self.compile_library, flags=tuple(flags))
        key = self.cache.key(source)
        with self._lock:
            lib = self._libs.get(key)
            if lib is None:
                self._room()
                path = self.cache.get_or_build(source, ".c", ".so", build, kernels, what)
                try:
                    lib = Library(path, self.unloaded)
                except OSError:  # evicted by another worker between its check and this load: build it again
                    path = self.cache.get_or_build(source, ".c", ".so", build, kernels, what, rebuild=True)
                    lib = Library(path, self.unloaded)
                self._libs[key] = lib
        return lib

    def _room(self) -> None:
        """Raise :class:`TooManyLibraries` if no other library may be loaded (after collecting the cycles that may
        hold dead plans' libraries)."""
        if len(self._libs) < self.max_libraries:
            return
        now = time.monotonic()
        if now - self._collected > 1.0:  # (a full collection costs ~0.1 s in a large worker: at most once a second)
            self._collected = now
            gc.collect()
        if len(self._libs) >= self.max_libraries:
            raise TooManyLibraries(f"this worker has {len(self._libs)} kernel libraries loaded, all in use by its "
                                   f"cached plans ({self.limit_env}={self.max_libraries}): the fragment runs "
                                   f"interpreted")

    def loaded(self) -> int:
        """How many kernel libraries this runtime has loaded now."""
        return len(self._libs)

    def build(self, kernels: list) -> dict:
        """``{kernel name: launcher(buffers, scalars)}`` for ``kernels`` (one library per fragment; each launcher
        keeps it loaded), built as :meth:`specialise` makes them."""
        kernels = self.specialise(kernels)
        lib = self.load(self.renderer.render(kernels), kernels)
        return {k.name: self.launcher(c_function(lib.cdll, k, self.renderer), k, lib) for k in kernels}

    def specialise(self, kernels: list) -> list:
        """A fragment's kernels as this runtime builds them. They take their sizes as parameters (shape-generic);
        the sizes a C compiler gains from knowing (a loop's length, a divisor: :func:`~.codegen.ir.costly_sizes`)
        are written in as constants (:func:`~.codegen.ir.bind_sizes`) while they keep the value they had when the
        structure (its generic source) was first built; one that changed is a parameter from then on. So a fixed
        shape keeps the fastest kernels, a batch that changes under a fixed width (the grid, a bias's modulus)
        reuses the first library, and a structure compiles once more each time another of its sizes first
        changes, not once a shape (as ``torch.compile``'s automatic dynamic shapes mark the dims that changed
        dynamic). A fragment with no such sizes is generic from its first size: one library serves every size.
        Remembered for :data:`SHAPES_REMEMBERED` structures."""
        bind = self._bake(self.renderer.render(kernels), kernels)
        return kernels if bind is None else [bind_sizes(k, names) for k, names in zip(kernels, bind)]

    def _bake(self, source: str, kernels: list) -> list | None:
        """The sizes of each kernel to write in (see :meth:`specialise`), or None: keep them all parameters."""
        costly = [costly_sizes(k) for k in kernels]
        if not any(costly):
            return None
        now = {(i, n): k.sizes[n] for i, (k, names) in enumerate(zip(kernels, costly)) for n in names}
        key = self.cache.key(source)
        with self._lock:
            first, changed = self._first_sizes.setdefault(key, (now, set()))
            changed.update(x for x, v in now.items() if first.get(x) != v)
            bind = [{n for n in names if (i, n) not in changed} for i, names in enumerate(costly)]
            self._first_sizes.move_to_end(key)
            if len(self._first_sizes) > SHAPES_REMEMBERED:
                self._first_sizes.popitem(last=False)
        return bind

    def launcher(self, f, k, lib: Library):
        """``launch(buffers, scalars)`` calling ``f`` (kernel ``k`` of ``lib``, from :func:`c_function`): through
        cffi, whose call costs ~0.5 us and a buffer's address ~0.2 us (a ctypes call cost ~1 us more, and numpy's
        ``__array_interface__`` ~0.9 us a buffer). ``scalars`` are the generic kernel's: a kernel with its sizes
        written in drops them."""
        dtypes = [b.dtype.np for b in k.bufs]
        err = self.err
        from_buffer = _FROM_BUFFER
        errp = from_buffer(err)
        ours = getattr(k, "kept_scalars", None)  # (a kernel with its sizes written in: see bind_sizes)

        def call(ptrs, scalars):
            if ours is not None:
                scalars = [scalars[i] for i in ours]
            if k.can_raise:
                err[0] = 0
                f(*ptrs, errp, *scalars)
                if err[0]:
                    raise kernel_error(k, int(err[0]), int(err[1]))
            else:
                f(*ptrs, *scalars)

        def launch(bufs, scalars):
            try:  # (cffi takes a C-contiguous buffer and refuses any other: numpy's own check; a numpy scalar's
                # too, whose value the call reads in place)
                ptrs = list(map(from_buffer, bufs))
                if list(map(_dtype_of, bufs)) != dtypes:
                    raise ValueError
            except (ValueError, TypeError, AttributeError):  # (a view, another dtype, not an array)
                ptrs = [pointer(b, dt) for b, dt in zip(bufs, dtypes)]
            call(ptrs, scalars)
        launch.library = call.library = lib  # loaded while this launcher (or its pointers' form) lives
        # (a runner that keeps each buffer's pointer for the run makes them with these and calls the kernel on them:
        # see pointer)
        launch.pointers, launch.dtypes, launch.pointer, launch.raw_from_buffer = call, dtypes, pointer, RAW_FROM_BUFFER
        return launch

    @staticmethod
    def empty(shape, dtype: D.DType):
        """An uninitialised output buffer: a numpy array."""
        return np.empty(shape, dtype.np)


__all__ = ["MAX_LIBRARIES", "Library", "LibraryRuntime", "TooManyLibraries", "c_function", "ffi", "find_c_compiler",
           "pin_openmp", "pointer", "RAW_FROM_BUFFER", "signature"]
