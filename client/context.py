"""The default session: ``tw.connect`` and what module-level functions use."""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

from tensorwire.protocol.service import EXEC_THREADS_ENV

# the module, not its names: a program that imports tensorwire.session first reaches this module half-way through
# session (session -> tensor -> the modules that add Tensor's methods, client/_install.py -> creation -> here)
from . import session as _session

if TYPE_CHECKING:
    from .session import Session

_default: Session | None = None


class _Local(threading.local):
    """Each thread's ``use_session`` session: None unless set (a class attribute, so a thread that never set one
    reads None without the failed lookup ``getattr(local, name, default)`` costs: every module-level function that
    records reads it)."""

    session = None


_local = _Local()
_lock = threading.Lock()

#: the embedded cluster's settings, for the next ``connect()`` without an address (None: the cluster's defaults):
#: its workers' BLAS/OpenMP threads (``tw.set_num_threads``) and their batch pools' threads
#: (``tw.set_num_interop_threads``), see client/torch_settings.py
embedded_threads: int | None = None
embedded_exec_threads: int | None = None


def connect(address: str | None = None, token: str | None = None, *, timeout: float | None = None,
            devices=None, keys: str | os.PathLike | None = None) -> Session:
    """Connect to a dispatcher and make the session the default one; returns the :class:`Session`.

    With no ``address``: ``TENSORWIRE_ADDRESS`` if set, otherwise a :class:`LocalCluster` started for
    this session (the embedded default, devices ``cpu:0`` unless ``devices=`` says otherwise; its workers' threads
    as ``tw.set_num_threads`` and ``tw.set_num_interop_threads`` said), which stops when the session closes or the
    interpreter exits. ``token`` falls back to
    ``TENSORWIRE_TOKEN``; ``keys`` (a CURVE keys directory, see docs/security.md) to ``TENSORWIRE_KEYS``.
    """
    global _default
    address = address or os.environ.get("TENSORWIRE_ADDRESS")
    token = token if token is not None else os.environ.get("TENSORWIRE_TOKEN")
    cluster = None
    if not address:
        from .cluster import LocalCluster  # lazy: the embedded cluster's module, for a connect without an address

        env = {EXEC_THREADS_ENV: str(embedded_exec_threads)} if embedded_exec_threads is not None else None
        cluster = LocalCluster(devices=devices or ("cpu:0",), worker_threads=embedded_threads, extra_env=env)
        address = cluster.address
    try:
        s = _session.Session(address, token, timeout=timeout, cluster=cluster, keys=keys)
    except Exception:
        if cluster is not None:
            cluster.close()
        raise
    if cluster is not None:
        _orig_close = s.close

        def close_with_cluster():
            _orig_close()
            cluster.close()

        s.close = close_with_cluster
    with _lock:
        _default = s
    return s


def current_session() -> Session:
    """The session module-level functions use (a thread's ``use_session`` one, else the default).

    The first use without ``tw.connect()`` connects as ``tw.connect()`` with no arguments would.
    """
    s = _local.session
    if s is not None:
        return s
    if _default is None or _default.closed:
        with _lock:
            if _default is None or _default.closed:
                pass
        connect()
    return _default


def set_session(s: Session | None) -> None:
    """Make ``s`` the default session (``None`` forgets the default)."""
    global _default
    _default = s


class use_session:  # noqa: N801
    """``with tw.use_session(s):`` makes ``s`` the session module-level functions use in this thread."""

    def __init__(self, s: Session):
        self.s = s

    def __enter__(self):
        self.prev = _local.session
        _local.session = self.s
        return self.s

    def __exit__(self, *exc):
        _local.session = self.prev


def disconnect() -> None:
    """Close the default session (and its embedded cluster, if it started one)."""
    global _default
    if _default is not None:
        _default.close()
        _default = None
