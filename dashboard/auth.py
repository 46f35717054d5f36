"""Who is looking at the dashboard: the admin (every session's work) or one session (its own work only).

The dashboard reads the cluster as an admin session; each viewer is then shown what it may see:

* **admin**: whoever presents the admin token once (``/?token=...``); on a loopback bind, any viewer without
  credentials too (as ``tensorwire status`` on the host, whose users can reach loopback).
* **one session**: a session link, ``/?session=SID&key=KEY`` where ``KEY`` is :func:`session_key`, an HMAC of the
  session's public id under the cluster's client token (so a client holding that token can make its own link, and
  nobody can make one without it), or under the admin token when the cluster has no client token (then only the
  admin hands links out, from the sessions table).

Beyond loopback every request needs one of these. A credential is exchanged once for a cookie (signed with a key of
this process, HttpOnly, SameSite=Strict) and the URL is redirected without it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import urllib.parse
from dataclasses import dataclass

from tensorwire.protocol.addresses import is_loopback_host

SID_RE = re.compile(r"[0-9a-f]{16}")
COOKIE = "tw_dashboard"


@dataclass(frozen=True)
class Viewer:
    """``admin`` sees every session; otherwise ``session`` (a public session id, hex) is the one it sees."""

    admin: bool
    session: str | None = None

    def may_see(self, sid: str | None) -> bool:
        """Whether work of session ``sid`` is this viewer's to see."""
        return self.admin or (sid is not None and sid == self.session)

    @property
    def label(self) -> str:
        return "admin: every session" if self.admin else f"session {self.session}: its own work only"


def session_key(secret: str, sid: str) -> str:
    """The key of session ``sid``'s link: HMAC-SHA256 of its id under ``secret`` (the client token, or the admin
    token where the cluster has none), hex."""
    return hmac.new(secret.encode(), f"tensorwire-dashboard-session:{sid}".encode(), hashlib.sha256).hexdigest()[:32]


def session_link(url: str, sid: str, token: str) -> str:
    """The dashboard link that shows session ``sid`` its own work: ``session_link(c.dashboard_url,
    sess.session_id, token)`` with the cluster's client token."""
    q = urllib.parse.urlencode({"session": sid, "key": session_key(token, sid)})
    return f"{url.rstrip('/')}/?{q}"


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the dashboard on this machine."""
    return is_loopback_host(host)


class Gate:
    """Turns credentials into viewers, and viewers into signed cookie values (and back)."""

    def __init__(self, admin_token: str, client_token: str | None, loopback: bool):
        self.admin_token = admin_token
        self.link_secret = client_token or admin_token
        self.loopback = loopback
        self._sign_key = secrets.token_bytes(32)  # cookies last as long as this process

    def login(self, token: str | None, session: str | None, key: str | None) -> Viewer | None:
        """The viewer a query's credentials prove (``token``: the admin token; ``session`` and ``key``: a session
        link), or None when they prove nothing."""
        if token and hmac.compare_digest(token.encode(), self.admin_token.encode()):
            return Viewer(True)
        if session and SID_RE.fullmatch(session):
            if key and hmac.compare_digest(key.encode(), session_key(self.link_secret, session).encode()):
                return Viewer(False, session)
            if self.loopback and not key:  # on loopback the admin view is open: a session filter grants nothing
                return Viewer(False, session)
        return None

    def cookie(self, viewer: Viewer) -> str:
        value = "admin" if viewer.admin else f"s:{viewer.session}"
        return f"{value}.{self._sign(value)}"

    def from_cookie(self, cookie: str | None) -> Viewer | None:
        if not cookie or "." not in cookie:
            return None
        value, sig = cookie.rsplit(".", 1)
        if not hmac.compare_digest(sig.encode(), self._sign(value).encode()):
            return None
        if value == "admin":
            return Viewer(True)
        if value.startswith("s:") and SID_RE.fullmatch(value[2:]):
            return Viewer(False, value[2:])
        return None

    def default(self) -> Viewer | None:
        """The viewer of a request without credentials: the admin on loopback, nobody beyond it."""
        return Viewer(True) if self.loopback else None

    def _sign(self, value: str) -> str:
        return hmac.new(self._sign_key, value.encode(), hashlib.sha256).hexdigest()[:32]
