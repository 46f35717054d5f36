"""Capabilities for direct channels: what a worker checks by itself before it runs a client's message.

The dispatcher is the control plane (``../shared/DESIGN.md``, "Control plane and data plane"). It grants a
session a direct channel to a worker: the worker's address and a *capability*, a MAC over the session's public
id, the worker's device, the dispatcher's epoch and an expiry, keyed by a secret derived from the worker's
per-process instance secret (which only that worker and the dispatcher know: the worker registered with it).
The worker checks a capability with no round trip to the dispatcher:

- bound to the session: the session id the worker acts for is read out of the capability itself, so a
  capability names exactly one session's tensors, and altering the id breaks the MAC;
- bound to the worker instance: a restarted worker has a new instance secret and refuses the old capabilities
  (and a capability for one device is refused by every other, which has other secrets);
- bound to the dispatcher's epoch: a worker that registered with a restarted dispatcher refuses the old one's;
- bound to an expiry (wall clock seconds): the client asks the dispatcher for a fresh one before it runs out.

Layout: ``sid (8 bytes) | expires (8, big endian) | HMAC-SHA256 (32)``.

Workers also talk to each other on their direct channels (a tensor moved between devices goes from the source
worker to the destination's, not through the dispatcher). Those messages are signed with a key derived from the
service credential, which every service of the cluster holds and no client does (:func:`peer_key`,
:func:`peer_mac`): a client cannot pass a message off as another worker's.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time

import msgpack

from .errors import Unauthorized

#: where a worker listens for direct channels (its ``--direct-address``)
DIRECT_ADDRESS_ENV = "TENSORWIRE_DIRECT_ADDRESS"
SID_BYTES = 8
CAP_BYTES = SID_BYTES + 8 + 32
#: how long a granted channel stays valid (``TENSORWIRE_CHANNEL_TTL_S``, default 600 s)
CHANNEL_TTL_S = float(os.environ.get("TENSORWIRE_CHANNEL_TTL_S", "600"))
_LABEL = b"tensorwire direct channel v1"


def channel_key(instance: str) -> bytes:
    """The key a worker's capabilities are signed with, derived from its instance secret (never the secret itself,
    which also signs its heartbeats)."""
    return hmac.new(instance.encode(), _LABEL, hashlib.sha256).digest()


def worker_id(instance: str) -> str:
    """A public name of one worker process (a restart changes it): what a client may show and ask about."""
    return hashlib.sha256(b"wid:" + instance.encode()).hexdigest()[:16]


def _mac(key: bytes, sid: bytes, device: str, epoch: str, expires: bytes) -> bytes:
    msg = b"\0".join((sid, device.encode(), str(epoch).encode(), expires))
    return hmac.new(key, msg, hashlib.sha256).digest()


def issue(key: bytes, sid: bytes, device: str, epoch: str, expires: float) -> bytes:
    """A capability for session ``sid`` on ``device``'s worker (whose :func:`channel_key` is ``key``)."""
    if len(sid) != SID_BYTES:
        raise ValueError("a session id is 8 bytes")
    exp = int(expires).to_bytes(8, "big")
    return sid + exp + _mac(key, sid, device, epoch, exp)


def verify(key: bytes, cap, device: str, epoch: str | None, now: float | None = None) -> bytes:
    """The session id a capability acts for; raises :class:`Unauthorized` for anything but a valid, unexpired
    capability issued for this worker instance, device and dispatcher epoch."""
    if type(cap) is not bytes or len(cap) != CAP_BYTES:
        raise Unauthorized("a direct message needs the capability its channel was granted with ('cap')")
    if epoch is None:
        raise Unauthorized(f"the worker for {device} is not registered with a dispatcher: it takes no direct work")
    sid, exp, mac = cap[:SID_BYTES], cap[SID_BYTES:SID_BYTES + 8], cap[SID_BYTES + 8:]
    if not hmac.compare_digest(mac, _mac(key, sid, device, epoch, exp)):
        raise Unauthorized(f"the capability is not valid for the worker of {device} (issued for another worker, "
                           f"session or dispatcher, or the worker restarted): ask the dispatcher for a new channel")
    if int.from_bytes(exp, "big") < (time.time() if now is None else now):
        raise Unauthorized(f"the capability for {device} has expired: ask the dispatcher for a new channel")
    return sid


def peer_key(service_token: str) -> bytes:
    """The key workers sign the messages they send each other with (derived from the service credential)."""
    return hmac.new(service_token.encode(), b"tensorwire peer v1", hashlib.sha256).digest()


def peer_mac(key: bytes, *fields) -> bytes:
    """The MAC of a worker-to-worker message over its ``fields`` (ints, strings, bytes, lists of them)."""
    return hmac.new(key, msgpack.packb(list(fields), use_bin_type=True), hashlib.sha256).digest()


def check_peer(key: bytes | None, mac, *fields) -> None:
    """Raise :class:`Unauthorized` unless ``mac`` is :func:`peer_mac` of ``fields`` under ``key``."""
    if key is None or type(mac) is not bytes or not hmac.compare_digest(mac, peer_mac(key, *fields)):
        raise Unauthorized("a worker-to-worker message without a valid signature")
