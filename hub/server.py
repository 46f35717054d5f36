"""HTTP server of the model hub (standard library only: ``http.server.ThreadingHTTPServer``).

Read side: the subset of the Hugging Face Hub HTTP API that ``huggingface_hub`` uses to
download (``/{repo}/resolve/{rev}/{path}``, ``/api/models...``). Push side: ``/api/tw/...``
with bearer-token auth. See ``docs/hub.md`` for the route list and the guarantees.

Not imported by ``import tensorwire.hub``; the CLI and the local-cluster launcher load it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, BinaryIO
from urllib.parse import parse_qs, quote, unquote

from tensorwire.protocol.hub import safetensors_check
from tensorwire.protocol.hub._validate import (
    check_file_path,
    check_ref_name,
    check_repo_id,
    check_revision,
    check_sha256,
)
from tensorwire.protocol.hub.errors import (
    BadRequest,
    EntryNotFound,
    Forbidden,
    HubError,
    InvalidPath,
    PayloadTooLarge,
    RepositoryNotFound,
    Unauthorized,
)
from tensorwire.protocol.hub.storage import (
    DEFAULT_MAX_BLOB,
    Commit,
    FileEntry,
    Repo,
    Storage,
    Token,
    create_token,
    git_oid,
    lfs_pointer,
)

from .metrics import HubMetrics

log = logging.getLogger("tensorwire.hub")

READY_MARKER = "TENSORWIRE-READY"
MAX_JSON_BODY = 16 << 20
DRAIN_LIMIT = 1 << 20
#: connections open at once; when full, the connection idle the longest (waiting for a request) is closed
MAX_CONNECTIONS = 256
#: seconds from when the hub starts waiting for a request (new or kept-alive connection) to its complete head
HEADER_TIMEOUT = 15.0
#: seconds of silence allowed while a request's body is read or its response written
BODY_TIMEOUT = 30.0
MAX_LIST = 10_000
MAX_CARD_BYTES = 64 * 1024
MAX_CONFIG_BYTES = 1 << 20
MAX_COMMITS_LISTED = 1000
#: how often the serving loop looks whether it was asked to stop (socketserver's shutdown waits for that look: a stop
#: takes up to this long; each look is one select call)
SHUTDOWN_POLL_S = 0.05
_PART_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class NotFound(HubError):
    """No such route."""

    code = "NotFound"
    status = 404


class MethodNotAllowed(HubError):
    """Route exists but not for this method."""

    code = "MethodNotAllowed"
    status = 405


class LengthRequired(BadRequest):
    """A body without Content-Length (chunked uploads are not accepted)."""

    code = "LengthRequired"
    status = 411


class RangeNotSatisfiable(HubError):
    """The Range header asks for bytes past the end of the file."""

    code = "RangeNotSatisfiable"
    status = 416


class _Body:
    """A reader over the request body that never reads past Content-Length."""

    def __init__(self, rfile: BinaryIO, length: int) -> None:
        self._rfile = rfile
        self.length = length
        self.left = length

    def read(self, n: int = -1) -> bytes:
        if self.left <= 0:
            return b""
        if n < 0 or n > self.left:
            n = self.left
        data = self._rfile.read(n)
        self.left -= len(data)
        if not data:
            self.left = 0
            raise BadRequest("connection closed in the middle of the request body")
        return data


def _unq(segment: str) -> str:
    try:
        return unquote(segment, errors="strict")
    except UnicodeDecodeError:
        raise InvalidPath("URL is not valid UTF-8 after percent-decoding") from None


def _header_safe(text: str) -> str:
    text = " ".join(str(text).split())
    return text.encode("ascii", "replace").decode("ascii")[:500]


def _parse_card(text: str) -> dict[str, Any]:
    """Parse the YAML front matter of a model card, for the simple forms cards use.

    Supports ``key: value``, ``key: [a, b]`` and block lists (``key:`` then ``- item`` lines).
    Anything fancier is skipped. No YAML library is required.
    """
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    out: dict[str, Any] = {}
    key: str | None = None
    for line in lines[1:500]:
        if line.strip() == "---":
            break
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[0] in " \t-" and key is not None:
            item = line.strip()
            if item.startswith("- "):
                if not isinstance(out.get(key), list):
                    out[key] = []
                out[key].append(item[2:].strip().strip("'\""))
            continue
        k, sep, v = line.partition(":")
        if not sep:
            continue
        key = k.strip()
        v = v.strip()
        if v.startswith("[") and v.endswith("]"):
            out[key] = [x.strip().strip("'\"") for x in v[1:-1].split(",") if x.strip()]
        elif v:
            low = v.lower()
            out[key] = True if low == "true" else False if low == "false" else v.strip("'\"")
        else:
            out[key] = None
    return out


class HubHTTPServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` carrying the :class:`Storage`, with per-connection timeouts and a connection cap.

    Each connection is *idle* while the hub waits for a request on it (a new connection, a kept-alive one, or a
    client still sending the request head) and *busy* while a request is served. An idle connection must deliver a
    complete request head within ``header_timeout`` seconds, however slowly it trickles bytes (a reaper thread
    closes it otherwise); a busy one may stay silent at most ``body_timeout`` seconds per read or write. At most
    ``max_connections`` are open: a new connection beyond that closes the connection idle the longest, so idle or
    half-open connections can never starve real requests; only when every connection is busy does the accept loop
    wait for one to finish (the kernel's listen backlog holds the newcomers meanwhile).
    """

    daemon_threads = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        storage: Storage,
        *,
        quiet: bool = False,
        max_connections: int = MAX_CONNECTIONS,
        header_timeout: float = HEADER_TIMEOUT,
        body_timeout: float = BODY_TIMEOUT,
    ) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        if max_connections < 1 or header_timeout <= 0 or body_timeout <= 0:
            raise ValueError("max_connections, header_timeout and body_timeout must be positive")
        self.storage = storage
        self.quiet = quiet
        self.metrics: Any = None  # a HubMetrics once metrics are served (hub/metrics.py)
        self.max_connections = max_connections
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        self._conns: dict[Any, float | None] = {}  # socket -> deadline of its request head; None while busy
        self._cond = threading.Condition()
        self._closing = threading.Event()
        super().__init__(address, HubHandler)
        self._reaper = threading.Thread(target=self._reap, name="tw-hub-reaper", daemon=True)
        self._reaper.start()

    @property
    def url(self) -> str:
        """``http://host:port`` the server listens on."""
        host, port = self.server_address[:2]
        if host in ("0.0.0.0", ""):
            host = "127.0.0.1"  # a wildcard bind is reachable on loopback; print a connectable URL
        elif host == "::":
            host = "::1"
        if ":" in str(host):
            host = f"[{host}]"
        return f"http://{host}:{port}"

    # ------------------------------------------------------------------ connection bookkeeping

    def connection_count(self) -> int:
        """Connections open now (idle and busy)."""
        with self._cond:
            return len(self._conns)

    @staticmethod
    def _drop(sock: Any) -> None:
        """Wake the connection's thread (its blocked read returns end-of-file) so that it closes."""
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

    def _evict_idle(self) -> bool:
        """Close the connection idle the longest (caller holds ``_cond``); False if every one is busy."""
        idle = [(deadline, i, sock) for i, (sock, deadline) in enumerate(self._conns.items()) if deadline is not None]
        if not idle:
            return False
        sock = min(idle)[2]
        del self._conns[sock]  # no longer counted; its thread sees end-of-file and ends
        self._drop(sock)
        return True

    def waiting_for_request(self, sock: Any) -> None:
        """The connection waits for a request head: it must arrive within ``header_timeout``."""
        with self._cond:
            if sock in self._conns:
                self._conns[sock] = time.monotonic() + self.header_timeout

    def request_started(self, sock: Any) -> None:
        """A complete request head arrived: the connection is busy (never evicted, no head deadline)."""
        with self._cond:
            if sock in self._conns:
                self._conns[sock] = None

    def _reap(self) -> None:
        """Close idle connections whose request head is overdue (runs until the server closes)."""
        tick = min(0.5, self.header_timeout / 4)
        while not self._closing.wait(tick):
            now = time.monotonic()
            with self._cond:
                late = [s for s, d in self._conns.items() if d is not None and d <= now]
                for sock in late:
                    del self._conns[sock]
                    self._drop(sock)
                if late:
                    self._cond.notify_all()

    def process_request(self, request: Any, client_address: Any) -> None:  # noqa: D401
        with self._cond:
            while len(self._conns) >= self.max_connections and not self._closing.is_set():
                if not self._evict_idle():
                    self._cond.wait(1.0)  # every connection is busy: back-pressure until one finishes
            self._conns[request] = time.monotonic() + self.header_timeout
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._forget(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._forget(request)

    def _forget(self, sock: Any) -> None:
        with self._cond:
            if self._conns.pop(sock, 0) != 0:
                self._cond.notify_all()

    def server_close(self) -> None:
        self._closing.set()
        with self._cond:
            self._cond.notify_all()
        super().server_close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("connection error from %s", client_address, exc_info=True)


class HubHandler(BaseHTTPRequestHandler):
    """One HTTP connection; routes each request and turns every failure into a JSON error."""

    server: HubHTTPServer
    protocol_version = "HTTP/1.1"
    server_version = "tensorwire-hub/0.1"
    timeout = BODY_TIMEOUT  # seconds of silence per read or write (the server's body_timeout replaces it)
    default_request_version = "HTTP/1.0"  # so that even unparsable requests get a status line

    def setup(self) -> None:
        self.timeout = self.server.body_timeout
        super().setup()

    def handle_one_request(self) -> None:
        """One request; its head must arrive within the server's ``header_timeout`` (see :class:`HubHTTPServer`)."""
        self.server.waiting_for_request(self.connection)
        super().handle_one_request()

    def parse_request(self) -> bool:
        ok = super().parse_request()
        if ok:
            self.server.request_started(self.connection)
        return ok

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Errors raised by ``http.server`` itself (bad request line, headers...) as JSON, then close."""
        self.close_connection = True
        self._method = getattr(self, "command", None) or "GET"
        err = HubError(message or explain or "bad request", status=code)
        err.code = "BadRequest" if 400 <= code < 500 else "HubError"
        self._send_error(err)

    # ------------------------------------------------------------------ entry points

    def do_GET(self) -> None:  # noqa: N802
        self._dispatch("GET")

    def do_HEAD(self) -> None:  # noqa: N802
        self._dispatch("HEAD")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self._dispatch("PUT")

    def do_DELETE(self) -> None:  # noqa: N802
        self._dispatch("DELETE")

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        if not self.server.quiet:
            sys.stderr.write(f"hub {self.address_string()} {format % args}\n")

    @property
    def storage(self) -> Storage:
        return self.server.storage

    def send_response(self, code: int, message: str | None = None) -> None:
        self._status = code
        super().send_response(code, message)

    def send_header(self, keyword: str, value: str) -> None:
        if keyword == "Content-Length":
            self._sent = int(value)
        super().send_header(keyword, value)

    def _dispatch(self, method: str) -> None:
        self._method = method
        self._body: _Body | None = None
        self._token_cache: tuple[bool, Token | None] | None = None
        self._status, self._sent = 0, 0
        t0 = time.monotonic()
        try:
            self._setup_body()
            self._route(method)
        except HubError as e:
            self._send_error(e)
        except (ConnectionError, TimeoutError):
            self.close_connection = True
            return
        except Exception as e:  # never let a request kill the server
            log.exception("internal error on %s %s", method, self.path)
            self._send_error(HubError(f"internal error: {type(e).__name__}"))
        finally:
            self._finish_body()
            metrics = self.server.metrics
            if metrics is not None:
                body = self._body
                received = body.length - max(body.left, 0) if body is not None else 0
                sent = self._sent if method != "HEAD" else 0
                metrics.observe(method, self.path, self._status, sent, received, time.monotonic() - t0)

    # ------------------------------------------------------------------ bodies

    def _setup_body(self) -> None:
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            raise LengthRequired("chunked request bodies are not supported; send Content-Length")
        cl = self.headers.get("Content-Length")
        if cl is None:
            self._body = _Body(self.rfile, 0)
            return
        try:
            length = int(cl)
            if length < 0:
                raise ValueError
        except ValueError:
            self.close_connection = True
            raise BadRequest("invalid Content-Length") from None
        self._body = _Body(self.rfile, length)

    def _finish_body(self) -> None:
        body = self._body
        if body is None or body.left <= 0:
            return
        if body.left > DRAIN_LIMIT:
            self.close_connection = True
            return
        try:
            while body.left > 0:  # bounded by DRAIN_LIMIT bytes
                body.read(64 * 1024)
        except Exception:
            self.close_connection = True

    def _read_json(self) -> Any:
        if self.headers.get("Content-Length") is None:
            raise LengthRequired("a JSON body with Content-Length is required")
        assert self._body is not None
        if self._body.left > MAX_JSON_BODY:
            if self._body.left > DRAIN_LIMIT:
                self.close_connection = True
            raise PayloadTooLarge(f"JSON body larger than {MAX_JSON_BODY} bytes")
        raw = self._body.read()
        try:
            return json.loads(raw.decode("utf-8")) if raw else None
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise BadRequest("request body is not valid JSON") from None

    def _json_object(self) -> dict:
        data = self._read_json()
        if not isinstance(data, dict):
            raise BadRequest("request body must be a JSON object")
        return data

    # ------------------------------------------------------------------ responses

    def _send_json(self, obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(obj, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self._method != "HEAD":
            self.wfile.write(body)

    def _send_error(self, e: HubError, headers: dict[str, str] | None = None) -> None:
        hdrs = {"X-Error-Code": e.code, "X-Error-Message": _header_safe(e.message)}
        hdrs.update(getattr(e, "headers", None) or {})
        hdrs.update(headers or {})
        if e.status == 401:
            hdrs["WWW-Authenticate"] = 'Bearer realm="tensorwire-hub"'
        if self.close_connection:
            hdrs["Connection"] = "close"
        try:
            self._send_json({"error": e.code, "message": e.message}, e.status, hdrs)
        except OSError:
            self.close_connection = True

    # ------------------------------------------------------------------ auth

    def _token(self) -> tuple[bool, Token | None]:
        """(a token was presented, the known token or None)."""
        if self._token_cache is None:
            auth = self.headers.get("Authorization") or ""
            scheme, _, value = auth.strip().partition(" ")
            if not auth:
                self._token_cache = (False, None)
            elif scheme.lower() != "bearer" or not value.strip():
                self._token_cache = (True, None)
            else:
                self._token_cache = (True, self.storage.check_token(value.strip()))
        return self._token_cache

    def _require_write(self, repo_id: str | None) -> Token:
        """The caller's token if it may write ``repo_id`` (None: any repository, as blob uploads need);
        ``Unauthorized`` without a known token, ``Forbidden`` when the token lacks the grant."""
        presented, token = self._token()
        if not presented:
            raise Unauthorized("this route needs 'Authorization: Bearer <token>' with write access")
        if token is None:
            raise Unauthorized("Invalid credentials in Authorization header")
        if repo_id is None:
            if not token.can_write_somewhere():
                raise Forbidden(f"token {token.name!r} is read-only; this route needs write access")
        elif not token.can_write(repo_id):
            raise Forbidden(f"token {token.name!r} may not write {repo_id}")
        return token

    def _can_read(self, repo: Repo) -> bool:
        """Whether the caller may read ``repo``: public ones, or private ones its token's scopes cover."""
        if not repo.private:
            return True
        token = self._token()[1]
        return token is not None and token.can_read(repo.name)

    def _readable_repo(self, repo_id: str) -> Repo:
        repo = self.storage.get_repo(repo_id)
        if repo is None or not self._can_read(repo):
            # A private repo the caller may not read answers exactly like a missing one.
            raise RepositoryNotFound(f"repository {repo_id} not found")
        return repo

    # ------------------------------------------------------------------ routing

    def _route(self, method: str) -> None:
        raw = self.path.split("#", 1)[0]
        raw_path, _, query = raw.partition("?")
        if not raw_path.startswith("/"):
            raise BadRequest("request target must be an absolute path")
        if len(raw) > 16_384:
            raise InvalidPath("URL too long")
        self._query = {k: v[-1] for k, v in parse_qs(query, keep_blank_values=True).items()}
        seg = raw_path.split("/")[1:]
        if seg and seg[-1] == "" and len(seg) > 1:
            seg = seg[:-1]
        read = method in ("GET", "HEAD")

        if seg[:1] == ["api"]:
            if seg[1:2] == ["models"]:
                if not read:
                    raise MethodNotAllowed(f"{method} not allowed on {raw_path}")
                return self._api_models(seg[2:])
            if seg[1:2] in (["datasets"], ["spaces"]):
                raise RepositoryNotFound("this hub only serves model repositories")
            if seg[1:2] == ["tw"]:
                return self._api_tw(method, seg[2:])
            if seg[1:2] == ["whoami-v2"] and read:
                return self._whoami()
            raise NotFound(f"no route {raw_path}")
        if seg[:1] in (["datasets"], ["spaces"]):
            raise RepositoryNotFound("this hub only serves model repositories")
        if len(seg) >= 4 and seg[2] == "resolve":
            if not read:
                raise MethodNotAllowed(f"{method} not allowed on {raw_path}")
            repo_id = self._repo_id(seg[0], seg[1])
            revision = _unq(seg[3])
            path = _unq("/".join(seg[4:]))
            return self._resolve_file(repo_id, revision, path)
        if seg in ([""], []) and read:
            return self._send_json({"service": "tensorwire-hub", "api": "/api/models", "push": "/api/tw"})
        raise NotFound(f"no route {raw_path}")

    def _repo_id(self, owner: str, name: str | None) -> str:
        owner = _unq(owner)
        if name is None:
            if _PART_RE.fullmatch(owner) and ".." not in owner:
                raise RepositoryNotFound(f"repository {owner} not found (repo ids here are 'owner/name')")
            raise InvalidPath(f"invalid repo id {owner!r:.200}")
        return check_repo_id(f"{owner}/{_unq(name)}")

    # ------------------------------------------------------------------ read API

    def _api_models(self, rest: list[str]) -> None:
        if not rest:
            return self._list_models()
        repo_id = self._repo_id(rest[0], rest[1] if len(rest) > 1 else None)
        rest = rest[2:]
        if not rest:
            return self._model_info(repo_id, None)
        kind = rest[0]
        if kind == "revision" and len(rest) >= 2:
            return self._model_info(repo_id, _unq("/".join(rest[1:])))
        if kind == "tree" and len(rest) >= 2:
            path = _unq("/".join(rest[2:])) if len(rest) > 2 else ""
            return self._tree(repo_id, _unq(rest[1]), path)
        if kind == "refs" and len(rest) == 1:
            return self._list_refs(repo_id)
        if kind == "commits" and len(rest) >= 2:
            return self._list_commits(repo_id, _unq("/".join(rest[1:])))
        raise NotFound(f"no route {self.path.partition('?')[0]}")

    def _commit_of(self, repo: Repo, revision: str) -> Commit:
        if not isinstance(revision, str) or not revision or len(revision) > 300 or "\x00" in revision:
            raise InvalidPath("invalid revision")
        return self.storage.resolve(repo, revision)

    def _card_and_config(self, commit: Commit, files: list[FileEntry]) -> tuple[dict, dict | None]:
        card: dict = {}
        config: dict | None = None
        by_path = {f.path: f for f in files}
        readme = by_path.get("README.md")
        if readme is not None:
            with contextlib.suppress(OSError, UnicodeDecodeError):
                with open(self.storage.blob_path(readme.sha256), "rb") as fh:
                    card = _parse_card(fh.read(MAX_CARD_BYTES).decode("utf-8", "replace"))
        cfg = by_path.get("config.json")
        if cfg is not None and cfg.size <= MAX_CONFIG_BYTES:
            with contextlib.suppress(OSError, ValueError, RecursionError):
                data = json.loads(self.storage.blob_path(cfg.sha256).read_bytes())
                if isinstance(data, dict):
                    config = {k: data[k] for k in ("architectures", "model_type") if k in data}
        return card, config

    def _safetensors_info(self, files: list[FileEntry]) -> dict | None:
        params: dict[str, int] = {}
        found = False
        for f in files[:256]:
            if not f.path.endswith(".safetensors"):
                continue
            try:
                header = safetensors_check.validate_file(self.storage.blob_path(f.sha256))
            except (HubError, OSError):
                continue
            found = True
            for name, info in header.items():
                if name == "__metadata__":
                    continue
                n = 1
                for d in info["shape"]:
                    n *= d
                params[info["dtype"]] = params.get(info["dtype"], 0) + n
        return {"parameters": params, "total": sum(params.values())} if found else None

    def _repo_summary(self, repo: Repo, commit: Commit | None, files: list[FileEntry] | None) -> dict:
        owner = repo.name.split("/")[0]
        info: dict[str, Any] = {
            "_id": hashlib.sha1(repo.name.lower().encode()).hexdigest()[:24],
            "id": repo.name,
            "modelId": repo.name,
            "author": owner,
            "sha": commit.id if commit else None,
            "lastModified": commit.created_at if commit else repo.created_at,
            "createdAt": repo.created_at,
            "private": repo.private,
            "gated": False,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": [],
        }
        if files is not None:
            card, config = self._card_and_config(commit, files) if commit else ({}, None)
            tags: list[str] = []
            if any(f.path.endswith(".safetensors") for f in files):
                tags.append("safetensors")
            card_tags = card.get("tags")
            if isinstance(card_tags, list):
                tags.extend(str(t) for t in card_tags)
            if isinstance(card.get("library_name"), str):
                info["library_name"] = card["library_name"]
                tags.insert(0, card["library_name"])
            if isinstance(card.get("license"), str):
                tags.append(f"license:{card['license']}")
            if isinstance(card.get("pipeline_tag"), str):
                info["pipeline_tag"] = card["pipeline_tag"]
            info["tags"] = list(dict.fromkeys(tags))
            info["cardData"] = card
            if config is not None:
                info["config"] = config
        return info

    def _model_info(self, repo_id: str, revision: str | None) -> None:
        repo = self._readable_repo(repo_id)
        commit = self._commit_of(repo, revision) if revision is not None else self.storage.head(repo, "main")
        if commit is None:
            commit = self.storage.latest_commit(repo)
        files = self.storage.files(commit) if commit else []
        info = self._repo_summary(repo, commit, files)
        blobs = self._query.get("blobs", "").lower() in ("1", "true")
        siblings = []
        for f in files:
            s: dict[str, Any] = {"rfilename": f.path}
            if blobs:
                s["size"] = f.size
                s["blobId"] = git_oid(f.sha256, f.size)
                s["lfs"] = {
                    "size": f.size,
                    "sha256": f.sha256,
                    "pointerSize": len(lfs_pointer(f.sha256, f.size)),
                }
            siblings.append(s)
        info["siblings"] = siblings
        info["spaces"] = []
        info["usedStorage"] = sum(f.size for f in files)
        st = self._safetensors_info(files)
        if st is not None:
            info["safetensors"] = st
        self._send_json(info)

    def _list_models(self) -> None:
        q = self._query
        try:
            limit = min(int(q.get("limit") or MAX_LIST), MAX_LIST)
            cursor = max(int(q.get("cursor") or 0), 0)
        except ValueError:
            raise BadRequest("limit and cursor must be integers") from None
        search = (q.get("search") or "").lower()
        author = q.get("author") or ""
        full = q.get("full", "").lower() in ("1", "true")
        repos = [
            r
            for r in self.storage.list_repos()
            if self._can_read(r)
            and (not search or search in r.name.lower())
            and (not author or r.name.split("/")[0].lower() == author.lower())
        ]
        items = []
        for r in repos:
            commit = self.storage.head(r, "main") or self.storage.latest_commit(r)
            files = self.storage.files(commit) if commit else []
            item = self._repo_summary(r, commit, files)
            item.pop("cardData", None)
            if full:
                item["siblings"] = [{"rfilename": f.path} for f in files]
            items.append(item)
        sort = q.get("sort")
        if sort in ("lastModified", "createdAt", "id"):
            items.sort(key=lambda x: x.get(sort) or "", reverse=q.get("direction") == "-1")
        page = items[cursor : cursor + limit]
        headers = {}
        if cursor + limit < len(items):
            args = {k: v for k, v in q.items() if k != "cursor"}
            args["cursor"] = str(cursor + limit)
            qs = "&".join(f"{quote(k)}={quote(v)}" for k, v in args.items())
            headers["Link"] = f'<{self._base_url()}/api/models?{qs}>; rel="next"'
        self._send_json(page, headers=headers)

    def _tree(self, repo_id: str, revision: str, path: str) -> None:
        repo = self._readable_repo(repo_id)
        commit = self._commit_of(repo, revision)
        if path:
            check_file_path(path)
        recursive = self._query.get("recursive", "").lower() in ("1", "true")
        prefix = f"{path}/" if path else ""
        files = [f for f in self.storage.files(commit) if f.path.startswith(prefix)]
        if path and not files:
            raise EntryNotFound(f"folder {path!r:.300} not found at revision {commit.id}", status=404)
        out: list[dict] = []
        folders: dict[str, list[FileEntry]] = {}
        for f in files:
            rel = f.path[len(prefix) :]
            parts = rel.split("/")
            if recursive:
                for i in range(1, len(parts)):
                    folders.setdefault(prefix + "/".join(parts[:i]), []).append(f)
            elif len(parts) > 1:
                folders.setdefault(prefix + parts[0], []).append(f)
                continue
            if recursive or len(parts) == 1:
                out.append(
                    {
                        "type": "file",
                        "oid": git_oid(f.sha256, f.size),
                        "size": f.size,
                        "path": f.path,
                        "lfs": {
                            "oid": f.sha256,
                            "size": f.size,
                            "pointerSize": len(lfs_pointer(f.sha256, f.size)),
                        },
                    }
                )
        for folder, members in folders.items():
            h = hashlib.sha1()
            for m in members:
                h.update(f"{m.path}\x00{m.sha256}\n".encode())
            out.append({"type": "directory", "oid": h.hexdigest(), "size": 0, "path": folder})
        out.sort(key=lambda e: e["path"])
        self._send_json(out, headers={"X-Repo-Commit": commit.id})

    def _list_refs(self, repo_id: str) -> None:
        repo = self._readable_repo(repo_id)
        refs = self.storage.refs(repo)
        self._send_json(
            {
                "branches": [
                    {"name": n, "ref": f"refs/heads/{n}", "targetCommit": c} for n, c in refs["branches"].items()
                ],
                "tags": [{"name": n, "ref": f"refs/tags/{n}", "targetCommit": c} for n, c in refs["tags"].items()],
                "converts": [],
            }
        )

    def _list_commits(self, repo_id: str, revision: str) -> None:
        repo = self._readable_repo(repo_id)
        commit: Commit | None = self._commit_of(repo, revision)
        out = []
        for _ in range(MAX_COMMITS_LISTED):  # bounded walk of the parent chain
            if commit is None:
                break
            title, _, body = commit.message.partition("\n")
            out.append(
                {
                    "id": commit.id,
                    "title": title,
                    "message": body.strip(),
                    "authors": [],
                    "date": commit.created_at,
                    "parents": [commit.parent] if commit.parent else [],
                }
            )
            commit = self.storage.resolve(repo, commit.parent) if commit.parent else None
        self._send_json(out)

    def _whoami(self) -> None:
        presented, token = self._token()
        if token is None:
            raise Unauthorized("Invalid credentials in Authorization header" if presented else "no token")
        self._send_json(
            {
                "type": "user",
                "name": token.name,
                "auth": {"accessToken": self._access_token_info(token)},
            }
        )

    @staticmethod
    def _access_token_info(token: Token) -> dict[str, Any]:
        """``whoami``'s ``auth.accessToken``: the role and, for a fine-grained token, its scopes (HF's layout)."""
        info: dict[str, Any] = {"displayName": token.name, "role": token.role}
        if token.scopes is not None:
            scoped = []
            for sc in token.scopes:
                perms = ["repo.content.read"] + (["repo.write"] if sc.access == "write" else [])
                entity = {"type": "model", "name": sc.name} if sc.is_repo else {"type": "user", "name": sc.name}
                scoped.append({"entity": entity, "permissions": perms})
            info["fineGrained"] = {"scoped": scoped, "global": []}
        return info

    def _base_url(self) -> str:
        host = self.headers.get("Host")
        if not host or any(c in host for c in "/\\@ \t\r\n"):
            return self.server.url
        proto = self.headers.get("X-Forwarded-Proto", "http")
        proto = proto if proto in ("http", "https") else "http"
        return f"{proto}://{host}"

    def _resolve_file(self, repo_id: str, revision: str, path: str) -> None:
        check_file_path(path)
        repo = self._readable_repo(repo_id)
        commit = self._commit_of(repo, revision)
        try:
            entry = self.storage.file(commit, path)
        except EntryNotFound as e:
            e.headers = {"X-Repo-Commit": commit.id}  # type: ignore[attr-defined]
            raise
        etag = f'"{entry.sha256}"'
        size = entry.size
        headers = {
            "X-Repo-Commit": commit.id,
            "ETag": etag,
            "X-Linked-Etag": etag,
            "X-Linked-Size": str(size),
            "Accept-Ranges": "bytes",
            "Cache-Control": "public, max-age=31536000, immutable" if revision == commit.id else "no-cache",
            "Content-Disposition": f'attachment; filename="{quote(path.rsplit("/", 1)[-1])}"',
        }
        if revision != commit.id:
            # Pins the follow-up GET of huggingface_hub to the commit it resolved (it reads Location).
            headers["Location"] = f"{self._base_url()}/{repo.name}/resolve/{commit.id}/{quote(path)}"
        inm = self.headers.get("If-None-Match")
        if inm and etag in [t.strip().removeprefix("W/") for t in inm.split(",")]:
            self.send_response(304)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        start, end = 0, size - 1
        status = 200
        rng = self.headers.get("Range")
        if rng and size > 0:
            parsed = self._parse_range(rng, size)
            if parsed == "unsatisfiable":
                e = RangeNotSatisfiable(f"range {rng!r:.100} not satisfiable for {size} bytes")
                self._send_error(e, {"Content-Range": f"bytes */{size}", **headers})
                return
            if parsed is not None:
                start, end = parsed
                status = 206
                headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        elif rng and size == 0 and self._parse_range(rng, size) == "unsatisfiable":
            self._send_error(RangeNotSatisfiable("empty file"), {"Content-Range": "bytes */0", **headers})
            return
        length = max(end - start + 1, 0)
        blob = self.storage.blob_path(entry.sha256)
        f = open(blob, "rb")  # noqa: SIM115 - closed below
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(length))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            if self._method == "HEAD" or length == 0:
                return
            self._send_file(f, start, length)
        finally:
            f.close()

    @staticmethod
    def _parse_range(header: str, size: int) -> tuple[int, int] | str | None:
        """One ``bytes=`` range as (start, end) inclusive; None to ignore the header."""
        unit, _, spec = header.strip().partition("=")
        if unit.strip().lower() != "bytes" or "," in spec:
            return None  # unknown unit or multi-range: serve the whole file (allowed by RFC 9110)
        first, dash, last = spec.strip().partition("-")
        if not dash:
            return None
        try:
            if first == "":
                n = int(last)
                if n <= 0:
                    return "unsatisfiable"
                return max(size - n, 0), size - 1
            start = int(first)
            end = int(last) if last else size - 1
        except ValueError:
            return None
        if start < 0:
            return None
        if start >= size:
            return "unsatisfiable"
        if end < start:
            return None
        return start, min(end, size - 1)

    def _send_file(self, f: BinaryIO, start: int, length: int) -> None:
        self.wfile.flush()
        try:
            sent = self.connection.sendfile(f, start, length)  # type: ignore[attr-defined]
            if sent != length:
                self.close_connection = True
            return
        except (AttributeError, OSError) as e:
            if isinstance(e, (ConnectionError, socket.timeout)):
                raise
        f.seek(start)
        left = length
        while left > 0:  # bounded: left decreases every turn or we stop
            chunk = f.read(min(1 << 20, left))
            if not chunk:
                self.close_connection = True
                return
            self.wfile.write(chunk)
            left -= len(chunk)

    # ------------------------------------------------------------------ push API

    def _api_tw(self, method: str, rest: list[str]) -> None:
        if rest == ["health"] and method in ("GET", "HEAD"):
            return self._send_json({"ok": True, "service": "hub", "max_blob_size": self.storage.max_blob_size})
        if rest == ["repos"]:
            if method in ("GET", "HEAD"):
                return self._tw_list_repos()
            if method == "POST":
                return self._tw_create_repo()
            raise MethodNotAllowed(f"{method} not allowed")
        if rest == ["blobs", "missing"]:
            if method != "POST":
                raise MethodNotAllowed(f"{method} not allowed")
            return self._tw_missing()
        if len(rest) == 2 and rest[0] == "blobs":
            if method != "PUT":
                raise MethodNotAllowed(f"{method} not allowed")
            return self._tw_put_blob(rest[1])
        if len(rest) >= 4 and rest[0] == "repos":
            repo_id = self._repo_id(rest[1], rest[2])
            action = rest[3]
            if action == "revision" and len(rest) >= 5 and method in ("GET", "HEAD"):
                return self._tw_revision(repo_id, _unq("/".join(rest[4:])))
            if action == "commit" and len(rest) >= 5 and method == "POST":
                return self._tw_commit(repo_id, _unq("/".join(rest[4:])))
            if action == "tag" and len(rest) == 4 and method == "POST":
                return self._tw_tag(repo_id)
            if action == "settings" and len(rest) == 4 and method == "POST":
                return self._tw_settings(repo_id)
        raise NotFound(f"no route {self.path.partition('?')[0]}")

    def _tw_list_repos(self) -> None:
        out = []
        for r in self.storage.list_repos():
            if not self._can_read(r):
                continue
            refs = self.storage.refs(r)
            head = self.storage.head(r, "main") or self.storage.latest_commit(r)
            out.append(
                {
                    "repo_id": r.name,
                    "private": r.private,
                    "created_at": r.created_at,
                    "sha": head.id if head else None,
                    "last_modified": head.created_at if head else r.created_at,
                    "branches": refs["branches"],
                    "tags": refs["tags"],
                }
            )
        self._send_json(out)

    def _tw_create_repo(self) -> None:
        self._require_write(None)
        body = self._json_object()
        repo_id = check_repo_id(body.get("repo_id"))
        self._require_write(repo_id)
        private = body.get("private", False)
        if not isinstance(private, bool):
            raise BadRequest("private must be a boolean")
        existed = self.storage.get_repo(repo_id) is not None
        repo = self.storage.create_repo(repo_id, private=private, exist_ok=bool(body.get("exist_ok", False)))
        self._send_json(
            {"repo_id": repo.name, "private": repo.private, "created": not existed}, 200 if existed else 201
        )

    def _tw_missing(self) -> None:
        token = self._require_write(None)
        body = self._json_object()
        digests = body.get("sha256")
        if not isinstance(digests, list) or len(digests) > 100_000:
            raise BadRequest("body must be {'sha256': [hex digests]} with at most 100000 entries")
        missing = self.storage.missing_blobs(digests, token)
        self._send_json({"missing": missing, "max_blob_size": self.storage.max_blob_size})

    def _tw_put_blob(self, raw_digest: str) -> None:
        token = self._require_write(None)
        digest = check_sha256(_unq(raw_digest))
        if self.headers.get("Content-Length") is None:
            raise LengthRequired("blob uploads need Content-Length")
        assert self._body is not None
        length = self._body.left
        if length > self.storage.max_blob_size:
            if length > DRAIN_LIMIT:
                self.close_connection = True
            raise PayloadTooLarge(f"blob of {length} bytes exceeds the limit of {self.storage.max_blob_size}")
        hint = self._query.get("path", "")
        created = self.storage.upload(
            token, self._body, length, digest, validate_safetensors=hint.endswith(".safetensors")
        )
        self._send_json({"sha256": digest, "size": length, "created": created}, 201 if created else 200)

    def _tw_revision(self, repo_id: str, revision: str) -> None:
        repo = self._readable_repo(repo_id)
        commit = self._commit_of(repo, revision)
        self._send_json(
            {
                "repo_id": repo.name,
                "revision": revision,
                "commit": commit.id,
                "parent": commit.parent,
                "message": commit.message,
                "created_at": commit.created_at,
                "private": repo.private,
                "files": [{"path": f.path, "sha256": f.sha256, "size": f.size} for f in self.storage.files(commit)],
            }
        )

    def _tw_commit(self, repo_id: str, branch: str) -> None:
        token = self._require_write(repo_id)
        check_ref_name(branch)
        body = self._json_object()
        repo = self.storage.get_repo(repo_id)
        if repo is None:
            raise RepositoryNotFound(f"repository {repo_id} not found; create it with POST /api/tw/repos")
        commit = self.storage.commit(
            repo.name,
            branch,
            body.get("files", []),
            message=body.get("message"),
            parent=body.get("parent"),
            check_parent="parent" in body,
            mode=body.get("mode", "replace"),
            delete=body.get("delete"),
            token=token,
        )
        self._send_json({"repo_id": repo.name, "branch": branch, "commit": commit.id, "parent": commit.parent}, 201)

    def _tw_tag(self, repo_id: str) -> None:
        self._require_write(repo_id)
        body = self._json_object()
        tag = check_ref_name(body.get("tag"))
        revision = check_revision(body.get("revision", "main"))
        commit = self.storage.create_tag(repo_id, tag, revision)
        self._send_json({"repo_id": repo_id, "tag": tag, "commit": commit.id}, 201)

    def _tw_settings(self, repo_id: str) -> None:
        self._require_write(repo_id)
        body = self._json_object()
        private = body.get("private")
        if not isinstance(private, bool):
            raise BadRequest("private must be a boolean")
        repo = self.storage.set_private(repo_id, private)
        self._send_json({"repo_id": repo.name, "private": repo.private})


# ---------------------------------------------------------------------- entry points


def make_server(
    root: str | os.PathLike,
    host: str = "127.0.0.1",
    port: int = 8700,
    *,
    max_blob_size: int = DEFAULT_MAX_BLOB,
    quiet: bool = False,
    max_connections: int = MAX_CONNECTIONS,
    header_timeout: float = HEADER_TIMEOUT,
    body_timeout: float = BODY_TIMEOUT,
) -> HubHTTPServer:
    """Open the store at ``root`` and bind the HTTP server (not serving yet; call ``serve_forever``)."""
    storage = Storage(root, max_blob_size=max_blob_size)
    storage.clean_tmp()  # no upload can be in flight before we listen
    return HubHTTPServer(
        (host, port),
        storage,
        quiet=quiet,
        max_connections=max_connections,
        header_timeout=header_timeout,
        body_timeout=body_timeout,
    )


def serve(
    root: str | os.PathLike,
    host: str = "127.0.0.1",
    port: int = 8700,
    *,
    max_blob_size: int = DEFAULT_MAX_BLOB,
    quiet: bool = False,
    ready_stream: Any = None,
    max_connections: int = MAX_CONNECTIONS,
    header_timeout: float = HEADER_TIMEOUT,
    body_timeout: float = BODY_TIMEOUT,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
) -> int:
    """Serve the hub until SIGTERM/SIGINT; prints the ``TENSORWIRE-READY`` line once listening. ``metrics_port``:
    also serve Prometheus metrics at ``http://metrics_host:metrics_port/metrics`` (0 picks a free port; the ready
    line says where)."""
    server = make_server(
        root,
        host,
        port,
        max_blob_size=max_blob_size,
        quiet=quiet,
        max_connections=max_connections,
        header_timeout=header_timeout,
        body_timeout=body_timeout,
    )
    stopping = threading.Event()

    def _stop(signum: int, frame: Any) -> None:
        if not stopping.is_set():
            stopping.set()
            threading.Thread(target=server.shutdown, daemon=True).start()

    old = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            old[sig] = signal.signal(sig, _stop)
    ready = {"service": "hub", "url": server.url}
    metrics_server = None
    if metrics_port is not None:
        server.metrics = HubMetrics(server)
        metrics_server, ready["metrics_url"] = server.metrics.serve(metrics_host, metrics_port)
    out = ready_stream or sys.stdout
    out.write(f"{READY_MARKER} {json.dumps(ready)}\n")
    out.flush()
    try:
        server.serve_forever(poll_interval=SHUTDOWN_POLL_S)
    finally:
        server.server_close()
        if metrics_server is not None:
            metrics_server.shutdown()
        for sig, handler in old.items():
            signal.signal(sig, handler)
    return 0


__all__ = ["HubHTTPServer", "HubHandler", "create_token", "make_server", "serve", "READY_MARKER"]
