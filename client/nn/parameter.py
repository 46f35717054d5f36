"""``tw.nn.Parameter``: a tensor that a :class:`~tensorwire.nn.Module` registers as a parameter."""

from __future__ import annotations

from tensorwire.creation import empty
from tensorwire.protocol import dtypes as D
from tensorwire.tensor import Tensor

from ._tensors import alias, rebind


def _adopt(cls, data: Tensor, requires_grad: bool):
    src = alias(data)  # a fresh id holding data's value, so the two objects never share a handle
    p = object.__new__(cls)
    p._init(src._s, src._id, src._shape, src.dtype, src._dev)
    src._s = None  # the id now belongs to p: src must not release it
    p.requires_grad = bool(requires_grad) and src.dtype.is_inexact
    if requires_grad and not src.dtype.is_inexact:
        raise RuntimeError("Only Tensors of floating point and complex dtype can require gradients")
    return p


class Parameter(Tensor):
    """A tensor that is a module parameter (``requires_grad=True`` by default).

    ``Parameter(data)`` holds ``data``'s value (not its later in-place updates: cluster buffers are
    immutable). ``p.data`` is the value outside autograd, sharing in-place updates with ``p``; ``p.data = t``
    replaces it, as in torch.
    """

    __slots__ = ()

    def __new__(cls, data: Tensor | None = None, requires_grad: bool = True):
        if data is None:
            data = empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter expects a tw.Tensor, got {type(data).__name__}")
        return _adopt(cls, data, requires_grad)

    def __init__(self, data=None, requires_grad: bool = True):
        pass

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        out = Parameter(self, self.requires_grad)
        memo[id(self)] = out
        return out

    def __reduce_ex__(self, proto):
        raise TypeError("tensorwire tensors cannot be pickled; use tw.save (safetensors)")


class Buffer:
    """``tw.nn.Buffer(tensor, persistent=True)``: assigning one to a module attribute registers a buffer."""

    def __init__(self, data: Tensor, persistent: bool = True):
        self.data = data
        self.persistent = persistent


def is_float(t: Tensor) -> bool:
    return t.dtype.is_floating_point and t.dtype is not D.bool_


class UninitializedParameter(Parameter):
    """A parameter whose shape is not known yet (a lazy module's, until its first call): an empty tensor until
    :meth:`materialize` gives it a shape, after which it is a plain :class:`Parameter` (the same object: optimizers
    and users holding it see the materialised value, as in torch)."""

    __slots__ = ()
    cls_to_become = Parameter

    def __new__(cls, requires_grad: bool = True, device=None, dtype=None):
        return _adopt(cls, empty(0, dtype=dtype, device=device), requires_grad)

    def __init__(self, requires_grad: bool = True, device=None, dtype=None):
        pass

    def materialize(self, shape, device=None, dtype=None) -> None:
        """Become an (uninitialised) tensor of ``shape`` on ``device`` with ``dtype`` (default: its own)."""
        _materialize(self, shape, device, dtype)

    def __repr__(self) -> str:
        return "<UninitializedParameter>"

    __str__ = __repr__

    def __deepcopy__(self, memo):
        if id(self) not in memo:
            memo[id(self)] = type(self)(self.requires_grad, self._dev, self.dtype)
        return memo[id(self)]


class UninitializedBuffer(Tensor):
    """A buffer whose shape is not known yet (a lazy module's running statistics): becomes a plain tensor at
    :meth:`materialize`."""

    __slots__ = ()
    cls_to_become = Tensor

    def __new__(cls, requires_grad: bool = False, device=None, dtype=None):
        return _adopt(cls, empty(0, dtype=dtype, device=device), requires_grad)

    def __init__(self, requires_grad: bool = False, device=None, dtype=None):
        pass

    def materialize(self, shape, device=None, dtype=None) -> None:
        """Become an (uninitialised) tensor of ``shape`` on ``device`` with ``dtype`` (default: its own)."""
        _materialize(self, shape, device, dtype)

    def __repr__(self) -> str:
        return "<UninitializedBuffer>"

    __str__ = __repr__


def _materialize(t, shape, device, dtype) -> None:
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    rebind(t, empty(*shape, dtype=dtype or t.dtype, device=device or t._dev))
    t.__class__ = type(t).cls_to_become


def is_lazy(param) -> bool:
    """Whether ``param`` is an :class:`UninitializedParameter` or :class:`UninitializedBuffer`."""
    return isinstance(param, (UninitializedParameter, UninitializedBuffer))
