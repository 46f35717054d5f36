"""The kernel IR: expressions, statements and kernels.

A :class:`Kernel` is a one-dimensional grid of ``grid`` work items; each runs ``body`` with the integer
variable ``gid`` bound to its index. The body is a short list of statements (:class:`Let`, :class:`Assign`,
:class:`Store`, :class:`Loop`, :class:`If`, :class:`Raise`) over expressions (:class:`X`). Buffers are flat
arrays of one dtype; scalars are runtime parameters (the dynamic attributes of a plan: seeds, fill values).

Expressions are hash-consed values: two structurally equal expressions compare and hash equal, so a
renderer can compute each distinct subexpression once. ``X.dtype`` is a tensorwire dtype; an expression
of dtype float16/bfloat16 is a float held in a register and rounded to that dtype (renderers spell the
rounding), which is how every op on 16-bit floats is "computed in float32, rounded as numpy rounds".

Expression ops (``X.op``):

* ``const`` (``arg`` = the value), ``var`` (``arg`` = a name: ``gid``, a loop variable, a scalar, a Let),
* ``load`` (``arg`` = buffer name, ``src`` = (flat index,)),
* ``alu`` (``arg`` = an ALU op name, see :data:`ALU`), ``cast`` (to ``dtype``), ``where`` (cond, a, b),
* ``fn`` (``arg`` = a preamble helper every renderer defines, see :data:`HELPERS`).

Vector values (``X.width`` > 1, on targets whose lowering sets ``Options.vector``; :mod:`.vectorize` makes them)
hold ``width`` lanes of ``dtype``: a ``load`` of width W reads the W contiguous elements from its index on, a
:class:`Store` of one writes them, ``alu``/``where``/``fn`` work lane by lane (their constructors broadcast any
scalar operand with ``bcast``), ``bcast`` (``src`` = (scalar,)) copies a scalar into every lane and ``lane``
(``arg`` = i, ``src`` = (vector,)) reads lane i. A bool vector's lanes are the target's vector truth values
(OpenCL: -1 and 0); vector values are float32 or bool only.

Memory vectors (GPU lanes, :mod:`.lanes`): a ``load`` of width W of any dtype read only through ``lane`` (each lane
then the value a scalar load gives), and ``pack`` (``src`` = W scalars of ``dtype``) as the value of a
:class:`Store` that writes them; both are held as the buffer's storage type, W lanes of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from tensorwire.protocol import dtypes as D

INDEX = D.int64  # the dtype of every index expression

#: math on floating operands: name (C's) -> arity. The one list of them: each renderer spells a name its own way
#: only where its language differs (``math_names``), and a binary one computes in its operands' dtype.
MATH = {
    "exp": 1, "log": 1, "log1p": 1, "expm1": 1, "sqrt": 1, "sin": 1, "cos": 1, "tan": 1, "tanh": 1,
    "erf": 1, "asin": 1, "acos": 1, "atan": 1, "sinh": 1, "cosh": 1, "floor": 1, "ceil": 1, "rint": 1,
    "trunc": 1, "fabs": 1, "pow": 2, "atan2": 2, "fmod": 2,
}
#: ALU ops: name -> arity. Comparisons and logical ops give bool.
ALU = {
    "add": 2, "sub": 2, "mul": 2, "div": 2, "idiv": 2, "mod": 2, "max": 2, "min": 2,
    "lt": 2, "le": 2, "gt": 2, "ge": 2, "eq": 2, "ne": 2, "and": 2, "or": 2, "xor": 2,
    "land": 2, "lor": 2, "shr": 2, "shl": 2,
    "neg": 1, "not": 1, "lnot": 1,
    **MATH,
}
COMPARE = frozenset({"lt", "le", "gt", "ge", "eq", "ne", "land", "lor", "lnot"})

#: helper functions every renderer's preamble defines: name -> (arity, result dtype or None = operand's)
HELPERS = {
    "isnan": 1, "isinf": 1,          # float -> bool
    "fdiv_floor": 2, "fmod_py": 2,   # numpy's floor_divide / remainder on floats
    "idiv_floor": 2, "imod_py": 2,   # the same on integers (the divisor is checked non-zero first)
    "ipow": 2,                       # integer power (exponent checked non-negative first)
    "igcd": 2,                       # torch's integer gcd: Euclid on |a| and |b| in the operands' dtype
    "rng_bits": 2,                   # SplitMix64(seed, counter) -> uint64 as int64 bits
    "u53": 1,                        # (bits >> 11) * 2**-53, float64
    "randn": 3,                      # Box-Muller of counters (seed, offset + 2i, offset + 2i + 1), float64
    "rand_f32": 2,                   # (bits >> (64 - p)) * 2**-p in float32, p given
    "randint": 4,                    # low + floor(u53 * (high - low)), clamped (seed, counter, low, high)
}


class X:
    """An expression. Create with the module's constructors (:func:`const`, :func:`alu` ...)."""

    __slots__ = ("op", "dtype", "src", "arg", "_hash", "lo", "hi", "width", "size")

    def __init__(self, op: str, dtype: D.DType, src: tuple = (), arg=None, lo=None, hi=None, width: int = 1):
        self.op, self.dtype, self.src, self.arg, self.width = op, dtype, src, arg, width
        self._hash = hash((op, dtype.name, src, arg if not isinstance(arg, float) else repr(arg), width))
        self.lo, self.hi = lo, hi  # bounds of an integer expression, when known
        self.size = None  # a size parameter's value in this lowering (see :func:`size`)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        if self is other:
            return True
        if not isinstance(other, X) or self._hash != other._hash:
            return False
        same_arg = (self.arg == other.arg and type(self.arg) is type(other.arg)) or (
            isinstance(self.arg, float) and repr(self.arg) == repr(other.arg))
        return (self.op == other.op and self.dtype is other.dtype and same_arg and self.width == other.width
                and self.src == other.src)

    def __repr__(self) -> str:
        inner = ", ".join(map(repr, self.src))
        lanes = f"x{self.width}" if self.width > 1 else ""
        return f"{self.op}:{self.dtype.name}{lanes}({self.arg!r}{', ' if inner else ''}{inner})"

    # index arithmetic with simplification (integer expressions only) ------------------------------
    def __add__(self, o):
        return iadd(self, o)

    def __mul__(self, o):
        return imul(self, o)

    def __floordiv__(self, o):
        return idiv(self, o)

    def __mod__(self, o):
        return imod(self, o)


# constructors ---------------------------------------------------------------------------------------

def const(value, dtype: D.DType) -> X:
    if dtype is D.bool_:
        value = bool(value)
    elif dtype.is_floating_point:
        value = float(dtype.np.type(value)) if dtype.itemsize <= 4 else float(value)
    else:
        value = int(value)
    b = int(value) if not dtype.is_floating_point else None
    return X("const", dtype, (), value, b, b)


def iconst(v: int) -> X:
    return const(v, INDEX)


def var(name: str, dtype: D.DType = INDEX, lo=None, hi=None, width: int = 1) -> X:
    return X("var", dtype, (), name, lo, hi, width)


def size(name: str, value: int) -> X:
    """A size that is a kernel parameter (the scalar ``name``): the kernel's source does not depend on it, so other
    sizes reuse the compiled kernel. Its bounds stay unknown (no simplification may depend on the value); ``value``,
    this lowering's size, only lets index arithmetic cancel it: ``(q * n + r) // n`` is ``q`` when ``0 <= r < n``."""
    x = X("var", INDEX, (), name)
    x.size = int(value)
    return x


def _factor(x: X) -> int | None:
    """The value of a constant factor of an index product: a constant's, or a size parameter's (:func:`size`)."""
    if x.op == "const":
        return x.arg
    return x.size


def load(buf: str, idx: X, dtype: D.DType, width: int = 1) -> X:
    """Element ``idx`` of ``buf``; with ``width`` > 1 the vector of elements ``idx .. idx + width - 1``."""
    return X("load", dtype, (idx,), buf, width=width)


def bcast(x: X, width: int) -> X:
    """The scalar ``x`` in each of ``width`` lanes."""
    assert x.width == 1, x
    return X("bcast", x.dtype, (x,), width=width)


def pack(lanes: list[X]) -> X:
    """The scalars ``lanes`` (one dtype) as one vector, the value of a :class:`Store` writing them at once."""
    assert len(lanes) > 1 and all(x.width == 1 and x.dtype is lanes[0].dtype for x in lanes), lanes
    return X("pack", lanes[0].dtype, tuple(lanes), width=len(lanes))


def lane(x: X, i: int) -> X:
    """Lane ``i`` of the vector ``x``."""
    assert 0 <= i < x.width, (x, i)
    return X("lane", x.dtype, (x,), i)


def _lanes(src: tuple) -> tuple[tuple, int]:
    """The operands of a lane-by-lane op and its width: scalars beside a vector are broadcast to its width."""
    w = max((s.width for s in src), default=1)
    if w == 1:
        return src, 1
    assert all(s.width in (1, w) for s in src), src
    return tuple(s if s.width == w else bcast(s, w) for s in src), w


def alu(op: str, dtype: D.DType, *src: X) -> X:
    assert ALU.get(op) == len(src), (op, src)
    src, w = _lanes(src)
    if w > 1:
        return X("alu", dtype, src, op, width=w)
    if all(s.op == "const" for s in src) and op in _FOLD and not dtype.is_floating_point:
        return const(_FOLD[op](*(s.arg for s in src)), dtype)
    if dtype is INDEX and op in ("add", "mul") and src[0].dtype is INDEX and src[1].dtype is INDEX:
        return iadd(*src) if op == "add" else imul(*src)  # the same int64 arithmetic, simplified
    if op in _BOUND_CMP and _known(src[0]) and _known(src[1]):  # an index comparison its bounds decide
        known = _BOUND_CMP[op](src[0], src[1])
        if known is not None:
            return const(known, dtype)
    if op in ("land", "lor"):
        for a, b in (src, src[::-1]):
            if a.op == "const":
                return (b if a.arg else a) if op == "land" else (a if a.arg else b)
    return X("alu", dtype, tuple(src), op)


def _decide(always: bool, never: bool):
    return True if always else (False if never else None)


_BOUND_CMP = {
    "lt": lambda a, b: _decide(a.hi < b.lo, a.lo >= b.hi),
    "le": lambda a, b: _decide(a.hi <= b.lo, a.lo > b.hi),
    "gt": lambda a, b: _decide(a.lo > b.hi, a.hi <= b.lo),
    "ge": lambda a, b: _decide(a.lo >= b.hi, a.hi < b.lo),
}


def cast(x: X, dtype: D.DType) -> X:
    if x.dtype is dtype:
        return x
    assert x.width == 1, f"no vector casts: {x!r} to {dtype.name}"
    if x.op == "const" and not (dtype.is_floating_point and dtype.itemsize == 2):
        return const(x.arg, dtype) if dtype is not D.bool_ else const(x.arg != 0, dtype)
    return X("cast", dtype, (x,))


def where(c: X, a: X, b: X) -> X:
    if c.op == "const":
        return a if c.arg else b
    if a == b:
        return a
    src, w = _lanes((c, a, b))
    return X("where", a.dtype, src, width=w)


def fn(name: str, dtype: D.DType, *src: X) -> X:
    assert HELPERS.get(name) == len(src), (name, src)
    src, w = _lanes(tuple(src))
    return X("fn", dtype, src, name, width=w)


_FOLD = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
         "max": max, "min": min, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
         "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b,
         "ne": lambda a, b: a != b, "land": lambda a, b: bool(a and b), "lor": lambda a, b: bool(a or b)}


# index arithmetic: folds constants and uses bounds to drop a needless divide or modulo --------------

def _as_index(o) -> X:
    return o if isinstance(o, X) else iconst(o)


def _known(x: X) -> bool:
    return x.lo is not None and x.hi is not None


def iadd(a, b) -> X:
    a, b = _as_index(a), _as_index(b)
    if b.op == "const" and b.arg == 0:
        return a
    if a.op == "const" and a.arg == 0:
        return b
    if a.op == "const" and b.op == "const":
        return iconst(a.arg + b.arg)
    lo = a.lo + b.lo if _known(a) and _known(b) else None
    hi = a.hi + b.hi if _known(a) and _known(b) else None
    return X("alu", INDEX, (a, b), "add", lo, hi)


def imul(a, b) -> X:
    a, b = _as_index(a), _as_index(b)
    if a.op == "const" or (a.size is not None and b.op != "const" and b.size is None):  # constants, sizes second
        a, b = b, a
    if b.op == "const":
        if b.arg == 0:
            return iconst(0)
        if b.arg == 1:
            return a
        if a.op == "const":
            return iconst(a.arg * b.arg)
        if _known(a):
            ends = (a.lo * b.arg, a.hi * b.arg)
            return X("alu", INDEX, (a, b), "mul", min(ends), max(ends))
    if b.size is not None and _known(a):  # a size parameter: bounds from its value in this lowering
        ends = (a.lo * b.size, a.hi * b.size)
        return X("alu", INDEX, (a, b), "mul", min(ends), max(ends))
    return X("alu", INDEX, (a, b), "mul")


def _divisor(d) -> tuple[int | None, X]:
    """A divisor's value in this lowering and its expression: a positive int, a constant, or a size parameter
    (:func:`size`; its value lets the rules below simplify, and the source divides by the parameter)."""
    if isinstance(d, X):
        return (d.arg if d.op == "const" else d.size), d
    return d, iconst(d)


def idiv(a, d) -> X:
    """a // d for a non-negative index a and a positive divisor d (an int, or a size parameter)."""
    a = _as_index(a)
    d, dx = _divisor(d)
    if d is None:  # (not a size: nothing known)
        return X("alu", INDEX, (a, dx), "idiv")
    if d == 1:
        return a
    if a.op == "const":
        return iconst(a.arg // d)
    if _known(a) and a.lo >= 0 and a.hi < d:
        return iconst(0)
    if a.op == "alu" and a.arg == "mul" and _factor(a.src[1]) is not None and _factor(a.src[1]) % d == 0:
        return imul(a.src[0], _factor(a.src[1]) // d)
    whole = _multiples(a, d)
    if whole is not None:  # (m*d*k + ... + x) // d with x >= 0: m*k + ... + x // d
        quotients, rest = whole
        acc = idiv(rest, dx)
        for q, k in quotients:
            acc = iadd(acc, imul(q, k // d))
        return acc
    if a.op == "alu" and a.arg == "add":  # (m*k + r) // (k*j) with 0 <= r < k: m // j
        for p, r in (a.src, a.src[::-1]):
            k = _factor(p.src[1]) if p.op == "alu" and p.arg == "mul" else None
            if k is not None and k > 0 and d % k == 0 and _known(r) and r.lo >= 0 and r.hi < k \
                    and _known(p.src[0]) and p.src[0].lo >= 0:
                # (by a parameter: (m*k) // d, free of r, so it leaves a loop over r)
                return idiv(p.src[0], d // k) if dx.op == "const" or d == k else idiv(p, dx)
    lo = a.lo // d if _known(a) and a.lo >= 0 else None
    hi = a.hi // d if _known(a) and a.lo >= 0 else None
    return X("alu", INDEX, (a, dx), "idiv", lo, hi)


def imod(a, m) -> X:
    """a % m for a non-negative index a and a positive modulus m (an int, or a size parameter)."""
    a = _as_index(a)
    m, mx = _divisor(m)
    if m is None:
        return X("alu", INDEX, (a, mx), "mod")
    if m == 1:
        return iconst(0)
    if a.op == "const":
        return iconst(a.arg % m)
    if _known(a) and a.lo >= 0 and a.hi < m:
        return a
    if a.op == "alu" and a.arg == "mul" and _factor(a.src[1]) is not None and _factor(a.src[1]) % m == 0:
        return iconst(0)
    whole = _multiples(a, m)
    if whole is not None:  # (m*k*q + ... + x) % m with x >= 0: x % m
        return imod(whole[1], mx)
    if a.op == "alu" and a.arg == "mod" and _factor(a.src[1]) is not None and _factor(a.src[1]) % m == 0:
        return imod(a.src[0], mx)  # (x % (m*k)) % m: x % m
    if a.op == "alu" and a.arg == "add":  # (q*k + r) % (k*j) with 0 <= r < k: (q*k) % (k*j) + r, r out of the mod
        for p, r in (a.src, a.src[::-1]):
            k = _factor(p.src[1]) if p.op == "alu" and p.arg == "mul" else None
            if k is not None and 0 < k < m and m % k == 0 and _known(r) and r.lo >= 0 and r.hi < k \
                    and _known(p.src[0]) and p.src[0].lo >= 0:
                return iadd(imod(p, mx), r)
    return X("alu", INDEX, (a, mx), "mod", 0, m - 1)


def _terms(a: X) -> list[X]:
    """The terms of an index sum."""
    if a.op == "alu" and a.arg == "add" and a.dtype is INDEX and a.width == 1:
        return _terms(a.src[0]) + _terms(a.src[1])
    return [a]


def _multiples(a: X, d: int):
    """``([(q, k), ...], x)`` when the index sum ``a`` is ``q*k + ... + x`` with each ``k`` a multiple of ``d`` and
    ``x`` non-negative, else None: then ``a // d`` is ``q*(k//d) + ... + x // d`` and ``a % d`` is ``x % d`` (exact
    for any ``q``; ``x >= 0`` keeps C's truncating division a floor)."""
    if a.op != "alu" or a.arg != "add":
        return None
    quotients, rest = [], iconst(0)
    for t in _terms(a):
        k = _factor(t.src[1]) if t.op == "alu" and t.arg == "mul" else None
        if k is not None and k % d == 0:
            quotients.append((t.src[0], k))
        else:
            rest = iadd(rest, t)
    if not quotients or not (rest.op == "const" or (_known(rest) and rest.lo >= 0)):
        return None
    return quotients, rest


# statements -------------------------------------------------------------------------------------------

@dataclass
class Let:
    """Declare ``name`` (of ``value.dtype``, or ``dtype`` when given) and set it."""
    name: str
    value: X
    dtype: D.DType | None = None


@dataclass
class Assign:
    name: str
    value: X


@dataclass
class Store:
    buf: str
    idx: X
    value: X


@dataclass
class Loop:
    """``for (var = start; var < stop; var += step) body``. ``reductions`` names the accumulators the loop only
    combines into, with their operator ("add", "mul", "max", "min", "or", "and"): the C renderer vectorises such
    loops."""
    var: str
    start: X
    stop: X
    body: list
    reductions: tuple = ()
    independent: bool = False  # iterations touch disjoint outputs (the C renderer marks it simd)
    step: int = 1


@dataclass
class If:
    cond: X
    body: list
    orelse: list = field(default_factory=list)


@dataclass
class Raise:
    """Record an error (code from :data:`ERRORS`, one int64 detail) in the kernel's error slot."""
    code: int
    detail: X


@dataclass
class Barrier:
    """Every item of the work group waits here until all have arrived, and their writes to the group's
    :class:`Local` arrays are visible (only in kernels with ``Kernel.local``; never under a condition that differs
    between the items of a group)."""


#: error codes a kernel can raise: code -> (error class name, message format with {detail})
ERRORS = {
    1: ("IndexOutOfRange", "index {detail} is out of bounds"),
    2: ("ZeroDivisionError", "integer division by zero"),
    3: ("ValueError", "Integers to negative integer powers are not allowed."),
}


@dataclass
class Buf:
    name: str
    dtype: D.DType
    size: int
    out: bool = False


@dataclass
class Scalar:
    name: str
    dtype: D.DType


@dataclass
class Local:
    """An array shared by the items of a work group (OpenCL ``__local``, CUDA ``__shared__``, Metal
    ``threadgroup``), held in the register type of ``dtype``; read with :func:`load` and written with
    :class:`Store` under its name."""
    name: str
    dtype: D.DType
    size: int


@dataclass
class Kernel:
    """A grid of ``grid`` work items running ``body`` (``gid`` = the item's index).

    With ``local`` > 0 the items run in work groups of exactly ``local`` items that cooperate through the
    ``locals`` arrays and :class:`Barrier` statements: ``grid`` is then a multiple of ``local``, every item runs
    the whole body (no item returns early), ``lid`` is the item's index in its group and ``grp`` the group's.
    Only GPU-like targets render such kernels."""

    name: str
    bufs: list[Buf]
    scalars: list[Scalar]
    grid: int
    body: list
    can_raise: bool = False
    #: a hint: each work item does a long serial loop (a reduction over a row), for the C renderer's schedule
    heavy_items: bool = False
    local: int = 0
    locals: list = field(default_factory=list)
    #: the scalar holding ``grid`` (a shape-generic kernel: the renderers bound the items by it, so the source does
    #: not depend on the size; the launch still covers ``grid`` items); None: ``grid`` is written into the source
    grid_var: str | None = None
    #: the values of its size parameters in this lowering (scalar name -> size; see :func:`bind_sizes`)
    sizes: dict = field(default_factory=dict)

    def signature(self) -> tuple:
        return (tuple((b.name, b.dtype.name, b.out) for b in self.bufs),
                tuple((s.name, s.dtype.name) for s in self.scalars))


GID = "gid"
LID = "lid"
GRP = "grp"


def gid(grid: int) -> X:
    return var(GID, INDEX, 0, max(grid - 1, 0))


def lid(local: int) -> X:
    """The item's index in its work group (kernels with ``Kernel.local``)."""
    return var(LID, INDEX, 0, max(local - 1, 0))


def grp(groups: int) -> X:
    """The work group's index (kernels with ``Kernel.local``)."""
    return var(GRP, INDEX, 0, max(groups - 1, 0))


def rebuild(e: X, src: list[X], same_range: bool = True) -> X:
    """``e`` over the new operands ``src`` (its index arithmetic simplified again). ``same_range``: the operands
    take the values the old ones took (sizes written in), so an index division by a non-constant keeps ``e``'s
    bounds; False where they may not (a variable replaced by another expression): its bounds are then unknown."""
    if e.op == "alu":
        if e.dtype is INDEX and e.arg in ("idiv", "mod") and ((src[1].op == "const" and src[1].arg > 0)
                                                               or src[1].size is not None):
            return idiv(src[0], src[1]) if e.arg == "idiv" else imod(src[0], src[1])
        if e.dtype is INDEX and e.arg in ("idiv", "mod"):
            return X("alu", INDEX, tuple(src), e.arg, *((e.lo, e.hi) if same_range else ()))
        return alu(e.arg, e.dtype, *src)
    if e.op == "load":
        return load(e.arg, src[0], e.dtype, e.width)
    if e.op == "cast":
        return cast(src[0], e.dtype)
    if e.op == "where":
        return where(*src)
    if e.op == "fn":
        return fn(e.arg, e.dtype, *src)
    if e.op == "bcast":
        return bcast(src[0], e.width)
    if e.op == "lane":
        return lane(src[0], e.arg)
    if e.op == "pack":
        return pack(src)
    raise ValueError(f"unknown expression op {e.op}")  # (the IR has no other ops)


# sizes bound back to constants -------------------------------------------------------------------------------------

def costly_sizes(k: Kernel) -> set[str]:
    """The size parameters of ``k`` whose values a C compiler gains from knowing: those that bound a loop (a row's
    or a reduction's length: a loop of a known trip count vectorises and unrolls better) and those it divides by (a
    division by a constant is a multiply; by a parameter, a real division that also blocks vectorisation). The grid,
    an item's element count or a stride gain nothing (see :func:`bind_sizes`)."""
    found: set[str] = set()

    def names(e: X, seen: set, all_sizes: bool) -> None:
        if id(e) in seen:
            return
        seen.add(id(e))
        if e.op == "var" and e.arg in k.sizes and all_sizes:
            found.add(e.arg)
        if e.op == "alu" and e.arg in ("idiv", "mod") and e.src[1].op == "var" and e.src[1].arg in k.sizes:
            found.add(e.src[1].arg)
        for s in e.src:
            names(s, seen, all_sizes)

    def block(stmts: list, seen: set) -> None:
        for s in stmts:
            for e in vars(s).values():
                if isinstance(e, X):
                    names(e, seen, False)
            if isinstance(s, Loop):
                names(s.start, set(), True)
                names(s.stop, set(), True)
                block(s.body, seen)
            elif isinstance(s, If):
                block(s.body, seen)
                block(s.orelse, seen)
    block(k.body, set())
    return found


def bind_sizes(k: Kernel, names: set[str] | None = None) -> Kernel:
    """Kernel ``k`` with its size parameters (``Kernel.sizes``; ``names``: only those) written in as constants: a
    kernel for this size only, its index arithmetic simplified again (a C compiler vectorises a loop of a known trip
    count better), the source a lowering without those size parameters would make. Its scalars are ``k``'s other
    ones, in the same order, renamed ``s0``, ``s1`` ...; the result's ``kept_scalars`` lists which of ``k``'s they
    are, so a launcher given ``k``'s values picks them."""
    bound_sizes = {n: v for n, v in k.sizes.items() if names is None or n in names}
    if not bound_sizes:
        return k
    kept = [s for s in k.scalars if s.name not in bound_sizes]
    rename = {s.name: f"s{i}" for i, s in enumerate(kept)}  # (named as a lowering without sizes names them)
    memo: dict = {}

    def x(e: X) -> X:
        got = memo.get(e)
        if got is not None:
            return got
        if e.op == "var":
            if e.arg in bound_sizes:
                out = iconst(e.size)
            elif e.arg in rename:
                out = var(rename[e.arg], e.dtype, e.lo, e.hi, e.width)
                out.size = e.size
            else:
                out = e
        elif e.op == "const":
            out = e
        else:
            out = rebuild(e, [x(s) for s in e.src])
        memo[e] = out
        return out

    def block(stmts: list) -> list:
        out = []
        for s in stmts:
            if isinstance(s, (Let, Assign)):
                out.append(replace(s, value=x(s.value)))
            elif isinstance(s, Store):
                out.append(replace(s, idx=x(s.idx), value=x(s.value)))
            elif isinstance(s, Loop):
                out.append(replace(s, start=x(s.start), stop=x(s.stop), body=block(s.body)))
            elif isinstance(s, If):
                out.append(replace(s, cond=x(s.cond), body=block(s.body), orelse=block(s.orelse)))
            elif isinstance(s, Raise):
                out.append(replace(s, detail=x(s.detail)))
            else:
                out.append(s)
        return out

    grid_var = rename.get(k.grid_var) if k.grid_var is not None else None
    bound = replace(k, scalars=[Scalar(rename[s.name], s.dtype) for s in kept], body=block(k.body), grid_var=grid_var,
                    sizes={rename[n]: v for n, v in k.sizes.items() if n not in bound_sizes})
    bound.errors = getattr(k, "errors", [])
    bound.kept_scalars = [i for i, s in enumerate(k.scalars) if s.name not in bound_sizes]
    return bound
