"""``tw.mps``: ``torch.mps``'s device functions, answered from the connected cluster's ``mps`` devices (see
:mod:`tensorwire.accelerator`)."""

from __future__ import annotations

from .accelerator import MODULE_FUNCTIONS, module_functions

globals().update(module_functions("mps"))  # is_available, device_count, set_device ... (torch.mps's names)
__all__ = list(MODULE_FUNCTIONS)
