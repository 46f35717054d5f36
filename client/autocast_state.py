"""The autocast state recording reads (issue 32: outside the ``amp`` package, whose ``__init__`` loads ``GradScaler``,
which imports the autograd engine): the per-thread mapping from device type to autocast dtype that
``tw.amp.autocast`` scopes set, how many are on (:data:`_active`, the recording hook's fast path), and
:func:`cast_inputs`, which ``autograd_hooks.record`` calls for every op while one is on: it casts the op's inputs by
the op's policy (:mod:`tensorwire.autocast_policy`) with recorded ``cast`` ops, so autograd sees the casts and
gradients flow back to the float32 parameters in float32."""

from __future__ import annotations

import threading

from tensorwire.protocol import dtypes as D

from .autocast_policy import POLICIES

_tls = threading.local()
#: the (thread, device type) pairs autocast is on for, over every thread: the recording hook's fast path when nobody
#: uses amp (kept by :func:`_set`, through which every change of :func:`_state` goes)
_active = [0]


def _state() -> dict:
    """This thread's device type -> the dtype name ops autocast to (None or absent: autocast is off for it)."""
    st = getattr(_tls, "state", None)
    if st is None:
        st = _tls.state = {}
    return st


def _dtypes() -> dict:
    """This thread's device type -> the autocast dtype name set for it (``torch.set_autocast_dtype``; an autocast
    scope sets it while open), whether autocast is on or not."""
    d = getattr(_tls, "dtypes", None)
    if d is None:
        d = _tls.dtypes = {}
    return d


def _set(device_type: str, dtype: str | None) -> None:
    """Autocast ``device_type``'s ops to ``dtype`` in this thread (None: off), counting it in :data:`_active`."""
    st = _state()
    was, now = st.get(device_type) is not None, dtype is not None
    st[device_type] = dtype
    _active[0] += now - was


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
