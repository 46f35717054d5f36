"""Renderers: the kernel IR as source code. One C-like base; each target overrides only its spelling.

:class:`CStyleRenderer` renders a :class:`~.ir.Kernel` as a function over a 1-D grid. Every distinct
subexpression becomes one ``const`` local (computed once), so the output reads as straight-line code.
16-bit floats live in ``float`` registers and are stored as 16-bit words; the conversions and the
round-to-nearest-even rounding are the portable helpers of :data:`PREAMBLE`, written once for every target.
Subclasses (``c.py``, ``opencl.py``, ``cuda.py``, ``hip.py``, ``metal.py``) set the type names, the kernel
signature, how a work item finds its index, and the math function names.
"""

from __future__ import annotations

import re

from tensorwire.protocol import dtypes as D

from . import ir
from .ir import X
from .rng_source import RANDN_C

_NARROW = (D.bool_, D.uint8, D.int8, D.int16)  # C promotes these to int: results are cast back

# Helpers every target gets, in C spelled with the target's macros: TW_FN (a device function), TW_AS_UINT /
# TW_AS_FLOAT (float <-> uint bits), TW_U64 / TW_I64 (64-bit integer types), TW_U64C (an unsigned 64-bit literal),
# TW_SQRT / TW_FLOOR (double math).
PREAMBLE_HALF = r"""
TW_FN float tw_f16_to_f32(unsigned short h) {
  unsigned int sign = ((unsigned int)h & 0x8000u) << 16, e = ((unsigned int)h >> 10) & 0x1fu;
  unsigned int m = (unsigned int)h & 0x3ffu;
  if (e == 0u) { float f = (float)m * 5.9604644775390625e-8f; return sign ? -f : f; }
  if (e == 31u) return TW_AS_FLOAT(sign | 0x7f800000u | (m << 13));
  return TW_AS_FLOAT(sign | ((e + 112u) << 23) | (m << 13));
}
TW_FN unsigned short tw_f32_to_f16(float f) {
  unsigned int x = TW_AS_UINT(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {
    if (ax == 0x7f800000u) return (unsigned short)(sign | 0x7c00u);
    unsigned int r = 0x7c00u + ((ax & 0x7fffffu) >> 13);
    return (unsigned short)(sign | (r == 0x7c00u ? 0x7c01u : r));
  }
  if (ax >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);
  if (ax < 0x38800000u) {  /* subnormal: round |f| * 2**24 to an integer, to nearest even */
    float s = TW_AS_FLOAT(ax) * 16777216.0f;
    s = (s + 12582912.0f) - 12582912.0f;
    return (unsigned short)(sign | (unsigned int)s);
  }
  ax += 0xfffu + ((ax >> 13) & 1u);
  return (unsigned short)(sign | ((ax - 0x38000000u) >> 13));
}
TW_FN float tw_bf16_to_f32(unsigned short h) { return TW_AS_FLOAT(((unsigned int)h) << 16); }
TW_FN unsigned short tw_f32_to_bf16(float f) {
  unsigned int x = TW_AS_UINT(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u);
  return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
TW_FN float tw_rnd_f16(float f) { return tw_f16_to_f32(tw_f32_to_f16(f)); }
TW_FN float tw_rnd_bf16(float f) { return tw_bf16_to_f32(tw_f32_to_bf16(f)); }
"""

#: splitmix64 of ``(seed, counter)``, the random ops' bit source on every target (as :mod:`tensorwire.protocol.random`)
RNG_BITS = r"""
TW_FN TW_I64 tw_rng_bits(TW_I64 seed, TW_I64 counter) {
  TW_U64 z = ((TW_U64)seed + 1) * TW_U64C(0x9E3779B97F4A7C15) + (TW_U64)counter;
  z = (z ^ (z >> 30)) * TW_U64C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * TW_U64C(0x94D049BB133111EB);
  return (TW_I64)(z ^ (z >> 31));
}"""

PREAMBLE_RNG = RNG_BITS + r"""
TW_FN double tw_u53(TW_I64 w) { return (double)(((TW_U64)w) >> 11) * 1.1102230246251565e-16; }
TW_FN float tw_rand_f32(TW_I64 w, TW_I64 p) {
  return (float)(((TW_U64)w) >> (64 - p)) * (1.0f / (float)((TW_I64)1 << p));
}
""" + RANDN_C + r"""TW_FN TW_I64 tw_randint(TW_I64 seed, TW_I64 counter, TW_I64 low, TW_I64 high) {
  TW_I64 v = (TW_I64)TW_FLOOR(tw_u53(tw_rng_bits(seed, counter)) * (double)(high - low)) + low;
  return v < high - 1 ? v : high - 1;
}
"""

# per-dtype helpers: {T} the register type, {F} the math-function suffix of this float type (C: "f" or "")
HELPER_TEMPLATES = {
    "fdiv_floor": r"""TW_FN {T} tw_fdiv_floor{S}({T} a, {T} b) {{
  if (b == 0) return a / b;
  {T} mod = fmod{F}(a, b), div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1;
  {T} fl;
  if (div != 0) {{ fl = floor{F}(div); if (div - fl > ({T})0.5) fl += 1; }}
  else fl = copysign{F}(({T})0, a / b);  /* numpy's sign of a zero quotient: -0.0 // 7.0 is -0.0 */
  return fl;
}}""",
    "fmod_py": r"""TW_FN {T} tw_fmod_py{S}({T} a, {T} b) {{
  {T} mod = fmod{F}(a, b);
  if (b == 0) return mod;
  if (mod != 0) {{ if ((b < 0) != (mod < 0)) mod += b; }} else mod = (b < 0) ? -({T})0 : ({T})0;
  return mod;
}}""",
    "idiv_floor": r"""TW_FN {T} tw_idiv_floor{S}({T} a, {T} b) {{
  if (b == 0) return 0;
  if (b == -1) return ({T})(0 - a);
  {T} q = ({T})(a / b);
  if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;
  return q;
}}""",
    "imod_py": r"""TW_FN {T} tw_imod_py{S}({T} a, {T} b) {{
  if (b == 0 || b == -1) return 0;
  {T} r = ({T})(a % b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}}""",
    "ipow": r"""TW_FN {T} tw_ipow{S}({T} a, {T} b) {{
  {T} r = 1;
  if (b < 0) return 0;
  while (b) {{ if (b & 1) r = ({T})(r * a); a = ({T})(a * a); b >>= 1; }}
  return r;
}}""",
    # torch's calc_gcd: |a| and |b| in the dtype (the minimum's wraps to itself), then Euclid with C's remainder (its
    # sign the dividend's: gcd(-128, 6) is -2 in int8, as torch's); the minimum by -1 never comes up, so nothing traps
    "igcd": r"""TW_FN {T} tw_igcd{S}({T} a, {T} b) {{
  if (a < 0) a = ({T})(0 - a);
  if (b < 0) b = ({T})(0 - b);
  while (a != 0) {{ {T} c = a; a = ({T})(b % a); b = c; }}
  return b;
}}""",
}


class CStyleRenderer:
    """The shared renderer. Subclasses override the class attributes and a few methods."""

    target = "cstyle"
    #: storage type of each dtype in memory
    storage = {D.bool_: "unsigned char", D.uint8: "unsigned char", D.int8: "signed char", D.int16: "short",
               D.int32: "int", D.int64: "long long", D.float16: "unsigned short", D.bfloat16: "unsigned short",
               D.float32: "float", D.float64: "double"}
    index_type = "long long"
    int64_suffix = "ll"
    macros = ""            # TW_FN, TW_AS_UINT, ... for the preamble
    headers = ""
    float_suffix = True    # C math: expf for float, exp for double; overloaded languages set False
    math_names: dict = {}  # renames (e.g. Metal)

    # types ---------------------------------------------------------------------------------------------
    def reg(self, dt: D.DType) -> str:
        """The type an expression of ``dt`` is held in (bools as int: comparisons give int, and a narrow temporary
        would cost vectorised code a pack and unpack per element)."""
        if dt is D.bool_:
            return "int"
        return "float" if dt in D.HALF else self.storage[dt]

    def scalar_type(self, dt: D.DType) -> str:
        """A kernel scalar parameter's type: the storage type (a bool arrives as one byte), 16-bit floats as float."""
        return "float" if dt in D.HALF else self.storage[dt]

    def suffix(self, dt: D.DType) -> str:
        return "f" if self.float_suffix and dt is not D.float64 else ""

    # expressions ---------------------------------------------------------------------------------------
    def const(self, x: X) -> str:
        v, dt = x.arg, x.dtype
        if dt is D.bool_:
            return "1" if v else "0"
        if not dt.is_floating_point:
            if dt is D.int64:
                sfx = self.int64_suffix
                return (f"{v}{sfx}" if v >= 0 else f"({v}{sfx})") if v != -(1 << 63) else \
                    f"(-9223372036854775807{sfx} - 1)"
            if dt is D.int32 and v == -(1 << 31):
                return "(-2147483647 - 1)"
            return str(v) if v >= 0 else f"({v})"
        f = "f" if dt is not D.float64 else ""
        if v != v:
            return f"(0.0{f} / 0.0{f})" if dt is D.float64 else "(0.0f / 0.0f)"
        if v in (float("inf"), float("-inf")):
            return f"({'-' if v < 0 else ''}1.0{f} / 0.0{f})"
        r = repr(float(v))
        if "e" not in r and "." not in r:
            r += ".0"
        return f"{r}{f}" if not r.startswith("-") else f"({r}{f})"

    def math(self, op: str, dt: D.DType, args: list[str]) -> str:
        name = {"rint": "rint", "fabs": "fabs"}.get(op, op)
        name = self.math_names.get(name, name)
        return f"{name}{self.suffix(dt)}({', '.join(args)})"

    BINOP = {"add": "+", "sub": "-", "mul": "*", "div": "/", "idiv": "/", "mod": "%", "lt": "<", "le": "<=",
             "gt": ">", "ge": ">=", "eq": "==", "ne": "!=", "and": "&", "or": "|", "xor": "^", "land": "&",
             "lor": "|", "shr": ">>", "shl": "<<"}

    def alu(self, x: X, a: list[str]) -> str:
        op, dt = x.arg, x.dtype
        if op in self.BINOP:
            code = f"({a[0]} {self.BINOP[op]} {a[1]})"
        elif op == "neg":
            code = f"(-{a[0]})"
        elif op == "not":
            code = f"(~{a[0]})"
        elif op == "lnot":
            code = f"(!{a[0]})"
        elif op in ("max", "min"):
            c = ">" if op == "max" else "<"
            if x.width > 1:
                code = self.select(f"({a[0]} {c} {a[1]})", a[0], a[1])
            else:
                code = f"({a[0]} {c} {a[1]} ? {a[0]} : {a[1]})"
        else:
            code = self.math(op, x.src[0].dtype if ir.MATH.get(op) == 2 else dt, a)
        if dt in _NARROW and op not in ir.COMPARE:
            code = f"(({self.storage[dt]}){code})"
        return self.round(code, dt)

    def round(self, code: str, dt: D.DType) -> str:
        if dt is D.float16:
            return f"tw_rnd_f16({code})"
        if dt is D.bfloat16:
            return f"tw_rnd_bf16({code})"
        return code

    def cast(self, x: X, a: str) -> str:
        src, dt = x.src[0].dtype, x.dtype
        if dt in D.HALF:
            if src is D.float32 or src in D.HALF:
                return self.round(a, dt)
            return self.round(f"((float){a})", dt)
        if dt is D.bool_:
            return f"({a} != 0)"
        return f"(({self.reg(dt)}){a})"

    def helper(self, x: X, a: list[str]) -> str:
        name = x.arg
        if name in HELPER_TEMPLATES:
            dt = x.src[0].dtype
            self._helpers.add((name, dt))
            return f"tw_{name}{self._hsuffix(dt)}({', '.join(a)})"
        if name in ("isnan", "isinf"):
            return f"({name}({a[0]}) != 0)"
        return f"tw_{name}({', '.join(a)})"

    def load(self, x: X, idx: str) -> str:
        if x.width > 1:
            return self.vload(x.arg, idx, x.width)
        code = f"{x.arg}[{idx}]"
        if x.arg in self._locals:  # a work group's array holds register values
            return code
        return self.load_value(x.dtype, code)

    def load_value(self, dt: D.DType, code: str) -> str:
        """The register value of ``code``, an element of ``dt`` as memory holds it (16-bit floats widened)."""
        if dt is D.float16:
            return f"tw_f16_to_f32({code})"
        if dt is D.bfloat16:
            return f"tw_bf16_to_f32({code})"
        return code

    def store_value(self, dt: D.DType, v: str) -> str:
        if dt is D.float16:
            return f"tw_f32_to_f16({v})"
        if dt is D.bfloat16:
            return f"tw_f32_to_bf16({v})"
        if dt in _NARROW:
            return f"({self.storage[dt]}){v}"
        return v

    def expr(self, x: X, memo: dict, lines: list[str], ind: str) -> str:
        if x.op == "const":
            return self.const(x)
        if x.op == "var":
            return x.arg
        got = memo.get(x)
        if got is not None:
            return got
        a = [self.expr(s, memo, lines, ind) for s in x.src]
        if x.op == "load":
            code = self.load(x, a[0])
        elif x.op == "alu":
            code = self.alu(x, a)
        elif x.op == "cast":
            code = self.cast(x, a[0])
        elif x.op == "where":
            code = self.select(*a) if x.width > 1 else f"({a[0]} ? {a[1]} : {a[2]})"
        elif x.op == "fn":
            code = self.helper(x, a)
        elif x.op == "bcast":
            code = self.broadcast(x, a[0])
        elif x.op == "lane":
            code = self.lane(a[0], x.arg)
            if x.src[0].op == "load":  # a lane of a memory vector: the storage element, as a scalar load gives it
                code = self.load_value(x.dtype, code)
        elif x.op == "pack":
            code = self.pack(self.memory_vector_type(x.dtype, x.width), [self.store_value(x.dtype, v) for v in a])
        else:  # pragma: no cover - the IR has no other ops
            raise ValueError(f"unknown expression op {x.op}")
        name = f"v{self._n}"
        self._n += 1
        lines.append(f"{ind}const {self.type_of(x)} {name} = {code};")
        memo[x] = name
        return name

    # statements -----------------------------------------------------------------------------------------
    def block(self, stmts: list, memo: dict, ind: str) -> list[str]:
        lines: list[str] = []
        for s in stmts:
            if isinstance(s, ir.Let):
                v = self.expr(s.value, memo, lines, ind)
                t = self.reg(s.dtype) if s.dtype else self.type_of(s.value)
                lines.append(f"{ind}{t} {s.name} = {v};")
            elif isinstance(s, ir.Assign):
                v = self.expr(s.value, memo, lines, ind)
                lines.append(f"{ind}{s.name} = {v};")
            elif isinstance(s, ir.Store):
                i = self.expr(s.idx, memo, lines, ind)
                v = self.expr(s.value, memo, lines, ind)
                if s.value.width > 1:
                    lines.append(f"{ind}{self.vstore(s.buf, i, v, s.value.width)};")
                elif s.buf in self._locals:
                    lines.append(f"{ind}{s.buf}[{i}] = {v};")
                else:
                    lines.append(f"{ind}{s.buf}[{i}] = {self.store_value(self._buf_dtype[s.buf], v)};")
            elif isinstance(s, ir.Loop):
                lo = self.expr(s.start, memo, lines, ind)
                hi = self.expr(s.stop, memo, lines, ind)
                lines += self.loop_pragma(s, ind)
                inc = f"{s.var}++" if s.step == 1 else f"{s.var} += {s.step}"
                lines.append(f"{ind}for ({self.index_type} {s.var} = {lo}; {s.var} < {hi}; {inc}) {{")
                lines += self.block(s.body, dict(memo), ind + "  ")
                lines.append(f"{ind}}}")
            elif isinstance(s, ir.If):
                c = self.expr(s.cond, memo, lines, ind)
                lines.append(f"{ind}if ({c}) {{")
                lines += self.block(s.body, dict(memo), ind + "  ")
                if s.orelse:
                    lines.append(f"{ind}}} else {{")
                    lines += self.block(s.orelse, dict(memo), ind + "  ")
                lines.append(f"{ind}}}")
            elif isinstance(s, ir.Barrier):
                lines.append(f"{ind}{self.barrier()};")
            elif isinstance(s, ir.Raise):
                d = self.expr(s.detail, memo, lines, ind)
                lines.append(f"{ind}{self.raise_error(s.code, d)}")
            else:  # pragma: no cover
                raise TypeError(f"unknown statement {s!r}")
        return lines

    def loop_pragma(self, loop: ir.Loop, ind: str) -> list[str]:
        return []

    # vectors (kernels lowered with ``Options.vector``; a target that has vector types overrides these) ----------
    def type_of(self, x: X) -> str:
        """The register type of the expression ``x``: a scalar's, or a vector's of ``x.width`` lanes (loads and packs:
        of the storage type, as memory holds them)."""
        if x.width == 1:
            return self.reg(x.dtype)
        if x.op in ("load", "pack"):
            return self.memory_vector_type(x.dtype, x.width)
        return self.vector_type(x.dtype, x.width)

    def vector_type(self, dt: D.DType, width: int) -> str:
        raise NotImplementedError(f"the {self.target} target has no vector types (its lowering sets no "
                                  "Options.vector)")

    def memory_vector_type(self, dt: D.DType, width: int) -> str:
        """The type of ``width`` elements of ``dt`` as memory holds them (16-bit floats as their bits): what
        :meth:`vload` gives and :meth:`vstore` takes."""
        raise NotImplementedError(f"the {self.target} target has no vector types")

    def vload(self, buf: str, idx: str, width: int) -> str:
        """The ``width`` contiguous elements of ``buf`` from ``idx`` on (the lanes of :mod:`.lanes` guarantee an
        address aligned to the whole vector; the CPU's vector loops only to one element)."""
        raise NotImplementedError(f"the {self.target} target has no vector loads")

    def pack(self, vtype: str, lanes: list[str]) -> str:
        """The vector of type ``vtype`` (a :meth:`memory_vector_type`) holding the storage values ``lanes``."""
        raise NotImplementedError(f"the {self.target} target has no vector types")

    def vstore(self, buf: str, idx: str, v: str, width: int) -> str:
        raise NotImplementedError(f"the {self.target} target has no vector stores")

    def select(self, c: str, a: str, b: str) -> str:
        """Lane by lane: ``a`` where the bool vector ``c`` holds, else ``b``."""
        raise NotImplementedError(f"the {self.target} target has no vector select")

    def broadcast(self, x: X, a: str) -> str:
        """The scalar ``a`` (of ``x.dtype``; a bool is 0 or 1) in every lane of ``x``'s vector type."""
        raise NotImplementedError(f"the {self.target} target has no vector types")

    def lane(self, a: str, i: int) -> str:
        raise NotImplementedError(f"the {self.target} target has no vector types")

    # work items and groups (kernels with ``Kernel.local``): a GPU target spells these, the others leave None ----
    #: the work item's index in the grid, in its group, and its group's index (expressions of the index type)
    GLOBAL_ID: str | None = None
    LOCAL_ID: str | None = None
    GROUP_ID: str | None = None
    #: the statement that waits for the whole group, and the qualifier of the group's shared arrays
    BARRIER: str | None = None
    GROUP_MEMORY: str | None = None

    def _spelling(self, name: str, what: str) -> str:
        s = getattr(self, name)
        if s is None:
            raise NotImplementedError(f"the {self.target} target has no {what}")
        return s

    def barrier(self) -> str:
        return self._spelling("BARRIER", "work-group barrier")

    def local_decl(self, a: ir.Local) -> str:
        return f"{self._spelling('GROUP_MEMORY', 'work-group memory')} {self.reg(a.dtype)} {a.name}[{a.size}];"

    def global_id(self) -> str:
        return self._spelling("GLOBAL_ID", "work-item index")

    def local_id(self) -> str:
        return self._spelling("LOCAL_ID", "work groups")

    def group_id(self) -> str:
        return self._spelling("GROUP_ID", "work groups")

    def ids(self, k: ir.Kernel) -> list[str]:
        """The kernel's first lines: ``gid`` (and ``lid``, ``grp`` and the group's arrays in a work-group kernel),
        then the early return of the items past the grid (a work-group kernel's grid is whole groups)."""
        t, sfx = self.index_type, self.int64_suffix
        if not k.local:
            return [f"  const {t} gid = {self.global_id()};", f"  if (gid >= {self.grid(k)}) return;"]
        assert k.grid % k.local == 0, (k.grid, k.local)
        return [f"  const {t} lid = {self.local_id()};", f"  const {t} grp = {self.group_id()};",
                f"  const {t} gid = grp * {k.local}{sfx} + lid;", *(f"  {self.local_decl(a)}" for a in k.locals)]

    def raise_error(self, code: int, detail: str) -> str:
        return f"{{ tw_err[0] = {code}; tw_err[1] = (long long){detail}; }}"

    def grid(self, k: ir.Kernel) -> str:
        """The number of work items, as the source spells it: the scalar that holds it (a shape-generic kernel,
        ``Kernel.grid_var``), else the constant."""
        return k.grid_var or f"{k.grid}{self.int64_suffix}"

    # kernels ----------------------------------------------------------------------------------------------
    def params(self, k: ir.Kernel) -> list[str]:
        ps = [self.buf_param(b) for b in k.bufs]
        if k.can_raise:
            ps.append(self.err_param())
        ps += [f"{self.scalar_type(s.dtype)} {s.name}" for s in k.scalars]
        return ps

    def buf_param(self, b: ir.Buf) -> str:
        const = "" if b.out else "const "
        return f"{const}{self.storage[b.dtype]}* restrict {b.name}"

    def err_param(self) -> str:
        return f"{self.storage[D.int64]}* restrict tw_err"

    def kernel(self, k: ir.Kernel) -> str:
        """The source of one kernel function (the preamble not included)."""
        self.begin(k)
        body = self.block(k.body, {}, "    ")
        return self.wrap(k, body)

    def begin(self, k: ir.Kernel) -> None:
        """Start rendering kernel ``k``: its names and buffers' dtypes (what :meth:`block` reads)."""
        self._n = 0
        self._buf_dtype = {b.name: b.dtype for b in k.bufs}
        self._locals = {a.name for a in k.locals}

    def qualifiers(self, k: ir.Kernel) -> str:
        """What a GPU kernel's signature has before ``void``: the target's entry-point qualifier, and attributes
        (a work-group kernel's size where the target declares it)."""
        raise NotImplementedError

    def wrap(self, k: ir.Kernel, body: list[str]) -> str:
        """Kernel ``k``'s source: its signature, its work-item ids (:meth:`ids`) and ``body``."""
        sig = f"{self.qualifiers(k)} void {k.name}({', '.join(self.params(k))})"
        return "\n".join([sig + " {", *self.ids(k), *body, "}"])

    def _hsuffix(self, dt: D.DType) -> str:
        return "_" + dt.name

    def preamble(self) -> list[str]:
        """The fixed helper groups, in order; :meth:`render` emits a group only when the source calls one of the
        ``tw_*`` functions it defines (a target overrides a group it spells differently)."""
        return [PREAMBLE_HALF, PREAMBLE_RNG]

    def render(self, kernels: list[ir.Kernel]) -> str:
        """One source file: headers, macros, the helpers used, then the kernels."""
        self._helpers = set()
        self._own = {}  # a target's own helper functions the kernels call, by name (see OpenCLRenderer.own_math)
        bodies = [self.kernel(k) for k in kernels]
        helpers = []
        for name, dt in sorted(self._helpers, key=lambda h: (h[0], h[1].name)):
            helpers.append(HELPER_TEMPLATES[name].format(T=self.reg(dt), S=self._hsuffix(dt), F=self.suffix(dt)))
        helpers += [self._own[name] for name in sorted(self._own)]
        return "\n".join([self.headers, self.macros, *_used_groups(self.preamble(), helpers + bodies), *helpers,
                          *bodies]) + "\n"


_DEFINES = re.compile(r"^TW_FN\b[^(\n]*?\b(tw_\w+)\(", re.M)


def _used_groups(groups: list[str], code: list[str]) -> list[str]:
    """The groups whose functions ``code`` calls (directly, or through a later group that is used)."""
    text = "\n".join(code)
    used = []
    for g in reversed(groups):  # a group may call an earlier one: scan the used later groups too
        if any(f"{name}(" in text for name in _DEFINES.findall(g)):
            used.append(g)
            text += g
    return used[::-1]
