"""The dashboard's routes (Starlette): the page, its live feed, a JSON view and the trace export; :func:`serve` runs
them on uvicorn.

* ``/``: the page (``static/index.html``). With credentials in the query (``?token=`` the admin token, or a session
  link's ``?session=&key=``) it sets the viewer's cookie and redirects to ``/`` without them.
* ``/events``: server-sent events, one ``data:`` line of JSON per poll of the cluster (``interval``, a second by
  default): the viewer's shaped view and the charts as SVG.
* ``/api/view``: the same view once, as JSON.
* ``/trace.json``: the viewer's task stream as Chrome trace-event JSON: open it in https://ui.perfetto.dev (no
  upload: Perfetto reads the file in the browser) or ``chrome://tracing``.

Requests without a viewer get 401 with what to present. On a loopback bind the Host header must name loopback (a web
page elsewhere cannot reach the open admin view by DNS rebinding).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from tensorwire.protocol.service import announce_ready

from .auth import COOKIE, Gate, Viewer
from .shaping import shape, trace
from .svg import charts

STATIC = Path(__file__).parent / "static"
HEADERS = {"Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
           "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}
LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "::1", "[::1]"]
UNAUTHORIZED = ("this dashboard needs a credential: open it once with ?token=ADMIN_TOKEN (the cluster's admin token), "
                "or with a session's link (?session=SID&key=KEY: tensorwire.dashboard.session_link)")


def create_app(source, gate: Gate, *, url: str = "", window_s: float = 30.0) -> Starlette:
    """The app over ``source`` (a :class:`~tensorwire.dashboard.source.ClusterSource`, or anything with
    ``snapshot()`` and ``interval``) with viewers admitted by ``gate``; ``url``: where it is served (for the
    session links in the admin's view)."""

    def viewer_of(request: Request) -> Viewer | None:
        return gate.from_cookie(request.cookies.get(COOKIE)) or gate.default()

    def view_for(viewer: Viewer) -> dict | None:
        snap = source.snapshot()
        if snap is None:
            return None
        return shape(snap, viewer, gate.link_secret if viewer.admin else None, url)

    def payload(viewer: Viewer) -> dict | None:
        view = view_for(viewer)
        if view is None:
            return None
        svg = charts(view, window_s)
        view.pop("history")
        return {"view": view, "svg": svg}

    async def page(request: Request) -> Response:
        q = request.query_params
        if any(k in q for k in ("token", "session", "key")):
            viewer = gate.login(q.get("token"), q.get("session"), q.get("key"))
            if viewer is None:
                return PlainTextResponse("the credential in this link is not valid here; " + UNAUTHORIZED, 401,
                                         headers=HEADERS)
            r = RedirectResponse("/", 303, headers=HEADERS)
            r.set_cookie(COOKIE, gate.cookie(viewer), httponly=True, samesite="strict", path="/")
            return r
        if viewer_of(request) is None:
            return PlainTextResponse(UNAUTHORIZED, 401, headers=HEADERS)
        return FileResponse(STATIC / "index.html", headers=HEADERS)

    async def api_view(request: Request) -> Response:
        viewer = viewer_of(request)
        if viewer is None:
            return PlainTextResponse(UNAUTHORIZED, 401, headers=HEADERS)
        return JSONResponse(payload(viewer) or {"view": None}, headers=HEADERS)

    async def trace_json(request: Request) -> Response:
        viewer = viewer_of(request)
        if viewer is None:
            return PlainTextResponse(UNAUTHORIZED, 401, headers=HEADERS)
        view = view_for(viewer) or {"tasks": [], "viewer": {"label": viewer.label}}
        return Response(json.dumps(trace(view)), media_type="application/json",
                        headers={**HEADERS, "Content-Disposition": 'attachment; filename="tensorwire-trace.json"'})

    async def events(request: Request) -> Response:
        viewer = viewer_of(request)
        if viewer is None:
            return PlainTextResponse(UNAUTHORIZED, 401, headers=HEADERS)

        async def stream():
            last = None
            yield "retry: 2000\n\n"
            while not await request.is_disconnected():
                snap = source.snapshot()
                if snap is not None and snap.at != last:
                    last = snap.at
                    yield f"data: {json.dumps(payload(viewer), default=str)}\n\n"
                await asyncio.sleep(min(0.2, source.interval / 4))

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={**HEADERS, "X-Accel-Buffering": "no"})

    middleware = [] if not gate.loopback else [Middleware(TrustedHostMiddleware, allowed_hosts=LOOPBACK_HOSTS)]
    return Starlette(routes=[
        Route("/", page), Route("/events", events), Route("/api/view", api_view), Route("/trace.json", trace_json),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ], middleware=middleware)


async def serve(app: Starlette, sock: socket.socket, url: str) -> None:
    """Serve ``app`` on the listening ``sock`` with uvicorn until stopped; announce ``url`` once it serves."""
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=2,
                                           lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():
        await asyncio.sleep(0.02)
    if server.started:
        announce_ready("dashboard", url=url, pid=os.getpid())
    await task
