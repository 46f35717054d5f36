"""Where recording meets autograd.

Every op a tensor method records goes through :func:`record`, the one place where grad tracking
can attach a backward node. Until the autograd service lands (see ``docs/architecture.md``), this
module records plainly and refuses ``requires_grad`` work with a clear error instead of computing
wrong gradients.
"""

from __future__ import annotations


def record(session, op: str, ins, attrs, device: str):
    """Record ``op`` on ``device``; the single entry point for every recorded op."""
    return session.record(op, ins, attrs, device)


def detach(t):
    out = t._rec("copy", [t])
    out.requires_grad = False
    return out


def check_inplace(t, new) -> None:
    """Reject in-place updates autograd could not represent (none yet without autograd)."""


def after_inplace(t, new) -> None:
    """Called after ``t`` was rebound to a new value by an in-place op."""
