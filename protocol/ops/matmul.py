"""Matrix multiplication: ``matmul``, batched with broadcasting, 1-D operands as torch treats them.
"""

from __future__ import annotations

from ..errors import DTypeError, ShapeError
from ..shapes import broadcast
from .table import OpDef, register_op


def _matmul_infer(metas, attrs):
    (sa, da), (sb, db) = metas
    if not sa or not sb:
        raise ShapeError("both arguments to matmul need to be at least 1D, but they are "
                         f"{len(sa)}D and {len(sb)}D")
    if da is not db:
        raise DTypeError(f"expected m1 and m2 to have the same dtype, but got: {da.name} != {db.name}")
    a2 = (1,) + sa if len(sa) == 1 else sa
    b2 = sb + (1,) if len(sb) == 1 else sb
    if a2[-1] != b2[-2]:
        raise ShapeError(f"mat1 and mat2 shapes cannot be multiplied ({a2[-2]}x{a2[-1]} and {b2[-2]}x{b2[-1]})")
    batch = broadcast(a2[:-2], b2[:-2])
    out = batch + (a2[-2], b2[-1])
    if len(sa) == 1:
        out = out[:-2] + out[-1:]
    if len(sb) == 1:
        out = out[:-1]
    return out, da


register_op(OpDef("matmul", 2, _matmul_infer, kind="other",
                  doc="torch.matmul: batched with broadcasting; 1-D operands as torch."))
