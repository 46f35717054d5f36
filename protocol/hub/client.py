"""HTTP client helpers for the model hub (standard library ``urllib.request`` only).

These are what users, the CLI and device workers call: push a folder or in-memory files,
resolve a revision, fetch one file into a local sha256-keyed cache, list repositories.
Importing this module imports neither ``http.server`` nor ``sqlite3``.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import io
import json
import os
import queue
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from tensorwire.protocol.addresses import is_loopback_host

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: a download takes no cross-process lock (see _locked)
    fcntl = None

from ._validate import COMMIT_RE, SHA256_RE, check_file_path, check_ref_name, check_repo_id, check_revision
from .errors import (
    BadRequest,
    EntryNotFound,
    HashMismatch,
    HubError,
    HubUnavailable,
    PayloadTooLarge,
    error_from_code,
)

#: the port a hub listens on unless told otherwise (`tensorwire hub`, `tensorwire up --hub-root`, compose.yaml)
DEFAULT_PORT = 8700
DEFAULT_ENDPOINT = f"http://127.0.0.1:{DEFAULT_PORT}"
CHUNK = 1 << 20
MAX_PUSH_FILES = 100_000
DEFAULT_TIMEOUT = 60.0
#: seconds to open the TCP connection to the hub ($TENSORWIRE_HUB_CONNECT_TIMEOUT overrides)
DEFAULT_CONNECT_TIMEOUT = 10.0

__all__ = [
    "DEFAULT_ENDPOINT",
    "default_endpoint",
    "normalize_endpoint",
    "timeouts",
    "default_cache_dir",
    "progress_bar",
    "push_folder",
    "push_files",
    "resolve",
    "fetch",
    "list_repos",
    "create_tag",
]


# ---------------------------------------------------------------------- plumbing


def default_endpoint(endpoint: str | None = None) -> str:
    """``endpoint``, else ``$TENSORWIRE_HUB_URL``, else ``http://127.0.0.1:8700`` (no trailing slash)."""
    ep = endpoint or os.environ.get("TENSORWIRE_HUB_URL") or DEFAULT_ENDPOINT
    return ep.rstrip("/")


def normalize_endpoint(endpoint: str) -> str:
    """``scheme://host[:port]/path`` with the scheme and host lower-cased, the default port and the trailing
    slash dropped: two spellings of one hub compare equal. Raises ``BadRequest`` for anything but http(s)."""
    parts = urlsplit(endpoint.strip())
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname or parts.username or parts.password:
        raise BadRequest(f"hub endpoint must be an http(s) URL without credentials, got {endpoint!r:.200}")
    try:
        port = parts.port
    except ValueError:
        raise BadRequest(f"hub endpoint has an invalid port: {endpoint!r:.200}") from None
    scheme = parts.scheme.lower()
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port in (None, {"http": 80, "https": 443}[scheme]) else f"{host}:{port}"
    return f"{scheme}://{netloc}{parts.path.rstrip('/')}"


def timeouts(default_read: float | None = None) -> tuple[float, float]:
    """``(connect, read)`` seconds for a request to the hub.

    ``connect`` bounds opening the TCP connection (``$TENSORWIRE_HUB_CONNECT_TIMEOUT``, default 10 s); ``read``
    bounds every later socket operation, i.e. the wait for the response and each read of its body
    (``$TENSORWIRE_HUB_READ_TIMEOUT``, else ``default_read``, else 60 s). The environment is the operator's
    override everywhere.
    """

    def env(name: str, default: float) -> float:
        try:
            v = float(os.environ.get(name) or default)
        except ValueError:
            return default
        return v if v > 0 else default

    read = default_read if default_read is not None else DEFAULT_TIMEOUT
    return env("TENSORWIRE_HUB_CONNECT_TIMEOUT", DEFAULT_CONNECT_TIMEOUT), env("TENSORWIRE_HUB_READ_TIMEOUT", read)


def default_cache_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """``cache_dir``, else ``$TENSORWIRE_HUB_CACHE``, else ``~/.cache/tensorwire/hub``."""
    if cache_dir is not None:
        return Path(cache_dir)
    env = os.environ.get("TENSORWIRE_HUB_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "tensorwire" / "hub"


def _token(token: str | None) -> str | None:
    return token if token is not None else (os.environ.get("TENSORWIRE_HUB_TOKEN") or None)


def _is_loopback(url: str) -> bool:
    return is_loopback_host(urlsplit(url).hostname or "")


class _ConnectTimeout:
    """Connection mixin: connect within ``connect_timeout``, then every socket operation within ``timeout``."""

    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    timeout: Any
    sock: Any

    def connect(self) -> None:
        read = self.timeout
        self.timeout = self.connect_timeout
        try:
            super().connect()  # type: ignore[misc]
        finally:
            self.timeout = read
        if self.sock is not None:
            self.sock.settimeout(read)


class _HTTPConnection(_ConnectTimeout, http.client.HTTPConnection):
    pass


class _HTTPSConnection(_ConnectTimeout, http.client.HTTPSConnection):
    pass


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, connect_timeout: float) -> None:
        super().__init__()
        self.connect_timeout = connect_timeout

    def _connection(self, host: str, **kw: Any) -> http.client.HTTPConnection:
        conn = _HTTPConnection(host, **kw)
        conn.connect_timeout = self.connect_timeout
        return conn

    def http_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(self._connection, req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, connect_timeout: float) -> None:
        super().__init__()
        self.connect_timeout = connect_timeout

    def _connection(self, host: str, **kw: Any) -> http.client.HTTPSConnection:
        conn = _HTTPSConnection(host, **kw)
        conn.connect_timeout = self.connect_timeout
        return conn

    def https_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(self._connection, req, context=self._context)


def _opener(loopback: bool, connect_timeout: float) -> urllib.request.OpenerDirector:
    handlers: list[Any] = [_HTTPHandler(connect_timeout), _HTTPSHandler(connect_timeout)]
    if loopback:
        handlers.append(urllib.request.ProxyHandler({}))  # never send loopback traffic through a proxy
    return urllib.request.build_opener(*handlers)


def _open(req: urllib.request.Request, timeout: float | tuple[float, float] | None) -> Any:
    """Send ``req``; ``timeout`` is the read timeout (None: the default; the connect timeout comes from
    :func:`timeouts`) or a ``(connect, read)`` pair. HTTP errors become typed :class:`HubError`; a hub
    that cannot be reached, or that stops answering, ``HubUnavailable``."""
    connect, read = timeout if isinstance(timeout, tuple) else timeouts(timeout)
    opener = _opener(_is_loopback(req.full_url), min(connect, read))
    try:
        return opener.open(req, timeout=read)
    except urllib.error.HTTPError as e:
        raise _to_hub_error(e) from None
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as e:
        raise HubUnavailable(f"cannot reach the hub at {req.full_url}: {e}") from None


def read_body(resp: Any, url: str, size: int | None = None) -> bytes:
    """The body of the answer ``resp`` to a request of ``url``: all of it, or exactly ``size`` bytes. A hub that
    dies or drops the connection part-way raises ``HubUnavailable`` (never a short body, which a parser downstream
    would misread)."""
    try:
        data = resp.read() if size is None else resp.read(size)
    except (OSError, ValueError, http.client.HTTPException) as e:
        raise HubUnavailable(f"the hub's answer to {url} was cut off: {e!r}") from None
    if size is not None and len(data) != size:
        raise HubUnavailable(f"the hub's answer to {url} was cut off after {len(data)} of {size} bytes")
    return data


def _to_hub_error(e: urllib.error.HTTPError) -> HubError:
    code = e.headers.get("X-Error-Code") if e.headers else None
    message = (e.headers.get("X-Error-Message") if e.headers else None) or str(e.reason)
    with contextlib.suppress(Exception):
        body = json.loads(e.read(1 << 20).decode("utf-8"))
        if isinstance(body, dict):
            code = body.get("error") or code
            message = body.get("message") or message
    with contextlib.suppress(Exception):
        e.close()
    return error_from_code(code, f"{message} (HTTP {e.code})", e.code)


def _headers(token: str | None, **extra: str) -> dict[str, str]:
    """Headers of every request to the hub: user agent, the bearer token when there is one, and ``extra``."""
    hdrs = {"User-Agent": "tensorwire-hub-client/0.1", **extra}
    if token:
        hdrs["Authorization"] = f"Bearer {token}"
    return hdrs


def _request(
    method: str,
    url: str,
    *,
    token: str | None = None,
    body: Any = None,
    data: Any = None,
    headers: dict[str, str] | None = None,
    timeout: float | tuple[float, float] | None = None,
) -> Any:
    hdrs = _headers(token, **(headers or {}))
    if body is not None:
        data = json.dumps(body).encode()
        hdrs["Content-Type"] = "application/json"
    req = urllib.request.Request(url, data=data, method=method, headers=hdrs)
    with _open(req, timeout) as resp:
        raw = read_body(resp, url)
    return json.loads(raw.decode("utf-8")) if raw else None


def _repo_url(endpoint: str, repo_id: str) -> str:
    return f"{endpoint}/api/tw/repos/{check_repo_id(repo_id)}"


def _hash_source(src: bytes | Path) -> tuple[str, int]:
    h = hashlib.sha256()
    if isinstance(src, bytes):
        h.update(src)
        return h.hexdigest(), len(src)
    size = 0
    with open(src, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def _chunks(src: bytes | Path, bar: Any) -> Iterator[bytes]:
    f = io.BytesIO(src) if isinstance(src, bytes) else open(src, "rb")  # noqa: SIM115
    with f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            if bar is not None:
                bar.update(len(chunk))
            yield chunk


def progress_bar(total: int, desc: str, enabled: bool = True) -> Any:
    """The bar every hub transfer draws on stderr (``tqdm``, bytes with binary prefixes), or None when not
    ``enabled``: the CLI's push and download bars and the client's bars for downloads into workers."""
    if not enabled:
        return None
    from tqdm.auto import tqdm  # lazy: tqdm (and its notebook probe) only when a bar is drawn

    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=desc)


# ---------------------------------------------------------------------- push


def _push(
    repo_id: str,
    items: list[tuple[str, bytes | Path]],
    *,
    endpoint: str | None,
    token: str | None,
    revision: str,
    message: str | None,
    private: bool,
    progress: bool,
    parent: str | None,
    replace: bool,
    delete: list[str] | None = None,
) -> str:
    ep = default_endpoint(endpoint)
    tok = _token(token)
    check_repo_id(repo_id)
    check_ref_name(revision)
    if len(items) > MAX_PUSH_FILES:
        raise HubError(f"at most {MAX_PUSH_FILES} files per push")
    entries: list[dict[str, Any]] = []
    sources: dict[str, bytes | Path] = {}
    for path, src in items:
        check_file_path(path)
        sha, size = _hash_source(src)
        entries.append({"path": path, "sha256": sha, "size": size})
        sources.setdefault(sha, src)

    _request(
        "POST",
        f"{ep}/api/tw/repos",
        token=tok,
        body={"repo_id": repo_id, "private": private, "exist_ok": True},
    )
    answer = _request("POST", f"{ep}/api/tw/blobs/missing", token=tok, body={"sha256": list(sources)})
    missing: list[str] = answer["missing"]
    max_blob = int(answer.get("max_blob_size") or 0)
    sizes = {e["sha256"]: e["size"] for e in entries}
    names = {e["sha256"]: e["path"] for e in entries}
    for sha in missing:
        if max_blob and sizes[sha] > max_blob:
            raise PayloadTooLarge(f"{names[sha]} is {sizes[sha]} bytes; the hub accepts at most {max_blob}")
    bar = progress_bar(sum(sizes[s] for s in missing), f"push {repo_id}", progress)
    try:
        for sha in missing:  # names as hints let the hub validate .safetensors before storing
            src = sources[sha]
            hint = next((e["path"] for e in entries if e["sha256"] == sha and e["path"].endswith(".safetensors")), "")
            url = f"{ep}/api/tw/blobs/{sha}" + (f"?path={quote(hint, safe='')}" if hint else "")
            _request(
                "PUT",
                url,
                token=tok,
                data=_chunks(src, bar),
                headers={"Content-Length": str(sizes[sha]), "Content-Type": "application/octet-stream"},
                timeout=max(timeouts()[1], 300.0),  # the hub hashes and fsyncs the blob before it answers
            )
    finally:
        if bar is not None:
            bar.close()
    body: dict[str, Any] = {"files": entries, "mode": "replace" if replace else "merge"}
    if message is not None:
        body["message"] = message
    if parent is not None:
        body["parent"] = parent
    if delete:
        body["delete"] = delete
    out = _request("POST", f"{_repo_url(ep, repo_id)}/commit/{quote(revision, safe='')}", token=tok, body=body)
    return str(out["commit"])


def _walk(folder: Path) -> list[tuple[str, Path]]:
    out: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        rel_dir = Path(dirpath).relative_to(folder)
        # never push git internals nor huggingface_hub's local-dir metadata
        dirnames[:] = sorted(d for d in dirnames if d != ".git" and not (rel_dir == Path(".") and d == ".cache"))
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if not p.is_file():
                continue
            out.append(((rel_dir / name).as_posix(), p))
            if len(out) > MAX_PUSH_FILES:
                raise HubError(f"{folder} holds more than {MAX_PUSH_FILES} files")
    return out


def push_folder(
    repo_id: str,
    folder: str | os.PathLike,
    *,
    endpoint: str | None = None,
    token: str | None = None,
    revision: str = "main",
    message: str | None = None,
    private: bool = False,
    progress: bool = True,
    parent: str | None = None,
) -> str:
    """Push a folder (Hugging Face layout: ``config.json``, ``*.safetensors``...) as a new revision.

    The folder's files become the whole tree of the new revision on branch ``revision``
    (created if needed; the repository too, ``private`` only applies on creation). Files are
    hashed locally, only blobs the hub lacks are uploaded, then one commit is made. With
    ``parent`` the commit only succeeds if the branch still points there (else ``Conflict``).
    ``.git`` and the top-level ``.cache`` folder are skipped. Returns the new commit id.

    ``endpoint`` defaults to ``$TENSORWIRE_HUB_URL`` then ``http://127.0.0.1:8700``; ``token`` to
    ``$TENSORWIRE_HUB_TOKEN``. Raises :class:`~tensorwire.protocol.hub.errors.HubError` subclasses.
    """
    root = Path(folder)
    if not root.is_dir():
        raise FileNotFoundError(f"not a folder: {root}")
    items: list[tuple[str, bytes | Path]] = list(_walk(root))
    return _push(
        repo_id,
        items,
        endpoint=endpoint,
        token=token,
        revision=revision,
        message=message,
        private=private,
        progress=progress,
        parent=parent,
        replace=True,
    )


def push_files(
    repo_id: str,
    files: Mapping[str, bytes | str | os.PathLike],
    *,
    endpoint: str | None = None,
    token: str | None = None,
    revision: str = "main",
    message: str | None = None,
    private: bool = False,
    progress: bool = False,
    parent: str | None = None,
    replace: bool = False,
    delete: list[str] | None = None,
) -> str:
    """Push files given as ``{repo path: bytes or local path}`` as a new revision.

    By default (``replace=False``) the files are laid over the branch's current tree (other
    files are kept, ``delete`` lists paths to drop); with ``replace=True`` they are the whole
    tree. Otherwise as :func:`push_folder`. Returns the new commit id.
    """
    items: list[tuple[str, bytes | Path]] = []
    for path, src in files.items():
        items.append((path, bytes(src) if isinstance(src, (bytes, bytearray, memoryview)) else Path(src)))
    return _push(
        repo_id,
        items,
        endpoint=endpoint,
        token=token,
        revision=revision,
        message=message,
        private=private,
        progress=progress,
        parent=parent,
        replace=replace,
        delete=delete,
    )


def create_tag(
    repo_id: str, tag: str, revision: str = "main", *, endpoint: str | None = None, token: str | None = None
) -> str:
    """Tag ``revision`` (branch, tag or commit id) as ``tag``; returns the tagged commit id."""
    ep = default_endpoint(endpoint)
    check_ref_name(tag)
    check_revision(revision)
    out = _request(
        "POST", f"{_repo_url(ep, repo_id)}/tag", token=_token(token), body={"tag": tag, "revision": revision}
    )
    return str(out["commit"])


# ---------------------------------------------------------------------- read


def resolve(
    repo_id: str,
    revision: str = "main",
    *,
    endpoint: str | None = None,
    token: str | None = None,
    timeout: float | tuple[float, float] | None = None,
) -> dict[str, Any]:
    """Resolve a branch, tag or commit id of ``repo_id``.

    Returns ``{"repo_id", "revision", "commit", "parent", "message", "created_at", "private",
    "files": [{"path", "sha256", "size"}]}``. Raises ``RepositoryNotFound`` (also for a private
    repo without a valid token), ``RevisionNotFound``, ``HubUnavailable``.
    """
    ep = default_endpoint(endpoint)
    check_revision(revision)
    return _request(
        "GET",
        f"{_repo_url(ep, repo_id)}/revision/{quote(revision, safe='')}",
        token=_token(token),
        timeout=timeout,
    )


def list_repos(endpoint: str | None = None, token: str | None = None) -> list[dict[str, Any]]:
    """Repositories visible with ``token`` (private ones need a token that may read them).

    Each item: ``{"repo_id", "private", "created_at", "sha", "last_modified", "branches", "tags"}``.
    """
    return _request("GET", f"{default_endpoint(endpoint)}/api/tw/repos", token=_token(token))


# ---------------------------------------------------------------------- the download cache
#
# CACHE/blobs/<sha256>                              file contents, named by their sha256, verified on every read
# CACHE/trees/<endpoint key>/<owner>/<name>/<commit>.json   file lists of commits, per hub and repository
# CACHE/refs/<endpoint key>/<owner>/<name>/<revision>       last commit a branch or tag resolved to
#
# A file list is only ever looked up under the hub and repository it came from, so what one hub says about
# a commit id never answers for another hub; a blob is served only after its bytes hash to the name the
# (hub, repository, commit) file list gives it, so a tampered or truncated blob is never served.


def _mkdir_private(path: Path) -> None:
    """``mkdir -p`` whose new folders (parents included) are 0700: cached weights and file lists are the cluster
    user's own."""
    missing = []
    p = path
    while not p.exists() and p != p.parent:  # bounded by the path's depth
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            d.mkdir(mode=0o700)


def _write_json_atomic(path: Path, obj: Any) -> None:
    _mkdir_private(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _endpoint_key(endpoint: str) -> str:
    return hashlib.sha256(normalize_endpoint(endpoint).encode()).hexdigest()[:16]


def _ref_file(cache: Path, endpoint: str, repo_id: str, revision: str) -> Path:
    return cache / "refs" / _endpoint_key(endpoint) / repo_id.lower() / quote(revision, safe="")


def _tree_file(cache: Path, endpoint: str, repo_id: str, commit: str) -> Path:
    return cache / "trees" / _endpoint_key(endpoint) / repo_id.lower() / f"{commit}.json"


def _read_tree(cache: Path, endpoint: str, repo_id: str, commit: str) -> dict[str, Any] | None:
    tree = _read_json(_tree_file(cache, endpoint, repo_id, commit))
    if not isinstance(tree, dict) or not isinstance(tree.get("files"), dict):
        return None
    if str(tree.get("repo_id", "")).lower() != repo_id.lower() or tree.get("commit", commit) != commit:
        return None
    return tree


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    _mkdir_private(lock_path.parent)
    with open(lock_path, "a+b") as fh:
        if fcntl is None:  # pragma: no cover - non-POSIX: no cross-process lock
            yield
            return
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


DOWNLOAD_CHUNK = 8 << 20


class _HashWriter:
    """Feeds chunks to a hash and a file on a thread of its own (a bounded queue between them)."""

    def __init__(self, h, f):
        self.h, self.f = h, f
        self.q: queue.Queue = queue.Queue(maxsize=4)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="tw-hub-hash", daemon=True)

    def _run(self) -> None:
        while True:
            chunk = self.q.get()
            if chunk is None:
                return
            if self.error is None:
                try:
                    self.h.update(chunk)
                    if self.f is not None:
                        self.f.write(chunk)
                except BaseException as e:  # reported on the downloading thread
                    self.error = e

    def put(self, chunk: bytes) -> None:
        if self.error is not None:
            raise self.error
        self.q.put(chunk)

    def __enter__(self) -> _HashWriter:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.q.put(None)
        self.thread.join()
        if self.error is not None and exc[0] is None:
            raise self.error


def _download(
    url: str,
    dest: Path,
    sha256: str,
    size: int,
    *,
    token: str | None,
    progress: bool,
    desc: str,
    timeout: float | tuple[float, float] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> None:
    part = dest.with_name(dest.name + ".incomplete")
    have = part.stat().st_size if part.exists() else 0
    if have > size:
        part.unlink()
        have = 0
    h = hashlib.sha256()
    if have:
        with open(part, "rb") as f:
            for chunk in iter(lambda: f.read(CHUNK), b""):
                h.update(chunk)
    if have < size:
        headers = _headers(token, **{"Accept-Encoding": "identity"})
        if have:
            headers["Range"] = f"bytes={have}-"
        req = urllib.request.Request(url, headers=headers, method="GET")
        bar = None
        with _open(req, timeout) as resp:
            if resp.status == 200 and have:
                have = 0  # the server ignored Range: start over
                h = hashlib.sha256()
            elif resp.status == 206:
                cr = resp.headers.get("Content-Range", "")
                if not cr.startswith(f"bytes {have}-"):
                    raise HubError(f"unexpected Content-Range {cr!r} resuming at {have}")
            bar = progress_bar(size, desc, progress)
            if bar is not None:
                bar.update(have)
            if on_progress is not None:
                on_progress(have, size)
            try:
                with open(part, "r+b" if have else "wb") as f:
                    f.seek(have)
                    f.truncate()
                    left = size - have
                    # hash and write on a second thread while this one receives (both release the GIL)
                    with _HashWriter(h, f) as sink:
                        while left > 0:  # bounded: never reads more than the announced size
                            try:
                                chunk = resp.read(min(DOWNLOAD_CHUNK, left))
                            except (OSError, ValueError) as e:
                                raise HubUnavailable(f"download of {url} interrupted: {e}") from None
                            if not chunk:
                                break
                            sink.put(chunk)
                            left -= len(chunk)
                            if bar is not None:
                                bar.update(len(chunk))
                            if on_progress is not None:
                                on_progress(size - left, size)
                    f.flush()
                    os.fsync(f.fileno())
            finally:
                if bar is not None:
                    bar.close()
            if left > 0:
                raise HubUnavailable(f"download of {url} ended {left} bytes early; call again to resume")
    got = h.hexdigest()
    if got != sha256:
        with contextlib.suppress(FileNotFoundError):
            part.unlink()
        raise HashMismatch(f"downloaded bytes hash to {got}, expected {sha256} ({url})")
    os.replace(part, dest)


def _memory(size: int) -> Any:
    """An uninitialised uint8 numpy array of ``size`` bytes, which an in-memory download fills (not
    ``bytearray(size)``: no memset of memory about to be overwritten)."""
    import numpy as np  # lazy: numpy only for in-memory downloads; import tensorwire.hub stays numpy-free

    return np.empty(size, dtype=np.uint8)


def _read_verified(dest: Path, sha256: str, size: int, *, into_memory: bool) -> Any:
    """The cached blob's bytes if they hash to ``sha256`` (a private copy when ``into_memory``, else True);
    None when the file is missing, of the wrong size or tampered with (a tampered file is removed)."""
    try:
        f = open(dest, "rb")  # noqa: SIM115 - closed below
    except OSError:
        return None
    with f:
        if os.fstat(f.fileno()).st_size != size:
            bad = True
        else:
            h = hashlib.sha256()
            buf = None
            if into_memory:
                buf = _memory(size)
                view = memoryview(buf)
                got = 0
                while got < size:  # bounded by the size checked above
                    n = f.readinto(view[got : got + DOWNLOAD_CHUNK])
                    if not n:
                        break
                    h.update(view[got : got + n])
                    got += n
            else:
                for chunk in iter(lambda: f.read(DOWNLOAD_CHUNK), b""):
                    h.update(chunk)
            bad = h.hexdigest() != sha256
    if bad:  # poisoned or truncated: never serve it; drop it so that it is fetched again
        with contextlib.suppress(OSError):
            dest.unlink()
        return None
    return buf if into_memory else True


def fetch(
    repo_id: str,
    path: str,
    *,
    revision: str = "main",
    endpoint: str | None = None,
    token: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    progress: bool = False,
    into_memory: bool = False,
    revalidate: bool = False,
    timeout: float | tuple[float, float] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> Any:
    """Download one file of a revision into the local cache and return its path.

    The cache (``cache_dir``, else ``$TENSORWIRE_HUB_CACHE``, else ``~/.cache/tensorwire/hub``, created 0700)
    holds ``blobs/<sha256>`` plus the file lists of the commits seen, keyed by hub endpoint, repository and
    commit. A cached file is served only after its bytes hash to its sha256 (on every read); a file that
    does not is removed and downloaded again. A commit-id ``revision`` already seen on this endpoint needs
    no request at all (unless ``revalidate``), and a branch or tag falls back on the last commit it resolved
    to if the hub is unreachable. Partial downloads resume with ``Range``; the bytes are verified against
    the sha256 before being moved into place atomically (``HashMismatch`` otherwise).

    ``revalidate=True`` always asks the hub for the revision with ``token`` (so the hub decides, on every
    call, whether this token may read the repository) and never falls back on cached file lists; workers
    loading for a client use it. ``timeout`` is the read timeout or a ``(connect, read)`` pair (see
    :func:`timeouts`).

    ``into_memory=True`` returns the verified bytes (a numpy ``uint8`` array) instead of a path: read from the
    cache, or downloaded into memory while a background thread also writes them into the cache, so a
    worker loading weights waits for the network and the hash, not for the disk.

    ``on_progress(done, total)`` is called with the bytes received so far as a download proceeds (once when it
    starts, then per chunk received; never for a file served from the cache), on the calling thread.
    """
    check_repo_id(repo_id)
    check_file_path(path)
    check_revision(revision)
    ep = default_endpoint(endpoint)
    tok = _token(token)
    cache = default_cache_dir(cache_dir)
    tree: dict[str, Any] | None = None
    commit: str | None = revision if COMMIT_RE.fullmatch(revision) else None
    if commit is not None and not revalidate:
        tree = _read_tree(cache, ep, repo_id, commit)
    if tree is None:
        try:
            meta = resolve(repo_id, revision, endpoint=ep, token=tok, timeout=timeout)
        except HubUnavailable:
            if revalidate:
                raise
            if commit is None:
                cached = _read_json(_ref_file(cache, ep, repo_id, revision))
                commit = cached if isinstance(cached, str) and COMMIT_RE.fullmatch(cached) else None
            tree = _read_tree(cache, ep, repo_id, commit) if commit else None
            if tree is None:
                raise
        else:
            if not isinstance(meta, dict) or not COMMIT_RE.fullmatch(str(meta.get("commit"))):
                raise HubError(f"the hub at {ep} answered a malformed revision for {repo_id}@{revision}")
            if commit is not None and meta["commit"] != commit:
                raise HubError(f"the hub at {ep} answered commit {meta['commit']} for revision {commit}")
            commit = meta["commit"]
            tree = {
                "repo_id": repo_id,
                "commit": commit,
                "files": {f["path"]: [f["sha256"], f["size"]] for f in meta["files"]},
            }
            _write_json_atomic(_tree_file(cache, ep, repo_id, commit), tree)
            if revision != commit:
                _write_json_atomic(_ref_file(cache, ep, repo_id, revision), commit)
    assert tree is not None and commit is not None
    entry = tree["files"].get(path)
    if entry is None:
        raise EntryNotFound(f"{path!r} not found in {repo_id} at revision {commit}")
    sha256, size = str(entry[0]), int(entry[1])
    if not SHA256_RE.fullmatch(sha256) or size < 0:
        raise HubError(f"the file list of {repo_id}@{commit} names {path!r} with a malformed sha256 or size")
    blobs = cache / "blobs"
    dest = blobs / sha256
    url = f"{ep}/{repo_id}/resolve/{commit}/{quote(path)}"
    if into_memory:
        return _fetch_to_memory(url, dest, sha256, size, tok, timeout, on_progress)
    if _read_verified(dest, sha256, size, into_memory=False):
        return dest
    _mkdir_private(blobs)
    with _locked(blobs / f"{sha256}.lock"):
        if _read_verified(dest, sha256, size, into_memory=False):
            return dest
        _download(
            url,
            dest,
            sha256,
            size,
            token=tok,
            progress=progress,
            desc=path.rsplit("/", 1)[-1],
            timeout=timeout,
            on_progress=on_progress,
        )
    return dest


def _fetch_to_memory(
    url: str,
    dest: Path,
    sha256: str,
    size: int,
    token: str | None,
    timeout: float | tuple[float, float] | None,
    on_progress: Callable[[int, int], None] | None = None,
):
    """The file's verified bytes: read from the cache (and hashed), or downloaded into memory, verified, and
    returned at once while a background thread writes them into the cache (so a loader need not wait for
    the disk)."""
    cached = _read_verified(dest, sha256, size, into_memory=True)
    if cached is not None:
        return cached
    buf = _memory(size)
    view = memoryview(buf)
    h = hashlib.sha256()
    headers = _headers(token, **{"Accept-Encoding": "identity"})
    got = 0
    with _open(urllib.request.Request(url, headers=headers), timeout) as resp, _HashWriter(h, None) as sink:
        if on_progress is not None:
            on_progress(0, size)
        while got < size:  # bounded by the announced size
            try:
                n = resp.readinto(view[got : got + DOWNLOAD_CHUNK])
            except (OSError, ValueError) as e:
                raise HubUnavailable(f"download of {url} interrupted: {e}") from None
            if not n:
                break
            sink.put(view[got : got + n])
            got += n
            if on_progress is not None:
                on_progress(got, size)
    if got < size:
        raise HubUnavailable(f"download of {url} ended {size - got} bytes early")
    digest = h.hexdigest()
    if digest != sha256:
        raise HashMismatch(f"downloaded bytes hash to {digest}, expected {sha256} ({url})")

    def write_cache() -> None:  # best effort: the bytes are verified and already in use
        try:
            _mkdir_private(dest.parent)
            with _locked(dest.parent / f"{sha256}.lock"):
                if dest.is_file() and dest.stat().st_size == size:
                    return
                part = dest.with_name(dest.name + f".{os.getpid()}.incomplete")
                with open(part, "wb") as f:
                    f.write(view)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(part, dest)
        except OSError:
            pass

    threading.Thread(target=write_cache, name="tw-hub-cache", daemon=True).start()
    return buf
