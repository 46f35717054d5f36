"""Native CPU kernels of the recurrent scans ``rnn_scan`` and ``rnn_scan_grad`` (see
:mod:`tensorwire.protocol.ops.recurrent` for what they compute and how their outputs are packed).

Each runs a whole layer's direction in one call: per step one BLAS product (``[B, H] x [H, G*H]`` forward,
``[B, G*H] x [G*H, H]`` backward) and the cell's pointwise math, written straight into the packed output, where the
decomposition records ~20-40 ops a step. The pointwise step of the LSTM and the GRU is a fused C function
(:mod:`.rnn_cells`) where the CPU compiles and its library is loaded, else a few numpy calls (the ``_NumpyCells``
here, the same formulas; while the library waits for the scans to earn its build, their time is counted toward it:
``rnn_cells.spent``); the plain RNN's is one numpy call either way. Half-precision inputs are computed in float32
and rounded once, as torch's CPU kernels do.
"""

from __future__ import annotations

import time

import numpy as np

from tensorwire.protocol.ops.recurrent import GRAD, PACKED, grad_parts, scan_order

from . import blas, rnn_cells
from .kernels import _arr, _compute, _out, kernel


def _sigmoid(x: np.ndarray, out: np.ndarray) -> None:
    """``out = 1 / (1 + exp(-x))`` in four passes (exp overflows to inf for x < -88 in float32: the result is 0)."""
    np.negative(x, out=out)
    with np.errstate(over="ignore"):
        np.exp(out, out=out)
    out += 1
    np.reciprocal(out, out=out)


def _dsigmoid(d: np.ndarray, s: np.ndarray, tmp: np.ndarray) -> None:
    """``d *= s (1 - s)``."""
    np.multiply(s, s, out=tmp)
    np.subtract(s, tmp, out=tmp)
    d *= tmp


def _dtanh(d: np.ndarray, t: np.ndarray, tmp: np.ndarray) -> None:
    """``d *= 1 - t^2``."""
    np.multiply(t, t, out=tmp)
    np.subtract(1, tmp, out=tmp)
    d *= tmp


# ------------------------------------------------------------------------------------------------ cells
# One step's pointwise work on [B, .] row views (contiguous rows, any row stride). Forward: the GRU's ``gh`` holds
# ``h W_hh^T + b_hh``; the LSTM's ``pre`` holds ``h W_hh^T`` alone, and its cell adds ``b`` (b_hh) and then ``x``
# (gi_t, contiguous rows) in that order (one pass, not two over the step's gates); ``yt`` is the step's packed
# row. Backward: ``dh`` holds the carried gradient of the step's h (its own output's gradient ``gt`` is added here),
# ``d`` receives the step's row of the gradient output; the LSTM's ``dc`` is carried in place, the GRU's h_{t-1}
# share ``dh z`` goes to ``direct``.


class _NumpyCells:
    """The cells in numpy. ``timed``: the scan's CPU time from here to :meth:`done` counts toward the C cells' build
    (:func:`.rnn_cells.spent`)."""

    def __init__(self, B: int, H: int, ct, timed: bool = False):
        self.H = H
        self.tmp, self.tmp2 = np.empty((B, H), ct), np.empty((B, H), ct)
        self.t0 = time.thread_time() if timed else None

    def done(self) -> None:
        """The scan is over: count its time (if timed)."""
        if self.t0 is not None:
            rnn_cells.spent(time.thread_time() - self.t0)
            self.t0 = None

    def lstm_fwd(self, pre, b, x, cp, yt):
        H, tmp = self.H, self.tmp
        pre += b
        pre += x
        _sigmoid(pre[:, :2 * H], yt[:, 2 * H:4 * H])
        np.tanh(pre[:, 2 * H:3 * H], out=yt[:, 4 * H:5 * H])
        _sigmoid(pre[:, 3 * H:], yt[:, 5 * H:])
        i, f, g, o = (yt[:, k * H:(k + 1) * H] for k in (2, 3, 4, 5))
        cn, hn = yt[:, H:2 * H], yt[:, :H]
        np.multiply(f, cp, out=cn)
        np.multiply(i, g, out=tmp)
        cn += tmp
        np.tanh(cn, out=hn)
        hn *= o

    def lstm_bwd(self, yt, gt, gates, cp, dh, dc, d):
        H, tmp, tmp2 = self.H, self.tmp, self.tmp2
        dh += gt[:, :H]
        c = yt[:, H:2 * H]
        i, f, g, o = (yt[:, k * H:(k + 1) * H] for k in (2, 3, 4, 5))
        dc += gt[:, H:2 * H]
        tc = np.tanh(c, out=tmp2)
        np.multiply(dh, o, out=tmp)
        _dtanh(tmp, tc, d[:, :H])  # d[:, :H] is scratch until di is written
        dc += tmp
        di, df, dg, do = (d[:, k * H:(k + 1) * H] for k in range(4))
        np.multiply(dh, tc, out=do)
        np.multiply(dc, g, out=di)
        np.multiply(dc, i, out=dg)
        np.multiply(dc, cp, out=df)
        if gates:
            di += gt[:, 2 * H:3 * H]
            df += gt[:, 3 * H:4 * H]
            dg += gt[:, 4 * H:5 * H]
            do += gt[:, 5 * H:]
        _dsigmoid(di, i, tmp)
        _dsigmoid(df, f, tmp)
        _dtanh(dg, g, tmp)
        _dsigmoid(do, o, tmp)
        dc *= f

    def gru_fwd(self, x, gh, hp, yt):
        H = self.H
        rz = yt[:, H:3 * H]
        np.add(x[:, :2 * H], gh[:, :2 * H], out=rz)
        _sigmoid(rz, rz)
        r, z, n, hg = (yt[:, k * H:(k + 1) * H] for k in (1, 2, 3, 4))
        hg[...] = gh[:, 2 * H:]
        np.multiply(r, hg, out=n)
        n += x[:, 2 * H:]
        np.tanh(n, out=n)
        hn = yt[:, :H]
        np.subtract(hp, n, out=hn)  # (1 - z) n + z h, as torch computes it
        hn *= z
        hn += n

    def gru_bwd(self, yt, gt, gates, hp, dh, d, direct):
        H, tmp = self.H, self.tmp
        dh += gt[:, :H]
        r, z, n, hg = (yt[:, k * H:(k + 1) * H] for k in (1, 2, 3, 4))
        dr, dz, dn, dhg = (d[:, k * H:(k + 1) * H] for k in range(4))
        np.subtract(1, z, out=dn)
        dn *= dh
        np.subtract(hp, n, out=dz)
        dz *= dh
        if gates:
            dn += gt[:, 3 * H:4 * H]
            dz += gt[:, 2 * H:3 * H]
        _dtanh(dn, n, tmp)
        _dsigmoid(dz, z, tmp)
        np.multiply(dn, hg, out=dr)
        np.multiply(dn, r, out=dhg)
        if gates:
            dr += gt[:, H:2 * H]
            dhg += gt[:, 4 * H:]
        _dsigmoid(dr, r, tmp)
        np.multiply(dh, z, out=direct)


class _CCells:
    """The same cells through :mod:`.rnn_cells`: addresses and row strides of the views."""

    def __init__(self, fns: dict, B: int, H: int, ct):
        self.B, self.H, self.isz, self.fns = B, H, np.dtype(ct).itemsize, fns
        name = np.dtype(ct).name
        self.f = {k: fns[(k, name)] for k in ("lstm_fwd", "lstm_bwd", "gru_fwd", "gru_bwd")}
        self.zero = np.zeros((B, 2 * H), ct)  # an LSTM step's h and c gradient rows where none are given (read only)

    def _rs(self, a) -> int:
        return a.strides[0] // self.isz

    def done(self) -> None:
        """(Nothing to count: see :meth:`_NumpyCells.done`.)"""

    def lstm_fwd(self, pre, b, x, cp, yt):
        A = rnn_cells.address
        self.f["lstm_fwd"](A(pre), A(b), A(x), A(cp), self._rs(cp), A(yt), self._rs(yt), self.B, self.H)

    def lstm_bwd(self, yt, gt, gates, cp, dh, dc, d):
        A = rnn_cells.address
        self.f["lstm_bwd"](A(yt), self._rs(yt), A(gt), self._rs(gt), int(gates), A(cp), self._rs(cp), A(dh), A(dc),
                           A(d), self.B, self.H)

    # the LSTM's whole loops, each step's row addresses computed from the arrays' own (a view's address costs
    # ~2-5 us, ~12 a step: ~4% of a layer's scan and its gradient)

    def lstm_scan(self, gi, h, c, wt, b, y, order) -> None:
        """The forward loop: ``y[t]`` for each ``t`` of ``order`` (the scan's order), from ``h``, ``c``."""
        A, f, B, H, isz = rnn_cells.address, self.f["lstm_fwd"], self.B, self.H, self.isz
        pre = np.empty((B, 4 * H), y.dtype)
        pa, ba, ga, gst, ya, yst = A(pre), A(b), A(gi), gi.strides[0], A(y), y.strides[0]
        ys = y.strides[1] // isz
        ca, cs = A(c), self._rs(c)
        for t in order:
            np.matmul(h, wt, out=pre)
            row = ya + t * yst
            f(pa, ba, ga + t * gst, ca, cs, row, ys, B, H)
            ca, cs = row + H * isz, ys  # the step's c: columns H:2H of its packed row
            h = y[t, :, :H]

    def lstm_scan_grad(self, y, gy, gates, c0, w, out, order, prev, dh, dc) -> tuple:
        """The backward loop into ``out[t]`` (``t`` in reverse ``order``); ``prev``: the step before each; ``dh``,
        ``dc``: the final state's gradient, carried back in place. Returns the carried ``(dh, dc)`` of the initial
        state."""
        A, f, B, H, isz = rnn_cells.address, self.f["lstm_bwd"], self.B, self.H, self.isz
        ya, yst, ys = A(y), y.strides[0], y.strides[1] // isz
        ga, gst, gs = A(gy), gy.strides[0], gy.strides[1] // isz
        oa, ost, dha, dca = A(out), out.strides[0], A(dh), A(dc)
        c0a, c0s, g = A(c0), self._rs(c0), int(gates)
        for t in reversed(order):
            p = prev.get(t)
            cpa, cps = (c0a, c0s) if p is None else (ya + p * yst + H * isz, ys)
            f(ya + t * yst, ys, ga + t * gst, gs, g, cpa, cps, dha, dca, oa + t * ost, B, H)
            np.matmul(out[t], w, out=dh)
        return dh, dc

    # a cell's one step (2-D ``gi`` / ``y``), the loops above for T = 1 without their bookkeeping: about half the
    # ~30-60 us of Python a one-step scan and its gradient took around ~2 us of math (two of each a cell's time step)

    def lstm_step(self, gi, h, c, wt, b, y) -> None:
        """:meth:`lstm_scan` of one step: ``y`` ``[B, 6H]`` from ``gi`` ``[B, 4H]``, ``h``, ``c``."""
        A = rnn_cells.address
        pre = np.matmul(h, wt)
        self.f["lstm_fwd"](A(pre), A(b), A(gi), A(c), self._rs(c), A(y), self._rs(y), self.B, self.H)

    def lstm_step_grad(self, y, c0, w, out, dh, dc) -> None:
        """:meth:`lstm_scan_grad` of one step given the final state's gradients ``dh``, ``dc`` alone (a cell's
        outputs'), and the initial state's row: ``out`` ``[2B, 4H]``, the gates' rows then ``dh0 | dc0 | 0``."""
        A, B, H = rnn_cells.address, self.B, self.H
        self.f["lstm_bwd"](A(y), self._rs(y), A(self.zero), 2 * H, 0, A(c0), self._rs(c0), A(dh), A(dc), A(out), B, H)
        np.matmul(out[:B], w, out=dh)
        _state_rows(out[B:], dh, dc, H)

    def gru_fwd(self, x, gh, hp, yt):
        A = rnn_cells.address
        self.f["gru_fwd"](A(x), self._rs(x), A(gh), A(hp), self._rs(hp), A(yt), self._rs(yt), self.B, self.H)

    def gru_bwd(self, yt, gt, gates, hp, dh, d, direct):
        A = rnn_cells.address
        self.f["gru_bwd"](A(yt), self._rs(yt), A(gt), self._rs(gt), int(gates), A(hp), self._rs(hp), A(dh), A(d),
                          A(direct), self.B, self.H)


#: the compute types the C cells are built for
_FUSED_TYPES = (np.dtype(np.float32), np.dtype(np.float64))
#: ``(B, H, compute type) -> _CCells``: a cell's scan of one step costs ~20 us of Python around ~1 us of math, and
#: building its ``_CCells`` (the table's lookups by dtype name) was ~6 us of that; they hold no per-scan state
_CCELLS: dict = {}
_CCELLS_MAX = 64


def _cells(mode: str, B: int, H: int, ct):
    fused = mode in ("lstm", "gru") and ct in _FUSED_TYPES
    fns = rnn_cells.cells() if fused else None
    if not fns:
        return _NumpyCells(B, H, ct, timed=fused and rnn_cells.waiting())
    key = (B, H, ct)
    cells = _CCELLS.get(key)
    if cells is None or cells.fns is not fns:  # first of its shape, or the library was reloaded
        if len(_CCELLS) >= _CCELLS_MAX:
            _CCELLS.clear()
        cells = _CCELLS[key] = _CCells(fns, B, H, ct)
    return cells


# ------------------------------------------------------------------------------------------------ the scans


@kernel("rnn_scan")
def _rnn_scan(ins, a, shape, dt):
    ct = _compute(dt)
    mode = a.get("mode", "lstm")
    gi, h = np.ascontiguousarray(_arr(ins[0], ct)), np.ascontiguousarray(_arr(ins[1], ct))
    c = np.ascontiguousarray(_arr(ins[2], ct)) if mode == "lstm" else None
    w, b = _arr(ins[-2], ct), np.ascontiguousarray(_arr(ins[-1], ct))
    blas.threads_for(h.shape[-2], *w.shape, blas.SCAN_MNK)  # each step's [B, H] @ [H, G*H], back to back
    step = gi.ndim == 2  # a cell's one step (``[B, G*H]`` in, ``[B, S]`` out): the scan of one, on views
    if step:
        B, H = h.shape
        if mode == "lstm":
            cells = _cells(mode, B, H, ct)
            if isinstance(cells, _CCells):
                y = np.empty((B, PACKED[mode] * H), ct)
                cells.lstm_step(gi, h, c, w.T, b, y)
                return _out(y, dt)
        gi = gi.reshape(1, *gi.shape)
    T, B, GH = gi.shape
    H = h.shape[1]
    y = np.empty((T, B, PACKED[mode] * H), ct)
    y = _scan_into(mode, a, gi, h, c, w, b, y, ct, T, B, GH, H)
    return _out(y[0] if step else y, dt)


def _scan_into(mode, a, gi, h, c, w, b, y, ct, T, B, GH, H) -> np.ndarray:
    """:func:`_rnn_scan`'s loop, written into ``y`` ``[T, B, S]`` (returned)."""
    wt = w.T  # BLAS reads the transposed weight in place
    cells = _cells(mode, B, H, ct)
    if mode == "lstm" and isinstance(cells, _CCells):  # the whole loop in the cells
        cells.lstm_scan(gi, h, c, wt, b, y, scan_order(T, a.get("reverse", False)))
        return y
    pre = np.empty((B, GH), ct)
    for t in scan_order(T, a.get("reverse", False)):
        np.matmul(h, wt, out=pre)
        yt, x = y[t], gi[t]
        if mode == "lstm":  # the cell adds the biases and gi_t
            cells.lstm_fwd(pre, b, x, c, yt)
            c = yt[:, H:2 * H]
        elif mode == "gru":
            pre += b
            cells.gru_fwd(x, pre, h, yt)
        else:
            pre += b
            pre += x
            if mode == "rnn_relu":
                np.maximum(pre, 0, out=yt)
            else:
                np.tanh(pre, out=yt)
        h = yt[:, :H]
    cells.done()
    return y


@kernel("rnn_scan_grad")
def _rnn_scan_grad(ins, a, shape, dt):
    ct = _compute(dt)
    mode = a.get("mode", "lstm")
    names = grad_parts(a)
    k = len(names)
    blas.threads_for(ins[1 + k].shape[-2], *ins[-1].shape, blas.SCAN_MNK)  # each step's [B, G*H] @ [G*H, H]
    if ins[0].ndim == 2 and mode == "lstm" and names[0] in ("h", "c"):  # a cell's step, given its states' gradients
        d = _lstm_step_grad(ins, names, ct)
        if d is not None:
            return _out(d, dt)
    y = np.ascontiguousarray(_arr(ins[0], ct))
    parts = {n: np.ascontiguousarray(_arr(v, ct)) for n, v in zip(names, ins[1:1 + k])}
    step = y.ndim == 2
    if step:  # a cell's one step: the 2-D y and its parts as a scan of one (views); the result's rows out
        y = y.reshape(1, *y.shape)
        parts = {n: v.reshape(1, *v.shape) if n in ("y", "out") else v for n, v in parts.items()}
    h0 = np.ascontiguousarray(_arr(ins[1 + k], ct))
    c0 = np.ascontiguousarray(_arr(ins[2 + k], ct)) if mode == "lstm" else None
    w = _arr(ins[-1], ct)
    T, B, _ = y.shape
    H = h0.shape[1]
    out = np.empty((T + 1, B, GRAD[mode] * H), ct)
    gy, gates = _step_grads(mode, parts, T, B, H, ct)
    dh0, dc0 = _carried_start(mode, parts, B, H, ct)
    cells = _cells(mode, B, H, ct)
    order = list(scan_order(T, a.get("reverse", False)))
    prev = dict(zip(order[1:], order))  # the step before t in the scan's order
    if mode == "lstm" and isinstance(cells, _CCells):  # the whole loop in the cells
        dh, dc = cells.lstm_scan_grad(y, gy, gates, c0, w, out, order, prev, dh0, dc0)
    else:
        dh, dc = _grad_steps(mode, cells, y, gy, gates, h0, c0, w, out, order, prev, dh0, dc0)
        cells.done()
    _state_rows(out[T], dh, dc, H)
    return _out(out.reshape(2 * B, out.shape[2]) if step else out, dt)


def _carried_start(mode: str, parts: dict, B: int, H: int, ct) -> tuple:
    """The carried ``(dh, dc)`` a backward loop starts from: copies of the final state's given gradients (the cells
    update them in place), zeros where not given; ``dc`` None but for an LSTM."""
    dh = np.array(_arr(parts["h"], ct), order="C") if "h" in parts else np.zeros((B, H), ct)
    if mode != "lstm":
        return dh, None
    return dh, np.array(_arr(parts["c"], ct), order="C") if "c" in parts else np.zeros((B, H), ct)


def _state_rows(last: np.ndarray, dh, dc, H: int) -> None:
    """The gradient's rows of the initial state: ``dh0 | dc0`` (an LSTM's) then zeros, into ``last``."""
    last[:, :H] = dh
    k = H
    if dc is not None:
        last[:, H:2 * H] = dc
        k = 2 * H
    last[:, k:] = 0


def _lstm_step_grad(ins, names: tuple, ct) -> np.ndarray | None:
    """:func:`_rnn_scan_grad` of an LSTM cell's one step given its final state's gradients alone (``names``: ``h``
    and / or ``c``), through :meth:`_CCells.lstm_step_grad`; None where the C cells are not loaded."""
    k = len(names)
    B, H = ins[1 + k].shape
    cells = _cells("lstm", B, H, ct)
    if not isinstance(cells, _CCells):
        return None
    dh, dc = _carried_start("lstm", dict(zip(names, ins[1:1 + k])), B, H, ct)
    out = np.empty((2 * B, GRAD["lstm"] * H), ct)
    cells.lstm_step_grad(np.ascontiguousarray(_arr(ins[0], ct)), np.ascontiguousarray(_arr(ins[2 + k], ct)),
                         _arr(ins[-1], ct), out, dh, dc)
    return out


def _step_grads(mode: str, parts: dict, T: int, B: int, H: int, ct) -> tuple[np.ndarray, bool]:
    """The per-step gradient the cells read (``gy[t]``, ``[B, W]`` rows: ``h``'s in ``[:H]``, lstm ``c``'s in
    ``[H:2H]``, the gates' after them where ``gates``) from the given parts (``"y"``, ``"out"``; the final state's
    start the carried gradients instead), and whether it holds the gates' (skipped when all zeros)."""
    gy, gout = parts.get("y"), parts.get("out")
    if gy is not None:
        # the packed gates' own gradients are zero unless something read them: skip adding them then
        gates = bool(gy[:, :, 2 * H if mode == "lstm" else H:].any())
        if gout is not None:
            gy = gy.copy()
            gy[:, :, :H] += gout
        return gy, gates
    W = 2 * H if mode == "lstm" else H  # what the cells read of a step's row without the gates
    if gout is not None:
        if W == H:
            return gout, False
        gy = np.zeros((T, B, W), ct)
        gy[:, :, :H] = gout
        return gy, False
    zero = np.zeros((1, B, W), ct)
    # every step reads the same zero row (a cell's one step reads it as it is: broadcast_to costs ~5 us)
    return (zero if T == 1 else np.broadcast_to(zero, (T, B, W))), False


def _grad_steps(mode, cells, y, gy, gates, h0, c0, w, out, order, prev, dh, dc) -> tuple:
    """The backward loop of :func:`_rnn_scan_grad` a step at a time from the final state's gradient ``dh``, ``dc``
    (lstm; carried in place): the carried ``(dh, dc or None)`` of the initial state."""
    ct, (B, H) = y.dtype, h0.shape
    tmp, direct = np.empty((B, H), ct), np.empty((B, H), ct)
    for t in reversed(order):
        p = prev.get(t)
        yt, gt, d = y[t], gy[t], out[t]
        if mode == "lstm":
            cells.lstm_bwd(yt, gt, gates, c0 if p is None else y[p][:, H:2 * H], dh, dc, d)
            np.matmul(d, w, out=dh)
        elif mode == "gru":
            cells.gru_bwd(yt, gt, gates, h0 if p is None else y[p][:, :H], dh, d, direct)
            np.matmul(d[:, :2 * H], w[:2 * H], out=dh)  # dgh = (dr, dz, dhn) @ W_hh
            np.matmul(d[:, 3 * H:], w[2 * H:], out=tmp)
            dh += tmp
            dh += direct
        else:
            dh += gt
            if mode == "rnn_relu":
                np.multiply(dh, yt > 0, out=d)
            else:
                np.copyto(d, dh)
                _dtanh(d, yt, tmp)
            np.matmul(d, w, out=dh)
    return dh, dc
