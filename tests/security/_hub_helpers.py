"""Helpers of the hub security tests: an attacker's listener on loopback and the hub subprocess of tests/hub."""

from __future__ import annotations

import socket
import threading

from tests.hub.conftest import HubProcess  # noqa: F401  (re-exported: the real hub as a subprocess)


class Listener:
    """A TCP listener on 127.0.0.1 that records every connection and the bytes it receives.

    ``answer=None`` keeps connections open and silent (a hub that hangs); bytes given as ``answer`` are sent once a
    request head arrived (an attacker's server). ``connections`` and ``received`` say what reached it.
    """

    def __init__(self, answer: bytes | None = None) -> None:
        self.answer = answer
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections = 0
        self.received = b""
        self._conns: list[socket.socket] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():  # bounded by close()
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with self._lock:
                self.connections += 1
                self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(0.2)
        data = b""
        while not self._stop.is_set() and len(data) < 1 << 20:  # bounded by close() and the size cap
            try:
                chunk = conn.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not chunk:
                return
            data += chunk
            with self._lock:
                self.received += chunk
            if self.answer is not None and b"\r\n\r\n" in data:
                conn.sendall(self.answer)
                conn.close()
                return

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()
        with self._lock:
            for c in self._conns:
                c.close()


def closed_port_url() -> str:
    """A loopback URL where nothing listens (the port was just freed)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"
