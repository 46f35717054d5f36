"""Flattening arguments and results into leaves and back (tuples, lists, dicts and namedtuples nest)."""

from __future__ import annotations

from typing import Any

LEAF = None


def flatten(x, leaves: list) -> Any:
    """Append ``x``'s leaves to ``leaves``; returns its structure (``None`` for a leaf)."""
    if isinstance(x, tuple):
        if hasattr(x, "_fields"):
            return ("namedtuple", type(x), tuple(flatten(v, leaves) for v in x))
        return ("tuple", tuple(flatten(v, leaves) for v in x))
    if isinstance(x, list):
        return ("list", tuple(flatten(v, leaves) for v in x))
    if isinstance(x, dict):
        return ("dict", tuple(x.keys()), tuple(flatten(v, leaves) for v in x.values()))
    leaves.append(x)
    return LEAF


def unflatten(spec, leaves) -> Any:
    """The inverse of :func:`flatten`: ``leaves`` is an iterator over the leaves in order."""
    if spec is LEAF:
        return next(leaves)
    kind = spec[0]
    if kind == "tuple":
        return tuple(unflatten(s, leaves) for s in spec[1])
    if kind == "list":
        return [unflatten(s, leaves) for s in spec[1]]
    if kind == "namedtuple":
        return spec[1](*(unflatten(s, leaves) for s in spec[2]))
    return dict(zip(spec[1], (unflatten(s, leaves) for s in spec[2])))
