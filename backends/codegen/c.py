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
        fa, da = ("float, float", "double, double") if ir.MATH[f] == 2 else ("float", "double")
        out.append(f"TW_VEC float {f}f({fa}); TW_VEC double {f}({da});")
    return "\n".join(out) + "\n"


def _cost(stmts) -> dict:
    """A rough cost per work item: 1 per statement, 8 per transcendental call, times the trip count of loops. A
    polynomial in the kernel's size parameters: ``{(names of the sizes multiplied): coefficient}`` (``()`` the
    constant term), since a loop's trip count may be a parameter (a shape-generic kernel's row length)."""
    c: dict = {}

    def add(poly: dict, times: int = 1, by: tuple = ()) -> None:
        for k, v in poly.items():
            key = tuple(sorted(k + by))
            c[key] = c.get(key, 0) + v * times

    def expr_cost(x, seen):
        if id(x) in seen:
            return 0
        seen.add(id(x))
        own = 8 if x.op == "alu" and x.arg in VECTOR_MATH else 1
        return own + sum(expr_cost(s, seen) for s in x.src)
    for s in stmts:
        if isinstance(s, ir.Loop):
            body = _cost(s.body) or {(): 1}
            if s.stop.op == "const" and s.start.op == "const":
                add(body, max(s.stop.arg - s.start.arg, 1))
            elif s.stop.size is not None and s.start.op == "const" and s.start.arg == 0:
                add(body, 1, (s.stop.arg,))  # a size parameter's trips
            else:
                add(body, 64)
        elif isinstance(s, ir.If):
            add(_cost(s.body))
            add(_cost(s.orelse))
        else:
            add({(): sum(expr_cost(x, set()) for x in vars(s).values() if isinstance(x, ir.X))})
    return {k: v for k, v in c.items() if v}


def _parallel_if(k: ir.Kernel) -> str:
    """The OpenMP ``if`` clause that keeps a kernel on one thread below :data:`PARALLEL_WORK` (items times their
    cost): decided here when the work is known, at the call when it depends on size parameters."""
    cost = _cost(k.body) or {(): 1}
    if not k.grid_var and len(cost) == 1 and () in cost:
        return "" if k.grid * cost[()] >= PARALLEL_WORK else " if(0)"
    terms = " + ".join("*".join([f"{v}ll", *names]) for names, v in sorted(cost.items()))
    return f" if({k.grid_var or f'{k.grid}ll'} * ({terms}) >= {PARALLEL_WORK}ll)"


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
        if k.grid <= 1 and not k.grid_var:
            return "\n".join([sig + " {", f"  const {self.index_type} gid = 0;", *body, "}"])
        par = "parallel for" + ("" if k.heavy_items or k.can_raise else " simd")
        # items that each loop long (a reduction's chunks, rows) are handed out in ~64 pieces as threads ask for
        # them: a core that another process takes for a while then costs the kernel half that time, not all of it
        if not k.heavy_items:
            sched = "static"
        elif k.grid_var:
            sched = f"dynamic, ({k.grid_var} >= 128 ? {k.grid_var} / 64 : 1)"
        else:
            sched = f"dynamic, {max(1, k.grid // 64)}"
        return "\n".join([sig + " {", f"  #pragma omp {par} schedule({sched}){_parallel_if(k)}",
                          f"  for ({self.index_type} gid = 0; gid < {self.grid(k)}; gid++) {{", *body, "  }", "}"])
