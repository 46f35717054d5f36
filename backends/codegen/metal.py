"""Metal Shading Language for Apple GPUs: one ``kernel`` function per kernel, one thread per grid index.

Buffers are ``device`` pointers bound in order (``[[buffer(0)]]`` ...), then the error slot, then each scalar
as a ``constant T&``; the thread's index is ``thread_position_in_grid``. The launcher may round the grid up,
so every kernel starts with ``if (gid >= GRID) return;``. Storage types are Metal's (``uchar``, ``char``,
``short``, ``int``, ``long``; 16-bit floats as ``ushort`` words converted by the shared preamble).

**Metal has no float64.** Rendering a kernel with a float64 buffer, scalar or expression (a float64 sum's
accumulator, ``arange``'s float64 arithmetic, ``randn``'s float64 Box-Muller ...) raises
:class:`~tensorwire.protocol.errors.DTypeError` naming the kernel; a Metal backend maps float64 elsewhere
before lowering (or declines the fragment).

Math spells ``metal::precise::`` so the precision does not depend on a compile option. Metal has no
``log1p``, ``expm1`` or ``erf``: :data:`PREAMBLE_MATH` defines float versions (within a few ulp of the
correctly rounded value). The random helpers are :data:`PREAMBLE_RNG_METAL`: ``rng_bits`` and ``rand_f32`` as
everywhere, ``randint`` computed in integers exactly as the float64 spelling rounds (so it matches the other
targets bit for bit); ``u53`` and ``randn`` return float64 and do not exist here.

The runtime must compile with fast math off (``MTLCompileOptions.mathMode = MTLMathModeSafe``, or
``fastMathEnabled = NO`` before macOS 15): the 16-bit float conversions, NaN checks and the floor-division
helpers depend on IEEE arithmetic that fast math may reassociate or assume away.
"""

from __future__ import annotations

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DTypeError

from . import ir
from .ir import X
from .render import PREAMBLE_HALF, RNG_BITS, CStyleRenderer

#: log1p, expm1 and erf for float (Metal has none of them)
PREAMBLE_MATH = r"""
TW_FN float tw_log1p(float x) {  /* Goldberg: log(u) * x / (u - 1) with u = 1 + x */
  float u = 1.0f + x;
  if (u == 1.0f) return x;
  if (isinf(u) && u > 0.0f) return u;
  return metal::precise::log(u) * (x / (u - 1.0f));
}
TW_FN float tw_expm1(float x) {  /* Kahan: (u - 1) * (x / log(u)) with u = exp(x) */
  float u = metal::precise::exp(x);
  if (u == 1.0f) return x;
  float um1 = u - 1.0f;
  if (um1 == -1.0f || isinf(u)) return um1;
  return um1 * (x / metal::precise::log(u));
}
TW_FN float tw_erf(float a) {  /* minimax approximations, below 1 ulp of error on [0, 0.9277] and beyond */
  float t = metal::fabs(a), s = a * a, r, u;
  if (t > 0.927734375f) {
    r = metal::fma(-1.72853470e-5f, t, 3.83197126e-4f);
    u = metal::fma(-3.88396438e-3f, t, 2.42546219e-2f);
    r = metal::fma(r, s, u);
    r = metal::fma(r, t, -1.06777877e-1f);
    r = metal::fma(r, t, -6.34846687e-1f);
    r = metal::fma(r, t, -1.28717512e-1f);
    r = metal::fma(r, t, -t);
    r = metal::copysign(1.0f - metal::precise::exp(r), a);
  } else {
    r = -5.96761703e-4f;
    r = metal::fma(r, s, 4.99119423e-3f);
    r = metal::fma(r, s, -2.67681349e-2f);
    r = metal::fma(r, s, 1.12819925e-1f);
    r = metal::fma(r, s, -3.76125336e-1f);
    r = metal::fma(r, s, 1.28379166e-1f);
    r = metal::fma(r, a, a);
  }
  return r;
}
"""

#: the random helpers without float64 (see the module doc); TW_CLZ64 / TW_MULHI64 are 64-bit clz and high product
PREAMBLE_RNG_METAL = RNG_BITS + r"""
TW_FN float tw_rand_f32(TW_I64 w, TW_I64 p) {
  return (float)(((TW_U64)w) >> (64 - p)) * (1.0f / (float)((TW_I64)1 << p));
}
TW_FN TW_I64 tw_randint(TW_I64 seed, TW_I64 counter, TW_I64 low, TW_I64 high) {
  /* low + floor(u53 * float64(high - low)), u53 = (w >> 11) * 2**-53, in integers: the range and the product
     are rounded to 53 significant bits (to nearest, ties to even) where float64 rounds them */
  TW_U64 m = ((TW_U64)tw_rng_bits(seed, counter)) >> 11, r = (TW_U64)high - (TW_U64)low;
  int e = 0;
  if (r >> 53) {
    int s = 11 - (int)TW_CLZ64(r);
    TW_U64 rem = r & ((TW_U64C(1) << s) - 1), half = TW_U64C(1) << (s - 1);
    r >>= s;
    e = s;
    if (rem > half || (rem == half && (r & 1))) r += 1;
    if (r >> 53) { r >>= 1; e += 1; }
  }
  TW_U64 hi = TW_MULHI64(m, r), lo = m * r, pm = lo;
  int len = hi ? 128 - (int)TW_CLZ64(hi) : (lo ? 64 - (int)TW_CLZ64(lo) : 0);
  if (len > 53) {
    int s = len - 53;
    TW_U64 rem = lo & ((TW_U64C(1) << s) - 1), half = TW_U64C(1) << (s - 1);
    pm = (lo >> s) | (hi << (64 - s));
    if (rem > half || (rem == half && (pm & 1))) pm += 1;
    if (pm >> 53) { pm >>= 1; s += 1; }
    e += s;
  }
  e -= 53;
  TW_I64 v = (TW_I64)(e >= 0 ? pm << e : (e > -64 ? pm >> -e : 0)) + low;
  return v < high - 1 ? v : high - 1;
}
"""

#: ALU math ops -> their Metal names (float only; the operand type picks the overload): the precise variant of
#: each, but where rounding cannot differ and where Metal has none (this preamble's own)
MATH = {**{op: f"metal::precise::{op}" for op in ir.MATH},
        **{op: f"metal::{op}" for op in ("floor", "ceil", "rint", "trunc", "fabs")},
        "log1p": "tw_log1p", "expm1": "tw_expm1", "erf": "tw_erf"}


class MetalRenderer(CStyleRenderer):
    target = "metal"
    storage = {D.bool_: "uchar", D.uint8: "uchar", D.int8: "char", D.int16: "short", D.int32: "int",
               D.int64: "long", D.float16: "ushort", D.bfloat16: "ushort", D.float32: "float"}
    index_type = "long"
    int64_suffix = "l"
    float_suffix = False
    math_names = MATH
    GLOBAL_ID = "(long)tid.x"
    LOCAL_ID = "(long)ltid.x"
    GROUP_ID = "(long)tgid.x"
    BARRIER = "threadgroup_barrier(mem_flags::mem_threadgroup)"
    GROUP_MEMORY = "threadgroup"
    headers = "#include <metal_stdlib>\nusing namespace metal;\n"
    macros = r"""#define TW_FN inline
#define TW_I64 long
#define TW_U64 ulong
#define TW_U64C(x) x##UL
#define TW_AS_UINT(x) as_type<uint>(x)
#define TW_AS_FLOAT(x) as_type<float>(x)
#define TW_CLZ64(x) clz(x)
#define TW_MULHI64(a, b) mulhi(a, b)
"""

    def preamble(self) -> list[str]:
        return [PREAMBLE_HALF, PREAMBLE_MATH, PREAMBLE_RNG_METAL]

    def reg(self, dt: D.DType) -> str:
        if dt is D.float64:
            raise DTypeError(f"Metal has no float64 (kernel {getattr(self, '_kernel_name', '?')})")
        return super().reg(dt)

    def const(self, x: X) -> str:
        v = x.arg
        if x.dtype.is_floating_point and x.dtype is not D.float64 and (v != v or v in (float("inf"), float("-inf"))):
            return "NAN" if v != v else ("INFINITY" if v > 0 else "(-INFINITY)")
        return super().const(x)

    def raise_error(self, code: int, detail: str) -> str:
        return f"{{ tw_err[0] = {code}; tw_err[1] = (long){detail}; }}"

    def params(self, k: ir.Kernel) -> list[str]:
        ps = [self.buf_param(b) + f" [[buffer({i})]]" for i, b in enumerate(k.bufs)]
        if k.can_raise:
            ps.append(self.err_param() + f" [[buffer({len(ps)})]]")
        ps += [f"constant {self.scalar_type(s.dtype)}& {s.name} [[buffer({len(ps) + i})]]"
               for i, s in enumerate(k.scalars)]
        ps.append("uint3 tid [[thread_position_in_grid]]")
        if k.local:
            ps += ["uint3 ltid [[thread_position_in_threadgroup]]", "uint3 tgid [[threadgroup_position_in_grid]]"]
        return ps

    def buf_param(self, b: ir.Buf) -> str:
        return f"device {'' if b.out else 'const '}{self.storage[b.dtype]}* {b.name}"

    def err_param(self) -> str:
        return "device long* tw_err"

    def kernel(self, k: ir.Kernel) -> str:
        self._kernel_name = k.name
        where = float64_use(k)
        if where:
            raise DTypeError(f"Metal has no float64: kernel {k.name} uses it ({where}); map float64 to another "
                             "device (or dtype) before lowering")
        return super().kernel(k)

    def qualifiers(self, k: ir.Kernel) -> str:
        return "kernel"


def float64_use(k: ir.Kernel) -> str | None:
    """Where kernel ``k`` uses float64 (a description), or None."""
    for b in k.bufs:
        if b.dtype is D.float64:
            return f"buffer {b.name}"
    for s in k.scalars:
        if s.dtype is D.float64:
            return f"scalar {s.name}"
    for a in k.locals:
        if a.dtype is D.float64:
            return f"threadgroup array {a.name}"
    seen: set = set()

    def expr(x: X) -> str | None:
        if x in seen:
            return None
        seen.add(x)
        if x.dtype is D.float64:
            return f"a float64 {x.op} {x.arg}" if x.op in ("alu", "fn", "var") else f"a float64 {x.op}"
        for s in x.src:
            got = expr(s)
            if got:
                return got
        return None

    def block(stmts) -> str | None:
        for s in stmts:
            if isinstance(s, ir.Let) and s.dtype is D.float64:
                return f"variable {s.name}"
            values = {ir.Let: ("value",), ir.Assign: ("value",), ir.Store: ("idx", "value"), ir.Loop: ("start", "stop"),
                      ir.If: ("cond",), ir.Raise: ("detail",), ir.Barrier: ()}[type(s)]
            for attr in values:
                got = expr(getattr(s, attr))
                if got:
                    return got
            for sub in (getattr(s, "body", None), getattr(s, "orelse", None)):
                got = sub and block(sub)
                if got:
                    return got
        return None

    return block(k.body)


__all__ = ["MetalRenderer", "PREAMBLE_MATH", "PREAMBLE_RNG_METAL", "float64_use"]
