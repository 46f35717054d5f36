"""``tw.cuda``: ``torch.cuda``'s device functions, answered from the connected cluster's ``cuda`` devices (see
:mod:`tensorwire.accelerator`)."""

from __future__ import annotations

from . import amp as _amp
from .accelerator import MODULE_FUNCTIONS, module_functions

globals().update(module_functions("cuda"))  # is_available, device_count, set_device ... (torch.cuda's names)
__all__ = [*MODULE_FUNCTIONS, "amp"]


class amp:  # noqa: N801 - torch.cuda.amp
    """``torch.cuda.amp``: :class:`tensorwire.amp.autocast` and :class:`tensorwire.amp.GradScaler` for ``cuda``
    (PyTorch's older spelling of ``torch.amp.autocast("cuda")``)."""

    @staticmethod
    def autocast(enabled: bool = True, dtype=None, cache_enabled: bool = True):
        return _amp.autocast("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    @staticmethod
    def GradScaler(*args, **kwargs):  # noqa: N802 - torch's name
        return _amp.GradScaler("cuda", *args, **kwargs)
