"""Which ``tw.compile`` traces are recording now, for hooks in code that knows no session (``Module.__call__``).

Code that holds a tensor reaches the trace through its session (``t._s._capture``); this module is for the rest,
and costs one module-attribute test when nothing is being traced. It lies outside the ``jit`` package (whose
``__init__`` imports ``nn.Module``, for ``tw.compile(module)``), so ``nn.module`` reads it without loading the
package: ``jit -> nn -> jit_state``, no circle (issue 32).
"""

from __future__ import annotations

tracing = 0  # how many traces are recording (``if _jit.tracing:`` is the hooks' fast path)
_active: list = []


def push(trace) -> None:
    global tracing
    _active.append(trace)
    tracing = len(_active)


def pop(trace) -> None:
    global tracing
    if trace in _active:
        _active.remove(trace)
    tracing = len(_active)


def note_module(module) -> None:
    """A module was called while recording: replays check its ``training`` flag is still the same."""
    for t in _active:
        t.note_module(module)
