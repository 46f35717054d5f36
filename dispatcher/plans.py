"""Splitting a batch into per-device fragments, once per structure.

A :class:`Split` is what the dispatcher caches as a session's *plan*: for every device the nodes
it runs (cross-device ``copy`` nodes become a ``send`` on the source device and a ``recv`` on the
destination), which of the batch's external inputs it reads, and which batch node each of its
nodes stands for. Replaying the plan only substitutes fresh ids.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tensorwire.protocol.errors import DeviceError, ProtocolError
from tensorwire.protocol.graph import MAX_INPUTS, RECV, SEND
from tensorwire.protocol.ops import OPS


@dataclass
class Fragment:
    nodes: list = field(default_factory=list)  # [op, refs, attrs]
    ext: list[int] = field(default_factory=list)  # batch ext indices
    node_of: list[int | None] = field(default_factory=list)  # local node -> batch node (None for sends)
    local: dict[int, int] = field(default_factory=dict)  # batch node -> local node
    ext_local: dict[int, int] = field(default_factory=dict)  # batch ext index -> local ext index
    dyn_nodes: list[int] = field(default_factory=list)  # local indices of nodes with dynamic attrs
    whole: bool = False  # the fragment is the whole batch (same ext order, same node order)


@dataclass
class Split:
    frags: dict[str, Fragment]
    node_dev: list[str]
    ext_dev: list[str]
    n_xfer: int
    xfer_route: list[tuple[str, str]]  # transfer k: (src device, dst device)
    n_nodes: int
    coll_groups: list[list[int]] = field(default_factory=list)  # batch nodes of each collective, one group each
    coll_keys: dict[int, int] = field(default_factory=dict)  # batch node -> its key in the batch that made the plan
    coll_rank: dict[int, int] = field(default_factory=dict)  # batch node -> its rank in the collective


@dataclass
class RawPlan:
    """A plan whose batch failed before it could be split (an input was lost, a device was missing): its
    structure is kept, because the client replays it by number from now on, and it is split at its next use."""

    nodes: list
    devs: list


def _ref(frag: Fragment, ref: int, ext_dev: list[str], dev: str) -> int:
    if ref < 0:
        k = -ref - 1
        if k not in frag.ext_local:
            frag.ext_local[k] = len(frag.ext)
            frag.ext.append(k)
        return -(frag.ext_local[k] + 1)
    return frag.local[ref]


def split_batch(nodes: list, devs: list, ext_dev: list[str], known_devices) -> Split:
    """Validate a batch's structure and split it by device. Raises ProtocolError/DeviceError. Every input has a
    device: a batch with a failed input fails with it before it is split (``Routing._run_batch``)."""
    if not isinstance(nodes, list) or not isinstance(devs, list):
        raise ProtocolError("batch 'nodes' and 'devs' must be lists")
    for d in devs:
        if not isinstance(d, str):
            raise ProtocolError("device names must be strings")
        if d not in known_devices:
            raise DeviceError(f"unknown device {d!r}; the cluster has: {', '.join(sorted(known_devices)) or 'none'}")
    frags: dict[str, Fragment] = {}
    node_dev: list[str] = []
    routes: list[tuple[str, str]] = []
    n_ext = len(ext_dev)
    for j, node in enumerate(nodes):
        if not isinstance(node, list) or len(node) != 4:
            raise ProtocolError(f"node {j}: expected [op, refs, attrs, dev]")
        op, refs, attrs, di = node
        if not isinstance(op, str) or (op not in OPS):
            raise ProtocolError(f"node {j}: unknown op {op!r}")
        if not isinstance(refs, list) or len(refs) > MAX_INPUTS:
            raise ProtocolError(f"node {j}: refs must be a list of at most {MAX_INPUTS} inputs")
        if attrs is not None and not isinstance(attrs, dict):
            raise ProtocolError(f"node {j}: attrs must be a map")
        if not isinstance(di, int) or not 0 <= di < len(devs):
            raise ProtocolError(f"node {j}: device index {di!r} out of range")
        dev = devs[di]
        in_devs = []
        for r in refs:
            if not isinstance(r, int) or isinstance(r, bool) or not (-n_ext <= r < j):
                raise ProtocolError(f"node {j}: bad input reference {r!r}")
            in_devs.append(ext_dev[-r - 1] if r < 0 else node_dev[r])
        frag = frags.setdefault(dev, Fragment())
        if op == "copy" and in_devs and in_devs[0] != dev:
            src = in_devs[0]
            a = attrs or {}
            if "shape" not in a or "dtype" not in a:
                raise ProtocolError(f"node {j}: a cross-device copy must carry 'shape' and 'dtype'")
            k = len(routes)
            routes.append((src, dev))
            sfrag = frags.setdefault(src, Fragment())
            sfrag.nodes.append([SEND, [_ref(sfrag, refs[0], ext_dev, src)], {"xfer": k}])
            sfrag.node_of.append(None)
            frag.local[j] = len(frag.nodes)
            frag.nodes.append([RECV, [], {"xfer": k, "shape": a["shape"], "dtype": a["dtype"]}])
            frag.node_of.append(j)
        else:
            for d in in_devs:
                if d != dev:
                    raise DeviceError(f"node {j} ({op}) runs on {dev} but reads a tensor on {d}; "
                                      f"move it with .to({dev!r}) first")
            frag.local[j] = len(frag.nodes)
            if OPS[op].dynamic:
                frag.dyn_nodes.append(len(frag.nodes))
            frag.nodes.append([op, [_ref(frag, r, ext_dev, dev) for r in refs], attrs])
            frag.node_of.append(j)
        node_dev.append(dev)
    groups = _collective_groups(nodes, node_dev)
    if len(frags) == 1 and not routes:
        (frag,) = frags.values()
        frag.whole = frag.ext == list(range(n_ext)) and frag.node_of == list(range(len(nodes)))
    split = Split(frags, node_dev, list(ext_dev), len(routes), routes, len(nodes))
    if groups:
        split.coll_groups = [g for g, _ in groups.values()]
        for g, meta in groups.values():
            for j in g:
                split.coll_keys[j] = meta["key"]
                split.coll_rank[j] = nodes[j][2]["rank"]
    return split


def _collective_groups(nodes: list, node_dev: list[str]) -> dict:
    """Group the batch's collective nodes by key and check each group is one complete collective."""
    groups: dict = {}
    for j, node in enumerate(nodes):
        if node[0] != "collective":
            continue
        a = node[2] or {}
        key = a.get("key")
        if not isinstance(key, int) or isinstance(key, bool):
            raise ProtocolError(f"node {j}: a collective needs an int 'key'")
        if type(a.get("rank")) is not int or type(a.get("n")) is not int:
            raise ProtocolError(f"node {j}: a collective needs an int 'rank' and an int size 'n'")
        g, meta = groups.setdefault(key, ([], {"key": key, "kind": a.get("kind"), "op": a.get("op"),
                                              "n": a.get("n")}))
        if (a.get("kind"), a.get("op"), a.get("n")) != (meta["kind"], meta["op"], meta["n"]):
            raise ProtocolError(f"node {j}: parts of collective {key} disagree on kind, op or size")
        g.append(j)
    for key, (g, meta) in groups.items():
        ranks = sorted((nodes[j][2] or {}).get("rank") for j in g)
        devs = [node_dev[j] for j in g]
        if ranks != list(range(len(g))) or meta["n"] != len(g):
            raise ProtocolError(f"collective {key} has parts with ranks {ranks}, expected 0..{meta['n'] - 1}")
        if len(set(devs)) != len(devs):
            raise ProtocolError(f"collective {key} has two parts on one device")
    return groups
