"""Recurrent layers as two ops: ``rnn_scan`` runs one layer's direction over a whole sequence, ``rnn_scan_grad`` runs
its gradient's recurrence back over it (as cuDNN's RNN forward and backward-data calls do).

A layer's input projection ``gi = x W_ih^T + b_ih`` is one ``linear`` over the whole sequence before the scan, and
the weight gradient ``sum_t dgh_t^T h_{t-1}`` one ``matmul`` after the gradient's scan (the VJP rule in
``autograd/vjp.py``); the scans hold only the sequential part, a ``[B, H] x [H, G*H]`` product and the cell's
pointwise math per step. Both are composites: a backend without kernels of its own runs them through their
decompositions (the steps unrolled, which its compiler fuses step by step); the CPU runs each whole in one kernel.

``mode`` is ``"lstm"`` (gates i, f, g, o), ``"gru"`` (r, z, n, with ``b_hn`` inside the reset product) or
``"rnn_tanh"``/``"rnn_relu"``, with torch's formulas. ``reverse`` runs the sequence from its last step to its first
(a bidirectional layer's backward direction).

The scan's output packs, per step ``t`` (``[T, B, S]``), the state and what the gradient needs:

- lstm: ``h | c | i f g o`` (the gates after their activations), ``S = 6H``;
- gru: ``h | r z n | hn`` (``hn = h_{t-1} W_hn^T + b_hn``), ``S = 5H``;
- rnn: ``h``, ``S = H``.

The gradient's output is ``[T + 1, B, W]``: rows ``0..T-1`` the gradients of each step's pre-activation gates (lstm
``W = 4H``: i f g o; rnn ``W = H``; gru ``W = 4H``: r z n for ``gi`` and ``r * dn`` for ``gh``'s n part), row ``T``
the initial state's (``dh0`` in ``[:H]``, ``dc0`` in ``[H:2H]`` for lstm).

The gradient's inputs are ``y``, then the parts of ``y``'s gradient that its ``grads`` attribute names (in the order
of :data:`GRAD_PARTS`; ``["y"]`` when absent), then ``h0`` (``c0``) and ``w_hh``. ``y``'s gradient is their sum, a
part not given counting as zeros:

- ``"y"``: the whole packed output's, ``[T, B, S]``;
- ``"out"``: each step's ``h``, ``[T, B, H]`` (a layer's output);
- ``"h"`` / ``"c"``: the last step's ``h`` / ``c`` (lstm), ``[B, H]`` (the final state; the last step in the scan's
  order: ``T - 1``, or ``0`` with ``reverse``).

So the usual layer's gradient (its output's, its final state's) reaches the op as the parts the user's slices got,
not assembled into a packed ``[T, B, S]`` zero canvas first (pads and adds: ~4 recorded ops a cell step).

A cell's one step may drop the time dimension: ``gi`` ``[B, G*H]`` gives ``y`` ``[B, S]``, and the gradient of a
2-D ``y`` (its ``"y"`` / ``"out"`` parts ``[B, .]``) is the ``[T + 1, B, W]`` result's rows, ``[2B, W]`` (as the
VJP rule reads it); a cell records no reshape around its scan.
"""

from __future__ import annotations

from .. import dtypes as D
from ..errors import DTypeError, ProtocolError, ShapeError
from .attrs import a_bool, a_str
from .table import _scalar, composite

MODES = ("lstm", "gru", "rnn_tanh", "rnn_relu")
GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
#: the scan's packed width per step, in hidden sizes
PACKED = {"lstm": 6, "gru": 5, "rnn_tanh": 1, "rnn_relu": 1}
#: the gradient's width per step, in hidden sizes
GRAD = {"lstm": 4, "gru": 4, "rnn_tanh": 1, "rnn_relu": 1}
#: the parts of the packed output's gradient ``rnn_scan_grad`` may be given (its ``grads`` attribute), in order
GRAD_PARTS = ("y", "out", "h", "c")


def _states(mode: str) -> int:
    return 2 if mode == "lstm" else 1


def _steps(s0) -> tuple[int, ...]:
    """A scan's leading input shape as ``(T, B, W)``: a 2-D ``[B, W]`` is the one step of a cell (see the module)."""
    return (1, *s0) if len(s0) == 2 else tuple(s0)


def _check_common(kind: str, mode: str, metas, lead: str) -> tuple[int, int, int, D.DType]:
    """(T, B, H, dtype) after checking the inputs after the first: the initial state(s) ``[B, H]``, ``w_hh``
    ``[G*H, H]`` (and, for the scan, ``b_hh`` ``[G*H]``), all of the first input's float dtype."""
    (s0, d0) = metas[0]
    if len(s0) not in (2, 3):
        raise ShapeError(f"{kind}: {lead} must be 3-D [T, B, .] (or 2-D [B, .], one step), got shape {list(s0)}")
    s0 = _steps(s0)
    if s0[0] == 0:
        raise ShapeError("Expected sequence length to be larger than 0 in RNN")
    if not d0.is_floating_point:
        raise DTypeError(f"{kind}: expected a floating point {lead}, got {d0.name}")
    for _, d in metas[1:]:
        if d is not d0:
            raise DTypeError(f"{kind}: every input must be {d0.name}, got {d.name}")
    n = _states(mode)
    h = metas[1][0]
    if len(h) != 2 or h[0] != s0[1]:
        raise ShapeError(f"{kind}: the initial state must be [B, H] with B = {s0[1]}, got {list(h)}")
    H = h[1]
    for s, _ in metas[2:1 + n]:
        if tuple(s) != tuple(h):
            raise ShapeError(f"{kind}: the initial cell state must be {list(h)}, got {list(s)}")
    w = metas[1 + n][0]
    if tuple(w) != (GATES[mode] * H, H):
        raise ShapeError(f"{kind}: weight_hh must be [{GATES[mode] * H}, {H}], got {list(w)}")
    return s0[0], s0[1], H, d0


#: ``(grads, mode) -> grads`` of the attributes :func:`grad_parts` passed (a kernel checks its own at every call: a
#: cell's gradient, each time step)
_PASSED: dict = {}


def grad_parts(attrs) -> tuple[str, ...]:
    """``rnn_scan_grad``'s checked ``grads`` attribute: the gradient parts it is given, in :data:`GRAD_PARTS`'
    order, at least one."""
    v = attrs.get("grads")
    if v is None:
        return ("y",)
    mode = attrs.get("mode", "lstm")
    key = None
    if isinstance(v, (list, tuple)):
        try:
            key = (tuple(v), mode)
            got = _PASSED.get(key)
        except TypeError:  # (unhashable names or mode: refused below)
            key = got = None
        if got is not None:
            return got
    if not isinstance(v, (list, tuple)) or not v or any(p not in GRAD_PARTS for p in v) \
            or list(v) != sorted(set(v), key=GRAD_PARTS.index):
        raise ProtocolError(f"attribute 'grads' must name some of {list(GRAD_PARTS)}, each once, in that order; "
                            f"got {v!r}")
    if "c" in v and mode != "lstm":
        raise ProtocolError(f"rnn_scan_grad: a {mode} scan has no cell state: 'grads' cannot name 'c'")
    if key is not None and len(_PASSED) < 64:
        _PASSED[key] = key[0]
    return tuple(v)


def _mode(op: str, metas, attrs, first: str, last: str, extra: int = 0) -> str:
    """The checked ``mode`` and ``reverse`` attributes, and the input count (``first``, ``extra`` more, the
    state(s), ``last``)."""
    mode = a_str(attrs, "mode", MODES)
    a_bool(attrs, "reverse")
    n = _states(mode)
    if len(metas) != 3 + n + extra:
        raise ProtocolError(f"op {op} ({mode}) takes {3 + n + extra} inputs ({first}, {'h0, c0' if n == 2 else 'h0'}, "
                            f"{last}), got {len(metas)}")
    return mode


def _scan_infer(metas, attrs):
    mode = _mode("rnn_scan", metas, attrs, "gi", "w_hh, b_hh")
    T, B, H, dt = _check_common("rnn_scan", mode, metas, "gi")
    if metas[0][0][-1] != GATES[mode] * H:
        raise ShapeError(f"rnn_scan: gi must be [T, B, {GATES[mode] * H}], got {list(metas[0][0])}")
    if tuple(metas[-1][0]) != (GATES[mode] * H,):
        raise ShapeError(f"rnn_scan: bias_hh must be [{GATES[mode] * H}], got {list(metas[-1][0])}")
    return ((B, PACKED[mode] * H) if len(metas[0][0]) == 2 else (T, B, PACKED[mode] * H)), dt


def _grad_infer(metas, attrs):
    parts = grad_parts(attrs)
    k = len(parts)
    mode = _mode("rnn_scan_grad", metas, attrs, f"y, {', '.join('g' + p for p in parts)}", "w_hh", k - 1)
    sy = metas[0][0]
    T, B, H, dt = _check_common("rnn_scan_grad", mode, [metas[0]] + metas[1 + k:], "y")
    if sy[-1] != PACKED[mode] * H:
        raise ShapeError(f"rnn_scan_grad: y must be [T, B, {PACKED[mode] * H}], got {list(sy)}")
    step = len(sy) == 2  # a cell's one step: every part 2-D, the result as its rows
    want = {"y": tuple(sy), "out": (B, H) if step else (T, B, H), "h": (B, H), "c": (B, H)}
    for p, (s, d) in zip(parts, metas[1:1 + k]):
        if tuple(s) != want[p]:
            raise ShapeError(f"rnn_scan_grad: the gradient part {p!r} must be {list(want[p])}, got {list(s)}")
        if d is not dt:
            raise DTypeError(f"rnn_scan_grad: every input must be {dt.name}, got {d.name}")
    return ((2 * B, GRAD[mode] * H) if step else (T + 1, B, GRAD[mode] * H)), dt


# ------------------------------------------------------------------------------------------------ decompositions
# written against a Builder; hidden-size blocks of a value's last dim are addressed in units of H


def _cols(g, v, a: int, b: int, H: int):
    """Columns ``[a*H, b*H)`` of a 2-D value ``[B, .]``."""
    return g.op("slice", v, starts=[0, a * H], stops=[v.shape[0], b * H], steps=[1, 1])


def _row(g, v, t: int, a: int = 0, b: int | None = None, H: int = 1):
    """Step ``t`` of a ``[T, B, W]`` value as ``[B, W']`` (columns ``[a*H, b*H)`` when ``b`` is given)."""
    _, B, W = v.shape
    lo, hi = (a * H, b * H) if b is not None else (0, W)
    return g.op("reshape", g.op("slice", v, starts=[t, 0, lo], stops=[t + 1, B, hi], steps=[1, 1, 1]),
                shape=[B, hi - lo])


def scan_order(T: int, reverse: bool) -> range:
    """The steps of a scan in the order it runs them."""
    return range(T - 1, -1, -1) if reverse else range(T)


@composite("rnn_scan", None, _scan_infer, attrs=("mode", "reverse"))
def _rnn_scan(g, gi, h, *rest):
    """One recurrent layer's direction over the sequence ``gi`` ``[T, B, G*H]`` from the state ``h0`` (``c0``):
    per step, ``gates = gi_t + h W_hh^T + b_hh`` and the cell's update, packed as the module says."""
    *rest, attrs = rest
    mode, reverse = attrs.get("mode", "lstm"), attrs.get("reverse", False)
    c = rest[0] if mode == "lstm" else None
    w_hh, b_hh = rest[-2], rest[-1]
    if len(gi.shape) == 2:  # a cell's one step: the scan of [1, B, G*H], its result's row
        y = _rnn_scan(g, g.op("reshape", gi, shape=[1, *gi.shape]), h, *rest, attrs)
        return g.op("reshape", y, shape=list(y.shape[1:]))
    T, B, _ = gi.shape
    H = h.shape[1]
    wt = g.op("permute", w_hh, dims=[1, 0])
    outs = [None] * T
    for t in scan_order(T, reverse):
        gh = g.op("add", g.op("matmul", h, wt), b_hh)
        x = _row(g, gi, t)
        if mode == "lstm":
            pre = g.op("add", x, gh)
            i, f = g.op("sigmoid", _cols(g, pre, 0, 1, H)), g.op("sigmoid", _cols(g, pre, 1, 2, H))
            gg, o = g.op("tanh", _cols(g, pre, 2, 3, H)), g.op("sigmoid", _cols(g, pre, 3, 4, H))
            c = g.op("add", g.op("mul", f, c), g.op("mul", i, gg))
            h = g.op("mul", o, g.op("tanh", c))
            parts = [h, c, i, f, gg, o]
        elif mode == "gru":
            r = g.op("sigmoid", g.op("add", _cols(g, x, 0, 1, H), _cols(g, gh, 0, 1, H)))
            z = g.op("sigmoid", g.op("add", _cols(g, x, 1, 2, H), _cols(g, gh, 1, 2, H)))
            hn = _cols(g, gh, 2, 3, H)
            n = g.op("tanh", g.op("add", _cols(g, x, 2, 3, H), g.op("mul", r, hn)))
            h = g.op("add", g.op("mul", g.op("sub", h, n), z), n)  # (1 - z) n + z h, as torch computes it
            parts = [h, r, z, n, hn]
        else:
            pre = g.op("add", x, gh)
            h = g.op("relu", pre) if mode == "rnn_relu" else g.op("tanh", pre)
            parts = [h]
        y = parts[0] if len(parts) == 1 else g.op("cat", *parts, dim=1)
        outs[t] = g.op("reshape", y, shape=[1, B, y.shape[1]])
    return outs[0] if T == 1 else g.op("cat", *outs, dim=0)


@composite("rnn_scan_grad", None, _grad_infer, attrs=("mode", "reverse", "grads"))
def _rnn_scan_grad(g, y, *rest):
    """The gradients of ``rnn_scan``'s pre-activation gates per step and of its initial state, given its packed
    output ``y`` and the parts of that output's gradient that ``grads`` names (every packed part's gradient counts;
    a part not given adds nothing)."""
    *rest, attrs = rest
    mode, reverse = attrs.get("mode", "lstm"), attrs.get("reverse", False)
    names = grad_parts(attrs)
    if len(y.shape) == 2:  # a cell's one step: the gradient of the scan of one step, as its rows [2B, W]
        up = [g.op("reshape", v, shape=[1, *v.shape]) if n in ("y", "out") else v for n, v in zip(names, rest)]
        d = _rnn_scan_grad(g, g.op("reshape", y, shape=[1, *y.shape]), *up, *rest[len(names):], attrs)
        return g.op("reshape", d, shape=[2 * y.shape[0], d.shape[2]])
    parts = dict(zip(names, rest))
    rest = rest[len(names):]
    h0 = rest[0]
    c0 = rest[1] if mode == "lstm" else None
    w_hh = rest[-1]
    gy, gout = parts.get("y"), parts.get("out")
    T, B, _ = y.shape
    H = h0.shape[1]
    one = _scalar(g, 1, y.dtype)
    order = list(scan_order(T, reverse))
    prev = {t: p for p, t in zip(order, order[1:])}  # the step before t in the scan's order
    dh, dc = parts.get("h"), parts.get("c")  # the final state's gradient, carried back from the last step

    def plus(a, b):  # a sum of gradients, None counting as zeros
        return b if a is None else a if b is None else g.op("add", a, b)

    def given(k):  # the packed output's given gradient at step t, columns [k*H, (k+1)*H) (None: zeros)
        return None if gy is None else _row(g, gy, t, k, k + 1, H)

    rows = [None] * T
    for t in reversed(order):
        p = prev.get(t)
        gh_t = plus(given(0), None if gout is None else _row(g, gout, t))
        dh = plus(gh_t, dh)
        if dh is None:  # no gradient reaches this step's h (nor any later step's)
            dh = g.op("full", shape=[B, H], dtype=y.dtype.name, value=0)
        if mode == "lstm":
            c_t = _row(g, y, t, 1, 2, H)
            c_prev = c0 if p is None else _row(g, y, p, 1, 2, H)
            i, f, gg, o = (_row(g, y, t, k, k + 1, H) for k in (2, 3, 4, 5))
            tc = g.op("tanh", c_t)
            dc = plus(given(1), dc)
            dc = plus(dc, g.op("mul", g.op("mul", dh, o), g.op("sub", one, g.op("mul", tc, tc))))
            do = plus(g.op("mul", dh, tc), given(5))
            di = plus(g.op("mul", dc, gg), given(2))
            dg = plus(g.op("mul", dc, i), given(4))
            df = plus(g.op("mul", dc, c_prev), given(3))
            sig = lambda d, s: g.op("mul", d, g.op("mul", s, g.op("sub", one, s)))  # noqa: E731
            gate_grads = [sig(di, i), sig(df, f), g.op("mul", dg, g.op("sub", one, g.op("mul", gg, gg))), sig(do, o)]
            dgh = g.op("cat", *gate_grads, dim=1)
            dc = g.op("mul", dc, f)
            row = dgh
        elif mode == "gru":
            h_prev = h0 if p is None else _row(g, y, p, 0, 1, H)
            r, z, n, hn = (_row(g, y, t, k, k + 1, H) for k in (1, 2, 3, 4))
            dn = plus(g.op("mul", dh, g.op("sub", one, z)), given(3))
            dz = plus(g.op("mul", dh, g.op("sub", h_prev, n)), given(2))
            dpn = g.op("mul", dn, g.op("sub", one, g.op("mul", n, n)))
            dr = plus(g.op("mul", dpn, hn), given(1))
            dhn = plus(g.op("mul", dpn, r), given(4))
            dpr = g.op("mul", dr, g.op("mul", r, g.op("sub", one, r)))
            dpz = g.op("mul", dz, g.op("mul", z, g.op("sub", one, z)))
            row = g.op("cat", dpr, dpz, dpn, dhn, dim=1)
            dgh = g.op("cat", dpr, dpz, dhn, dim=1)
            direct = g.op("mul", dh, z)
        else:
            h_t = _row(g, y, t)
            if mode == "rnn_relu":
                act = g.op("cast", g.op("gt", h_t, _scalar(g, 0, y.dtype)), dtype=y.dtype.name)
            else:
                act = g.op("sub", one, g.op("mul", h_t, h_t))
            dgh = row = g.op("mul", dh, act)
        dh = g.op("matmul", dgh, w_hh)
        if mode == "gru":
            dh = g.op("add", dh, direct)
        rows[t] = g.op("reshape", row, shape=[1, B, row.shape[1]])
    W = GRAD[mode] * H
    last = [dh] if mode != "lstm" else [dh, dc]
    tail = g.op("cat", *last, dim=1) if len(last) > 1 else last[0]
    if tail.shape[1] < W:
        tail = g.op("pad", tail, pads=[0, 0, 0, W - tail.shape[1]], value=0)
    rows.append(g.op("reshape", tail, shape=[1, B, W]))
    return g.op("cat", *rows, dim=0)
