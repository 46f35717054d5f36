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


class OpenCLTwins:
    """What the GPU and Metal stand-ins share: the PoCL device that runs each kernel's OpenCL twin (the same IR kernel
    rendered by the OpenCL renderer). ``standin`` names the stand-in in the error raised where OpenCL is missing."""

    standin = "stand-in"
    _cl = None

    def opencl(self):
        """The PoCL device that runs the kernels' OpenCL twins (opened on first use)."""
        if self._cl is None:
            from tensorwire.backends.opencl import OpenCLBackend

            backend = OpenCLBackend()
            info = backend.devices()[0]
            if not info.available:
                raise RuntimeError(f"the {self.standin} runs kernels on OpenCL, which is not available: {info.reason}")
            self._cl = backend.open(0)
        return self._cl

    def prebuild_twins(self, kernel_lists: list) -> int:
        """Build the OpenCL twins of many kernels in a few programs (PoCL's cost is per program)."""
        return self.opencl().runtime.prebuild(kernel_lists)


def record_renders(renderer: type, registries: list[dict]) -> None:
    """Make every kernel ``renderer`` renders from now on findable by name in ``registries[-1]`` (the newest
    stand-in's registry: its builds look kernels up by name); the class is wrapped once."""
    if getattr(renderer.render, "_standin", False):
        return
    real = renderer.render

    def render(self, kernels):
        for k in kernels:
            registries[-1][k.name] = k
        return real(self, kernels)

    render._standin = True
    renderer.render = render
