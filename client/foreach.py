"""``torch._foreach_*``: an op applied to each tensor of a list (EMA updates, fused optimizer steps, clipping).

timm's ``ModelEmaV3``, ema-pytorch and diffusers' ``EMAModel`` update their shadow weights with
``torch._foreach_lerp_``, ``_foreach_mul_``, ``_foreach_add_`` ...; clipping code takes ``_foreach_norm``. Each
function here is made from :data:`TABLE` (its name, the per-tensor op, whether it has the in-place ``_`` form, and
how it reads its arguments), with torch 2.13's overloads:

* the second operand of a binary op (``add``, ``sub``, ``mul``, ``div``, ``pow``, ``clamp_min``, ``clamp_max``,
  ``maximum``, ``minimum``) is a number, a list of numbers (one per tensor), a list of tensors, or a 0-d tensor
  used as the number; ``alpha=`` (``add``, ``sub``) goes with a list of tensors (``add``: a 0-d tensor too), as
  torch's overloads take it. ``_foreach_pow(2.0, tensors)`` is the number raised to each tensor;
* ``addcdiv``/``addcmul`` take ``value=`` (a number), or ``scalars``: a list of numbers or a 1-D tensor of them;
  ``lerp`` a number, a list of numbers or a list of tensors (``weights``) as its weight;
* ``norm``/``powsum`` (``ord=2``, ``dtype=None``), ``max``, ``mm``, ``clone``, ``copy_`` and ``zero_`` as torch's.

The out-of-place forms return a tuple of new tensors, as torch's; the in-place forms run each tensor's own in-place
method (``t.add_(...)``: the tensor object is rebound to the new value, views and autograd see the write as with any
in-place op) and return the list they were given. Errors are torch's: a list that is no list of tensors
(TypeError), an empty list, lists of different lengths, a scalar list of the wrong length (RuntimeError).
"""

from __future__ import annotations

from collections.abc import Callable
from numbers import Number

from .linalg import vector_norm
from .tensor import Tensor

#: the binary ops' keyword names for their second operand (torch's, per overload), and those taking ``alpha=``
_OPERAND_NAMES = ("other", "scalar", "scalars", "exponent")
_ALPHA_OPS = ("add", "sub")
#: the binary ops that take a 0-d tensor as their own overload (``alpha`` allowed with it for ``add``)
_TENSOR_OPS = ("add", "mul", "div")
_UNSET = object()


def _tensors(fname: str, seq, arg: str = "self", position: int = 1) -> list:
    """``seq`` as a list of tensors, or torch's TypeError."""
    if not isinstance(seq, (list, tuple)):
        raise TypeError(f"{fname}(): argument '{arg}' (position {position}) must be tuple of Tensors, not "
                        f"{type(seq).__name__}")
    for i, t in enumerate(seq):
        if not isinstance(t, Tensor):
            raise TypeError(f"expected Tensor as element {i} in argument {position - 1}, but got "
                            f"{type(t).__name__}")
    return list(seq)


def _same_length(a: list, b: list) -> None:
    if len(a) != len(b):
        raise RuntimeError(f"Tensor lists must have the same number of tensors, got {len(a)} and {len(b)}")


def _nonempty(ts: list) -> None:
    if not ts:
        raise RuntimeError("Tensor list must have at least one tensor.")


def _is_scalar(v) -> bool:
    return isinstance(v, Number) or (isinstance(v, Tensor) and v.ndim == 0)


def _per_tensor(fname: str, ts: list, operand, position: int = 2) -> list:
    """The operand of each tensor of ``ts``: a number or 0-d tensor repeated, a list of numbers, or a list of
    tensors (checked against ``ts``'s length as torch checks each)."""
    if isinstance(operand, (list, tuple)):
        if operand and isinstance(operand[0], Tensor):
            others = _tensors(fname, operand, position=position)
            _same_length(ts, others)
            return others
        for i, v in enumerate(operand):
            if not isinstance(v, Number):
                raise TypeError(f"{fname}(): expected a number as element {i} of the scalar list, but got "
                                f"{type(v).__name__}")
        if len(operand) != len(ts):
            raise RuntimeError("Tensor list must have same number of elements as scalar list.")
        return list(operand)
    if isinstance(operand, Number) or isinstance(operand, Tensor):
        return [operand] * len(ts)
    raise TypeError(f"{fname}() received an invalid operand: {type(operand).__name__} (a number, a list of numbers, "
                    "a list of tensors or a 0-d tensor)")


def _apply(ts: list, inplace: bool, op: str, *per: list, **kw):
    """``t.<op>(*operands, **kw)`` for each tensor (``t.<op>_(...)`` in place; where Tensor has no such method, the
    result written back through the one path in-place methods take); the tuple of results, or ``ts``."""
    outs = []
    for i, t in enumerate(ts):
        args = [p[i] for p in per]
        if not inplace:
            outs.append(getattr(t, op)(*args, **kw))
            continue
        method = getattr(t, op + "_", None)
        if method is not None:
            method(*args, **kw)
        else:  # (maximum_, minimum_: Tensor has no such method; written as inplace.py writes its variants)
            t._assign(getattr(t, op)(*args, **kw))
    return tuple(outs)


def _unary(name: str, op: str, inplace: bool) -> Callable:
    def fn(self):
        ts = _tensors(name, self)
        _nonempty(ts)
        out = _apply(ts, inplace, op)
        return self if inplace else out

    return fn


def _operand(name: str, op: str, args: tuple, kwargs: dict):
    """The one second operand, given by position or by one of torch's keyword names for it."""
    given = [kwargs.pop(k) for k in _OPERAND_NAMES if k in kwargs]
    if kwargs or len(args) + len(given) != 1:
        raise TypeError(f"{name}() takes the tensor list and one operand (a number, a list of numbers, a list of "
                        f"tensors or a 0-d tensor){', alpha=' if op in _ALPHA_OPS else ''}; got "
                        f"{len(args) + len(given)} operands and {sorted(kwargs) or 'no other'} keywords")
    return (args or given)[0]


def _binary(name: str, op: str, inplace: bool) -> Callable:
    def fn(self, *args, alpha=_UNSET, **kwargs):
        operand = _operand(name, op, args, kwargs)
        if op == "pow" and _is_scalar(self) and isinstance(operand, (list, tuple)):  # (Scalar self, Tensor[] exp.)
            exps = _tensors(name, operand, "exponent", 2)
            _nonempty(exps)
            return tuple(e.__rpow__(self) if isinstance(self, Number) else self.pow(e) for e in exps)
        ts = _tensors(name, self)
        _nonempty(ts)
        if isinstance(operand, Tensor) and operand.ndim != 0:
            if op not in _TENSOR_OPS:
                raise TypeError(f"{name}(): a tensor operand must be a 0-d tensor (one number for every tensor), "
                                f"got one of shape {list(operand.shape)}")
            raise RuntimeError(f"scalar tensor expected to be 0 dim but it has {operand.ndim} dimensions and "
                               f"{operand.numel()} elements.")
        per = _per_tensor(name, ts, operand)
        kw = {}
        if alpha is not _UNSET:
            tensor_operand = isinstance(operand, (list, tuple)) and operand and isinstance(operand[0], Tensor)
            if op not in _ALPHA_OPS or not (tensor_operand or (op == "add" and isinstance(operand, Tensor))):
                raise TypeError(f"{name}(): alpha= goes with a list of tensors{' or a 0-d tensor' * (op == 'add')} "
                                f"as the operand (torch's overloads), not with {type(operand).__name__}")
            kw["alpha"] = alpha
        out = _apply(ts, inplace, op, per, **kw)
        return self if inplace else out

    return fn


def _pointwise(name: str, op: str, inplace: bool) -> Callable:
    """``addcdiv``/``addcmul``: ``self + value * tensor1 (/ or *) tensor2``; ``value`` or ``scalars``, one per
    tensor (a list of numbers, or a 1-D tensor of them, read once)."""

    def fn(self, tensor1, tensor2, *args, **kwargs):
        ts = _tensors(name, self)
        t1, t2 = _tensors(name, tensor1, "tensor1", 2), _tensors(name, tensor2, "tensor2", 3)
        _nonempty(ts)
        _same_length(ts, t1)
        _same_length(ts, t2)
        given = [kwargs.pop(k) for k in ("value", "scalars") if k in kwargs]
        if kwargs or len(args) + len(given) > 1:
            raise TypeError(f"{name}() takes self, tensor1, tensor2 and one of value= or scalars=; got "
                            f"{len(args) + len(given)} values and {sorted(kwargs) or 'no other'} keywords")
        value = (args or given or [1])[0]
        if isinstance(value, Tensor):
            if value.ndim != 1:
                raise RuntimeError(f"Expected packed scalar Tensor to be of dimension 1. Got {value.ndim} instead.")
            if value.shape[0] != len(ts):
                raise RuntimeError(f"Expected length of scalars to match input of length {len(ts)} but got "
                                   f"{value.shape[0]} instead.")
            value = value.tolist()
        values = _per_tensor(name, ts, value, 4)
        for i, (t, a, b, v) in enumerate(zip(ts, t1, t2, values)):
            v = v.item() if isinstance(v, Tensor) else v
            if inplace:
                getattr(t, op + "_")(a, b, value=v)
            else:
                values[i] = getattr(t, op)(a, b, value=v)
        return self if inplace else tuple(values)

    return fn


def _lerp(name: str, op: str, inplace: bool) -> Callable:
    def fn(self, tensors1, *args, **kwargs):
        ts = _tensors(name, self)
        ends = _tensors(name, tensors1, "tensors1", 2)
        _nonempty(ts)
        _same_length(ts, ends)
        given = [kwargs.pop(k) for k in ("weight", "weights") if k in kwargs]
        if kwargs or len(args) + len(given) != 1:
            raise TypeError(f"{name}() takes self, tensors1 and one weight (a number, a list of numbers or a list of "
                            f"tensors); got {len(args) + len(given)} and {sorted(kwargs) or 'no other'} keywords")
        weight = (args or given)[0]
        if isinstance(weight, Tensor) and weight.ndim != 0:
            raise TypeError(f"{name}(): a tensor weight must be a 0-d tensor, got one of shape {list(weight.shape)} "
                            "(a list of tensors gives one weight per tensor)")
        out = _apply(ts, inplace, op, ends, _per_tensor(name, ts, weight, 3))
        return self if inplace else out

    return fn


def _norm(name: str, op: str, inplace: bool) -> Callable:
    def fn(self, ord=2, dtype=None):  # noqa: A002 - torch's name
        ts = _tensors(name, self)
        _nonempty(ts)
        if op == "norm":
            return tuple(vector_norm(t, ord, dtype=dtype) for t in ts)
        out = []
        for t in ts:  # (powsum: the sum of |x| ** ord, computed in ``dtype`` when given)
            if not (t.dtype.is_floating_point or t.dtype.is_complex):
                raise NotImplementedError(f'"powsum" not implemented for {t.dtype.name!r}')
            a = t.abs() if dtype is None else t.abs().to(dtype)
            out.append(a.pow(ord).sum())
        return tuple(out)

    return fn


def _max(name: str, op: str, inplace: bool) -> Callable:
    def fn(self):
        ts = _tensors(name, self)
        _nonempty(ts)
        for t in ts:
            if t.numel() == 0:
                raise RuntimeError(f"{name} cannot compute the maximum of an empty tensor; max over zero elements is "
                                   "undefined.")
        return tuple(t.max() for t in ts)

    return fn


def _mm(name: str, op: str, inplace: bool) -> Callable:
    def fn(self, mat2):
        ts, ms = _tensors(name, self), _tensors(name, mat2, "mat2", 2)
        _nonempty(ts)
        _same_length(ts, ms)
        return tuple(a.mm(b) for a, b in zip(ts, ms))

    return fn


def _clone(name: str, op: str, inplace: bool) -> Callable:
    def fn(self, *, memory_format=None):
        ts = _tensors(name, self)
        _nonempty(ts)
        return tuple(t.clone(memory_format=memory_format) for t in ts)

    return fn


def _copy(name: str, op: str, inplace: bool) -> Callable:
    def fn(self, src, non_blocking: bool = False):
        ts, srcs = _tensors(name, self), _tensors(name, src, "src", 2)
        _nonempty(ts)
        _same_length(ts, srcs)
        for t, s in zip(ts, srcs):
            t.copy_(s, non_blocking)
        return self

    return fn


def _zero(name: str, op: str, inplace: bool) -> Callable:
    return _unary(name, "zero", True)


_UNARY_OPS = ("abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1", "floor", "frac",
              "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal", "round", "rsqrt", "sigmoid", "sign",
              "sin", "sinh", "sqrt", "tan", "tanh", "trunc")
_BINARY_OPS = ("add", "sub", "mul", "div", "pow", "clamp_min", "clamp_max", "maximum", "minimum")

#: (torch's name less ``_foreach_``, the per-tensor op: a Tensor method, whether an in-place ``_`` form exists too,
#: the maker of the function from (its full name, the op, in place?))
TABLE: tuple[tuple[str, str, bool, Callable], ...] = (
    *((op, op, True, _unary) for op in _UNARY_OPS),
    *((op, op, True, _binary) for op in _BINARY_OPS),
    ("addcdiv", "addcdiv", True, _pointwise),
    ("addcmul", "addcmul", True, _pointwise),
    ("lerp", "lerp", True, _lerp),
    ("norm", "norm", False, _norm),
    ("powsum", "powsum", False, _norm),
    ("max", "max", False, _max),
    ("mm", "mm", False, _mm),
    ("clone", "clone", False, _clone),
)
#: the in-place-only ones (no out-of-place form in torch): name -> maker
_INPLACE_ONLY: dict[str, Callable] = {"copy_": _copy, "zero_": _zero}


def _doc(name: str, op: str, inplace: bool) -> str:
    what = f"``t.{op}_(...)``" if inplace else f"``t.{op}(...)``"
    back = "returns the list given" if inplace else "returns a tuple of the results"
    return (f"torch.{name}: {what} for each tensor ``t`` of the list ({back}); see :mod:`tensorwire.foreach` for "
            "the operands it takes.")


def _build() -> dict[str, Callable]:
    out: dict[str, Callable] = {}
    forms = [(f"_foreach_{n}", op, False, make) for n, op, _, make in TABLE]
    forms += [(f"_foreach_{n}_", op, True, make) for n, op, has_inplace, make in TABLE if has_inplace]
    forms += [(f"_foreach_{n}", n.rstrip("_"), True, make) for n, make in _INPLACE_ONLY.items()]
    for name, op, inplace, make in forms:
        fn = make(name, op, inplace)
        fn.__name__ = fn.__qualname__ = name
        fn.__module__ = __name__
        fn.__doc__ = _doc(name, op, inplace)
        out[name] = fn
    return dict(sorted(out.items()))


#: every ``_foreach_*`` function, by name (each also a global of this module)
FUNCTIONS: dict[str, Callable] = _build()
globals().update(FUNCTIONS)
__all__ = ["FUNCTIONS", "TABLE", *FUNCTIONS]
