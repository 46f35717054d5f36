"""The hook specifications a tensorwire backend plugin implements (pluggy project ``tensorwire``).

A plugin is any module or object with functions marked ``@tensorwire.backends.hookimpl`` and
published through the ``tensorwire`` entry-point group of its package::

    # pyproject.toml of your plugin
    [project.entry-points.tensorwire]
    mydevice = "my_tensorwire_plugin"

    # my_tensorwire_plugin.py
    from tensorwire.backends import hookimpl
    from tensorwire.backends.base import Backend

    class MyBackend(Backend):
        name = "mydev"
        ...

    @hookimpl
    def tensorwire_backends():
        return [MyBackend()]

Workers load every plugin found through the entry point when they start (``tensorwire worker
--device mydev:0``), so a ``pip install`` is all it takes to add hardware. Run
:mod:`tensorwire.backends.testing` against your backend to check it conforms. See docs/plugins.md for the guide.
"""

from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("tensorwire")
#: the marker of a plugin's hook functions (``tensorwire.backends.hookimpl`` re-exports it: plugins import it from
#: there; the built-in backends import it from here, below the package, which loads the CPU backend on first use)
hookimpl = pluggy.HookimplMarker("tensorwire")


@hookspec
def tensorwire_backends() -> list:
    """Return the :class:`~tensorwire.backends.base.Backend` objects this plugin provides.

    Each backend owns one device type (``backend.name``, e.g. ``"cpu"``, ``"cuda"``). Creating the
    objects must not fail when the hardware or driver is missing: report that through
    :meth:`Backend.devices` (``available=False`` with a ``reason``) instead.
    """


@hookspec
def tensorwire_kernels(backend) -> dict:
    """Return extra kernels for an existing backend, as ``{op_name: kernel}``.

    Called once for every backend a worker loads; return ``{}`` (or ``None``) for backends you do
    not extend. A kernel for a *composite* op (``softmax``, ``gelu`` ...) replaces its
    decomposition on that backend. The kernel signature is the backend's own; for the CPU
    backend (and any subclass of ``NumpyBackend``) it is ``kernel(inputs: list[np.ndarray],
    attrs: dict, shape: tuple, dtype: DType) -> np.ndarray``.
    """


# custom ops are the op table's: their hook is defined with it (one definition), and re-exported here so a
# plugin author finds every hook in one place
from tensorwire.protocol.ops.plugins import tensorwire_ops  # noqa: E402, F401
