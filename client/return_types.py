"""``tw.return_types``: the named tuples that functions returning several tensors give (``x.max(0)``, ``x.sort()``,
``torch.svd(x)`` ...), as ``torch.return_types``.

Each is a :func:`collections.namedtuple` made by :func:`return_type`: indexing, unpacking and the field names work as
torch's, and its repr is torch's, one field a line::

    torch.return_types.sort(
    values=tensor([1., 2.]),
    indices=tensor([1, 0]))

Every type made is also an attribute of this module under its torch name (``tw.return_types.sort``), so
``isinstance(r, torch.return_types.sort)`` holds and the tuples pickle.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterable


def _repr(self) -> str:
    """torch's repr of a return type: ``torch.return_types.<name>(`` then ``field=repr(value)``, one a line."""
    fields = ",\n".join(f"{name}={value!r}" for name, value in zip(self._fields, self))
    return f"torch.return_types.{type(self).__name__}(\n{fields})"


def return_type(name: str, fields: Iterable[str]) -> type:
    """The named tuple type torch names ``torch.return_types.<name>``, with ``fields``, and torch's repr; bound as this
    module's ``name`` (a name made twice keeps the type made first, so each module that needs it may ask)."""
    existing = globals().get(name)
    fields = tuple(fields)
    if isinstance(existing, type) and getattr(existing, "_fields", None) == fields:
        return existing
    cls = namedtuple(name, fields, module=__name__)
    cls.__repr__ = _repr
    globals()[name] = cls
    return cls


__all__ = ["return_type"]
