"""The worker's side of the ``hub_tensor`` op: weights come only from the hub the cluster configured.

A worker downloads from exactly one hub, the cluster's: ``tensorwire worker --hub-url URL`` (``LocalCluster`` and
``tensorwire up`` pass it), else ``$TENSORWIRE_HUB_URL``. A client never chooses where a worker connects: a
``hub_tensor`` that names another endpoint is refused with ``Unauthorized`` before any connection is made, and a
worker with no hub configured refuses every ``hub_tensor``.

Credentials. The client's hub token (the op's ``token`` attribute) is used when there is one, so the hub decides
with the client's own rights; otherwise the worker's own token (``--hub-token-file`` / ``$TENSORWIRE_HUB_TOKEN_FILE``,
else ``$TENSORWIRE_HUB_TOKEN``), which should therefore be a read token scoped to what every user of the cluster may
load. Either token is only ever sent to the configured endpoint.

Every load asks the hub for the revision with that token (``fetch(..., revalidate=True)``), so a private
repository one session could read is not served to another from the worker's cache; the bytes come from the
verified cache when present. Requests are bounded (connect and read timeouts, see
``tensorwire.protocol.hub.client``), and a hub that cannot be reached gives one fixed error text, whatever the reason,
so errors tell nothing about ports.

Progress. A ``hub_tensor`` whose ``progress`` attribute holds the client's id for the load has its download reported
to that session (``tensorwire.protocol.progress``): the executor says where reports go for the batch it runs
(``reports.to``), and a download that matters is reported at a bounded rate. Files served from memory or from
the verified cache report nothing.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
import weakref
from dataclasses import dataclass, field

import numpy as np

from tensorwire.protocol.errors import (
    DeviceError,
    ExecutionError,
    NotFound,
    ProtocolError,
    ServiceUnavailable,
    Unauthorized,
)
from tensorwire.protocol.hub.client import fetch, normalize_endpoint, timeouts
from tensorwire.protocol.hub.errors import (
    EntryNotFound,
    HashMismatch,
    HubError,
    HubUnavailable,
    InvalidPath,
    RepositoryNotFound,
    RevisionNotFound,
)
from tensorwire.protocol.hub.errors import Unauthorized as HubUnauthorized
from tensorwire.protocol.progress import Reporter, valid_id
from tensorwire.protocol.safetensors_io import load_buffer

log = logging.getLogger("tensorwire.worker.hub")

ENV_URL = "TENSORWIRE_HUB_URL"
ENV_TOKEN = "TENSORWIRE_HUB_TOKEN"
ENV_TOKEN_FILE = "TENSORWIRE_HUB_TOKEN_FILE"
#: a worker's read timeout towards the hub, in seconds, unless ``$TENSORWIRE_HUB_READ_TIMEOUT`` says otherwise
WORKER_READ_TIMEOUT = 30.0
UNREACHABLE = "the cluster's hub did not answer (unreachable or too slow); the worker's log has the details"


@dataclass(frozen=True)
class HubConfig:
    """The hub a worker downloads from (``endpoint`` normalized; None: none configured) and its own token."""

    endpoint: str | None
    token: str | None = field(default=None, repr=False)


_config: HubConfig | None = None
_lock = threading.Lock()
#: per thread, ``reports.to``: ``(report, sid, pooled)`` while this thread runs a batch of session ``sid``, set by the
#: executor around each run; ``report(sid, pooled, fields)`` sends that session the fields of a ``progress`` message
#: (``tensorwire.protocol.progress``). None or unset: nobody to report to.
reports = threading.local()
#: (token key, repo, commit, path) -> the verified bytes of a file, while any tensor made from it is alive
_FILES: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _read_token_file(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError as e:
        raise DeviceError(f"cannot read the hub token file {path}: {e.strerror}") from None


def configure(endpoint: str | None, *, token: str | None = None, token_file: str | None = None) -> HubConfig:
    """Set the cluster's hub for this worker process (call once at start; later calls replace it)."""
    global _config
    if token is None and token_file:
        token = _read_token_file(token_file)
    try:
        ep = normalize_endpoint(endpoint) if endpoint else None
    except HubError as e:
        raise DeviceError(f"invalid hub URL for this worker: {e.message}") from None
    with _lock:
        _config = HubConfig(ep, token or None)
        _FILES.clear()
    return _config


def config() -> HubConfig:
    """This worker's hub configuration (read from the environment on first use if ``configure`` was not called)."""
    if _config is None:
        configure(
            os.environ.get(ENV_URL) or None,
            token=os.environ.get(ENV_TOKEN) or None,
            token_file=os.environ.get(ENV_TOKEN_FILE) or None,
        )
    assert _config is not None
    return _config


def _check_endpoint(cfg: HubConfig, asked: object) -> str:
    """The configured endpoint, after checking the one the client named (if any) is the same hub."""
    if cfg.endpoint is None:
        raise Unauthorized("this worker has no hub configured (tensorwire worker --hub-url URL, or TENSORWIRE_HUB_URL)")
    if asked is None or asked == "":
        return cfg.endpoint
    if not isinstance(asked, str):
        raise ProtocolError("attribute 'endpoint' must be a string")
    try:
        same = normalize_endpoint(asked) == cfg.endpoint
    except HubError:
        same = False
    if not same:
        raise Unauthorized(
            "hub_tensor names a hub other than the cluster's; workers download only from the hub they are configured "
            "with (leave the endpoint out to use it)"
        )
    return cfg.endpoint


def _reporter(attrs: dict, what: str):
    """A rate-bounding reporter for this download, or None (no id in the op, or nobody to report to)."""
    pid = attrs.get("progress")
    to = getattr(reports, "to", None)
    if to is None or not valid_id(pid):
        return None
    report, sid, pooled = to

    def emit(fields: dict) -> None:  # a report that cannot be sent never fails the download
        try:
            report(sid, pooled, fields)
        except Exception as e:
            log.debug("hub: a progress report for %s was not sent: %s", what, e)

    return Reporter(emit, pid, what)


def load_file(attrs: dict) -> np.ndarray:
    """The verified bytes of the safetensors file a ``hub_tensor`` op names, from the cluster's hub."""
    cfg = config()
    endpoint = _check_endpoint(cfg, attrs.get("endpoint"))
    client_token = attrs.get("token")
    if client_token is not None and not isinstance(client_token, str):
        raise ProtocolError("attribute 'token' must be a string")
    token = client_token or cfg.token
    key = (hashlib.sha256(token.encode()).hexdigest() if token else "", attrs["repo"], attrs["commit"], attrs["path"])
    raw = _FILES.get(key)
    if raw is not None:
        return raw
    what = f"{attrs['repo']}/{attrs['path']}@{str(attrs['commit'])[:12]}"
    log.info("hub: loading %s from %s", what, endpoint)  # (and the client a bar, when it asked for progress)
    reporter = _reporter(attrs, what)
    t0 = time.monotonic()
    ok = False
    try:
        buf = fetch(
            attrs["repo"],
            attrs["path"],
            revision=attrs["commit"],
            endpoint=endpoint,
            token=token or "",  # "" : never fall back on a token from this process's environment
            into_memory=True,
            revalidate=True,
            timeout=timeouts(WORKER_READ_TIMEOUT),
            on_progress=None if reporter is None else reporter.update,
        )
        ok = True
    except HubUnavailable as e:
        log.warning("hub %s: %s", endpoint, e.message)
        raise ServiceUnavailable(UNREACHABLE) from None
    except InvalidPath as e:
        raise ProtocolError(f"hub_tensor: {e.message}") from None
    except (RepositoryNotFound, RevisionNotFound, EntryNotFound) as e:
        raise NotFound(f"hub: {e.message}") from None
    except HubUnauthorized as e:  # Forbidden included
        raise Unauthorized(f"hub: {e.message}") from None
    except HashMismatch as e:
        raise ExecutionError(f"hub: {e.message}") from None
    except HubError as e:
        raise ExecutionError(f"hub: {e.code}: {e.message}") from None
    finally:
        if reporter is not None:  # the download's last report: complete, or where it stopped
            reporter.finish(ok)
    took = max(time.monotonic() - t0, 1e-6)
    log.info("hub: loaded %s: %.1f MB in %.2f s (%.1f MB/s; a cached file is only revalidated)", what,
             len(buf) / 1e6, took, len(buf) / 1e6 / took)
    raw = np.frombuffer(buf, dtype=np.uint8) if len(buf) else np.zeros(0, np.uint8)
    _FILES[key] = raw
    return raw


def load_tensor(attrs: dict, shape: tuple, dtype) -> np.ndarray:
    """Tensor ``attrs["name"]`` of the file, checked against the ``shape`` and ``dtype`` the client recorded."""
    raw = load_file(attrs)
    arr = load_buffer(raw, names={attrs["name"]}).get(attrs["name"])
    if arr is None:
        raise NotFound(f"tensor {attrs['name']!r} is not in {attrs['repo']}/{attrs['path']}")
    if tuple(arr.shape) != tuple(shape) or arr.dtype != dtype.np:
        raise ProtocolError(
            f"tensor {attrs['name']!r} is {arr.dtype}{list(arr.shape)} in the file, not {dtype.name}{list(shape)}"
        )
    return arr


__all__ = ["HubConfig", "configure", "config", "load_file", "load_tensor", "WORKER_READ_TIMEOUT"]
