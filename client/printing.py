"""``repr`` of tensors, printed like torch's (``torch/_tensor_str.py``'s algorithm, on numpy values).

Differences: the dtype is shown as ``dtype=tensorwire.float16``, and the device is shown unless it
is ``cpu:0``. :func:`set_printoptions` (``tw.set_printoptions``) sets the options below, as torch's does its
``PRINT_OPTS``.
"""

from __future__ import annotations

import math

import numpy as np

from tensorwire.protocol import dtypes as D

#: digits after the point (torch's ``precision``)
PRECISION = 4
#: a tensor of more elements than this is summarized: its first and last EDGEITEMS rows and columns, and "..."
THRESHOLD = 1000
EDGEITEMS = 3
#: the columns a line fills before it wraps
LINEWIDTH = 80
#: scientific notation: True always, False never, None chosen from the values (torch's rule, :class:`_Formatter`)
SCI_MODE: bool | None = None

#: torch's profiles: (precision, threshold, edgeitems, linewidth)
PROFILES = {"default": (4, 1000, 3, 80), "short": (2, 1000, 2, 80), "full": (4, math.inf, 3, 80)}


def set_printoptions(precision: int | None = None, threshold: float | None = None, edgeitems: int | None = None,
                     linewidth: int | None = None, profile: str | None = None, sci_mode: bool | None = None) -> None:
    """Set how tensors print (torch.set_printoptions): ``repr(t)`` follows these from then on, in this process.

    ``precision``: digits after the point (default 4); ``threshold``: a tensor of more elements is summarized
    (default 1000); ``edgeitems``: the rows and columns a summary keeps at each end (default 3); ``linewidth``: the
    columns a line fills (default 80); ``profile``: ``"default"``, ``"short"`` (precision 2, edgeitems 2) or
    ``"full"`` (never summarized) sets those four first (an unknown name changes nothing, as in torch);
    ``sci_mode``: True or False forces scientific notation on or off, None (what every call without it sets, as in
    torch) lets the values choose."""
    global PRECISION, THRESHOLD, EDGEITEMS, LINEWIDTH, SCI_MODE
    if profile in PROFILES:
        PRECISION, THRESHOLD, EDGEITEMS, LINEWIDTH = PROFILES[profile]
    if precision is not None:
        PRECISION = precision
    if threshold is not None:
        THRESHOLD = threshold
    if edgeitems is not None:
        EDGEITEMS = edgeitems
    if linewidth is not None:
        LINEWIDTH = linewidth
    SCI_MODE = sci_mode


def get_printoptions() -> dict:
    """The current print options, as torch's ``torch._tensor_str.get_printoptions()`` (torch 2.13 has no
    ``torch.get_printoptions``): ``precision``, ``threshold``, ``edgeitems``, ``linewidth``, ``sci_mode``."""
    return {"precision": PRECISION, "threshold": THRESHOLD, "edgeitems": EDGEITEMS, "linewidth": LINEWIDTH,
            "sci_mode": SCI_MODE}


class _Formatter:
    """Chooses one width and one notation for every element (torch's ``_Formatter``)."""

    def __init__(self, arr: np.ndarray, floating: bool):
        self.floating = floating
        self.int_mode = True
        self.sci_mode = False
        self.max_width = 1
        flat = arr.reshape(-1)
        if not floating:
            for v in flat.tolist():
                self.max_width = max(self.max_width, len(f"{v}"))
            return
        vals = flat[np.isfinite(flat) & (flat != 0)]
        if vals.size == 0:
            return
        absv = np.abs(vals)
        lo, hi = float(absv.min()), float(absv.max())
        self.int_mode = bool(np.all(vals == np.ceil(vals)))
        self.sci_mode = (hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4) if SCI_MODE is None else bool(SCI_MODE)
        for v in vals.tolist():
            if self.sci_mode:
                n = len(f"{v:.{PRECISION}e}")
            elif self.int_mode:
                n = len(f"{v:.0f}") + 1
            else:
                n = len(f"{v:.{PRECISION}f}")
            self.max_width = max(self.max_width, n)

    def format(self, v) -> str:
        if self.floating:
            if self.sci_mode:
                s = f"{v:{self.max_width}.{PRECISION}e}"
            elif self.int_mode:
                s = f"{v:.0f}"
                if not (math.isinf(v) or math.isnan(v)):
                    s += "."
            else:
                s = f"{v:.{PRECISION}f}"
        else:
            s = f"{v}"
        return (self.max_width - len(s)) * " " + s


class _ComplexFormatter:
    """A complex number as torch prints it: the real part and the imaginary part each by a formatter of their own
    (``1.0000+2.5000j``)."""

    def __init__(self, arr: np.ndarray):
        self.real = _Formatter(arr.real.astype(np.float64), True)
        self.imag = _Formatter(arr.imag.astype(np.float64), True)
        self.max_width = self.real.max_width + self.imag.max_width + 1  # (+1: the j)

    def format(self, v) -> str:
        v = complex(v)
        re = self.real.format(v.real)
        im = (self.imag.format(v.imag) + "j").lstrip()
        return re + im if im[0] in "+-" else re + "+" + im


def _summarized(arr: np.ndarray) -> np.ndarray:
    """The elements torch's formatter looks at when the tensor is summarized (edge items only)."""
    if arr.ndim == 0:
        return arr
    if arr.ndim == 1:
        return np.concatenate([arr[:EDGEITEMS], arr[-EDGEITEMS:]]) if arr.shape[0] > 2 * EDGEITEMS else arr
    rows = list(range(EDGEITEMS)) + list(range(arr.shape[0] - EDGEITEMS, arr.shape[0])) \
        if arr.shape[0] > 2 * EDGEITEMS else range(arr.shape[0])
    return np.stack([_summarized(arr[i]) for i in rows])


def _vector(arr: np.ndarray, indent: int, summarize: bool, fmt: _Formatter) -> str:
    per_line = max(1, math.floor((LINEWIDTH - indent) / (fmt.max_width + 2)))
    if summarize and arr.shape[0] > 2 * EDGEITEMS:
        data = [fmt.format(v) for v in arr[:EDGEITEMS].tolist()] + [" ..."] + \
            [fmt.format(v) for v in arr[-EDGEITEMS:].tolist()]
    else:
        data = [fmt.format(v) for v in arr.tolist()]
    lines = [", ".join(data[i:i + per_line]) for i in range(0, len(data), per_line)]
    return "[" + ("," + "\n" + " " * (indent + 1)).join(lines) + "]"


def _body(arr: np.ndarray, indent: int, summarize: bool, fmt: _Formatter) -> str:
    if arr.ndim == 0:
        return fmt.format(arr.item())
    if arr.ndim == 1:
        return _vector(arr, indent, summarize, fmt)
    n = arr.shape[0]
    if summarize and n > 2 * EDGEITEMS:
        slices = [_body(arr[i], indent + 1, summarize, fmt) for i in range(EDGEITEMS)] + ["..."] + \
            [_body(arr[i], indent + 1, summarize, fmt) for i in range(n - EDGEITEMS, n)]
    else:
        slices = [_body(arr[i], indent + 1, summarize, fmt) for i in range(n)]
    return "[" + ("," + "\n" * (arr.ndim - 1) + " " * (indent + 1)).join(slices) + "]"


def format_array(arr: np.ndarray, floating: bool, indent: int = 7) -> str:
    """The bracketed body torch prints for an array's values."""
    if arr.size == 0:
        return "[]"
    summarize = arr.size > THRESHOLD
    seen = _summarized(arr) if summarize else arr
    fmt = _ComplexFormatter(seen) if arr.dtype.kind == "c" else _Formatter(seen, floating)
    return _body(arr, indent, summarize, fmt)


def _add_suffixes(text: str, suffixes: list[str], indent: int) -> str:
    parts = [text]
    last = len(text) - text.rfind("\n") + 1
    for s in suffixes:
        if last + len(s) + 2 > LINEWIDTH:
            parts.append(",\n" + " " * indent + s)
            last = indent + len(s)
        else:
            parts.append(", " + s)
            last += len(s) + 2
    parts.append(")")
    return "".join(parts)


def format_tensor(t) -> str:
    try:
        arr = t._numpy()
    except Exception as e:  # printing must not hide what went wrong
        return f"tensor(<error: {type(e).__name__}: {e}>, shape={list(t.shape)}, dtype={t.dtype})"
    floating = t.dtype.is_floating_point
    if floating:
        arr = np.asarray(arr).astype(np.float64)
    prefix = "tensor("
    suffixes = []
    if t._dev != "cpu:0":
        suffixes.append(f"device='{t._dev}'")
    if arr.size == 0:
        if arr.ndim != 1:
            suffixes.append(f"size={tuple(t.shape)}")
        if t.dtype is not D.get_default_dtype():
            suffixes.append(f"dtype={t.dtype!r}")
    elif t.dtype not in (D.get_default_dtype(), D.get_default_complex_dtype(), D.int64, D.bool_):
        suffixes.append(f"dtype={t.dtype!r}")
    if t.grad_fn is not None:
        suffixes.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t.requires_grad:
        suffixes.append("requires_grad=True")
    return _add_suffixes(prefix + format_array(arr, floating, len(prefix)), suffixes, len(prefix))
