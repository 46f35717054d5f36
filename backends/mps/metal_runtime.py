"""Fused chains on the Metal GPU: the kernel compiler's kernels built and launched through ``mx.fast.metal_kernel``.

On a Metal GPU, :class:`~.runtime.MPSDevice` lowers each fragment for a GPU (:data:`LOWERING`) and runs it with
:func:`~tensorwire.backends.codegen.program.build_runner`, whose runtime is a :class:`MetalKernels`: each kernel is
rendered by :func:`~.metal.mlx_source` and built once per process (by its source) with the factory
:func:`load_metal_kernel` returns, ``mx.fast.metal_kernel``. A launch binds MLX arrays as :mod:`.metal` describes
(16-bit floats as ``uint16`` views, bool as ``uint8``, scalars as 0-d arrays of their type, the error slot
``tw_err`` an int64[2] output initialised to zero) and returns the kernel's outputs: MLX arrays are immutable, so a
launch makes new outputs (build_runner stores them) instead of writing into buffers.

Launches only record work in MLX's lazy graph. The device evaluates a fragment's kept outputs and the error slots
of its kernels in one ``mx.eval`` (:meth:`MetalKernels.errors` collects them), then reads the slots: the first
kernel that recorded an error raises it as the other compiled devices do
(:func:`~tensorwire.backends.codegen.program.kernel_error`), and the executor re-runs the fragment step by step.

What is not a Metal kernel runs as MLX ops (:mod:`.kernels`): matmul (MLX's own GEMM, as CUDA calls cuBLAS), the
scatters that update a copy of their input in place (:data:`~tensorwire.backends.codegen.kernels.UPDATES_IN_PLACE`:
a custom kernel cannot take a buffer an earlier launch wrote as its output), ``randn`` and float ``arange``
(:data:`~tensorwire.backends.codegen.elementwise.FLOAT64_SOURCES`: their kernels compute in float64, which Metal
has not), anything else the lowering makes a host step; float64 tensors are refused, as on PyTorch's MPS.

:func:`load_metal_kernel` is the one place the factory comes from: it gives none on MLX's CPU device (custom
kernels need Metal), and a device with no factory runs every step as MLX ops. Tests may replace it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import threading
from collections import OrderedDict

from tensorwire.protocol import dtypes as D

from ..codegen.presets import METAL_MLX
from ..codegen.program import debug_kernels, kernel_error, print_source
from .metal import STORAGE_MLX, MLXMetalRenderer, mlx_source, scalar_mlx
from .optional_imports import mlx_core

#: how the kernel compiler lowers for the Metal GPU: a GPU's work groups and tiles; as MLX ops (host steps): matmul
#: (MLX's GEMM), the in-place scatters, and the sources that compute in float64 (see :mod:`..codegen.presets`)
LOWERING = METAL_MLX

#: threads per threadgroup for kernels that do not fix their work-group size
THREADGROUP = 256

def load_metal_kernel(on_cpu: bool):
    """The factory that builds a custom kernel, ``mx.fast.metal_kernel``; None on MLX's CPU device (``on_cpu``),
    where custom kernels need a Metal GPU the host does not have."""
    if on_cpu:
        return None
    return mlx_core().fast.metal_kernel


class MetalKernels:
    """The Metal kernels of one device: built once per process by source, launched on MLX arrays.

    Calls come from the worker's one thread; the error slots of a fragment's launches are collected per thread.
    ``mx`` is ``mlx.core`` and ``MX`` the MLX dtype of each tensorwire dtype (:data:`.kernels.MX`), which the device
    passes in (importing either imports MLX)."""

    target = "metal-mlx"
    MAX_KERNELS = 1 << 15

    def __init__(self, mx, MX: dict, make_kernel):
        self.mx, self.MX, self.make_kernel = mx, MX, make_kernel
        self.renderer = MLXMetalRenderer()
        self._kernels: OrderedDict = OrderedDict()  # source -> the built kernel
        self._local = threading.local()
        self.builds = 0  # kernels built by this runtime (for tests)
        self.launches = 0

    # buffers ----------------------------------------------------------------------------------------------------
    def empty(self, shape, dtype: D.DType):
        """An output's placeholder: a lazy array (never evaluated when a launch replaces it), or a real empty one."""
        return self.mx.zeros(tuple(int(n) for n in shape), self.MX[dtype])

    # kernels ----------------------------------------------------------------------------------------------------
    def _built(self, k):
        src = mlx_source(dataclasses.replace(k, name="tw_kernel"), self.renderer)  # DTypeError for float64
        # MLX writes the signature from the arrays of the first call and keeps the compiled kernel by name: the
        # name hashes the source and the buffers' types and sizes (a small array is bound as `constant`)
        key = "\0".join(
            (
                src.header,
                src.body,
                *src.input_names,
                "|",
                *src.output_names,
                "|",
                *(f"{b.dtype.name}[{b.size}]" for b in k.bufs),
                *(s.dtype.name for s in k.scalars),
            )
        )
        fn = self._kernels.get(key)
        if fn is None:
            digest = hashlib.sha256(key.encode()).hexdigest()[:20]
            named = mlx_source(dataclasses.replace(k, name=f"tw_{digest}"), self.renderer)
            if debug_kernels():
                print_source(self.target, named.name, named.text())
            fn = self.make_kernel(
                name=named.name,
                input_names=list(named.input_names),
                output_names=list(named.output_names),
                source=named.body,
                header=named.header,
            )
            self._kernels[key] = fn
            self.builds += 1
            while len(self._kernels) > self.MAX_KERNELS:
                self._kernels.popitem(last=False)
        else:
            self._kernels.move_to_end(key)
        return fn

    def build(self, kernels: list) -> dict:
        """``{kernel name: launcher(buffers, scalars) -> outputs}`` (see the module doc)."""
        return {k.name: self._launcher(k, self._built(k)) for k in kernels}

    def _launcher(self, k, fn):
        mx = self.mx
        ins = [(i, getattr(mx, STORAGE_MLX[b.dtype])) for i, b in enumerate(k.bufs) if not b.out]
        outs = [(i, b) for i, b in enumerate(k.bufs) if b.out]
        scalar_types = [getattr(mx, scalar_mlx(s.dtype)) for s in k.scalars]
        shapes = [(b.size,) for _, b in outs] + ([(2,)] if k.can_raise else [])
        dtypes = [getattr(mx, STORAGE_MLX[b.dtype]) for _, b in outs] + ([mx.int64] if k.can_raise else [])
        views = [self.MX[b.dtype] for _, b in outs]
        grid = (k.grid, 1, 1)
        group = (k.local or max(1, min(THREADGROUP, k.grid)), 1, 1)
        init = 0 if k.can_raise else None

        def launch(bufs, scalars):
            inputs = [_bound(bufs[i], t) for i, t in ins] + [
                mx.array(v, dtype=t) for v, t in zip(scalars, scalar_types)
            ]
            res = fn(
                inputs=inputs, output_shapes=shapes, output_dtypes=dtypes, grid=grid, threadgroup=group, init_value=init
            )
            self.launches += 1
            if k.can_raise:
                self._record(k, res[-1])
            made = []
            for (i, _), r, view in zip(outs, res, views):
                if r.dtype != view:
                    r = r.view(view)
                made.append(r.reshape(bufs[i].shape))
            return made

        return launch

    # errors -----------------------------------------------------------------------------------------------------
    def _record(self, k, slot) -> None:
        pending = getattr(self._local, "errors", None)
        if pending is None:  # a launch outside a fragment's evaluation: read its slot now
            self.raise_errors([(k, slot)])
        else:
            pending.append((k, slot))

    @contextlib.contextmanager
    def errors(self):
        """``with runtime.errors() as slots``: the ``(kernel, error slot)`` of each raising launch in the block, to
        evaluate with the fragment's outputs and check with :meth:`raise_errors`."""
        outer = getattr(self._local, "errors", None)
        self._local.errors = slots = []
        try:
            yield slots
        finally:
            self._local.errors = outer

    @staticmethod
    def raise_errors(slots: list) -> None:
        """Raise the error the first of the (evaluated) error slots records, in launch order."""
        for k, slot in slots:
            code, detail = (int(x) for x in slot.tolist())
            if code:
                raise kernel_error(k, code, detail)


def _bound(x, storage):
    """An input buffer as the kernel reads it: flat, in the renderer's storage type (a view, no copy)."""
    x = x.reshape(-1)
    return x if x.dtype == storage else x.view(storage)


__all__ = ["LOWERING", "MetalKernels", "THREADGROUP", "load_metal_kernel"]
