"""The op table itself: :class:`OpDef`, the registry, lookup and shape inference, and the :func:`composite`
decorator every composite is registered with."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .. import dtypes as D
from ..errors import ProtocolError
from ..shapes import Shape

Meta = tuple[Shape, D.DType]
InferFn = Callable[[list[Meta], dict], Meta]


@dataclass
class OpDef:
    """One op: name, arity, attributes, inference and (for composites) decomposition."""

    name: str
    nin: int | None  # None: variadic (at least one)
    infer: InferFn
    decompose: Callable | None = None  # (g, *inputs: Value, attrs: dict) -> Value
    kind: str = "other"  # unary | binary | reduce | movement | creation | random | index | worker | other
    differentiable: bool = True
    doc: str = ""
    attrs: tuple[str, ...] = ()
    dynamic: tuple[str, ...] = ()  # attrs that may change between replays of one plan (values, seeds)
    #: the part of the dynamic attrs a plan still depends on, hashable (a slice's lengths, where its bounds are
    #: dynamic); it goes into the plan's key, and a replay's values are checked against the plan's inference
    dynamic_key: Callable[[dict], object] | None = None
    extra: dict = field(default_factory=dict)
    #: elementwise ops: the array-API function that computes the op, named alike in numpy and MLX (``np.arcsin`` and
    #: ``mx.arcsin`` for ``"arcsin"``); the CPU (numpy) and MPS (MLX) kernels and the conformance suite's float64
    #: reference are made from it unless a backend or the suite writes its own (integer division's zero check ...)
    array_fn: str | None = None
    #: the :class:`~tensorwire.Tensor` methods made from the op, name first then aliases (``("asin", "arcsin")``):
    #: ``x.asin()`` records the op, and each is also a function (``tw.asin(x)``)
    methods: tuple[str, ...] = ()
    #: what autocast does with the op's floating inputs on GPU device types (torch's CUDA list, also MPS's):
    #: ``"lower"``, ``"fp32"``, ``"fp32_opt_dtype"`` or ``"promote"`` (:mod:`tensorwire.amp.policy`)
    autocast: str | None = None
    #: the op's VJP rule, declared with it: ``rule(c) -> [gradient or None per input]`` of an
    #: :class:`tensorwire.autograd.vjp.Ctx` (a rule in ``autograd/vjp.py`` takes precedence)
    vjp: Callable | None = None

    @property
    def primitive(self) -> bool:
        return self.decompose is None


OPS: dict[str, OpDef] = {}


def register_op(op: OpDef, *, replace: bool = False) -> OpDef:
    """Add an op to the table (plugins: custom ops with their shape rule and decomposition)."""
    if op.name in OPS and not replace:
        raise ValueError(f"op {op.name!r} is already defined")
    OPS[op.name] = op
    return op


def get_op(name) -> OpDef:
    try:
        return OPS[name]
    except (KeyError, TypeError):
        raise ProtocolError(f"unknown op {name!r}") from None


_INFER_CACHE: dict = {}


def infer(name: str, metas: list[Meta], attrs: dict, attrs_key=None) -> Meta:
    """Shape and dtype of ``name`` applied to inputs with ``metas``; raises ShapeError/DTypeError.

    Results are memoised for ops without attributes, and for ops without dynamic attributes when the caller
    passes ``attrs_key``, the hashable form of ``attrs`` (:func:`tensorwire.protocol.graph.attrs_key`): recording
    ``x + y`` or ``x.reshape(...)`` in a loop infers once.
    """
    if not attrs:
        key = (name, D._default_float, *metas)  # results may depend on the default float dtype
    elif attrs_key is not None:
        try:  # (get_op's look-up, inline: every recorded node with attributes comes here)
            op = OPS.get(name)
        except TypeError:  # (an unhashable name from a peer: _infer says what is wrong)
            op = None
        if op is None or op.dynamic:
            return _infer(name, metas, attrs)
        key = (name, D._default_float, attrs_key, *metas)
    else:
        return _infer(name, metas, attrs)
    try:
        r = _INFER_CACHE.get(key)
    except TypeError:  # unhashable junk from a peer: validate the slow way
        r = key = None
    if r is not None:
        return r
    r = _infer(name, metas, attrs or {})
    if key is not None:
        if len(_INFER_CACHE) > 65536:
            _INFER_CACHE.clear()
        _INFER_CACHE[key] = r
    return r


def _infer(name: str, metas: list[Meta], attrs: dict) -> Meta:
    op = get_op(name)
    if op.nin is not None and len(metas) != op.nin:
        raise ProtocolError(f"op {name} takes {op.nin} inputs, got {len(metas)}")
    if op.nin is None and not metas:
        raise ProtocolError(f"op {name} needs at least one input")
    return op.infer(metas, attrs)


def composite(name: str, nin, infer_fn: InferFn, attrs: tuple[str, ...] = (), kind: str = "other",
              differentiable: bool = True, doc: str = ""):
    """Decorator registering a composite op whose decomposition is the decorated function."""
    def deco(fn):
        register_op(OpDef(name, nin, infer_fn, decompose=fn, kind=kind, differentiable=differentiable,
                          doc=doc or (fn.__doc__ or "").strip(), attrs=attrs))
        return fn
    return deco


def _scalar(g, v, dtype):
    """A 0-d constant of ``dtype`` in a decomposition."""
    return g.op("full", shape=[], dtype=dtype.name, value=v)


def _to_float(g, x):
    """``x`` cast to its float dtype (floats unchanged), in a decomposition."""
    fd = D.float_of(x.dtype)
    return x if x.dtype is fd else g.op("cast", x, dtype=fd.name)


def primitives() -> list[str]:
    """Names of the ops every backend must implement (``kind="worker"`` ops are the worker's own)."""
    return [n for n, op in OPS.items() if op.primitive and op.kind != "worker"]


def composites() -> list[str]:
    """Names of the ops that have a decomposition (backends may still run them natively)."""
    return [n for n, op in OPS.items() if not op.primitive]
