"""Issue 18: progress at the client while workers download weights from the hub (``hub_tensor`` loads).

A load that asks for progress gets reports for its own downloads only, at a bounded rate, ending at the file's size;
bars on stderr follow ``progress=`` and ``TENSORWIRE_PROGRESS``; forged or malformed reports from a service never
reach a session and never stop the dispatcher. The cluster lowers ``TENSORWIRE_PROGRESS_MIN_BYTES`` to 1 MiB so a
4 MiB file (a ~10 ms download on loopback) is reported from its start.
"""

from __future__ import annotations

import os
import time

import msgpack
import numpy as np
import pytest
import zmq

import tensorwire as tw
from tensorwire.protocol import PROTOCOL_VERSION
from tensorwire.protocol import progress as P

MIB = 1 << 20
N = MIB  # float32 elements: a 4 MiB file, over the cluster's 1 MiB threshold


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cache = tmp_path_factory.mktemp("worker-cache")
    env = {"TENSORWIRE_HUB_CACHE": str(cache), P.MIN_BYTES_ENV: str(MIB)}
    with tw.LocalCluster(
        devices=["cpu:0", "cpu:1"],
        hub_root=tmp_path_factory.mktemp("hub"),
        autograd=False,
        collectives=False,
        progress=False,
        extra_env=env,
    ) as c:
        c.worker_cache = cache
        yield c


def _push(cluster, repo: str, seed: int, n: int = N) -> tuple[np.ndarray, int]:
    """A fresh file of ``n`` float32 (so no worker has it cached); returns its tensor and the file's size on the hub."""
    w = np.random.default_rng(seed).standard_normal(n, dtype=np.float32)
    tw.hub.push(repo, {"w": w}, token=cluster.hub_token, endpoint=cluster.hub_url)
    (entry,) = [f for f in tw.hub.resolve(repo, endpoint=cluster.hub_url)["files"] if f["path"] == "model.safetensors"]
    return w, entry["size"]


def _check_reports(events: list, device: str, repo: str, size: int) -> None:
    assert events, "no progress reports reached the client"
    assert all(e.device == device and e.file.startswith(f"{repo}/model.safetensors@") for e in events), events
    assert all(e.total == size for e in events), events
    assert [e.done for e in events] == sorted(e.done for e in events), events  # never goes back
    assert events[-1].end and events[-1].done == size and events[-1].fraction == 1.0, events
    assert not any(e.end for e in events[:-1]), events
    # bounded: the first report, at most one per interval, and the end (the load took far less than a minute)
    assert len(events) <= 2 + 60 / P.INTERVAL_S


def test_a_load_reports_its_download_to_the_client_ending_at_the_file_size(cluster, session):
    w, size = _push(cluster, "acme/progress-big", 1)
    events: list = []
    sd = tw.hub.load_state_dict("acme/progress-big", device="cpu:1", progress=events.append)
    assert events == []  # lazy: nothing has run yet
    np.testing.assert_array_equal(sd["w"].numpy(), w)
    _check_reports(events, "cpu:1", "acme/progress-big", size)

    # a file in the worker's verified cache shows nothing: wait (bounded) for cpu:1's background write of the blob,
    # then load it into cpu:0, which reads the same cache
    sha = next(
        f["sha256"]
        for f in tw.hub.resolve("acme/progress-big", endpoint=cluster.hub_url)["files"]
        if f["path"] == "model.safetensors"
    )
    blob = cluster.worker_cache / "blobs" / sha
    deadline = time.monotonic() + 30
    while not blob.is_file() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert blob.is_file()
    cached: list = []
    again = tw.hub.load_state_dict("acme/progress-big", device="cpu:0", progress=cached.append)
    np.testing.assert_array_equal(again["w"].numpy(), w)
    assert cached == []


def test_another_session_sees_none_of_a_sessions_progress(cluster):
    small = {"b": np.arange(4, dtype=np.float32)}
    tw.hub.push("acme/progress-small", small, token=cluster.hub_token, endpoint=cluster.hub_url)
    # over TENSORWIRE_OFFLOAD_WORK (2 Mi elements): this load runs on a pool thread of the worker, whose reports go
    # out through the worker's main thread (the first test's runs on the main thread)
    w, size = _push(cluster, "acme/progress-other", 2, n=2 * N + 1)
    with tw.Session(cluster.address) as a, tw.Session(cluster.address) as b:
        seen_by_a: list = []
        seen_by_b: list = []
        # both sessions' first loads: the same progress id (1), so a report routed to the wrong session would land
        # in b's callback
        lb = tw.hub.load_state_dict("acme/progress-small", device="cpu:0", session=b, progress=seen_by_b.append)
        la = tw.hub.load_state_dict("acme/progress-other", device="cpu:1", session=a, progress=seen_by_a.append)
        np.testing.assert_array_equal(la["w"].numpy(), w)
        _check_reports(seen_by_a, "cpu:1", "acme/progress-other", size)
        # b's answer leaves the dispatcher after anything it would have misrouted to b
        np.testing.assert_array_equal(lb["b"].numpy(), small["b"])
        assert seen_by_b == []


@pytest.mark.parametrize(
    ("env", "progress", "drawn"),
    [("1", None, True), ("", True, True), ("1", False, False), ("0", True, False), ("", None, False)],
    ids=["env-on", "arg-on", "arg-off", "env-off-wins", "default-not-a-tty"],
)
def test_bars_on_stderr_follow_the_switches(cluster, session, capfd, monkeypatch, env, progress, drawn):
    monkeypatch.setenv(P.ENV, env)
    repo = f"acme/progress-bar-{env or 'unset'}-{progress}"
    w, _ = _push(cluster, repo, hash(repo) % 1000 + 10)  # a fresh file: a cached one would show nothing anyway
    capfd.readouterr()
    sd = tw.hub.load_state_dict(repo, device="cpu:1", progress=progress)
    np.testing.assert_array_equal(sd["w"].numpy(), w)
    err = capfd.readouterr().err
    if drawn:
        assert "model.safetensors -> cpu:1" in err and "100%" in err, err
    else:
        assert err == "", err  # pytest's captured stderr is not a terminal: the default draws nothing


# -- forged and malformed reports ---------------------------------------------------------------------------------


def _sock(address: str) -> zmq.Socket:
    s = zmq.Context.instance().socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVTIMEO, 15000)
    s.connect(address)
    return s


def _send(s: zmq.Socket, h: dict) -> None:
    s.send_multipart([msgpack.packb(h, use_bin_type=True)])


def _recv(s: zmq.Socket) -> dict:
    return msgpack.unpackb(s.recv_multipart()[0], raw=False, strict_map_key=False)


def test_forged_and_malformed_reports_never_reach_a_session_nor_stop_the_dispatcher(cluster):
    good = {"id": 1, "file": "acme/x/model.safetensors@0123456789ab", "done": 5, "total": 10}
    with tw.Session(cluster.address) as victim:
        seen: list = []
        victim.watch_progress(seen.append)  # id 1: what a forged report names
        x = victim.const(np.arange(3, dtype=np.float32), "cpu:0")
        x.numpy()  # the victim has work on cpu:0 (the real worker), none on the impostor's device
        worker = _sock(cluster.service_address)  # a service with the credential, serving a device of its own
        raw = _sock(cluster.address)
        try:
            _send(
                worker,
                {
                    "t": "register",
                    "v": PROTOCOL_VERSION,
                    "pid": os.getpid(),
                    "service": "worker",
                    "device": "cpu:7",
                    "token": cluster.service_token,
                    "instance": "progress-test-0123456789",
                    "info": {"name": "impostor"},
                },
            )
            assert _recv(worker)["t"] == "registered"
            _send(raw, {"t": "hello", "v": PROTOCOL_VERSION, "token": None, "client": "raw"})
            welcome = _recv(raw)
            key, sid = welcome["key"], welcome["key"][:8]
            # a client cannot speak for a worker: a progress message from a client is refused, typed
            _send(raw, {"t": "progress", "q": 3, "k": key, "s": sid, **good})
            answer = _recv(raw)
            assert answer["t"] == "error" and answer["error"]["code"] == "ProtocolError", answer
            # the raw session runs a batch on cpu:7 and fetches its value, so the impostor serves it and answers
            _send(
                raw,
                {
                    "t": "batch",
                    "q": 4,
                    "k": key,
                    "devs": ["cpu:7"],
                    "outs": [900],
                    "fetch": [900],
                    "sync": True,
                    "nodes": [["full", [], {"shape": [2], "dtype": "float32", "value": 1.5}, 0]],
                },
            )
            run = _recv(worker)
            while run["t"] != "run":  # (heartbeats) bounded by RCVTIMEO
                run = _recv(worker)
            assert run["s"] == sid
            forged = [
                {"s": bytes.fromhex(victim.session_id), **good},  # a session it does not serve
                {"s": sid, **good, "done": 11},  # past the total
                {"s": sid, **good, "done": -1},
                {"s": sid, **good, "id": 0},
                {"s": sid, **good, "id": True},
                {"s": sid, **good, "id": "1"},
                {"s": sid, **good, "file": ""},
                {"s": sid, **good, "file": "x" * (P.MAX_FILE + 1)},
                {"s": sid, **good, "total": [10]},
                {"s": sid, **good, "end": "yes"},
                {"s": "not-bytes", **good},
                {"s": sid},
            ]
            for h in forged:
                _send(worker, {"t": "progress", **h})
            worker.send_multipart([b"\xc1not msgpack"])
            _send(worker, {"t": "progress", "s": sid, **good, "id": 42})  # the one well-formed report
            _send(worker, {"t": "done", "s": sid, "q": run["q"], "values": [], "errors": []})
            first = _recv(raw)
            assert first == {"t": "progress", **good, "id": 42, "device": "cpu:7"}, first
            assert _recv(raw)["t"] == "result"
        finally:
            _send(worker, {"t": "bye"})
            worker.close(0)
            raw.close(0)
        # the victim's next answer leaves the dispatcher after anything forged that it would have passed on
        np.testing.assert_array_equal((x * 2).numpy(), np.arange(3, dtype=np.float32) * 2)
        assert seen == []
    log = (cluster.log_dir / "dispatcher.log").read_text(errors="replace")
    assert "dropping a malformed progress report from worker cpu:7" in log


def test_a_raising_callback_or_a_malformed_report_never_breaks_the_wait(cluster, session):
    w, _ = _push(cluster, "acme/progress-raises", 3)
    calls: list = []

    def broken(p):
        calls.append(p)
        raise RuntimeError("the user's callback fails")

    sd = tw.hub.load_state_dict("acme/progress-raises", device="cpu:0", progress=broken)
    np.testing.assert_array_equal(sd["w"].numpy(), w)  # the answer still arrives
    assert len(calls) == 1  # dropped after its first failure
    # what the session does with reports the dispatcher should never send: drop them
    pid = session.watch_progress(calls.append)
    for bad in (
        {"id": pid, "file": "f", "done": 2, "total": 1, "device": "cpu:0"},
        {"id": pid, "file": "f", "done": 1, "total": 2, "device": 7},
        {"id": pid, "file": "f", "done": 1, "total": 2},
    ):
        session._on_progress({"t": "progress", **bad})
    assert len(calls) == 1
    session._on_progress({"t": "progress", "id": pid, "file": "f", "done": 1, "total": 2, "device": "cpu:0"})
    assert calls[-1] == tw.progress.DownloadProgress("cpu:0", "f", 1, 2)


# -- the rate bound, on a clock of the test's own ---------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_the_reporter_bounds_the_rate_and_reports_only_downloads_that_matter():
    clock, out = _Clock(), []
    big = P.Reporter(out.append, 7, "r/f@c", min_bytes_=1000, clock=clock)
    big.update(0, 5000)  # large enough: reported from its start
    for done in range(100, 5000, 100):  # 49 chunks within one interval: none reported
        clock.t += P.INTERVAL_S / 100
        big.update(done, 5000)
    clock.t += P.INTERVAL_S
    big.update(4900, 5000)
    big.update(5000, 5000)  # the last chunk: the end waits for the verified bytes
    big.finish(True)
    assert [(e["done"], e.get("end", False)) for e in out] == [(0, False), (4900, False), (5000, True)]
    assert all(P.check(e) == e for e in out)

    out.clear()
    small = P.Reporter(out.append, 7, "r/f@c", min_bytes_=1000, clock=clock)
    small.update(0, 500)
    small.update(500, 500)
    small.finish(True)
    assert out == []  # small and quick: nothing
    slow = P.Reporter(out.append, 7, "r/f@c", min_bytes_=1000, clock=clock)
    slow.update(0, 500)
    clock.t += P.AFTER_S
    slow.update(200, 500)  # small but slow: reported once it has taken AFTER_S
    slow.finish(False)  # and its failure ends it where it stopped
    assert [(e["done"], e.get("end", False)) for e in out] == [(200, False), (200, True)]


def test_synchronize_waits_for_a_first_load_on_a_device_and_shows_its_progress(cluster):
    # the session's first batch on cpu:1 is the load: tw.synchronize() used to answer before that device had run
    # anything (a sync waited only for the devices touched by earlier batches), so the bar never showed
    w, size = _push(cluster, "acme/progress-sync", 4)
    with tw.Session(cluster.address) as s:
        events: list = []
        sd = tw.hub.load_state_dict("acme/progress-sync", device="cpu:1", session=s, progress=events.append)
        s.synchronize()
        _check_reports(events, "cpu:1", "acme/progress-sync", size)
        np.testing.assert_array_equal(sd["w"].numpy(), w)
