"""``repr`` of tensors, printed like torch's."""

from __future__ import annotations

import numpy as np
from tensorwire.protocol import dtypes as D


def format_tensor(t) -> str:
    try:
        arr = t.numpy()
    except Exception as e:  # printing must not hide what went wrong
        return f"tensor(<error: {type(e).__name__}: {e}>, shape={list(t.shape)}, dtype={t.dtype})"
    if t.dtype in (D.bfloat16, D.float16):
        arr = arr.astype(np.float32)
    extras = []
    if t._dev != "cpu:0":
        extras.append(f"device='{t._dev}'")
    default_shown = t.dtype in (D.get_default_dtype(), D.int64, D.bool_)
    if arr.size == 0:
        extras.insert(0, f"size={tuple(t.shape)}")
        if not default_shown:
            extras.append(f"dtype={t.dtype!r}")
        body = "[]"
    else:
        if t.dtype.is_floating_point:
            finite = arr[np.isfinite(arr)]
            integral = finite.size == 0 or bool(np.all(finite == np.round(finite)))
            big = finite.size and (np.abs(finite).max() >= 1e8 or (np.abs(finite[finite != 0]).min(initial=1) < 1e-4))
            opts = dict(precision=4, floatmode="fixed" if not integral else "unique", suppress_small=False)
            if big:
                opts = dict(precision=4, floatmode="fixed")
        else:
            opts = {}
        body = np.array2string(arr, separator=", ", prefix="tensor(", threshold=1000, edgeitems=3,
                               formatter={"bool": lambda b: "True" if b else "False"}, **opts)
        if not default_shown:
            extras.append(f"dtype={t.dtype!r}")
    grad = ""
    if t.grad_fn is not None:
        grad = f", grad_fn=<{t.grad_fn.name()}>"
    elif t.requires_grad:
        grad = ", requires_grad=True"
    return "tensor(" + body + "".join(", " + e for e in extras) + grad + ")"
