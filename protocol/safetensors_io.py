"""safetensors read/write on numpy arrays, including bfloat16 (through ml_dtypes); never pickle.

Reading maps the file (``np.memmap``), so loading is zero-copy until a tensor is used; writing
produces the exact layout of the reference implementation (8-byte little-endian header length,
JSON header padded with spaces to a multiple of 8, tensors in the header's order).
"""

from __future__ import annotations

import json
import os
import struct

import numpy as np

from . import dtypes as D
from .errors import DTypeError, ProtocolError

ST_DTYPES: dict[str, D.DType] = {"BOOL": D.bool_, "U8": D.uint8, "I8": D.int8, "I16": D.int16, "I32": D.int32,
                                 "I64": D.int64, "F16": D.float16, "BF16": D.bfloat16, "F32": D.float32,
                                 "F64": D.float64, "C64": D.complex64}
# (the format has no complex128: saving one is refused with a DTypeError, as the reference implementation refuses it)
TW_TO_ST = {v.name: k for k, v in ST_DTYPES.items()}
MAX_HEADER = 100_000_000


def parse_header(prefix: bytes, total_size: int | None = None) -> tuple[dict, int]:
    """Parse a header from the file's first bytes; returns (header without ``__metadata__`` popped, data offset)."""
    if len(prefix) < 8:
        raise ProtocolError("safetensors: file shorter than its 8-byte header length")
    (n,) = struct.unpack("<Q", prefix[:8])
    if n > MAX_HEADER or (total_size is not None and 8 + n > total_size):
        raise ProtocolError(f"safetensors: header length {n} is out of bounds")
    if len(prefix) < 8 + n:
        raise ProtocolError("safetensors: truncated header")
    try:
        header = json.loads(bytes(prefix[8:8 + n]).decode("utf-8"))
    except ValueError as e:
        raise ProtocolError(f"safetensors: header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise ProtocolError("safetensors: header is not a JSON object")
    return header, 8 + n


def tensor_specs(header: dict) -> dict[str, tuple[D.DType, tuple[int, ...], int, int]]:
    """``name -> (dtype, shape, begin, end)`` relative to the data section, validated."""
    out = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        try:
            dt = ST_DTYPES[spec["dtype"]]
            shape = tuple(int(s) for s in spec["shape"])
            begin, end = (int(x) for x in spec["data_offsets"])
        except KeyError as e:
            raise DTypeError(f"safetensors: tensor {name!r} has an unsupported or missing field {e}") from None
        except (TypeError, ValueError):
            raise ProtocolError(f"safetensors: bad entry for tensor {name!r}") from None
        if end - begin != int(np.prod(shape, dtype=np.int64)) * dt.itemsize or begin < 0:
            raise ProtocolError(f"safetensors: tensor {name!r} has inconsistent offsets")
        out[name] = (dt, shape, begin, end)
    return out


def load_file(path: str | os.PathLike, names=None) -> dict[str, np.ndarray]:
    """Map a safetensors file and return ``name -> array`` (read-only, zero-copy views of the map)."""
    if os.path.getsize(path) < 8:
        raise ProtocolError(f"safetensors: {path} is shorter than its 8-byte header length")
    return load_buffer(np.memmap(path, dtype=np.uint8, mode="r"), names)


def load_buffer(buf, names=None) -> dict[str, np.ndarray]:
    """``name -> array`` viewing a safetensors file held in memory (bytes, bytearray, mmap): no copies."""
    mv = memoryview(buf)
    size = mv.nbytes
    if size < 8:
        raise ProtocolError("safetensors: buffer shorter than its 8-byte header length")
    (n,) = struct.unpack("<Q", mv[:8])
    if n > MAX_HEADER or 8 + n > size:
        raise ProtocolError("safetensors: bad header length")
    header, off = parse_header(bytes(mv[:8 + n]), size)
    raw = np.frombuffer(mv, dtype=np.uint8)
    out = {}
    for name, (dt, shape, b, e) in tensor_specs(header).items():
        if names is not None and name not in names:
            continue
        if off + e > size:
            raise ProtocolError(f"safetensors: tensor {name!r} extends past the end of the buffer")
        out[name] = raw[off + b: off + e].view(dt.np).reshape(shape)
    return out


def metadata_of(path: str | os.PathLike) -> dict:
    with open(path, "rb") as f:
        prefix = f.read(8)
        (n,) = struct.unpack("<Q", prefix)
        header, _ = parse_header(prefix + f.read(min(n, MAX_HEADER)))
    return header.get("__metadata__") or {}


def save_bytes(tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> bytes:
    """Serialise ``name -> array`` to safetensors bytes (tensors sorted by name, as the reference does)."""
    header: dict = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    arrays = []
    for name in sorted(tensors):
        a = np.asarray(tensors[name], order="C")  # (not ascontiguousarray: it makes a 0-d array 1-d)
        dt = D.from_numpy(a.dtype)
        if dt.name not in TW_TO_ST:
            raise DTypeError(f"safetensors: tensor {name!r} is {dt.name}, which the format has no dtype for "
                             f"(it knows {', '.join(sorted(TW_TO_ST))})")
        header[name] = {"dtype": TW_TO_ST[dt.name], "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        arrays.append(a)
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    parts = [struct.pack("<Q", len(hb)), hb]
    parts.extend(a.view(np.uint8).reshape(-1).tobytes() if a.dtype == D.bfloat16.np else a.tobytes() for a in arrays)
    return b"".join(parts)
