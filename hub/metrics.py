"""The hub's Prometheus metrics (opt-in: ``tensorwire hub --metrics-port PORT``): requests by method, route and
status, bytes sent and received by route, request latency, open connections.

Counters are ``prometheus_client`` metrics in a registry of this server's own (several hubs in one process do not
clash); the request handler threads update them (they are thread-safe).
"""

from __future__ import annotations

from tensorwire.protocol.metrics import prometheus, serve_registry

#: route classes the metrics are labelled with (a label per URL would be unbounded)
ROUTES = ("resolve", "api/models", "api/tw", "other")


def route_of(path: str) -> str:
    """The route class of a request path: file downloads (``resolve``), the read API, the push API, or other."""
    seg = path.split("?", 1)[0].split("/")[1:]
    if seg[:2] == ["api", "models"]:
        return "api/models"
    if seg[:2] == ["api", "tw"]:
        return "api/tw"
    if len(seg) >= 4 and seg[2] == "resolve":
        return "resolve"
    return "other"


class HubMetrics:
    """The hub's counters, and the registry the metrics endpoint serves."""

    def __init__(self, server=None):
        prom = prometheus()
        CollectorRegistry, Counter, Gauge, Histogram = prom.CollectorRegistry, prom.Counter, prom.Gauge, prom.Histogram
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "tensorwire_hub_requests",
            "HTTP requests served, by method, route and status",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.bytes_sent = Counter(
            "tensorwire_hub_bytes_sent", "Response body bytes sent, by route", ["route"], registry=self.registry
        )
        self.bytes_received = Counter(
            "tensorwire_hub_bytes_received", "Request body bytes received, by route", ["route"], registry=self.registry
        )
        self.latency = Histogram(
            "tensorwire_hub_request_seconds", "Time to serve a request, by route", ["route"], registry=self.registry
        )
        if server is not None:
            conns = Gauge("tensorwire_hub_connections", "Open HTTP connections", registry=self.registry)
            conns.set_function(server.connection_count)

    def observe(self, method: str, path: str, status: int, sent: int, received: int, seconds: float) -> None:
        """Count one request."""
        route = route_of(path)
        self.requests.labels(method, route, str(status)).inc()
        if sent:
            self.bytes_sent.labels(route).inc(sent)
        if received:
            self.bytes_received.labels(route).inc(received)
        self.latency.labels(route).observe(seconds)

    def serve(self, host: str, port: int) -> tuple[object, str]:
        """Serve the metrics at ``http://host:port/metrics`` from a thread; returns ``(server, url)``."""
        return serve_registry(self.registry, host, port)
