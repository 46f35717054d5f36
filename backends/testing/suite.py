"""The conformance suite's public API: the table from op name to case generator, :func:`has_reference`,
:func:`conformance_cases`, :func:`check_case`, :func:`run_conformance` and its :class:`ConformanceReport`,
and :data:`WORK_GROUPS` (lowering options that take every GPU work-group path on small tensors)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from tensorwire.protocol.ops import OPS, load_plugin_ops

from ..codegen.lower import lower
from .cases import Case, _Ctx, skip_exceptions
from .composites import _composite_cases, _composite_specs
from .creation import _arange_cases, _const_cases, _full_cases, _random_cases
from .elementwise import BINARY_REF, UNARY_REF, _binary_cases, _cast_cases, _unary_cases, _where_cases
from .examples import _example_cases
from .failures import _failure_cases
from .indexing import _index_cases
from .matmul import _matmul_cases
from .movement import _movement_cases
from .reductions import _RED_NP, _arg_cases, _argsort_cases, _reduce_cases, _scan_cases
from .roundtrips import _roundtrip_cases

_GENERATORS: dict[str, Callable[[str], Iterator[Case]]] = {}
for _n in UNARY_REF:
    _GENERATORS[_n] = _unary_cases
for _n in BINARY_REF:
    _GENERATORS[_n] = _binary_cases
for _n in _RED_NP:
    _GENERATORS[_n] = _reduce_cases
for _n in ("reshape", "permute", "expand", "slice", "flip", "pad", "cat", "copy"):
    _GENERATORS[_n] = _movement_cases
for _n in ("gather", "scatter", "scatter_add", "scatter_reduce", "index", "index_put", "setslice"):
    _GENERATORS[_n] = _index_cases
for _n in ("rand", "randn", "randint"):
    _GENERATORS[_n] = _random_cases
_GENERATORS.update({"argsort": _argsort_cases})
_GENERATORS.update({"where": _where_cases, "cast": _cast_cases, "argmax": _arg_cases, "argmin": _arg_cases,
                    "cumsum": _scan_cases, "cumprod": _scan_cases, "matmul": _matmul_cases, "full": _full_cases,
                    "arange": _arange_cases, "const": _const_cases})


def has_reference(op: str) -> bool:
    """Whether the suite can check ``op`` (a built-in generator, or ``OpDef.extra['examples']``)."""
    opdef = OPS[op]
    if opdef.primitive:
        return op in _GENERATORS or bool(opdef.extra.get("examples"))
    return _composite_specs(op) is not None or bool(opdef.extra.get("examples"))


def conformance_cases(*, load_plugins: bool = True, ops: list[str] | None = None) -> list[Case]:
    """Every conformance case, generated from the op table (plugins' custom ops included).

    ``ops`` restricts the op cases to those ops (the round-trip and failure cases come only with the
    full list). Cheap: the data of a case is built when it is checked.
    """
    if load_plugins:
        load_plugin_ops()
    cases: list[Case] = []
    for name, opdef in list(OPS.items()):
        if ops is not None and name not in ops:
            continue
        if opdef.primitive:
            if opdef.kind == "worker" and name not in _GENERATORS:
                continue  # the worker's own op (hub_tensor ...), not the backend's; `const` is covered below
            gen = _GENERATORS.get(name, _example_cases)
        else:
            gen = _composite_cases
        cases.extend(gen(name))
    if ops is None:
        cases.extend(_roundtrip_cases())
        cases.extend(_failure_cases())
    names: dict[str, int] = {}
    out = []
    for c in cases:  # unique names (pytest ids)
        k = names.get(c.name, 0)
        names[c.name] = k + 1
        out.append(c if not k else Case(f"{c.name}#{k}", c.op, c.fn))
    return out


#: lowering options (fields of ``codegen.Options``) that make the conformance cases' small tensors take every
#: work-group path a GPU's lowering has: groups of 4 items (reductions longer than a group, two-stage splits) and
#: 4 x 4 matmul tiles cut at the matrices' edges
WORK_GROUPS = {"group": 4, "tile": 4, "split_min": 16, "chunk": 8, "max_chunks": 4}

_DEVICES: dict[int, tuple] = {}


def _device(backend, index: int):
    entry = _DEVICES.get(id(backend))
    if entry is None or entry[0] is not backend:
        entry = _DEVICES[id(backend)] = (backend, {})
    devs = entry[1]
    if index not in devs:
        devs[index] = backend.open(index)
    return devs[index]


def check_case(backend, case: Case, device_index: int = 0, *, decompose: bool = False) -> None:
    """Run one case on ``backend``'s device ``device_index``; raise :class:`ConformanceError` if it fails.

    The device is opened once per backend object and index, and reused. With ``decompose=True``
    composite ops run through their decomposition even where the backend has a native kernel.
    """
    device = _device(backend, device_index)
    case.fn(_Ctx(backend, device, decompose, case))


@dataclass
class ConformanceReport:
    """What :func:`run_conformance` found: case names that passed, failed (with why) or were skipped."""

    backend: str
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failed

    def summary(self, max_failures: int = 20) -> str:
        lines = [f"tensorwire conformance of backend {self.backend!r}: {len(self.passed)} passed, "
                 f"{len(self.failed)} failed, {len(self.skipped)} skipped"]
        for name, why in list(self.failed.items())[:max_failures]:
            lines.append(f"FAILED {name}: {why}")
        if len(self.failed) > max_failures:
            lines.append(f"... and {len(self.failed) - max_failures} more")
        return "\n".join(lines)

    __str__ = summary


def run_conformance(backend, device_index: int = 0, *, cases: list[Case] | None = None,
                    decompose: bool = False) -> ConformanceReport:
    """Run every case (or ``cases``) on ``backend`` and report; never raises for a failing case."""
    report = ConformanceReport(getattr(backend, "name", type(backend).__name__))
    skip_exc = skip_exceptions()
    for case in cases if cases is not None else conformance_cases():
        try:
            check_case(backend, case, device_index, decompose=decompose)
        except skip_exc as e:
            report.skipped[case.name] = str(e)
        except Exception as e:
            report.failed[case.name] = f"{type(e).__name__}: {e}"
        else:
            report.passed.append(case.name)
    return report


class _Dry(Exception):
    """Raised in place of running a fragment while :func:`kernel_lists` only lowers."""


def _dry(*args):
    raise _Dry()


def kernel_lists(backend, cases: list, device_index: int = 0) -> list:
    """The kernels of every fragment ``cases`` run on ``backend``'s device (one list a fragment), lowered with the
    device's ``lowering_options`` and never run: every case is run dry (it fails or skips at its first fragment,
    which is all the lowering needs)."""
    dev = _device(backend, device_index)
    lists = []

    def collect(plan, keep):
        lw = lower(plan.program.steps, set(keep), dev.lowering_options)
        if lw.kernels:
            lists.append(lw.kernels)
        return _dry

    dev.runner, dev.run_step = collect, _dry  # instance attributes: every case lowers, nothing runs
    try:
        for case in cases:
            try:
                check_case(backend, case, device_index)
            except BaseException as e:  # every dry case fails (or skips): only the lowering counts
                if isinstance(e, (KeyboardInterrupt, SystemExit)):
                    raise
    finally:
        del dev.runner, dev.run_step
    return lists


def prebuild_cases(backend, cases: list, device_index: int = 0) -> int:
    """Compile the kernels ``cases`` will launch in a few modules before they run, on a device whose runtime can
    (``KernelModules.prebuild``): a kernel compiler's cost is mostly per module (NVRTC: the whole conformance suite's
    2,589 kernels in 11 modules took 56 s on the 2-core runner; one module a case, several times that). Returns the
    modules built (0 where the device compiles no modules, as the CPU's C kernels)."""
    dev = _device(backend, device_index)
    runtime = getattr(dev, "runtime", None)
    if not hasattr(runtime, "prebuild") or not hasattr(dev, "lowering_options"):
        return 0
    return runtime.prebuild(kernel_lists(backend, cases, device_index))


def sample_cases(cases: list, float64: bool = True) -> list:
    """A deterministic sample of the conformance suite: the first and the middle case of every op (dtypes, shapes
    and attributes vary along an op's cases), and every round-trip, replay and failure case; with ``float64=False``
    no case named float64. ``tensorwire selftest`` and the GPU backends' tests without a GPU run it: the sample covers
    every op's launches, bindings and host steps in minutes less than the whole suite (run in full by the CPU
    backend's tests, and by the GPU backends' on request: ``tests/README.md``; every kernel of the whole suite
    is compiled for the GPU targets by ``tests/backends/test_render_targets.py``)."""
    groups: dict = {}
    for c in cases:
        if float64 or "float64" not in c.name:
            groups.setdefault(c.name.split("[")[0], []).append(c)
    out = []
    for op, cs in groups.items():
        whole = op in ("roundtrip", "replay", "failure")
        out += cs if whole else list({id(c): c for c in (cs[0], cs[len(cs) // 2])}.values())
    return out
