"""Each built-in compiled device keeps the shape ``docs/plugins.md`` ("A compiled device") gives it: a runtime file
of at most 250 lines over a shared layer (``compiled_device.py``, ``c_library.py``, ``gpu_runtime.py``), plus its
renderer subclass. The table there gives each file's count; a file that grows past the bound has taken on something
that belongs in the shared layer, or in a file of its own subject (as OpenCL's discovery)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
MAX_LINES = 250
#: each device's runtime file(s), as the table of docs/plugins.md lists them
RUNTIME_FILES = ("backends/cpu/compiled.py", "backends/opencl/runtime.py", "backends/cuda/runtime.py",
                 "backends/rocm/runtime.py", "backends/mps/runtime.py", "backends/mps/metal_runtime.py")


@pytest.mark.parametrize("path", RUNTIME_FILES)
def test_a_device_runtime_file_is_at_most_250_lines(path):
    lines = len((ROOT / path).read_text().splitlines())
    assert lines <= MAX_LINES, f"{path} has {lines} lines (at most {MAX_LINES}: docs/plugins.md, 'A compiled device')"

