"""Loops over the coordinates that index arithmetic divides out (issue 37, ``Options.nest``, on for the CPU): a
per-channel broadcast's ``(i // HW) % C`` and batch norm's sums over dims (0, 2, 3) lower to kernels whose inner loop
has no division, and the index simplification that makes it so (``ir.idiv``/``ir.imod`` over sums of multiples).

No compiler here: the kernels run against numpy in ``tests/backends/test_nested_loops.py``.
"""

from __future__ import annotations

import dataclasses

from tensorwire.backends import executor as X
from tensorwire.backends.codegen import ir
from tensorwire.backends.codegen.lower import lower
from tensorwire.backends.codegen.vectorize import uses
from tensorwire.backends.cpu import NumpyBackend, compiled
from tensorwire.protocol import dtypes as D

F32 = D.float32
CPU = compiled.CompiledMixin.lowering_options


def _divisions(x: ir.X, name: str | None = None) -> int:
    """Integer divisions and moduli in ``x`` (``name``: only those of a value that depends on that variable, which a
    compiler cannot hoist out of its loop)."""
    seen: set = set()

    def walk(e):
        if id(e) in seen:
            return 0
        seen.add(id(e))
        own = e.op == "alu" and e.arg in ("idiv", "mod") and (name is None or uses(e.src[0], name))
        return own + sum(walk(s) for s in e.src)
    return walk(x)


def _innermost(body: list) -> list[tuple[str, list]]:
    """``(variable, statements)`` of each innermost loop of ``body`` (one with no loop in it)."""
    out: list = []
    for s in body:
        if isinstance(s, ir.Loop):
            inner = [t for t in s.body if isinstance(t, ir.Loop)]
            out += _innermost(s.body) if inner else [(s.var, s.body)]
        elif isinstance(s, ir.If):
            out += _innermost(s.body) + _innermost(s.orelse)
    return out


def _inner_divisions(k: ir.Kernel) -> int:
    """The divisions in the innermost loops of ``k`` that depend on their loop's variable."""
    return sum(_divisions(e, v) for v, stmts in _innermost(k.body) for s in stmts for e in vars(s).values()
               if isinstance(e, ir.X))


def _kernels(nodes, shapes, opts=CPU):
    plan = X.compile_plan(NumpyBackend().open(0), nodes, [(s, F32) for s in shapes])
    return lower(plan.program.steps, {plan.node_slot[-1]}, opts).kernels


def test_sums_of_multiples_simplify():
    """``(q*k + ... + x) // d`` and ``% d`` with each ``k`` a multiple of ``d`` drop the multiples; ``(q*k + r) %
    (k*j)`` with ``r < k`` takes ``r`` out of the modulus. With size parameters too (their values decide)."""
    q, g = ir.var("q", ir.INDEX, 0, 31), ir.var("g", ir.INDEX, 0, 31)
    r = ir.var("r", ir.INDEX, 0, 63)
    hw, chw, c = ir.size("s0", 64), ir.size("s1", 2048), ir.size("s2", 32)
    flat = q * chw + g * hw + r
    assert (flat // hw) % c == g  # the channel of an NCHW position, the batch and pixel terms gone
    assert flat % hw == r
    assert (q * 2048 + g * 64 + r) // 64 == q * 32 + g
    o, j = ir.var("o", ir.INDEX, 0, 99), ir.var("j", ir.INDEX, 0, 63)
    got = (o * hw + j) % chw
    assert _divisions(got) == 1 and got.src[1] == j  # (o*64 % 2048) + j
    assert (o * 64 + j) // 2048 == o // 32
    # a remainder that may reach the divisor keeps the division
    big = ir.var("b", ir.INDEX, 0, 64)
    assert _divisions((q * hw + big) // hw) == 1


def test_a_channel_broadcast_loops_over_its_pixels():
    """``(x - m[c]) * w[c]`` over [N, C, H, W]: one item per (n, c), a loop over H*W with no division in it (the
    channel's modulus is the item's)."""
    cs = [1, 5, 1, 1]
    nodes = [["reshape", [-2], {"shape": cs}], ["sub", [-1, 0], None], ["reshape", [-3], {"shape": cs}],
             ["mul", [1, 2], None]]
    (k,) = _kernels(nodes, [(3, 5, 7, 6), (5,), (5,)])
    assert k.grid == 15
    assert _innermost(k.body) and _inner_divisions(k) == 0
    (flat,) = _kernels(nodes, [(3, 5, 7, 6), (5,), (5,)], dataclasses.replace(CPU, nest=False))
    assert flat.grid == 3 * 5 * 7 * 6 and not _innermost(flat.body)  # (before: an item an element, dividing gid)


def test_a_kernel_that_stores_a_kept_value_besides_its_own_nests_too():
    """``w + x * y`` with ``x * y`` kept (a weight's gradient, summed over a recurrent loop's letters, and the updated
    weight): one kernel stores both, one item a row, a loop over the row with no division in it (both stores in it);
    before, the kept value's store kept it an item an element, dividing ``gid`` twice an element (issue 37)."""
    nodes = [["mul", [-1, -2], None], ["add", [-3, 0], None]]
    metas = [((128, 1), F32), ((1, 185), F32), ((128, 185), F32)]
    plan = X.compile_plan(NumpyBackend().open(0), nodes, metas)
    keep = {plan.node_slot[0], plan.node_slot[1]}
    (k,) = lower(plan.program.steps, keep, CPU).kernels
    assert k.grid == 128 and _inner_divisions(k) == 0
    ((_, inner),) = _innermost(k.body)
    assert sum(isinstance(s, ir.Store) for s in inner) == 2
    (flat,) = lower(plan.program.steps, keep, dataclasses.replace(CPU, nest=False)).kernels
    assert flat.grid == 128 * 185 and not _innermost(flat.body)


def test_a_contiguous_chain_keeps_one_item_an_element():
    """Nothing divides the index of ``exp(x) + y``: its kernel is unchanged (one item an element, no loop)."""
    (k,) = _kernels([["exp", [-1], None], ["add", [0, -2], None]], [(6, 8), (6, 8)])
    assert k.grid == 48 and not any(isinstance(s, ir.Loop) for s in k.body)


def test_batch_norm_sums_loop_over_batch_then_pixels():
    """A sum over dims (0, 2, 3) of [N, C, H, W] (and of ``(x - m[c])**2``): a loop over the batch, in it a
    unit-stride reduction over H*W without a division; the old lowering divided the flat reduced index."""
    cs = [1, 4, 1, 1]
    for nodes, shapes in (([["sum", [-1], {"dims": [0, 2, 3]}]], [(3, 4, 5, 6)]),
                          ([["reshape", [-2], {"shape": cs}], ["sub", [-1, 0], None], ["mul", [1, 1], None],
                            ["sum", [2], {"dims": [0, 2, 3]}]], [(3, 4, 5, 6), (4,)])):
        (k,) = _kernels(nodes, shapes)
        assert _innermost(k.body) and _inner_divisions(k) == 0
        (flat,) = _kernels(nodes, shapes, dataclasses.replace(CPU, nest=False))
        assert _inner_divisions(flat) > 0


def test_gpu_lowerings_do_not_nest():
    """``Options.nest`` is the CPU's: GPU presets keep one work item an element."""
    from tensorwire.backends.codegen import presets
    assert not presets.GPU.nest and not presets.OPENCL_CPU.nest and not presets.CUDA_GPU.nest
