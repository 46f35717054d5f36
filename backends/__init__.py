"""Device backends: the hook specs, plugin discovery, the device worker and the built-in backends.

Plugins are found through the ``tensorwire`` entry-point group (see :mod:`.hookspecs`).
"""

from __future__ import annotations

import pluggy

from tensorwire.protocol.errors import DeviceError
from tensorwire.protocol.ops import load_plugin_ops

from . import hookspecs
from .hookspecs import hookimpl

_pm: pluggy.PluginManager | None = None


def plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager with every installed ``tensorwire`` plugin loaded."""
    global _pm
    if _pm is None:
        pm = pluggy.PluginManager("tensorwire")
        pm.add_hookspecs(hookspecs)
        pm.load_setuptools_entrypoints("tensorwire")
        # (tw.backends' flag modules, which import this package, load no CPU backend, executor or kernels)
        # lazy: the CPU backend's package (numpy, its kernels, the compiler's), for the plugin manager only
        from . import cpu

        if not pm.is_registered(cpu):  # the built-in backend, even when entry points are missing
            pm.register(cpu)
        _pm = pm
        load_plugin_ops(pm)  # the plugins' custom ops, through the same plugin manager
    return _pm


def backends() -> dict:
    """All backends provided by installed plugins, by device type."""
    pm = plugin_manager()
    out = {}
    for group in pm.hook.tensorwire_backends():
        for b in group or ():
            out.setdefault(b.name, b)
    for b in out.values():
        for extra in pm.hook.tensorwire_kernels(backend=b):
            if extra:
                b.add_kernels(extra)
    return out


def get_backend(device_type: str):
    """The backend for a device type, or a DeviceError listing the known types."""
    found = backends()
    if device_type not in found:
        raise DeviceError(f"no backend for device type {device_type!r}; installed: {', '.join(sorted(found))}")
    return found[device_type]


# PyTorch's torch.backends settings: the submodules cudnn, mkldnn, opt_einsum (``cuda`` and ``mps`` are the plugin
# packages, which carry their own ``is_available``/``matmul``): see :mod:`.torch_flags`
from . import cudnn, mkldnn, opt_einsum  # noqa: E402
