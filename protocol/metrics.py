"""The Prometheus endpoint the dispatcher and the hub serve (opt-in: ``--metrics-port``).

Each service builds its samples with a collector of its own and serves them from a registry of its own (never
``prometheus_client``'s global one), so several services in one process (tests, an embedded cluster) do not clash.
The endpoint binds 127.0.0.1 unless ``--metrics-host`` says otherwise.

The endpoint is bounded (issue 34): one request per connection (HTTP/1.0), which must arrive whole within
``TENSORWIRE_METRICS_TIMEOUT`` seconds of the connection opening (a reaper thread closes it otherwise, however
slowly it trickles bytes), and at most ``TENSORWIRE_METRICS_MAX_CONNECTIONS`` connections open at once: a new one
beyond the cap closes the oldest. Idle or half-open connections therefore cost at most the cap's threads, for at
most the timeout, and never stop a scrape from being answered.

``prometheus_client`` (~0.1 s to import) is loaded by :func:`prometheus` when metrics are first served or read, the
one place every module that uses it (the hub's and the dispatcher's collectors, the dashboard's reader) gets it from.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: seconds a metrics connection may take to deliver its request (TENSORWIRE_METRICS_TIMEOUT)
METRICS_TIMEOUT_S = float(os.environ.get("TENSORWIRE_METRICS_TIMEOUT", "10"))
#: metrics connections open at once; a new one beyond the cap closes the oldest (TENSORWIRE_METRICS_MAX_CONNECTIONS)
METRICS_MAX_CONNECTIONS = int(os.environ.get("TENSORWIRE_METRICS_MAX_CONNECTIONS", "32"))


def prometheus():
    """``prometheus_client``, with its ``core`` (the metric families collectors yield) and ``parser`` (the text format
    read back) modules, imported on first use: only where metrics are served or read."""
    # lazy: prometheus_client (~0.1 s), the dispatcher's and hub's --metrics-port and the dashboard's hub figures only
    import prometheus_client.core
    import prometheus_client.parser

    return prometheus_client


class _MetricsHandler(BaseHTTPRequestHandler):
    """``GET`` (any path) answers the server's registry in Prometheus's text format; nothing is logged."""

    server: MetricsServer
    protocol_version = "HTTP/1.0"  # one request per connection: nothing is kept alive

    def setup(self) -> None:
        self.timeout = self.server.timeout_s  # (per read or write; the reaper bounds the whole request)
        super().setup()

    def do_GET(self) -> None:  # noqa: N802
        prom = prometheus()
        body = prom.generate_latest(self.server.registry)
        self.send_response(200)
        self.send_header("Content-Type", prom.CONTENT_TYPE_LATEST)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:
        """Log nothing (a scrape every few seconds would flood the service's log)."""


class MetricsServer(ThreadingHTTPServer):
    """A ``ThreadingHTTPServer`` for one registry, with a deadline per connection and a cap on connections.

    Every connection must deliver its request within ``timeout_s`` of being accepted, or a reaper thread shuts it
    down; at most ``max_connections`` are open, and accepting one more shuts down the oldest. Threads are daemons.
    """

    daemon_threads = True
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], registry, *, timeout_s: float = METRICS_TIMEOUT_S,
                 max_connections: int = METRICS_MAX_CONNECTIONS):
        if timeout_s <= 0 or max_connections < 1:
            raise ValueError("the metrics timeout and connection cap must be positive")
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.registry = registry
        self.timeout_s = timeout_s
        self.max_connections = max_connections
        self._conns: dict[socket.socket, float] = {}  # open connection -> its deadline (monotonic)
        self._lock = threading.Lock()
        self._closing = threading.Event()
        super().__init__(address, _MetricsHandler)
        threading.Thread(target=self._reap, name="tw-metrics-reaper", daemon=True).start()

    def connection_count(self) -> int:
        """Connections open now."""
        with self._lock:
            return len(self._conns)

    @staticmethod
    def _drop(sock: socket.socket) -> None:
        """End the connection: its thread's blocked read or write returns, and the thread ends."""
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

    def _reap(self) -> None:
        """Shut down the connections past their deadline (until the server closes)."""
        tick = min(0.5, self.timeout_s / 4)
        while not self._closing.wait(tick):
            now = time.monotonic()
            with self._lock:
                late = [s for s, d in self._conns.items() if d <= now]
                for sock in late:
                    del self._conns[sock]
                    self._drop(sock)

    def process_request(self, request, client_address) -> None:
        with self._lock:
            while len(self._conns) >= self.max_connections:  # the oldest goes (dicts keep insertion order)
                oldest = next(iter(self._conns))
                del self._conns[oldest]
                self._drop(oldest)
            self._conns[request] = time.monotonic() + self.timeout_s
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._forget(request)
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._forget(request)

    def _forget(self, sock: socket.socket) -> None:
        with self._lock:
            self._conns.pop(sock, None)

    def handle_error(self, request, client_address) -> None:
        """A connection that timed out or was cut off: nothing to report."""

    def server_close(self) -> None:
        self._closing.set()
        super().server_close()

    def shutdown(self) -> None:
        """Stop serving and close the listening socket (open connections end at their deadline or sooner)."""
        super().shutdown()
        self.server_close()


def serve_metrics(collector, host: str, port: int):
    """Serve ``collector`` in Prometheus's text format at ``http://host:port/metrics`` from a thread of its own, with
    a registry of its own. Returns ``(server, url)``; ``server.shutdown()`` stops it."""
    registry = prometheus().CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return serve_registry(registry, host, port)


def serve_registry(registry, host: str, port: int):
    """Serve ``registry`` at ``http://host:port/metrics`` from a daemon thread (a :class:`MetricsServer`); returns
    ``(server, url)``."""
    server = MetricsServer((host, port), registry)
    threading.Thread(target=server.serve_forever, name="tw-metrics", daemon=True).start()
    h, p = server.server_address[:2]
    if ":" in str(h):
        h = f"[{h}]"
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
