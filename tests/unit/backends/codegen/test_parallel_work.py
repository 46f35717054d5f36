"""Which C kernels run on OpenMP's threads (``codegen/c.py``: ``_cost``, ``_span``, ``PARALLEL_WORK``).

A kernel splits only when its work pays for a region on a host the worker shares with its client: a reduction's
blocks are counted at their real length (a 16M-float sum's chunks of 262,144 items, not 64 trips a loop), and a
training step's small kernels (makemore's rows of 27 or 64) stay on one thread."""

from __future__ import annotations

from tensorwire.backends import executor as X
from tensorwire.backends.codegen import c as C
from tensorwire.backends.codegen import ir
from tensorwire.backends.codegen.lower import lower
from tensorwire.backends.cpu import make_backend
from tensorwire.protocol import dtypes as D

F32 = {"shape": [], "dtype": "float32"}
EXP = [["full", [], {**F32, "value": 2.0}], ["mul", [-1, 0], None], ["exp", [1], None]]


def _kernels(nodes, shape):
    dev = make_backend().open(0)
    plan = X.compile_plan(dev, nodes, [(shape, D.float32)])
    return lower(plan.program.steps, {plan.node_slot[-1]}, dev.lowering_options).kernels


def _work(k: ir.Kernel, sizes: dict) -> int:
    """The kernel's work as ``_parallel_when`` weighs it, its size parameters given."""
    total = 0
    for names, v in C._cost(k.body).items():
        for n in names:
            v *= sizes[n]
        total += v
    return (sizes[k.grid_var] if k.grid_var else k.grid) * total


def _loops(body):
    for s in body:
        if isinstance(s, ir.Loop):
            yield s
            yield from _loops(s.body)


def test_a_full_sum_counts_its_chunks_at_their_length():
    ks = _kernels([*EXP, ["sum", [2], {"dims": None}]], (16 * 2**20,))
    chunks = [k for k in ks if any(_loops(k.body)) and k.grid > 1]
    assert chunks, [k.name for k in ks]
    k = chunks[0]
    spans = [C._span(lp) for lp in _loops(k.body)]
    assert spans[0] is not None and spans[0] * k.grid >= 16 * 2**20  # the chunks cover the sum
    assert all(s is not None for s in spans), spans
    sizes = {k.grid_var: k.grid} if k.grid_var else {}
    assert _work(k, sizes) >= 16 * 2**20 * 8  # an exp an item: at least its 8 units each
    assert _work(k, sizes) >= C.PARALLEL_WORK


def test_a_rows_block_loop_is_not_counted_64_times():
    ks = _kernels([*EXP, ["sum", [2], {"dims": [1]}]], (4096, 4096))
    rows = [k for k in ks if any(lp.stop.size is not None for lp in _loops(k.body))]
    assert rows
    k = rows[0]
    cost = C._cost(k.body)
    per_item = {names: v for names, v in cost.items() if names}
    # each of a row's items costs its exp (8) and a few more: not 64 times that (a 128-item block's loop counted as
    # 64 trips for every item of the row, as the row loop's step was not)
    (names, v), = per_item.items()
    assert 8 <= v <= 32, cost
    assert _work(k, {n: 4096 for n in (*names, k.grid_var) if n}) >= C.PARALLEL_WORK


def test_a_training_steps_small_kernels_stay_on_one_thread():
    # makemore's logits [512, 27] and its activations [512, 64]: softmax-like rows and elementwise chains
    for shape in ((512, 27), (512, 64), (32 * 16 * 256,)):
        nodes = [*EXP, ["sum", [2], {"dims": [len(shape) - 1]}]] if len(shape) == 2 else EXP
        for k in _kernels(nodes, shape):
            sizes = {k.grid_var: k.grid} if k.grid_var else {}
            for names in C._cost(k.body):
                for n in names:
                    sizes.setdefault(n, shape[-1])
            assert _work(k, sizes) < C.PARALLEL_WORK, (shape, k.name, C._cost(k.body))
            assert C._parallel_when(k) is not True


def test_a_16m_float_elementwise_kernel_splits():
    ks = _kernels(EXP, (16 * 2**20,))
    when = [C._parallel_when(k) for k in ks]
    assert any(w is True or (isinstance(w, str) and "omp" not in w) for w in when)
    k = ks[0]
    sizes = {k.grid_var: k.grid} if k.grid_var else {}
    assert _work(k, sizes) >= C.PARALLEL_WORK
    assert "#pragma omp parallel for" in C.CRenderer().kernel(k)
