"""The wire format: one msgpack header frame, then raw buffer frames (never pickle).

A message is ``[header, *buffers]`` on the wire (ROUTER sockets prepend routing frames). The header
is a msgpack map with at least ``"t"`` (the message type). Tensor bytes travel as their own frames,
C-contiguous, described in the header by ``[id, dtype, shape, frame_index]``; they are sent and
received without copies (zmq frames wrap numpy buffers and back).
"""

from __future__ import annotations

import os
import threading

import msgpack
import numpy as np
import zmq

from . import PROTOCOL_VERSION
from . import dtypes as D
from .errors import ProtocolError, TensorwireError
from .lane import EVENTS as EVENTS  # (re-exported: one definition, see SNDMORE below)
from .lane import POLLIN as POLLIN
from .lane import LaneSocket
from .shapes import MAX_NDIM, MAX_NUMEL, check_shape, numel

#: the largest message a socket accepts (bytes, whole message); a peer sending more is cut off by zmq
MAX_MESSAGE = int(os.environ.get("TENSORWIRE_MAX_MESSAGE", str(8 << 30)))
#: the largest header (msgpack) frame
MAX_HEADER = 64 << 20

_UNPACK_LIMITS = dict(max_str_len=1 << 20, max_bin_len=MAX_HEADER, max_array_len=1 << 24, max_map_len=1 << 20,
                      max_ext_len=0, strict_map_key=False, raw=False, use_list=True)


#: a packer's buffer keeps the size of the largest header it packed: past this, the thread gets a fresh packer
_PACKER_KEEP = 1 << 20


class _Packers(threading.local):
    """One msgpack packer per thread (``msgpack.packb`` makes a new one, with a 256 KiB buffer, for every header)."""

    def __init__(self):
        self.packer = msgpack.Packer(use_bin_type=True, buf_size=1 << 14)


_PACKERS = _Packers()


def pack_header(header: dict) -> bytes:
    data = _PACKERS.packer.pack(header)
    if len(data) > _PACKER_KEEP:  # (a large plan's nodes: its buffer is not kept for the small headers that follow)
        _PACKERS.packer = msgpack.Packer(use_bin_type=True, buf_size=1 << 14)
    return data


def unpack_header(data) -> dict:
    """Decode a header frame; anything but a msgpack map with a str ``t`` is a ProtocolError."""
    if len(data) > MAX_HEADER:
        raise ProtocolError(f"header frame of {len(data)} bytes exceeds the limit of {MAX_HEADER}")
    try:
        h = msgpack.unpackb(data, **_UNPACK_LIMITS)
    except Exception as e:  # msgpack raises many types on garbage
        raise ProtocolError(f"malformed header frame (not msgpack): {str(e)[:200]}") from None
    if not isinstance(h, dict) or not isinstance(h.get("t"), str):
        raise ProtocolError("a header must be a msgpack map with a string 't' (message type)")
    return h


#: a fetched value of at most this many bytes answered on a direct channel travels in the answer's header (its
#: descriptor's last field the bytes, not a frame index): one frame less to send and to read on each side
INLINE_MAX = 4096


def describe(arr: np.ndarray, hid: int, frame: int) -> list:
    return [hid, D.from_numpy(arr.dtype).name, list(arr.shape), frame]


def array_from_frame(desc, frames: list) -> tuple[int, np.ndarray]:
    """Wrap a described buffer frame as a numpy array, without copying; checks sizes and dtypes. The descriptor's
    last field is the frame's index, or the value's bytes themselves (``INLINE_MAX``)."""
    if type(desc) is not list or len(desc) != 4:
        raise ProtocolError(f"bad tensor descriptor {desc!r}")
    hid, dname, shape, fi = desc
    dt = D.BY_NAME.get(dname) if type(dname) is str else None
    if dt is None:
        raise ProtocolError(f"unknown dtype {dname!r} in tensor descriptor")
    n = 1
    if type(shape) is list and len(shape) <= MAX_NDIM:  # (the common case checked inline: check_shape's rule)
        for d in shape:
            if type(d) is not int or d < 0:
                n = -1
                break
            n *= d
    else:
        n = -1
    if 0 <= n <= MAX_NUMEL:
        shape = tuple(shape)
    else:
        try:
            shape = check_shape(shape)
        except TensorwireError as e:
            raise ProtocolError(f"bad shape in tensor descriptor: {e.message}") from None
        n = numel(shape)
    if type(fi) is bytes:  # (carried in the header)
        got = len(fi)
        buf = fi
    elif type(fi) is not int or not 0 <= fi < len(frames):
        raise ProtocolError(f"tensor descriptor names frame {fi!r}, message has {len(frames)} buffer frames")
    else:
        buf = frames[fi]
        buf = buf.buffer if isinstance(buf, zmq.Frame) else memoryview(buf)
        got = buf.nbytes
    need = n * dt.itemsize
    if got != need:
        raise ProtocolError(f"buffer frame holds {got} bytes, shape {list(shape)} of {dname} needs {need}")
    if not need:
        return hid, np.empty(shape, dt.np)
    # (one call: the array of that shape on the buffer, writeable as the buffer is, as ``frombuffer`` and ``reshape``
    # make it, for ~3k instructions less a value; the sizes were checked above)
    return hid, np.ndarray(shape, dt.np, buf)


def frame_nbytes(frame) -> int:
    """The bytes in a buffer frame: a received zmq ``Frame``, a ``memoryview`` or ``bytes``."""
    if isinstance(frame, memoryview):
        return frame.nbytes
    buf = getattr(frame, "buffer", None)  # (a zmq.Frame)
    return buf.nbytes if buf is not None else len(frame)


def as_frame(arr: np.ndarray):
    """A zero-copy sendable view of an array's bytes (made contiguous if needed)."""
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    if arr.dtype == D.bfloat16.np:
        return memoryview(arr.view(np.uint16).reshape(-1)) if arr.size else b""
    return memoryview(arr.reshape(-1)) if arr.size else b""


def hello(token: str | None, client: str) -> dict:
    return {"t": "hello", "v": PROTOCOL_VERSION, "token": token, "client": client}


ZERO_COPY_MIN = 1 << 16
#: zmq's flags as plain ints: pyzmq's are enum.Flag members, whose ``|`` and ``&`` cost about a microsecond each in
#: Python, several times a message on the hot paths. ``POLLIN`` and the socket option ``EVENTS``
#: (``sock.getsockopt(EVENTS) & POLLIN``: a message waits) are ``lane``'s, which this module imports (one definition:
#: until session 58 the lane's were the enum members, and its callers' ``&`` built one an answer)
SNDMORE, NOBLOCK = int(zmq.SNDMORE), int(zmq.NOBLOCK)


def recv_frames(sock, flags: int = 0) -> list:
    """One multipart message as ``zmq.Frame`` objects (no copies). Reads each frame's ``more`` flag rather than
    asking the socket (``recv_multipart`` calls ``getsockopt(RCVMORE)`` per frame, which builds an enum member each
    time: about a microsecond a frame on the hot paths)."""
    if type(sock) is LaneSocket:
        return sock.recv_message(flags)
    f = sock.recv(flags, copy=False)
    parts = [f]
    while f.more:
        f = sock.recv(flags, copy=False)
        parts.append(f)
    return parts


def send_parts(sock, parts, wait_sent: bool = False) -> None:
    """Send a multipart message: small frames copied (cheaper), large ones without a copy.

    ``wait_sent``: return only once zmq no longer needs the large frames' memory (the caller may reuse it).
    """
    if type(sock) is LaneSocket:  # (its writes are done when it returns)
        sock.send_message(parts)
        return
    last = len(parts) - 1
    trackers = []
    for i, p in enumerate(parts):
        n = p.nbytes if isinstance(p, memoryview) else len(p) if not hasattr(p, "buffer") else None
        copy = n is not None and n < ZERO_COPY_MIN
        track = wait_sent and not copy
        t = sock.send(p, SNDMORE if i < last else 0, copy=copy, track=track)
        if track and t is not None:
            trackers.append(t)
    for t in trackers:
        t.wait()
