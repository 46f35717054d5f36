"""The wire helpers: anything malformed is a ProtocolError, never a crash or another exception type."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest
import zmq

from tensorwire.protocol import dtypes as D
from tensorwire.protocol import wire
from tensorwire.protocol.errors import ProtocolError


def test_header_round_trip():
    h = {"t": "run", "nodes": [["add", [-1, -2], None]], "b": b"\x00\xff", "f": 1.5, "n": None}
    assert wire.unpack_header(wire.pack_header(h)) == h


@pytest.mark.parametrize("data", [
    b"", b"\xc1", b"\xff\xff\xff", bytes(range(256)), b"\x91", b"\x81\xa1t", b"\xdf\xff\xff\xff\xff",
    b"\xc5\xff\xff",  # bin 16 claiming 65535 bytes, holding none
])
def test_garbage_headers(data):
    with pytest.raises(ProtocolError):
        wire.unpack_header(data)


def test_truncated_msgpack_at_every_length():
    full = msgpack.packb({"t": "run", "nodes": [["add", [-1, -2], {"x": 1.5}]], "s": "abc" * 10})
    for n in range(len(full)):
        with pytest.raises(ProtocolError):
            wire.unpack_header(full[:n])


def test_trailing_bytes_are_refused():
    with pytest.raises(ProtocolError):
        wire.unpack_header(msgpack.packb({"t": "x"}) + b"\x00")


@pytest.mark.parametrize("value", [[1, 2], 7, "t", None, True, 1.5, b"t", {"x": 1}, {"t": 5}, {"t": None},
                                   {1: "run"}])
def test_non_map_or_untyped_headers(value):
    with pytest.raises(ProtocolError, match="msgpack map"):
        wire.unpack_header(msgpack.packb(value))


def test_ext_types_and_deep_nesting_are_refused():
    with pytest.raises(ProtocolError):
        wire.unpack_header(msgpack.packb({"t": "x", "e": msgpack.ExtType(1, b"abc")}))
    with pytest.raises(ProtocolError):
        wire.unpack_header(b"\x81\xa1t" + b"\x91" * 100_000 + b"\xc0")


def test_oversized_header(monkeypatch):
    monkeypatch.setattr(wire, "MAX_HEADER", 64)
    with pytest.raises(ProtocolError, match="exceeds"):
        wire.unpack_header(msgpack.packb({"t": "x" * 100}))


def test_oversized_containers_are_refused():
    big = msgpack.packb({"t": "x", "s": "a" * ((1 << 20) + 1)})
    with pytest.raises(ProtocolError):
        wire.unpack_header(big)


# -- tensor descriptors and buffer frames -----------------------------------------------------------


@pytest.mark.parametrize("dt", D.ALL, ids=lambda d: d.name)
@pytest.mark.parametrize("shape", [(3, 4), (), (0,), (2, 0, 3)])
def test_array_round_trip(dt, shape):
    a = (np.arange(int(np.prod(shape))) % 7).astype(dt.np).reshape(shape)
    frame = wire.as_frame(a)
    desc = wire.describe(a, 5, 0)
    assert desc == [5, dt.name, list(shape), 0]
    for f in (frame, bytes(frame), zmq.Frame(bytes(frame))):
        hid, b = wire.array_from_frame(desc, [f])
        assert hid == 5 and b.dtype == dt.np and b.shape == shape
        assert b.tobytes() == a.tobytes()


@pytest.mark.parametrize("dt", D.ALL, ids=lambda d: d.name)
@pytest.mark.parametrize("shape", [(3, 4), (), (0,)])
def test_a_value_carried_in_the_header(dt, shape):
    """A small fetched value travels in its descriptor (``INLINE_MAX``): the bytes in place of the frame index."""
    a = (np.arange(int(np.prod(shape))) % 7).astype(dt.np).reshape(shape)
    h = wire.unpack_header(wire.pack_header({"t": "done", "values": [[5, dt.name, list(shape), a.tobytes()]]}))
    hid, b = wire.array_from_frame(h["values"][0], [])
    assert hid == 5 and b.dtype == dt.np and b.shape == shape and b.tobytes() == a.tobytes()


@pytest.mark.parametrize("nbytes", [0, 7, 9])
def test_a_value_in_the_header_of_the_wrong_size(nbytes):
    with pytest.raises(ProtocolError, match="needs 8"):
        wire.array_from_frame([1, "float32", [2], b"\0" * nbytes], [b"\0" * 8])


def test_as_frame_of_a_non_contiguous_array():
    a = np.arange(12, dtype=np.float32).reshape(3, 4).T
    _, b = wire.array_from_frame(wire.describe(a, 1, 0), [wire.as_frame(a)])
    np.testing.assert_array_equal(a, b)


BAD_DESCRIPTORS = [
    None, 5, "x", [], [1, "float32", [2]], [1, "float32", [2], 0, 9], (1, "float32", [2], 0),
    [1, "float33", [2], 0], [1, 8, [2], 0], [1, None, [2], 0],
    [1, "float32", [2], 1], [1, "float32", [2], -1], [1, "float32", [2], "0"], [1, "float32", [2], 0.0],
    [1, "float32", [2], None],
]


@pytest.mark.parametrize("desc", BAD_DESCRIPTORS, ids=repr)
def test_bad_descriptors(desc):
    with pytest.raises(ProtocolError):
        wire.array_from_frame(desc, [b"\0" * 8])


@pytest.mark.parametrize("shape", [[-1], [2, -4], "ab", [2.5], [[2]], None, 7.0, [1] * 65, [1 << 30] * 2],
                         ids=["neg", "neg2", "str", "float", "nested", "none", "scalar-float", "65-dims", "too-big"])
def test_bad_descriptor_shapes(shape):
    """A malformed shape in a descriptor is a ProtocolError like every other malformed field."""
    with pytest.raises(ProtocolError):
        wire.array_from_frame([1, "float32", shape, 0], [b"\0" * 8])


@pytest.mark.parametrize("nbytes", [0, 7, 9, 16])
def test_size_mismatch(nbytes):
    with pytest.raises(ProtocolError, match="needs 8"):
        wire.array_from_frame([1, "float32", [2], 0], [b"\0" * nbytes])


def test_size_mismatch_for_empty_and_0d():
    with pytest.raises(ProtocolError):
        wire.array_from_frame([1, "int64", [], 0], [b"\0" * 4])
    with pytest.raises(ProtocolError):
        wire.array_from_frame([1, "int64", [0, 3], 0], [b"\0"])


def test_hello_carries_the_protocol_version():
    from tensorwire.protocol import PROTOCOL_VERSION

    h = wire.unpack_header(wire.pack_header(wire.hello("tok", "me")))
    assert h == {"t": "hello", "v": PROTOCOL_VERSION, "token": "tok", "client": "me"}
