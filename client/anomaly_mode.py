"""Autograd's anomaly mode (``torch.autograd.detect_anomaly`` / ``set_detect_anomaly``, ``torch.is_anomaly_enabled``,
``torch.set_anomaly_enabled``): with NaN checks on, a backward pass raises torch's ``RuntimeError`` ("Function
'MulBackward0' returned nan values in its 0th output.") for the first op, in the order the backward runs its ops,
whose gradient came out NaN, and warns with the user's line that recorded its forward op.

How it finds that op (the backward of a phase is one graph the autograd service builds, so no op's output is seen
alone as in torch's engine): while the mode is on, each backward phase also asks for the gradient of every recorded
op's output, and after the phase reads, in one round trip, whether any gradient it computed (those, and the ones
delivered to leaves and other targets) holds a NaN. None: the pass goes on (the cost: that read per phase, and the
larger backward graphs; slow, as torch's anomaly mode is). Some: the ops whose inputs got a NaN gradient are
examined latest first (torch's order), each by recording its op again on its saved inputs and taking the gradient
of that one op with its output's gradient (one more read each); the first whose own gradient for an input holds a
NaN is the one named, with that input's position (torch's "output" of the backward function). A NaN that no single
op produces (an ``inf - inf`` in the sum of two paths' gradients into a leaf) raises nothing, as in torch. A custom
``Function``'s Python backward is not checked itself: NaNs it returns are found at the ops below it that read them.
"""

from __future__ import annotations

import linecache
import warnings

from ._frames import user_line

__all__ = ["detect_anomaly", "set_detect_anomaly", "is_anomaly_enabled", "is_anomaly_check_nan_enabled",
           "set_anomaly_enabled"]

#: [enabled, check_nan]: process-wide, as torch's
_STATE = [False, True]


def is_anomaly_enabled() -> bool:
    """Whether anomaly detection is on (``torch.is_anomaly_enabled``)."""
    return _STATE[0]


def is_anomaly_check_nan_enabled() -> bool:
    """Whether anomaly detection checks the backward pass for NaN (``torch.is_anomaly_check_nan_enabled``)."""
    return _STATE[1]


def set_anomaly_enabled(enabled: bool, check_nan: bool = True) -> None:
    """Switch anomaly detection (and its NaN checks) on or off (``torch.set_anomaly_enabled``)."""
    _STATE[0], _STATE[1] = bool(enabled), bool(check_nan)


class detect_anomaly:  # noqa: N801 - torch's name
    """Context manager: anomaly detection on inside (``check_nan``: NaN gradients raise), as torch's. Warns that it
    slows the program down, as torch's."""

    def __init__(self, check_nan: bool = True):
        self.prev = is_anomaly_enabled()
        self.check_nan = check_nan
        self.prev_check_nan = is_anomaly_check_nan_enabled()
        warnings.warn("Anomaly Detection has been enabled. This mode will increase the runtime and should only be "
                      "enabled for debugging.", stacklevel=2)

    def __enter__(self) -> None:
        set_anomaly_enabled(True, self.check_nan)

    def __exit__(self, *args) -> None:
        set_anomaly_enabled(self.prev, self.prev_check_nan)


class set_detect_anomaly:  # noqa: N801 - torch's name
    """``set_detect_anomaly(mode, check_nan=True)`` switches anomaly detection now; as a context manager, the previous
    setting comes back at its end (torch's)."""

    def __init__(self, mode: bool, check_nan: bool = True):
        self.prev = is_anomaly_enabled()
        self.prev_check_nan = is_anomaly_check_nan_enabled()
        set_anomaly_enabled(mode, check_nan)

    def __enter__(self) -> None:
        pass

    def __exit__(self, *args) -> None:
        set_anomaly_enabled(self.prev, self.prev_check_nan)


def checking() -> bool:
    """Whether backward passes check for NaN now."""
    return _STATE[0] and _STATE[1]


def watch(nodes: list, target_refs: list) -> int:
    """Add every node of a phase (but a hooked one, the phase's root) to its targets: the service then also returns
    the gradient of each op's output. Returns how many targets there were before (the delivered ones)."""
    n = len(target_refs)
    have = {r for r in target_refs if r >= 0}
    target_refs.extend(j for j, node in enumerate(nodes) if j not in have and node.hooks is None)
    return n


def check(engine, session, nodes: list, roots: list, target_refs: list, target_edges: list, grads: list,
          out: list) -> None:
    """After a phase: raise torch's error if a gradient it computed holds a NaN (see the module's docstring).
    ``engine``: the autograd engine's module (its ``Node``, ``grad``, ``enable_grad``, ``no_grad``)."""
    node_grad, ext_grad = {}, {}
    for k, (r, g) in enumerate(zip(target_refs, grads)):
        t = out[g] if g is not None else None
        if r >= 0:
            node_grad[nodes[r]] = t
        elif k < len(target_edges):
            ext_grad[id(target_edges[k])] = t
    for e, _holder, seed in roots:
        if type(e) is engine.Node and node_grad.get(e) is None:
            node_grad[e] = seed
    index = {n: j for j, n in enumerate(nodes)}

    def input_grad(e):
        return node_grad.get(e) if type(e) is engine.Node and e in index else ext_grad.get(id(e))

    nan = _nan_flags(engine, session, [g for g in [*node_grad.values(), *ext_grad.values()] if g is not None])
    if not any(nan.values()):
        return
    for n in sorted(nodes, key=lambda m: m.seq, reverse=True):
        g_out = node_grad.get(n)
        if g_out is None:
            continue
        ins = [input_grad(ent[3]) if ent[3] is not None else None for ent in n.entries]
        if not any(g is not None and nan.get(id(g)) for g in ins):
            continue
        position = _own_nan(engine, session, n, g_out)
        if position is not None:
            _raise(session, n, position, nodes, roots)


def _nan_flags(engine, session, tensors: list) -> dict:
    """``id(tensor) -> whether it holds a NaN`` for ``tensors``, read in one round trip."""
    with engine.no_grad():
        flags = {id(t): (t != t).any() for t in tensors}
    vals = session.flush(fetch=[f._id for f in flags.values()]) if flags else {}
    return {k: bool(vals[f._id]) for k, f in flags.items()}


def _own_nan(engine, session, n, g_out) -> int | None:
    """The position of the first input of node ``n`` whose gradient, through ``n``'s op alone, holds a NaN: the op
    recorded again on its saved inputs (detached), and its gradient taken with its output's gradient ``g_out``."""
    ins, wrt, at = [], [], []
    with engine.no_grad():
        for i, ent in enumerate(n.entries):
            obj = ent[0]
            if obj is None or obj._id != ent[1]:  # (freed, or written since: the pass would have raised)
                return None
            x = obj.detach()
            if ent[3] is not None and x.dtype.is_inexact:
                x.requires_grad = True
                wrt.append(x)
                at.append(i)
            ins.append(x)
    if not wrt:
        return None
    prev = _STATE[:]
    _STATE[0] = False  # (the gradient of the one op is taken without these checks)
    try:
        with engine.enable_grad():
            y = engine._hooks.record(session, n.op, ins, n.attrs, n.dev)
            gs = engine.grad([y], wrt, [g_out], allow_unused=True)
    finally:
        _STATE[:] = prev
    got = [(i, g) for i, g in zip(at, gs) if g is not None]
    flags = _nan_flags(engine, session, [g for _, g in got])
    for i, g in got:
        if flags[id(g)]:
            return i
    return None


def _raise(session, n, position: int, nodes: list, roots: list):
    """torch's error for node ``n``'s backward, after the warning with the user's line of its forward op."""
    name = n.name()
    where = _forward_line(session, n, nodes, roots)
    if where is not None:
        file, line = where
        code = linecache.getline(file, line).strip() if line else ""
        warnings.warn(f"Error detected in {name}. Traceback of forward call that caused the error:\n"
                      f'  File "{file}", line {line}\n    {code}', stacklevel=4)
    msg = f"Function '{name}' returned nan values in its {position}th output."
    if where is not None:
        msg += f" [forward op recorded at {where[0]}:{where[1]}]"
    raise RuntimeError(msg)


def _forward_line(session, n, nodes: list, roots: list):
    """The user's ``(file, line)`` that recorded node ``n``'s forward op, found by its output's value id (a consumer's
    saved input, or the root tensor) among the lines the session keeps for shipped ops; None when not found."""
    vid = None
    for m in nodes:
        for ent in m.entries:
            if ent[3] is n:
                vid = ent[1]
                break
        if vid is not None:
            break
    if vid is None:
        for e, holder, _seed in roots:
            if e is n and holder is not None:
                vid = holder._id
    where = session._where_of(vid) if vid is not None else None
    return user_line(where) if where is not None else None
