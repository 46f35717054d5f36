"""The wire, named (issue 30): ``protocol.messages`` lists every message kind once, and each receiving end dispatches
exactly its plane's kinds through a handler table (no if-chains to fall out of step with the list)."""

from __future__ import annotations

import pytest

from tensorwire.backends.direct import DIRECT_HANDLERS, PEER_KINDS, DirectChannel
from tensorwire.backends.worker import WORKER_HANDLERS, Executor
from tensorwire.dispatcher.broker import SERVICE_HANDLERS
from tensorwire.dispatcher.server import Dispatcher
from tensorwire.dispatcher.sessions import CLIENT_HANDLERS
from tensorwire.protocol.errors import ProtocolError
from tensorwire.protocol.messages import ANSWERS, CLIENT, DIRECT, SERVICE, WORKER, check

TABLES = [
    (CLIENT, CLIENT_HANDLERS, {"hello", "ping"}, Dispatcher),  # (taken before the session's key is looked up)
    (SERVICE, SERVICE_HANDLERS, {"hb", "register"}, Dispatcher),  # (taken before the sender must be registered)
    (WORKER, WORKER_HANDLERS, {"registered", "refused", "hb"}, Executor),  # (the worker's loop takes these)
    (DIRECT, {**DIRECT_HANDLERS, **PEER_KINDS}, set(), DirectChannel),
]


@pytest.mark.parametrize("plane, handlers, taken_first, cls", TABLES, ids=lambda x: getattr(x, "name", ""))
def test_each_socket_handles_exactly_its_planes_kinds(plane, handlers, taken_first, cls):
    assert set(handlers) | taken_first == set(plane.kinds), (plane.name, set(plane.kinds) ^ (set(handlers) |
                                                                                              taken_first))
    for kind, method in handlers.items():
        assert callable(getattr(cls, method, None)), f"{cls.__name__} has no {method} for {kind}"


def test_every_kind_says_what_it_is_for():
    for plane in (CLIENT, SERVICE, WORKER, DIRECT):
        for name, kind in plane.kinds.items():
            assert len(kind.doc) > 10, (plane.name, name)
    assert all(len(doc) > 5 for doc in ANSWERS.values())


def test_check_refuses_unknown_kinds_and_wrong_types():
    assert check(CLIENT, {"t": "devices", "q": 3, "k": b"x"}) == "devices"
    assert check(CLIENT, {"t": "ping"}) == "ping"  # (absent fields are the handler's business)
    assert check(DIRECT, {"t": "run", "q": None, "sync": True, "future_field": 1}) == "run"  # (unknown fields pass)
    for plane, h in [
        (CLIENT, {"t": "steal"}),
        (CLIENT, {"t": 5}),
        (CLIENT, {}),
        (CLIENT, {"t": "devices", "q": "3"}),
        (CLIENT, {"t": "devices", "q": True}),  # (a bool is not a request number)
        (CLIENT, {"t": "service", "q": 1, "service": 7}),
        (WORKER, {"t": "run", "s": "not bytes"}),
        (DIRECT, {"t": "run", "sync": 1}),
        (DIRECT, {"t": "run", "ext": {"a": 1}}),
        (SERVICE, {"t": "hb", "of": 3}),
    ]:
        with pytest.raises(ProtocolError) as e:
            check(plane, h)
        assert "Error" not in e.value.message and e.value.code == "ProtocolError"


def test_check_takes_exactly_the_types_each_field_lists():
    """Every field of every kind, with a value of each type msgpack gives: taken when its type is listed (or the
    field is unchecked), refused otherwise, and the error names the field."""
    values = [0, 1.5, "s", b"b", True, [1], {"a": 1}, None]
    for plane in (CLIENT, WORKER, DIRECT, SERVICE):
        for t, kind in plane.kinds.items():
            for name, types in kind.fields.items():
                for v in values:
                    h = {"t": t, name: v, "unlisted": 2.5}
                    if types is None or type(v) in types:
                        assert check(plane, h) == t
                    else:
                        with pytest.raises(ProtocolError, match=repr(name)):
                            check(plane, h)
