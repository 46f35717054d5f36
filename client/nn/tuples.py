"""torch's argument-tuple helpers (``torch.nn.modules.utils``: ``_single``, ``_pair``, ``_triple``, ``_quadruple``,
``_ntuple``, ``_reverse_repeat_tuple``, ``_list_with_default``) and ``consume_prefix_in_state_dict_if_present``, with
torch's exact behaviour: an iterable is kept as a tuple as it is (no broadcast of a 1-tuple, no int conversion),
anything else repeated. Modules use them where torch's attributes (and so their reprs) come from them;
:mod:`tensorwire.nn.modules.utils` re-exports them for scripts that import them from there."""

from __future__ import annotations

import collections.abc
from itertools import repeat
from typing import Any

__all__ = ["_ntuple", "_single", "_pair", "_triple", "_quadruple", "_reverse_repeat_tuple", "_list_with_default",
           "consume_prefix_in_state_dict_if_present"]


def _ntuple(n: int, name: str = "parse"):
    def parse(x):
        if isinstance(x, collections.abc.Iterable):
            return tuple(x)
        return tuple(repeat(x, n))

    parse.__name__ = name
    return parse


_single = _ntuple(1, "_single")
_pair = _ntuple(2, "_pair")
_triple = _ntuple(3, "_triple")
_quadruple = _ntuple(4, "_quadruple")


def _reverse_repeat_tuple(t, n: int) -> tuple:
    """``t`` reversed, each element repeated ``n`` times (a conv's padding as ``F.pad`` takes it)."""
    return tuple(x for x in reversed(t) for _ in range(n))


def _list_with_default(out_size, defaults: list[int]):
    """An adaptive pool's ``output_size`` with its ``None`` entries taken from the input's trailing sizes."""
    if isinstance(out_size, int):
        return out_size
    if len(defaults) <= len(out_size):
        raise ValueError(f"Input dimension should be at least {len(out_size) + 1}")
    return [v if v is not None else d for v, d in zip(out_size, defaults[-len(out_size):])]


def consume_prefix_in_state_dict_if_present(state_dict: dict[str, Any], prefix: str) -> None:
    """Strip ``prefix`` from the keys of ``state_dict`` that have it, in place (and from its ``_metadata``'s)."""
    for key in list(state_dict.keys()):
        if key.startswith(prefix):
            state_dict[key[len(prefix):]] = state_dict.pop(key)
    meta = getattr(state_dict, "_metadata", None)
    if meta is not None:
        for key in list(meta.keys()):
            if len(key) == 0:
                continue
            if key == prefix.replace(".", "") or key.startswith(prefix):
                meta[key[len(prefix):]] = meta.pop(key)
