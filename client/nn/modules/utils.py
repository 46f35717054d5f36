"""``torch.nn.modules.utils``'s names (the classes are ``tensorwire.nn``'s)."""

from __future__ import annotations

from ..tuples import (
    _list_with_default,
    _ntuple,
    _pair,
    _quadruple,
    _reverse_repeat_tuple,
    _single,
    _triple,
    consume_prefix_in_state_dict_if_present,
)

__all__ = [
    "_list_with_default",
    "_ntuple",
    "_pair",
    "_quadruple",
    "_reverse_repeat_tuple",
    "_single",
    "_triple",
    "consume_prefix_in_state_dict_if_present",
]
