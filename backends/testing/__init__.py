"""A conformance suite that any tensorwire backend runs against itself.

The suite is generated from the op table (:data:`tensorwire.protocol.ops.OPS`): every primitive op
gets cases over a selection of dtypes (bool, int32, int64, float16, bfloat16, float32, float64,
where the op table accepts them), broadcasting shapes, 0-d and empty tensors, and dims/keepdim
variants for reductions. Every composite op is checked too: natively where the backend declares a
kernel for it (:attr:`Backend.native`), through its decomposition otherwise. The random ops are
checked bit for bit against the numpy reference in :mod:`tensorwire.protocol.random`; everything
else is compared with numpy float64 references written in this package (never with the CPU
backend's kernels), with tolerances that fit the result dtype. Further cases check host
round trips (upload/download/meta/nbytes), ``const`` frames, plan replay with fresh dynamic
attributes, out-of-range indices (a ``Fail`` coded ``IndexError``) and failure propagation (the
dependents of a failing node fail with ``DependencyFailed``, independent nodes still succeed).

A primitive op the suite has no generator for yields a case that FAILS, so a new primitive cannot
go untested (``kind="worker"`` ops such as ``hub_tensor`` are the worker's own, not the backend's, and
are left out; ``const`` is checked, as it exercises ``Device.upload``). Custom ops (``tensorwire_ops``)
are covered when their :class:`OpDef` carries ``extra["examples"]``: a list of ``(inputs, attrs)``
with ``inputs`` a list of numpy arrays, plus optionally ``extra["reference"]``:
``fn(inputs_as_float64, attrs) -> np.ndarray``. Without a reference the op's native kernel (if any)
is compared with its own decomposition.

Fragments run through the same path a worker uses: ``device = backend.open(i)``,
``plan = executor.compile_plan(device, nodes, ext_metas)``, then :func:`executor.run_plan` (the
prepared runner, falling back to the step-by-step interpreter when a step fails). Uploaded inputs
are read-only arrays (as frames received from the wire are), so a kernel
that writes into its input fails.

Using it from a plugin's test suite (pytest)::

    import pytest
    from tensorwire.backends.testing import check_case, conformance_cases

    from my_plugin import MyBackend

    @pytest.mark.parametrize("case", conformance_cases(), ids=str)
    def test_conformance(case):
        check_case(MyBackend(), case)

or without pytest::

    from tensorwire.backends.testing import run_conformance
    report = run_conformance(MyBackend(), device_index=0)
    print(report.summary())
    assert report.ok, report.summary()

On a device that compiles kernels into modules (OpenCL, CUDA, ROCm), :func:`prebuild_cases` first compiles every
kernel the cases will launch in a few modules (a kernel compiler's cost is mostly per module).

:func:`check_case` raises :class:`ConformanceError` (an ``AssertionError``) with a message that
names the case, the node and what differed. ``check_case(..., decompose=True)`` runs composite ops
through their decomposition even where the backend has a native kernel (to compare both paths).
A composite that the suite has no reference for and the backend runs through its decomposition
is skipped (``pytest.skip`` under pytest); if the backend declares it native, the case fails.

The package, by subject: :mod:`.cases` (a case, the fragment it builds, running and comparing it),
:mod:`.inputs` (dtypes and input data), one module of cases per op family (:mod:`.elementwise`,
:mod:`.reductions`, :mod:`.movement`, :mod:`.indexing`, :mod:`.matmul`, :mod:`.creation`,
:mod:`.composites` with the references in :mod:`.conv_pool`, :mod:`.optim` and :mod:`.cross_entropy`,
:mod:`.examples` for custom ops), :mod:`.failures` and :mod:`.roundtrips`, and :mod:`.suite` (the
generator table and the functions above).
"""

from .cases import Case, CaseSkipped, ConformanceError
from .elementwise import BINARY_REF, UNARY_REF
from .inputs import FLOATS, SELECTED_DTYPES, SPECIAL
from .suite import (
                    WORK_GROUPS,
                    ConformanceReport,
                    check_case,
                    conformance_cases,
                    has_reference,
                    kernel_lists,
                    prebuild_cases,
                    run_conformance,
                    sample_cases,
)

__all__ = ["Case", "ConformanceError", "ConformanceReport", "CaseSkipped", "SELECTED_DTYPES",
           "check_case", "conformance_cases", "run_conformance", "sample_cases", "kernel_lists", "prebuild_cases",
           "has_reference", "WORK_GROUPS", "SPECIAL", "FLOATS", "UNARY_REF", "BINARY_REF"]
