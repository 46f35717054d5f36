"""Custom ops from installed plugins: the op table's side of the ``tensorwire_ops`` hook.

Plugins are found through the ``tensorwire`` entry-point group, the same group that carries backends (see
:mod:`tensorwire.backends.hookspecs` for a plugin author's guide). Any process that reads the op table can add the
installed plugins' ops with :func:`load_plugin_ops` without loading a backend: the dispatcher and the autograd
service do when they start, so batches that use them validate and differentiate; a client's ``tw.ops`` does the
first time it meets a name it does not know; the conformance suite does before it generates cases. Workers get them
when they load their backends (:func:`tensorwire.backends.plugin_manager`).
"""

from __future__ import annotations

import sys

import pluggy

from .table import OPS, register_op

hookspec = pluggy.HookspecMarker("tensorwire")


@hookspec
def tensorwire_ops() -> list:
    """Return custom :class:`~tensorwire.protocol.ops.OpDef` objects to add to the op table.

    A custom op gives its shape/dtype rule (``infer``) and a decomposition into existing ops
    (``decompose``), so it runs on every backend; backends may add a native kernel for it through
    ``tensorwire_kernels``. A differentiable op may give its own VJP rule in ``OpDef.extra["vjp"]``: a function
    of a :class:`tensorwire.autograd.vjp.Ctx` (``c.x`` the inputs, ``c.y`` the output, ``c.g`` its gradient,
    ``c.a`` the attributes, ``c.needs`` which inputs need a gradient) that returns one gradient per input
    (``None`` where none is needed), as the built-in rules in ``autograd/vjp.py`` do; without one, autograd
    differentiates the decomposition. Clients call the op as ``tw.ops.<name>(*inputs, **attrs)``.
    """


_pm: pluggy.PluginManager | None = None


def _own_plugin_manager() -> pluggy.PluginManager:
    """A plugin manager that knows only this hook, for processes that load no backend (the dispatcher)."""
    global _pm
    if _pm is None:
        pm = pluggy.PluginManager("tensorwire")
        pm.add_hookspecs(sys.modules[__name__])
        pm.load_setuptools_entrypoints("tensorwire")
        _pm = pm
    return _pm


def load_plugin_ops(pm: pluggy.PluginManager | None = None) -> list[str]:
    """Add every installed plugin's custom ops to the op table; returns the names added (idempotent).

    ``pm`` is the plugin manager whose ``tensorwire_ops`` hook to call (a worker passes the one that loaded its
    backends); without it the installed plugins are found through the ``tensorwire`` entry points. An op whose
    name is taken already is not replaced.
    """
    added = []
    for ops in (pm or _own_plugin_manager()).hook.tensorwire_ops():
        for op in ops or ():
            if op.name not in OPS:
                register_op(op)
                added.append(op.name)
    return added
