"""Attribute readers: every op reads its attributes through these, which check types (attributes may come
from a hostile peer).
"""

from __future__ import annotations

from .. import dtypes as D
from ..errors import ProtocolError
from ..shapes import norm_dims


def a_int(attrs: dict, key: str, default=None) -> int:
    v = attrs.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ProtocolError(f"attribute {key!r} must be an int, got {v!r}")
    return v


def a_ints(attrs: dict, key: str, default=None) -> tuple[int, ...]:
    v = attrs.get(key, default)
    tv = type(v)
    if (tv is list or tv is tuple) and len(v) <= 64:  # the common case, checked in one pass (every recorded view)
        for x in v:
            if type(x) is not int:
                break
        else:
            return tuple(v)
    if not isinstance(v, (list, tuple)) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise ProtocolError(f"attribute {key!r} must be a list of ints, got {v!r}")
    if len(v) > 64:
        raise ProtocolError(f"attribute {key!r} is too long")
    return tuple(v)


def a_num(attrs: dict, key: str, default=None):
    v = attrs.get(key, default)
    if not isinstance(v, (int, float, bool)):
        raise ProtocolError(f"attribute {key!r} must be a number, got {v!r}")
    return v


def a_bool(attrs: dict, key: str, default=False) -> bool:
    v = attrs.get(key, default)
    if not isinstance(v, bool):
        raise ProtocolError(f"attribute {key!r} must be a bool, got {v!r}")
    return v


def a_dtype(attrs: dict, key: str = "dtype", default=None) -> D.DType:
    v = attrs.get(key, default)
    if isinstance(v, D.DType):
        return v
    if not isinstance(v, str) or v not in D.BY_NAME:
        raise ProtocolError(f"attribute {key!r} must be a dtype name, got {v!r}")
    return D.BY_NAME[v]


def a_dims(attrs: dict, ndim: int, key: str = "dims") -> tuple[int, ...]:
    v = attrs.get(key)
    if v is None:
        return tuple(range(ndim))
    return norm_dims(a_ints(attrs, key) if isinstance(v, (list, tuple)) else a_int(attrs, key), ndim)



def a_str(attrs: dict, key: str, choices: tuple[str, ...], default=None) -> str:
    v = attrs.get(key, default if default is not None else choices[0])
    if v not in choices:
        raise ProtocolError(f"attribute {key!r} must be one of {list(choices)}, got {v!r}")
    return v
