"""Where recording meets autograd.

Every op a tensor method records goes through :func:`record`, the one place where grad tracking
attaches a backward node (:mod:`tensorwire.autograd_engine`) and where autocast (:mod:`tensorwire.amp`) casts
an op's inputs. Without grad mode, or when no input
requires grad, it is a plain ``session.record``.
"""

from __future__ import annotations

from types import ModuleType

from . import autocast_state as _amp

_amp_active = _amp._active
#: the autograd engine (:mod:`tensorwire.autograd_engine`), which installs itself here when it loads (``tensor``
#: imports it): the engine reads views, views record through this module, so this module must not import the engine
_E: ModuleType | None = None


#: the engine's per-thread grad mode (its ``_mode``; ``.on``: ``is_grad_enabled()``), read here without the call
_grad_mode = None


def install(engine: ModuleType) -> None:
    """Called once by :mod:`tensorwire.autograd_engine` as it loads."""
    global _E, _grad_mode
    _E = engine
    _grad_mode = engine._mode


def record(session, op: str, ins, attrs, device: str, up: int = 1, known=None):
    """Record ``op`` on ``device``; the single entry point for every recorded op (autocast casts its inputs
    here, by :mod:`tensorwire.autocast_policy`, while an autocast scope is on). ``up``: how many frames above this
    function the search for the user's line starts (``Session.record``'s ``up``): 2, its caller's caller, from a
    client function that is always called by another, as ``Tensor._rec`` is. ``known``: ``Session.record``'s (the
    node's attrs key and output meta, when the caller has them: a view step's), used unless an autocast scope cast
    the inputs."""
    if _amp_active[0] and ins:
        ins = _amp.cast_inputs(session, op, ins, attrs, device, record)
        known = None
    for t in ins:  # (an input that requires grad first: the grad mode's thread-local is read only then)
        if t.requires_grad or ((b := t._base) is not None and b.requires_grad and requires_grad_of(t)):
            # (requires_grad_of, its fast part: false at once for a view of a base that does not require grad)
            if _grad_mode.on:
                return _E.record_grad(session, op, ins, attrs, device, up + 1, known)
            break
    return session.record(op, ins, attrs, device, known, None, None, up + 1)  # (where, hid, up: positional, cheaper)


def requires_grad_of(t) -> bool:
    """Whether an op reading ``t`` is recorded with autograd while grad mode is on: ``t`` or its base requires grad,
    unless ``t`` is (a view of) a ``.data`` view, which autograd never sees (``p.data.add_(p.grad.data, alpha=-lr)``
    is a plain record, as in torch: no view of ``p`` brought up to date with ``p``'s graph first)."""
    if t.requires_grad:
        return True
    b = t._base
    if b is None or not b.requires_grad:
        return False
    steps = t._vsteps
    if steps is not None:
        for s in steps:  # (a loop, not any() of a generator: most views have one step)
            if s.detached:
                return False
    return True


def detach(t):
    """A tensor with ``t``'s value, cut from the autograd graph."""
    return _E.detach(t)


def after_inplace(t, new) -> None:
    """Called after ``t`` was rebound to ``new``'s value by an in-place op (``new`` holds the old one)."""
    _E.after_inplace(t, new)
