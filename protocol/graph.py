"""The graph IR: nodes, fragments, and builders that record ops against the op table.

A *batch* (client → dispatcher) and a *fragment* (dispatcher → worker) share one compact form:

``nodes``: a list of ``[op, refs, attrs, dev]`` where ``refs`` name the inputs: ``j >= 0`` is the
output of node ``j`` of the same list, ``-(k + 1)`` is external input ``k`` (a handle that existed
before the batch). ``dev`` indexes the batch's device list (fragments omit it). ``attrs`` is a
dict of plain values or ``None``.

``ext``: the handle ids of the external inputs; ``outs``: the handle id each node's output gets.
Ids are chosen by the client, so the next batch can refer to this one's outputs without waiting.

The structure of a batch (ops, attrs other than the op's ``dynamic`` ones, wiring, devices and the
external inputs' shapes/dtypes) is all a plan depends on; a batch seen before is sent as its plan
number plus fresh ``ext``/``outs`` ids and the dynamic attribute values.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from . import dtypes as D
from .errors import ProtocolError
from .ops import OPS, get_op, infer
from .shapes import Shape

#: the most inputs one node may name (its ``refs``): the dispatcher and the workers refuse a node with more, and whoever
#: makes a variadic op of more inputs (``cat`` of a long list, ``add_n`` of a gradient's many pieces) chains nodes of at
#: most this many, left to right (:func:`chunks`), which gives the same values
MAX_INPUTS = 4096


def chunks(items: list, first) -> object:
    """``first(items)`` when ``items`` fit one node (:data:`MAX_INPUTS`), else a left fold: ``first`` of the first
    :data:`MAX_INPUTS`, then ``first([that, *next MAX_INPUTS - 1])`` ... (a ``cat`` or an ``add_n`` that runs left to
    right gives the same result either way)."""
    acc = first(items[:MAX_INPUTS])
    for k in range(MAX_INPUTS, len(items), MAX_INPUTS - 1):
        acc = first([acc, *items[k:k + MAX_INPUTS - 1]])
    return acc


SEND = "send"  # pseudo-ops the worker handles itself (cross-device transfers)
RECV = "recv"


@dataclass(slots=True)
class Value:
    """A value inside a builder: its shape, dtype and a builder-specific reference."""

    shape: Shape
    dtype: D.DType
    ref: int

    @property
    def ndim(self) -> int:
        return len(self.shape)


class Builder:
    """Records ops against the op table, inferring every output's shape and dtype.

    Subclasses decide what recording means (``_emit``). Decompositions of composite ops are
    written against this interface, so one decomposition serves the worker (which expands
    composites its backend lacks), shape inference, and autograd.
    """

    def op(self, name: str, /, *inputs: Value, **attrs) -> Value:
        shape, dtype = infer(name, [(v.shape, v.dtype) for v in inputs], attrs)
        ref = self._emit(name, inputs, attrs, shape, dtype)
        return Value(shape, dtype, ref)

    def scalar(self, value, dtype: D.DType) -> Value:
        return self.op("full", shape=[], dtype=dtype.name, value=value)

    def _emit(self, name, inputs, attrs, shape, dtype) -> int:  # pragma: no cover - abstract
        raise NotImplementedError


class ExpandingBuilder(Builder):
    """Builds a flat list of nodes, expanding composites that are not in ``native``.

    Each emitted node is ``(op, refs, attrs, shape, dtype, origin)`` where ``origin`` is the index
    of the node of the original fragment it came from (for error messages).
    """

    def __init__(self, native: frozenset[str] | set[str] = frozenset()):
        self.native = native
        self.nodes: list[tuple] = []
        self.origin = -1
        self.composites: set[str] = set()  # the composite ops met, run whole or expanded

    def op(self, name: str, /, *inputs: Value, **attrs) -> Value:
        opdef = get_op(name)
        if opdef.decompose is not None:
            self.composites.add(name)
            if name not in self.native:
                shape, dtype = infer(name, [(v.shape, v.dtype) for v in inputs], attrs)  # validate as the op itself
                out = opdef.decompose(self, *inputs, attrs)
                if tuple(out.shape) != tuple(shape) or out.dtype is not dtype:
                    raise ProtocolError(f"the decomposition of {name} gives {out.dtype.name}{list(out.shape)}, its "
                                        f"rule says {dtype.name}{list(shape)} (a bug in the op table)")
                return out
        return super().op(name, *inputs, **attrs)

    def _emit(self, name, inputs, attrs, shape, dtype) -> int:
        self.nodes.append((name, tuple(v.ref for v in inputs), attrs, shape, dtype, self.origin))
        return len(self.nodes) - 1



_F64 = struct.Struct("<d")


def _float_bits(v) -> bytes:
    """The float64 bit pattern of ``v``: unlike ``==`` and ``hash``, it tells ``-0.0`` from ``0.0`` and matches a
    NaN to itself (NaNs of different sign or payload differ, as their bits do)."""
    return _F64.pack(v)


def freeze(v):
    """A hashable, type-exact form of an attribute value: lists become tuples, dicts item tuples (in their order),
    and floats and bools carry their type, so ``1``, ``1.0`` and ``True`` never share a key.

    Floats (numpy's float scalars and complex parts included) are keyed by their bits, so ``-0.0`` and ``0.0`` never
    share a key (``1 / x`` tells them apart) and a NaN finds its own key again. Every cache of values by attributes
    or operands (plans, the client's scalar tensors, ``tw.compile``'s signatures) keys them through here."""
    t = type(v)
    if t is int or t is str or v is None:
        return v
    if t is float:
        return (t, _F64.pack(v))
    if t is bool:  # (before the isinstance tests below: ``keepdim``, ``align_corners`` ...)
        return (t, v)
    if t is list or t is tuple:
        for x in v:
            if type(x) is not int:
                return tuple(map(freeze, v))
        return tuple(v)
    if t is dict:
        items = tuple(v.items())
        for _, x in items:  # (values that are their own frozen form, the common case: the items as they are)
            tx = type(x)
            if tx is not int and tx is not str and x is not None:
                return tuple([(k, freeze(x)) for k, x in items])
        return items
    if isinstance(v, (float, np.floating)):
        return (t, _float_bits(v))
    if isinstance(v, (complex, np.complexfloating)):
        return (t, _float_bits(v.real), _float_bits(v.imag))
    return (t, v)


def attrs_key(op: str, attrs: dict | None):
    """The part of a node's attributes a plan depends on (the op's ``dynamic`` ones left out, but for what its
    ``dynamic_key`` keeps of them), hashable; None for no attributes."""
    if not attrs:
        return None
    if op in (SEND, RECV):
        return freeze(attrs)
    try:  # (get_op's look-up, inline: every recorded node with attributes whose key the caller lacks comes here)
        opdef = OPS.get(op)
    except TypeError:  # (an unhashable name from a peer: get_op says what is wrong)
        opdef = None
    if opdef is None:
        opdef = get_op(op)
    dyn = opdef.dynamic
    if dyn:
        key = tuple([(k, freeze(v)) for k, v in attrs.items() if k not in dyn])
        if opdef.dynamic_key is not None:
            try:
                return (*key, ("#", freeze(opdef.dynamic_key(attrs))))
            except Exception:  # noqa: BLE001 - malformed attrs: keyed whole, and inference says what is wrong
                return freeze(attrs)
        return key
    return freeze(attrs)


def structure_key(op: str, refs: tuple, akey, dev: int):
    """The part of a node that a plan depends on: its op, input refs, device and ``akey``, the node's
    :func:`attrs_key` (dynamic attributes left out; the caller has it already, from inference)."""
    return (op, refs, dev) if akey is None else (op, refs, akey, dev)
