"""C for the CPU: one function per kernel, the grid as an OpenMP loop.

Loops carry ``#pragma omp simd`` and glibc's vector math (libmvec) is declared for every function used, so gcc
vectorises calls to ``expf``/``sinf``/... without ``-ffast-math``: IEEE semantics (NaN, infinities, signed zeros)
stay, at up to 4 ulp of error in those functions. A kernel runs on one thread until its work (items times a rough
cost per item) pays for an OpenMP region on a host the worker shares with its client (:data:`PARALLEL_WORK`).
"""

from __future__ import annotations

from tensorwire.protocol import dtypes as D

from . import ir
from .render import CStyleRenderer

#: below this much work (items x cost per item, :func:`_cost`; ~0.3 ms on one core) a kernel runs on one thread.
#: Where the host's other cores are idle an OpenMP region costs ~4-7 us more than the loop alone (its threads
#: sleep between regions: ``OMP_WAIT_POLICY=PASSIVE``, see cpu/compiled.py), about 2^18 units' time. But a worker
#: shares its host with the client that feeds it, and a training loop's client records the next step while the
#: worker runs this one: a region's sleeping thread then waits for the core the client holds, and the region waits
#: for it (a 262,144-float kernel beside a busy process, measured: 126 us alone, 271 us in a region). At 2^18,
#: makemore's transformer (kernels of 30k-130k items) ran ~1.1x slower on a 2-thread worker for its regions alone
#: (and as much again for BLAS's splits, backends/cpu/blas.py); at 2^24 neither costs, and the large kernels of
#: nanoGPT or a 16M-float chain still split (BENCHMARKS.md, session 41)
PARALLEL_WORK = 1 << 24
#: items a thread of a parallel kernel runs in one call of its items' function (threads take equal shares of runs)
PARALLEL_RUN = 1024
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
            span = _span(s)
            if span is not None:
                add(body, max(-(-span // s.step), 1))
            elif s.stop.size is not None and s.start.op == "const" and s.start.arg == 0:
                # a size parameter's trips (a row's length), its step's blocks of the body
                add({k: max(-(-v // s.step), 1) for k, v in body.items()}, 1, (s.stop.arg,))
            else:
                add(body, 64)
        elif isinstance(s, ir.If):
            add(_cost(s.body))
            add(_cost(s.orelse))
        else:
            add({(): sum(expr_cost(x, set()) for x in vars(s).values() if isinstance(x, ir.X))})
    return {k: v for k, v in c.items() if v}


def _span(loop: ir.Loop) -> int | None:
    """How far ``loop``'s variable runs, where that is a constant: constant bounds, or a block's (``start`` to
    ``start + n``, or to ``min(start + n, end)``: a reduction's chunk of ``n`` items, its last one shorter); else
    None."""
    start, stop = loop.start, loop.stop
    if start.op == "const" and stop.op == "const":
        return stop.arg - start.arg
    for end in (stop.src if stop.op == "alu" and stop.arg == "min" else (stop,)):
        if end.op == "alu" and end.arg == "add" and len(end.src) == 2 and start in end.src:
            n = end.src[1] if end.src[0] == start else end.src[0]
            if n.op == "const":
                return n.arg
    return None


#: the exponents a float ``pow`` multiplies for (``a * a``, ``(a * a) * a``), as the CPU's numpy kernel
#: (``backends/cpu/kernels.py``) and torch's CPU kernel do, to the bit: pow() costs ~30x more, and libmvec's vector
#: powf falls back to the scalar one for a negative base (issue 30: a polynomial fit's ``x ** 3`` over 2,000 floats
#: took ~40 us of a ~60 us compiled run). An exponent each item computes for itself stays pow() (numpy's kernel
#: too calls its power then)
POWERS = (2, 3)
_POW_DTYPES = (D.float32, D.float64)


def _pow_exponent(k: ir.Kernel, hoisted: dict):
    """The exponent of a float ``pow`` of ``k`` that is the same for every item, the kernel's grid loop is made a
    version of for each of :data:`POWERS` (a value read before the loop: ``hoisted``, or a scalar parameter), or
    None. One exponent: a kernel with two such has the first's versions (the other's ``pow`` calls pow())."""
    scalars = {s.name for s in k.scalars}
    seen: set = set()
    found: list = []

    def walk(x) -> None:
        if found or id(x) in seen:
            return
        seen.add(id(x))
        if x.op == "alu" and x.arg == "pow" and x.dtype in _POW_DTYPES and x.width == 1:
            e = x.src[1]
            if e in hoisted or (e.op == "var" and e.arg in scalars):
                found.append(e)
                return
        for s in x.src:
            walk(s)

    def statements(stmts) -> None:
        for st in stmts:
            if isinstance(st, (ir.Loop, ir.If)):
                for x in (getattr(st, "start", None), getattr(st, "stop", None), getattr(st, "cond", None)):
                    if isinstance(x, ir.X):
                        walk(x)
                statements(st.body)
                statements(getattr(st, "orelse", None) or ())
            else:
                for x in vars(st).values():
                    if isinstance(x, ir.X):
                        walk(x)

    statements(k.body)
    return found[0] if found else None


def _invariant_loads(k: ir.Kernel) -> list:
    """The loads every item of ``k`` makes alike: of an element of an input buffer at a constant index (a 0-d
    tensor's, a broadcast scalar's), in the statements each item runs whatever its values (not in a loop or an
    ``if`` of the body; the renderers compute every operand of an expression). Read once before the grid loop,
    such a value is one gcc sees cannot change in it, and a ``pow`` of it one whose versions are made for its
    common values (:func:`_pow_exponent`)."""
    inputs = {b.name: b.size for b in k.bufs if not b.out}
    found: dict = {}
    seen: set = set()

    def walk(x) -> None:
        if id(x) in seen or x.op in ("const", "var"):
            return
        seen.add(id(x))
        if x.op == "load" and x.width == 1 and x.src[0].op == "const" and 0 <= x.src[0].arg < inputs.get(x.arg, 0):
            found[x] = None
            return
        for s in x.src:
            walk(s)

    for st in k.body:
        if isinstance(st, (ir.Loop, ir.If)):
            continue
        for x in vars(st).values():
            if isinstance(x, ir.X):
                walk(x)
    return list(found)


def _parallel_when(k: ir.Kernel) -> bool | str:
    """Whether kernel ``k`` runs its items on OpenMP's threads: True or False when its work (items times their cost,
    :data:`PARALLEL_WORK`) is known here, else the C condition that decides it at the call (its work depends on
    size parameters)."""
    cost = _cost(k.body) or {(): 1}
    if not k.grid_var and len(cost) == 1 and () in cost:
        return k.grid * cost[()] >= PARALLEL_WORK
    terms = " + ".join("*".join([f"{v}ll", *names]) for names, v in sorted(cost.items()))
    return f"{k.grid_var or f'{k.grid}ll'} * ({terms}) >= {PARALLEL_WORK}ll"


class CRenderer(CStyleRenderer):
    target = "c"
    _powers: dict = {}  # (the exponents the kernel being rendered multiplies for: set by kernel(), never mutated)
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

    def alu(self, x: ir.X, a: list[str]) -> str:
        """C's spelling of an ALU op; a float32/float64 ``pow`` whose exponent is 2 or 3 (a constant, or the value
        the kernel's version was made for: :meth:`kernel`) multiplies (see :data:`POWERS`)."""
        if x.arg == "pow" and x.dtype in _POW_DTYPES:
            e = x.src[1]
            power = e.arg if e.op == "const" else self._powers.get(e)
            if power == 2:
                return f"({a[0]} * {a[0]})"
            if power == 3:
                return f"(({a[0]} * {a[0]}) * {a[0]})"
        return super().alu(x, a)

    def loop_pragma(self, loop: ir.Loop, ind: str) -> list[str]:
        if loop.reductions:
            ops = {"add": "+", "mul": "*", "max": "max", "min": "min", "or": "|", "and": "&"}
            return [f"{ind}#pragma omp simd " + " ".join(f"reduction({ops[op]}:{name})"
                                                        for name, op in loop.reductions)]
        return [f"{ind}#pragma omp simd"] if loop.independent else []

    def kernel(self, k: ir.Kernel) -> str:
        """A kernel's function. The elements every item reads alike (:func:`_invariant_loads`) are read once,
        before its grid loop; a kernel with a float power of such a value or of a scalar (:func:`_pow_exponent`)
        has a grid loop for each of :data:`POWERS` and one for any other exponent, picked by its value."""
        self.begin(k)
        self._powers = {}
        memo: dict = {}
        prologue: list[str] = []
        if not (k.grid > 1 or k.grid_var):
            return self.wrap(k, self.block(k.body, memo, "    "))
        for x in _invariant_loads(k):
            self.expr(x, memo, prologue, "  ")
        e = _pow_exponent(k, memo)
        if e is None:
            return self.wrap(k, self.block(k.body, memo, "    "), prologue)
        versions = []
        for power in (*POWERS, None):
            self._powers = {} if power is None else {e: power}
            versions.append((power, self.block(k.body, dict(memo), "    ")))
        self._powers = {}
        value = self.expr(e, memo, prologue, "  ")
        return self.wrap(k, [], prologue, (value, versions))

    def wrap(self, k: ir.Kernel, body: list[str], prologue: list[str] = (), versions: tuple | None = None) -> str:
        """The kernel's source. A grid's items run in a function of their own (``<name>_items(lo, hi, ...)``, its
        buffers ``restrict``), which the kernel calls once for them all on one thread, or for runs of them in an
        OpenMP loop (:data:`PARALLEL_WORK`): an OpenMP region's body is a function gcc makes, which does not know
        the buffers do not overlap, and it left a 17-buffer loop unvectorised (issue 30: 7 us against 2 us on 2,000
        floats). ``versions``: ``(the exponent's name, [(power, body), ...])`` (see :meth:`kernel`) for ``body``."""
        if k.local:
            raise ValueError(f"kernel {k.name} needs work groups, which the C target does not have (the CPU's "
                             "lowering options never ask for them)")
        params = ", ".join(self.params(k))
        sig = f"void {k.name}({params})"
        if k.grid <= 1 and not k.grid_var:
            return "\n".join([sig + " {", f"  const {self.index_type} gid = 0;", *body, "}"])
        t = self.index_type
        simd = [] if k.heavy_items or k.can_raise else ["  #pragma omp simd"]
        loop = [*simd, f"  for ({t} gid = lo; gid < hi; gid++) {{"]
        items = [f"static void {k.name}_items({t} lo, {t} hi, {params}) {{"]
        if prologue:  # (no item: the loads before the loop are not made either)
            items += ["  if (lo >= hi) return;", *prologue]
        if versions is None:
            items += [*loop, *body, "  }"]
        else:
            value, bodies = versions
            for n, (power, vbody) in enumerate(bodies):
                test = "} else {" if power is None else f"{'} else ' if n else ''}if ({value} == {power}) {{"
                items += [f"  {test}", *("  " + ln for ln in loop), *("  " + ln for ln in vbody), "    }"]
            items.append("  }")
        items.append("}")
        names = [b.name for b in k.bufs] + (["tw_err"] if k.can_raise else []) + [sc.name for sc in k.scalars]
        args = ", ".join(names)
        grid = self.grid(k)
        alone = [f"  {k.name}_items(0, {grid}, {args});"]
        when = _parallel_when(k)
        if when is False:
            return "\n".join([*items, sig + " {", *alone, "}"])
        # items that each loop long (a reduction's chunks, rows) are handed out in ~64 pieces as threads ask for
        # them: a core that another process takes for a while then costs the kernel half that time, not all of it;
        # others in runs of PARALLEL_RUN, in equal shares
        if not k.heavy_items:
            run, sched = PARALLEL_RUN, "static"
        elif k.grid_var:
            run, sched = 1, f"dynamic, ({k.grid_var} >= 128 ? {k.grid_var} / 64 : 1)"
        else:
            run, sched = 1, f"dynamic, {max(1, k.grid // 64)}"
        hi = f"lo + {run} < {grid} ? lo + {run} : {grid}" if run > 1 else "lo + 1"
        parallel = [f"  #pragma omp parallel for schedule({sched})",
                    f"  for ({t} lo = 0; lo < {grid}; lo += {run}) {k.name}_items(lo, {hi}, {args});"]
        if when is True:
            return "\n".join([*items, sig + " {", *parallel, "}"])
        return "\n".join([*items, sig + " {", f"  if ({when}) {{", *("  " + ln for ln in parallel), "  } else {",
                           *("  " + ln for ln in alone), "  }", "}"])
