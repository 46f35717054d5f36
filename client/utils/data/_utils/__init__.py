"""``tw.utils.data._utils``: the collate functions, where torch keeps them (``_utils.collate``)."""

from . import collate

__all__ = ["collate"]
