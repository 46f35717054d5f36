"""torch's legacy tensor types, ``tw.FloatTensor``, ``tw.LongTensor``, ... (older scripts and pygcn build their
tensors with them): ``FloatTensor(data)`` makes a float32 tensor of a list or an array, ``FloatTensor(2, 3)`` an
uninitialised one of that size, ``FloatTensor()`` an empty one; ``isinstance(t, tw.FloatTensor)`` holds for a
float32 tensor (on any device: the cluster's types do not split by device as torch's ``cuda.FloatTensor`` do), and
``t.type(tw.LongTensor)`` casts.

``tw.Tensor(...)`` itself is torch's legacy constructor too (:func:`init_legacy`): ``Tensor(2, 3)`` an uninitialised
tensor of the default dtype (float32 unless changed), ``Tensor([1, 2])`` one of that data, ``Tensor()`` an empty one,
``Tensor(t)`` a tensor sharing ``t``'s value (a view, in ``t``'s dtype)."""

from __future__ import annotations

import numpy as np

from tensorwire.protocol import dtypes as D

from . import _install
from . import creation as _creation
from .tensor import Size, Tensor

__all__ = ["FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor", "LongTensor", "IntTensor", "ShortTensor",
           "CharTensor", "ByteTensor", "BoolTensor"]


class _LegacyType(type):
    """The metaclass: calling a legacy type makes a Tensor of its dtype; ``isinstance`` checks the dtype."""

    dtype: D.DType

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, Tensor) and obj.dtype is cls.dtype

    def __call__(cls, *args, device=None):
        return _legacy_new(cls.__name__, cls.dtype, args, device)


def _legacy_new(name: str, dtype: D.DType, args: tuple, device) -> Tensor:
    """A legacy constructor's tensor: ``(*sizes)`` or ``(Size)`` uninitialised, ``(data)`` of that data (a list, a
    tuple, an array or a tensor), ``()`` empty; of ``dtype``."""
    if len(args) == 1 and isinstance(args[0], Size):
        return _creation.empty(*tuple(args[0]), dtype=dtype, device=device)
    if args and all(isinstance(n, int) and not isinstance(n, bool) for n in args):
        return _creation.empty(*args, dtype=dtype, device=device)
    if len(args) == 1:  # data
        if isinstance(args[0], (bool, float, complex, str, bytes, np.generic)) or args[0] is None:
            raise TypeError(f"{name}(): data must be a sequence (got {type(args[0]).__name__})")
        return _creation.tensor(args[0], dtype=dtype, device=device)
    if not args:
        return _creation.tensor([], dtype=dtype, device=device)
    raise TypeError(f"{name}(): expected data or sizes (ints), got {args!r}")


#: the slots a tensor's state lives in (what :func:`init_legacy` moves into the object being constructed)
_STATE = tuple(n for n in Tensor.__slots__ if n != "__weakref__")


def init_legacy(self: Tensor, *args, **kwargs) -> None:
    """``Tensor.__init__``: torch's legacy constructor ``tw.Tensor(*sizes)`` / ``tw.Tensor(data)`` / ``tw.Tensor()``
    (the default dtype; ``device=`` only), and ``tw.Tensor(t)``: a view of ``t``, in its dtype. ``self`` is a bare
    object (``type.__call__`` made it); the new tensor's state moves into it, and the tensor it was made as gives up
    its handle."""
    device = kwargs.pop("device", None)
    if kwargs:
        raise TypeError(f"Tensor(): unexpected keyword arguments {sorted(kwargs)} (only device=; use tw.tensor("
                        "data, dtype=...) or tw.empty(*sizes, dtype=...) for others)")
    if len(args) == 1 and isinstance(args[0], Tensor) and not args[0]._sparse:
        if device is not None:
            raise TypeError("Tensor(t, device=...): move the tensor with t.to(device)")
        src = args[0].view(*args[0]._shape)
    else:
        src = _legacy_new("Tensor", D.get_default_dtype(), args, device)
    for name in _STATE:
        object.__setattr__(self, name, getattr(src, name))
    src._s = None  # (the handle is self's now: src must not release it)


def _make(name: str, dtype: D.DType) -> type:
    return _LegacyType(name, (), {"dtype": dtype, "__doc__": f"torch's legacy ``{name}``: a {dtype.name} tensor."})


FloatTensor = _make("FloatTensor", D.float32)
DoubleTensor = _make("DoubleTensor", D.float64)
HalfTensor = _make("HalfTensor", D.float16)
BFloat16Tensor = _make("BFloat16Tensor", D.bfloat16)
LongTensor = _make("LongTensor", D.int64)
IntTensor = _make("IntTensor", D.int32)
ShortTensor = _make("ShortTensor", D.int16)
CharTensor = _make("CharTensor", D.int8)
ByteTensor = _make("ByteTensor", D.uint8)
BoolTensor = _make("BoolTensor", D.bool_)


#: torch's legacy type name of each dtype (``FloatTensor``), the complex ones too, which have no legacy type here
NAMES = {**{t.dtype: t.__name__ for t in (FloatTensor, DoubleTensor, HalfTensor, BFloat16Tensor, LongTensor,
                                          IntTensor, ShortTensor, CharTensor, ByteTensor, BoolTensor)},
         D.complex64: "ComplexFloatTensor", D.complex128: "ComplexDoubleTensor"}
_BY_NAME = {**{f"torch.{n}": d for d, n in NAMES.items()}, **{f"torch.cuda.{n}": d for d, n in NAMES.items()}}


def type_(self: Tensor, dtype=None, non_blocking: bool = False, **kwargs):
    """With no argument, torch's name of this tensor's type (``"torch.FloatTensor"``; ``"torch.cuda.FloatTensor"``
    on a CUDA device), which older scripts compare and pass back; else this tensor cast to ``dtype``: a dtype, a
    legacy type (``tw.LongTensor``) or such a name (``"torch.cuda.LongTensor"`` moves a host tensor to CUDA too).
    ``self`` when nothing changes."""
    if dtype is None:
        name = NAMES.get(self.dtype, self.dtype.name)
        return f"torch.cuda.{name}" if self.device.type == "cuda" else f"torch.{name}"
    device = None
    if isinstance(dtype, str):
        if dtype not in _BY_NAME:
            raise ValueError(f"invalid type: {dtype!r}")
        if dtype.startswith("torch.cuda.") and self.device.type != "cuda":
            device = "cuda"
        dtype = _BY_NAME[dtype]
    elif isinstance(dtype, type):
        dtype = getattr(dtype, "dtype", dtype)
    return self.to(device=device, dtype=dtype, non_blocking=non_blocking)


# ``Tensor.__init__`` and ``Tensor.type`` (client/_install.py loads this module with Tensor: ``tensor`` cannot import
# it, as it imports ``creation``, which makes tensors of the current session)
_install.install_methods(Tensor, {"__init__": init_legacy, "type": type_}, wrap=False)
_install.loaded(__name__)
