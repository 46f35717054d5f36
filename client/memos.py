"""Bounded memos of the client's recording shortcuts (a view step made once for its shape and bounds, a movement
method's checked arguments): made once, read many times, emptied when full.

A memo's entries live as long as the memo keeps them, and those that are containers (a view step and its lists) are
walked by every collection of the cyclic collector's generation they sit in. An entry nobody asks for again costs
that and saves nothing: a loader of random offsets (``torch.randint`` bounds, Karpathy's ``get_batch``) never takes a
window of the same rows twice. :func:`remember_again` keeps only what was asked for before, as a TinyLFU cache's
doorkeeper admits an entry on its second sighting: bigram.py's evaluation batch spent ~90 us of ~1.1 ms in the
collector walking 16,384 kept steps of offsets never seen again (~25 us now), while a small corpus's few thousand
offsets, taken again and again, are kept and found.
"""

from __future__ import annotations

#: entries a memo keeps unless its caller says otherwise (:func:`remember`)
MAX_REMEMBERED = 4096


def remember(memo: dict, key, value, limit: int = MAX_REMEMBERED):
    """Keep ``value`` under ``key`` in ``memo``, emptied when it holds ``limit`` entries (:data:`MAX_REMEMBERED`
    unless told); returns ``value``."""
    if len(memo) >= limit:
        memo.clear()
    memo[key] = value
    return value


def remember_again(memo: dict, seen: dict, key, value, limit: int = MAX_REMEMBERED):
    """:func:`remember` ``value`` under ``key`` when ``key`` was asked for before (it is in ``seen``, a dict of the
    keys looked up and not kept, emptied when it holds ``limit``), else only note ``key`` in ``seen``; returns
    ``value``. ``seen`` holds keys alone (ints, tuples of ints: nothing the collector keeps walking)."""
    if key in seen:
        return remember(memo, key, value, limit)
    if len(seen) >= limit:
        seen.clear()
    seen[key] = None
    return value
