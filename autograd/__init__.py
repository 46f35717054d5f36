"""``tw.autograd``: the user's autograd API, and (in submodules) the VJP rules and the service.

``grad``, ``backward``, ``Function``, ``gradcheck`` and the grad-mode switches live in the client
(``tensorwire.autograd_engine``), anomaly mode too (``tensorwire.anomaly_mode``); this package re-exports them so
``tw.autograd.grad`` reads as in torch. ``functional`` (``jacobian``, ``hessian``, ``vjp`` ...), ``grad_checks``
(``gradgradcheck``) and ``variable`` (the legacy ``Variable``) are built on them here, importing nothing heavier.
``tensorwire.autograd.vjp`` (the rules), ``.backward_graph`` (the transform) and ``.service`` are only imported by the
autograd service.
"""

from tensorwire.autograd_engine import (
    AutogradError,
    Function,
    FunctionCtx,
    backward,
    clear_cache,
    enable_grad,
    grad,
    gradcheck,
    gradcheck_terms,
    inference_mode,
    is_grad_enabled,
    no_grad,
    set_grad_enabled,
    stats,
)

from . import anomaly_mode, functional
from .anomaly_mode import detect_anomaly, set_detect_anomaly
from .grad_checks import gradgradcheck
from .variable import Variable


def service_stats(session=None) -> dict:
    """The autograd service's counters: ``requests``, ``backward``, ``hits`` (its cache), ``cached``."""
    from tensorwire.context import current_session  # lazy: the session; the autograd service imports this package

    s = session or current_session()
    h, _ = s.service_request("autograd", {"op": "stats"})
    return {k: h[k] for k in ("requests", "backward", "hits", "cached") if k in h}


__all__ = ["AutogradError", "Function", "FunctionCtx", "backward", "clear_cache", "enable_grad", "grad",
           "gradcheck", "gradcheck_terms", "inference_mode", "is_grad_enabled", "no_grad", "set_grad_enabled",
           "service_stats", "stats", "Variable", "detect_anomaly", "set_detect_anomaly", "gradgradcheck",
           "functional", "anomaly_mode"]
