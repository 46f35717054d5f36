"""``matmul`` cases: vector and matrix operands, batched broadcasting and empty inner or outer dims."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .cases import Case, _Graph
from .inputs import SELECTED_DTYPES, _accepts, _case, _f64, _sh, _vals


def _matmul_cases(op: str) -> Iterator[Case]:
    shapes = [((3,), (3,)), ((3,), (3, 2)), ((2, 3), (3,)), ((2, 3), (3, 4)), ((2, 1, 3, 4), (5, 4, 2)),
              ((2, 0), (0, 3)), ((0, 3), (3, 2)), ((4, 2, 3), (3,))]
    for i, dt in enumerate(SELECTED_DTYPES):
        if not _accepts(op, [((2, 2), dt), ((2, 2), dt)]):
            continue
        for k, (sa, sb) in enumerate(shapes):
            if (k + i) % 2 and k != 3:
                continue

            def build(rng, dt=dt, sa=sa, sb=sb):
                g = _Graph()
                a, b = _vals(rng, sa, dt, -2, 2, None), _vals(rng, sb, dt, -2, 2, None)
                g.ref(g.op("matmul", g.input(a), g.input(b)), np.matmul(_f64(a), _f64(b)), scale=2.0)
                return g
            yield _case(f"matmul[{dt.name}:{_sh(sa)}@{_sh(sb)}]", op, build)



