"""The Prometheus endpoint the dispatcher and the hub serve (opt-in: ``--metrics-port``).

Each service builds its samples with a collector of its own and serves them from a registry of its own (never
``prometheus_client``'s global one), so several services in one process (tests, an embedded cluster) do not clash.
The endpoint binds 127.0.0.1 unless ``--metrics-host`` says otherwise.
"""

from __future__ import annotations


def serve_metrics(collector, host: str, port: int):
    """Serve ``collector`` in Prometheus's text format at ``http://host:port/metrics`` from a thread of its own, with
    a registry of its own. Returns ``(server, url)``; ``server.shutdown()`` stops it."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return serve_registry(registry, host, port)


def serve_registry(registry, host: str, port: int):
    """Serve ``registry`` at ``http://host:port/metrics`` from a thread; returns ``(server, url)``."""
    from prometheus_client import start_http_server

    server, _thread = start_http_server(port, addr=host, registry=registry)
    h, p = server.server_address[:2]
    return server, f"http://{h}:{p}/metrics"


def add_metrics_args(parser) -> None:
    """``--metrics-port`` and ``--metrics-host``, for the services that serve metrics (dispatcher, hub)."""
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus metrics at http://HOST:PORT/metrics (off by default; 0 picks a free "
        "port, printed in the ready line)",
    )
    parser.add_argument(
        "--metrics-host", default="127.0.0.1", help="interface the metrics endpoint binds (default 127.0.0.1)"
    )
