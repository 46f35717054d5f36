"""Module-level functions: ``tw.cat``, ``tw.stack``, ``tw.where`` (from :mod:`tensorwire.combine`), ``tw.einsum``,
and ``tw.exp(x)``-style forms of every tensor method."""

from __future__ import annotations

import builtins
import string

from tensorwire.protocol import dtypes
from tensorwire.protocol.errors import ShapeError
from tensorwire.protocol.ops import OPS

from . import _install
from .combine import (  # noqa: F401 - given here as tw.<name>
    _first_tensor,
    arange_like,
    cat,
    concat,
    concatenate,
    hstack,
    stack,
    vstack,
    where,
    write_out,
)
from .context import current_session
from .tensor import Tensor, device_name
from .tensor import device as _device


def matmul(input: Tensor, other: Tensor, *, out=None) -> Tensor:  # noqa: A002
    return write_out(out, input.matmul(other))


def _sublist_equation(args: tuple) -> tuple[str, tuple]:
    """The equation and operands of einsum's sublist form, ``einsum(a, [0, 1], b, [1, 2], [0, 2])``: each operand
    followed by its dims' labels (ints in [0, 52), or ``...``), then the output's labels if given."""
    def letters(sub) -> str:
        out = []
        for i in sub:
            if i is Ellipsis:
                out.append("...")
            elif isinstance(i, int) and 0 <= i < 52:
                out.append(string.ascii_uppercase[i] if i < 26 else string.ascii_lowercase[i - 26])
            else:
                raise ValueError(f"einsum(): subscript in subscript list is not within the valid range [0, 52), "
                                 f"got {i!r}")
        return "".join(out)

    operands = args[0::2][:len(args) // 2]
    eq = ",".join(letters(sub) for sub in args[1::2][:len(args) // 2])
    if len(args) % 2:
        eq += "->" + letters(args[-1])
    return eq, tuple(operands)


def einsum(equation: str, *operands) -> Tensor:
    """Einstein summation, decomposed into diagonal/permute/reshape/sum/matmul. Also torch's sublist form:
    ``einsum(a, [0, 1], b, [1, 2], [0, 2])``."""
    if not isinstance(equation, str):
        equation, operands = _sublist_equation((equation, *operands))
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    eq = equation.replace(" ", "")
    if "->" in eq:
        lhs, out = eq.split("->")
    else:
        lhs = eq
        counts = {}
        for c in lhs.replace(",", ""):
            counts[c] = counts.get(c, 0) + 1
        out = ("..." if "..." in lhs else "") + "".join(sorted(c for c, n in counts.items() if n == 1 and c != "."))
    specs = lhs.split(",")
    if len(specs) != len(operands):
        raise ValueError(f"einsum(): {len(specs)} operand specs for {len(operands)} operands")
    # ellipsis: give the broadcast dims fresh letters
    if "..." in eq:
        free = [c for c in string.ascii_letters if c not in eq]
        nell = builtins.max(op.ndim - (len(sp) - 3) for sp, op in zip(specs, operands) if "..." in sp)
        ell = "".join(free[:nell])
        specs = [sp.replace("...", ell[nell - (op.ndim - (len(sp) - 3)):]) if "..." in sp else sp
                 for sp, op in zip(specs, operands)]
        out = out.replace("...", ell)
    operands = list(operands)
    for k, (sp, op) in enumerate(zip(specs, operands)):
        if len(sp) != op.ndim:
            raise ShapeError(f"einsum(): the number of subscripts in the equation ({len(sp)}) does not match "
                             f"the number of dimensions ({op.ndim}) of an operand")
        while len(set(sp)) != len(sp):  # a repeated subscript ("ii->i", "ii"): take that diagonal
            c = next(ch for ch in sp if sp.count(ch) > 1)
            i = sp.index(c)
            j = sp.index(c, i + 1)
            if op.shape[i] != op.shape[j]:
                raise ShapeError(f"einsum(): subscript {c} is repeated for operand {k} but the sizes don't "
                                 f"match, {op.shape[i]} != {op.shape[j]}")
            op = op.diagonal(0, i, j)
            sp = "".join(ch for n, ch in enumerate(sp) if n not in (i, j)) + c
        specs[k], operands[k] = sp, op
    cur, cur_spec = operands[0], specs[0]
    for k in range(1, len(operands)):
        later = set(out).union(*[set(s) for s in specs[k + 1:]])
        cur, cur_spec = _contract(cur, cur_spec, operands[k], specs[k], later)
    # final: sum what is not in the output, then permute
    drop = [i for i, c in enumerate(cur_spec) if c not in out]
    if drop:
        cur = cur.sum(dim=tuple(drop))
        cur_spec = "".join(c for c in cur_spec if c in out)
    if cur_spec != out:
        cur = cur.permute(*[cur_spec.index(c) for c in out])
    return cur


def _contract(a: Tensor, sa: str, b: Tensor, sb: str, keep: set):
    # sum out dims present in only one operand and not needed later
    def presum(t, s, other):
        drop = [i for i, c in enumerate(s) if c not in other and c not in keep]
        if drop:
            t = t.sum(dim=tuple(drop))
            s = "".join(c for c in s if c not in {s[i] for i in drop})
        return t, s

    a, sa = presum(a, sa, sb)
    b, sb = presum(b, sb, sa)
    batch = [c for c in sa if c in sb and c in keep]
    contr = [c for c in sa if c in sb and c not in keep]
    left = [c for c in sa if c not in sb]
    right = [c for c in sb if c not in sa]
    size = {**{c: a.shape[i] for i, c in enumerate(sa)}, **{c: b.shape[i] for i, c in enumerate(sb)}}
    for c in batch + contr:
        if a.shape[sa.index(c)] != b.shape[sb.index(c)] and 1 not in (a.shape[sa.index(c)], b.shape[sb.index(c)]):
            raise ShapeError(f"einsum(): subscript {c} has size {a.shape[sa.index(c)]} in one operand and "
                             f"{b.shape[sb.index(c)]} in another")
        size[c] = builtins.max(a.shape[sa.index(c)], b.shape[sb.index(c)])
    pa = a.permute(*[sa.index(c) for c in batch + left + contr])
    pb = b.permute(*[sb.index(c) for c in batch + contr + right])

    def prod(cs):
        n = 1
        for c in cs:
            n *= size[c]
        return n

    bs = [size[c] for c in batch]
    # a size-1 dim broadcasts against its partner's size (batch and contracted dims alike, as torch.tensordot)
    pa = pa.expand(*bs, *[size[c] for c in left + contr])
    pb = pb.expand(*bs, *[size[c] for c in contr + right])
    ma = pa.reshape(*bs, prod(left), prod(contr))
    mb = pb.reshape(*bs, prod(contr), prod(right))
    r = ma.matmul(mb).reshape(*bs, *[size[c] for c in left], *[size[c] for c in right])
    return r, "".join(batch + left + right)


def tensordot(a: Tensor, b: Tensor, dims=2, out: Tensor | None = None) -> Tensor:
    """The contraction of ``a``'s dims ``dims[0]`` with ``b``'s ``dims[1]`` (an int ``d``: ``a``'s last ``d`` with
    ``b``'s first ``d``), as torch's; ``out``: written there."""
    letters = string.ascii_letters
    if isinstance(dims, int):
        if dims < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims}")
        if dims > builtins.min(a.ndim, b.ndim):
            raise RuntimeError(f"tensordot expects dims < ndim_a or ndim_b, but got dims={dims}")
        da = list(range(a.ndim - dims, a.ndim))
        db = list(range(dims))
    else:
        da, db = [list(x) if isinstance(x, (list, tuple)) else [x] for x in dims]
        da, db = [d % a.ndim for d in da], [d % b.ndim for d in db]
    sa = list(letters[: a.ndim])
    sb = list(letters[a.ndim: a.ndim + b.ndim])
    for i, j in zip(da, db):
        sb[j] = sa[i]
    kept = [c for i, c in enumerate(sa) if i not in da] + [c for j, c in enumerate(sb) if j not in db]
    return write_out(out, einsum(f"{''.join(sa)},{''.join(sb)}->{''.join(kept)}", a, b))


def synchronize(session=None) -> None:
    """Wait until all submitted work has run; raises any deferred error."""
    (session or current_session()).synchronize()


def cancel(session=None) -> None:
    """Cancel the work the session has submitted that the cluster has not finished (tensorwire's own; PyTorch has
    no equivalent).

    The batch running on each device stops between two steps (a kernel already running finishes first) and the
    queued ones never start; their results fail with :class:`tensorwire.Cancelled`, which the next sync point
    raises once (a ``.numpy()`` waiting in another thread raises it at once). Ops recorded but not yet shipped are
    not affected, nor is later work: the session stays usable. Callable from any thread, e.g. a watchdog; Ctrl-C
    during a wait does the same. Closing the session also stops its work.
    """
    (session or current_session()).cancel()


def devices(session=None) -> list[str]:
    """The cluster's devices, e.g. ``['cpu:0', 'cpu:1']``."""
    return (session or current_session()).devices()


def memory_stats(session=None) -> dict:
    """Memory per device: ``{"devices": {"cuda:0": {...}}, ...}`` with this session's live ``buffers`` and ``bytes``,
    the whole cluster's (``cluster_buffers``, ``cluster_bytes``), and the device's own figures where its backend
    keeps them: ``allocated_bytes`` (held by tensors) and ``reserved_bytes`` (held by the caching allocator,
    including freed blocks kept for reuse), as ``torch.cuda.memory_allocated``/``memory_reserved``, and
    ``total_bytes``."""
    return (session or current_session()).memory_stats()


def set_default_device(device) -> None:
    """Device for tensors created without ``device=`` in the current session."""
    s = current_session()
    s.default_device = s.check_device(device_name(device))


def get_default_device():
    return _device(current_session().default_device)


#: the default devices that ``with tw.device(...)`` blocks replaced, innermost last
_DEVICE_CONTEXTS: list = []


def _enter_device(self):
    """``with tw.device("cpu:1"):``, torch's device context: tensors created inside without ``device=`` go there
    (:func:`set_default_device`), and to the device before once the block ends."""
    _DEVICE_CONTEXTS.append(get_default_device())
    set_default_device(self)
    return self


def _exit_device(self, *exc) -> None:
    set_default_device(_DEVICE_CONTEXTS.pop())


_device.__enter__ = _enter_device
_device.__exit__ = _exit_device


def is_tensor(obj) -> bool:
    return isinstance(obj, Tensor)


def typename(obj) -> str:
    """A tensor's ``type()`` (``"torch.FloatTensor"``), else the object's qualified name (``"int"``,
    ``"tensorwire.nn.modules.linear.Linear"`` for the class), as torch's ``typename``."""
    if isinstance(obj, Tensor):
        return obj.type()
    module = getattr(obj, "__module__", "") or ""
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if qualname is None:
        module, qualname = obj.__class__.__module__ or "", obj.__class__.__qualname__
    return qualname if module in ("", "builtins") else f"{module}.{qualname}"



def result_type(a, b):
    """The dtype ``a op b`` produces (PyTorch's rules)."""
    ops = [(x.dtype, x.ndim) if isinstance(x, Tensor) else x for x in (a, b)]
    return dtypes.result_type(*ops)


def numel(t: Tensor) -> int:
    return t.numel()


#: the Tensor methods that are also functions (``tw.sum(x, 1)`` is ``x.sum(1)``): those written by hand, and every
#: method the op table declares (``OpDef.methods``: ``tw.asin``, ``tw.arcsin``)
_METHODS = (
    "exp2 log2 log10 rsqrt sigmoid relu round frac square clamp clip isfinite isposinf isneginf isclose allclose "
    "equal nan_to_num lerp neg negative pow float_power remainder fmod floor_divide div divide true_divide mul "
    "multiply add sub subtract sum nansum mean prod amax amin argmax argmin var std logsumexp all any "
    "count_nonzero cumsum cumprod norm reshape flatten unflatten squeeze unsqueeze transpose swapaxes swapdims "
    "permute t moveaxis movedim broadcast_to tile flip fliplr flipud roll chunk tensor_split unbind narrow "
    "select tril triu diagonal diag trace gather scatter scatter_add index_select index_add take_along_dim "
    "masked_fill masked_select nonzero softmax log_softmax clone detach bitwise_and bitwise_or bitwise_xor "
    "bitwise_not eq ne lt le gt ge dot inner outer mv mm bmm aminmax sort argsort msort topk kthvalue unique "
    "multinomial greater greater_equal less less_equal not_equal ravel numel is_nonzero is_same_size is_signed "
    "clamp_min clamp_max get_device index_fill index_put_ is_conj is_neg is_inference "
    # torch's in-place functions (``torch.relu_(x)`` is ``x.relu_()``)
    "abs_ acos_ acosh_ addmv_ arccos_ arccosh_ arcsin_ arcsinh_ arctan_ arctanh_ asin_ asinh_ atan_ atanh_ ceil_ "
    "clamp_ clamp_max_ clamp_min_ clip_ conj_physical_ cos_ cosh_ deg2rad_ detach_ erf_ erfc_ exp2_ exp_ expm1_ "
    "fill_ fix_ floor_ frac_ gcd_ i0_ lcm_ ldexp_ log10_ log1p_ log2_ log_ logit_ nan_to_num_ neg_ negative_ "
    "rad2deg_ reciprocal_ relu_ round_ rsqrt_ sigmoid_ sin_ sinc_ sinh_ sqrt_ square_ tan_ tanh_ trunc_ xlogy_"
).split() + [n for op in OPS.values() for n in op.methods]


def _method_fn(name: str):
    def fn(input, *args, **kwargs):  # noqa: A002
        if not isinstance(input, Tensor):
            other = next((a for a in args if isinstance(a, Tensor)), None)
            if other is None:
                raise TypeError(f"{name}(): argument 'input' must be a Tensor, not {type(input).__name__}")
            input = other._operand(input)
        out = kwargs.pop("out", None)
        return write_out(out, getattr(input, name)(*args, **kwargs))

    fn.__name__ = name
    fn.__qualname__ = name
    fn.__doc__ = getattr(Tensor, name).__doc__ or f"``tw.{name}(x, ...)`` is ``x.{name}(...)``."
    return fn


def split(tensor: Tensor, split_size_or_sections, dim: int = 0) -> tuple:
    """``tensor`` cut along ``dim`` into pieces of ``split_size_or_sections`` (an int: that many elements each, the
    last one shorter; a list: those sizes), as views (torch.split: ``tensor.split(...)``)."""
    return tensor.split(split_size_or_sections, dim)


def max(input, dim=None, keepdim=False, *, out=None):  # noqa: A001,A002
    return write_out(out, input.max(dim, keepdim))


def min(input, dim=None, keepdim=False, *, out=None):  # noqa: A001,A002
    return write_out(out, input.min(dim, keepdim))


#: ``tw.<name>`` for every Tensor method with a function: these, and those the modules that add methods to Tensor
#: register (client/_install.py: math_extras, array_extras, random_fills, linalg_legacy, complex_ops)
METHOD_FUNCTIONS = _install.FUNCTIONS
METHOD_FUNCTIONS.update({n: _method_fn(n) for n in _METHODS})
METHOD_FUNCTIONS["split"] = split  # (torch's own Python function: its parameter names, not the method's)
