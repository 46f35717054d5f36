"""The source tree's bytecode, compiled before the tests and the benchmarks start their processes.

An editable install (``pip install -e .``, the README's commands) leaves the tree without bytecode, and a machine
that sets ``PYTHONDONTWRITEBYTECODE`` (these test machines do) never writes it: every process the suite starts (each
cluster's dispatcher, workers and services, each CLI run) then compiles every module it imports from source,
~0.5 s of CPU a process (measured: importing the worker, the CPU backend, the session and nn took 0.88 s of CPU
without bytecode, 0.35-0.39 s with it), and a cold benchmark row times the client's first imports compiling too. A
wheel install compiles the package's bytecode when it installs (pip's default); :func:`compile_tree` does the same
for the checkout, once per run (a file whose bytecode is current is one ``stat``), into the ``__pycache__`` folders
that ``.gitignore`` leaves out.
"""

from __future__ import annotations

import compileall
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the folders that hold the package's modules (pyproject's ``package-dir``) and the scripts the tests run
FOLDERS = ("client", "protocol", "dispatcher", "backends", "autograd", "collectives", "hub", "dashboard",
           "tests/programs")


def compile_tree() -> None:
    """Compile the tree's modules to bytecode where Python will not write it itself (a no-op otherwise)."""
    if not sys.dont_write_bytecode:
        return  # (the first import of each module writes it)
    for folder in FOLDERS:
        path = ROOT / folder
        if path.is_dir():
            compileall.compile_dir(str(path), quiet=2, workers=min(2, os.cpu_count() or 1))
