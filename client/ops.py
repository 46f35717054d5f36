"""``tw.ops``: every op of the op table by name, custom ops of installed plugins included (torch's ``torch.ops``).

``tw.ops.toy_hypot(a, b)`` records the op ``toy_hypot`` on its inputs' device, through the same path as a tensor
method (grad tracking, autocast), so a plugin's op is differentiable like a built-in one. Keyword arguments are the
op's attributes. The first use of a name the op table does not know loads the installed plugins' ops
(:func:`tensorwire.protocol.ops.load_plugin_ops`); a name still unknown then is an ``AttributeError``.

Python numbers among the inputs become 0-d tensors, as in ``tensor + 1``; at least one input must be a tensor (an
op without tensor inputs, such as ``full``, has a function of its own: ``tw.full``).
"""

from __future__ import annotations

from tensorwire.protocol.ops import OPS, load_plugin_ops

from . import autograd_hooks as _hooks
from .tensor import Tensor


class _Op:
    """One op of the table, callable on tensors."""

    def __init__(self, name: str):
        self.name = name
        self.__doc__ = OPS[name].doc or f"The op {name!r} of the op table."

    def __call__(self, *inputs, **attrs):
        first = next((t for t in inputs if isinstance(t, Tensor)), None)
        if first is None:
            raise TypeError(f"tw.ops.{self.name} needs at least one tensor input")
        ins = [t if isinstance(t, Tensor) else first._operand(t) for t in inputs]
        return _hooks.record(first._s, self.name, ins, attrs or None, first._dev)

    def __repr__(self) -> str:
        return f"tw.ops.{self.name}"


class _Ops:
    """The namespace: attribute access finds the op (loading plugin ops the first time a name is unknown)."""

    def __init__(self):
        self._loaded = False

    def __getattr__(self, name: str) -> _Op:
        if name.startswith("__"):
            raise AttributeError(name)
        if name not in OPS and not self._loaded:
            self._loaded = True
            load_plugin_ops()
        if name not in OPS:
            raise AttributeError(f"tw.ops has no op {name!r}: not in the op table, and no installed plugin adds it "
                                 "(plugins add ops through the tensorwire_ops hook)")
        return _Op(name)

    def __dir__(self):
        return sorted(OPS)


ops = _Ops()
