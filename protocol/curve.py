"""Encryption and peer authentication with ZeroMQ's CURVE (pyzmq's ``zmq.auth``, a ZAP handler).

A *keys directory* (``tensorwire keys --dir DIR``) holds everything, one file per role, in pyzmq's certificate
format (``zmq.auth.create_certificates``)::

    DIR/dispatcher.key  DIR/dispatcher.key_secret   the dispatcher's pair (clients and services pin the public key)
    DIR/service.key     DIR/service.key_secret      a pair for services (workers, autograd, collectives)
    DIR/client.key      DIR/client.key_secret       a pair for clients
    DIR/services/*.key                              public keys the dispatcher accepts on its service socket
    DIR/clients/*.key                               public keys the dispatcher accepts on its client socket
    DIR/service.token                               the service credential (see ``credentials``)

Each process reads only what its role needs, so a host gets only those files: the dispatcher
``dispatcher.key_secret``, ``services/``, ``clients/``; a service host ``dispatcher.key``,
``service.key_secret``, ``service.token``; a client ``dispatcher.key`` and ``client.key_secret``. The two
sockets authorise keys separately (ZAP domains ``services`` and ``clients``): a client key cannot even connect to
the service socket.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType
from urllib.parse import urlsplit

import zmq

from .credentials import SERVICE_TOKEN_FILE, new_token, write_token_file
from .errors import Unauthorized

KEYS_ENV = "TENSORWIRE_KEYS"
DISPATCHER = "dispatcher"
CLIENTS = "clients"  # ZAP domain of the client socket, and the folder of the client keys it accepts
SERVICES = "services"  # ZAP domain of the service socket, and the folder of the service keys it accepts
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}


def keys_dir(explicit: str | os.PathLike | None = None) -> Path | None:
    """The keys directory to use: ``explicit``, else ``$TENSORWIRE_KEYS``, else None (no CURVE)."""
    d = explicit or os.environ.get(KEYS_ENV)
    return Path(d) if d else None


def is_local_address(addr: str) -> bool:
    """True for addresses only this host can reach: ``ipc://``, ``inproc://`` and TCP on a loopback address."""
    if addr.startswith(("ipc://", "inproc://")):
        return True
    if not addr.startswith("tcp://"):
        return False
    host = addr[len("tcp://") :].rsplit(":", 1)[0]
    if host.startswith("127."):
        return True
    return host in LOCAL_HOSTS or urlsplit(addr).hostname in LOCAL_HOSTS


def _check_curve() -> None:
    if not zmq.has("curve"):
        raise Unauthorized("this libzmq was built without CURVE support; install pyzmq's wheel (it bundles one)")


def _auth() -> ModuleType:
    """``zmq.auth`` (certificates, ~30 ms to import), loaded on first use: only a process with CURVE keys needs it."""
    import zmq.auth  # lazy: zmq.auth only with CURVE keys; the client imports this module

    return zmq.auth


def _load(path: Path, secret: bool) -> tuple[bytes, bytes | None]:
    if not path.is_file():
        raise Unauthorized(f"CURVE key file {path} is missing (`tensorwire keys --dir DIR` creates the keys)")
    try:
        public, sec = _auth().load_certificate(str(path))
    except Exception as e:  # a malformed certificate file
        raise Unauthorized(f"cannot read the CURVE key file {path}: {e}") from None
    if secret and not sec:
        raise Unauthorized(f"{path} holds no secret key (use the .key_secret file)")
    return public, sec


def create_keys(directory: str | os.PathLike, *, clients=("client",), services=("service",)) -> Path:
    """Create the keys directory (see the module docstring); existing pairs and tokens are kept, missing ones
    made. Secret files are readable by their owner only. Returns the directory."""
    _check_curve()
    auth = _auth()
    d = Path(directory)
    for sub in ("", CLIENTS, SERVICES):
        (d / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    for name, authorised in [(DISPATCHER, None), *((c, CLIENTS) for c in clients), *((s, SERVICES) for s in services)]:
        if not (d / f"{name}.key_secret").is_file():
            auth.create_certificates(str(d), name)
        os.chmod(d / f"{name}.key_secret", 0o600)
        if authorised is not None:
            pub = (d / f"{name}.key").read_bytes()
            (d / authorised / f"{name}.key").write_bytes(pub)
    if not (d / SERVICE_TOKEN_FILE).is_file():
        write_token_file(d / SERVICE_TOKEN_FILE, new_token())
    return d


def start_authenticator(ctx: zmq.Context, keys: Path):
    """Start the ZAP handler that authorises client keys (``keys/clients``) and service keys (``keys/services``)
    separately. Returns it (``.stop()`` it when the sockets close)."""
    from zmq.auth.thread import ThreadAuthenticator  # lazy: the authenticator's thread machinery (~30 ms)

    _check_curve()
    for sub in (CLIENTS, SERVICES):
        if not (keys / sub).is_dir() or not any((keys / sub).glob("*.key")):
            raise Unauthorized(
                f"{keys / sub} holds no public keys: nobody could connect (`tensorwire keys --dir {keys}` creates them)"
            )
    auth = ThreadAuthenticator(ctx)
    auth.start()
    auth.configure_curve(domain=CLIENTS, location=str(keys / CLIENTS))
    auth.configure_curve(domain=SERVICES, location=str(keys / SERVICES))
    return auth


def apply_server(sock: zmq.Socket, keys: Path, domain: str) -> None:
    """Make ``sock`` (before it binds) a CURVE server with the dispatcher's keys, authorised in ``domain``."""
    public, secret = _load(keys / f"{DISPATCHER}.key_secret", secret=True)
    sock.setsockopt(zmq.ZAP_DOMAIN, domain.encode())
    sock.curve_secretkey = secret
    sock.curve_publickey = public
    sock.curve_server = True


def load_key_pair(keys: Path, role: str) -> tuple[bytes, bytes]:
    """The ``role`` key pair (public, secret) from the keys directory (a worker's direct channel serves with its
    ``service`` pair)."""
    _check_curve()
    return _load(keys / f"{role}.key_secret", secret=True)


def apply_pinned(sock: zmq.Socket, server_key: str) -> None:
    """Make ``sock`` (before it connects) a CURVE client of the server whose public key is ``server_key`` (z85), with
    a throwaway key pair of its own: for a worker's direct channel, where the capability (or a worker's signature),
    not the client's key, says who may do what."""
    _check_curve()
    public, secret = zmq.curve_keypair()
    sock.curve_secretkey = secret
    sock.curve_publickey = public
    sock.curve_serverkey = server_key.encode()


def apply_peer(sock: zmq.Socket, keys: Path, role: str) -> None:
    """Make ``sock`` (before it connects) a CURVE client with the ``role`` pair (``client`` or ``service``),
    pinning the dispatcher's public key: a dispatcher with another key cannot complete the handshake."""
    _check_curve()
    server_public, _ = _load(keys / f"{DISPATCHER}.key", secret=False)
    public, secret = _load(keys / f"{role}.key_secret", secret=True)
    sock.curve_secretkey = secret
    sock.curve_publickey = public
    sock.curve_serverkey = server_public
