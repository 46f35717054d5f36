"""An example tensorwire backend plugin: the ``toy`` device type.

What it shows a plugin author:

* a backend for a new device type, built by subclassing :class:`~tensorwire.backends.cpu.NumpyBackend`
  (so it inherits every numpy kernel) with its own name and its own :class:`~tensorwire.backends.base.Device`:
  buffers are :class:`ToyBuffer` objects, opaque to the worker, and ``upload`` copies as a real device would;
* a native kernel for a composite op (``softmax``) through the ``tensorwire_kernels`` hook;
* a custom op (``toy_hypot``) through the ``tensorwire_ops`` hook, with its shape rule, its decomposition,
  and ``extra["examples"]`` / ``extra["reference"]`` so :mod:`tensorwire.backends.testing` checks it.

It is published through the ``tensorwire`` entry-point group in this package's ``pyproject.toml``.
"""

from __future__ import annotations

import numpy as np

from tensorwire.backends import hookimpl
from tensorwire.backends.base import Device, DeviceInfo
from tensorwire.backends.cpu import NumpyBackend
from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DeviceError
from tensorwire.protocol.ops import OpDef, binary_dtype
from tensorwire.protocol.shapes import broadcast

#: toy:0 and toy:1 work; toy:2 exists but is unavailable (to show how a backend says why)
N_TOY = 2


class ToyBuffer:
    """A device buffer: the worker only ever hands it back to the device that made it."""

    __slots__ = ("array", "device")

    def __init__(self, array: np.ndarray, device: int):
        self.array = array
        self.device = device


class ToyDevice(Device):
    """A toy device: memory is numpy arrays behind :class:`ToyBuffer` handles, with a byte count."""

    def __init__(self, backend, index: int):
        self.backend = backend
        self.index = index
        self.live_bytes = 0

    def _wrap(self, arr) -> ToyBuffer:
        arr = np.asarray(arr)
        self.live_bytes += arr.nbytes
        return ToyBuffer(arr, self.index)

    def _unwrap(self, buf: ToyBuffer) -> np.ndarray:
        if not isinstance(buf, ToyBuffer) or buf.device != self.index:
            raise DeviceError(f"toy:{self.index} was handed a buffer it does not own: {buf!r}")
        return buf.array

    def upload(self, array: np.ndarray) -> ToyBuffer:
        return self._wrap(np.array(array, order="C", copy=True))  # "device memory": a private copy

    def download(self, buf: ToyBuffer) -> np.ndarray:
        return np.array(self._unwrap(buf), order="C", copy=True)

    def free(self, buf: ToyBuffer) -> None:
        self.live_bytes -= self._unwrap(buf).nbytes

    def nbytes(self, buf: ToyBuffer) -> int:
        return int(self._unwrap(buf).nbytes)

    def meta(self, buf: ToyBuffer):
        a = self._unwrap(buf)
        return tuple(a.shape), D.from_numpy(a.dtype)

    def run_step(self, step, args, attrs):
        return self._wrap(step.kernel([self._unwrap(b) for b in args], attrs, step.shape, step.dtype))

    def specialize(self, step):
        k, attrs, shape, dtype = step.kernel, step.attrs, step.shape, step.dtype
        unwrap, wrap = self._unwrap, self._wrap
        return lambda *bufs: wrap(k([unwrap(b) for b in bufs], attrs, shape, dtype))

    def memory(self) -> dict:
        return {"live_bytes": self.live_bytes}


class ToyBackend(NumpyBackend):
    """The numpy kernels on toy devices."""

    name = "toy"

    def devices(self) -> list[DeviceInfo]:
        out = [DeviceInfo(self.name, i, True, "", "toy device (numpy)") for i in range(N_TOY)]
        out.append(DeviceInfo(self.name, N_TOY, False, "toy:2 is switched off (an example of an unavailable device)"))
        return out

    def open(self, index: int) -> ToyDevice:
        if not 0 <= index < N_TOY:
            raise DeviceError(f"toy:{index} is not available; this plugin offers toy:0 .. toy:{N_TOY - 1}")
        return ToyDevice(self, index)


# -- a native kernel for a composite op --------------------------------------------------------------

def _softmax_kernel(ins, attrs, shape, dtype):
    """softmax in float64, rounded to the result dtype (the composite's decomposition is not used on toy)."""
    x = ins[0].astype(np.float64)
    if x.ndim == 0:
        return np.ones((), dtype.np)
    dim = attrs["dim"] % x.ndim
    e = np.exp(x - np.max(x, axis=dim, keepdims=True)) if x.size else x
    return (e / np.sum(e, axis=dim, keepdims=True)).astype(dtype.np) if x.size else x.astype(dtype.np)


# -- a custom op: shape rule, decomposition, examples and reference for the conformance suite -------

def _hypot_infer(metas, attrs):
    (sa, da), (sb, db) = metas
    return broadcast(sa, sb), D.float_of(binary_dtype(metas))


def _hypot_decompose(g, a, b, attrs):
    """sqrt(a*a + b*b), in the result's float dtype."""
    fd = D.float_of(binary_dtype([(a.shape, a.dtype), (b.shape, b.dtype)]))
    if a.dtype is not fd:
        a = g.op("cast", a, dtype=fd.name)
    if b.dtype is not fd:
        b = g.op("cast", b, dtype=fd.name)
    return g.op("sqrt", g.op("add", g.op("mul", a, a), g.op("mul", b, b)))


def _hypot_vjp(c):
    """d hypot(a, b) = (a da + b db) / hypot(a, b): autograd calls this rule instead of differentiating the
    decomposition (``c.x`` the inputs, ``c.y`` the output, ``c.g`` its gradient; broadcast inputs get their
    gradients summed back to their shapes by autograd)."""
    a, b = c.x
    return [c.g * a / c.y if c.needs[0] else None, c.g * b / c.y if c.needs[1] else None]


TOY_HYPOT = OpDef(
    "toy_hypot", 2, _hypot_infer, decompose=_hypot_decompose, kind="binary",
    doc="toy_hypot(a, b) = sqrt(a**2 + b**2), broadcasting (an example custom op from tw_plugin_example).",
    extra={
        "examples": [
            ([np.array([[3.0, -1.5], [0.0, 2.0]], np.float32), np.array([4.0, 2.0], np.float32)], {}),
            ([np.array([1, -2, 3], np.int64), np.array(2.5, np.float64)], {}),
            ([np.zeros((0, 3), np.float16), np.ones((1, 3), np.float16)], {}),
        ],
        "reference": lambda xs, attrs: np.hypot(xs[0], xs[1]),
        "vjp": _hypot_vjp,
    },
)


@hookimpl
def tensorwire_backends():
    return [ToyBackend()]


@hookimpl
def tensorwire_kernels(backend):
    if backend.name != "toy":
        return {}
    return {"softmax": _softmax_kernel}


@hookimpl
def tensorwire_ops():
    return [TOY_HYPOT]
