"""``tensorwire dashboard``: the cluster in a browser, live.

A small Starlette app on uvicorn (``pip install 'tensorwire[dashboard]'``) that reads what ``tensorwire status``
reads, the dispatcher's ``stats`` answer (as an admin session), about once a second, and pushes each viewer what it
may see over server-sent events: devices and their memory, workers' heartbeats, sessions and their work, a task
stream of recent batches per device coloured by session, plan compiles and the plan cache, collectives in flight and
the hub's downloads. Charts are SVG drawn on the server; the page needs no network beyond the dashboard.

Modules: :mod:`.auth` (who is looking: the admin, or one session), :mod:`.source` (polling the dispatcher and
keeping a little history), :mod:`.shaping` (what one viewer sees, and the trace export), :mod:`.svg` (the charts),
:mod:`.app` (the routes) and :mod:`.server` (the command and uvicorn).
"""

import importlib.util

from .auth import Viewer, session_key, session_link

#: the packages the dashboard serves with (the optional [dashboard] extra)
WEB_STACK = ("starlette", "uvicorn")


def missing() -> str | None:
    """What is missing to serve the dashboard (its web stack, the optional [dashboard] extra), or None. Looks the
    packages up without importing them (uvicorn takes ~0.4 s; ``LocalCluster`` asks before it starts a dashboard,
    without loading :mod:`.server`, which loads the client's session)."""
    absent = [name for name in WEB_STACK if importlib.util.find_spec(name) is None]
    if absent:
        return (f"the dashboard needs Starlette and uvicorn: pip install 'tensorwire[dashboard]' "
                f"({', '.join(absent)} not installed)")
    return None


__all__ = ["Viewer", "missing", "session_key", "session_link"]
