"""The ops the worker itself implements, not the backend: they bring data in from outside the graph.

``const`` reads a buffer frame of the message; ``hub_tensor`` downloads a tensor from the cluster's hub
(:mod:`.hub_loader`). The executor runs them, and so do the compiled devices' runners (their host steps), which
is why they live here, below both: :mod:`.executor`, :mod:`.codegen.program`, :mod:`.compiled_device` and the
CPU's compiled mode import this module, not each other.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from tensorwire.protocol.errors import ProtocolError

from .base import Device, Step
from .hub_loader import load_tensor


def _const(device: Device, attrs: dict, frames: list, step: Step):
    fi = attrs.get("frame")
    if not isinstance(fi, int) or not 0 <= fi < len(frames):
        raise ProtocolError(f"const names frame {fi!r}, the message has {len(frames)} buffer frames")
    buf = frames[fi]
    mv = buf.buffer if hasattr(buf, "buffer") else memoryview(buf)
    need = math.prod(step.shape) * step.dtype.itemsize
    if mv.nbytes != need:
        raise ProtocolError(f"const frame holds {mv.nbytes} bytes, {list(step.shape)} {step.dtype.name} needs {need}")
    arr = np.frombuffer(mv, dtype=step.dtype.np).reshape(step.shape) if need else np.empty(step.shape,
                                                                                           step.dtype.np)
    return device.upload(arr)


def _hub_tensor(device: Device, attrs: dict, frames: list, step: Step):
    """Fetch a tensor from the cluster's hub straight into this device (the worker downloads; the client never
    sees the bytes). See ``hub_loader``: the endpoint is the worker's configuration, never the client's."""
    return device.upload(load_tensor(attrs, step.shape, step.dtype))


#: ops the worker itself implements (they bring data in from outside the graph), not the backend:
#: ``WORKER_OPS[op](device, attrs, frames, step)`` returns the device buffer of the step's output
WORKER_OPS: dict[str, Callable] = {"const": _const, "hub_tensor": _hub_tensor}


def dynamic_call(device: Device, s: Step) -> Callable:
    """``call(args, dynamic_attrs, frames)`` for a step with dynamic attributes or a worker op (resolved once: the
    runners call it every run)."""
    worker_op = WORKER_OPS.get(s.op)
    if worker_op is not None:
        def call(args, d, frames):
            return worker_op(device, {**s.attrs, **d} if d else s.attrs, frames, s)
    else:
        run_step = device.run_step

        def call(args, d, frames):
            return run_step(s, args, {**s.attrs, **d} if d else s.attrs)
    return call


__all__ = ["WORKER_OPS", "dynamic_call"]
