"""The backward-graph transform: a forward subgraph in, its backward graph out, both in the graph IR.

Request (``g``, plain msgpack values)::

    devs:    ["cpu:0", ...]                    devices the nodes name by index
    ext:     [[shape, dtype, dev], ...]        the forward graph's external inputs (leaves, constants)
    nodes:   [[op, refs, attrs, dev], ...]     forward nodes in topological order; ref j >= 0 is node j,
                                               -(k + 1) is ext k
    roots:   [ref, ...]                        outputs that receive a seed gradient (seed i -> roots[i];
                                               the seed has the root's shape and dtype)
    targets: [ref, ...]                        values whose total gradient is wanted

Reply::

    nodes:   [[op, refs, attrs, dev], ...]     the backward graph; ref j >= 0 is backward node j,
                                               -(k + 1) is backward ext k
    ext:     [["n", j] | ["x", k] | ["s", i]]  what each backward external is: forward node j's output,
                                               forward ext k, or seed i
    grads:   [ref or None, ...]                one per target: a backward node (each its own), or None
                                               when no gradient reaches it
    metas:   [[shape, dtype], ...]             each backward node's output, as inferred here: the client
                                               records the graph from them, without inferring it again

The transform is a pure function of the request's structure: the service caches replies by it.
"""

from __future__ import annotations

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import ProtocolError
from tensorwire.protocol.graph import Builder, Value, chunks, freeze
from tensorwire.protocol.ops import get_op, infer
from tensorwire.protocol.shapes import check_shape

from .vjp import vjp

MAX_NODES = 1 << 18


class BackwardBuilder(Builder):
    """Records backward nodes (with a current device), merging identical nodes."""

    def __init__(self, graph: bool = False):
        #: whether the gradients will be differentiated again (``create_graph``): the rules then keep each one
        #: connected to the values it is a function of, as torch's (``vjp.Ctx.higher``)
        self.graph = graph
        self.nodes: list[list] = []
        self.metas: list = []  # (shape, dtype) per node
        self.ext: list = []  # keys: ("n", j) / ("x", k) / ("s", i)
        self.ext_metas: list = []  # (shape, dtype) per external
        self.ext_index: dict = {}
        self.dev = 0
        self._cse: dict = {}

    def external(self, key, shape, dtype) -> Value:
        r = self.ext_index.get(key)
        if r is None:
            r = self.ext_index[key] = -(len(self.ext) + 1)
            self.ext.append(key)
            self.ext_metas.append((tuple(shape), dtype))
        return Value(tuple(shape), dtype, r)

    def producer(self, v: Value) -> tuple[str, list[Value], dict] | None:
        """``(op, inputs, attrs)`` of the node that made ``v``; None for an external. A rule may read how its
        output's gradient was made (``autograd/vjp.py``'s :func:`~.vjp.padded_parts`)."""
        if v.ref < 0:
            return None
        name, refs, attrs, _ = self.nodes[v.ref]
        return name, [Value(*(self.metas[r] if r >= 0 else self.ext_metas[-r - 1]), r) for r in refs], attrs or {}

    def op(self, name: str, *inputs: Value, **attrs) -> Value:
        frozen = freeze(attrs)  # (the CSE key's, and inference's memo key: see ``infer``'s ``attrs_key``)
        shape, dtype = infer(name, [(v.shape, v.dtype) for v in inputs], attrs, frozen if attrs else None)
        refs = tuple(v.ref for v in inputs)
        key = (name, refs, frozen, self.dev)
        r = self._cse.get(key)
        if r is None:
            r = self._cse[key] = len(self.nodes)
            self.nodes.append([name, list(refs), attrs or None, self.dev])
            self.metas.append((shape, dtype))
            if len(self.nodes) > MAX_NODES:
                raise ProtocolError("the backward graph is too large")
        return Value(shape, dtype, r)


def _meta(m) -> tuple:
    if not isinstance(m, (list, tuple)) or len(m) != 3:
        raise ProtocolError("ext entries are [shape, dtype, dev]")
    shape = check_shape(m[0])
    if not isinstance(m[1], str) or m[1] not in D.BY_NAME:
        raise ProtocolError(f"unknown dtype {m[1]!r}")
    return shape, D.BY_NAME[m[1]], m[2]


def build_backward(g: dict) -> dict:
    """The backward graph of forward graph ``g`` (see the module docstring for both forms)."""
    if not isinstance(g, dict):
        raise ProtocolError("the request's graph must be a map")
    devs = g.get("devs") or []
    ext = [_meta(m) for m in g.get("ext") or []]
    nodes = g.get("nodes") or []
    if not isinstance(nodes, list) or len(nodes) > MAX_NODES:
        raise ProtocolError(f"nodes must be a list of at most {MAX_NODES} nodes")
    ndev = len(devs)
    for _, _, d in ext:
        if not isinstance(d, int) or not 0 <= d < max(ndev, 1):
            raise ProtocolError(f"bad device index {d!r}")

    # forward metas (validated through the op table)
    metas: list = []
    for j, n in enumerate(nodes):
        if not isinstance(n, (list, tuple)) or len(n) != 4:
            raise ProtocolError("nodes are [op, refs, attrs, dev]")
        op, refs, attrs, d = n
        get_op(op)
        if not isinstance(refs, list) or not isinstance(d, int) or not 0 <= d < max(ndev, 1):
            raise ProtocolError(f"node {j}: bad refs or device")
        if attrs is not None and not isinstance(attrs, dict):
            raise ProtocolError(f"node {j}: attrs must be a map")
        ins = []
        for r in refs:
            if not isinstance(r, int) or r >= j or -r > len(ext):
                raise ProtocolError(f"node {j}: bad reference {r!r}")
            ins.append(_value_meta(r, metas, ext)[:2])
        metas.append((*infer(op, ins, attrs or {}, freeze(attrs) if attrs else None), d))

    def meta(r):
        if not isinstance(r, int) or r >= len(metas) or -r > len(ext):
            raise ProtocolError(f"bad reference {r!r}")
        return _value_meta(r, metas, ext)

    roots = list(g.get("roots") or [])
    targets = list(g.get("targets") or [])
    for r in roots + targets:
        meta(r)

    # which values lead to a target (only those need gradients)
    tset = set(targets)
    dep_ext = {r for r in tset if r < 0}
    dep = [False] * len(nodes)
    for j, n in enumerate(nodes):
        if j in tset:
            dep[j] = True
            continue
        if get_op(n[0]).differentiable:
            dep[j] = any((dep[r] if r >= 0 else r in dep_ext) for r in n[1])

    def depends(r):
        return dep[r] if r >= 0 else r in dep_ext

    graph = g.get("graph", False)
    if not isinstance(graph, bool):
        raise ProtocolError("graph must be a bool")
    b = BackwardBuilder(graph)
    # each value's gradient as the pieces that reached it, summed once it is read (:func:`_sum`): a weight used at
    # every step of a loop gets one ``add_n`` of its pieces, not an ``add`` a piece
    pieces: dict[int, list[Value]] = {}

    def fwd(r) -> Value:
        s, dt, _ = meta(r)
        return b.external(("n", r) if r >= 0 else ("x", -r - 1), s, dt)

    def accumulate(r, v: Value):
        got = pieces.get(r)
        if got is None:
            pieces[r] = [v]
        else:
            got.append(v)

    def total(r) -> Value | None:
        got = pieces.get(r)
        if got is None:
            return None
        if len(got) > 1:
            b.dev = meta(r)[2]
            got[:] = [_sum(b, got)]
        return got[0]

    for i, r in enumerate(roots):
        if depends(r):
            s, dt, _ = meta(r)
            accumulate(r, b.external(("s", i), s, dt))

    for j in range(len(nodes) - 1, -1, -1):
        gj = total(j)
        if gj is None:
            continue
        op, refs, attrs, d = nodes[j]
        needs = [depends(r) and meta(r)[1].is_inexact for r in refs]
        if not any(needs):
            continue
        b.dev = d
        xs = [fwd(r) for r in refs]
        y = fwd(j)
        in_devs = [meta(r)[2] for r in refs]
        for r, gr, need in zip(refs, vjp(b, op, xs, y, gj, attrs or {}, needs, in_devs, d), needs):
            if need and gr is not None:
                accumulate(r, gr)

    out_refs = []
    used = set()
    for r in targets:
        v = total(r)
        if v is None:
            out_refs.append(None)
            continue
        if v.ref < 0 or v.ref in used:  # every target gets a value of its own
            s, dt, dv = meta(r)
            b.dev = dv
            b._cse.clear()
            v = b.op("copy", v)
        used.add(v.ref)
        out_refs.append(v.ref)
    return _prune(b, out_refs)


def _sum(b: BackwardBuilder, vs: list[Value]) -> Value:
    """The sum of a value's gradient pieces in the order they came: one ``add_n`` where there are more than two of one
    shape and (inexact) dtype, else ``add`` s (two pieces stay an ``add``: the form rules such as ``rnn_scan``'s read
    back through ``padded_parts``). Both add left to right, so the sums are the same to the bit."""
    v0 = vs[0]
    if len(vs) > 2 and v0.dtype.is_inexact and all(v.shape == v0.shape and v.dtype is v0.dtype for v in vs):
        return chunks(vs, lambda part: b.op("add_n", *part))  # (a weight read in thousands of steps: chained)
    s = v0
    for v in vs[1:]:
        s = b.op("add", s, v)
    return s


def _value_meta(r, metas, ext):
    return metas[r] if r >= 0 else ext[-r - 1]


def _prune(b: BackwardBuilder, outs: list) -> dict:
    """Keep only the nodes (and externals) the outputs need; renumber."""
    live = [False] * len(b.nodes)
    stack = [r for r in outs if r is not None and r >= 0]
    for r in stack:
        live[r] = True
    while stack:
        j = stack.pop()
        for r in b.nodes[j][1]:
            if r >= 0 and not live[r]:
                live[r] = True
                stack.append(r)
    new_index = {}
    ext_index = {}
    ext = []
    nodes = []
    metas = []
    for j, n in enumerate(b.nodes):
        if not live[j]:
            continue
        refs = []
        for r in n[1]:
            if r >= 0:
                refs.append(new_index[r])
            else:
                k = ext_index.get(r)
                if k is None:
                    k = ext_index[r] = -(len(ext) + 1)
                    ext.append(list(b.ext[-r - 1]))
                refs.append(k)
        new_index[j] = len(nodes)
        nodes.append([n[0], refs, n[2], n[3]])
        shape, dtype = b.metas[j]
        metas.append([list(shape), dtype.name])
    grads = [None if r is None else new_index[r] for r in outs]
    return {"nodes": nodes, "ext": ext, "grads": grads, "metas": metas}
