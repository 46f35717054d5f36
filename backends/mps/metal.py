"""The kernel compiler's Metal kernels in the form MLX's custom-kernel API takes (``mx.fast.metal_kernel``).

``mx.fast.metal_kernel(name, input_names, output_names, source, header)`` writes the kernel's signature itself: a
``const device T*`` (or, for small arrays, ``const constant T*``; for 0-d arrays ``const constant T&``) per input,
a ``device T*`` per output, and the ``[[thread_position_in_grid]]``-style attributes the source names. So
:class:`MLXMetalRenderer` spells only what differs from :class:`~tensorwire.backends.codegen.metal.MetalRenderer`:
no signature, and the thread indices by MLX's attribute names. :func:`mlx_source` splits a kernel into MLX's
pieces: the header (the macros and the helpers the kernel uses), the body, and the input/output names in order.

The arrays a launcher binds must have the renderer's storage types: 16-bit floats as ``uint16`` words (``view``),
bool as ``uint8``; scalars are 0-d arrays of their storage type (bound by reference, as the renderer reads them);
the error slot ``tw_err`` is an int64[2] output initialised to zero (``init_value=0``). MLX dispatches ``grid``
threads (not groups): a work-group kernel's grid is ``Kernel.grid`` with ``threadgroup=(Kernel.local, 1, 1)``.

MLX compiles custom kernels with Metal's default options, where fast math may be on; the renderer spells
``metal::precise::`` for every math function so those do not depend on it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorwire.protocol import dtypes as D

from ..codegen import ir
from ..codegen.metal import MetalRenderer

#: the MLX dtype name a buffer of each tensorwire dtype is bound as (the renderer's storage type)
STORAGE_MLX = {D.bool_: "uint8", D.uint8: "uint8", D.int8: "int8", D.int16: "int16", D.int32: "int32",
               D.int64: "int64", D.float16: "uint16", D.bfloat16: "uint16", D.float32: "float32"}

#: the MLX dtype name of each Metal type the renderer declares (a scalar is bound as a 0-d array of its type)
MLX_OF_METAL = {"uchar": "uint8", "char": "int8", "short": "int16", "ushort": "uint16", "int": "int32",
                "long": "int64", "float": "float32"}


@dataclass(frozen=True)
class MLXKernelSource:
    """One kernel as ``mx.fast.metal_kernel`` takes it."""

    name: str
    header: str
    body: str
    input_names: tuple[str, ...]  # the input buffers, then the scalars
    output_names: tuple[str, ...]  # the output buffers, then ``tw_err`` when the kernel can raise
    grid: int
    threadgroup: int  # 0: the launcher picks one (a kernel without work-group code)

    def text(self) -> str:
        """Everything in one text (for golden files and debugging)."""
        return (f"// kernel {self.name}: grid {self.grid}, threadgroup {self.threadgroup or 'any'}\n"
                f"// inputs: {', '.join(self.input_names)}\n// outputs: {', '.join(self.output_names)}\n"
                f"// -- header\n{self.header}\n// -- body\n{self.body}\n")


class MLXMetalRenderer(MetalRenderer):
    """:class:`MetalRenderer` spelled for ``mx.fast.metal_kernel``: a body without signature, MLX's thread ids."""

    target = "metal-mlx"
    GLOBAL_ID = "(long)thread_position_in_grid.x"
    LOCAL_ID = "(long)thread_position_in_threadgroup.x"
    GROUP_ID = "(long)threadgroup_position_in_grid.x"

    def wrap(self, k: ir.Kernel, body: list[str]) -> str:
        return "\n".join([*self.ids(k), *body])

    def kernel(self, k: ir.Kernel) -> str:
        self._last_body = super().kernel(k)
        return self._last_body


def mlx_source(k: ir.Kernel, renderer: MLXMetalRenderer | None = None) -> MLXKernelSource:
    """Kernel ``k`` as MLX's custom-kernel pieces (raises DTypeError for float64, as :class:`MetalRenderer`)."""
    r = renderer or MLXMetalRenderer()
    full = r.render([k])
    body = r._last_body
    header = full[:len(full) - len(body) - 1].removeprefix(r.headers).strip("\n") + "\n"
    inputs = tuple(b.name for b in k.bufs if not b.out) + tuple(s.name for s in k.scalars)
    outputs = tuple(b.name for b in k.bufs if b.out) + (("tw_err",) if k.can_raise else ())
    return MLXKernelSource(k.name, header, body, inputs, outputs, k.grid, k.local or 0)


def scalar_mlx(dt: D.DType) -> str:
    """The MLX dtype name a kernel scalar of tensorwire dtype ``dt`` is bound as: the renderer's scalar type
    (16-bit floats travel as float32, bool as one byte)."""
    return MLX_OF_METAL[MLXMetalRenderer().scalar_type(dt)]


__all__ = ["MLXKernelSource", "MLXMetalRenderer", "MLX_OF_METAL", "STORAGE_MLX", "mlx_source", "scalar_mlx"]
