"""The dispatcher: the control plane, a broker in the manner of ZeroMQ's Majordomo pattern.

Two ROUTER sockets: one for clients, one for services (device workers, autograd, collectives).
Services register by name and exchange heartbeats; the dispatcher notices a dead one and tells the
sessions it affected. Every client message is checked (protocol version, credentials, structure,
handle ownership) before anything runs; a bad message gets a ``ProtocolError`` reply and the
dispatcher goes on serving everyone else.

Handles are namespaced by session: the dispatcher maps (session, client id) to the device that
holds it, and workers keep each session's buffers apart, so one session can never name another's
tensor.

Trust (docs/security.md): a session is a secret the dispatcher issues at ``hello`` (``welcome``'s
``key``: an 8-byte public id and a 32-byte secret); every later client message carries it as ``k``
and is refused without it, whatever socket it comes from: a routing id is only where answers go.
Services register with the service credential, which clients never hold; a name (a device) is
served by one live service at a time. With a keys directory, both sockets run CURVE and authorise
client keys and service keys separately (``protocol/curve.py``).

The class is put together from parts that each do one job (issue 30): ``broker`` (sockets, the loop, services and
their liveness), ``sessions`` (hello, keys, leases, grants of direct channels, forwarding to named services),
``routing`` (the relay's batches and answers), ``coordination`` (collectives) and ``gathers`` (stats, profiles).
Each socket dispatches through a handler table keyed by the message kinds of ``protocol.messages``.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path

import zmq

from tensorwire.protocol.addresses import check_address
from tensorwire.protocol.credentials import (
    ADMIN_TOKEN_ENV,
    CLIENT_TOKEN_ENV,
    new_token,
    resolve_token,
    service_token,
    write_token_file,
)
from tensorwire.protocol.curve import CLIENTS, SERVICES, apply_server, is_local_address, keys_dir, start_authenticator
from tensorwire.protocol.errors import (
    ConfigurationError,
    Unauthorized,
)
from tensorwire.protocol.liveness import set_zmq_heartbeats
from tensorwire.protocol.logs import configure as configure_logging
from tensorwire.protocol.metrics import add_metrics_args
from tensorwire.protocol.ops import load_plugin_ops
from tensorwire.protocol.service import (
    profiled,
    stop_event_on_signals,
    tune_gc,
)
from tensorwire.protocol.wire import MAX_MESSAGE

from .answers import RECV_HWM, SERVICE_HWM, Answers, bound_socket
from .broker import Broker
from .coordination import Collectives
from .gathers import Gathers
from .liveness import Leases, new_epoch
from .routing import Routing
from .sessions import Sessions
from .state import SECRET_BYTES, SID_BYTES, Gather, ServiceInfo, Session
from .telemetry import Telemetry

log = logging.getLogger("tensorwire.dispatcher")
__all__ = ["Dispatcher", "SECRET_BYTES", "SID_BYTES", "ServiceInfo", "Session", "main"]


class Dispatcher(Broker, Sessions, Routing, Collectives, Gathers):
    """The broker process. ``serve()`` runs until ``stop`` is set."""

    def __init__(self, client_addr: str, service_addr: str, *, service_token: str, token: str | None = None,
                 admin_token: str | None = None, keys: Path | None = None, insecure: bool = False,
                 hub_url: str | None = None, ctx: zmq.Context | None = None):
        """``service_token``: the credential services register with (required, distinct from the others);
        ``token``: what clients present at hello (None: any local client may open a session); ``admin_token``:
        opens sessions that see the whole cluster in stats; ``keys``: a CURVE keys directory (``tensorwire keys``),
        required unless both addresses are loopback or ipc, or ``insecure`` says to listen in clear anyway."""
        check_address(client_addr, "--address", bind=True)
        check_address(service_addr, "--service-address", bind=True)
        if not service_token:
            raise Unauthorized("the dispatcher needs a service credential: set TENSORWIRE_SERVICE_TOKEN or pass "
                               "--service-token-file FILE (`tensorwire keys --dir DIR` writes DIR/service.token)")
        if service_token in (token, admin_token):
            raise Unauthorized("the service credential must differ from the client and admin tokens")
        exposed = [a for a in (client_addr, service_addr) if not is_local_address(a)]
        if exposed and keys is None and not insecure:
            raise Unauthorized(f"refusing to listen on {', '.join(exposed)} without CURVE keys: tokens and tensors "
                               f"would cross the network in clear. Create keys with `tensorwire keys --dir DIR` and "
                               f"pass --keys DIR (or bind 127.0.0.1 / ipc://, or pass --insecure explicitly)")
        self.ctx = ctx or zmq.Context.instance()
        self.auth = start_authenticator(self.ctx, keys) if keys is not None else None
        self.clients = self.ctx.socket(zmq.ROUTER)
        self.services = self.ctx.socket(zmq.ROUTER)
        for s, domain in ((self.clients, CLIENTS), (self.services, SERVICES)):
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
            # no ROUTER_HANDOVER: a peer claiming a connected peer's routing id is refused, not handed its traffic
            if keys is not None:
                apply_server(s, keys, domain)
            set_zmq_heartbeats(s)
            try:  # a dead peer is noticed at once where libzmq has this (draft) option; heartbeats otherwise
                s.setsockopt(zmq.ROUTER_NOTIFY, zmq.NOTIFY_DISCONNECT)
            except (zmq.ZMQError, AttributeError):
                log.info("no ZMQ_ROUTER_NOTIFY in libzmq %s: dead clients are found by their leases, dead "
                         "services by their heartbeats", zmq.zmq_version())
        bound_socket(self.clients)  # what a client that does not read may cost (dispatcher/answers.py)
        self.services.setsockopt(zmq.RCVHWM, RECV_HWM)  # a worker's relayed answers wait in the worker, not here
        # what goes to a service is never dropped (a ROUTER drops a message to a peer past its send high-water mark,
        # silently): a worker whose main thread is behind (a long queue, a loaded host) lost relayed batches, and its
        # session's next read of their outputs failed with NotFound (see dispatcher/answers.py, "Messages")
        self.services.setsockopt(zmq.SNDHWM, SERVICE_HWM)
        self.answers = Answers(self.clients, "the dispatcher")
        try:
            self.client_addr = self._bind(self.clients, client_addr, "--address")
            self.service_addr = self._bind(self.services, service_addr, "--service-address")
        except ConfigurationError:
            self.clients.close(0)
            self.services.close(0)
            if self.auth is not None:
                self.auth.stop()
            raise
        self.token = token
        self.admin_token = admin_token
        self.service_token = service_token
        self.hub_url = hub_url
        self.sessions: dict[bytes, Session] = {}  # public id -> session
        self.by_ident: dict[bytes, bytes] = {}  # routing id -> the public id of the session it opened last
        self.svc_by_ident: dict[bytes, ServiceInfo] = {}
        self.workers: dict[str, ServiceInfo] = {}  # device -> worker
        self.named: dict[str, ServiceInfo] = {}  # service name -> service (autograd, collectives)
        self.xroutes: dict[int, tuple[bytes, str, str]] = {}  # transfer key -> (session, src, dst)
        self.next_x = 1
        self.gathers: dict[int, Gather] = {}
        self.next_gather = 1
        self.telemetry = Telemetry()
        self.metrics_server = None
        self.metrics_url: str | None = None
        self._next_poll = 0.0
        self.forwards: dict[int, tuple] = {}  # service request id -> (session, client seq, service name)
        self.coll_ranks: dict[str, ServiceInfo] = {}  # device -> the collectives rank serving it
        self.coll_pending: dict[int, dict] = {}  # collective key -> {"all": devices, "devices": still waiting}
        # collectives that failed before every part was ready -> (their devices, the error): a part that starts
        # after the failure is answered with it (bounded: the oldest are forgotten first)
        self.coll_failed: dict[int, tuple[set, dict]] = {}
        self.next_coll = 1
        self.next_fwd = 1
        self.started = time.time()
        self.epoch = new_epoch()  # tells a worker whether its buffers belong to this dispatcher's sessions
        self.leases = Leases()
        self.caught_up = time.time()  # the last time the client socket was found empty (Leases.expired)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tensorwire dispatcher", description="Run the dispatcher.")
    p.add_argument("--address", default=os.environ.get("TENSORWIRE_BIND", "tcp://127.0.0.1:5555"),
                   help="client address to bind (port 0 picks a free port)")
    p.add_argument("--service-address", default="tcp://127.0.0.1:5556",
                   help="address services (workers, autograd, collectives) connect to")
    p.add_argument("--token-file", default=None,
                   help="file holding the token clients must present (default $TENSORWIRE_TOKEN; none: any client "
                        "that reaches the socket may open a session)")
    p.add_argument("--admin-token-file", default=None,
                   help="file holding the admin token: sessions opened with it see every session in stats "
                        "(default $TENSORWIRE_ADMIN_TOKEN)")
    p.add_argument("--service-token-file", default=None,
                   help="file holding the credential services register with, created with a fresh token if "
                        "missing (default $TENSORWIRE_SERVICE_TOKEN, else KEYS/service.token)")
    p.add_argument("--keys", default=None,
                   help="CURVE keys directory from `tensorwire keys` (default $TENSORWIRE_KEYS): encrypts both "
                        "sockets and authorises client and service keys separately")
    p.add_argument("--insecure", action="store_true",
                   help="listen on a non-loopback address without CURVE (tokens and tensors travel in clear)")
    p.add_argument("--hub-url", default=os.environ.get("TENSORWIRE_HUB_URL"), help="model hub URL for sessions")
    add_metrics_args(p)
    args = p.parse_args(argv)
    configure_logging()
    keys = keys_dir(args.keys)
    if args.service_token_file and not os.path.exists(args.service_token_file):
        write_token_file(args.service_token_file, new_token())
    load_plugin_ops()  # custom ops of installed plugins, so batches using them validate
    tune_gc()
    d = Dispatcher(args.address, args.service_address, service_token=service_token(args.service_token_file, keys),
                   token=resolve_token(CLIENT_TOKEN_ENV, args.token_file),
                   admin_token=resolve_token(ADMIN_TOKEN_ENV, args.admin_token_file), keys=keys,
                   insecure=args.insecure, hub_url=args.hub_url)
    if args.metrics_port is not None:
        d.serve_metrics(args.metrics_port, args.metrics_host)
    profiled("dispatcher", d.serve, stop_event_on_signals())
    return 0
