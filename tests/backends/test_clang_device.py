"""An out-of-tree compiled device (tests/plugins/tw_clang_device, device type ``clang``) in the shape
``docs/plugins.md`` gives: a runtime file over ``tensorwire.backends.compiled_device`` plus the C renderer, compiled by
clang. It passes the conformance suite with every op a kernel (the suite's sample here: every op's first and middle
case and every round-trip, replay and failure case; the whole suite passed too, in ~30 s, when this was written).

The suite's kernels are compiled first in a few modules (``KernelModules.prebuild``: a compiler's fixed cost per
module dominates small kernels), so running the cases builds only the single steps the executor runs one at a time.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tensorwire.backends import testing as T
from tensorwire.backends.testing.suite import _device
from tests.backends import _child_cases as C

PLUGIN = Path(__file__).resolve().parents[1] / "plugins" / "tw_clang_device"
sys.path.insert(0, str(PLUGIN))
import tw_clang_device as P  # noqa: E402 - found on the path just added

WHY = P.discover().reason
pytestmark = pytest.mark.skipif(bool(WHY), reason=WHY or "clang is installed")


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("TENSORWIRE_KERNEL_CACHE", str(tmp_path_factory.mktemp("clang-kernels")))  # a real compile
    b = P.ClangBackend()
    yield b
    mp.undo()


def test_the_device_is_a_runtime_file_within_250_lines():
    source = (PLUGIN / "tw_clang_device" / "__init__.py").read_text()
    assert len(source.splitlines()) <= 250
    b = P.ClangBackend()
    assert b.kernels == {} and b.missing_primitives() == [] and b.native == frozenset()
    info, = b.devices()
    assert info.available and info.name.startswith("C kernels"), info


def test_conformance(backend):
    cases = C.sample(T.conformance_cases())
    dev = _device(backend, 0)
    modules = dev.runtime.prebuild(C.kernel_lists(backend, cases), per_module=1024)
    built = dev.runtime.builds
    report = T.run_conformance(backend, 0, cases=cases)
    assert report.ok, report.summary(40)
    assert modules >= 1 and dev.runtime.builds - built < 40, (modules, dev.runtime.builds - built)
