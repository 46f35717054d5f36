"""Where every process finds its credentials: tokens come from environment variables or files, never from
command-line values (those show in ``ps``).

Three tokens, each allowing something different (docs/security.md):

* the **client token** (``TENSORWIRE_TOKEN`` / ``--token-file``): may open sessions;
* the **admin token** (``TENSORWIRE_ADMIN_TOKEN`` / ``--admin-token-file``): may open sessions that see the
  whole cluster in ``stats`` (every session's buffers);
* the **service token** (``TENSORWIRE_SERVICE_TOKEN`` / ``--service-token-file``, or ``KEYS/service.token``):
  may register a worker, autograd or collectives service. Clients never hold it.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from .errors import Unauthorized

CLIENT_TOKEN_ENV = "TENSORWIRE_TOKEN"
ADMIN_TOKEN_ENV = "TENSORWIRE_ADMIN_TOKEN"
SERVICE_TOKEN_ENV = "TENSORWIRE_SERVICE_TOKEN"
#: the file in a keys directory (``tensorwire keys``) that holds the service token
SERVICE_TOKEN_FILE = "service.token"
#: the files ``tensorwire keys --tokens`` adds for the dispatcher's ``--token-file`` and ``--admin-token-file``
CLIENT_TOKEN_FILE = "client.token"
ADMIN_TOKEN_FILE = "admin.token"


def new_token() -> str:
    """A fresh random token (256 bits, URL-safe text)."""
    return secrets.token_urlsafe(32)


def read_token_file(path: str | os.PathLike) -> str:
    """The token stored in ``path`` (surrounding whitespace removed); an empty or unreadable file is an error."""
    try:
        text = Path(path).read_text().strip()
    except OSError as e:
        raise Unauthorized(f"cannot read the token file {path}: {e.strerror}") from None
    if not text:
        raise Unauthorized(f"the token file {path} is empty")
    return text


def write_token_file(path: str | os.PathLike, token: str) -> Path:
    """Write ``token`` to ``path``, readable by its owner only (created 0600, never world-readable)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.chmod(path, 0o600)
    return path


def ensure_token_file(path: str | os.PathLike) -> bool:
    """Write a fresh token to ``path`` (0600) unless it already holds one; True when it wrote one."""
    p = Path(path)
    if p.is_file() and p.read_text().strip():
        return False
    write_token_file(p, new_token())
    return True


def resolve_token(
    env: str,
    file: str | os.PathLike | None = None,
    *,
    keys: str | os.PathLike | None = None,
    keys_name: str | None = None,
) -> str | None:
    """A token from (in this order) ``file``, the environment variable ``env``, or ``keys/keys_name``; None if
    none is set."""
    if file:
        return read_token_file(file)
    value = os.environ.get(env)
    if value:
        return value
    if keys and keys_name and (Path(keys) / keys_name).is_file():
        return read_token_file(Path(keys) / keys_name)
    return None


def service_token(file: str | os.PathLike | None = None, keys: str | os.PathLike | None = None) -> str | None:
    """The service credential of a service process or the dispatcher (see the module docstring)."""
    return resolve_token(SERVICE_TOKEN_ENV, file, keys=keys, keys_name=SERVICE_TOKEN_FILE)
