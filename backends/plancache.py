"""The worker's cache of compiled plans, bounded by bytes, least recently used evicted first.

A compiled plan (its steps, and the runners built for it) costs memory in proportion to its steps: about 3-5 KB a
step measured with tracemalloc on the CPU backend (``PLAN_STEP_BYTES`` is the estimate used); a plan the device
interprets (its steps and a straight-line runner: ``Plan.interpreted``) about 0.6 KB a step and node
(``INTERPRETED_STEP_BYTES``; a loop whose batches change shape keeps one such plan a shape, and with the compiled
estimate a session's half of the cache held 13 of a char-level transformer's ~300, each evicted plan a ``need_plan``
and a new plan on its next use). The cache holds
at most ``TENSORWIRE_PLAN_CACHE_BYTES`` (default 256 MiB) for the whole worker and at most half of that for one
session, so a session that makes endless distinct batches evicts its own plans before anyone else's.

An evicted plan is not an error: the worker asks the dispatcher for the fragment again (``need_plan``), which
keeps every plan's fragment for the session, recompiles it (the kernel cache on disk makes that cheap) and runs
the batch. The client's contract does not change.
"""

from __future__ import annotations

import os
from collections import OrderedDict

ENV = "TENSORWIRE_PLAN_CACHE_BYTES"
DEFAULT_BYTES = 256 << 20
PLAN_STEP_BYTES = 8 << 10  # a step, and its share of a runner or two
# a step (or node) of a plan run on the step-by-step kernels, and its share of its runners: tracemalloc measured 618
# bytes freed a step and node when a char-level transformer's 219 cached plans were dropped (1 KiB, the estimate
# before, kept ~100 of its ~150 shapes' plans in a session's half of the cache: it evicted and rebuilt ~70 a run)
INTERPRETED_STEP_BYTES = 640
MAX_PLANS_PER_SESSION = 4096


def plan_bytes(plan) -> int:
    """The estimated memory of a compiled plan: interpreted (``plan.interpreted``, which a plan compiled later in
    the background loses: the worker puts it again) or with kernels of its own."""
    per = INTERPRETED_STEP_BYTES if getattr(plan, "interpreted", False) else PLAN_STEP_BYTES
    return (len(plan.program.steps) + len(plan.node_slot) + 1) * per


class PlanCache:
    """Compiled plans by (session, plan number), bounded by estimated bytes overall and per session."""

    def __init__(self, max_bytes: int | None = None, session_bytes: int | None = None):
        self.max_bytes = int(os.environ.get(ENV, DEFAULT_BYTES)) if max_bytes is None else int(max_bytes)
        self.session_bytes = self.max_bytes // 2 if session_bytes is None else int(session_bytes)
        self.lru: OrderedDict = OrderedDict()  # (sid, plan no) -> (plan, bytes), oldest first
        self.by_session: dict[bytes, OrderedDict] = {}  # sid -> {plan no: bytes}, least recently used first
        self.session_used: dict[bytes, int] = {}  # sid -> bytes of its plans
        self.used = 0
        self.evictions = 0

    def get(self, sid, no):
        """The plan, or None (never compiled here, or evicted); marks it recently used."""
        entry = self.lru.get((sid, no))
        if entry is None:
            return None
        self.lru.move_to_end((sid, no))
        self.by_session[sid].move_to_end(no)
        return entry[0]

    def put(self, sid, no, plan) -> None:
        self.drop(sid, no)
        n = plan_bytes(plan)
        mine = self.by_session.setdefault(sid, OrderedDict())
        # the session's own oldest plans go first, then everyone's oldest
        while mine and (self.session_used.get(sid, 0) + n > self.session_bytes or len(mine) >= MAX_PLANS_PER_SESSION):
            self._evict((sid, next(iter(mine))))
        while self.lru and self.used + n > self.max_bytes:
            self._evict(next(iter(self.lru)))
        self.lru[(sid, no)] = (plan, n)
        mine[no] = n
        self.used += n
        self.session_used[sid] = self.session_used.get(sid, 0) + n

    def _evict(self, key) -> None:
        self.evictions += 1
        self.drop(*key)

    def drop(self, sid, no) -> None:
        entry = self.lru.pop((sid, no), None)
        if entry is None:
            return
        self.used -= entry[1]
        mine = self.by_session.get(sid)
        if mine is not None:
            mine.pop(no, None)
            self.session_used[sid] -= entry[1]
            if not mine:
                del self.by_session[sid]
                del self.session_used[sid]

    def drop_session(self, sid) -> None:
        for no in list(self.by_session.get(sid, ())):
            self.drop(sid, no)

    def session_plans(self, sid) -> int:
        return len(self.by_session.get(sid, ()))
