"""Fixtures for the hub tests: a real hub server subprocess per module, raw HTTP helpers."""

from __future__ import annotations

import atexit
import http.client
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pytest

# huggingface_hub reads these at import time: isolate it from the user's cache, token and offline mode.
os.environ.pop("HF_HUB_OFFLINE", None)
os.environ.pop("HF_TOKEN", None)
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="tw-hub-hfhome-")
atexit.register(shutil.rmtree, os.environ["HF_HOME"], ignore_errors=True)  # (each test run made one and left it)
os.environ.pop("TENSORWIRE_HUB_TOKEN", None)
os.environ.pop("TENSORWIRE_HUB_URL", None)

READY_TIMEOUT = 30.0


class HubProcess:
    """A ``python -m tensorwire.hub`` subprocess on a free port, plus helpers to poke it."""

    def __init__(self, root: Path, *extra: str) -> None:
        self.root = Path(root)
        self.extra = extra
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def start(self) -> HubProcess:
        self.root.mkdir(parents=True, exist_ok=True)
        self._stderr = open(self.root.parent / f"{self.root.name}.stderr", "ab")  # noqa: SIM115
        cmd = [sys.executable, "-m", "tensorwire.hub", "--root", str(self.root), "--port", "0", "--quiet"]
        self.proc = subprocess.Popen([*cmd, *self.extra], stdout=subprocess.PIPE, stderr=self._stderr)
        assert self.proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + READY_TIMEOUT
        line = b""
        while time.monotonic() < deadline:  # wait for the READY line, never sleep-poll
            if not sel.select(timeout=deadline - time.monotonic()):
                break
            line = self.proc.stdout.readline()
            if not line or line.startswith(b"TENSORWIRE-READY "):
                break
        sel.close()
        if not line.startswith(b"TENSORWIRE-READY "):
            self.kill()
            raise RuntimeError(f"hub did not become ready: {line!r}")
        info = json.loads(line.split(b" ", 1)[1])
        assert info["service"] == "hub"
        self.url = info["url"]
        return self

    def stop(self) -> int:
        """SIGTERM and wait; returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        self._close()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=15)
        self._close()

    def _close(self) -> None:
        assert self.proc is not None
        if self.proc.stdout:
            self.proc.stdout.close()
        self._stderr.close()

    # ----------------------------------------------------------- raw HTTP

    def http(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        """Send one request with http.client, the path sent verbatim (no normalisation)."""
        parts = urlsplit(self.url)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        hdrs = dict(headers or {})
        if token:
            hdrs["Authorization"] = f"Bearer {token}"
        if body is not None and not isinstance(body, bytes):
            body = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        try:
            conn.request(method, path, body=body, headers=hdrs)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
        finally:
            conn.close()

    def json(self, method: str, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        status, _, data = self.http(method, path, body, **kw)
        return status, (json.loads(data) if data else None)

    # ----------------------------------------------------------- store inspection

    def blob_count(self) -> int:
        return sum(1 for p in (self.root / "blobs").rglob("*") if p.is_file())

    def state(self) -> tuple[int, dict[str, Any]]:
        """(blob count, {repo: refs}) read straight from the store, for "nothing changed" checks."""
        import sqlite3

        db = sqlite3.connect(self.root / "index.sqlite")
        try:
            refs = sorted(db.execute("SELECT repo, kind, name, commit_id FROM refs").fetchall())
            n_commits = db.execute("SELECT COUNT(*) FROM commits").fetchone()[0]
            repos = sorted(db.execute("SELECT name, private FROM repos").fetchall())
        finally:
            db.close()
        return self.blob_count(), {"refs": refs, "commits": n_commits, "repos": repos}


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubProcess]:
    """A running hub with a write token (``hub.token``) and a read-only token (``hub.read_token``)."""
    from tensorwire.hub.server import create_token

    root = tmp_path_factory.mktemp("hub") / "root"
    root.mkdir()
    proc = HubProcess(root)
    proc.token = create_token(root, "writer", write=True)  # type: ignore[attr-defined]
    proc.read_token = create_token(root, "reader", write=False)  # type: ignore[attr-defined]
    proc.start()
    try:
        yield proc
    finally:
        assert proc.stop() == 0


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model folder in Hugging Face layout."""
    import safetensors.numpy as stnp

    d = tmp_path_factory.mktemp("model") / "my-bert"
    d.mkdir()
    rng = np.random.default_rng(0)
    stnp.save_file(
        {
            "embeddings.weight": rng.standard_normal((32, 16)).astype(np.float32),
            "encoder.bias": np.arange(16, dtype=np.float16),
        },
        str(d / "model.safetensors"),
        metadata={"format": "np"},
    )
    (d / "config.json").write_text(json.dumps({"architectures": ["BertModel"], "model_type": "bert"}))
    (d / "README.md").write_text("---\nlicense: mit\ntags:\n- tiny\n- test\n---\n# bert-tiny\n")
    return d


@pytest.fixture
def hub_factory(tmp_path: Path) -> Iterator[Any]:
    """Start extra hubs (function scope) on chosen roots; all stopped at the end."""
    started: list[HubProcess] = []

    def start(root: Path, *extra: str) -> HubProcess:
        p = HubProcess(root, *extra).start()
        started.append(p)
        return p

    yield start
    for p in started:
        if p.proc is not None and p.proc.poll() is None:
            p.kill()
