"""Issue 32 (item 2): the client modules a program can enter the core through import first, in a fresh
interpreter, and leave ``Tensor`` with all its methods.

``import tensorwire.linalg`` as a program's first import used to fail ("cannot import name ... from partially
initialized module"): Tensor's module loads the modules that add its methods (client/_install.py), and one of them
being the first import left it half run for the others. Each module here runs in its own interpreter: what the
process imported before is the point.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CLIENT = Path(__file__).resolve().parents[2] / "client"

#: after the import: Tensor's methods from each module that adds them (client/_install.py), complete
CHECK = """
import sys
import tensorwire._install as I
from tensorwire.tensor import Tensor
assert set(I.MODULES) <= I._loaded, sorted(set(I.MODULES) - I._loaded)
missing = [f"{m}.{n}" for m in I.MODULES for n in getattr(sys.modules[m], "METHODS", {}) if not hasattr(Tensor, n)]
missing += [n for n in ("addmm", "unfold", "cauchy_", "det", "conj", "to_sparse", "angle") if not hasattr(Tensor, n)]
assert isinstance(Tensor.__dict__["real"], property), "complex_ops did not install Tensor.real"
assert not missing, missing
"""


def public_modules() -> list[str]:
    """``tensorwire.<name>`` for each module and package under client/ whose name does not start with ``_``."""
    out = []
    for path in sorted(CLIENT.rglob("*.py")):
        parts = list(path.relative_to(CLIENT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if not parts or any(p.startswith("_") or p == "__pycache__" for p in parts):
            continue
        out.append(".".join(["tensorwire", *parts]))
    return out


def _import_first(module: str) -> str | None:
    """None when ``import module`` (the first import) and :data:`CHECK` pass; else the error's last lines."""
    r = subprocess.run([sys.executable, "-c", f"import {module}\n{CHECK}"], capture_output=True, text=True,
                       timeout=300)
    return None if r.returncode == 0 else "\n".join(r.stderr.strip().splitlines()[-3:])


def test_the_listing_finds_the_public_modules():
    mods = public_modules()
    assert {"tensorwire.linalg", "tensorwire.fft", "tensorwire.special", "tensorwire.math_extras",
            "tensorwire.nn.functional", "tensorwire.optim"} <= set(mods)
    assert "tensorwire._install" not in mods and "tensorwire" not in mods


#: modules a program imports first, besides the core's (below): the torch-like namespaces and the core's front doors
ENTRY = ["tensorwire.linalg", "tensorwire.fft", "tensorwire.special", "tensorwire.masked", "tensorwire.signal",
         "tensorwire.functions", "tensorwire.creation", "tensorwire.context", "tensorwire.nn",
         "tensorwire.nn.functional", "tensorwire.optim", "tensorwire.serialization", "tensorwire.autograd"]


def core_modules() -> list[str]:
    """The public client modules that ``import tensorwire.session`` loads (Tensor's module and every module that adds
    its methods among them): a circle can only be entered through one of them, so a module outside this set that
    imports first enters it as the first of these it imports does (the suite's budget: ~30 interpreters, not 95)."""
    r = subprocess.run([sys.executable, "-c", "import sys, tensorwire.session\nprint(' '.join(sys.modules))"],
                       capture_output=True, text=True, timeout=300, check=True)
    loaded = set(r.stdout.split())
    return [m for m in public_modules() if m in loaded]


def test_every_public_client_module_imports_first():
    mods = sorted(set(core_modules()) | set(ENTRY))
    with ThreadPoolExecutor(max_workers=4) as pool:
        failed = {m: err for m, err in zip(mods, pool.map(_import_first, mods)) if err is not None}
    assert not failed, "\n".join(f"{m}:\n{err}" for m, err in failed.items())
