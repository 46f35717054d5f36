"""C for the CPU: one function per kernel, the grid as an OpenMP loop.

Loops carry ``#pragma omp simd`` and glibc's vector math (libmvec) is declared for every function used, so gcc
vectorises calls to ``expf``/``sinf``/... without ``-ffast-math``: IEEE semantics (NaN, infinities, signed zeros)
stay, at up to 4 ulp of error in those functions. A kernel runs on one thread until its work (elements times a
rough cost per element) pays for an OpenMP region (~2 us here).
"""

from __future__ import annotations

from . import ir
from .render import CStyleRenderer

#: below this much work (elements x cost per element) a kernel runs on one thread
PARALLEL_WORK = 65536
#: the math functions glibc's libmvec vectorises (declared SIMD-callable in every source)
VECTOR_MATH = ("exp", "log", "log1p", "expm1", "sin", "cos", "tan", "tanh", "erf", "asin", "acos", "atan", "sinh",
               "cosh", "pow", "atan2")


def _simd_decls() -> str:
    out = ["#define TW_VEC __attribute__((simd(\"notinbranch\")))"]
    for f in VECTOR_MATH:
        fa, da = ("float, float", "double, double") if f in ("pow", "atan2") else ("float", "double")
        out.append(f"TW_VEC float {f}f({fa}); TW_VEC double {f}({da});")
    return "\n".join(out) + "\n"


def _cost(stmts) -> int:
    """A rough cost per work item: 1 per statement, 8 per transcendental call, times the trip count of loops."""
    c = 0

    def expr_cost(x, seen):
        if id(x) in seen:
            return 0
        seen.add(id(x))
        own = 8 if x.op == "alu" and x.arg in VECTOR_MATH else 1
        return own + sum(expr_cost(s, seen) for s in x.src)
    for s in stmts:
        if isinstance(s, ir.Loop):
            trip = s.stop.arg - s.start.arg if s.stop.op == "const" and s.start.op == "const" else 64
            c += max(trip, 1) * max(_cost(s.body), 1)
        elif isinstance(s, ir.If):
            c += _cost(s.body) + _cost(s.orelse)
        else:
            c += sum(expr_cost(x, set()) for x in vars(s).values() if isinstance(x, ir.X))
    return c


class CRenderer(CStyleRenderer):
    target = "c"
    headers = "#include <math.h>\n#include <string.h>\n" + _simd_decls()
    macros = r"""#define TW_FN static inline
#define TW_I64 long long
#define TW_U64 unsigned long long
#define TW_U64C(x) x##ull
#define TW_SQRT sqrt
#define TW_FLOOR floor
static inline unsigned int TW_AS_UINT(float f) { unsigned int u; memcpy(&u, &f, 4); return u; }
static inline float TW_AS_FLOAT(unsigned int u) { float f; memcpy(&f, &u, 4); return f; }
"""

    def loop_pragma(self, loop: ir.Loop, ind: str) -> list[str]:
        if loop.reductions:
            ops = {"add": "+", "mul": "*", "max": "max", "min": "min", "or": "|", "and": "&"}
            return [f"{ind}#pragma omp simd " + " ".join(f"reduction({ops[op]}:{name})"
                                                        for name, op in loop.reductions)]
        return [f"{ind}#pragma omp simd"] if loop.independent else []

    def wrap(self, k: ir.Kernel, body: list[str]) -> str:
        if k.local:
            raise ValueError(f"kernel {k.name} needs work groups, which the C target does not have (the CPU's "
                             "lowering options never ask for them)")
        sig = f"void {k.name}({', '.join(self.params(k))})"
        if k.grid <= 1:
            return "\n".join([sig + " {", f"  const {self.index_type} gid = 0;", *body, "}"])
        par = "parallel for" + ("" if k.heavy_items or k.can_raise else " simd")
        cond = "" if k.grid * _cost(k.body) >= PARALLEL_WORK else " if(0)"
        # items that each loop long (a reduction's chunks, rows) are handed out in ~64 pieces as threads ask for
        # them: a core that another process takes for a while then costs the kernel half that time, not all of it
        sched = f"dynamic, {max(1, k.grid // 64)}" if k.heavy_items else "static"
        return "\n".join([sig + " {", f"  #pragma omp {par} schedule({sched}){cond}",
                          f"  for ({self.index_type} gid = 0; gid < {k.grid}; gid++) {{", *body, "  }", "}"])
