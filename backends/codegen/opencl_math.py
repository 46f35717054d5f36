"""Float ``sin`` and ``exp`` for OpenCL CPU drivers, written out so that they vectorise.

Why: on PoCL 3.1, over 16M floats in ``float16`` vectors, the driver's ``sin`` took ~7.5 ms of a 10 ms kernel and
its ``exp`` ~2.6 ms, where the rest of the 8-op chain took 1.1 ms. Worse, PoCL's vector ``sin`` is wrong for small
lanes when another lane of the same vector is large (``sin(1e-30)`` gave 0.0099 beside a lane of 1e7: its
large-argument reduction is applied to every lane). Computing in double on the vectors is no way out: PoCL ran that
slower than its own float functions.

How (the algorithms of SLEEF's and Cephes' single-precision functions; the kernels' FP_CONTRACT OFF does not fuse
anything, so the multiply-adds are written as ``fma``):

- ``sin``: ``q = rint(x / pi)``; ``r = x - q * pi`` with pi in three parts; ``r + r**3 * P(r**2)`` with Taylor's
  coefficients to ``r**13`` (truncation below 7e-10 on [-pi/2, pi/2]); the sign flipped for odd ``q``. Lanes beyond
  ``SIN_LIMIT`` in magnitude (and infinities) take the driver's scalar ``sin``, lane by lane. ``sin(-0) = -0``.
- ``exp``: ``k = rint(x * log2 e)``; ``r = x - k ln 2`` in two parts; Cephes' degree-7 polynomial; ``2**k`` applied
  as two power-of-two factors so that results round once into the subnormals and overflow to infinity exactly where
  the true value does. NaN propagates.
- ``rint`` is spelled as adding and subtracting 1.5 * 2**23 (:func:`_rint`).

Measured against numpy's float64 (rounded to float) over normal, uniform and random-bit inputs with the specials:
``sin`` within 2 ulp, ``exp`` within 1 ulp (the driver's: 2 and 1; numpy's float32: 1 and 2); OpenCL allows 4 and 3.
``tests/backends/test_opencl.py`` checks the bound on PoCL. The 8-op chain's kernel went from 10.2 to 4.0 ms.

Only CPU drivers use them (``OpenCLRenderer(own_math=True)``): GPUs have fast native math.
"""

from __future__ import annotations

#: the float ops the OpenCL renderer spells with these functions when asked to (float16 and bfloat16 too: they
#: compute in float). cos and tan keep the driver's functions, guarded: a vector with a lane beyond GUARD_LIMIT
#: goes lane by lane through the driver's scalar function (PoCL's vector cos and tan share sin's bug, which
#: spoils the small lanes).
OWN_MATH = frozenset({"sin", "exp", "cos", "tan"})
GUARDED = frozenset({"cos", "tan"})
GUARD_LIMIT = "10000.0f"  # PoCL's vector sin/cos/tan were right beside lanes of 1e5, wrong beside 1e7

#: pi = PI_A + PI_B + PI_C (SLEEF's split for FMA reduction); |x| up to SIN_LIMIT keeps q * PI_C's rounding far
#: below float precision (q <= 3184)
PI = ("3.1414794921875f", "0.00011315941810607910156f", "1.9841872589410058936e-09f")
INV_PI = "0.318309886183790671538f"
SIN_LIMIT = "10000.0f"
#: sin(r) = r + r * z * (SIN_POLY in z = r * r): Taylor to r**13 (truncation below 7e-10 on [-pi/2, pi/2])
SIN_POLY = ("-0.16666666666666666f", "0.008333333333333333f", "-0.0001984126984126984f", "2.7557319223985893e-06f",
            "-2.505210838544172e-08f", "1.6059043836821613e-10f")
#: ln 2 = LN2_A + LN2_B (Cephes' C1, C2: k * LN2_A exact for |k| < 2**15)
LN2 = ("0.693359375f", "-2.12194440e-4f")
EXP_POLY = ("5.0000001201e-1f", "1.6666665459e-1f", "4.1665795894e-2f", "8.3334519073e-3f", "1.3981999507e-3f",
            "1.9875691500e-4f")


def _horner(var: str, coeffs: tuple[str, ...]) -> str:
    """``c0 + var * (c1 + var * (...))`` with fused multiply-adds (one rounding a step, and one instruction where
    the CPU has FMA; the kernels' FP_CONTRACT OFF does not fuse them on its own)."""
    out = coeffs[-1]
    for c in reversed(coeffs[:-1]):
        out = f"fma({var}, {out}, {c})"
    return out


def _rint(v: str) -> str:
    """``v`` rounded to the nearest integer (ties to even) for ``|v| < 2**22``: adding and subtracting 1.5 * 2**23
    leaves no fraction bits (exact under FP_CONTRACT OFF). PoCL's ``rint`` is a library call that does not vectorise
    (8.3 -> 5.3 ms for the chain's kernel)."""
    return f"(({v} + 12582912.0f) - 12582912.0f)"


def _lanes(op: str, width: int, limit: str, every: bool) -> str:
    """``tw_{op}_lanes{width}(x, v)``: ``v`` with the lanes whose ``x`` is beyond ``limit`` in magnitude (``every``:
    all lanes) replaced by the driver's scalar ``op`` of ``x`` (private arrays: OpenCL C has no variable lane
    index). Not inlined: only vectors with a large lane call it, and inlined it slowed the common path by ~0.4 ms
    over the chain's 16M elements (private arrays in the loop's frame)."""
    cond = "" if every else f"if (fabs(t[l]) > {limit}) "
    return f"""__attribute__((noinline)) float{width} tw_{op}_lanes{width}(float{width} x, float{width} v) {{
  float t[{width}], u[{width}];
  vstore{width}(x, 0, t);
  vstore{width}(v, 0, u);
  for (int l = 0; l < {width}; l++) {cond}u[l] = {op}(t[l]);
  return vload{width}(0, u);
}}
"""


def _any_big(limit: str, width: int) -> str:
    """Statements ending in ``const int big``: whether a lane of ``x`` is beyond ``limit`` in magnitude. OpenCL's
    ``any()`` is a loop over the lanes on PoCL 3.1 (0.7 ms of the 8-op chain's 4.5 ms kernel, for sin's check); the
    comparison's lanes (all bits set where true) OR-ed in halves cost ~0.1 ms there. The halves go through a
    private array: Oclgrind's uninitialised-value checker reports the same halving written with ``.lo``/``.hi``
    (vector shuffles, no faster on PoCL) as depending on uninitialised values."""
    lines = [f"  int bt[{width}];", f"  vstore{width}(fabs(x) > {limit}, 0, bt);"]
    w = width
    while w > 2:
        w //= 2
        lines.append(f"  vstore{w}(vload{w}(0, bt) | vload{w}(1, bt), 0, bt);")
    lines.append("  const int big = (bt[0] | bt[1]) != 0;")
    return "\n".join(lines)


def own_math_source(op: str, width: int) -> str | None:
    """The OpenCL C function ``tw_{op}_x{width}`` (``width`` 1: scalar float) that the renderer calls for ``op``, or
    None where the driver's own function serves as it is (a guarded op on scalars)."""
    w = "" if width == 1 else str(width)
    f, i = f"float{w}", f"int{w}"

    def pick(c: str, a: str, b: str) -> str:  # c ? b : a, lane by lane
        return f"({c} ? {b} : {a})" if width == 1 else f"select({a}, {b}, {c})"

    if op in GUARDED:
        if width == 1:
            return None
        # the driver's vector result is wrong in every small lane once one lane is large: all lanes go scalar then
        return _lanes(op, width, GUARD_LIMIT, every=True) + f"""TW_FN {f} tw_{op}_x{width}({f} x) {{
  const {f} v = {op}(x);
{_any_big(GUARD_LIMIT, width)}
  return big ? tw_{op}_lanes{width}(x, v) : v;
}}"""
    if op == "sin":
        if width == 1:
            big = f"  if (fabs(x) > {SIN_LIMIT}) return sin(x);\n"
            tail = "  return v;"
        else:  # the driver's scalar sin, lane by lane (see the module's docstring for why not its vector sin)
            big = ""
            tail = f"{_any_big(SIN_LIMIT, width)}\n  return big ? tw_sin_lanes{width}(x, v) : v;"
        a, b, c = PI
        lanes = "" if width == 1 else _lanes("sin", width, SIN_LIMIT, every=False)
        return lanes + f"""TW_FN {f} tw_sin_x{width}({f} x) {{
{big}  const {f} q = {_rint(f"x * {INV_PI}")};
  const {f} r = fma(-q, {c}, fma(-q, {b}, fma(-q, {a}, x)));
  const {f} z = r * r;
  const {f} s = fma(r * z, {_horner("z", SIN_POLY)}, r);
  const {f} sv = as_{f}(as_{i}(s) ^ (convert_{i}(q) << 31));
  const {f} v = {pick("x == 0.0f", "sv", "x")};
{tail}
}}"""
    if op == "exp":
        a, b = LN2
        lo_c, hi_c = ("-104.0f", "89.0f") if width == 1 else (f"(({f})(-104.0f))", f"(({f})(89.0f))")
        # clamped with selects (PoCL's fmin/fmax cost more); a NaN passes them and is given back at the end
        return f"""TW_FN {f} tw_exp_x{width}({f} x) {{
  const {f} lo = {pick("x < -104.0f", "x", lo_c)};
  const {f} xc = {pick("lo > 89.0f", "lo", hi_c)};
  const {f} k = {_rint("xc * 1.44269504088896341f")};
  const {f} r = fma(-k, {b}, fma(-k, {a}, xc));
  const {f} p = fma(r * r, {_horner("r", EXP_POLY)}, 1.0f + r);
  const {i} ki = convert_{i}(k);
  const {i} k1 = ki >> 1;
  const {f} res = (p * as_{f}((k1 + 127) << 23)) * as_{f}((ki - k1 + 127) << 23);
  return {pick("x != x", "res", "x")};
}}"""
    raise ValueError(f"no own OpenCL math for {op!r}")
