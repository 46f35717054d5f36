"""A module call with forward hooks, as torch's ``Module._call_impl`` runs them
(``register_forward_pre_hook`` and ``register_forward_hook``, with their ``prepend``, ``with_kwargs`` and
``always_call`` options):

* each forward pre-hook, in order: ``hook(module, args)``, whose non-None return replaces ``args`` (a non-tuple is
  wrapped in one); with ``with_kwargs``, ``hook(module, args, kwargs)``, whose non-None return must be a tuple
  ``(args, kwargs)`` and replaces both;
* ``forward(*args, **kwargs)`` (with the backward hooks set on its inputs and outputs where the module has any:
  :func:`~.backward_hooks.call_with_backward_hooks`);
* each forward hook, in order: ``hook(module, args, output)`` (with ``with_kwargs``,
  ``hook(module, args, kwargs, output)``), whose non-None return replaces the output.

When anything of that raises, the ``always_call`` hooks that have not run yet run with the output so far (None if
``forward`` did not return), each one's own exception turned into a warning, and the first exception goes on.

Which hooks take ``kwargs`` and which are ``always_call`` are torch's dicts of the module, keyed by the hook's
handle id: ``_forward_pre_hooks_with_kwargs``, ``_forward_hooks_with_kwargs``, ``_forward_hooks_always_called``."""

from __future__ import annotations

import warnings

from .backward_hooks import call_with_backward_hooks

#: the dicts of flags a module keeps beside its forward hooks (torch's names)
PRE_WITH_KWARGS = "_forward_pre_hooks_with_kwargs"
WITH_KWARGS = "_forward_hooks_with_kwargs"
ALWAYS_CALLED = "_forward_hooks_always_called"


def call_with_forward_hooks(module, args: tuple, kwargs: dict, backward_hooked: bool):
    """``module(*args, **kwargs)`` with its forward pre-hooks and forward hooks (and its backward hooks when
    ``backward_hooked``: some module of the process has had one)."""
    d = module.__dict__
    pre_with_kwargs = d.get(PRE_WITH_KWARGS, ())
    with_kwargs = d.get(WITH_KWARGS, ())
    always = d.get(ALWAYS_CALLED, ())
    called: set = set()
    result = None

    def forward_then_hooks(*a, **kw):
        nonlocal result, args
        args = a
        result = module.forward(*a, **kw)
        for hook_id, hook in list(module._forward_hooks.items()):
            if hook_id in always:
                called.add(hook_id)
            r = hook(module, a, kw, result) if hook_id in with_kwargs else hook(module, a, result)
            if r is not None:
                result = r
        return result

    try:
        for hook_id, hook in list(module._forward_pre_hooks.items()):
            if hook_id in pre_with_kwargs:
                r = hook(module, args, kwargs)
                if r is not None:
                    if not (isinstance(r, tuple) and len(r) == 2):
                        raise RuntimeError(f"forward pre-hook must return None or a tuple of (new_args, new_kwargs), "
                                           f"but got {r}.")
                    args, kwargs = r
            else:
                r = hook(module, args)
                if r is not None:
                    args = r if isinstance(r, tuple) else (r,)
        if backward_hooked:
            bw, bw_pre = d.get("_backward_hooks"), d.get("_backward_pre_hooks")
            if bw or bw_pre:
                return call_with_backward_hooks(module, list(bw.values()), list(bw_pre.values()), forward_then_hooks,
                                                args, kwargs)
        return forward_then_hooks(*args, **kwargs)
    except Exception:
        if always:
            _run_always_called(module, args, kwargs, result, always, called, with_kwargs)
        raise


def _run_always_called(module, args: tuple, kwargs: dict, result, always, called: set, with_kwargs) -> None:
    """The ``always_call`` forward hooks not run yet, after an exception (torch's rule: each one's exception is
    a warning; the caller re-raises the first)."""
    for hook_id, hook in list(module._forward_hooks.items()):
        if hook_id not in always or hook_id in called:
            continue
        try:
            r = hook(module, args, kwargs, result) if hook_id in with_kwargs else hook(module, args, result)
            if r is not None:
                result = r
        except Exception as e:
            warnings.warn("module forward hook with ``always_call=True`` raised an exception that was silenced as "
                          f"another error was raised in forward: {e}", stacklevel=3)


__all__ = ["call_with_forward_hooks"]
