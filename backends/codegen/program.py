"""Running a lowered fragment: the runner a compiling device hands the executor.

:func:`build_runner` lowers a plan's steps for one set of kept slots, has the device's runtime compile the
kernels (cached by their source, see :mod:`.cache`), and returns ``run(env, dyn, frames)``, the same
contract as the executor's straight-line runner: it fills ``env`` with the kept outputs and frees
everything else after its last use. A kernel that records an error raises it; the executor then
re-runs the plan step by step, which names the failing node and carries on with independent work.

A runtime's ``build(kernels)`` returns ``{kernel name: launcher(buffers, scalars)}``; ``buffers`` follow the
kernel's ``bufs``, its outputs allocated by ``runtime.empty``. A launcher writes the outputs in place and returns
None, or, on a runtime whose buffers are immutable (MLX), returns new output buffers (in the order of the kernel's
output ``bufs``, shaped as the ones it was given), which replace them.
"""

from __future__ import annotations

import math
import os
import sys
from collections import OrderedDict
from types import SimpleNamespace

import numpy as np

from tensorwire.protocol import errors as E

from .ir import Kernel
from .lower import HostStep, Launch, Lowered, lower

DEBUG_ENV = "TENSORWIRE_DEBUG_KERNELS"


def debug_kernels() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def print_source(target: str, path: str, source: str) -> None:
    """``TENSORWIRE_DEBUG_KERNELS=1``: show each kernel source as it is compiled."""
    print(f"--- tensorwire kernel ({target}) {path}\n{source}", file=sys.stderr, flush=True)


def kernel_error(kernel: Kernel, code: int, detail: int) -> Exception:
    """The exception a kernel's error slot describes."""
    name, message = kernel.errors[code - 1]
    cls = getattr(E, name, None) or {"ZeroDivisionError": ZeroDivisionError, "ValueError": ValueError}.get(name,
                                                                                                           E.TensorwireError)
    return cls(message.replace("{detail}", str(detail)))


def scalar_value(spec, dyn: dict | None):
    """The value of a kernel scalar: the dynamic attribute of this run, else the plan's."""
    origin, attr, default, dtype = spec
    v = default
    if dyn is not None:
        d = dyn.get(origin)
        if d is not None and attr in d:
            v = d[attr]
    if attr in ("seed", "offset"):
        v = int(v) % (1 << 64)
        return v - (1 << 64) if v >= 1 << 63 else v
    with np.errstate(all="ignore"):
        v = np.asarray(v).astype(dtype.np)
        return float(v) if dtype.is_floating_point else int(v)  # 16-bit floats travel as their float32 value


def build_runner(device, plan, keep: frozenset):
    """The compiled runner of ``plan`` for kept slots ``keep`` (see the module doc)."""
    lowered: Lowered = lower(plan.program.steps, set(keep), device.lowering_options)
    launchers = device.runtime.build(lowered.kernels) if lowered.kernels else {}
    meta = {}
    for s in plan.program.steps:
        if s.out >= 0:
            meta[s.out] = (tuple(s.shape), s.dtype)
    reads: dict = {}
    from ..executor import WORKER_OPS
    for i, it in enumerate(lowered.items):
        for key in (it.args if isinstance(it, Launch) else [("slot", x) for x in it.step.ins]):
            reads[key] = i
    frees: list[list] = [[] for _ in lowered.items]
    for key, i in reads.items():
        if key[0] == "tmp" or key[1] not in keep:
            frees[i].append(key)
    program = []
    for i, it in enumerate(lowered.items):
        if isinstance(it, Launch):
            k = it.kernel
            outs = [key for key, b in zip(it.args, k.bufs) if b.out]
            program.append((True, launchers[k.name], k, it.args, outs, it.scalars, frees[i]))
        elif math.prod(it.step.shape) == 0 and it.step.op not in WORKER_OPS:  # nothing to compute
            shape, dt = tuple(it.step.shape), it.step.dtype
            program.append((False, lambda args, dyn, frames, s=shape, d=dt: device.runtime.empty(s, d), it.step,
                            None, None, None, frees[i]))
        else:
            program.append((False, device.host_call(it.step), it.step, None, None, None, frees[i]))
    temps = lowered.temps
    runtime = device.runtime

    def run(env, dyn, frames):
        tmp = [None] * len(temps)
        for is_kernel, call, what, args, outs, scalars, free in program:
            if is_kernel:
                for key in outs:
                    if key[0] == "slot":
                        if env[key[1]] is None:
                            shape, dt = meta[key[1]]
                            env[key[1]] = runtime.empty(shape, dt)
                    elif tmp[key[1]] is None:
                        n, dt = temps[key[1]]
                        tmp[key[1]] = runtime.empty((n,), dt)
                bufs = [env[key[1]] if key[0] == "slot" else tmp[key[1]] for key in args]
                made = call(bufs, [scalar_value(s, dyn) for s in scalars])
                if made is not None:  # immutable buffers (MLX): the launcher returns its outputs instead
                    for key, buf in zip(outs, made):
                        if key[0] == "slot":
                            env[key[1]] = buf
                        else:
                            tmp[key[1]] = buf
            else:
                env[what.out] = call([env[x] for x in what.ins], dyn, frames)
            for key in free:
                if key[0] == "slot":
                    env[key[1]] = None
                else:
                    tmp[key[1]] = None

    return run


__all__ = ["DEBUG_ENV", "HostStep", "Launch", "build_runner", "debug_kernels", "kernel_error", "print_source",
           "scalar_value"]


class StepRunners:
    """A compiling device's step-by-step mode (``Device.run_step``): each step lowered alone and built once per
    structure (op, input pattern, metas, static attributes; dynamic ones such as ``full``'s value are kernel
    parameters), the least recently used dropped past ``limit``."""

    def __init__(self, device, limit: int = 4096):
        self.device, self.limit = device, limit
        self._runners: OrderedDict = OrderedDict()

    def run(self, step, args: list, attrs: dict):
        from tensorwire.protocol.ops import OPS

        from ..base import Step

        slots = list(dict.fromkeys(step.ins))
        ins = tuple(slots.index(x) for x in step.ins)
        dynamic = set(getattr(OPS.get(step.op), "dynamic", None) or ())
        static = sorted((k, repr(v)) for k, v in attrs.items() if k not in dynamic)
        key = (step.op, ins, tuple((tuple(m[0]), m[1].name) for m in step.in_meta), tuple(step.shape),
               step.dtype.name, tuple(static))
        out = len(slots)
        run = self._runners.get(key)
        if run is None:
            st = Step(step.op, ins, dict(attrs), tuple(step.shape), step.dtype, out, 0, dynamic=True,
                      in_meta=step.in_meta)
            run = self._runners[key] = build_runner(self.device, SimpleNamespace(program=SimpleNamespace(steps=[st])),
                                                    frozenset({out}))
            if len(self._runners) > self.limit:
                self._runners.popitem(last=False)
        else:
            self._runners.move_to_end(key)
        env = [args[step.ins.index(x)] for x in slots] + [None]
        run(env, {0: attrs}, [])
        return env[out]


def host_step_call(device, step):
    """``call(args, dyn, frames)`` for a host step the executor runs itself (a worker op such as ``const`` or
    ``hub_tensor``, or a step with dynamic attributes): the step's own dynamic attributes picked from ``dyn``."""
    from ..executor import _dynamic_call

    call = _dynamic_call(device, step)
    origin = step.origin
    return lambda args, dyn, frames: call(args, dyn.get(origin) if dyn else None, frames)
