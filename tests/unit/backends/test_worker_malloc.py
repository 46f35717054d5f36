"""A worker keeps its freed heap for reuse (``worker.tune_malloc``, issue 37): with the mmap threshold fixed, glibc
gave the top of the heap back whenever 128 KiB of it was free, and a step's temporaries were faulted in again every
step. Checked in a child process (the test process's malloc stays as it is) by page faults, not time."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from tensorwire.backends import worker

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                                reason="glibc's mallopt")

#: a worker's start-up (the services' fixed mmap threshold, then the worker's trim threshold), then 50 temporaries
#: of 3 MiB, each written and freed as a step's numpy temporaries are: prints whether it tuned and the page faults
PROBE = """
import resource
import numpy as np
from tensorwire.protocol.service import fix_mmap_threshold
from tensorwire.backends.worker import tune_malloc
fix_mmap_threshold()
tuned = tune_malloc()
for _ in range(3):
    np.empty(3 << 20, np.uint8).fill(1)
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):
    np.empty(3 << 20, np.uint8).fill(1)
print(tuned, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
"""


def _probe(trim: str | None) -> tuple[bool, int]:
    env = {k: v for k, v in os.environ.items() if k not in (worker.TRIM_ENV, "TENSORWIRE_MMAP_THRESHOLD")}
    if trim is not None:
        env[worker.TRIM_ENV] = trim
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    tuned, faults = out.stdout.split()
    return tuned == "True", int(faults)


PAGES = 50 * (3 << 20) // 4096  # the probe's temporaries' pages


def test_a_worker_reuses_its_freed_heap_instead_of_faulting_it_in_again():
    tuned, faults = _probe(None)  # the default
    off, faults_off = _probe("0")  # glibc's trim threshold: each temporary's 768 pages faulted in again
    assert tuned and not off
    assert faults_off > PAGES // 2, faults_off
    assert faults < PAGES // 20, faults


def test_a_malformed_trim_threshold_leaves_malloc_as_it_is():
    tuned, faults = _probe("lots")
    assert not tuned and faults > PAGES // 2, faults
