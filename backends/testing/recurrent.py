"""float64 references and specs for the recurrent scans ``rnn_scan`` and ``rnn_scan_grad``: every mode, both
directions, written from torch's cell formulas step by step (the packing is
:mod:`tensorwire.protocol.ops.recurrent`'s)."""

from __future__ import annotations

import numpy as np


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def _order(T, reverse):
    return list(range(T - 1, -1, -1) if reverse else range(T))


def scan_ref(mode: str, reverse: bool, gi, h, c, w, b):
    """``rnn_scan``'s packed output."""
    T = gi.shape[0]
    out = [None] * T
    for t in _order(T, reverse):
        gh = h @ w.T + b
        if mode == "lstm":
            i, f, g, o = np.split(gi[t] + gh, 4, axis=1)
            i, f, g, o = _sig(i), _sig(f), np.tanh(g), _sig(o)
            c = f * c + i * g
            h = o * np.tanh(c)
            out[t] = np.concatenate([h, c, i, f, g, o], 1)
        elif mode == "gru":
            xr, xz, xn = np.split(gi[t], 3, axis=1)
            hr, hz, hn = np.split(gh, 3, axis=1)
            r, z = _sig(xr + hr), _sig(xz + hz)
            n = np.tanh(xn + r * hn)
            h = (1 - z) * n + z * h
            out[t] = np.concatenate([h, r, z, n, hn], 1)
        else:
            pre = gi[t] + gh
            h = np.maximum(pre, 0) if mode == "rnn_relu" else np.tanh(pre)
            out[t] = h
    return np.stack(out)


def scan_grad_ref(mode: str, reverse: bool, y, gy, h0, c0, w):
    """``rnn_scan_grad``'s output: each step's pre-activation gate gradients, then the initial state's."""
    T, B, _ = y.shape
    H = h0.shape[1]
    order = _order(T, reverse)
    prev = dict(zip(order[1:], order))
    dh, dc = np.zeros((B, H)), np.zeros((B, H))
    rows = [None] * T
    part = lambda a, t, k: a[t][:, k * H:(k + 1) * H]  # noqa: E731
    for t in reversed(order):
        p = prev.get(t)
        dh = dh + part(gy, t, 0)
        if mode == "lstm":
            c, i, f, g, o = (part(y, t, k) for k in (1, 2, 3, 4, 5))
            c_prev = c0 if p is None else part(y, p, 1)
            dc = dc + part(gy, t, 1) + dh * o * (1 - np.tanh(c) ** 2)
            di = (dc * g + part(gy, t, 2)) * i * (1 - i)
            df = (dc * c_prev + part(gy, t, 3)) * f * (1 - f)
            dg = (dc * i + part(gy, t, 4)) * (1 - g * g)
            do = (dh * np.tanh(c) + part(gy, t, 5)) * o * (1 - o)
            rows[t] = np.concatenate([di, df, dg, do], 1)
            dc = dc * f
            dh = rows[t] @ w
        elif mode == "gru":
            r, z, n, hn = (part(y, t, k) for k in (1, 2, 3, 4))
            h_prev = h0 if p is None else part(y, p, 0)
            dpn = (dh * (1 - z) + part(gy, t, 3)) * (1 - n * n)
            dpz = (dh * (h_prev - n) + part(gy, t, 2)) * z * (1 - z)
            dpr = (dpn * hn + part(gy, t, 1)) * r * (1 - r)
            dhn = dpn * r + part(gy, t, 4)
            rows[t] = np.concatenate([dpr, dpz, dpn, dhn], 1)
            dh = np.concatenate([dpr, dpz, dhn], 1) @ w + dh * z
        else:
            h = part(y, t, 0)
            rows[t] = dh * ((h > 0) if mode == "rnn_relu" else (1 - h * h))
            dh = rows[t] @ w
    W = rows[0].shape[1]
    last = np.zeros((B, W))
    last[:, :H] = dh
    if mode == "lstm":
        last[:, H:2 * H] = dc
    return np.concatenate([np.stack(rows), last[None]])


def packed_grad(mode: str, reverse: bool, grads, parts, T: int, B: int, H: int, S: int, dtype=np.float64):
    """The packed output's gradient ``[T, B, S]`` that ``rnn_scan_grad``'s given ``parts`` (named by ``grads``)
    sum to, summed in ``dtype`` in their order."""
    gy = np.zeros((T, B, S), dtype)
    last = 0 if reverse else T - 1
    for name, v in zip(grads, parts):
        if name == "y":
            gy += v
        elif name == "out":
            gy[:, :, :H] += v
        elif name == "h":
            gy[last, :, :H] += v
        else:
            gy[last, :, H:2 * H] += v
    return gy


_SHAPES = {"lstm": (4, 6), "gru": (3, 5), "rnn_tanh": (1, 1), "rnn_relu": (1, 1)}  # (gates, packed) per H
#: ``rnn_scan_grad`` given its output's gradient in parts (``grads``): a layer's output and final state, the state
#: alone, the packed whole with them
_PARTS = (("lstm", ("out", "h", "c")), ("lstm", ("c",)), ("lstm", ("y", "out", "h", "c")), ("gru", ("out", "h")),
          ("rnn_tanh", ("h",)), ("rnn_relu", ("out",)))


def recurrent_specs(op: str):
    """Specs for ``rnn_scan`` / ``rnn_scan_grad``: T=3, B=2, H=3, every mode, forward and reverse (and
    ``rnn_scan_grad`` given its output's gradient in parts, :data:`_PARTS`)."""
    T, B, H = 3, 2, 3
    out = []
    for mode, (G, S) in _SHAPES.items():
        for reverse in (False, True):
            tag = f"{mode}{'-reverse' if reverse else ''}"
            attrs = {"mode": mode, "reverse": reverse}
            states = [(B, H), (B, H)] if mode == "lstm" else [(B, H)]
            if op == "rnn_scan":
                def ref(xs, dt, mode=mode, reverse=reverse):
                    c = xs[2] if mode == "lstm" else None
                    return scan_ref(mode, reverse, xs[0], xs[1], c, xs[-2], xs[-1])
                out.append((tag, [(T, B, G * H), *states, (G * H, H), (G * H,)], (-1, 1), attrs, ref))
            else:
                def ref(xs, dt, mode=mode, reverse=reverse):
                    c0 = xs[3] if mode == "lstm" else None
                    return scan_grad_ref(mode, reverse, xs[0], xs[1], xs[2], c0, xs[-1])
                out.append((tag, [(T, B, S * H), (T, B, S * H), *states, (G * H, H)], (-1, 1), attrs, ref))
    if op == "rnn_scan_grad":
        for mode, grads in _PARTS:
            G, S = _SHAPES[mode]
            for reverse in (False, True):
                states = [(B, H), (B, H)] if mode == "lstm" else [(B, H)]
                shapes = {"y": (T, B, S * H), "out": (T, B, H), "h": (B, H), "c": (B, H)}
                k = len(grads)

                def ref(xs, dt, mode=mode, reverse=reverse, grads=grads, k=k, S=S):
                    gy = packed_grad(mode, reverse, grads, xs[1:1 + k], T, B, H, S * H)
                    c0 = xs[2 + k] if mode == "lstm" else None
                    return scan_grad_ref(mode, reverse, xs[0], gy, xs[1 + k], c0, xs[-1])
                out.append((f"{mode}{'-reverse' if reverse else ''}-{'-'.join(grads)}",
                            [(T, B, S * H), *(shapes[g] for g in grads), *states, (G * H, H)], (-1, 1),
                            {"mode": mode, "reverse": reverse, "grads": list(grads)}, ref))
    return out + _step_specs(op, B, H)


#: a cell's one step (2-D ``gi`` / ``y``): the scans' references of a sequence of one, ``rnn_scan_grad`` given its
#: output's whole gradient or the final state's parts
_STEP = (("lstm", ("y",)), ("lstm", ("h", "c")), ("gru", ("h",)), ("rnn_tanh", ("y",)))


def _step_specs(op: str, B: int, H: int) -> list:
    out = []
    for mode, grads in _STEP:
        G, S = _SHAPES[mode]
        attrs = {"mode": mode, "reverse": False}
        states = [(B, H), (B, H)] if mode == "lstm" else [(B, H)]
        if op == "rnn_scan":
            if grads != ("y",) and mode == "lstm":
                continue

            def ref(xs, dt, mode=mode):
                c = xs[2] if mode == "lstm" else None
                return scan_ref(mode, False, xs[0][None], xs[1], c, xs[-2], xs[-1])[0]
            out.append((f"{mode}-step", [(B, G * H), *states, (G * H, H), (G * H,)], (-1, 1), attrs, ref))
            continue
        k = len(grads)
        shapes = {"y": (B, S * H), "h": (B, H), "c": (B, H)}

        def ref(xs, dt, mode=mode, grads=grads, k=k, S=S):
            parts = [v[None] if g == "y" else v for g, v in zip(grads, xs[1:1 + k])]
            gy = packed_grad(mode, False, grads, parts, 1, B, H, S * H)
            c0 = xs[2 + k] if mode == "lstm" else None
            d = scan_grad_ref(mode, False, xs[0][None], gy, xs[1 + k], c0, xs[-1])
            return d.reshape(2 * B, d.shape[2])
        out.append((f"{mode}-step-{'-'.join(grads)}", [(B, S * H), *(shapes[g] for g in grads), *states, (G * H, H)],
                    (-1, 1), attrs | ({} if grads == ("y",) else {"grads": list(grads)}), ref))
    return out
