"""GPU lanes: an elementwise work item computing several neighbouring elements, its memory accesses as vectors.

A GPU's work items are already its vector lanes, so where the OpenCL CPU lowering turns an element's expression
into vector arithmetic (:mod:`.vectorize`), a GPU gains from something else: fewer, wider memory accesses. With
``Options.lane_bytes`` = B, an elementwise kernel's work item computes the ``L`` elements of B bytes of its output
(:func:`lane_count`: 4 float32, 8 float16, 2 float64, at most :data:`MAX_LANES`): the element's scalar expression is
repeated once per lane (:func:`element_lanes`: the element index ``i`` replaced by ``base + j``; what does not
depend on it is shared), and

* a load whose index steps by one element with ``i`` becomes one vector load per chunk of at most B bytes
  (:func:`chunk`) whose lanes the lanes read, when its offset is a multiple of the chunk: known to be (a constant),
  or checked at run time (a slice's start that is a kernel parameter: the lanes' guard, see below); every other
  load (a broadcast, a permute, a padded or strided view, a constant offset that is not a multiple) stays a scalar
  load per lane;
* the output is written as vectors of at most B bytes (:func:`vector_stores`).

So every dtype, op and index pattern keeps its scalar computation (casts, helpers, random numbers): only the memory
accesses are grouped, as tinygrad's upcast or Triton's ``sizePerThread`` does it. A vector access needs its address
aligned to its size: the buffers a kernel gets start on 256-byte boundaries (the caching allocator hands out
multiples of 512 bytes from segments the driver aligns), the lanes' base is a multiple of ``L``, and the static
offset checks keep every other start out. The lowering (``lower.py``) runs the lanes where ``base + L <= n`` and
every run-time offset is aligned (:func:`element_lanes`'s guards), else a scalar loop over the item's elements: the
last item's tail of fewer than ``L`` elements, or every item where a parameter's offset is not aligned on this run.
So a kernel over any size, at any size or offset parameter, is right.
"""

from __future__ import annotations

from tensorwire.protocol import dtypes as D

from . import ir
from .ir import X
from .vectorize import stride, uses

#: the most elements one work item computes
MAX_LANES = 8


def lane_count(dtype: D.DType, lane_bytes: int) -> int:
    """How many elements of ``dtype`` one item computes when its output access is ``lane_bytes`` wide (a power of
    two, at least 1, at most :data:`MAX_LANES`)."""
    n = max(1, min(MAX_LANES, lane_bytes // dtype.itemsize))
    return 1 << (n.bit_length() - 1)


def chunk(dtype: D.DType, lanes: int, lane_bytes: int) -> int:
    """The elements of ``dtype`` one vector access of at most ``lane_bytes`` covers, for an item of ``lanes`` lanes."""
    return min(lanes, lane_count(dtype, lane_bytes))


def substitute(x: X, name: str, value: X, memo: dict, load=None) -> X:
    """``x`` with the index variable ``name`` replaced by ``value`` (index arithmetic simplified again).
    ``load(e)``, when given, makes the replacement of each load that reads ``name`` (None: the default)."""
    got = memo.get(x)
    if got is not None:
        return got
    if x.op == "var":
        out = value if x.arg == name else x
    elif x.op == "const" or not uses(x, name, memo.setdefault("#uses", {})):
        out = x
    elif x.op == "load" and load is not None and (got := load(x)) is not None:
        out = got
    else:
        src = [substitute(s, name, value, memo, load) for s in x.src]
        out = ir.rebuild(x, src, same_range=False)
    memo[x] = out
    return out


def vector_offset(idx: X, name: str, width: int) -> bool | X:
    """Whether ``width`` lanes of the index ``idx`` from a multiple of ``width`` of the variable ``name`` are one
    aligned vector: ``idx`` steps by one element with ``name`` from an offset that is a known multiple of ``width``
    (True), or from an offset only a run knows (the condition, an expression of kernel parameters, under which it
    is a multiple), else False."""
    if stride(idx, name, {}) != 1:
        return False
    off = substitute(idx, name, ir.iconst(0), {})
    if off.op == "const":
        return off.arg % width == 0
    return ir.alu("eq", D.bool_, ir.imod(off, width), ir.iconst(0))


def element_lanes(x: X, name: str, base: X, lanes: int, lane_bytes: int) -> tuple[list[X], list[X]]:
    """The element expression ``x`` of index variable ``name`` for the elements ``base .. base + lanes - 1``
    (``base`` a multiple of ``lanes``): ``(one scalar expression per lane, guards)``, the lanes' contiguous aligned
    loads read as vectors (see the module's docstring), valid where every guard (a bool of kernel parameters: an
    offset only a run knows is a multiple of its chunk) holds."""
    assert lanes & (lanes - 1) == 0, lanes
    aligned: dict = {}
    guards: dict = {}

    def is_vector(e: X) -> int:  # the chunk width e is read in, or 0 (scalar loads)
        w = aligned.get(e)
        if w is None:
            w = chunk(e.dtype, lanes, lane_bytes)
            ok = vector_offset(e.src[0], name, w) if w > 1 else False
            if isinstance(ok, X):
                guards[ok] = None
            w = aligned[e] = w if ok is not False else 0
        return w

    out = []
    starts: dict = {}
    for j in range(lanes):
        def load(e: X, j=j) -> X | None:
            w = is_vector(e)
            if not w:
                return None
            c = j - j % w
            key = (e, c)
            v = starts.get(key)
            if v is None:
                v = starts[key] = ir.load(e.arg, substitute(e.src[0], name, base + c, {}), e.dtype, w)
            return ir.lane(v, j % w)
        out.append(substitute(x, name, base + j, {}, load))
    return out, list(guards)


def vector_stores(buf: str, dtype: D.DType, base: X, values: list[X], lane_bytes: int) -> list:
    """Stores of ``values`` (one a lane) at ``buf[base ..]``: vectors of at most ``lane_bytes`` bytes."""
    w = chunk(dtype, len(values), lane_bytes)
    if w == 1:
        return [ir.Store(buf, base + j, v) for j, v in enumerate(values)]
    return [ir.Store(buf, base + c, ir.pack(values[c:c + w])) for c in range(0, len(values), w)]


__all__ = ["MAX_LANES", "chunk", "element_lanes", "lane_count", "substitute", "vector_offset", "vector_stores"]
