"""The one logging switch: ``TENSORWIRE_LOG=warning|info|debug`` (default ``warning``).

Every process logs through the ``logging`` module under ``tensorwire.*`` names (``tensorwire.dispatcher``,
``tensorwire.worker``, ``tensorwire.hub`` ...). A service calls :func:`configure` once at start; its lines go to
stderr (``LocalCluster`` and ``tensorwire up`` put each service's stderr in ``<log_dir>/<service>.log``). A client
program's ``tensorwire.*`` loggers get a handler only when the variable is set (a library leaves logging alone
otherwise). What each level says is in ``docs/observability.md``.
"""

from __future__ import annotations

import logging
import os
import sys

LOG_ENV = "TENSORWIRE_LOG"
DEFAULT_LEVEL = "warning"
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
FORMAT = "%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s"


def level_from_env(value: str | None = None) -> tuple[int, str | None]:
    """The level ``TENSORWIRE_LOG`` names (case-insensitive; a number is taken as a logging level) and, when the
    value is not one, a line saying so (the level is then the default)."""
    text = (os.environ.get(LOG_ENV, "") if value is None else value).strip().lower()
    if not text:
        return LEVELS[DEFAULT_LEVEL], None
    if text in LEVELS:
        return LEVELS[text], None
    if text == "warn":
        return logging.WARNING, None
    if text.isdigit():
        return int(text), None
    return LEVELS[DEFAULT_LEVEL], (
        f"{LOG_ENV}={text!r} is not a level: use one of {', '.join(LEVELS)}; logging at {DEFAULT_LEVEL}"
    )


def configure(stream=None) -> int:
    """Configure a service process's logging from ``TENSORWIRE_LOG`` (root handler on stderr, one format for all
    services); returns the level."""
    level, problem = level_from_env()
    logging.basicConfig(level=level, format=FORMAT, stream=stream or sys.stderr, force=True)
    if problem:
        logging.getLogger("tensorwire").warning(problem)
    return level


def configure_client() -> None:
    """In a client program: when ``TENSORWIRE_LOG`` is set, give the ``tensorwire`` logger a stderr handler at that
    level (once); when it is not, leave the program's logging configuration alone."""
    if not os.environ.get(LOG_ENV):
        return
    root = logging.getLogger("tensorwire")
    if any(getattr(h, "_tensorwire", False) for h in root.handlers):
        return
    level, problem = level_from_env()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    handler._tensorwire = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
    if problem:
        root.warning(problem)
