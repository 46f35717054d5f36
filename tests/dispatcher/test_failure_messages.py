"""The error of a batch whose input failed before reaching a worker (``dispatcher.state.input_failed``) names what
the batch lacked and the first failure behind it, once: a chain of dependent failures does not nest messages."""

from __future__ import annotations

import pytest

from tensorwire.dispatcher.state import MAX_CAUSE_CHARS, input_failed
from tensorwire.protocol.errors import DependencyFailed, ExecutionError, WorkerLost, error_from_wire


def _chain(root: dict, n: int) -> list[dict]:
    """The wire errors of ``n`` batches, each reading the previous one's output (the first reads ``root``'s), as the
    dispatcher keeps them for the failed outputs (``routing._fail_batch``)."""
    errs, err = [], root
    for i in range(n):
        err = input_failed([100 + i], {0: err}).to_wire()
        errs.append(err)
    return errs


@pytest.mark.parametrize("root, code", [
    (WorkerLost("the worker for cpu:1 exited; tensors on cpu:1 are lost", device="cpu:1").to_wire(), "WorkerLost"),
    (ExecutionError("division by zero in op 7").to_wire(), "DependencyFailed"),
])
def test_a_chain_of_1000_failures_names_the_root_once(root, code):
    errs = _chain(root, 1000)
    first, last = errs[0], errs[-1]
    assert last["code"] == code == first["code"]
    assert last["cause"] == {"code": root["code"], "message": root["message"]} == first["cause"]
    assert last["message"].count(root["message"]) == 1, last["message"]
    assert last["message"].startswith("input 1099 ")  # what this batch lacked
    assert len(last["message"]) <= len(first["message"]) + 3  # the ids' digits only
    if code == "WorkerLost":
        assert last["device"] == "cpu:1"
        assert isinstance(error_from_wire(last), WorkerLost) and error_from_wire(last).device == "cpu:1"
    else:
        assert "ExecutionError" in last["message"] and isinstance(error_from_wire(last), DependencyFailed)


def test_a_long_root_message_is_cut_once():
    root = ExecutionError("x" * (50 * MAX_CAUSE_CHARS)).to_wire()
    last = _chain(root, 50)[-1]
    assert len(last["message"]) < MAX_CAUSE_CHARS + 100
    assert last["cause"]["message"].endswith("...") and len(last["cause"]["message"]) == MAX_CAUSE_CHARS


def test_a_malformed_cause_is_ignored():
    err = {**DependencyFailed("input 5 failed earlier").to_wire(), "cause": "not a map"}
    out = input_failed([6], {0: err}).to_wire()
    assert out["cause"] == {"code": "DependencyFailed", "message": "input 5 failed earlier"}
