"""``tensorwire health``: exit 0 when a service answers, 1 with one line saying why otherwise.

For container healthchecks (``compose.yaml``) and scripts. Three kinds of check:

* ``tensorwire health tcp://HOST:5555``: the dispatcher's client socket answers a ``ping`` (no session is opened,
  no token is needed; with CURVE keys, the client pair is used);
* ``tensorwire health tcp://HOST:5555 --device cpu:0 --service autograd``: also, the dispatcher has a worker for
  each device and each named service registered (a collectives rank registers as ``collectives@DEVICE``). This
  opens a session, so the client token applies (``--token-file`` or ``$TENSORWIRE_TOKEN``);
* ``tensorwire health http://HOST:8700``: the model hub answers HTTP.

The ping lives in :mod:`tensorwire.healthcheck_zmq` (zmq and the wire at its module level), which :func:`main`
imports for a ``tcp://`` target only: the hub's probe loads neither zmq, numpy nor the client's session.
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.error
import urllib.request

from tensorwire.protocol.credentials import CLIENT_TOKEN_ENV, resolve_token
from tensorwire.protocol.errors import ServiceUnavailable, TensorwireError

#: seconds a probe waits for its answer (``--timeout``)
DEFAULT_TIMEOUT_S = 5.0


def check_registered(
    address: str,
    devices: list[str],
    services: list[str],
    *,
    token: str | None = None,
    keys: str | os.PathLike | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> None:
    """Open a session and check that every device has a worker and every named service is registered;
    ServiceUnavailable naming what is missing otherwise."""
    # lazy: the client's session (and the tensor core it imports) loads only for a --device/--service check
    from .session import Session

    s = Session(address, token, timeout=timeout, keys=keys)
    try:
        registered = [*s.devices(), *s.services_at_open]
    finally:
        s.close()
    missing = [x for x in (*devices, *services) if x not in registered]
    if missing:
        raise ServiceUnavailable(
            f"not registered with the dispatcher at {address}: {', '.join(missing)} (registered: "
            f"{', '.join(registered) or 'nothing'})"
        )


def check_hub(url: str, timeout: float = DEFAULT_TIMEOUT_S) -> None:
    """The hub at ``url`` answers its repository listing with 200; ServiceUnavailable otherwise."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/api/models?limit=1", timeout=timeout) as r:
            status = r.status
    except urllib.error.HTTPError as e:
        status = e.code
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise ServiceUnavailable(f"no answer from the hub at {url}: {reason}") from None
    if status != 200:
        raise ServiceUnavailable(f"the hub at {url} answered HTTP {status}")


def main(argv: list[str]) -> int:
    """``tensorwire health TARGET [--device D] [--service NAME] ...``; returns the exit status."""
    p = argparse.ArgumentParser(
        prog="tensorwire health",
        description="Exit 0 when the dispatcher (tcp://HOST:PORT) or the hub (http://HOST:PORT) answers, and every "
        "--device and --service is registered; else print why and exit 1. For container healthchecks.",
    )
    p.add_argument("target", help="the dispatcher's client address (tcp://HOST:5555) or the hub's URL")
    p.add_argument("--device", action="append", default=[], help="require a worker for this device (repeatable)")
    p.add_argument(
        "--service",
        action="append",
        default=[],
        help="require this named service: autograd, collectives@DEVICE (repeatable)",
    )
    p.add_argument("--keys", default=None, help="CURVE keys directory with the client pair (default $TENSORWIRE_KEYS)")
    p.add_argument(
        "--token-file", default=None, help="the client token, for --device/--service (default $TENSORWIRE_TOKEN)"
    )
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds to wait for an answer")
    args = p.parse_args(argv)
    try:
        if args.target.startswith(("http://", "https://")):
            if args.device or args.service:
                p.error("--device and --service ask the dispatcher: give its tcp:// address")
            check_hub(args.target, args.timeout)
        elif args.device or args.service:
            token = resolve_token(CLIENT_TOKEN_ENV, args.token_file)
            check_registered(args.target, args.device, args.service, token=token, keys=args.keys, timeout=args.timeout)
        else:
            # lazy: zmq and the wire (and with them numpy) load for a dispatcher ping only, never for the hub's probe
            from .healthcheck_zmq import ping_dispatcher

            ping_dispatcher(args.target, keys=args.keys, timeout=args.timeout)
    except TensorwireError as e:
        print(f"unhealthy: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(f"healthy: {args.target}" + "".join(f" {x}" for x in (*args.device, *args.service)))
    return 0
