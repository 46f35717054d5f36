"""``benchmarks/scripts.py``'s cold rows: the kernels a run built, counted as cache keys (a kernel's source, its
library and its digest are one kernel), and the host C library's cache that the second cold row starts from."""

from __future__ import annotations

import shutil

import pytest

from benchmarks import scripts as S


def test_kernels_are_counted_by_key_not_by_file(tmp_path):
    c = tmp_path / "c"
    c.mkdir()
    for name in ("8f93.c", "8f93.so", "8f93.so.sha256", "56a4.c", "56a4.so", "56a4.so.sha256", "e1.cl",
                 "tmpab12.so.tmp", "tmpx9"):  # (temporaries a build is writing: no kernel yet)
        (c / name).write_bytes(b"x")
    assert S._kernels(tmp_path) == {"8f93", "56a4", "e1"}
    assert S._kernels(tmp_path / "absent") == set()


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler here")
def test_the_host_library_cache_holds_its_parts_and_nothing_else(tmp_path):
    from tensorwire.backends.cpu import host_c

    cache = S._host_library(tmp_path)
    assert len(S._kernels(cache)) == len(host_c.PARTS)  # (one library a part: the fill, convs, rows by dtype, erf)
    assert all(p.suffix in (".c", ".so", ".sha256") for p in cache.rglob("*") if p.is_file())


def test_the_client_s_one_time_start_runs_another_script_than_the_first():
    """The cold rows' one-time start of the client runs a script of the group, not the first one (whose batch
    structures the client would then keep for its cold run)."""
    files = [f for _, f, _, _ in S._scripts()]
    assert S.ONE_TIME_START in files and files[0] != S.ONE_TIME_START
    assert (S.PROGRAMS / S.ONE_TIME_START).is_file()
