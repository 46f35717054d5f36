"""torch.jit's TorchScript API in eager form: model code written for TorchScript runs unchanged.

timm, torchvision and many models call ``torch.jit.is_scripting()`` in ``forward``, decorate methods with
``@torch.jit.ignore``/``@torch.jit.unused``, annotate ``fused_attn: torch.jit.Final[bool]``, or end an export script
with ``torch.jit.script(model)``. tensorwire has no TorchScript compiler: every model runs eagerly, the cluster
records each call's ops anyway, and :func:`tensorwire.compile` (``tw.jit.compile``) is the replay mechanism. So:

* the queries answer as outside TorchScript: :func:`is_scripting` and :func:`is_tracing` are False;
* the decorators and type helpers (:func:`ignore`, :func:`unused`, :func:`export`, :func:`interface`,
  :func:`script_method`, :func:`script_if_tracing`, :data:`Final`, :func:`annotate`, :class:`Attribute`) return what
  they are given, as torch's do when its JIT is off;
* :func:`script`, :func:`trace` and :func:`trace_module` return the function or module itself (it runs eagerly);
  :func:`freeze` and :func:`optimize_for_inference` return the module;
* :func:`fork` runs the function at once (torch's eager ``fork`` does too) and gives a done :class:`Future`;
* :func:`save` and :func:`load` raise NotImplementedError: TorchScript archives are not supported (``tw.save`` a
  ``state_dict`` instead).

The deprecation warnings torch 2.13 gives (``script``, ``trace``, ``fork``, ``freeze`` ...) are given here too, with
its text.
"""

from __future__ import annotations

import contextlib
import threading
import types
import typing
import warnings
from collections import namedtuple
from collections.abc import Callable
from typing import Any, Final, TypeVar  # (Final: torch.jit.Final is typing's, for ``x: torch.jit.Final[bool]``)

from tensorwire.nn.module import Module

__all__ = [
    "Attribute", "Error", "Final", "Future", "RecursiveScriptModule", "ScriptFunction", "ScriptModule", "annotate",
    "enable_onednn_fusion", "export", "fork", "freeze", "ignore", "interface", "is_scripting", "is_tracing",
    "isinstance", "load", "onednn_fusion_enabled", "optimize_for_inference", "optimized_execution", "save", "script",
    "script_if_tracing", "script_method", "set_fusion_strategy", "strict_fusion", "trace", "trace_module", "unused",
    "wait",
]

_T = TypeVar("_T")
_builtin_isinstance = isinstance

#: ``torch.jit.Attribute(value, type)``: a value with its TorchScript type; a :class:`ScriptModule` stores the value
Attribute = namedtuple("Attribute", ["value", "type"])

_NO_ARCHIVES = ("TorchScript archives are not supported by tensorwire (models run eagerly; there is no TorchScript "
                "compiler): save the model's state_dict with tw.save and load it into the module with tw.load")


def _deprecated(what: str, instead: str = "Please use `torch.compile` instead.") -> None:
    warnings.warn(f"`torch.jit.{what}` is deprecated. {instead}", DeprecationWarning, stacklevel=3)


class Error(RuntimeError):
    """torch.jit.Error: the error TorchScript code raises (not raised by tensorwire; for ``except`` clauses)."""


def is_scripting() -> bool:
    """False: code never runs as TorchScript here (torch's answer in eager Python)."""
    return False


def is_tracing() -> bool:
    """False: nothing is traced by ``torch.jit.trace`` here (:func:`trace` returns its function unchanged)."""
    return False


def ignore(drop=False, **kwargs):
    """``@ignore`` or ``@ignore(drop=False)``: torch's marker for a function TorchScript leaves to Python; returns the
    function (it runs as Python anyway). ``drop=True`` and ``drop_on_export=True`` warn as torch's (deprecated: use
    :func:`unused`); a ``drop`` that is neither a bool nor a function raises RuntimeError, as torch's."""
    if callable(drop):
        return drop
    if not _builtin_isinstance(drop, bool):
        raise RuntimeError(f"Argument to @torch.jit.ignore must be a bool or a function but got {drop}")
    drop_on_export = kwargs.pop("drop_on_export", None)
    if drop_on_export or drop:
        kind = "ignore(drop_on_export=True)" if drop_on_export else "ignore(True)"
        warnings.warn(f"{kind} has been deprecated. TorchScript will now drop the function call on compilation. "
                      "Use torch.jit.unused now. {}", FutureWarning, stacklevel=2)

    def decorator(fn):
        return fn

    return decorator


def unused(fn: Callable) -> Callable:
    """``@unused``: torch's marker for a function (or property) TorchScript replaces by a raise; returns it as is."""
    return fn


def export(fn: Callable) -> Callable:
    """``@export``: torch's marker for a method TorchScript compiles besides ``forward``; returns it as is."""
    return fn


def interface(obj: _T) -> _T:
    """``@interface``: torch's marker for a TorchScript interface class; returns the class (deprecated, as torch's)."""
    _deprecated("interface")
    if not _builtin_isinstance(obj, type):
        raise RuntimeError("interface must be applied to a class")
    return obj


def script_method(fn):
    """``@script_method`` (on a :class:`ScriptModule`'s method): returns the method, which runs eagerly. Warns as
    torch's (deprecated)."""
    _deprecated("script_method", "Please switch to `torch.compile` or `torch.export`.")
    return fn


def script_if_tracing(fn):
    """``@script_if_tracing``: returns the function (nothing is traced here, so it would never be scripted)."""
    return fn


def annotate(the_type, the_value):
    """``the_value``: torch's type hint for the TorchScript compiler, a pass-through outside TorchScript."""
    return the_value


def script(obj: Any, optimize: None = None, _frames_up: int = 0, _rcb: Callable[[str], Any] | None = None,
           example_inputs: list[tuple] | dict[Callable, list[tuple]] | None = None) -> Any:
    """``obj`` itself: a module or function given to ``torch.jit.script`` runs eagerly here (there is no TorchScript
    compiler; for one message per call instead of one per op, use :func:`tensorwire.compile`). Warns as torch's
    (deprecated)."""
    _deprecated("script", "Please switch to `torch.compile` or `torch.export`.")
    if optimize is not None:
        warnings.warn("`optimize` is deprecated and has no effect. Use `with torch.jit.optimized_execution()` instead",
                      FutureWarning, stacklevel=2)
    return obj


def trace(func, example_inputs=None, optimize=None, check_trace=True, check_inputs=None, check_tolerance=1e-05,
          strict=True, _force_outplace=False, _module_class=None, _compilation_unit=None, example_kwarg_inputs=None,
          _store_inputs=True):
    """``func`` itself (a function or a module), unchanged: nothing is traced and ``example_inputs`` are not run.
    The cluster records every call's ops anyway, and :func:`tensorwire.compile` is the replay mechanism (a graph
    recorded once, then one message per call). torch's arguments are accepted; warns as torch's (deprecated)."""
    _deprecated("trace", "Please switch to `torch.compile` or `torch.export`.")
    if optimize is not None:
        warnings.warn("`optimize` is deprecated and has no effect. Use `with torch.jit.optimized_execution()` instead",
                      FutureWarning, stacklevel=2)
    return func


def trace_module(mod, inputs, optimize=None, check_trace=True, check_inputs=None, check_tolerance=1e-05, strict=True,
                 _force_outplace=False, _module_class=None, _compilation_unit=None, example_inputs_is_kwarg=False,
                 _store_inputs=True):
    """``mod`` itself: as :func:`trace`, nothing is traced (its methods run eagerly). Warns as torch's (deprecated;
    torch's text names it ``trace_method``)."""
    _deprecated("trace_method", "Please switch to `torch.compile` or `torch.export`.")
    return mod


def freeze(mod, preserved_attrs: list[str] | None = None, optimize_numerics: bool = True):
    """``mod`` itself (it runs eagerly; nothing is inlined). As torch's, the module must be in eval mode; warns as
    torch's (deprecated)."""
    _deprecated("freeze")
    if _builtin_isinstance(mod, Module) and mod.training:
        raise RuntimeError("Freezing is currently only implemented for modules in eval mode. Please call .eval() on "
                           "your module before freezing.")
    return mod


def optimize_for_inference(mod, other_methods: list[str] | None = None):
    """``mod`` itself, in eval mode (torch's returns a frozen, optimised copy; here the module runs eagerly). Warns
    as torch's (deprecated)."""
    _deprecated("optimize_for_inference")
    return mod.eval() if _builtin_isinstance(mod, Module) and mod.training else mod


@contextlib.contextmanager
def optimized_execution(should_optimize):
    """A context manager that changes nothing (torch's switch of its TorchScript graph optimiser)."""
    yield


class strict_fusion:  # noqa: N801 - torch's name
    """A context manager that checks nothing (torch's asserts TorchScript fused the ops inside; outside TorchScript
    it warns "Only works in script mode", and so does this)."""

    def __init__(self) -> None:
        warnings.warn("Only works in script mode", stacklevel=2)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None


_FUSION: list = [[("STATIC", 2), ("DYNAMIC", 10)]]
_ONEDNN = [False]


def set_fusion_strategy(strategy: list[tuple[str, int]]):
    """Store the TorchScript fuser's strategy (it changes nothing here) and return the previous one, as torch's.
    Warns as torch's (deprecated)."""
    _deprecated("set_fusion_strategy")
    prev, _FUSION[0] = _FUSION[0], list(strategy)
    return prev


def enable_onednn_fusion(enabled: bool) -> None:
    """Store the flag of TorchScript's oneDNN fuser (it changes nothing here)."""
    _ONEDNN[0] = bool(enabled)


def onednn_fusion_enabled() -> bool:
    """The flag :func:`enable_onednn_fusion` stored (False by default, as torch's)."""
    return _ONEDNN[0]


class Future:
    """torch's future: :func:`fork` gives one already done; ``Future()`` makes one that :meth:`set_result` (or
    :meth:`set_exception`) completes, which :meth:`wait` waits for. ``devices`` is accepted (torch's CUDA streams)."""

    def __init__(self, *, devices=None):
        self._done = threading.Event()
        self._value = None
        self._error: BaseException | None = None
        self._callbacks: list = []

    def done(self) -> bool:
        """Whether the future has its result (or error)."""
        return self._done.is_set()

    def set_result(self, result) -> None:
        """Complete the future with ``result`` (then run the callbacks added)."""
        self._complete(result, None)

    def set_exception(self, result) -> None:
        """Complete the future with the exception ``result``, which :meth:`wait` raises."""
        self._complete(None, result)

    def _complete(self, value, error) -> None:
        if self._done.is_set():
            raise RuntimeError("Future can only be marked completed once.")
        self._value, self._error = value, error
        self._done.set()
        for cb in self._callbacks:
            cb(self)

    def wait(self):
        """The result, once there (the error, raised)."""
        self._done.wait()
        return self.value()

    def value(self):
        """The result of a completed future (its error, raised)."""
        if self._error is not None:
            raise self._error
        return self._value

    def add_done_callback(self, callback) -> None:
        """Run ``callback(future)`` once the future is done (now, if it is)."""
        if self._done.is_set():
            callback(self)
        else:
            self._callbacks.append(callback)

    def then(self, callback) -> Future:
        """A future of ``callback(self)``, run once this one is done."""
        out = Future()

        def run(fut):
            try:
                out.set_result(callback(fut))
            except Exception as e:  # noqa: BLE001 - carried by the new future, as torch's
                out.set_exception(e)

        self.add_done_callback(run)
        return out


def fork(func, *args, **kwargs) -> Future:
    """Run ``func(*args, **kwargs)`` now and return a :class:`Future` holding the result (torch's ``fork`` outside
    TorchScript runs the call at once too, and raises its error there); the tensors' work still runs asynchronously
    on the cluster. Warns as torch's (deprecated)."""
    _deprecated("fork")
    fut = Future()
    fut.set_result(func(*args, **kwargs))  # (an error is raised here, as torch's eager fork raises it)
    return fut


def wait(future):
    """``future.wait()``: the result of a :func:`fork` call. Warns as torch's (deprecated)."""
    _deprecated("wait")
    return future.wait()


def save(m, f, _extra_files=None) -> None:
    """Not supported: raises NotImplementedError (TorchScript archives)."""
    raise NotImplementedError(f"torch.jit.save: {_NO_ARCHIVES}")


def load(f, map_location=None, _extra_files=None, _restore_shapes=False):
    """Not supported: raises NotImplementedError (TorchScript archives)."""
    raise NotImplementedError(f"torch.jit.load: {_NO_ARCHIVES}")


def isinstance(obj, target_type) -> bool:  # noqa: A001 - torch's name
    """``torch.jit.isinstance``: :func:`isinstance` that also checks the parameters of ``list[int]``,
    ``dict[str, Tensor]``, ``tuple[...]``, ``Optional[...]`` and ``Union[...]`` element by element, as torch's."""
    origin, params = typing.get_origin(target_type), typing.get_args(target_type)
    if origin is None:
        return _builtin_isinstance(obj, target_type)
    if origin is typing.Union or origin is types.UnionType:
        return any(isinstance(obj, t) for t in params)
    if not _builtin_isinstance(obj, origin):
        return False
    if not params:
        return True
    if origin is list:
        return all(isinstance(x, params[0]) for x in obj)
    if origin is dict:
        return all(isinstance(k, params[0]) and isinstance(v, params[1]) for k, v in obj.items())
    if origin is tuple:
        if len(params) == 2 and params[1] is Ellipsis:
            return all(isinstance(x, params[0]) for x in obj)
        return len(obj) == len(params) and all(isinstance(x, t) for x, t in zip(obj, params))
    return True


class ScriptModule(Module):
    """torch.jit.ScriptModule as a plain :class:`~tensorwire.nn.Module`: a subclass runs eagerly (its
    ``@script_method`` methods are ordinary methods), and ``self.x = Attribute(value, type)`` stores ``value``."""

    def __setattr__(self, name: str, value) -> None:
        if _builtin_isinstance(value, Attribute):
            value = value.value
        super().__setattr__(name, value)


class RecursiveScriptModule(ScriptModule):
    """torch's class of a scripted module, for ``isinstance`` checks: :func:`script` returns modules as they are, so
    no module here is one."""


class ScriptFunction:
    """torch's class of a scripted function, for ``isinstance`` checks: :func:`script` returns functions as they
    are, so no function here is one."""
