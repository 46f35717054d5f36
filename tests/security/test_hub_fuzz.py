"""A seeded, time-bounded wire fuzzer against the hub's HTTP API (hypothesis), then a normal push and pull.

Every fuzzed request is sent raw over its own socket (methods, paths, headers and bodies mutated around the real
routes, with no token, a bad one, a read token and a write token). The hub must answer each with a well-formed
HTTP status that is not 500 (an internal error), with no Python internals in the body, and keep serving:
afterwards a repository pushed before the fuzzing is intact, and a new push and pull work.
``derandomize=True`` makes the run the same every time; ``MAX_EXAMPLES``, ``TIME_BUDGET_S`` and per-socket
timeouts bound it (measured ~3 s for the 400 requests on a loaded 2-core machine).
"""

from __future__ import annotations

import json
import socket
import time
from urllib.parse import urlsplit

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tensorwire import hub as twhub  # noqa: E402

from ._hub_helpers import HubProcess  # noqa: E402

MAX_EXAMPLES = 400
TIME_BUDGET_S = 120.0
SHA = "ab" * 32

ROUTES = [
    "/",
    "/api/models",
    "/api/models/acme/fuzz",
    "/api/models/acme/fuzz/revision/main",
    "/api/models/acme/fuzz/tree/main",
    "/api/models/acme/fuzz/tree/main/sub",
    "/api/models/acme/fuzz/refs",
    "/api/models/acme/fuzz/commits/main",
    "/acme/fuzz/resolve/main/model.bin",
    "/acme/keep/resolve/main/w.bin",
    "/api/whoami-v2",
    "/api/tw/health",
    "/api/tw/repos",
    "/api/tw/blobs/missing",
    f"/api/tw/blobs/{SHA}",
    "/api/tw/repos/acme/fuzz/commit/main",
    "/api/tw/repos/acme/fuzz/tag",
    "/api/tw/repos/acme/fuzz/settings",
    "/api/tw/repos/acme/fuzz/revision/main",
    "/api/datasets/x/y",
]
NASTY = ["..", "%2e%2e", "%00", "%ff%fe", "a" * 300, "", ".", "%2F", "~", "refs%2Fheads%2Fmain", "0" * 40, "é", "\\"]


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    from tensorwire.hub.server import create_token

    root = tmp_path_factory.mktemp("hub") / "root"
    root.mkdir()
    proc = HubProcess(root)
    proc.token = create_token(root, "w", write=True)
    proc.read_token = create_token(root, "r", write=False)
    proc.start()
    proc.keep = twhub.push_files("acme/keep", {"w.bin": b"precious"}, endpoint=proc.url, token=proc.token)
    try:
        yield proc
    finally:
        assert proc.stop() == 0


def _mutate(route: str, nasty: str, at: int) -> str:
    parts = route.split("/")
    parts[1 + at % max(1, len(parts) - 1)] = nasty
    return "/".join(parts)


paths = st.one_of(
    st.sampled_from(ROUTES),
    st.builds(_mutate, st.sampled_from(ROUTES), st.sampled_from(NASTY), st.integers(0, 8)),
    st.builds(lambda r, q: f"{r}?{q}", st.sampled_from(ROUTES), st.text(max_size=40)),
    st.text(min_size=0, max_size=60),
)
methods = st.one_of(st.sampled_from(["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]), st.text(max_size=8))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=20,
)
route_bodies = st.fixed_dictionaries(
    {},
    optional={
        "repo_id": st.sampled_from(["acme/fuzz", "acme/keep", "../x", "a", 7]),
        "private": json_values,
        "exist_ok": json_values,
        "sha256": st.lists(st.sampled_from([SHA, "zz", 5]), max_size=4) | json_values,
        "files": st.lists(
            st.fixed_dictionaries(
                {"path": st.sampled_from(["a", "../b", "c/d", ""]), "sha256": st.just(SHA), "size": st.integers(-2, 10)}
            ),
            max_size=3,
        )
        | json_values,
        "tag": st.sampled_from(["v1", "..", "0" * 40]) | json_values,
        "revision": st.sampled_from(["main", "nope", "0" * 40]) | json_values,
        "mode": st.sampled_from(["replace", "merge", "x"]),
        "parent": json_values,
        "delete": json_values,
    },
)
bodies = st.one_of(
    st.binary(max_size=600),
    json_values.map(lambda v: json.dumps(v).encode()),
    route_bodies.map(lambda v: json.dumps(v).encode()),
)
header_names = st.sampled_from(
    [
        "Content-Length",
        "Transfer-Encoding",
        "Range",
        "If-None-Match",
        "Host",
        "Content-Type",
        "X-Forwarded-Proto",
        "Expect",
        "Connection",
        "X",
    ]
)
header_values = st.one_of(
    st.sampled_from(
        [
            "-1",
            "0",
            "99999999999999999999",
            "abc",
            "chunked",
            "bytes=0-",
            "bytes=-5",
            "bytes=9-1",
            "100-continue",
            "keep-alive",
            '"x"',
        ]
    ),
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=40),
)


def _send(url: str, raw: bytes) -> bytes:
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as s:
        try:
            s.sendall(raw)
            s.shutdown(socket.SHUT_WR)  # a short body ends here: the hub must not wait for the rest
        except OSError:
            pass
        out = b""
        while len(out) < 1 << 20:  # bounded by size and the socket timeout
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            out += chunk
        return out


def test_fuzz_the_hub_http_api(hub):
    deadline = time.monotonic() + TIME_BUDGET_S
    tokens = [None, "garbage", hub.read_token, hub.token]

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        method=methods,
        path=paths,
        headers=st.lists(st.tuples(header_names, header_values), max_size=4),
        body=bodies,
        token=st.sampled_from(range(len(tokens))),
        with_length=st.booleans(),
    )
    def one(method, path, headers, body, token, with_length):
        if time.monotonic() > deadline:
            return
        lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
        lines += [f"{k}: {v}" for k, v in headers]
        if tokens[token] is not None:
            lines.append(f"Authorization: Bearer {tokens[token]}")
        if with_length:
            lines.append(f"Content-Length: {len(body)}")
        lines.append("Connection: close")
        raw = ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "replace") + body
        out = _send(hub.url, raw)
        assert out.startswith(b"HTTP/1."), (raw[:300], out[:300])
        status = int(out[9:12])
        assert 100 <= status < 600 and status != 500, (raw[:300], out[:500])  # 501/505 are answers; 500 a bug
        assert b"Traceback" not in out and b'File "' not in out

    one()
    # afterwards the hub serves normally and what was there is intact
    assert twhub.resolve("acme/keep", endpoint=hub.url)["commit"] == hub.keep
    got = twhub.fetch("acme/keep", "w.bin", endpoint=hub.url, cache_dir=hub.root.parent / "fuzz-cache")
    assert got.read_bytes() == b"precious"
    c = twhub.push_files("acme/after", {"x.bin": b"after"}, endpoint=hub.url, token=hub.token)
    assert twhub.resolve("acme/after", endpoint=hub.url)["commit"] == c
