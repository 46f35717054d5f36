"""``tw.amp.autocast``: mixed precision for the ops recorded in its scope, as ``torch.autocast``.

The state is per thread, as torch's: a mapping from device type to the autocast dtype. Recording
(``autograd_hooks.record``) calls :func:`cast_inputs` for every op while any autocast is on; it casts the op's
inputs by the op's policy (:mod:`tensorwire.amp.policy`) with recorded ``cast`` ops, so autograd sees the casts
and gradients flow back to the float32 parameters in float32.
"""

from __future__ import annotations

import functools
import threading
import warnings

from tensorwire.protocol import dtypes as D

from .policy import DEFAULT_DTYPES, POLICIES, SUPPORTED_DTYPES

__all__ = ["autocast", "is_autocast_available", "is_autocast_enabled", "get_autocast_dtype", "custom_fwd", "custom_bwd"]

_tls = threading.local()
_active = [0]  # autocast scopes enabled in any thread: the recording hook's fast path when nobody uses amp


def _state() -> dict:
    st = getattr(_tls, "state", None)
    if st is None:
        st = _tls.state = {}
    return st


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


def _eligible(t, device_type: str) -> bool:
    return t.dtype.is_floating_point and t.dtype is not D.float64 and t._dev.split(":")[0] == device_type


def cast_inputs(session, op: str, ins, attrs, device: str, record):
    """The inputs ``op`` runs on under the current autocast state (``ins`` itself when nothing changes);
    ``record`` records the ``cast`` ops (the same entry point, so autograd sees them)."""
    kind_type = device.split(":")[0]
    target = _state().get(kind_type)
    if target is None:
        return ins
    kind = POLICIES[kind_type].get(op)
    if kind is None:
        return ins
    if kind == "lower":
        want = target
    elif kind == "fp32":
        want = "float32"
    elif kind == "fp32_opt_dtype":
        if (attrs and attrs.get("dtype") is not None) or not _eligible(ins[0], kind_type):
            return ins
        return [_cast(session, ins[0], "float32", device, record), *ins[1:]]
    else:  # promote
        floats = [t.dtype for t in ins if _eligible(t, kind_type)]
        if len(set(floats)) < 2:
            return ins
        want = max(floats, key=lambda d: (d.itemsize, d is D.float32)).name
    return [_cast(session, t, want, device, record) if _eligible(t, kind_type) else t for t in ins]


def _cast(session, t, dtype: str, device: str, record):
    if t.dtype.name == dtype:
        return t
    return record(session, "cast", [t], {"dtype": dtype}, device)


def custom_fwd(fwd=None, *, device_type: str, cast_inputs=None):
    """Decorator for a custom ``Function.forward``: with ``cast_inputs``, the forward runs with autocast off and
    its floating tensor arguments cast to ``cast_inputs`` when autocast is on; without, it runs as called."""
    if fwd is None:
        return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)

    @functools.wraps(fwd)
    def wrapper(*args, **kwargs):
        if cast_inputs is None or not is_autocast_enabled(device_type):
            return fwd(*args, **kwargs)
        from tensorwire.tensor import Tensor  # circle: tensor -> autograd_hooks -> amp.autocast_mode

        def conv(v):
            return v.to(cast_inputs) if isinstance(v, Tensor) and _eligible(v, device_type) else v

        with autocast(device_type, enabled=False):
            return fwd(*[conv(a) for a in args], **{k: conv(v) for k, v in kwargs.items()})

    return wrapper


def custom_bwd(bwd=None, *, device_type: str):
    """Decorator for a custom ``Function.backward`` (it runs as called)."""
    if bwd is None:
        return functools.partial(custom_bwd, device_type=device_type)
    return bwd
