"""Helpers shared by the client tests: numpy float64 references, optional torch references.

Every check compares a tensorwire result with a numpy float64 reference (so the tests mean
something without torch); where torch is installed, the same computation in torch is compared too
(values, shape and dtype).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

try:  # torch is an optional reference
    import torch
except ImportError:  # pragma: no cover - depends on the environment
    torch = None

import tensorwire as tw

DTYPE_NAMES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64")
FLOAT_NAMES = ("float16", "bfloat16", "float32", "float64")
INT_NAMES = ("uint8", "int8", "int16", "int32", "int64")

# relative tolerance of a result in each dtype, against a float64 reference
RTOL = {"float64": 1e-6, "float32": 2e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
ATOL = {"float64": 1e-9, "float32": 1e-5, "float16": 1e-3, "bfloat16": 1e-2}


def twd(name: str):
    """The tensorwire dtype called ``name``."""
    return getattr(tw, name)


def npd(name: str) -> np.dtype:
    """The numpy dtype of the tensorwire dtype called ``name`` (bfloat16 via ml_dtypes)."""
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def thd(name: str):
    """The torch dtype called ``name`` (torch must be installed)."""
    return getattr(torch, name)


def as_f64(a) -> np.ndarray:
    """Any array (bool, ints, float16, bfloat16 ...) as float64."""
    a = np.asarray(a)
    if a.dtype == np.bool_:
        return a.astype(np.float64)
    return a.astype(np.float32).astype(np.float64) if a.dtype == ml_dtypes.bfloat16 else a.astype(np.float64)


def tol(dtype_name: str, rtol=None, atol=None):
    return (RTOL.get(dtype_name, 0) if rtol is None else rtol), (ATOL.get(dtype_name, 0) if atol is None else atol)


def check(t: tw.Tensor, expected, *, dtype=None, rtol=None, atol=None, value=None) -> np.ndarray:
    """Assert that tensorwire tensor ``t`` equals ``expected`` (a numpy reference, usually float64).

    ``dtype`` (a name) is the dtype ``t`` must have; shape must match exactly. Values are compared in
    float64 with the tolerance of ``t``'s dtype (exact for bool and integer dtypes). Returns t.numpy().
    """
    assert isinstance(t, tw.Tensor), type(t)
    got = t.numpy() if value is None else value
    exp = np.asarray(expected)
    assert tuple(t.shape) == exp.shape, f"shape {tuple(t.shape)} != expected {exp.shape}"
    assert got.shape == exp.shape, f"fetched shape {got.shape} != expected {exp.shape}"
    if dtype is not None:
        assert t.dtype is twd(dtype), f"dtype {t.dtype} != expected tensorwire.{dtype}"
    assert got.dtype == npd(t.dtype.name), f"fetched numpy dtype {got.dtype} does not match {t.dtype}"
    r, a = tol(t.dtype.name, rtol, atol)
    g64, e64 = as_f64(got), as_f64(exp)
    if r == 0 and a == 0:
        ok = np.array_equal(g64, e64, equal_nan=True)
        assert ok, f"values differ:\n got {got!r}\n exp {exp!r}"
    else:
        np.testing.assert_allclose(g64, e64, rtol=r, atol=a, equal_nan=True)
    return got


def check_torch(t: tw.Tensor, ref, *, rtol=None, atol=None, value=None) -> None:
    """Assert that ``t`` matches torch tensor ``ref``: same shape, same dtype name, close values."""
    if torch is None or ref is None:
        return
    if isinstance(ref, torch.Tensor):
        name = str(ref.dtype).removeprefix("torch.")
        assert t.dtype.name == name, f"dtype {t.dtype.name} != torch's {name}"
        exp = ref.detach().to(torch.float64).numpy() if name in FLOAT_NAMES else ref.detach().numpy()
        if name == "bool":
            exp = exp.astype(np.bool_)
    else:
        exp = np.asarray(ref)
    got = t.numpy() if value is None else value
    assert tuple(t.shape) == tuple(exp.shape), f"shape {tuple(t.shape)} != torch's {tuple(exp.shape)}"
    r, a = tol(t.dtype.name, rtol, atol)
    # torch and numpy may round half-precision results differently by one ulp
    if t.dtype.name in ("float16", "bfloat16"):
        r, a = 2 * r, 2 * a
    if r == 0 and a == 0:
        assert np.array_equal(as_f64(got), as_f64(exp), equal_nan=True), f"got {got!r}\ntorch {exp!r}"
    else:
        np.testing.assert_allclose(as_f64(got), as_f64(exp), rtol=r, atol=a, equal_nan=True)


def torch_of(a: np.ndarray, dtype_name: str | None = None):
    """``a`` as a torch tensor (bfloat16 through float32)."""
    if torch is None:
        return None
    name = dtype_name or ("bfloat16" if a.dtype == ml_dtypes.bfloat16 else str(a.dtype))
    if name == "bfloat16":
        return torch.tensor(np.asarray(a, dtype=np.float32)).to(torch.bfloat16)
    return torch.tensor(np.asarray(a)).to(thd(name))


def data(shape, dtype_name: str, *, seed: int = 0, low=-3.0, high=3.0, positive=False) -> np.ndarray:
    """Deterministic test data of ``shape`` in dtype ``dtype_name`` (values exactly representable)."""
    rng = np.random.default_rng(seed)
    if dtype_name == "bool":
        return rng.random(shape) < 0.5
    if dtype_name in INT_NAMES:
        lo = 0 if dtype_name == "uint8" or positive else int(low * 3)
        hi = max(int(high * 3), lo + 2)
        return rng.integers(lo if not positive else 1, hi, size=shape).astype(dtype_name)
    lo = 0.0625 if positive else low
    v = rng.uniform(lo, high, size=shape)
    v = np.round(v * 16) / 16  # exactly representable in every float dtype
    if positive:
        v = np.maximum(v, 0.0625)
    return v.astype(npd(dtype_name))


def erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def line_of(path: str, marker: str) -> int:
    """The line number in ``path`` of the one line holding ``marker`` (lines that look it up are skipped), for
    checking that an error names the user's line."""
    with open(path) as f:
        hits = [i + 1 for i, line in enumerate(f) if marker in line and "line_of(" not in line]
    assert len(hits) == 1, (marker, hits)
    return hits[0]
