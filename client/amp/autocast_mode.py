"""``tw.amp.autocast``: mixed precision for the ops recorded in its scope, as ``torch.autocast``.

The state is per thread, as torch's: a mapping from device type to the autocast dtype, in
:mod:`tensorwire.autocast_state` (outside this package: recording reads it, and calls its ``cast_inputs`` for every
op while any autocast is on, without loading ``GradScaler``).
"""

from __future__ import annotations

import functools
import warnings

from tensorwire.protocol import dtypes as D

from .._factories import TensorBase
from ..autocast_policy import DEFAULT_DTYPES, POLICIES, SUPPORTED_DTYPES
from ..autocast_state import _dtypes, _eligible, _set, _state

__all__ = ["autocast", "is_autocast_available", "is_autocast_enabled", "get_autocast_dtype", "custom_fwd", "custom_bwd"]
#: torch's process-wide autocast switches (``torch.set_autocast_enabled`` ...), re-exported at the top level
SWITCHES = ["set_autocast_enabled", "set_autocast_dtype", "is_autocast_cpu_enabled", "get_autocast_cpu_dtype",
            "set_autocast_cpu_enabled", "set_autocast_cpu_dtype", "get_autocast_gpu_dtype", "set_autocast_gpu_dtype",
            "is_autocast_cache_enabled", "set_autocast_cache_enabled", "clear_autocast_cache"]

#: the device types torch's autocast functions accept (ours, such as ``rocm``, besides)
_TORCH_DEVICE_TYPES = ("cpu", "cuda", "ipu", "xpu", "mkldnn", "opengl", "opencl", "ideep", "hip", "ve", "fpga", "maia",
                       "xla", "lazy", "vulkan", "mps", "meta", "hpu", "mtia", "privateuseone")
_UNSET = object()
_cache = [True]  # torch.is_autocast_cache_enabled (a cast here is one recorded node: there is no cache to keep)


def _kind(device_type) -> str:
    """The device type ``device_type`` names (``"cuda:1"``: ``"cuda"``), or torch's RuntimeError for an unknown one."""
    kind = str(device_type).split(":")[0]
    if kind not in POLICIES and kind not in _TORCH_DEVICE_TYPES:
        raise RuntimeError(f"Expected one of {', '.join(_TORCH_DEVICE_TYPES)} device type at start of device "
                           f"string: {device_type}")
    return kind


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"torch.{old} is deprecated. Please use torch.{new} instead.", DeprecationWarning, stacklevel=3)


def is_autocast_available(device_type: str) -> bool:
    """Whether autocast supports ``device_type`` (cpu, cuda, rocm, mps, opencl)."""
    return device_type in POLICIES


def is_autocast_enabled(device_type: str | None = None) -> bool:
    """Whether ops on ``device_type`` (None: ``cuda``, as torch's) are autocast in this thread now."""
    return _state().get(_kind(device_type or "cuda")) is not None


def get_autocast_dtype(device_type: str) -> D.DType:
    """The dtype autocast uses for ``device_type`` now: the one :func:`set_autocast_dtype` or the open autocast scope
    set, else torch's default (bfloat16 on cpu, float16 elsewhere)."""
    kind = _kind(device_type)
    return D.get(_dtypes().get(kind) or DEFAULT_DTYPES.get(kind, "float16"))


def set_autocast_enabled(device_type, enabled=_UNSET) -> None:
    """Switch autocast on or off for ``device_type``'s ops in this thread, as entering an autocast scope does
    (``set_autocast_enabled(enabled)``, torch's older form: for ``cuda``)."""
    if enabled is _UNSET:
        device_type, enabled = "cuda", device_type
    kind = _kind(device_type)
    _set(kind, get_autocast_dtype(kind).name if enabled else None)


def set_autocast_dtype(device_type: str, dtype) -> None:
    """The dtype ``device_type``'s ops autocast to (now, if autocast is on for it; else once it is switched on)."""
    kind = _kind(device_type)
    name = D.get(dtype).name
    _dtypes()[kind] = name
    if _state().get(kind) is not None:
        _set(kind, name)


def is_autocast_cpu_enabled() -> bool:
    """Deprecated (as torch's): :func:`is_autocast_enabled` of ``"cpu"``."""
    _deprecated("is_autocast_cpu_enabled()", "is_autocast_enabled('cpu')")
    return is_autocast_enabled("cpu")


def get_autocast_cpu_dtype() -> D.DType:
    """Deprecated (as torch's): :func:`get_autocast_dtype` of ``"cpu"``."""
    _deprecated("get_autocast_cpu_dtype()", "get_autocast_dtype('cpu')")
    return get_autocast_dtype("cpu")


def set_autocast_cpu_enabled(enabled: bool) -> None:
    """Deprecated (as torch's): :func:`set_autocast_enabled` of ``"cpu"``."""
    _deprecated("set_autocast_cpu_enabled(enabled)", "set_autocast_enabled('cpu', enabled)")
    set_autocast_enabled("cpu", enabled)


def set_autocast_cpu_dtype(dtype) -> None:
    """Deprecated (as torch's): :func:`set_autocast_dtype` of ``"cpu"``."""
    _deprecated("set_autocast_cpu_dtype(dtype)", "set_autocast_dtype('cpu', dtype)")
    set_autocast_dtype("cpu", dtype)


def get_autocast_gpu_dtype() -> D.DType:
    """Deprecated (as torch's): :func:`get_autocast_dtype` of ``"cuda"``."""
    _deprecated("get_autocast_gpu_dtype()", "get_autocast_dtype('cuda')")
    return get_autocast_dtype("cuda")


def set_autocast_gpu_dtype(dtype) -> None:
    """Deprecated (as torch's): :func:`set_autocast_dtype` of ``"cuda"``."""
    _deprecated("set_autocast_gpu_dtype(dtype)", "set_autocast_dtype('cuda', dtype)")
    set_autocast_dtype("cuda", dtype)


def is_autocast_cache_enabled() -> bool:
    """torch's flag for its cache of casts (True by default); stored, and changes nothing: a cast here is one
    recorded node, which the batch's plan reuses."""
    return _cache[0]


def set_autocast_cache_enabled(enabled: bool) -> None:
    """Store :func:`is_autocast_cache_enabled`'s flag (it changes nothing here)."""
    _cache[0] = bool(enabled)


def clear_autocast_cache() -> None:
    """Nothing to clear (there is no cache of casts on the client)."""


class autocast:  # noqa: N801 - torch's name
    """Context manager and decorator: inside, ops on ``device_type`` devices run by torch's autocast policy
    (matmul/linear/conv in ``dtype``, softmax/log/sum/losses... in float32 on GPUs). ``dtype`` defaults to
    bfloat16 on cpu, float16 elsewhere; ``cache_enabled`` is accepted (a cast here is one recorded node)."""

    def __init__(self, device_type: str, dtype=None, enabled: bool = True, cache_enabled: bool | None = None):
        if not isinstance(device_type, str):
            raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
        device_type = device_type.split(":")[0]
        if not is_autocast_available(device_type):
            raise RuntimeError(f"User specified an unsupported autocast device_type '{device_type}'")
        self.device = device_type
        self.fast_dtype = D.get(dtype) if dtype is not None else get_autocast_dtype(device_type)
        self._enabled = bool(enabled)
        self._cache_enabled = cache_enabled
        if self._enabled and self.fast_dtype.name not in SUPPORTED_DTYPES:
            warnings.warn(
                f"In {device_type} autocast, but the target dtype {self.fast_dtype.name} is not supported. "
                "Disabling autocast.",
                UserWarning,
                stacklevel=2,
            )
            self._enabled = False
        self._prev: list = []

    def __enter__(self):
        dtypes = _dtypes()
        self._prev.append((_state().get(self.device), dtypes.get(self.device)))
        dtypes[self.device] = self.fast_dtype.name
        _set(self.device, self.fast_dtype.name if self._enabled else None)
        return self

    def __exit__(self, *exc) -> bool:
        prev, prev_dtype = self._prev.pop()
        _set(self.device, prev)
        dtypes = _dtypes()
        if prev_dtype is None:
            dtypes.pop(self.device, None)
        else:
            dtypes[self.device] = prev_dtype
        return False

    def __call__(self, func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with autocast(self.device, self.fast_dtype, self._enabled, self._cache_enabled):
                return func(*args, **kwargs)

        return wrapper


def custom_fwd(fwd=None, *, device_type: str, cast_inputs=None):
    """Decorator for a custom ``Function.forward``: with ``cast_inputs``, the forward runs with autocast off and
    its floating tensor arguments cast to ``cast_inputs`` when autocast is on; without, it runs as called."""
    if fwd is None:
        return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)

    @functools.wraps(fwd)
    def wrapper(*args, **kwargs):
        if cast_inputs is None or not is_autocast_enabled(device_type):
            return fwd(*args, **kwargs)
        def conv(v):
            return v.to(cast_inputs) if isinstance(v, TensorBase) and _eligible(v, device_type) else v

        with autocast(device_type, enabled=False):
            return fwd(*[conv(a) for a in args], **{k: conv(v) for k, v in kwargs.items()})

    return wrapper


def custom_bwd(bwd=None, *, device_type: str):
    """Decorator for a custom ``Function.backward`` (it runs as called)."""
    if bwd is None:
        return functools.partial(custom_bwd, device_type=device_type)
    return bwd
