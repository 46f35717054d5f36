"""Where recording meets autograd.

Every op a tensor method records goes through :func:`record`, the one place where grad tracking
attaches a backward node (:mod:`tensorwire.autograd_engine`) and where autocast (:mod:`tensorwire.amp`) casts
an op's inputs. Without grad mode, or when no input
requires grad, it is a plain ``session.record``.
"""

from __future__ import annotations

from . import autograd_engine as _E
from .amp import autocast_mode as _amp

_wants = _E.wants_grad
_record_grad = _E.record_grad
_amp_active = _amp._active


def record(session, op: str, ins, attrs, device: str):
    """Record ``op`` on ``device``; the single entry point for every recorded op (autocast casts its inputs
    here, by :mod:`tensorwire.amp.policy`, while an autocast scope is on)."""
    if _amp_active[0] and ins:
        ins = _amp.cast_inputs(session, op, ins, attrs, device, record)
    if ins and _wants(ins):
        return _record_grad(session, op, ins, attrs, device)
    return session.record(op, ins, attrs, device)


def detach(t):
    """A tensor with ``t``'s value, cut from the autograd graph."""
    return _E.detach(t)


def check_inplace(t, new) -> None:
    """Reject in-place updates autograd cannot represent (torch's errors: in-place on a leaf ...)."""
    _E.check_inplace(t, new)


def after_inplace(t, new) -> None:
    """Called after ``t`` was rebound to ``new``'s value by an in-place op (``new`` holds the old one)."""
    _E.after_inplace(t, new)
