"""``benchmarks/instructions.py``: a counted run's callgrind files read into instructions by process role, and a
step's count as two runs' difference (no valgrind needed: the files are written here as callgrind writes them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import instructions as I


def _write(folder: Path, pid: int, cmd: str, total: int) -> None:
    (folder / f"cg.{pid}").write_text(f"# callgrind format\nversion: 1\ncreator: callgrind-3.19.0\npid: {pid}\n"
                                      f"cmd:  {cmd}\npart: 1\n\npositions: line\nevents: Ir\nsummary: {total}\n\n"
                                      "fl=(1) x.c\nfn=(1) main\n0 5\n\ntotals: 999\n")


def test_counts_by_role(tmp_path):
    py = "/usr/bin/python3"
    _write(tmp_path, 10, f"{py} -m benchmarks.instructions --child tensorwire x.py 2 7", 1000)
    _write(tmp_path, 11, f"{py} -m tensorwire.cli worker --device cpu:0 --dispatcher ipc:///tmp/d", 300)
    _write(tmp_path, 12, f"{py} -m tensorwire.cli dispatcher --address tcp://127.0.0.1:5555", 40)
    _write(tmp_path, 13, f"{py} -m tensorwire.cli autograd --dispatcher ipc:///tmp/d", 20)
    _write(tmp_path, 14, "/usr/bin/cc --version", 7)
    _write(tmp_path, 15, "/usr/bin/cc -dumpversion", 5)
    (tmp_path / "cg.16").write_text("cmd: cut off before its summary\n")  # (a process killed early: no count)
    assert I._read_counts(tmp_path) == {"client": 1000, "worker": 300, "dispatcher": 40, "autograd": 20, "other": 12}


def test_a_step_is_the_difference_of_two_runs(monkeypatch):
    runs = {3: {"client": 1000, "worker": 500, "other": 9}, 13: {"client": 1500, "worker": 700, "autograd": 30}}
    monkeypatch.setattr(I, "count", lambda side, path, warm, steps: runs[steps])
    got = I.per_step("tensorwire", Path("x.py"), 2, (3, 13))
    assert got == pytest.approx({"client": 50.0, "worker": 20.0, "autograd": 3.0, "other": -0.9})
