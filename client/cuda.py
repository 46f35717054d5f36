"""``tw.cuda``: ``torch.cuda``'s device functions, answered from the connected cluster's ``cuda`` devices (see
:mod:`tensorwire.accelerator`)."""

from __future__ import annotations

from .accelerator import DeviceType

_TYPE = DeviceType("cuda")

is_available = _TYPE.is_available
is_built = _TYPE.is_built
device_count = _TYPE.device_count
current_device = _TYPE.current_device
set_device = _TYPE.set_device
get_device_name = _TYPE.get_device_name
synchronize = _TYPE.synchronize
manual_seed = _TYPE.manual_seed
manual_seed_all = _TYPE.manual_seed_all
empty_cache = _TYPE.empty_cache
memory_allocated = _TYPE.memory_allocated
is_bf16_supported = _TYPE.is_bf16_supported


class amp:  # noqa: N801 - torch.cuda.amp
    """``torch.cuda.amp``: :class:`tensorwire.amp.autocast` and :class:`tensorwire.amp.GradScaler` for ``cuda``
    (PyTorch's older spelling of ``torch.amp.autocast("cuda")``)."""

    @staticmethod
    def autocast(enabled: bool = True, dtype=None, cache_enabled: bool = True):
        from .amp import autocast

        return autocast("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    @staticmethod
    def GradScaler(*args, **kwargs):  # noqa: N802 - torch's name
        from .amp import GradScaler

        return GradScaler("cuda", *args, **kwargs)
