"""Structural validation of ``.safetensors`` files, reading only the header.

The checks mirror what the reference (Rust) loader enforces, so that a file the hub accepts
is a file every safetensors reader can open:

* 8-byte little-endian header length ``N`` with ``8 + N <= file size`` and ``N`` bounded;
* the header is a UTF-8 JSON object; ``__metadata__`` (optional) maps str to str;
* every tensor has a known ``dtype``, a ``shape`` of non-negative ints and ``data_offsets``
  ``[begin, end]`` with ``numel * bits / 8 == end - begin``;
* the tensors' byte ranges are in bounds, do not overlap and cover the data section exactly.
"""

from __future__ import annotations

import io
import json
import os
import struct
from typing import BinaryIO

from .errors import InvalidSafetensors

MAX_HEADER = 100_000_000  # the reference implementation's limit
MAX_TENSORS = 1_000_000

#: bits per element of every dtype safetensors knows
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}


def _fail(msg: str) -> InvalidSafetensors:
    return InvalidSafetensors(f"invalid safetensors file: {msg}")


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def validate_header(header_bytes: bytes, data_size: int) -> dict:
    """Validate a safetensors JSON header against a data section of ``data_size`` bytes.

    Returns the parsed header. Raises :class:`InvalidSafetensors` with the reason.
    """
    try:
        text = header_bytes.decode("utf-8")
    except UnicodeDecodeError:
        raise _fail("header is not UTF-8") from None
    if not text.startswith("{"):
        raise _fail("header is not a JSON object")

    def no_dupes(pairs: list[tuple[str, object]]) -> dict:
        d = dict(pairs)
        if len(d) != len(pairs):
            raise _fail("header has duplicate keys")
        return d

    try:
        header = json.loads(text, object_pairs_hook=no_dupes)
    except (ValueError, RecursionError):
        raise _fail("header is not valid JSON") from None
    if not isinstance(header, dict):
        raise _fail("header is not a JSON object")
    if len(header) > MAX_TENSORS:
        raise _fail("too many tensors")

    ranges: list[tuple[int, int, str]] = []
    for name, info in header.items():
        if name == "__metadata__":
            if not isinstance(info, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in info.items()
            ):
                raise _fail("__metadata__ must map strings to strings")
            continue
        if not isinstance(info, dict):
            raise _fail(f"tensor {name!r:.100} is not an object")
        dtype = info.get("dtype")
        shape = info.get("shape")
        offsets = info.get("data_offsets")
        if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
            raise _fail(f"tensor {name!r:.100} has unknown dtype {dtype!r:.50}")
        if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape) or len(shape) > 64:
            raise _fail(f"tensor {name!r:.100} has an invalid shape")
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(_is_int(o) for o in offsets)
            or not 0 <= offsets[0] <= offsets[1]
        ):
            raise _fail(f"tensor {name!r:.100} has invalid data_offsets")
        begin, end = offsets
        if end > data_size:
            raise _fail(f"tensor {name!r:.100} data_offsets [{begin}, {end}] out of bounds ({data_size} bytes)")
        numel = 1
        for d in shape:
            numel *= d
        bits = numel * DTYPE_BITS[dtype]
        if bits % 8 or bits // 8 != end - begin:
            raise _fail(
                f"tensor {name!r:.100}: shape {shape} of {dtype} needs {bits / 8:g} bytes, "
                f"data_offsets give {end - begin}"
            )
        ranges.append((begin, end, name))

    ranges.sort()
    pos = 0
    for begin, end, name in ranges:
        if begin < pos:
            raise _fail(f"tensor {name!r:.100} overlaps the previous tensor")
        if begin > pos:
            raise _fail(f"gap in the data section before tensor {name!r:.100}")
        pos = end
    if pos != data_size:
        raise _fail(f"tensors cover {pos} bytes but the data section has {data_size}")
    return header


def validate_stream(f: BinaryIO, size: int) -> dict:
    """Validate the safetensors file open as ``f`` (positioned at 0) whose total size is ``size``."""
    if size < 8:
        raise _fail(f"file is {size} bytes, shorter than the 8-byte header length")
    raw = f.read(8)
    if len(raw) != 8:
        raise _fail("truncated header length")
    (n,) = struct.unpack("<Q", raw)
    if n > MAX_HEADER:
        raise _fail(f"header length {n} exceeds {MAX_HEADER}")
    if 8 + n > size:
        raise _fail(f"header length {n} runs past the end of the {size}-byte file")
    header = f.read(n)
    if len(header) != n:
        raise _fail("truncated header")
    return validate_header(header, size - 8 - n)


def validate_file(path: str | os.PathLike) -> dict:
    """Validate the safetensors file at ``path``; returns the parsed header."""
    with open(path, "rb") as f:
        return validate_stream(f, os.fstat(f.fileno()).st_size)


def validate_bytes(data: bytes) -> dict:
    """Validate an in-memory safetensors file."""
    return validate_stream(io.BytesIO(data), len(data))
