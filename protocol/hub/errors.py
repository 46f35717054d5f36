"""Typed errors of the model hub, shared by the server and the HTTP client helpers.

Each class carries a stable ``code`` (the ``error`` field of the hub's JSON error body) and
the HTTP ``status`` the server answers with.  The hierarchy is a plain ``Exception`` tree for
now; the core will later re-parent :class:`HubError` under ``tw.TensorwireError``.
"""

from __future__ import annotations

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


class HubError(Exception):
    """Base class of every hub error; ``code`` is the stable wire code, ``status`` the HTTP status."""

    code: str = "HubError"
    status: int = 500

    def __init__(self, message: str = "", *, status: int | None = None) -> None:
        super().__init__(message or self.code)
        self.message = message or self.code
        if status is not None:
            self.status = status


class BadRequest(HubError):
    """The request is malformed (bad JSON, missing field, bad header)."""

    code = "BadRequest"
    status = 400


class InvalidPath(BadRequest):
    """A repository id, revision name or file path is not acceptable (traversal, bad characters...)."""

    code = "InvalidPath"


class HashMismatch(BadRequest):
    """Uploaded or downloaded bytes do not hash to the announced sha256."""

    code = "HashMismatch"


class InvalidSafetensors(BadRequest):
    """A ``.safetensors`` file has a truncated or lying header."""

    code = "InvalidSafetensors"


class Unauthorized(HubError):
    """No token, or a token the hub does not know (HTTP 401)."""

    code = "Unauthorized"
    status = 401


class Forbidden(Unauthorized):
    """A known token that lacks the permission (e.g. a read-only token used to push; HTTP 403)."""

    code = "Forbidden"
    status = 403


class RepositoryNotFound(HubError):
    """The repository does not exist, or it is private and the caller may not read it."""

    code = "RepoNotFound"
    status = 404


class RevisionNotFound(HubError):
    """The repository exists but the branch, tag or commit id does not."""

    code = "RevisionNotFound"
    status = 404


class EntryNotFound(HubError):
    """The revision exists but the file does not."""

    code = "EntryNotFound"
    status = 404


class Conflict(HubError):
    """Optimistic-concurrency failure (the branch moved) or an existing tag/repository."""

    code = "Conflict"
    status = 409


class PayloadTooLarge(HubError):
    """A request body is larger than the hub accepts."""

    code = "PayloadTooLarge"
    status = 413


class HubUnavailable(HubError):
    """The hub could not be reached (connection refused, timeout, connection dropped)."""

    code = "Unavailable"
    status = 503


_BY_CODE: dict[str, type[HubError]] = {
    cls.code: cls
    for cls in (
        HubError,
        BadRequest,
        InvalidPath,
        HashMismatch,
        InvalidSafetensors,
        Unauthorized,
        Forbidden,
        RepositoryNotFound,
        RevisionNotFound,
        EntryNotFound,
        Conflict,
        PayloadTooLarge,
        HubUnavailable,
    )
}

_BY_STATUS: dict[int, type[HubError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: RepositoryNotFound,
    409: Conflict,
    413: PayloadTooLarge,
}


def error_from_code(code: str | None, message: str, status: int) -> HubError:
    """Build the typed error for a wire ``code`` (falling back on the HTTP ``status``)."""
    cls = _BY_CODE.get(code or "") or _BY_STATUS.get(status, HubError)
    return cls(message, status=status)
