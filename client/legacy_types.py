"""torch's legacy tensor types, ``tw.FloatTensor``, ``tw.LongTensor``, ... (older scripts and pygcn build their
tensors with them): ``FloatTensor(data)`` makes a float32 tensor of a list or an array, ``FloatTensor(2, 3)`` an
uninitialised one of that size, ``FloatTensor()`` an empty one; ``isinstance(t, tw.FloatTensor)`` holds for a
float32 tensor (on any device: the cluster's types do not split by device as torch's ``cuda.FloatTensor`` do), and
``t.type(tw.LongTensor)`` casts."""

from __future__ import annotations

from tensorwire.protocol import dtypes as D

from .tensor import Tensor

__all__ = ["FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor", "LongTensor", "IntTensor", "ShortTensor",
           "CharTensor", "ByteTensor", "BoolTensor"]


class _LegacyType(type):
    """The metaclass: calling a legacy type makes a Tensor of its dtype; ``isinstance`` checks the dtype."""

    dtype: D.DType

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, Tensor) and obj.dtype is cls.dtype

    def __call__(cls, *args, device=None):
        from .creation import empty, tensor
        from .tensor import Size

        if len(args) == 1 and isinstance(args[0], Size):
            sizes = tuple(args[0])
        elif args and all(isinstance(n, int) and not isinstance(n, bool) for n in args):
            sizes = args
        elif len(args) == 1:  # data: a list, an array or a tensor
            return tensor(args[0], dtype=cls.dtype, device=device)
        elif not args:
            return tensor([], dtype=cls.dtype, device=device)
        else:
            raise TypeError(f"{cls.__name__}(): expected data or sizes (ints), got {args!r}")
        return empty(*sizes, dtype=cls.dtype, device=device)


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
