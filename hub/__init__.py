"""tensorwire model hub: client helpers (this package) and the hub service (``server``, ``cli``).

``import tensorwire.hub`` is light: it loads only the urllib-based client helpers and the
error types (:mod:`tensorwire.protocol.hub.client`, :mod:`~tensorwire.protocol.hub.errors`). The HTTP server
(:mod:`tensorwire.hub.server`) and the SQLite storage (:mod:`tensorwire.protocol.hub.storage`) are imported only by
whoever runs the service; the tensor side (:mod:`tensorwire.hub.tensors`: ``load``, ``load_state_dict``, ``push``,
which need the client and numpy) when one of its names is first used. What the client, a local cluster and the
workers need of the hub lives in :mod:`tensorwire.protocol.hub`, outside this package: this package depends on the
client (its tensor side), the client never on this package.

Typical use::

    from tensorwire import hub
    commit = hub.push_folder("acme/bert-tiny", "./my-bert", endpoint="http://127.0.0.1:8700", token=tok)
    path = hub.fetch("acme/bert-tiny", "model.safetensors", endpoint="http://127.0.0.1:8700")

The hub also speaks the read side of the Hugging Face Hub API, so
``HF_ENDPOINT=http://127.0.0.1:8700`` makes ``huggingface_hub.snapshot_download`` work against it.
"""

from __future__ import annotations

from tensorwire.protocol.hub.client import (
    DEFAULT_ENDPOINT,
    create_tag,
    default_cache_dir,
    default_endpoint,
    fetch,
    list_repos,
    push_files,
    push_folder,
    resolve,
)
from tensorwire.protocol.hub.errors import (
    BadRequest,
    Conflict,
    EntryNotFound,
    Forbidden,
    HashMismatch,
    HubError,
    HubUnavailable,
    InvalidPath,
    InvalidSafetensors,
    PayloadTooLarge,
    RepositoryNotFound,
    RevisionNotFound,
    Unauthorized,
)

#: the names :mod:`.tensors` gives, imported from it when first asked for
_TENSORS = frozenset({"load", "load_state_dict", "push", "remote_header"})


def __getattr__(name: str):
    if name in _TENSORS:
        # lazy: hub.tensors imports the client and numpy; the hub service and the workers import this package
        from . import tensors

        return getattr(tensors, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _TENSORS)


__all__ = [
    "DEFAULT_ENDPOINT",
    "load",
    "load_state_dict",
    "push",
    "push_folder",
    "push_files",
    "resolve",
    "fetch",
    "list_repos",
    "create_tag",
    "default_endpoint",
    "default_cache_dir",
    "HubError",
    "BadRequest",
    "InvalidPath",
    "HashMismatch",
    "InvalidSafetensors",
    "Unauthorized",
    "Forbidden",
    "RepositoryNotFound",
    "RevisionNotFound",
    "EntryNotFound",
    "Conflict",
    "PayloadTooLarge",
    "HubUnavailable",
]
