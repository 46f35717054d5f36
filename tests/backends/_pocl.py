"""Whether the GPU and Metal stand-ins can run kernels here: they run each kernel as its OpenCL twin on PoCL."""

from __future__ import annotations

import functools
import json
import subprocess
import sys


@functools.cache
def opencl_available() -> tuple[bool, str]:
    """``(available, reason)`` of this host's OpenCL device, asked in a child (PoCL stays out of this process);
    asked once per test process, whichever stand-in's module asks first."""
    code = ("import json; from tensorwire.backends.opencl import OpenCLBackend as B; d = B().devices()[0]; "
            "print(json.dumps([d.available, d.reason]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if r.returncode:
        return False, r.stderr[-500:]
    return tuple(json.loads(r.stdout.strip().splitlines()[-1]))
