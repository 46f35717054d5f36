"""``tensorwire dashboard``: serve the page on uvicorn, loopback unless told otherwise.

It reads the cluster as an admin session, so it needs the admin token (``--admin-token-file`` or
``$TENSORWIRE_ADMIN_TOKEN``); the client token (``--token-file`` or ``$TENSORWIRE_TOKEN``), when the cluster has
one, is what session links are keyed with. It prints ``TENSORWIRE-READY {"service": "dashboard", "url": ...}`` once
it serves (``LocalCluster(dashboard=True)`` waits for that line).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket

from tensorwire.protocol.credentials import ADMIN_TOKEN_ENV, CLIENT_TOKEN_ENV, resolve_token
from tensorwire.protocol.errors import TensorwireError, Unauthorized

from . import missing
from .auth import Gate, is_loopback
from .source import ClusterSource

DEFAULT_PORT = 8787


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise TensorwireError(f"the dashboard cannot listen on {host}:{port}: {e.strerror}; pick another --port "
                              "(0 picks a free one)") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def main(argv: list[str] | None = None) -> int:
    """The ``tensorwire dashboard`` command."""
    p = argparse.ArgumentParser(prog="tensorwire dashboard", description=(
        "Serve the cluster's live dashboard (devices, workers, sessions, task stream, compiles, collectives, hub) "
        "in a browser. Loopback by default; beyond loopback every viewer presents the admin token or a session "
        "link."))
    p.add_argument("--address", default=os.environ.get("TENSORWIRE_ADDRESS", "tcp://127.0.0.1:5555"),
                   help="the dispatcher's client address")
    p.add_argument("--admin-token-file", default=None,
                   help="file holding the admin token (default $TENSORWIRE_ADMIN_TOKEN); required")
    p.add_argument("--token-file", default=None,
                   help="file holding the client token, which session links are keyed with (default "
                        "$TENSORWIRE_TOKEN)")
    p.add_argument("--keys", default=None, help="CURVE keys directory (default $TENSORWIRE_KEYS)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 picks a free one)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between polls of the cluster (default 1)")
    p.add_argument("--hub-metrics", default=None, metavar="URL",
                   help="the hub's Prometheus endpoint, for its downloads (hub --metrics-port)")
    args = p.parse_args(argv)
    why = missing()
    if why:
        raise TensorwireError(why)
    if not 0 < args.interval <= 1.0:
        p.error("--interval must be more than 0 and at most 1 second (the page is live)")
    admin = resolve_token(ADMIN_TOKEN_ENV, args.admin_token_file)
    if not admin:
        raise Unauthorized("the dashboard reads the cluster as the admin: give --admin-token-file (tensorwire up "
                           "prints where it wrote it) or set TENSORWIRE_ADMIN_TOKEN")
    client = resolve_token(CLIENT_TOKEN_ENV, args.token_file)
    from .app import create_app, serve  # lazy: Starlette and uvicorn, the optional [dashboard] extra (see missing)

    sock = _bind(args.host, args.port)
    port = sock.getsockname()[1]
    shown = f"[{args.host}]" if ":" in args.host else args.host
    url = f"http://{shown}:{port}"
    source = ClusterSource(args.address, admin, keys=args.keys, interval=args.interval,
                           hub_metrics_url=args.hub_metrics).start()
    try:
        gate = Gate(admin, client, is_loopback(args.host))
        asyncio.run(serve(create_app(source, gate, url=url), sock, url))
    except KeyboardInterrupt:
        pass
    finally:
        source.close()
        sock.close()
    return 0
