"""Running a lowered fragment: the runner a compiling device hands the executor.

:func:`build_runner` lowers a plan's steps for one set of kept slots, has the device's runtime compile the
kernels (cached by their source, see :mod:`.cache`), and returns ``run(env, dyn, frames, after=None)``, the
same contract as the executor's straight-line runner: it fills ``env`` with the kept outputs and frees
everything else after its last use; ``run.producers`` maps each kept slot to the item that writes it, and
``after=(item, fn)`` calls ``fn`` with the slots once that item ran (a fetch answered before the rest runs).
A kernel that records an error raises it; the executor then re-runs the plan step by step, which names the
failing node and carries on with independent work.

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
from tensorwire.protocol.ops import OPS

from ..base import Step
from ..worker_ops import WORKER_OPS, dynamic_call
from .ir import Kernel
from .lower import HostStep, Launch, Lowered, attr_value, lower

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


#: converted dynamic scalars remembered (:func:`scalar_value`; a loop replays a plan with the same few values)
SCALARS_REMEMBERED = 1024
_SCALARS: dict = {}


def scalar_value(spec, dyn: dict | None):
    """The value of a kernel scalar: the dynamic attribute of this run, else the plan's. The conversion of an int or
    a nonzero float (not -0.0 from 0.0, nor NaN) is remembered: it costs ~2 us, most of a small plan's run's Python
    for its scalars (issue 30)."""
    origin, attr, default, dtype = spec
    v = default
    if dyn is not None:
        d = dyn.get(origin)
        if d is not None:
            v = attr_value(d, attr, default)
    t = type(v)
    key = (attr, dtype, t, v) if t is int or (t is float and v != 0.0 and v == v) else None
    got = _SCALARS.get(key) if key is not None else None
    if got is not None:
        return got
    if attr in ("seed", "offset"):
        got = int(v) % (1 << 64)
        got = got - (1 << 64) if got >= 1 << 63 else got
    else:
        with np.errstate(all="ignore"):
            got = np.asarray(v).astype(dtype.np)
            got = float(got) if dtype.is_floating_point else int(got)  # 16-bit floats travel as their float32 value
    if key is not None:
        if len(_SCALARS) >= SCALARS_REMEMBERED:
            _SCALARS.clear()
        _SCALARS[key] = got
    return got


def build_runner(device, plan, keep: frozenset, lowered: Lowered | None = None):
    """The compiled runner of ``plan`` for kept slots ``keep`` (see the module doc).

    Everything that does not change between runs is worked out here, once: where each kernel argument lives, which
    outputs to allocate, the scalars' values (a run converts only the dynamic attributes it was given) and what to
    free after each item. A run then works on one list: the plan's slots followed by the temporaries, which kernel
    arguments address from the end (negative indices), so each item is a few list operations and the call.
    ``lowered``: the plan already lowered for ``keep``."""
    if lowered is None:
        lowered = lower(plan.program.steps, set(keep), device.lowering_options)
    launchers = device.runtime.build(lowered.kernels) if lowered.kernels else {}
    meta = {}
    for s in plan.program.steps:
        if s.out >= 0:
            meta[s.out] = (tuple(s.shape), s.dtype)
    reads: dict = {}
    for i, it in enumerate(lowered.items):
        for key in (it.args if isinstance(it, Launch) else [("slot", x) for x in it.step.ins]):
            reads[key] = i
    temps = lowered.temps
    ntemp = len(temps)

    def at(key) -> int:  # a slot's index in the run's list, or a temporary's from its end
        return key[1] if key[0] == "slot" else key[1] - ntemp

    frees: list[list[int]] = [[] for _ in lowered.items]
    for key, i in reads.items():
        if key[0] == "tmp" or key[1] not in keep:
            frees[i].append(at(key))
    program = []
    producers = {}  # kept slot -> the item that writes it
    empty = device.runtime.empty
    for i, it in enumerate(lowered.items):
        if isinstance(it, Launch):
            k = it.kernel
            outs = [(at(key), meta[key[1]] if key[0] == "slot" else ((temps[key[1]][0],), temps[key[1]][1]))
                    for key, b in zip(it.args, k.bufs) if b.out]
            static = [scalar_value(s, None) for s in it.scalars]
            # (j, spec, the attribute a replay carries: a list's name for one of its elements)
            dynamic = [(j, s, s[1][0] if type(s[1]) is tuple else s[1]) for j, s in enumerate(it.scalars)
                       if s[0] is not None]
            program.append((launchers[k.name], [at(key) for key in it.args], outs, static, dynamic, frees[i], None))
            producers.update((key[1], i) for key, b in zip(it.args, k.bufs) if b.out and key[0] == "slot")
        elif math.prod(it.step.shape) == 0 and it.step.op not in WORKER_OPS:  # nothing to compute
            shape, dt = tuple(it.step.shape), it.step.dtype
            program.append((lambda args, dyn, frames, s=shape, d=dt: empty(s, d), list(it.step.ins), None, None, None,
                            frees[i], it.step.out))
        else:
            program.append((device.host_call(it.step), list(it.step.ins), None, None, None, frees[i], it.step.out))
        if not isinstance(it, Launch):
            producers[it.step.out] = i
    pad = [None] * ntemp
    # a runtime that reads kernel errors when the host waits anyway (backends/kernel_errors.py) is asked at the end
    check = getattr(device.runtime, "check_errors", None)
    if not any(isinstance(it, Launch) and it.kernel.can_raise for it in lowered.items):
        check = None
    if check is not None:
        inner = _run_items(program, empty, pad, check)

        def run(env, dyn, frames, after=None):
            try:
                inner(env, dyn, frames, after)
            except BaseException:
                check()  # an earlier kernel's error comes first (what followed it computed on what it left)
                raise
            check()
    else:
        run = _run_items(program, empty, pad, None)
    run.producers = producers
    return run


def _launch_args(w: list, outs, scalars, dynamic, dyn, empty):
    """Before a kernel launch: its outputs not made yet allocated in ``w``; its scalars, with this run's dynamic
    attributes in place of the plan's."""
    for j, (shape, dt) in outs:
        if w[j] is None:
            w[j] = empty(shape, dt)
    if dynamic and dyn:
        scalars = list(scalars)
        for j, s, name in dynamic:
            if name in dyn.get(s[0], ()):
                scalars[j] = scalar_value(s, dyn)
    return scalars


def _answer_early(answer, w: list, check) -> None:
    """Answer a fetch from ``w`` while the rest of the run goes on, after the kernels' errors so far (``check``)."""
    if check is not None:
        check()
    answer(w)


def _run_items(program: list, empty, pad: list, check):
    """The loop over a runner's items (:func:`build_runner`); ``check`` (kernel errors) before an early answer. A
    runtime whose launchers take pointers (:func:`.c_library.pointer`) runs through :func:`_run_on_pointers`."""
    if any(outs is not None for _, _, outs, *_ in program) and all(
            hasattr(call, "pointers") for call, _, outs, *_ in program if outs is not None):
        return _run_on_pointers(program, empty, pad, check)

    def run(env, dyn, frames, after=None):
        w = env + pad
        stop, answer = after or (-1, None)
        for i, (call, args, outs, scalars, dynamic, free, out) in enumerate(program):
            if outs is not None:  # a kernel launch
                scalars = _launch_args(w, outs, scalars, dynamic, dyn, empty)
                made = call([w[j] for j in args], scalars)
                if made is not None:  # immutable buffers (MLX): the launcher returns its outputs instead
                    for (j, _), buf in zip(outs, made):
                        w[j] = buf
            else:
                w[out] = call([w[x] for x in args], dyn, frames)
            for j in free:
                w[j] = None
            if i == stop:  # the fetched values are made: answer while the rest runs (see executor._run_fast)
                _answer_early(answer, w, check)
        env[:] = w[:len(env)]

    return run


def _run_on_pointers(program: list, empty, pad: list, check):
    """:func:`_run_items`' loop for launchers that take pointers (``launch.pointers(ptrs, scalars)`` in
    ``launch.dtypes``, made by ``launch.pointer`` and ``launch.raw_from_buffer``: the C runtime's,
    :func:`.c_library.pointer`): each buffer's pointer is made once a run, when a kernel first reads or writes it,
    and dropped with the buffer, not once a kernel that reads it (issue 30: a polynomial fit's 7 kernels read 47
    buffers, 29 of them distinct; a pointer costs ~0.5 us)."""
    first = next(call for call, _, outs, *_ in program if outs is not None)
    pointer = first.pointer
    from_buffer, chars = first.raw_from_buffer
    ndarray = np.ndarray
    items = [(call.pointers if outs is not None else call, list(zip(args, call.dtypes)) if outs is not None else args,
              outs, scalars, dynamic, free, out) for call, args, outs, scalars, dynamic, free, out in program]

    def run(env, dyn, frames, after=None):
        w = env + pad
        ptr: list = [None] * len(w)  # w[j]'s pointer, made by its first kernel ...
        ptr_dt: list = [None] * len(w)  # ... to the dtype that kernel reads it as
        stop, answer = after or (-1, None)
        for i, (call, args, outs, scalars, dynamic, free, out) in enumerate(items):
            if outs is not None:  # a kernel launch
                scalars = _launch_args(w, outs, scalars, dynamic, dyn, empty)
                ptrs = []
                for j, dt in args:
                    if ptr_dt[j] is not dt:
                        b = w[j]
                        if type(b) is ndarray and b.dtype is dt:  # (the common case, without a call)
                            try:
                                ptr[j] = from_buffer(chars, b)
                            except ValueError:  # (not C-contiguous)
                                ptr[j] = pointer(b, dt)
                        else:
                            ptr[j] = pointer(b, dt)
                        ptr_dt[j] = dt
                    ptrs.append(ptr[j])
                call(ptrs, scalars)
            else:
                w[out] = call([w[x] for x in args], dyn, frames)
                ptr[out] = ptr_dt[out] = None
            for j in free:
                w[j] = ptr[j] = ptr_dt[j] = None
            if i == stop:  # the fetched values are made: answer while the rest runs (see executor._run_fast)
                _answer_early(answer, w, check)
        env[:] = w[:len(env)]

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
    call = dynamic_call(device, step)
    origin = step.origin
    return lambda args, dyn, frames: call(args, dyn.get(origin) if dyn else None, frames)
