"""``tw.autograd``: the user's autograd API, and (in submodules) the VJP rules and the service.

``grad``, ``backward``, ``Function``, ``gradcheck`` and the grad-mode switches live in the client
(``tensorwire.autograd_engine``); this package re-exports them so ``tw.autograd.grad`` reads as in
torch. ``tensorwire.autograd.vjp`` (the rules), ``.backward`` (the transform) and ``.service`` are
only imported by the autograd service.
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


def service_stats(session=None) -> dict:
    """The autograd service's counters: ``requests``, ``backward``, ``hits`` (its cache), ``cached``."""
    from tensorwire.context import current_session  # lazy: the session; the autograd service imports this package

    s = session or current_session()
    h, _ = s.service_request("autograd", {"op": "stats"})
    return {k: h[k] for k in ("requests", "backward", "hits", "cached") if k in h}


__all__ = ["AutogradError", "Function", "FunctionCtx", "backward", "clear_cache", "enable_grad", "grad",
           "gradcheck", "gradcheck_terms", "inference_mode", "is_grad_enabled", "no_grad", "set_grad_enabled",
           "service_stats", "stats"]
