"""C for the CPU: one function per kernel, the grid as an OpenMP loop."""

from __future__ import annotations

from . import ir
from .render import CStyleRenderer

#: below this many work items a kernel runs on one thread (an OpenMP region costs a few microseconds)
PARALLEL_MIN = 32768


class CRenderer(CStyleRenderer):
    target = "c"
    headers = "#include <math.h>\n#include <string.h>\n"
    macros = r"""#define TW_FN static inline
#define TW_I64 long long
#define TW_U64 unsigned long long
#define TW_U64C(x) x##ull
#define TW_SQRT sqrt
#define TW_LOG1P log1p
#define TW_COS cos
#define TW_FLOOR floor
static inline unsigned int TW_AS_UINT(float f) { unsigned int u; memcpy(&u, &f, 4); return u; }
static inline float TW_AS_FLOAT(unsigned int u) { float f; memcpy(&f, &u, 4); return f; }
"""

    def loop_pragma(self, loop: ir.Loop, ind: str) -> list[str]:
        if loop.reduce and loop.reduce_op in ("add", "mul"):
            op = "+" if loop.reduce_op == "add" else "*"
            return [f"{ind}#pragma omp simd reduction({op}:{loop.reduce})"]
        return []

    def wrap(self, k: ir.Kernel, body: list[str]) -> str:
        sig = f"void {k.name}({', '.join(self.params(k))})"
        if k.grid <= 1:
            return "\n".join([sig + " {", f"  const {self.index_type} gid = 0;", *body, "}"])
        par = "parallel for" + ("" if k.heavy_items or k.can_raise else " simd")
        cond = f" if({k.grid} >= {PARALLEL_MIN})" if not k.heavy_items else " if(" + str(k.grid) + " > 1)"
        return "\n".join([sig + " {", f"  #pragma omp {par} schedule(static){cond}",
                          f"  for ({self.index_type} gid = 0; gid < {k.grid}; gid++) {{", *body, "  }", "}"])
