"""Where recording meets autograd.

Every op a tensor method records goes through :func:`record`, the one place where grad tracking
attaches a backward node (:mod:`tensorwire.autograd_engine`). Without grad mode, or when no input
requires grad, it is a plain ``session.record``.
"""

from __future__ import annotations

from . import autograd_engine as _E

_wants = _E.wants_grad
_record_grad = _E.record_grad


def record(session, op: str, ins, attrs, device: str):
    """Record ``op`` on ``device``; the single entry point for every recorded op."""
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
