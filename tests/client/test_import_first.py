"""Issue 32 (item 2): the client modules a program can enter the core through import first, in a fresh
interpreter, and leave ``Tensor`` with all its methods.

``import tensorwire.linalg`` as a program's first import used to fail ("cannot import name ... from partially
initialized module"): Tensor's module loads the modules that add its methods (client/_install.py), and one of them
being the first import left it half run for the others. Each module here is the first tensorwire import of a
process of its own: what the process imported before is the point. The processes are forked from one server that
imported, once, what ``import tensorwire.session`` loads from outside tensorwire (the standard library, numpy, zmq,
msgpack, ...) and nothing of tensorwire (it checks): the circles this proves absent are among tensorwire's own
modules, and each fork saves the interpreter's start and those imports (measured: about half of each process's CPU
time).
"""

from __future__ import annotations

import json
import subprocess
import sys
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


#: the fork server: its first stdin line names the modules to import first (none of tensorwire's), its second the
#: tensorwire modules to check; for each of those it forks a child (at most ``argv[1]`` at a time) whose first
#: tensorwire import is that module, followed by :data:`CHECK`, and which prints one JSON line: [module, error or
#: None]. A child that dies without printing is reported by the caller.
SERVER = r"""
import importlib, json, os, sys, traceback
for name in json.loads(sys.stdin.readline()):
    try:
        importlib.import_module(name)
    except BaseException:  # (a module that only imports as a part of its package's import: it came with it)
        pass
ours = [m for m in sys.modules if m == "tensorwire" or m.startswith("tensorwire.")]
assert not ours, f"the server imported tensorwire modules: {ours}"
modules, check, width = json.loads(sys.stdin.readline()), sys.argv[1], int(sys.argv[2])
running = 0
for module in modules:
    if running == width:
        os.wait()
        running -= 1
    if os.fork() == 0:
        try:
            exec(compile(f"import {module}\n{check}", "<import first>", "exec"), {"__name__": "__main__"})
            err = None
        except BaseException:
            err = "\n".join(traceback.format_exc().strip().splitlines()[-3:])[-3000:]
        os.write(1, (json.dumps([module, err]) + "\n").encode())  # (one write: lines of children never interleave)
        os._exit(0)
    running += 1
while running:
    os.wait()
    running -= 1
"""


def _import_each_first(modules: list[str], preload: list[str], width: int = 4) -> dict[str, str]:
    """module -> the error's last lines, for each of ``modules`` whose first import (in a process forked from
    :data:`SERVER` after it imported ``preload``) or :data:`CHECK` after it failed."""
    r = subprocess.run([sys.executable, "-c", SERVER, CHECK, str(width)], capture_output=True, text=True,
                       timeout=600, input=json.dumps(preload) + "\n" + json.dumps(modules) + "\n")
    assert r.returncode == 0, r.stderr[-3000:]
    answers = dict(json.loads(line) for line in r.stdout.splitlines())
    return {m: answers.get(m, f"no answer (the process died): {r.stderr[-500:]}") for m in modules
            if answers.get(m, "") is not None}


def test_the_listing_finds_the_public_modules():
    mods = public_modules()
    assert {"tensorwire.linalg", "tensorwire.fft", "tensorwire.special", "tensorwire.math_extras",
            "tensorwire.nn.functional", "tensorwire.optim"} <= set(mods)
    assert "tensorwire._install" not in mods and "tensorwire" not in mods


#: modules a program imports first, besides the core's (below): the torch-like namespaces and the core's front doors
ENTRY = ["tensorwire.linalg", "tensorwire.fft", "tensorwire.special", "tensorwire.masked", "tensorwire.signal",
         "tensorwire.functions", "tensorwire.creation", "tensorwire.context", "tensorwire.nn",
         "tensorwire.nn.functional", "tensorwire.optim", "tensorwire.serialization", "tensorwire.autograd"]


def core_modules() -> tuple[list[str], list[str]]:
    """The public client modules that ``import tensorwire.session`` loads (Tensor's module and every module that adds
    its methods among them): a circle can only be entered through one of them, so a module outside this set that
    imports first enters it as the first of these it imports does (the suite's budget: ~45 processes, not 95). And
    the other modules that import loads, in their order: what :data:`SERVER` imports before it forks."""
    r = subprocess.run([sys.executable, "-c", "import sys, tensorwire.session\nprint(' '.join(sys.modules))"],
                       capture_output=True, text=True, timeout=300, check=True)
    loaded = r.stdout.split()
    others = [m for m in loaded if m != "__main__" and m != "tensorwire" and not m.startswith("tensorwire.")]
    return [m for m in public_modules() if m in set(loaded)], others


def test_every_public_client_module_imports_first():
    core, others = core_modules()
    failed = _import_each_first(sorted(set(core) | set(ENTRY)), others)
    assert not failed, "\n".join(f"{m}:\n{err}" for m, err in failed.items())
