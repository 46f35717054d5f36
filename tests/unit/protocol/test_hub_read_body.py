"""A hub that dies part-way through an answer gives the client ``HubUnavailable``, never a short body that a parser
downstream misreads (found under load: a hub killed while ``tw.hub.load_state_dict`` read a safetensors header gave
a bare ``struct.error``). The server here is a plain socket on loopback that announces more than it sends."""

from __future__ import annotations

import socket
import threading

import pytest

from tensorwire.hub.tensors import _range
from tensorwire.protocol.hub import client as hubclient
from tensorwire.protocol.hub.errors import HubUnavailable


def _serve_once(announced: int, sent: bytes):
    """A loopback server that answers one request with ``Content-Length: announced`` and ``sent`` as the body, then
    closes the connection; its URL."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(10)

    def answer():
        with srv:
            conn, _ = srv.accept()
            with conn:
                conn.settimeout(10)
                req = b""
                while b"\r\n\r\n" not in req and len(req) < 65536:  # bounded: one request's head
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    req += chunk
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                             b"Content-Length: %d\r\nConnection: close\r\n\r\n" % announced + sent)

    t = threading.Thread(target=answer, daemon=True)
    t.start()
    return f"http://127.0.0.1:{srv.getsockname()[1]}/f", t


@pytest.mark.parametrize("sent", [b"", b'{"a": 1'])
def test_a_json_answer_cut_off_is_hub_unavailable(sent):
    url, t = _serve_once(100, sent)
    with pytest.raises(HubUnavailable, match="cut off"):
        hubclient._request("GET", url, timeout=10.0)
    t.join(10)


def test_a_range_answer_short_of_what_was_asked_is_hub_unavailable():
    url, t = _serve_once(3, b"\x10\x00\x00")  # a complete answer of 3 bytes, where the header's 8 were asked
    with pytest.raises(HubUnavailable, match="after 3 of 8 bytes"):
        _range(url, 0, 7, None)
    t.join(10)


def test_a_whole_answer_is_returned():
    url, t = _serve_once(8, b"12345678")
    assert _range(url, 0, 7, None) == b"12345678"
    t.join(10)
