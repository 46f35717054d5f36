"""The source tree's bytecode, compiled before the tests and the benchmarks start their processes.

An editable install (``pip install -e .``, the README's commands) leaves the tree without bytecode, and a machine
that sets ``PYTHONDONTWRITEBYTECODE`` (these test machines do) never writes it: every process the suite starts (each
cluster's dispatcher, workers and services, each CLI run) then compiles every module it imports from source,
~0.5 s of CPU a process (measured: importing the worker, the CPU backend, the session and nn took 0.88 s of CPU
without bytecode, 0.35-0.39 s with it), and a cold benchmark row times the client's first imports compiling too. A
wheel install compiles the package's bytecode when it installs (pip's default); :func:`compile_tree` does the same
for the checkout, once per run (a file whose bytecode is current is one ``stat``), into the ``__pycache__`` folders
that ``.gitignore`` leaves out.

The tests themselves alike: their helper modules (``tests/backends/_gpu_child.py`` and the stand-ins, which every
child process imports) are compiled here, and the test modules and conftests, which pytest imports with their asserts
rewritten, get pytest's own cached rewrite (``*-pytest-*.pyc``) written while the run collects
(:func:`writing_bytecode`, tests/conftest.py): with ``PYTHONDONTWRITEBYTECODE`` pytest rewrites all ~330 of them on
every run (measured: collecting tests/client, tests/backends and tests/unit took 18-20 s of CPU, 12 s with the
rewrites cached).
"""

from __future__ import annotations

import compileall
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the folders that hold the package's modules (pyproject's ``package-dir``) and the scripts the tests run
FOLDERS = ("client", "protocol", "dispatcher", "backends", "autograd", "collectives", "hub", "dashboard", "tests")
#: the modules pytest imports rewritten (its ``python_files`` and the conftests): their bytecode is pytest's
#: (:func:`writing_bytecode`), not compiled here
PYTEST_REWRITES = re.compile(r"[\\/](test_[^\\/]*|conftest)\.py$")


def compile_tree() -> None:
    """Compile the tree's modules to bytecode where Python will not write it itself (a no-op otherwise)."""
    if not sys.dont_write_bytecode:
        return  # (the first import of each module writes it)
    for folder in FOLDERS:
        path = ROOT / folder
        if path.is_dir():
            compileall.compile_dir(str(path), quiet=2, workers=min(2, os.cpu_count() or 1), rx=PYTEST_REWRITES)


@contextmanager
def writing_bytecode() -> Iterator[None]:
    """Python (and pytest's assertion rewriting) writes bytecode inside the block, where ``PYTHONDONTWRITEBYTECODE``
    says not to: around the run's collection, so that the test modules' rewrites are cached as :func:`compile_tree`
    caches the rest (a no-op where Python writes bytecode anyway)."""
    before = sys.dont_write_bytecode
    sys.dont_write_bytecode = False
    try:
        yield
    finally:
        sys.dont_write_bytecode = before
