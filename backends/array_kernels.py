"""What the numpy kernels (:mod:`.cpu.kernels`) and the MLX kernels (:mod:`.mps.kernels`) share, written once against
an array namespace (``np`` or ``mx``) where the two libraries agree: the tables' registration, the attribute
arithmetic that does not depend on the library, a scatter's operands, and the movement kernels whose calls are the
same in both.

Where the two differ (numpy's in-place fills and bit selects, MLX's lazy checks and missing ops) each keeps its own
kernel, and a numpy kernel specialized for speed stays in :mod:`.cpu.kernels` as it is. Nothing here imports an
array library: a kernel made here calls the namespace it was made with.
"""

from __future__ import annotations

from collections.abc import Callable


def registrar(table: dict) -> Callable[[str], Callable]:
    """The decorator ``@kernel(name)`` that enters the function it decorates into ``table`` under ``name``."""

    def kernel(name: str):
        def deco(fn):
            table[name] = fn
            return fn
        return deco
    return kernel


def axes(a: dict, ndim: int) -> tuple:
    """The dimensions a reduction's ``dims`` attribute names, non-negative (every dimension for None; none of a 0-d
    input)."""
    d = a.get("dims")
    if d is None:
        return tuple(range(ndim))
    return tuple(x % max(ndim, 1) for x in ([d] if isinstance(d, int) else d)) if ndim else ()


def scatter_operands(ins: list, a: dict, what: str, check_index: Callable) -> tuple:
    """A scatter's ``(x, idx, src, dim)``: its inputs and its dimension, the index checked against that dimension's
    size with the library's ``check_index(idx, n, what, allow_negative)`` (a 0-d ``x`` counts as size 1)."""
    x, idx, src = ins
    dim = a["dim"] % max(x.ndim, 1)
    check_index(idx, x.shape[dim] if x.ndim else 1, what, False)
    return x, idx, src, dim


def movement_kernels(xp) -> dict:
    """``permute``, ``expand`` and ``copy`` on the namespace ``xp`` (numpy's and MLX's calls agree). Buffers are
    immutable, so a copy may share memory and the others may be views."""
    transpose, broadcast_to = xp.transpose, xp.broadcast_to  # (looked up once: these run on every view)
    return {
        "permute": lambda ins, a, shape, dt: transpose(ins[0], [d % max(ins[0].ndim, 1) for d in a["dims"]]),
        "expand": lambda ins, a, shape, dt: broadcast_to(ins[0], shape),
        "copy": lambda ins, a, shape, dt: ins[0],
    }
