"""``tw.utils``: ``tw.utils.data`` (datasets and loaders) and ``tw.utils.checkpoint`` (activation
checkpointing)."""

from . import checkpoint, data

__all__ = ["checkpoint", "data"]
