"""``tw.testing``: torch's ``torch.testing.assert_close`` and ``make_tensor`` for tensorwire tensors.

``assert_close`` compares tensors (``tw.Tensor``, numpy arrays), numbers (and numpy scalars), booleans, ``None`` and
sequences or mappings of them, as torch's does: the same pairing rules (a tensor and a number, or a tensor and a
numpy array, are no pair: ``TypeError``), the same checks in the same order (shape, layout, stride when asked,
device, dtype), the default tolerances by dtype (``float16`` ``(1e-3, 1e-5)``, ``bfloat16`` ``(1.6e-2, 1e-5)``,
``float32`` ``(1.3e-6, 1e-5)``, ``float64`` ``(1e-7, 1e-7)``, the complex ones alike, 0 for the rest; the larger of
the two inputs' when ``check_dtype=False`` lets them differ) and torch's messages (``Mismatched elements``, the
greatest absolute and relative differences and their indices, ``The failure occurred for item [...]``). Devices
are tensorwire's (``cpu:0``, ``cuda:1`` ...). The values are fetched and compared on the client (numpy), in the
promoted dtype of the two, so a failed check also reads back the differences it reports.
"""

from __future__ import annotations

import cmath
import collections.abc
import contextlib
import math
import warnings

import numpy as np

from tensorwire.complex_ops import complex as _complex
from tensorwire.creation import empty, randint, tensor
from tensorwire.dtype_info import finfo, iinfo
from tensorwire.protocol import dtypes as D
from tensorwire.tensor import Tensor

__all__ = ["assert_close", "make_tensor", "assert_allclose"]

#: {dtype: (rtol, atol)}: torch's default tolerances (torch/testing/_comparison.py)
_DTYPE_PRECISIONS = {
    D.float16: (0.001, 1e-5),
    D.bfloat16: (0.016, 1e-5),
    D.float32: (1.3e-6, 1e-5),
    D.float64: (1e-7, 1e-7),
    D.complex64: (1.3e-6, 1e-5),
    D.complex128: (1e-7, 1e-7),
}
#: a Python number's dtype, for its tolerances
_NUMBER_DTYPES = {int: D.int64, float: D.float64, complex: D.complex128}


class _Unsupported(Exception):
    """A pair kind cannot take these inputs: the next one is tried."""


class _Failure(Exception):
    """A comparison failed: the error to raise (``kind``, message) and where in the inputs (``id``)."""

    def __init__(self, kind: type, msg: str, id: tuple = ()):  # noqa: A002
        super().__init__(msg)
        self.kind, self.msg, self.id = kind, msg, id

    def to_error(self, msg=None) -> Exception:
        if not isinstance(msg, str):
            text = self.msg
            if self.id:
                text += f"\n\nThe failure occurred for item {''.join(str([item]) for item in self.id)}"
            msg = msg(text) if callable(msg) else text
        return self.kind(msg)


def _tolerances(dtypes, rtol, atol, id) -> tuple[float, float]:  # noqa: A002
    if (rtol is None) ^ (atol is None):
        raise _Failure(ValueError, "Both 'rtol' and 'atol' must be either specified or omitted, but got no "
                                   f"{'rtol' if rtol is None else 'atol'}.", id)
    if rtol is not None:
        return rtol, atol
    rtols, atols = zip(*[_DTYPE_PRECISIONS.get(d, (0.0, 0.0)) for d in dtypes])
    return max(rtols), max(atols)


def _mismatch_msg(identifier, extra: str, abs_diff, abs_idx, atol, rel_diff, rel_idx, rtol) -> str:
    equality = rtol == 0 and atol == 0

    def diff_msg(kind: str, diff, idx, tol) -> str:
        msg = (f"{kind.title()} difference: {diff}" if idx is None
               else f"Greatest {kind} difference: {diff} at index {idx}")
        return msg + ("" if equality else f" (up to {tol} allowed)") + "\n"

    ident = identifier if isinstance(identifier, str) else "Tensor-likes"
    msg = f"{ident} are not {'equal' if equality else 'close'}!\n\n"
    if extra:
        msg += f"{extra.strip()}\n"
    msg += diff_msg("absolute", abs_diff, abs_idx, atol) + diff_msg("relative", rel_diff, rel_idx, rtol)
    return msg.strip()


def _scalar_msg(actual, expected, rtol, atol) -> str:
    abs_diff = abs(actual - expected)
    rel_diff = float("inf") if expected == 0 else abs_diff / abs(expected)
    return _mismatch_msg("Scalars", f"Expected {expected} but got {actual}.", abs_diff, None, atol, rel_diff, None,
                         rtol)


# -- the pair kinds, tried in torch's order: None, booleans, numbers, tensor-likes --------------------------------

def _none_pair(actual, expected, id, **_):  # noqa: A002
    if not (actual is None or expected is None):
        raise _Unsupported

    def compare():
        if not (actual is None and expected is None):
            raise _Failure(AssertionError, f"None mismatch: {actual} is not {expected}", id)
    return compare


def _bool_pair(actual, expected, id, **_):  # noqa: A002
    if not all(isinstance(v, (bool, np.bool_)) for v in (actual, expected)):
        raise _Unsupported
    a, e = bool(actual), bool(expected)

    def compare():
        if a is not e:
            raise _Failure(AssertionError, f"Booleans mismatch: {a} is not {e}", id)
    return compare


def _number_pair(actual, expected, id, rtol=None, atol=None, equal_nan=False, check_dtype=True, **_):  # noqa: A002
    if not all(isinstance(v, (int, float, complex, np.number)) and not isinstance(v, bool)
               for v in (actual, expected)):
        raise _Unsupported
    a, e = (v.item() if isinstance(v, np.number) else v for v in (actual, expected))
    rtol, atol = _tolerances([_NUMBER_DTYPES[type(v)] for v in (a, e)], rtol, atol, id)

    def compare():
        if check_dtype and type(a) is not type(e):
            raise _Failure(AssertionError, f"The (d)types do not match: {type(a)} != {type(e)}.", id)
        if a == e:
            return
        if equal_nan and cmath.isnan(a) and cmath.isnan(e):
            return
        diff = abs(a - e)
        if cmath.isfinite(diff) and diff <= atol + rtol * abs(e):
            return
        raise _Failure(AssertionError, _scalar_msg(a, e, rtol, atol), id)
    return compare


def _dense(t):
    return t.to_dense() if getattr(t, "_sparse", False) else t


def _host(t) -> np.ndarray:
    """``t``'s values as a numpy array (a tensor is fetched)."""
    return t if isinstance(t, np.ndarray) else np.asarray(_dense(t).detach().numpy())


def _dtype_of(t):
    return t.dtype if isinstance(t, Tensor) else D.from_numpy(t.dtype)


def _tensor_pair(actual, expected, id, allow_subclasses=True, rtol=None, atol=None, equal_nan=False,  # noqa: A002
                 check_device=True, check_dtype=True, check_layout=True, check_stride=False, **_):
    if not (isinstance(actual, type(expected)) or isinstance(expected, type(actual))):
        raise _Unsupported
    if not allow_subclasses and type(actual) is not type(expected):
        raise _Unsupported
    if not all(isinstance(v, (Tensor, np.ndarray)) for v in (actual, expected)):
        raise _Unsupported
    with contextlib.suppress(KeyError, AttributeError, TypeError):
        rtol, atol = _tolerances([_dtype_of(actual), _dtype_of(expected)], rtol, atol, id)
    if rtol is None:  # (a numpy dtype tensorwire has no name for: compared exactly)
        rtol, atol = 0.0, 0.0

    def attr(name, a, e):
        raise _Failure(AssertionError, f"The values for attribute '{name}' do not match: {a} != {e}.", id)

    def compare():
        a_shape, e_shape = tuple(actual.shape), tuple(expected.shape)
        if a_shape != e_shape:
            attr("shape", actual.shape, expected.shape)
        tensors = isinstance(actual, Tensor)
        if tensors:
            if actual.layout != expected.layout:
                if check_layout:
                    attr("layout", actual.layout, expected.layout)
            elif check_stride and actual.stride() != expected.stride():
                attr("stride()", actual.stride(), expected.stride())
            if check_device and actual.device != expected.device:
                attr("device", actual.device, expected.device)
        elif check_stride and actual.strides != expected.strides:
            attr("stride()", actual.strides, expected.strides)
        if check_dtype and actual.dtype != expected.dtype:
            attr("dtype", actual.dtype, expected.dtype)
        a, e = _host(actual), _host(expected)
        if a.dtype != e.dtype:
            common = np.promote_types(a.dtype, e.dtype)
            a, e = a.astype(common), e.astype(common)
        _compare_values(a, e, rtol, atol, equal_nan, id)
    return compare


def _compare_values(a: np.ndarray, e: np.ndarray, rtol, atol, equal_nan, id) -> None:  # noqa: A002
    narrow = None
    if a.dtype.name == "bfloat16":  # (compared in float32, exactly; the differences rounded back, as torch's)
        narrow, a, e = a.dtype, a.astype(np.float32), e.astype(np.float32)
    inexact = a.dtype.kind in "fc"
    if inexact:
        with np.errstate(invalid="ignore", over="ignore"):
            matches = np.isclose(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan)
    elif rtol == 0 and atol == 0 or a.dtype.kind == "b":
        matches = a == e
    else:
        with np.errstate(over="ignore"):
            matches = np.abs(a.astype(np.float64) - e.astype(np.float64)) <= atol + rtol * np.abs(e.astype(np.float64))
    if matches.all():
        return
    if a.ndim == 0:
        raise _Failure(AssertionError, _scalar_msg(a.item(), e.item(), rtol, atol), id)
    total = matches.size
    wrong = total - int(matches.sum())
    extra = f"Mismatched elements: {wrong} / {total} ({wrong / total:.1%})"
    af, ef, mf = a.reshape(-1), e.reshape(-1), matches.reshape(-1)
    if not inexact:
        af, ef = af.astype(np.int64), ef.astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        abs_diff = _rounded(np.abs(af - ef), narrow)
        abs_diff[mf] = 0
        rel_diff = _rounded(abs_diff / np.abs(ef), narrow)
    rel_diff[mf] = 0
    i_abs, i_rel = _argmax(abs_diff), _argmax(rel_diff)
    raise _Failure(AssertionError, _mismatch_msg(None, extra, abs_diff[i_abs].item(), _unravel(i_abs, a.shape), atol,
                                                 rel_diff[i_rel].item(), _unravel(i_rel, a.shape), rtol), id)


def _rounded(x: np.ndarray, narrow) -> np.ndarray:
    return x if narrow is None else x.astype(narrow).astype(x.dtype)


def _argmax(x: np.ndarray) -> int:
    """The first position of the maximum, a NaN counting as the maximum (torch.max's index)."""
    nan = np.isnan(x) if x.dtype.kind in "fc" else None
    if nan is not None and nan.any():
        return int(np.argmax(nan))
    return int(np.argmax(x))


def _unravel(flat: int, shape) -> tuple:
    return tuple(int(i) for i in np.unravel_index(flat, shape)) if shape else ()


_PAIRS = (_none_pair, _bool_pair, _number_pair, _tensor_pair)


def _pairs(actual, expected, id, options) -> list:  # noqa: A002
    """The comparisons of ``actual`` and ``expected``, sequences and mappings taken apart (torch's
    ``originate_pairs``); raises :class:`_Failure` for a structural mismatch."""
    seq = collections.abc.Sequence
    if isinstance(actual, seq) and not isinstance(actual, str) and isinstance(expected, seq) \
            and not isinstance(expected, str):
        if len(actual) != len(expected):
            raise _Failure(AssertionError, f"The length of the sequences mismatch: {len(actual)} != {len(expected)}",
                           id)
        out = []
        for i in range(len(actual)):
            out += _pairs(actual[i], expected[i], (*id, i), options)
        return out
    mapping = collections.abc.Mapping
    if isinstance(actual, mapping) and isinstance(expected, mapping):
        ak, ek = set(actual.keys()), set(expected.keys())
        if ak != ek:
            raise _Failure(AssertionError, "The keys of the mappings do not match:\n"
                                           f"Missing keys in the actual mapping: {sorted(ek - ak)}\n"
                                           f"Additional keys in the actual mapping: {sorted(ak - ek)}", id)
        keys = ak
        with contextlib.suppress(Exception):
            keys = sorted(keys)
        out = []
        for k in keys:
            out += _pairs(actual[k], expected[k], (*id, k), options)
        return out
    for make in _PAIRS:
        try:
            return [make(actual, expected, id, **options)]
        except _Unsupported:
            continue
    raise _Failure(TypeError, f"No comparison pair was able to handle inputs of type {type(actual)} and "
                              f"{type(expected)}.", id)


def assert_close(actual, expected, *, allow_subclasses: bool = True, rtol: float | None = None,
                 atol: float | None = None, equal_nan: bool = False, check_device: bool = True,
                 check_dtype: bool = True, check_layout: bool = True, check_stride: bool = False, msg=None) -> None:
    """Assert that ``actual`` and ``expected`` are close: ``|actual - expected| <= atol + rtol * |expected|``
    elementwise (torch's ``torch.testing.assert_close``; see the module's docstring). ``rtol`` and ``atol`` are given
    together or not at all (then the dtypes' defaults); ``equal_nan`` counts two NaNs as equal; ``msg`` (a string,
    or a function of the generated message) replaces the message. Raises ``AssertionError`` (a mismatch),
    ``TypeError`` (inputs that cannot be compared) or ``ValueError``."""
    __tracebackhide__ = True
    options = dict(allow_subclasses=allow_subclasses, rtol=rtol, atol=atol, equal_nan=equal_nan,
                   check_device=check_device, check_dtype=check_dtype, check_layout=check_layout,
                   check_stride=check_stride)
    try:
        comparisons = _pairs(actual, expected, (), options)
    except _Failure as f:
        raise f.to_error() from None
    for compare in comparisons:
        try:
            compare()
        except _Failure as f:
            raise f.to_error(msg) from None


def assert_allclose(actual, expected, rtol: float | None = None, atol: float | None = None, equal_nan: bool = True,
                    msg: str = "") -> None:
    """torch's deprecated ``assert_allclose``: :func:`assert_close` with looser defaults, the dtypes allowed to differ
    and NaNs equal; a number or sequence becomes a tensor of the other's dtype."""
    warnings.warn("`torch.testing.assert_allclose()` is deprecated since 1.12 and will be removed in a future release. "
                  "Please use `torch.testing.assert_close()` instead. You can find detailed upgrade instructions in "
                  "https://github.com/pytorch/pytorch/issues/61844.", FutureWarning, stacklevel=2)
    if not isinstance(actual, Tensor):
        actual = tensor(actual)
    if not isinstance(expected, Tensor):
        expected = tensor(expected, dtype=actual.dtype, device=actual.device)
    if rtol is None and atol is None:
        precisions = {D.float16: (1e-3, 1e-3), D.float32: (1e-4, 1e-5), D.float64: (1e-5, 1e-8)}
        rtol = max(precisions.get(actual.dtype, (0.0, 0.0))[0], precisions.get(expected.dtype, (0.0, 0.0))[0])
        atol = max(precisions.get(actual.dtype, (0.0, 0.0))[1], precisions.get(expected.dtype, (0.0, 0.0))[1])
    assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=equal_nan, check_device=True, check_dtype=False,
                 check_stride=False, msg=msg or None)


# -- make_tensor -----------------------------------------------------------------------------------------------------

_INTEGRAL = (D.uint8, D.int8, D.int16, D.int32, D.int64)
_FLOATING = (D.float16, D.bfloat16, D.float32, D.float64)
_COMPLEX = (D.complex64, D.complex128)


def make_tensor(*shape, dtype, device, low: float | None = None, high: float | None = None,
                requires_grad: bool = False, noncontiguous: bool = False, exclude_zero: bool = False,
                memory_format=None) -> Tensor:
    """A tensor of ``shape`` filled with values drawn uniformly from ``[low, high)`` (torch's
    ``torch.testing.make_tensor``: the defaults ``[-9, 9)`` for floating and complex dtypes, ``[-9, 10)`` clamped to
    the dtype's range for integers, ``{False, True}`` for bool; ``exclude_zero`` replaces zeros by 1 or the dtype's
    ``tiny``). The draws come from the cluster's generator (``tw.manual_seed``), not torch's. ``noncontiguous`` gives
    every other element of a tensor twice as long in its last dim, as torch's, though a worker's buffers are always
    contiguous; ``memory_format`` is accepted and changes nothing."""
    if len(shape) == 1 and isinstance(shape[0], collections.abc.Sequence):
        shape = shape[0]
    shape = tuple(int(s) for s in shape)
    if noncontiguous and memory_format is not None:
        raise ValueError(f"The parameters `noncontiguous` and `memory_format` are mutually exclusive, but got "
                         f"noncontiguous={noncontiguous} and memory_format={memory_format}")
    integral = dtype is D.bool_ or dtype in _INTEGRAL
    if requires_grad and integral:
        raise ValueError(f"`requires_grad=True` is not supported for boolean and integral dtypes, but got "
                         f"dtype={dtype}")

    def bounds(lowest, highest, default_low, default_high):
        lo = low if low is not None else default_low
        hi = high if high is not None else default_high
        if any(isinstance(v, float) and math.isnan(v) for v in (lo, hi)):
            raise ValueError(f"`low` and `high` cannot be NaN, but got low={lo} and high={hi}")
        if lo == hi and not integral:
            warnings.warn("Passing `low==high` to `torch.testing.make_tensor` for floating or complex types is "
                          "deprecated since 2.1 and will be removed in 2.3. Use `torch.full(...)` instead.",
                          FutureWarning, stacklevel=3)
        elif lo >= hi:
            raise ValueError(f"`low` must be less than `high`, but got {lo} >= {hi}")
        elif hi < lowest or lo >= highest:
            raise ValueError(f"The value interval specified by `low` and `high` is [{lo}, {hi}), but {dtype} only "
                             f"supports [{lowest}, {highest})")
        lo, hi = min(max(lo, lowest), highest), min(max(hi, lowest), highest)
        return (math.ceil(lo), math.ceil(hi)) if integral else (lo, hi)

    noncontiguous = noncontiguous and math.prod(shape) > 1
    if noncontiguous:
        shape = (*shape[:-1], 2 * shape[-1])
    if dtype is D.bool_:
        lo, hi = bounds(0, 2, 0, 2)
        result = randint(lo, hi, shape, dtype=D.int64, device=device).to(D.bool_)
    elif dtype in _INTEGRAL:
        info = iinfo(dtype)
        lo, hi = bounds(info.min, info.max + (1 if dtype is not D.int64 else 0), -9, 10)
        result = randint(lo, hi, shape, dtype=dtype, device=device)
    elif dtype in _FLOATING or dtype in _COMPLEX:
        real = D.to_real(dtype) if dtype in _COMPLEX else dtype
        info = finfo(real)
        lo, hi = bounds(info.min, info.max, -9, 9)
        result = _uniform(shape, real, device, lo, hi, info.max)
        if dtype in _COMPLEX:
            result = _complex(result, _uniform(shape, real, device, lo, hi, info.max))
    else:
        raise TypeError(f"The requested dtype '{dtype}' is not supported by torch.testing.make_tensor(). To request "
                        "support, file an issue at: https://github.com/pytorch/pytorch/issues")
    if noncontiguous:
        result = result[..., 1::2]
    if exclude_zero:
        fill = 1 if integral else finfo(D.to_real(dtype) if dtype in _COMPLEX else dtype).tiny
        result = result.masked_fill(result == 0, fill)
    if not integral:
        result.requires_grad = requires_grad
    return result


def _uniform(shape, dtype, device, lo, hi, top) -> Tensor:
    """``U(lo, hi)`` values of ``dtype`` (the range halved, then doubled, where it would overflow, as torch's)."""
    u = empty(*shape, dtype=dtype, device=device)
    if hi - lo >= top:
        return u.uniform_(lo / 2, hi / 2) * 2
    return u.uniform_(lo, hi)
