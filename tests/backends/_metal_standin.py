"""A stand-in for ``mx.fast.metal_kernel``, for running the MPS backend's Metal-kernel path without a Mac.

MLX's custom kernels need Metal; on Linux MLX runs on its CPU device only. :func:`install` replaces the backend's
one seam, ``metal_runtime.load_metal_kernel`` (which returns ``mx.fast.metal_kernel``, or none on MLX's CPU), with
one that returns :meth:`StandInMetal.metal_kernel` there too, so that a device on MLX's CPU
(``TENSORWIRE_MPS_ON_CPU=1``) takes the Metal path: fragments lowered for a GPU, kernels rendered by
``mlx_source``, built by name and launched with MLX arrays, error slots read after evaluation, float64 refused.

What the stand-in does with a kernel:

* **Building** (``metal_kernel(name, input_names, output_names, source, header)``): it finds the IR kernel by its
  name in a registry that :func:`install` fills by wrapping ``MLXMetalRenderer.render`` (the runtime names kernels
  by the hash of their source, so a name is one kernel), and checks that the source, header and names it was
  given are ``mlx_source`` of that kernel. The OpenCL twins of the kernels built since the last launch are built
  at the next launch, in one PoCL program (PoCL's cost is per program: a fragment's kernels cost one build). The
  Metal source itself is never compiled here (there is no Metal compiler on Linux); its text is covered by the
  golden tests and, on a Mac, by the ``mps``-marked tests.
* **Launching** (``kernel(inputs=..., output_shapes=..., output_dtypes=..., grid=..., threadgroup=...,
  init_value=...)``): it checks the binding conventions ``backends/mps/metal.py`` documents (flat inputs in the
  renderer's storage types, scalars as 0-d arrays of their type, outputs' shapes and types, ``tw_err`` initialised
  to zero, a grid that covers the kernel, a work-group kernel's threadgroup), then runs the kernel's OpenCL twin on
  PoCL (the same IR kernel rendered by the OpenCL renderer) on the MLX arrays' bytes and returns the outputs as MLX
  arrays. Outputs without ``init_value`` start as a poison pattern (MLX leaves them uninitialised), so a kernel
  that relies on zeroed outputs fails here too.

Unlike MLX, the stand-in runs a kernel when it is launched, not when the graph is evaluated: it evaluates its
inputs at once. So that it never evaluates an MLX op whose deferred index check failed (MLX does not bound-check
gathers and scatters; the device checks before its ``mx.eval``), it raises the first failed deferred check first.

``python tests/backends/_metal_standin.py worker --device mps:0 --dispatcher ADDR`` runs a worker process with the
stand-in installed (``TENSORWIRE_MPS_ON_CPU=1`` must be set), for tests on a real cluster.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from tensorwire.backends.mps.metal import STORAGE_MLX, MLXMetalRenderer, mlx_source, scalar_mlx

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from tests.backends._pocl import OpenCLTwins, record_renders  # noqa: E402

POISON = 0xA5  # the byte an output starts as without init_value


class StandInMetal(OpenCLTwins):
    """``mx.fast.metal_kernel`` on PoCL: kernels found by name, run as their OpenCL twins."""

    standin = "Metal stand-in"

    def __init__(self):
        self.registry: dict = {}  # kernel name -> ir.Kernel (filled by install's render hook)
        self._sources: dict = {}  # kernel name -> the buffers it was first built for
        self.unbuilt: list = []  # kernels whose OpenCL twins are not built yet (built together at the next launch)
        self.built = 0
        self.launches = 0

    def metal_kernel(
        self,
        name: str,
        input_names,
        output_names,
        source: str,
        header: str = "",
        ensure_row_contiguous: bool = True,
        atomic_outputs: bool = False,
        compile_options=None,
    ):
        k = self.registry.get(name)
        if k is None:
            raise ValueError(f"metal stand-in: no kernel named {name!r} was rendered")
        want = mlx_source(k)
        got = (source, header, tuple(input_names), tuple(output_names))
        if got != (want.body, want.header, want.input_names, want.output_names):
            raise ValueError(f"metal stand-in: {name}'s source, header or names are not mlx_source of the kernel")
        if not ensure_row_contiguous or atomic_outputs:
            raise ValueError("metal stand-in: the kernels read flat row-major buffers and write plain outputs")
        if self._sources.setdefault(name, k.signature()) != k.signature():  # (a new body: a new name, checked above)
            raise ValueError(
                f"metal stand-in: {name} was built for other buffers before, and MLX keeps compiled kernels by name"
            )
        self.built += 1
        self.unbuilt.append(k)
        return _Kernel(self, k)


class _Kernel:
    """One built kernel: a call is one launch."""

    def __init__(self, metal: StandInMetal, k):
        self.metal, self.k = metal, k

    def __call__(
        self,
        *,
        inputs,
        output_shapes,
        output_dtypes,
        grid,
        threadgroup,
        template=None,
        init_value=None,
        verbose=False,
        stream=None,
    ):
        import mlx.core as mx

        from tensorwire.backends.mps import kernels as K

        k = self.k
        ins = [b for b in k.bufs if not b.out]
        outs = [b for b in k.bufs if b.out]
        _expect(
            len(inputs) == len(ins) + len(k.scalars),
            f"{len(inputs)} inputs for {len(ins)} buffers and {len(k.scalars)} scalars",
        )
        for b, a in zip(ins, inputs):
            _expect(
                a.dtype == getattr(mx, STORAGE_MLX[b.dtype]) and a.ndim == 1 and a.size == b.size,
                f"input {b.name} ({b.dtype.name}[{b.size}]) bound as {a.dtype}{list(a.shape)}",
            )
        for s, a in zip(k.scalars, inputs[len(ins) :]):
            _expect(
                a.ndim == 0 and a.dtype == getattr(mx, scalar_mlx(s.dtype)),
                f"scalar {s.name} ({s.dtype.name}) bound as {a.dtype}{list(a.shape)}",
            )
        want_shapes = [(b.size,) for b in outs] + ([(2,)] if k.can_raise else [])
        want_dtypes = [getattr(mx, STORAGE_MLX[b.dtype]) for b in outs] + ([mx.int64] if k.can_raise else [])
        _expect(
            [tuple(s) for s in output_shapes] == want_shapes and list(output_dtypes) == want_dtypes,
            f"outputs {output_shapes} {output_dtypes}, the kernel writes {want_shapes} {want_dtypes}",
        )
        _expect(not k.can_raise or init_value == 0, "the error slot tw_err must start at zero (init_value=0)")
        _expect(template in (None, []), "the kernels take no template arguments")
        gx, tx = int(grid[0]), int(threadgroup[0])
        _expect(tuple(grid[1:]) == (1, 1) and tuple(threadgroup[1:]) == (1, 1), "a one-dimensional grid")
        _expect(gx >= k.grid, f"grid {gx} does not cover the kernel's {k.grid} items")
        _expect(
            0 < tx <= 1024 and (not k.local or tx == k.local),
            f"threadgroup {tx} (the kernel's work groups: {k.local or 'any'}; Metal: at most 1024)",
        )
        K.raise_failed(getattr(K._local, "checks", None) or [])  # see the module doc: never evaluate a bad gather
        self.metal.launches += 1
        host_in = [np.array(a, copy=True) for a in inputs[: len(ins)]]  # evaluates the inputs (MLX's CPU)
        fill = POISON if init_value is None else None
        host_out = [
            np.full(b.size * b.dtype.itemsize, fill, np.uint8).view(b.dtype.np)
            if fill is not None
            else np.full(b.size, init_value, STORAGE_MLX[b.dtype])
            for b in outs
        ]
        err = np.zeros(2, np.int64)
        self._run_twin(host_in, host_out, err, [a.item() for a in inputs[len(ins) :]], gx, tx)
        made = [mx.array(h.view(STORAGE_MLX[b.dtype])) for b, h in zip(outs, host_out)]
        return made + ([mx.array(err)] if k.can_raise else [])

    def _run_twin(self, host_in: list, host_out: list, err: np.ndarray, scalars: list, gx: int, tx: int) -> None:
        from tensorwire.backends.codegen.opencl import OpenCLRenderer
        from tensorwire.backends.opencl.runtime import SCALAR_TYPES

        k = self.k
        dev = self.metal.opencl()
        cl, rt = dev.cl, dev.runtime
        key = rt._key(k)
        if key not in rt._kernels:  # the twins of every kernel built since the last launch, in one PoCL program
            rt.prebuild([self.metal.unbuilt + [k]])
            self.metal.unbuilt.clear()
        knl = rt._kernels[key][0]
        mf = cl.mem_flags
        alive, copies = [], []  # (an argument's memory object must outlive the launch: set_arg does not hold it)
        it_in, it_out = iter(host_in), iter(host_out)
        hosts = [next(it_out) if b.out else next(it_in) for b in k.bufs] + ([err] if k.can_raise else [])
        for i, host in enumerate(hosts):
            data = np.ascontiguousarray(host).view(np.uint8).reshape(-1)
            buf = cl.Buffer(
                dev.ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=data if data.size else np.zeros(1, np.uint8)
            )
            knl.set_arg(i, buf)
            alive.append(buf)
            if (i >= len(k.bufs) or k.bufs[i].out) and data.size:
                copies.append((host, buf))
        ocl = OpenCLRenderer()
        first = len(hosts)
        for j, (s, v) in enumerate(zip(k.scalars, scalars)):
            knl.set_arg(first + j, SCALAR_TYPES[ocl.scalar_type(s.dtype)](v))
        local = k.local or min(tx, 256)
        cl.enqueue_nd_range_kernel(dev.queue, knl, (-(-gx // local) * local,), (local,))
        for host, buf in copies:
            cl.enqueue_copy(dev.queue, host.view(np.uint8).reshape(-1), buf)
        dev.queue.finish()
        del alive


def _expect(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(f"metal stand-in: a launch broke MLX's binding conventions: {what}")


def install(metal_runtime) -> StandInMetal:
    """Make the MPS backend's ``metal_runtime`` build its kernels with a new :class:`StandInMetal` and take the Metal
    path on MLX's CPU; returns the stand-in. Devices opened before keep what they had."""
    metal = StandInMetal()
    metal_runtime.load_metal_kernel = lambda on_cpu: metal.metal_kernel  # on MLX's CPU too
    record_renders(MLXMetalRenderer, _REGISTRIES)
    _REGISTRIES.append(metal.registry)
    return metal


_REGISTRIES: list[dict] = [{}]


def _worker(argv: list[str]) -> int:
    from tensorwire.backends.mps import metal_runtime

    if os.environ.get("TENSORWIRE_MPS_ON_CPU", "") in ("", "0"):
        raise SystemExit("the Metal stand-in runs on MLX's CPU device: set TENSORWIRE_MPS_ON_CPU=1")
    install(metal_runtime)
    from tensorwire.cli import main

    return main(["worker", *argv])


if __name__ == "__main__":
    if sys.argv[1:2] != ["worker"]:
        raise SystemExit("usage: _metal_standin.py worker --device mps:0 --dispatcher ADDR [worker options]")
    sys.exit(_worker(sys.argv[2:]))
