"""How the lowering suits each kind of compiled device: the :class:`~.schedule.Options` presets devices pick from.

A device's runtime file names the preset it lowers with (``lowering_options``); CPU drivers of OpenCL and GPUs differ
in work groups and vectors, and a GPU with a BLAS leaves matmul to it as a host step.
"""

from __future__ import annotations

import dataclasses

from .elementwise import FLOAT64_SOURCES
from .kernels import UPDATES_IN_PLACE
from .schedule import Options

#: an OpenCL CPU driver: every op is a kernel, long reductions over few outputs split over many work items, matmul in
#: 16 x 16 tiles staged in local memory (PoCL on this CPU: 1024^3 float32 in ~0.35 s, the one-item-an-output loop
#: ~2-3 s). On CPU drivers a work item already runs a whole reduction fast, and PoCL runs the work-group form slower
#: (measured: a strided loop per item does not vectorise there), so they keep one item an output. PoCL vectorises
#: across work items but never a work item's own loop, and its scalar ``sin`` is a libm call, so CPU drivers get vector
#: loops of 16 float32 lanes (``Options.vector``; one AVX-512 register; 16 beat 8 here): an elementwise item computes
#: 16 elements, a reduction loop accumulates 16 lanes, with PoCL's vectorised math (the benchmark chain on 16M
#: elements: 236 ms scalar, 9.7-13 ms on vectors, in process).
OPENCL_CPU = Options(host_ops=frozenset(), host_views=False, acc64=False, split_min=8192, split_outputs=256,
                     chunk=1024, max_chunks=256, tile=16, vector=16)
#: a GPU (OpenCL, CUDA, ROCm, Metal): as :data:`OPENCL_CPU`, but every long reduction by a work group of 256 items
#: (coalesced reads and a tree in local memory), rows fused, and no vectors (a GPU's work items are the lanes)
GPU = dataclasses.replace(OPENCL_CPU, group=256, row_fusion=True, vector=0)
#: a GPU with a BLAS: matmul (batched, and so conv's im2col + matmul) is a host step that calls it
GPU_BLAS = dataclasses.replace(GPU, host_ops=frozenset({"matmul"}))
#: CUDA and ROCm: as :data:`GPU`, and an elementwise thread computes 16 bytes of its output (4 float32, 8 float16)
#: with 128-bit loads and stores (:mod:`.lanes`; one element a thread, scalar loads: the 8-op chain on 64M float32
#: took ~280 us on an H200, Triton's kernel ~165 us)
CUDA_GPU = dataclasses.replace(GPU, lane_bytes=16)
#: the same with matmul on the BLAS
CUDA_GPU_BLAS = dataclasses.replace(CUDA_GPU, host_ops=frozenset({"matmul"}))
#: the Metal GPU through MLX: as MLX ops (host steps) run matmul (MLX's GEMM), the scatters that update a copy of their
#: input in place (a custom kernel cannot take a buffer an earlier launch wrote as its output), and the sources that
#: compute in float64 (which Metal has not)
METAL_MLX = dataclasses.replace(GPU, host_ops=frozenset({"matmul"}) | UPDATES_IN_PLACE | FLOAT64_SOURCES)

__all__ = ["CUDA_GPU", "CUDA_GPU_BLAS", "GPU", "GPU_BLAS", "METAL_MLX", "OPENCL_CPU"]
