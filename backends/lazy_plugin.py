"""A backend plugin package that imports its backend class only when asked for it (the ``cuda`` and ``mps``
packages): ``tensorwire.backends`` imports those packages for ``torch.backends.cuda``'s and ``torch.backends.mps``'s
names, which need none of the compiled-device machinery, so the class lives in the package's ``backend`` module and
the package's hook and module ``__getattr__`` (PEP 562) import it on first use."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from tensorwire.backends.hookspecs import hookimpl


def lazy_backend(package: str, cls: str) -> tuple[Callable, Callable]:
    """``(tensorwire_backends, __getattr__)`` for the plugin package ``package`` whose backend class ``cls`` is in
    ``package.backend``: the hook returns one instance of it (its devices say whether their libraries and hardware
    are there), the module attribute ``cls`` imports it."""

    def load():
        # lazy: the plugin's backend module, named by its package (every worker lists every plugin; each at first use)
        return getattr(importlib.import_module(f"{package}.backend"), cls)

    @hookimpl
    def tensorwire_backends():
        return [load()()]

    def __getattr__(name: str):
        if name == cls:
            return load()
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    tensorwire_backends.__doc__ = f"The {cls} plugin's backend (its devices say whether they are available)."
    return tensorwire_backends, __getattr__


def torch_availability(kind: str) -> tuple[Callable[[], bool], Callable[[], bool]]:
    """``(is_built, is_available)`` of ``torch.backends.<kind>``, for programs written for PyTorch."""

    def is_built() -> bool:
        return True

    def is_available() -> bool:
        # lazy: the client (accelerator -> session, tensor), asked only by a program; the workers import this module
        from tensorwire.accelerator import device_indices

        return bool(device_indices(kind))  # asking connects, as any ``tw`` call does

    is_built.__doc__ = (f"True: the client needs no {kind.upper()} build of its own (the cluster's workers run the "
                        "kernels).")
    is_available.__doc__ = f"Whether the connected cluster has a ``{kind}`` device."
    return is_built, is_available
