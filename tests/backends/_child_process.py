"""How the backend tests talk to the child processes that load a driver or a stand-in (``_opencl_child.py``,
``_gpu_child.py``, ``_mps_child.py``): both ends.

The test runs ``python CHILD [ARGS...] COMMAND OUT.json [COMMAND_ARGS...]`` (:func:`run_child`) and reads the JSON
the child wrote; the child looks its command up in a table and writes the command's result (:func:`serve`). A command
that runs named checks answers ``{name: ""}`` for each check that passed and ``{name: traceback}`` for each that
raised (:func:`run_checks`), so one failing check leaves the others' outcomes. A test module holds a command's
result in a module fixture (:func:`child_fixture`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from collections.abc import Callable, Mapping

import pytest


def run_child(program: list[str], command: str, tmp_dir, *args: str, env: dict | None = None,
              timeout: float = 900) -> dict:
    """Run ``python *program COMMAND OUT.json *args`` (``OUT.json`` in ``tmp_dir``; ``env`` added to this process's
    environment) and return the JSON it wrote, failing with the child's output when it crashed or wrote nothing."""
    out = os.path.join(str(tmp_dir), f"{command}.json")
    r = subprocess.run([sys.executable, *program, command, out, *args], capture_output=True, text=True,
                       timeout=timeout, env={**os.environ, **(env or {})})
    if r.returncode != 0 or not os.path.exists(out):
        raise AssertionError(f"{' '.join(program)} {command} exited with {r.returncode}:\n{r.stdout[-3000:]}\n"
                             f"{r.stderr[-5000:]}")
    with open(out) as f:
        return json.load(f)


def serve(commands: Mapping[str, Callable[[list[str]], object]], argv: list[str]) -> int:
    """The child's side: ``argv`` is ``COMMAND OUT.json [ARGS...]``; writes ``commands[COMMAND](ARGS)`` to
    ``OUT.json`` as JSON (exits naming an unknown command)."""
    cmd, out = argv[0], argv[1]
    if cmd not in commands:
        raise SystemExit(f"unknown command {cmd!r}")
    result = commands[cmd](argv[2:])
    with open(out, "w") as f:
        json.dump(result, f)
    return 0


def names(args: list[str]) -> list[str] | None:
    """The ``;``-separated names a command was given (its first argument), or None without one."""
    return [n for n in args[0].split(";") if n] if args else None


def run_checks(checks: Mapping[str, Callable[..., object]], *args) -> dict[str, str]:
    """Run each check with ``args``: ``{name: ""}`` where it passed, ``{name: its traceback}`` where it raised."""
    out = {}
    for name, fn in checks.items():
        try:
            fn(*args)
            out[name] = ""
        except Exception:
            out[name] = traceback.format_exc()
    return out


def checks_named(*fns: Callable) -> dict[str, Callable]:
    """``{name: fn}`` for check functions named ``_name`` (the name the tests ask for)."""
    return {fn.__name__[1:]: fn for fn in fns}


def child_fixture(child: Callable[..., dict], command: str, *args: str, skip: str | None = None):
    """A module-scoped fixture whose value is ``child(command, TMP, *args)``'s result (run once for the module, in a
    fresh temporary folder), skipped with the reason ``skip`` when that is given."""

    @pytest.fixture(scope="module")
    def result(tmp_path_factory):
        if skip:
            pytest.skip(skip)
        return child(command, tmp_path_factory.mktemp(command), *args)
    return result
