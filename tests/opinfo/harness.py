"""PyTorch's operator database (``op_db``) run against tensorwire.

``torch.testing._internal.common_methods_invocations.op_db`` lists every public operator with sample inputs. For
each entry the harness resolves the operator on tensorwire by its torch name (a function such as ``tw.add`` or
``tw.nn.functional.conv2d``, dotted names walking ``nn.functional``, ``linalg``, ``special`` and ``fft``; else a
``Tensor`` method or property; else the in-place method of torch's random fillers; then the same for torch's
aliases), converts each sample (tensors through numpy, onto the current session), runs it, and compares with
torch's own result at ``torch.testing.assert_close``'s default tolerances for the dtype. Each sample ends as one
of:

* ``ok``: same value, shape and dtype as torch;
* ``unsupported``: a clear typed refusal from tensorwire (a :class:`TensorwireError` that is not an execution
  failure, or ``NotImplementedError``), or an argument with no tensorwire form (a sparse tensor, a generator);
* ``error``: any other exception (a bug, or an argument tensorwire does not know);
* ``wrong``: a value, shape or dtype that differs from torch's: a silent error, the worst kind.

An entry that does not resolve is ``missing``; otherwise its status is its worst sample's. Random operators are
checked for shape and dtype only, as are the ``empty`` family's uninitialised values; eigen- and singular vectors
(``linalg.eigh``, ``linalg.svd``, ``svd``) are compared up to each vector's sign, which torch leaves to LAPACK.

torch is needed here (it is optional for tensorwire's users), and so is ``expecttest`` (torch's test internals
import it).
"""

from __future__ import annotations

import inspect
import itertools
import math
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
import torch

import tensorwire as tw
from tensorwire.protocol import errors as E
from tensorwire.protocol.dtypes import DType

STATUSES = ("ok", "missing", "unsupported", "error", "wrong")
_RANK = {"ok": 0, "missing": 1, "unsupported": 2, "error": 3, "wrong": 4}

# values never initialised (torch's and ours are both whatever memory held): shape and dtype only
UNINITIALISED = frozenset({"empty", "empty_like", "empty_permuted", "empty_strided", "new_empty",
                           "new_empty_strided"})
# wrapped in wrapper_set_seed, yet deterministic: values compared
DETERMINISTIC = frozenset({"item"})
# a typed error that means "this failed while running", not "tensorwire refuses these arguments"
_FAILURES = (E.ExecutionError, E.WorkerLost, E.DependencyFailed, E.ServiceUnavailable, E.ConnectionFailed,
             E.TimeoutError_, E.OutOfMemory)


class Unconvertible(Exception):
    """A sample argument with no tensorwire form (a sparse tensor, a complex32 one, a ``torch.Generator``...)."""


# -- the database ----------------------------------------------------------------------------------------------------

def op_db() -> list:
    """torch's OpInfo list (imports torch's test internals: ~10 s)."""
    from torch.testing._internal.common_methods_invocations import op_db as db

    _no_test_case_lookup()
    return db


def _no_test_case_lookup() -> None:
    """Spare ``op.sample_inputs`` torch's search for the running ``unittest.TestCase`` (``extract_test_fn``: it reads
    every frame's source, ~0.3 s a call under pytest's deep stack). Our tests are no TestCase, so the search answers
    ``None`` anyway, and the samples (seeded from torch's default ``SEED`` without a test name) are the same."""
    from torch.testing._internal import common_utils
    from torch.testing._internal.opinfo import core

    for module in (common_utils, core):
        module.extract_test_fn = _no_test_fn


def _no_test_fn():
    return None


def entry_name(op) -> str:
    """``name.variant``, as torch's tests name an OpInfo (``std.unbiased``, ``nn.functional.conv2d``)."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def public_entries(dtype: torch.dtype, db: Iterable | None = None) -> list:
    """The entries of public operators (no leading underscore, no raw ``torch.ops``) that support ``dtype`` on CPU."""
    return [op for op in (op_db() if db is None else db)
            if not op.name.startswith(("_", "torch.ops.")) and dtype in op.supported_dtypes("cpu")]


def is_random(op) -> bool:
    """Whether the entry's values depend on a random generator (op_db wraps those in ``wrapper_set_seed``) or on
    uninitialised memory: such entries are checked for shape and dtype only."""
    if op.name in DETERMINISTIC:
        return False
    code = getattr(op.op, "__code__", None)
    return op.name in UNINITIALISED or (code is not None and "wrapper_set_seed" in code.co_names)


# -- resolving an entry on tensorwire --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Target:
    """Where an entry resolved on tensorwire, and how to call it as ``fn(input, *args, **kwargs)``."""

    path: str
    fn: Callable


def _walk(root, dotted: str):
    obj = root
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _is_function(obj) -> bool:
    return callable(obj) and not isinstance(obj, (types.ModuleType, type, DType))


def _method_target(name: str) -> Target | None:
    attr = inspect.getattr_static(tw.Tensor, name, None)
    if attr is None:
        return None
    if isinstance(attr, property):
        return Target(f"Tensor.{name} (property)", lambda inp, *a, **k: getattr(inp, name))
    return Target(f"Tensor.{name}", lambda inp, *a, **k: getattr(inp, name)(*a, **k))


def _resolve_name(op, name: str) -> Target | None:
    fn = _walk(tw, name)
    if _is_function(fn):
        return Target(f"tw.{name}", fn)
    if "." in name:
        return None
    if op.method_variant is not None or _walk(torch, name) is None:
        t = _method_target(name)
        if t is not None:
            return t
    # torch's random fillers (cauchy, uniform...) exist only as in-place methods: run ours on the fresh input
    if op.inplace_variant is not None and _walk(torch, name) is None and not hasattr(torch.Tensor, name):
        t = _method_target(name + "_")
        if t is not None:
            return t
    return None


class MissingName(AttributeError):
    """op_db's lambda asked tensorwire for a name it does not have."""


class _Namespace:
    """tensorwire answering for ``torch`` inside op_db's lambdas (``torch.where(condition, self, other)``)."""

    def __init__(self, obj, path: str):
        self._obj, self._path = obj, path

    def __getattr__(self, name: str):
        try:
            value = getattr(self._obj, name)
        except AttributeError:
            raise MissingName(f"{self._path}.{name}") from None
        return _Namespace(value, f"{self._path}.{name}") if isinstance(value, types.ModuleType) else value


def _call(fn, *args, **kwargs):
    """``wrapper_set_seed`` for our side: our random ops are not compared by value."""
    return fn(*args, **kwargs)


_GLOBALS: dict[int, dict] = {}


def tw_globals(fn: types.FunctionType) -> dict:
    """The globals of op_db's module that defines ``fn``, with ``torch`` meaning tensorwire (one table a module)."""
    key = id(fn.__globals__)
    if key not in _GLOBALS:
        _GLOBALS[key] = {**fn.__globals__, "torch": _Namespace(tw, "tw"), "wrapper_set_seed": _call}
    return _GLOBALS[key]


def _rebound(fn: types.FunctionType) -> Callable:
    """op_db's own lambda with ``torch`` meaning tensorwire (it may reorder arguments, or read a property)."""
    return types.FunctionType(fn.__code__, tw_globals(fn), fn.__name__, fn.__defaults__)


def _is_op_db_lambda(fn) -> bool:
    return (isinstance(fn, types.FunctionType) and fn.__name__ == "<lambda>" and not fn.__code__.co_freevars
            and fn.__module__.startswith("torch.testing."))


def resolve(op) -> Target | None:
    """The entry's operator on tensorwire, by its torch name, then by its aliases; ``None``: missing.

    Where op_db defines the entry by a lambda (``lambda self, condition, other: torch.where(condition, self,
    other)``, ``lambda x: x.T``), that lambda is what runs, against tensorwire's namespace.
    """
    for name in [op.name, *(a.name.removeprefix("torch.") for a in op.aliases)]:
        t = _resolve_name(op, name)
        if t is not None:
            if _is_op_db_lambda(op.op):
                return Target(f"{t.path} (op_db's lambda)", _rebound(op.op))
            return t
    return None


# -- converting a sample ---------------------------------------------------------------------------------------------

def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A torch tensor's value as a numpy array of the same dtype (bfloat16 through ml_dtypes)."""
    t = t.detach().resolve_conj().resolve_neg().cpu()
    if t.dtype is torch.bfloat16:
        import ml_dtypes

        return t.float().numpy().astype(ml_dtypes.bfloat16)
    return t.numpy().copy()


def _tw_dtype(name: str) -> DType:
    d = getattr(tw, name, None)
    if not isinstance(d, DType):
        raise Unconvertible(f"dtype torch.{name} has no tensorwire counterpart")
    return d


def is_partial_view(x: torch.Tensor) -> bool:
    """Whether ``x`` is a contiguous view of a contiguous base (its storage holds more than ``x``)."""
    base = x._base
    return base is not None and base.layout is torch.strided and x.is_contiguous() and base.is_contiguous()


def _sparse_to_tw(x: torch.Tensor):
    """A sparse COO or CSR tensor as tensorwire's (its indices and values through numpy)."""
    if x.layout is torch.sparse_coo:
        return tw.sparse_coo_tensor(to_tw(x._indices()), to_tw(x._values()), tuple(x.shape),
                                    is_coalesced=x.is_coalesced())
    if x.layout is torch.sparse_csr and x.dim() == 2:
        return tw.sparse_csr_tensor(to_tw(x.crow_indices()), to_tw(x.col_indices()), to_tw(x.values()),
                                    tuple(x.shape))
    raise Unconvertible(f"a {x.layout} tensor of {x.dim()} dims")


def to_tw(x):
    """A sample argument in tensorwire's terms: tensors through numpy (sparse ones by their indices and values),
    dtypes, layouts, devices and sizes by name."""
    if isinstance(x, torch.Tensor):
        if x.layout is not torch.strided:
            return _sparse_to_tw(x)
        _tw_dtype(str(x.dtype).removeprefix("torch."))
        if is_partial_view(x):
            # a contiguous view of a contiguous base (as_strided's partial views): the same view of the base here,
            # so that what reads the storage (as_strided) sees the base's elements around it
            base = x._base
            off = x.storage_offset() - base.storage_offset()
            return tw.tensor(to_numpy(base)).reshape(-1)[off:off + x.numel()].reshape(*x.shape)
        return tw.tensor(to_numpy(x))
    if isinstance(x, torch.dtype):
        return _tw_dtype(str(x).removeprefix("torch."))
    if isinstance(x, torch.device):
        return str(x)
    if isinstance(x, torch.Size):
        return tuple(x)
    if isinstance(x, torch.memory_format):
        return getattr(tw, str(x).removeprefix("torch."))
    if isinstance(x, torch.nn.Module) and not any(True for _ in x.parameters()) and not any(True for _ in x.buffers()):
        # a module without state (triplet_margin_with_distance_loss's PairwiseDistance()): ours of the same name,
        # with the attributes both have
        cls = getattr(tw.nn, type(x).__name__, None)
        if cls is None:
            raise Unconvertible(f"module {type(x).__name__} (no tw.nn.{type(x).__name__})")
        m = cls()
        for k, v in vars(x).items():
            if not k.startswith("_") and isinstance(v, (bool, int, float, str)) and hasattr(m, k):
                setattr(m, k, v)
        return m
    if isinstance(x, torch.layout):
        return getattr(tw, str(x).removeprefix("torch."))
    if isinstance(x, torch.Generator):
        raise Unconvertible(f"argument {x!r}")
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return type(x)(to_tw(y) for y in x)
    if isinstance(x, dict):
        return {k: to_tw(v) for k, v in x.items()}
    return x


def describe(sample) -> str:
    """A sample in one short line: tensors as ``T[shape]dtype``, other arguments by repr."""
    def d(x) -> str:
        if isinstance(x, torch.Tensor):
            return f"T{list(x.shape)}{str(x.dtype).removeprefix('torch.')}"
        if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
            inner = ", ".join(d(y) for y in x)
            return f"[{inner}]" if isinstance(x, list) else f"({inner})"
        if isinstance(x, dict):
            return "{" + ", ".join(f"{k}={d(v)}" for k, v in x.items()) + "}"
        r = repr(x)
        return r if len(r) <= 40 else r[:37] + "..."
    parts = [d(sample.input), *(d(a) for a in sample.args), *(f"{k}={d(v)}" for k, v in sample.kwargs.items())]
    return f"({', '.join(parts)})"


# -- comparing -------------------------------------------------------------------------------------------------------

@dataclass
class _Got:
    """A tensorwire tensor's fetched result."""

    dtype: str
    shape: tuple
    value: np.ndarray
    layout: str = "strided"


def fetch(x):
    """Our result with every tensor's value fetched (running the pending work: errors surface here); a sparse
    tensor's as its dense value, with its layout."""
    if isinstance(x, tw.Tensor):
        if x.layout != "strided":
            return _Got(x.dtype.name, tuple(x.shape), np.array(x.detach().to_dense().numpy()), str.__str__(x.layout))
        return _Got(x.dtype.name, tuple(x.shape), np.array(x.numpy(force=True)))
    if isinstance(x, (list, tuple)):
        return [fetch(y) for y in x]
    return x


def _as_torch(g: _Got) -> torch.Tensor:
    v = g.value
    if g.dtype == "bfloat16":
        return torch.from_numpy(v.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(np.array(v, order="C"))


def _compare_tensor(got, ref: torch.Tensor, values: bool) -> str | None:
    if not isinstance(got, _Got):
        return f"got {type(got).__name__} {got!r:.60} where torch gives a tensor"
    if got.shape != tuple(ref.shape):
        return f"shape {got.shape} != torch's {tuple(ref.shape)}"
    ref_dtype = str(ref.dtype).removeprefix("torch.")
    if got.dtype != ref_dtype:
        return f"dtype {got.dtype} != torch's {ref_dtype}"
    ref_layout = str(ref.layout).removeprefix("torch.")
    if got.layout != ref_layout:
        return f"layout {got.layout} != torch's {ref_layout}"
    if not values:
        return None
    try:
        torch.testing.assert_close(_as_torch(got), ref.detach().resolve_conj().resolve_neg().cpu(),
                                   equal_nan=True, check_device=False, check_layout=False, check_stride=False)
    except AssertionError as e:
        return " ".join(str(e).split("\n")[:4])
    return None


def _compare_number(got, ref) -> str | None:
    if isinstance(got, _Got) or isinstance(ref, bool) != isinstance(got, bool) or not isinstance(got, (int, float)):
        return f"got {type(got).__name__} {got!r:.60} where torch gives {type(ref).__name__} {ref!r}"
    if isinstance(ref, float) and isinstance(got, float) and math.isnan(ref) and math.isnan(got):
        return None
    if isinstance(ref, float) != isinstance(got, float):
        return f"got {type(got).__name__} {got!r} where torch gives {type(ref).__name__} {ref!r}"
    if not math.isclose(got, ref, rel_tol=1.3e-6, abs_tol=1e-5):
        return f"value {got!r} != torch's {ref!r}"
    return None


def compare(got, ref, values: bool = True) -> str | None:
    """``None`` if our fetched result matches torch's ``ref``, else what differs."""
    if isinstance(ref, torch.Tensor):
        return _compare_tensor(got, ref, values)
    if isinstance(ref, torch.Size):
        return None if isinstance(got, (tuple, list)) and tuple(got) == tuple(ref) else f"{got!r} != {ref!r}"
    if isinstance(ref, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(ref):
            return f"got {type(got).__name__} {got!r:.60} where torch gives {len(ref)} results"
        for i, (g, r) in enumerate(zip(got, ref)):
            why = compare(g, r, values)
            if why is not None:
                return f"result {i}: {why}"
        return None
    if isinstance(ref, (bool, int, float)):
        return _compare_number(got, ref) if values or not isinstance(got, (int, float)) else None
    if isinstance(ref, torch.dtype):
        return None if isinstance(got, DType) and got.name == str(ref).removeprefix("torch.") else f"{got!r}"
    if ref is None:
        return None if got is None else f"got {got!r:.60} where torch gives None"
    return None if got == ref else f"got {got!r:.60} where torch gives {ref!r:.60}"


# torch.testing.assert_close's default (rtol, atol) by dtype
_TOL = {torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5), torch.float32: (1.3e-6, 1e-5),
        torch.float64: (1e-7, 1e-7), torch.complex64: (1.3e-6, 1e-5), torch.complex128: (1e-7, 1e-7)}


def is_inexact(t: torch.Tensor) -> bool:
    """Floating point or complex: a tensor rounding applies to, and that can carry a gradient."""
    return t.is_floating_point() or t.is_complex()


def _upcast(x):
    """A sample argument with its floating tensors in float64, its complex ones in complex128 (the exact answer's
    stand-in)."""
    if isinstance(x, torch.Tensor):
        if x.is_complex():
            return x.to(torch.complex128)
        return x.double() if x.is_floating_point() else x
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return type(x)(_upcast(y) for y in x)
    if isinstance(x, dict):
        return {k: _upcast(v) for k, v in x.items()}
    return x


def _no_further(got, ref, exact) -> bool:
    """Whether each of our values is within the tolerance of the float64 answer ``exact``, widened by torch's own
    distance from it: a sum in another order, not a wrong answer."""
    if isinstance(ref, torch.Tensor):
        if not is_inexact(ref):  # (an integer part, ldl_factor's pivots beside its factor: exactly torch's)
            return compare(got, ref) is None
        if (not isinstance(got, _Got) or not isinstance(exact, torch.Tensor)
                or exact.shape != ref.shape or compare(got, ref, values=False) is not None):
            return False
        rtol, atol = _TOL.get(ref.dtype, (0.0, 0.0))
        wide = torch.complex128 if ref.is_complex() else torch.float64
        g, r, e = _as_torch(got).to(wide), ref.detach().to(wide), exact.detach().to(wide)
        ok = (g - e).abs() <= atol + rtol * e.abs() + (r - e).abs()
        return bool((ok | (g.isnan() & r.isnan()) | (g == r)).all())
    if isinstance(ref, (list, tuple)) and isinstance(exact, (list, tuple)) and isinstance(got, (list, tuple)):
        return len(got) == len(ref) == len(exact) and all(_no_further(*t) for t in zip(got, ref, exact))
    return compare(got, ref) is None


def rounding_explains(op, sample, got, ref) -> bool:
    """Whether our values differ from torch's float32 ones only by rounding: no further from torch's float64 answer
    for the same sample than the tolerance plus torch's own float32 error (a matmul's cancelling sum)."""
    if torch.float64 not in op.supported_dtypes("cpu"):
        return False
    try:
        exact = op(_upcast(sample.input), *_upcast(sample.args), **_upcast(sample.kwargs))
    except Exception:  # noqa: BLE001 - no float64 answer: nothing to excuse the difference with
        return False
    return _no_further(got, ref, exact)


# ops whose indices torch leaves unspecified among equal values: name -> (position of ``dim`` in the args, its
# default, whether the op reduces that dim). An index that picks an equal value is as right as torch's.
_TIES = {"sort": (0, -1, False), "argsort": (0, -1, False), "topk": (1, -1, False), "kthvalue": (1, -1, True),
         "median": (0, None, True), "nanmedian": (0, None, True), "mode": (0, -1, True)}


def ties_explain(op, sample, got, ref) -> bool:
    """Whether our indices differ from torch's only by picking other equal values (unspecified for ``_TIES``)."""
    spec = _TIES.get(op.name)
    if spec is None or sample.kwargs.get("stable") or not isinstance(sample.input, torch.Tensor):
        return False
    pos, default, reduces = spec
    args, kwargs = sample.args, sample.kwargs
    dim = args[pos] if len(args) > pos else kwargs.get("dim", default)
    keepdim = args[pos + 1] if reduces and len(args) > pos + 1 else kwargs.get("keepdim", False)
    single = op.name == "argsort"
    if dim is None or sample.input.dim() == 0 or (not single and compare(got[0], ref[0]) is not None):
        return False
    got_idx, ref_idx = (got, ref) if single else (got[1], ref[1])
    if compare(got_idx, ref_idx, values=False) is not None:
        return False
    ours = _as_torch(got_idx)
    if reduces and not keepdim:
        ours, ref_idx = ours.unsqueeze(dim), ref_idx.unsqueeze(dim)
    x = sample.input
    return torch.equal(torch.take_along_dim(x, ours, dim), torch.take_along_dim(x, ref_idx, dim))


# entries whose eigen- or singular vectors torch leaves unspecified up to each vector's sign (LAPACK's choice: MKL's
# and OpenBLAS's differ), or its phase for complex ones (linalg.eig: "unique up to multiplication by e^{i phi}"):
# name -> (position of the left vectors, of the right ones or None, whether those are rows)
_GAUGE = {"linalg.eigh": (1, None, False), "linalg.svd": (0, 2, True), "svd": (0, 2, False),
          "linalg.eig": (1, None, False)}


def _wide(t: torch.Tensor) -> torch.Tensor:
    """``t`` in float64, or complex128 if complex."""
    return t.to(torch.complex128) if t.is_complex() else t.double()


def _align(result: list, ref: list, spec) -> list:
    """``result`` (float64 tensors) with each of its first k vectors' sign flipped to agree with ``ref``'s, and the
    vectors past k (a full SVD's complement, any orthonormal basis of it) replaced by ``ref``'s where both span the
    same space."""
    left, right, rows = spec
    out = list(result)
    u, ur = out[left], ref[left]
    k = min(u.shape[-2], (out[right].shape[-2] if rows else out[right].shape[-1]) if right is not None else u.shape[-1])
    sign = torch.sgn((u[..., :k].conj() * ur[..., :k]).sum(-2, keepdim=True))  # (a phase for complex vectors)
    sign[sign == 0] = 1

    def flip(x, xr):
        rest, rest_r = x[..., k:], xr[..., k:]
        if rest.shape[-1] and torch.allclose(rest @ rest.mH, rest_r @ rest_r.mH, atol=1e-4):
            rest = rest_r
        return torch.cat([x[..., :k] * sign, rest], -1)

    out[left] = flip(u, ur)
    if right is not None:
        v, vr = (out[right].mT, ref[right].mT) if rows else (out[right], ref[right])
        v = flip(v, vr)
        out[right] = v.mT if rows else v
    return out


def gauge_explains(op, sample, got, ref) -> bool:
    """Whether our eigen- or singular vectors differ from torch's only by signs torch documents as arbitrary (and
    by rounding, as :func:`rounding_explains` excuses it): the values and every aligned vector must match."""
    spec = _GAUGE.get(op.name)
    if (spec is None or not isinstance(got, (list, tuple)) or not isinstance(ref, (list, tuple))
            or len(got) != len(ref) or any(compare(g, r, values=False) is not None for g, r in zip(got, ref))):
        return False
    refs = [_wide(r.detach()) for r in ref]
    aligned = _align([_wide(_as_torch(g)) for g in got], refs, spec)
    ours = [_Got(g.dtype, g.shape, a.numpy().astype(g.value.dtype)) for g, a in zip(got, aligned)]
    if compare(ours, ref) is None:
        return True
    try:
        exact = op(_upcast(sample.input), *_upcast(sample.args), **_upcast(sample.kwargs))
    except Exception:  # noqa: BLE001 - no float64 answer: nothing to excuse the difference with
        return False
    return _no_further(ours, ref, _align([_wide(e.detach()) for e in exact], refs, spec))


# -- running ---------------------------------------------------------------------------------------------------------

@dataclass
class SampleOutcome:
    """One sample's result."""

    status: str  # ok | unsupported | error | wrong
    sample: str
    detail: str = ""


@dataclass
class EntryResult:
    """One entry's result at one dtype: its worst sample's status, and every sample's."""

    entry: str
    dtype: str
    status: str
    target: str = ""
    outcomes: list[SampleOutcome] = field(default_factory=list)

    def first(self, status: str) -> SampleOutcome | None:
        return next((o for o in self.outcomes if o.status == status), None)

    def reason(self) -> str:
        """What the entry's worst sample did, in one line."""
        if self.status == "missing" and not self.outcomes:
            return "no tensorwire function, method or alias of this name"
        o = self.first(self.status)
        return "" if o is None else f"{self.status}: {o.detail} on {o.sample}"


def _classify_exception(e: BaseException) -> str:
    if isinstance(e, MissingName):
        return "missing"
    if isinstance(e, Unconvertible) or isinstance(e, NotImplementedError):
        return "unsupported"
    if isinstance(e, E.TensorwireError) and not isinstance(e, _FAILURES):
        return "unsupported"
    return "error"


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:200]}"


def run_sample(op, target: Target, sample) -> SampleOutcome | None:
    """Run one sample on tensorwire and on torch; ``None`` when torch itself refuses the sample."""
    desc = describe(sample)
    try:
        inp, args, kwargs = to_tw(sample.input), to_tw(sample.args), to_tw(sample.kwargs)
    except Exception as e:  # noqa: BLE001 - every failure to pose the sample is classified
        return SampleOutcome(_classify_exception(e) if isinstance(e, Unconvertible) else "error", desc, _one_line(e))
    try:
        ref = op(sample.input, *sample.args, **sample.kwargs)
    except Exception:  # noqa: BLE001 - torch refuses its own sample (rare): nothing to compare with
        return None
    try:
        got = fetch(target.fn(inp, *args, **kwargs))
    except Exception as e:  # noqa: BLE001 - the op's failure is what is measured
        return SampleOutcome(_classify_exception(e), desc, _one_line(e))
    why = compare(got, ref, values=not is_random(op))
    if why is not None and (ties_explain(op, sample, got, ref) or rounding_explains(op, sample, got, ref)
                            or gauge_explains(op, sample, got, ref)):
        why = None
    return SampleOutcome("ok" if why is None else "wrong", desc, why or "")


def samples(op, dtype: torch.dtype, limit: int | None, requires_grad: bool = False):
    """The entry's first ``limit`` sample inputs at ``dtype`` on CPU (all of them for ``None``)."""
    return itertools.islice(op.sample_inputs("cpu", dtype, requires_grad=requires_grad), limit)


def run_entry(op, dtype: torch.dtype, limit: int | None = 3, seed: int = 0, run: Callable = run_sample,
              requires_grad: bool = False) -> EntryResult:
    """Run an entry's samples (the first ``limit``, made from torch's generator seeded with ``seed``, with
    ``requires_grad`` as given) at ``dtype`` and classify it; ``run(op, target, sample)`` gives one sample's outcome
    (:func:`run_sample`: the values; ``gradients.run_grad_sample``: the gradients)."""
    name, dname = entry_name(op), str(dtype).removeprefix("torch.")
    target = resolve(op)
    if target is None:
        return EntryResult(name, dname, "missing")
    outcomes = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # op_db's samples are random: the same ones every run
        for sample in samples(op, dtype, limit, requires_grad):
            o = run(op, target, sample)
            if o is not None:
                outcomes.append(o)
    status = max((o.status for o in outcomes), key=_RANK.__getitem__, default="ok")
    return EntryResult(name, dname, status, target.path, outcomes)
