"""Tensor's methods from the modules that add them (issue 32: any client module may be imported first).

``tensorwire.tensor`` defines the class and its core methods; the modules in :data:`MODULES` add torch's derived
math, array, complex, Fourier, random, linear-algebra, sparse, sorting and special-function methods (``x.addmm``,
``x.stft``, ``x.det``, ``x.sort``, ``x.i0``...), and import ``Tensor`` to do so. ``Tensor`` is complete once
``tensorwire.tensor`` has loaded: its last line calls :func:`load`, which imports each of them in order, so a Tensor
never exists without its methods.

One of them may be the module a program imports first (``import tensorwire.math_extras``): it is then half run
when ``tensorwire.tensor``'s :func:`load` reaches it, and the modules after it would import names it has not
defined yet. :func:`load` stops there instead; each module in :data:`MODULES` calls :func:`loaded` on its last
line, which goes on with the rest. So the rule for a module here: import ``tensor``, the modules here before it
and leaf modules at module level; import ``creation`` and ``combine`` (``cat``, ``stack``, ``where``,
``write_out``) at module level too, but as modules, never their names (``from . import creation as _creation``,
then ``_creation.zeros(...)`` in a function): either may be the half-run module whose import (through ``context``
-> ``session`` -> ``tensor``) is loading this one. Not ``functions`` at all (it reads Tensor's methods as it
loads; such imports stay local, ``# circle:``). List the module in :data:`MODULES` after the modules here it
imports from, install its methods with :func:`install_methods`, :func:`register` its ``tw.<name>`` functions,
and end with ``_install.loaded(__name__)``.

This module imports nothing of the package, so any module may import it at any time.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

#: the modules that add methods to Tensor, each after those here it imports from
MODULES = ("tensorwire.complex_ops", "tensorwire.fft", "tensorwire.math_extras", "tensorwire.array_extras",
           "tensorwire.random_fills", "tensorwire.linalg_lapack", "tensorwire.linalg_decomp",
           "tensorwire.linalg_legacy", "tensorwire.sparse", "tensorwire.sorting", "tensorwire.special",
           "tensorwire.legacy_types", "tensorwire.index_functions", "tensorwire.inplace")
_loaded: set[str] = set()
#: ``tw.<name>`` functions those modules give (:func:`register`); ``tensorwire.functions.METHOD_FUNCTIONS`` is this
#: dict, its own functions taking precedence
FUNCTIONS: dict[str, Callable] = {}


def load() -> None:
    """Import each module of :data:`MODULES` not loaded yet, stopping at one that is being imported (it calls
    :func:`loaded` when it has run)."""
    for name in MODULES:
        if name in _loaded:
            continue
        if name in sys.modules:  # being imported (a failed import leaves no entry): it goes on from here
            return
        # circle: tensor -> _install -> MODULES -> tensor (each adds its methods to Tensor as it loads, in order)
        importlib.import_module(name)


def loaded(name: str) -> None:
    """``name`` (in :data:`MODULES`) has run and installed its methods: load the modules after it."""
    if name not in MODULES:
        raise ValueError(f"{name} is not one of tensorwire._install.MODULES")
    _loaded.add(name)
    load()


def register(functions: dict[str, Callable]) -> None:
    """Add a module's ``tw.<name>`` functions to :data:`FUNCTIONS` (a name given already keeps its function)."""
    for name, fn in functions.items():
        FUNCTIONS.setdefault(name, fn)


def install_methods(cls: type, methods: dict[str, Callable], *, wrap: bool = True) -> None:
    """Set each ``methods[name]`` on ``cls`` as ``cls.<name>``, leaving any attribute ``cls`` defines itself (a method
    written in its class body, or one an earlier module of :data:`MODULES` installed).

    Every module of :data:`MODULES` installs its methods through this. ``wrap`` (the default) installs
    :func:`method` of each function, a method object of its own, distinct from the ``tw.<name>`` function of the
    same name; ``wrap=False`` installs the functions themselves (their signatures stay visible to ``inspect``).
    """
    for name, fn in methods.items():
        if name not in cls.__dict__:
            setattr(cls, name, method(fn) if wrap else fn)


def method(fn: Callable) -> Callable:
    """``fn(self, ...)`` as a Tensor method: a function of its own, with ``fn``'s name and docstring."""
    def m(self, *args, **kwargs):
        return fn(self, *args, **kwargs)

    m.__name__ = fn.__name__
    m.__doc__ = fn.__doc__
    m.__wrapped__ = fn  # (``inspect.signature`` shows ``fn``'s parameters, its first the receiver)
    return m
