"""Sessions and credentials: hello, the session key every client message proves, leases, close, the direct
channels' grants, forwarding to named services, and the client socket's handler table
(``protocol.messages.CLIENT``)."""

from __future__ import annotations

import hmac
import logging
import secrets
import time

from tensorwire.protocol import PROTOCOL_VERSION
from tensorwire.protocol.batch_ids import is_int_list
from tensorwire.protocol.capability import CHANNEL_TTL_S, channel_key, issue, worker_id
from tensorwire.protocol.errors import (
    ProtocolError,
    ServiceUnavailable,
    Unauthorized,
    error_to_wire,
)
from tensorwire.protocol.messages import CLIENT, check
from tensorwire.protocol.wire import unpack_header

from .answers import connection_of
from .state import (
    SECRET_BYTES,
    SID_BYTES,
    Session,
    device_sort_key,
    reachable,
)

log = logging.getLogger("tensorwire.dispatcher")
#: what each kind of ``protocol.messages.CLIENT`` does for a session that proved its key (``hello`` and ``ping`` come
#: from anyone: ``_on_client`` takes them itself)
CLIENT_HANDLERS = {
    "lease": "_lease",
    "batch": "_batch",
    "channel": "_channel",
    "close": "_close",
    "cancel": "_cancel",
    "devices": "_devices",
    "stats": "_stats",
    "profile_collect": "_profile_collect",
    "service": "_forward",
}


class Sessions:
    """Who the clients are and what each client message does."""

    def _on_client(self, ident: bytes, hframe, frames) -> None:
        """One message on the client socket: ``hello`` and ``ping`` from anyone, everything else only with a live
        session's key, each kind to its handler (``CLIENT_HANDLERS``); a malformed one gets a typed error."""
        try:
            h = unpack_header(hframe.bytes)
            t = check(CLIENT, h)
        except ProtocolError as e:
            q = h.get("q") if "h" in locals() and isinstance(h, dict) and type(h.get("q")) is int else None
            self._to_client(ident, {"t": "error", "q": q, "error": e.to_wire()})
            return
        q = h.get("q")
        if self.answers.owed(ident):  # errors for answers dropped while its queue was full: it has room now?
            self.answers.flush(ident)
        if t == "hello":
            self._hello(ident, h)
            return
        if t == "ping":
            s = self._session_of(h.get("k")) if h.get("k") is not None else None
            pong = {"t": "pong", "q": q}
            if s is not None:  # a client waiting on a long answer pings: that renews its lease
                s.last_seen = time.time()
                if h.get("w") is not None:  # waiting on direct channels: are those workers still the ones granted?
                    pong["lost"] = self._lost_workers(h["w"])
                progress = {d: w.busy[s.sid] for d, w in self.workers.items() if s.sid in w.busy}
                if progress:  # the session's work on each worker: batches finished, the one running
                    pong["progress"] = progress
            elif isinstance(h.get("k"), bytes):  # a wait of a session that is gone (its lease ran out): say so
                why = self.leases.why_unknown(h["k"][:SID_BYTES]) or "this session is closed or unknown"
                pong["error"] = Unauthorized(why).to_wire()
            self._to_client(ident, pong)
            return
        s = self._session_of(h.get("k"))
        if s is None:  # a routing id is never an identity: without the session's key nothing is touched
            key = h.get("k")
            expired = self.leases.why_unknown(key[:SID_BYTES]) if isinstance(key, bytes) else None
            self._to_client(ident, {"t": "error", "q": q, "error": error_to_wire(Unauthorized(expired or
                "no session: send 'hello' with the protocol version and credentials first, then the session "
                "key it answers with ('k') in every message"))})
            return
        if s.ident != ident or s.conn is None:
            s.conn = connection_of(hframe)  # (what Answers.release shuts down when its lease ends)
        s.ident = ident  # answers go where the key was last proven (a client that reconnected gets them)
        s.last_seen = time.time()
        if h.get("forget") is not None:  # handles the client released on direct channels
            self._forget(s, h["forget"])
        getattr(self, CLIENT_HANDLERS[t])(s, h, frames)

    def _lease(self, s: Session, h: dict, frames) -> None:
        """The client's renewal: proving the key renewed it already; nothing to answer."""

    def _channel(self, s: Session, h: dict, frames) -> None:
        """A fresh grant of direct channels (the last one is about to expire, or a device has a new worker)."""
        self._to_client(s.ident, {"t": "channels", "q": h.get("q"), "channels": self._channels(s)})

    def _close(self, s: Session, h: dict, frames) -> None:
        self._close_session(s)
        if h.get("q") is not None:
            self._to_client(s.ident, {"t": "closed", "q": h["q"]})

    def _cancel(self, s: Session, h: dict, frames) -> None:
        """``tw.cancel()``: the workers stop what the session submitted so far (the client tells the workers it
        reached directly itself)."""
        for dev in s.touched:
            w = self.workers.get(dev)
            if w is not None:
                self._to_service(w, {"t": "cancel", "s": s.sid})

    def _devices(self, s: Session, h: dict, frames) -> None:
        self._to_client(s.ident, {"t": "devices", "q": h.get("q"), "devices": self._device_list()})

    def _session_of(self, key) -> Session | None:
        """The session whose key (public id + secret, from ``welcome``) is ``key``; None for anything else. The
        secret is compared in constant time."""
        if type(key) is not bytes or len(key) != SID_BYTES + SECRET_BYTES:
            return None
        s = self.sessions.get(key[:SID_BYTES])
        if s is None or not hmac.compare_digest(s.secret, key[SID_BYTES:]):
            return None
        return s

    def _device_list(self) -> list[dict]:
        return [{"device": d, **{k: v for k, v in w.info.items() if k != "device"}}
                for d, w in sorted(self.workers.items(), key=lambda kv: device_sort_key(kv[0]))]

    def _hello(self, ident: bytes, h: dict) -> None:
        if h.get("v") != PROTOCOL_VERSION:
            self._to_client(ident, {"t": "error", "error": ProtocolError(
                f"protocol version mismatch: client speaks {str(h.get('v'))[:20]!r}, dispatcher speaks "
                f"{PROTOCOL_VERSION}; install matching tensorwire versions").to_wire()})
            return
        token = h.get("token")
        token = token.encode() if isinstance(token, str) else b""
        admin = bool(self.admin_token) and hmac.compare_digest(token, self.admin_token.encode())
        if self.token and not admin and not hmac.compare_digest(token, self.token.encode()):
            self._to_client(ident, {"t": "error", "error": Unauthorized(
                "the dispatcher refused the credentials (pass token= to tw.connect or set TENSORWIRE_TOKEN)"
            ).to_wire()})
            return
        old = self.sessions.get(self.by_ident.get(ident, b""))
        if old is not None and old.ident == ident:  # a second hello on one connection replaces its session
            self._close_session(old, "replaced by a new hello on its connection")
        sid = secrets.token_bytes(SID_BYTES)
        while sid in self.sessions:  # (2^64 ids: a repeat is all but impossible)
            sid = secrets.token_bytes(SID_BYTES)
        s = Session(sid, secrets.token_bytes(SECRET_BYTES), ident, str(h.get("client", ""))[:200], admin,
                    last_seen=time.time(), host=str(h.get("host", ""))[:64])
        self.sessions[sid] = s
        self.by_ident[ident] = sid
        self.telemetry.sessions_opened += 1
        log.info("session %s opened by %s%s (%d live)", sid.hex(), s.client or "a client", " (admin)" if admin else "",
                 len(self.sessions))
        self._to_client(ident, {"t": "welcome", "session": sid.hex(), "key": sid + s.secret, "admin": admin,
                                "devices": self._device_list(), "hub_url": self.hub_url,
                                "services": sorted(self.named), "lease_s": self.leases.lease_s,
                                "channels": self._channels(s)})

    def _channels(self, s: Session) -> list[dict]:
        """Grants of direct channels for session ``s``: each worker that listens for them, with its address, its
        public worker id, its CURVE public key (when the cluster has keys: the client pins it) and a capability
        bound to the session, that worker process, this epoch and an expiry."""
        expires = int(time.time() + CHANNEL_TTL_S)
        out = []
        for dev, w in self.workers.items():
            addr = w.info.get("direct")
            if reachable(w, s.host):
                out.append({"device": dev, "address": addr, "wid": worker_id(w.instance), "expires": expires,
                            "cap": issue(channel_key(w.instance), s.sid, dev, self.epoch, expires),
                            "key": w.info.get("direct_key") if isinstance(w.info.get("direct_key"), str) else None})
        return out

    def _lost_workers(self, wanted) -> list[str]:
        """Of ``[[device, worker id], ...]`` (the channels a client waits on), the devices whose worker is gone or
        is another process now."""
        if type(wanted) is not list:
            return []
        lost = []
        for item in wanted[:1024]:
            if type(item) is list and len(item) == 2 and type(item[0]) is str:
                w = self.workers.get(item[0])
                if w is None or worker_id(w.instance) != item[1]:
                    lost.append(item[0])
        return lost

    @staticmethod
    def _forget(s: Session, ids) -> None:
        """Drop handles the client released on a direct channel (their worker has freed them already)."""
        if is_int_list(ids):
            for i in ids:
                s.handles.pop(i, None)

    def _close_session(self, s: Session, why: str = "closed by its client") -> None:
        if self.sessions.pop(s.sid, None) is not None:
            log.info("session %s %s (%d handles; %d live)", s.sid.hex(), why, len(s.handles), len(self.sessions))
        if self.by_ident.get(s.ident) == s.sid:
            del self.by_ident[s.ident]
        for w in self.workers.values():
            self._to_service(w, {"t": "drop_session", "s": s.sid})
            w.plans = {p for p in w.plans if p[0] != s.sid}

    def _forward(self, s: Session, h: dict, frames) -> None:
        name = h.get("service")
        svc = self.named.get(name) if isinstance(name, str) else None
        if svc is None:
            self._to_client(s.ident, {"t": "service_reply", "q": h.get("q"), "error": error_to_wire(
                ServiceUnavailable(f"the {str(name)[:100]} service is not running (registered: "
                                   f"{', '.join(sorted(self.named)) or 'none'})"))})
            return
        fq = self.next_fwd
        self.next_fwd += 1
        self.forwards[fq] = (s.sid, h.get("q"), name)
        request = {k: v for k, v in h.items() if k != "k"}  # the session's key stays with the dispatcher
        self._to_service(svc, {**request, "t": "request", "q": fq, "s": s.sid.hex()}, frames)
