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
from ..autocast_state import _active, _eligible, _state

__all__ = ["autocast", "is_autocast_available", "is_autocast_enabled", "get_autocast_dtype", "custom_fwd", "custom_bwd"]


def is_autocast_available(device_type: str) -> bool:
    """Whether autocast supports ``device_type`` (cpu, cuda, rocm, mps, opencl)."""
    return device_type in POLICIES


def is_autocast_enabled(device_type: str = "cuda") -> bool:
    """Whether ops on ``device_type`` are autocast in this thread now."""
    return _state().get(device_type) is not None


def get_autocast_dtype(device_type: str) -> D.DType:
    """The dtype autocast uses for ``device_type`` now (its default when none is active)."""
    name = _state().get(device_type) or DEFAULT_DTYPES.get(device_type, "float16")
    return D.get(name)


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
        self.fast_dtype = D.get(dtype) if dtype is not None else D.get(DEFAULT_DTYPES[device_type])
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
        st = _state()
        self._prev.append(st.get(self.device))
        st[self.device] = self.fast_dtype.name if self._enabled else None
        if self._enabled:
            _active[0] += 1
        return self

    def __exit__(self, *exc) -> bool:
        _state()[self.device] = self._prev.pop()
        if self._enabled:
            _active[0] -= 1
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
