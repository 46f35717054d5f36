"""Vector loops: a scalar element expression rewritten to compute ``width`` neighbouring elements at once.

The lowering builds an element's value as a scalar expression of one index variable (the element loop's, or a
reduction's loop variable). :func:`vectorize` rewrites it for the ``width`` elements ``var .. var + width - 1``:
loads whose index steps by one element with the variable become vector loads, subexpressions that do not depend
on it stay scalar (computed once, broadcast where a vector op reads them), and every other node becomes the same
op on vectors. It gives ``None`` where the vector form would not be the same computation or has no vector
spelling: a load that is not contiguous in the variable (a broadcast, a permute, a padded or strided view), the
variable used as a value (``arange``, random numbers, masks), dtypes other than float32 (and bools from float32
comparisons), casts, and ops without a lane-by-lane builtin (integer division, the ``tw_*`` helpers but
``isnan``/``isinf``). The caller then keeps its scalar loop. NaN semantics are unchanged: max/min/where stay
selects on comparisons and ``isnan``, never ``fmax``/``fmin``.
"""

from __future__ import annotations

from tensorwire.protocol import dtypes as D

from . import ir
from .ir import INDEX, X

#: ALU ops with an elementwise vector form (OpenCL C defines every math function of ``ir.MATH`` for vector types)
VECTOR_ALU = frozenset("add sub mul div max min neg lt le gt ge eq ne land lor lnot xor".split()) | frozenset(ir.MATH)
VECTOR_FN = frozenset({"isnan", "isinf"})
#: the dtypes a vector may hold
VECTOR_DTYPES = (D.float32, D.bool_)


class _Scalar(Exception):
    """The expression has no vector form."""


def uses(x: X, name: str, memo: dict | None = None) -> bool:
    """Whether ``x`` reads the variable ``name``."""
    memo = {} if memo is None else memo
    got = memo.get(x)
    if got is None:
        got = memo[x] = (x.arg == name) if x.op == "var" else any(uses(s, name, memo) for s in x.src)
    return got


def stride(idx: X, name: str, memo: dict | None = None) -> int | None:
    """How far the index ``idx`` moves when the variable ``name`` grows by one: 0 when ``idx`` does not read it,
    the coefficient when ``idx`` is a sum of products of it by constants, ``None`` otherwise (a division, a
    modulo, a select: the elements are not evenly spaced)."""
    memo = {} if memo is None else memo
    if not uses(idx, name, memo):
        return 0
    if idx.op == "var":
        return 1
    if idx.op == "alu" and idx.dtype is INDEX:
        a, b = idx.src
        if idx.arg == "add":
            sa, sb = stride(a, name, memo), stride(b, name, memo)
            return None if sa is None or sb is None else sa + sb
        if idx.arg == "mul":
            for x, k in ((a, b), (b, a)):
                if k.op == "const":
                    s = stride(x, name, memo)
                    return None if s is None else s * k.arg
    return None


def vectorize(x: X, name: str, width: int) -> X | None:
    """``x`` for the ``width`` values ``name .. name + width - 1`` of the variable ``name`` (a vector of
    ``width`` lanes), or ``None`` when it has no vector form (see the module's docstring)."""
    if x.dtype not in VECTOR_DTYPES:
        return None
    memo: dict = {}
    used: dict = {}

    def go(e: X) -> X:
        if not uses(e, name, used):
            return e  # the same in every lane: computed once, broadcast by the vector op that reads it
        got = memo.get(e)
        if got is not None:
            return got
        if e.dtype not in VECTOR_DTYPES:
            raise _Scalar(e)
        if e.op == "load":
            if e.dtype is not D.float32 or stride(e.src[0], name, used) != 1:
                raise _Scalar(e)
            v = ir.load(e.arg, e.src[0], e.dtype, width)
        elif e.op == "alu" and e.arg in VECTOR_ALU:
            v = ir.alu(e.arg, e.dtype, *_operands(e, go))
        elif e.op == "where":
            v = ir.where(*_operands(e, go))
        elif e.op == "fn" and e.arg in VECTOR_FN:
            v = ir.fn(e.arg, e.dtype, *_operands(e, go))
        else:  # the variable as a value, casts, helpers without a vector form
            raise _Scalar(e)
        memo[e] = v
        return v

    try:
        v = go(x)
    except _Scalar:
        return None
    return v if v.width == width else ir.bcast(v, width)


def _operands(e: X, go) -> list[X]:
    """The vector forms of ``e``'s operands; a scalar operand must have a dtype vectors hold (it is broadcast)."""
    out = [go(s) for s in e.src]
    if any(s.dtype not in VECTOR_DTYPES for s in out):
        raise _Scalar(e)
    return out
