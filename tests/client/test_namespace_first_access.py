"""``tw.linalg``, ``tw.special``, ``tw.fft``, ``tw.masked`` and ``tw.signal`` work as the first name a program touches
(``import tensorwire as torch; torch.linalg.pinv(...)``): each loads ``tensorwire.tensor`` first, since importing one
of their modules before it was an import cycle (``cannot import name ... from partially initialized module``)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("name", ["special.i1", "linalg.pinv", "fft.fft", "masked.sum", "signal.windows"])
def test_namespace_as_first_access(name):
    r = subprocess.run([sys.executable, "-c", f"import tensorwire as tw; tw.{name}"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-600:]
