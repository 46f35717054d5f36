"""``tw.compile``: record a function's graph once, then replay it with one message per call.

The first calls with a new signature (see :mod:`tensorwire.jit.signature`) run the function as usual while a
:class:`~tensorwire.jit.recording.Trace` watches what it records, reads and writes. Once two consecutive calls recorded
the same graph (the first call of a training step differs from the next: the optimizer makes its state), the graph
is compiled (:class:`~tensorwire.jit.graph.CompiledGraph`) and later calls replay it: no Python of the function
runs, the session sends one batch message naming the cached plan, and the client's tensors (the result, the
parameters and optimizer state the step rebound, the gradients) are updated as the recorded call updated them.

A call that reads a tensor's value (``.item()``, ``print``, a branch on a tensor), or does something else a replay
could not repeat, makes the function run eagerly from then on, with one warning naming the line
(``fullgraph=True`` raises :class:`~tensorwire.protocol.errors.CompileError` instead). See ``docs/compile.md``.

As ``torch.jit`` (``import tensorwire as torch``), this package also has torch's TorchScript API in eager form
(:mod:`tensorwire.jit.torchscript`): ``is_scripting()``, ``@ignore``, ``Final``, ``script``, ``trace`` ... let model
code written for TorchScript run unchanged, eagerly.
"""

from __future__ import annotations

import functools
import warnings
from collections import OrderedDict

from tensorwire.context import current_session
from tensorwire.nn.module import Module
from tensorwire.protocol.errors import CompileError

from . import torchscript as _torchscript
from .graph import RETRACE, CompiledGraph
from .recording import NotCompilable, Trace
from .signature import signature
from .torchscript import (
    Attribute,
    Error,
    Final,
    Future,
    RecursiveScriptModule,
    ScriptFunction,
    ScriptModule,
    annotate,
    enable_onednn_fusion,
    export,
    fork,
    freeze,
    ignore,
    interface,
    is_scripting,
    is_tracing,
    load,
    onednn_fusion_enabled,
    optimize_for_inference,
    optimized_execution,
    save,
    script,
    script_if_tracing,
    script_method,
    set_fusion_strategy,
    strict_fusion,
    trace,
    trace_module,
    unused,
    wait,
)

__all__ = ["compile", "CompiledFunction", "CompileWarning", "MAX_TRACES", "CACHE_SIZE"]
__all__ += ["Attribute", "Error", "Final", "Future", "RecursiveScriptModule", "ScriptFunction", "ScriptModule",
            "annotate", "enable_onednn_fusion", "export", "fork", "freeze", "ignore", "interface", "is_scripting",
            "is_tracing", "isinstance", "load", "onednn_fusion_enabled", "optimize_for_inference",
            "optimized_execution", "save", "script", "script_if_tracing", "script_method", "set_fusion_strategy",
            "strict_fusion", "trace", "trace_module", "unused", "wait"]  # torch.jit's API (torchscript.py)

#: graphs kept per function (one per signature, least recently used evicted); torch's ``cache_size_limit`` is 8 too
CACHE_SIZE = 8
#: calls recorded per signature until two in a row agree; past this the function runs eagerly
MAX_TRACES = 4
MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
#: what ``backend=None`` means, as torch's ``get_default_backend()``
DEFAULT_BACKEND = "inductor"


class CompileWarning(UserWarning):
    """A compiled function runs eagerly from now on (the message says why and where)."""


class _Entry:
    __slots__ = ("graph", "last", "traces")

    def __init__(self):
        self.graph: CompiledGraph | None = None
        self.last = None  # the previous call's Summary, while no graph is compiled
        self.traces = 0


class CompiledFunction:
    """A function wrapped by :func:`compile`; call it as the function. ``eager`` tells whether it gave up replaying
    (``eager_reason`` says why), ``stats`` counts ``traces`` (calls recorded) and ``replays``."""

    def __init__(self, fn, fullgraph: bool = False, dynamic=None, backend=DEFAULT_BACKEND, mode=None, options=None):
        self.fn = fn
        self.fullgraph = fullgraph
        self.dynamic = dynamic
        self.backend = backend
        self.mode = mode
        self.options = options
        self.eager = False
        self.eager_reason: str | None = None
        self.stats = {"traces": 0, "replays": 0}
        self._cache: OrderedDict = OrderedDict()
        functools.update_wrapper(self, fn)

    def __get__(self, obj, objtype=None):  # a compiled method binds like the function it wraps
        return self if obj is None else functools.partial(self, obj)

    def reset(self) -> None:
        """Forget every compiled graph (the next calls record again)."""
        self._cache.clear()

    def __call__(self, *args, **kwargs):
        if self.eager:
            return self.fn(*args, **kwargs)
        key, _leaves, tensors = signature(args, kwargs)
        entry = self._cache.get(key)
        if entry is None:
            entry = self._cache[key] = _Entry()
            if len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
            if entry.graph is not None:
                out = entry.graph.replay(tensors)
                if out is not RETRACE:
                    self.stats["replays"] += 1
                    return out
                entry.graph, entry.last, entry.traces = None, None, 0
        return self._record(entry, args, kwargs, tensors)

    def _session(self, tensors):
        sessions = {t._s for t in tensors}
        if len(sessions) > 1:
            return None
        if sessions:
            return sessions.pop()
        return current_session()

    def _record(self, entry: _Entry, args, kwargs, tensors):
        s = self._session(tensors)
        if s is None or s._capture is not None:  # several sessions, or inside another compiled call: run as is
            return self.fn(*args, **kwargs)
        for t in tensors:  # (a view whose base changed, a light window too: brought up to date before the trace, as
            if t._base is not None:  # CompiledGraph.replay does its arguments, so the trace reads the handle a replay
                t._refresh()  # is given)
        trace = Trace(s, tensors, entry.last)
        self.stats["traces"] += 1
        entry.traces += 1
        trace.start()
        try:
            out = self.fn(*args, **kwargs)
        finally:
            trace.stop()
        try:
            summary = trace.finish(out)
        except NotCompilable as e:
            self._give_up(e.reason, e.where)
            return out
        prev = entry.last
        if prev is not None and prev.key == summary.key:
            entry.graph, entry.last = CompiledGraph(summary), None
        elif entry.traces >= MAX_TRACES:
            where = prev.first_difference(summary) if prev is not None else None
            self._give_up(
                f"records a different graph on each call ({MAX_TRACES} calls with the same signature "
                "differed: Python state the replay would not see changes what it records)",
                where,
            )
        else:
            entry.last = summary
        return out

    def _give_up(self, reason: str, where) -> None:
        name = getattr(self.fn, "__qualname__", repr(self.fn))
        at = f" at {where[0]}:{where[1]}" if where else ""
        msg = f"tw.compile: {name} {reason}{at}"
        if self.fullgraph:
            raise CompileError(msg + " (fullgraph=True)")
        self.eager = True
        self.eager_reason = msg
        self._cache.clear()
        warnings.warn(msg + "; it runs eagerly from now on", CompileWarning, stacklevel=3)


def compile(
    model=None,
    *,
    fullgraph: bool = False,
    dynamic=None,
    backend=None,
    mode=None,
    options=None,
    name: str | None = None,
    disable: bool = False,
    recompile_limit: int | None = None,
    isolate_recompiles: bool = False,
    shapes_spec=None,
):  # noqa: A001 - torch's name
    """Compile ``model`` (a function, or an ``nn.Module``: its calls) so that later calls replay its graph.

    Used as ``tw.compile(fn)``, ``@tw.compile`` or ``@tw.compile(mode=..., fullgraph=..., dynamic=..., backend=...)``,
    with torch's arguments: ``fullgraph=True`` raises :class:`~tensorwire.protocol.errors.CompileError` where the
    function cannot be replayed instead of running it eagerly; ``disable=True`` returns ``model`` unchanged;
    ``mode``, ``options``, ``dynamic`` and ``backend`` (None: torch's default, ``"inductor"``) are checked as torch
    checks them and otherwise change nothing (graphs are specialised to their signature's shapes, and the cluster's
    backends run them). Accepted and ignored, as torch 2.13 names them: ``name`` (a label for torch's debug tools),
    ``recompile_limit`` and ``isolate_recompiles`` (torch's recompilation budget: here each function keeps its
    :data:`CACHE_SIZE` latest graphs and gives up after :data:`MAX_TRACES` disagreeing calls), ``shapes_spec``
    (torch's dynamic-shape hints: graphs are specialised to shapes).
    """
    if mode is not None and options is not None:
        raise CompileError("Either mode or options can be specified, but both can't be specified at the same time.")
    if mode not in MODES:
        raise CompileError(f"Unrecognized mode={mode!r}, should be one of: {', '.join(m for m in MODES if m)}")
    if backend is None:
        backend = DEFAULT_BACKEND
    if model is None:
        return lambda fn: compile(
            fn, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode, options=options, disable=disable
        )
    if not callable(model):
        raise TypeError(f"tw.compile expects a function or a module, got {type(model).__name__}")
    if disable:
        return model
    if isinstance(model, Module):
        return CompiledFunction(model.__call__, fullgraph, dynamic, backend, mode, options)
    return CompiledFunction(model, fullgraph, dynamic, backend, mode, options)


#: torch.jit.isinstance (bound last: this module's own code uses the builtin)
isinstance = _torchscript.isinstance  # noqa: A001
