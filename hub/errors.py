"""The hub's typed errors, under the name the hub's documentation gives them (``tensorwire.hub.errors``).

They are defined in :mod:`tensorwire.protocol.hub.errors`, below both the client and this package (the client,
the workers and the hub's server raise and catch them); ``tensorwire.hub`` exports them too.
"""

from __future__ import annotations

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
    error_from_code,
)

__all__ = [
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
    "error_from_code",
]
