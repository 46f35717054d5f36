"""The direct channel's replay fast path (``Executor.replay_now``): a replay of a known plan (answered or not) runs as
soon as the worker reads it, with the general path's checks made in one pass; anything it does not
take goes the general way with nothing changed. A worker's executor and direct channel in this process, a DEALER as
the client (the cluster-level checks of forged replays are in tests/security/test_direct_channels.py)."""

from __future__ import annotations

import time

import msgpack
import numpy as np
import pytest
import zmq

from tensorwire.backends.cpu import NumpyBackend
from tensorwire.backends.direct import DirectChannel
from tensorwire.backends.executor import Fail
from tensorwire.backends.worker import Executor
from tensorwire.protocol.capability import channel_key, issue
from tensorwire.protocol.errors import ProtocolError
from tensorwire.protocol.wire import INLINE_MAX, array_from_frame

SID = b"session1"
X = np.arange(4, dtype=np.float32)


class _Worker:
    def __init__(self, folder):
        ctx = zmq.Context.instance()
        self.ex = Executor(NumpyBackend().open(0), "cpu:0", lambda h, f: None)
        self.ch = DirectChannel(ctx, "cpu:0", "instance-secret", f"ipc://{folder}/w.sock")
        self.ch.epoch = "epoch"
        self.ex.channel = self.ch
        self.cap = issue(channel_key("instance-secret"), SID, "cpu:0", "epoch", time.time() + 600)
        self.cli = ctx.socket(zmq.DEALER)
        self.cli.setsockopt(zmq.LINGER, 0)
        self.cli.connect(self.ch.address)

    def send(self, h: dict, *frames) -> None:
        self.cli.send_multipart([msgpack.packb({**h, "cap": self.cap}, use_bin_type=True), *frames])
        for _ in range(500):  # (bounded: the message reaches the worker's socket)
            if self.ch.sock.poll(10):
                return
        raise AssertionError("the message never reached the worker")

    def answer(self, run: bool = True) -> tuple[dict, list] | None:
        """The client's next answer: after the worker read its socket (and, with ``run``, ran its queues)."""
        self.ch.receive(self.ex)
        if run:
            self.ex.run_ready()
        if not self.cli.poll(200):
            return None
        msg = self.cli.recv_multipart()
        h = msgpack.unpackb(msg[0], raw=False, strict_map_key=False)  # (and the values fetched, in frames or, when
        return h, [array_from_frame(d, msg[1:])[1] for d in h.get("values") or ()]  # small, in the header)

    def close(self) -> None:
        self.cli.close(0)
        self.ch.close()
        self.ex.close()


@pytest.fixture
def w(tmp_path):
    w = _Worker(tmp_path)
    w.send({"t": "run", "q": 1, "ext": [], "outs": [1], "devs": ["cpu:0"], "sync": True,
            "nodes": [["const", [], {"shape": [4], "dtype": "float32", "frame": 0}, 0]]}, X.tobytes())
    assert w.answer()[0]["t"] == "done"
    w.send({"t": "run", "q": 2, "ext": [1], "outs": [2], "plan": 7, "devs": ["cpu:0"],
            "nodes": [["neg", [-1], {}, 0]], "fetch": [2]})
    h, frames = w.answer()
    assert h["t"] == "done" and frames[0].tolist() == (-X).tolist(), h
    yield w
    w.close()


def test_a_known_replay_is_answered_as_soon_as_the_worker_reads_it(w):
    for k in range(3, 8):
        w.send({"t": "run", "q": k, "ext": [1], "outs": [k], "plan": 7, "fetch": [k], "release": [k - 1]})
        h, frames = w.answer(run=False)  # (nothing queued: it ran while the worker read its socket)
        assert h["t"] == "done" and h["q"] == k and not h["errors"], h
        assert frames[0].tolist() == (-X).tolist()
    s = w.ex.sessions[SID]
    assert set(s.buffers) == {1, 7} and s.running is None and not s.jobs  # the releases went, as queued work's do
    assert w.ex.direct_counts["plan_hits"] == 5 and w.ex.batches_run == 7


def test_an_unanswered_replay_runs_as_soon_as_the_worker_reads_it(w):
    """A replay sent without an answer (a step's forward pass, sent before its backward) takes the fast path too:
    it runs while the worker reads its socket, nothing queued, and its errors come with the session's next answer,
    as a queued batch's do."""
    _upload_plan(w)
    s = w.ex.sessions[SID]
    hits = w.ex.direct_counts["plan_hits"]
    w.send({"t": "run", "ext": [1], "outs": [40, 41], "plan": 9, "release": [20, 21]}, np.ones(4, np.float32).tobytes())
    assert w.answer(run=False) is None  # (no answer asked)
    assert not s.jobs and s.running is None and not w.ex.ready  # (it ran while the worker read its socket)
    assert set(s.buffers) >= {40, 41} and 20 not in s.buffers and s.uploads == 0
    np.testing.assert_array_equal(s.buffers[41], X + 1)
    w.send({"t": "run", "ext": [1], "outs": [42, 43], "plan": 9}, b"\0" * 12)  # (its const fails: reported later)
    assert w.answer(run=False) is None and not s.jobs
    assert isinstance(s.buffers[43], Fail)
    w.send({"t": "run", "q": 44, "ext": [1], "outs": [44], "plan": 7, "fetch": [41, 44]})
    h, values = w.answer(run=False)
    assert h["t"] == "done" and [e["code"] for e in h["errors"]] == ["ProtocolError"], h
    assert "const frame holds 12 bytes" in h["errors"][0]["message"], h
    assert values[0].tolist() == (X + 1).tolist() and values[1].tolist() == (-X).tolist()
    assert w.ex.direct_counts["plan_hits"] == hits + 3


@pytest.mark.parametrize("case", ["unknown plan", "another shape", "live output", "bad dyn", "outs and out_first",
                                  "bad temps", "profiled", "session busy", "ids not ints", "missing input",
                                  "more inputs"])
def test_what_the_fast_path_does_not_take_goes_the_general_way_unchanged(w, case):
    w.send({"t": "run", "q": 3, "ext": [], "outs": [3], "devs": ["cpu:0"], "sync": True,
            "nodes": [["full", [], {"shape": [2, 2], "dtype": "float32", "value": 1.0}, 0]]})
    assert w.answer()[0]["t"] == "done"
    h = {"t": "run", "q": 4, "ext": [1], "outs": [4], "plan": 7, "fetch": [4]}
    h.update({"unknown plan": {"plan": 8}, "another shape": {"ext": [3]}, "live output": {"outs": [3]},
              "bad dyn": {"dyn": [[0, 1]]}, "outs and out_first": {"out_first": 9}, "bad temps": {"temps": [[0, 5]]},
              "profiled": {"prof": 1}, "session busy": {}, "ids not ints": {"ext": [1.0]},
              "missing input": {"ext": [99]}, "more inputs": {"ext": [1, 1]}}[case])
    s = w.ex.sessions[SID]
    if case == "session busy":  # a batch queued before it: the replay waits its turn
        w.send({"t": "run", "release": []})
        w.ch.receive(w.ex)
        assert s.jobs
    route = w.ch.routes[SID][0]
    before = (dict(s.buffers), w.ex.seq, s.ledger.used, w.ex.batches_run)
    try:  # (the fast path takes the header as the general path checks it: a malformed one never reaches it)
        run = w.ch.run_header(w.ex, SID, dict(h), h["q"])
    except ProtocolError:
        assert case in ("bad dyn", "outs and out_first", "ids not ints"), case
    else:
        assert w.ex.replay_now(SID, run, route) is False
    assert (dict(s.buffers), w.ex.seq, s.ledger.used, w.ex.batches_run) == before
    w.send(h)
    got = w.answer()
    if case == "unknown plan":  # (evicted, or never sent: the worker asks for its nodes, the batch waits)
        assert got[0]["t"] == "need_plan" and got[0]["plan"] == 8, got
    elif case == "profiled":  # (a good replay: the general path runs it with the profiler's spans)
        assert got[0]["t"] == "done" and not got[0]["errors"], got
    elif case == "session busy":
        assert got[0]["t"] == "done" and not got[0]["errors"] and got[1], got
    else:  # refused with a typed error, live handles untouched
        hdr = got[0]
        errors = [hdr["error"]] if hdr["t"] == "error" else hdr["errors"] + hdr["fetch_errors"]
        assert errors and errors[0]["code"] in ("ProtocolError", "NotFound", "DependencyFailed"), hdr
        assert case != "missing input" or "handle 99 is not on cpu:0" in errors[0]["message"], hdr
        assert not hdr.get("values"), hdr
    assert set(s.buffers) >= {1, 3}
    np.testing.assert_array_equal(s.buffers[1], X)
    np.testing.assert_array_equal(s.buffers[3], np.ones((2, 2), np.float32))


def test_a_replay_naming_upload_files_it_does_not_carry_is_refused(w):
    """``shm_frames`` names frames of the message: one that names frames it lacks is malformed, fast path or not."""
    w.send({"t": "run", "q": 3, "ext": [1], "outs": [3], "plan": 7, "fetch": [3], "shm_frames": [[0, "/x"]]})
    h, _ = w.answer()
    assert h["t"] == "error" and h["error"]["code"] == "ProtocolError" and "shm_frames" in h["error"]["message"], h
    assert set(w.ex.sessions[SID].buffers) == {1, 2}


def test_a_small_value_comes_in_the_answers_header(w):
    """A fetched value of at most ``INLINE_MAX`` bytes travels in the answer's header (one frame: no frame of its
    own), a larger one in a frame; the fast path and the general one alike."""
    big = np.arange(INLINE_MAX // 4 + 1, dtype=np.float32)
    w.send({"t": "run", "q": 3, "ext": [], "outs": [100], "devs": ["cpu:0"], "fetch": [100],
            "nodes": [["const", [], {"shape": [len(big)], "dtype": "float32", "frame": 0}, 0]]}, big.tobytes())
    h, values = w.answer()
    assert h["values"][0][3] == 0 and values[0].tolist() == big.tolist(), h  # (a frame of its own)
    for k, fast in ((4, False), (5, True)):  # (a replay the general path runs, then one the fast path does)
        if not fast:
            w.ex.ready.append(b"someone else")  # (another session runnable: the fast path steps aside)
        w.send({"t": "run", "q": k, "ext": [1], "outs": [k], "plan": 7, "fetch": [k, 100], "release": [k - 1]})
        w.ch.receive(w.ex)
        assert w.ex.ready or fast
        w.ex.run_ready()
        assert w.cli.poll(2000)
        msg = w.cli.recv_multipart()
        h = msgpack.unpackb(msg[0], raw=False, strict_map_key=False)
        assert h["t"] == "done" and not h["errors"], h
        small, large = h["values"]
        assert small[:3] == [k, "float32", [4]] and small[3] == (-X).tobytes()  # (in the header)
        assert large[:3] == [100, "float32", [len(big)]] and large[3] == 0 and len(msg) == 2  # (its own frame)
        assert array_from_frame(large, msg[1:])[1].tolist() == big.tolist()


def _upload_plan(w) -> None:
    """Plan 9: ``x + y`` for the session's ``x`` (id 1) and a ``y`` the batch uploads (its frame 0)."""
    w.send({"t": "run", "q": 20, "ext": [1], "outs": [20, 21], "plan": 9, "devs": ["cpu:0"], "fetch": [21],
            "nodes": [["const", [], {"shape": [4], "dtype": "float32", "frame": 0}, 0], ["add", [-1, 0], {}, 0]]},
           X.tobytes())
    h, values = w.answer()
    assert h["t"] == "done" and not h["errors"] and values[0].tolist() == (2 * X).tolist(), h


def test_a_replay_carrying_small_uploads_is_answered_as_soon_as_the_worker_reads_it(w):
    """A step's new small inputs (a name's one-hot letters) travel with its replay: the fast path takes it, its
    uploads counted on the session while it runs and in the channel's bytes, as the general path counts them."""
    _upload_plan(w)
    s = w.ex.sessions[SID]
    bytes_in = w.ex.direct_counts["bytes_in"]
    for k in range(3):
        y = np.full(4, k + 1.0, np.float32)
        w.send({"t": "run", "q": 30 + k, "ext": [1], "outs": [22 + 2 * k, 23 + 2 * k], "plan": 9,
                "fetch": [23 + 2 * k], "release": [20 + 2 * k, 21 + 2 * k]}, y.tobytes())
        h, values = w.answer(run=False)  # (nothing queued: it ran while the worker read its socket)
        assert h["t"] == "done" and h["q"] == 30 + k and not h["errors"], h
        assert values[0].tolist() == (X + y).tolist()
    assert s.uploads == 0 and not s.jobs and s.running is None
    assert set(s.buffers) == {1, 2, 26, 27}
    assert w.ex.direct_counts["bytes_in"] == bytes_in + 3 * X.nbytes


@pytest.mark.parametrize("fast", [True, False])
def test_a_replayed_upload_of_the_wrong_size_fails_its_node_on_either_path(w, fast):
    """A const frame that does not hold its node's bytes fails that node (and its dependents) with a
    ``ProtocolError``, whichever path ran the replay; the session's other handles are untouched."""
    _upload_plan(w)
    if not fast:
        w.ex.ready.append(b"someone else")  # (another session runnable: the fast path steps aside)
    w.send({"t": "run", "q": 40, "ext": [1], "outs": [30, 31], "plan": 9, "fetch": [31]}, b"\0" * 12)
    h, values = w.answer(run=not fast)
    errors = h["errors"] + h["fetch_errors"]
    assert h["t"] == "done" and errors and errors[0]["code"] == "ProtocolError", h
    assert "const frame holds 12 bytes" in errors[0]["message"] and not values, h
    s = w.ex.sessions[SID]
    assert s.uploads == 0 and all(isinstance(s.buffers.get(i), Fail) for i in (30, 31))  # (failed handles)
    np.testing.assert_array_equal(s.buffers[1], X)


def test_a_replay_whose_uploads_pass_the_quota_is_refused_by_the_general_path(w):
    """Uploads past the session's quota: the fast path leaves the replay to the general path, which fails it with
    ``QuotaExceeded`` as it fails any batch whose uploads would pass it (``Executor._hold_uploads``)."""
    _upload_plan(w)
    w.ex.limit = w.ex.sessions[SID].ledger.used + 8  # (room for less than the 16 bytes uploaded)
    w.send({"t": "run", "q": 41, "ext": [1], "outs": [30, 31], "plan": 9, "fetch": [31]}, X.tobytes())
    w.ch.receive(w.ex)
    assert w.ex.sessions[SID].jobs  # (queued: the fast path did not take it)
    h, _ = w.answer()
    errors = h["errors"] + h["fetch_errors"]
    assert h["t"] == "done" and errors and errors[0]["code"] == "QuotaExceeded", h
    assert w.ex.sessions[SID].uploads == 0


def test_a_replay_gathering_rows_of_a_large_tensor_is_answered_as_soon_as_the_worker_reads_it(w):
    """A loader's step: a few rows of a text of millions of elements, gathered by an uploaded index (one ``index``
    node). Its work is the rows it reads, not the text's size, so its replay takes the fast path (no pool thread, no
    hand-off in the round trip)."""
    text = np.arange(3 << 20, dtype=np.float32)  # (past OFFLOAD_WORK elements)
    w.send({"t": "run", "q": 50, "ext": [], "outs": [50], "devs": ["cpu:0"], "sync": True,
            "nodes": [["const", [], {"shape": [len(text)], "dtype": "float32", "frame": 0}, 0]]}, text.tobytes())
    w.ch.receive(w.ex)
    w.ex.run_ready()
    for _ in range(500):  # (bounded: the upload is large work, run on a pool thread and collected here)
        w.ex.collect()
        if w.cli.poll(10):
            break
    assert msgpack.unpackb(w.cli.recv_multipart()[0], raw=False, strict_map_key=False)["t"] == "done"
    idx = np.array([5, 7, 3_000_000], np.int64)
    w.send({"t": "run", "q": 51, "ext": [50], "outs": [51, 52], "plan": 11, "devs": ["cpu:0"], "fetch": [52],
            "nodes": [["const", [], {"shape": [3], "dtype": "int64", "frame": 0}, 0],
                      ["index", [-1, 0], {"dim": 0}, 0]]}, idx.tobytes())
    h, values = w.answer()
    assert h["t"] == "done" and not h["errors"] and values[0].tolist() == text[idx].tolist(), h
    hits = w.ex.direct_counts["plan_hits"]
    for k, idx in enumerate((np.array([1, 2, 4], np.int64), np.array([3_100_000, 0, 9], np.int64))):
        w.send({"t": "run", "q": 60 + k, "ext": [50], "outs": [53 + 2 * k, 54 + 2 * k], "plan": 11,
                "fetch": [54 + 2 * k]}, idx.tobytes())
        h, values = w.answer(run=False)  # (nothing queued: it ran while the worker read its socket)
        assert h["t"] == "done" and not h["errors"] and values[0].tolist() == text[idx].tolist(), h
    assert w.ex.direct_counts["plan_hits"] == hits + 2
