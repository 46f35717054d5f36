"""The CUDA graphs' settings (``backends/gpu_graphs.py``): ``TENSORWIRE_CUDA_GRAPH_WARMUP`` is a whole number of
ordinary runs before a capture; anything else stops the worker at start-up with a message naming the setting,
rather than being replaced by the default without a word. (The graphs themselves: tests/backends/test_cuda_graphs.py.)
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tensorwire.backends import gpu_graphs as G
from tensorwire.protocol.errors import ConfigurationError


@pytest.mark.parametrize(("value", "expect"), [("", G.WARMUP), ("5", 5), ("1", 1), (" 3 ", 3), ("0", None),
                                               ("two", None), ("-3", None), ("2.5", None)])
def test_the_warmup_is_a_whole_number(monkeypatch, value, expect):
    monkeypatch.setenv(G.WARMUP_ENV, value)
    if expect is None:
        with pytest.raises(ConfigurationError, match=G.WARMUP_ENV):
            G.warmup_runs()
    else:
        assert G.warmup_runs() == expect


def test_a_bad_warmup_stops_the_worker_at_start_up():
    env = {**os.environ, G.WARMUP_ENV: "two"}
    r = subprocess.run([sys.executable, "-c", "import tensorwire.backends.gpu_graphs"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "ConfigurationError" in r.stderr and G.WARMUP_ENV in r.stderr, r.stderr
