"""Checks on the addresses an operator gives a service, with errors that name the option and the fix.

ZeroMQ takes endpoints with their transport (``tcp://HOST:PORT``, ``ipc://PATH``); a bare ``host:port`` makes it
raise ``Invalid argument`` from deep inside a bind or connect. These checks run first and raise
:class:`~tensorwire.protocol.errors.ConfigurationError` instead, one line the CLI prints as it is. A port another
process holds gets the same treatment (:func:`port_in_use`), for the dispatcher's sockets, the hub and
``tensorwire up``.
"""

from __future__ import annotations

import errno
import ipaddress
import socket

from .errors import ConfigurationError

SCHEMES = ("tcp://", "ipc://", "inproc://")


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (a name or an IP address) is this machine's loopback: ``localhost``, 127.0.0.0/8, ``::1``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_address(address: object, option: str, *, bind: bool = False) -> str:
    """``address`` if it is a ZeroMQ endpoint this project uses (``tcp://HOST:PORT``, ``ipc://PATH``, ``inproc://``);
    ConfigurationError naming ``option`` (e.g. ``--dispatcher``) and the right form otherwise. ``bind``: the address
    is one to listen on (``tcp://HOST:0`` picks a free port), else one to connect to (port 0 is refused)."""
    if not isinstance(address, str) or not address.startswith(SCHEMES):
        hint = f"tcp://{address}" if isinstance(address, str) and address and "://" not in address else None
        raise ConfigurationError(
            f"{option}: {address!r} is not a ZeroMQ address; give tcp://HOST:PORT (or ipc://PATH)"
            + (f", e.g. {hint}" if hint else "")
        )
    if address.startswith("tcp://"):
        host, sep, port = address[len("tcp://") :].rpartition(":")
        low = 0 if bind else 1
        if not sep or not host or not port.isdigit() or not low <= int(port) <= 65535:
            raise ConfigurationError(
                f"{option}: {address!r} needs a host and a port {low}-65535: tcp://HOST:PORT, e.g. tcp://127.0.0.1:5556"
            )
    elif len(address) <= len("ipc://"):
        raise ConfigurationError(f"{option}: {address!r} names no path, e.g. ipc:///run/tensorwire/services.sock")
    return address


def port_in_use(what: str, host: str, port: int | str, option: str) -> ConfigurationError:
    """The error for a port another process holds: ``what`` could not listen on ``host:port``; ``option`` is the
    flag that chooses another port."""
    return ConfigurationError(
        f"{what} cannot listen on {host}:{port}: the port is already in use (another tensorwire cluster, or another "
        f"program: `ss -ltnp | grep :{port}` names it). Stop that process or choose another port with {option} "
        f"(0 picks a free one)"
    )


def is_address_in_use(exc: BaseException) -> bool:
    """True for the bind error of a taken port (``OSError`` or ``zmq.ZMQError`` with ``EADDRINUSE``)."""
    return getattr(exc, "errno", None) == errno.EADDRINUSE


def check_port_free(what: str, host: str, port: int, option: str) -> None:
    """Raise :func:`port_in_use`'s error if nothing can listen on ``host:port`` now (port 0 is always free). A
    check before starting services, so that ``tensorwire up`` fails with one line instead of a service's log."""
    if not port:
        return
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers do: TIME_WAIT is no conflict
        try:
            s.bind((host.strip("[]"), port))
        except OSError as e:
            if is_address_in_use(e):
                raise port_in_use(what, host, port, option) from None
            raise ConfigurationError(f"{what} cannot listen on {host}:{port}: {e.strerror}") from None
