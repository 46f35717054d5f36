"""Compiler flags a C library is built with besides the runtime's (``LibraryRuntime.load``'s ``flags``, the host
library's ``PART_FLAGS``): they reach the compiler, key the library in the kernel cache apart from the same source
built without them, and a flag the compiler does not take is left out rather than failing the build."""

from __future__ import annotations

import ctypes
import stat
import textwrap

import pytest

from tensorwire.backends.cpu import compiled, compiler_tuning, host_c

needs_cc = pytest.mark.skipif(compiled.runtime() is None, reason=f"the CPU cannot compile: {compiled.why_not()}")

SOURCE = """
#ifndef TW_FLAG_VALUE
#define TW_FLAG_VALUE 1
#endif
int tw_flag_value(void) { return TW_FLAG_VALUE; }
"""


def _value(lib) -> int:
    f = lib.cdll.tw_flag_value
    f.restype = ctypes.c_int
    return f()


@needs_cc
def test_flags_reach_the_compiler_and_key_the_library(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORWIRE_KERNEL_CACHE", str(tmp_path / "kernels"))
    rt = compiled.runtime()
    plain = rt.load(SOURCE, what="a test library")
    seven = rt.load(SOURCE, what="a test library", flags=("-DTW_FLAG_VALUE=7",))
    assert (_value(plain), _value(seven)) == (1, 7)  # (two libraries: the flags are part of the key)
    assert _value(rt.load(SOURCE, what="a test library", flags=("-DTW_FLAG_VALUE=7",))) == 7  # (the cached one)
    assert len(list((tmp_path / "kernels").rglob("*.so"))) == 2


def _compiler(tmp_path, refused: str) -> str:
    """A compiler script that fails on ``refused`` as clang fails on a gcc-only flag, and takes anything else."""
    path = tmp_path / "cc"
    path.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        case "$*" in *{refused}*) echo "cc: error: unknown argument: '{refused}'" >&2; exit 1 ;; esac
        exit 0
        """))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_a_flag_the_compiler_refuses_is_left_out(tmp_path):
    cc = _compiler(tmp_path, "-fno-ipa-cp-clone")
    assert not compiler_tuning.accepts(cc, "-fno-ipa-cp-clone")
    assert compiler_tuning.accepts(cc, "-fno-tree-loop-distribute-patterns")
    assert compiler_tuning.usable(cc, ("-fno-ipa-cp-clone", "-DX=1")) == ("-DX=1",)


@needs_cc
def test_the_host_compiler_takes_the_host_library_flags_or_they_are_left_out():
    """gcc takes ``-fno-ipa-cp-clone``; clang does not, and builds the conv part with its own flags alone."""
    rt = compiled.runtime()
    flags = host_c.PART_FLAGS["conv"]
    got = compiler_tuning.usable(rt.compiler, flags)
    assert got == flags if "clang" not in rt.version.lower() else got == ()
    assert got == tuple(f for f in flags if compiler_tuning.accepts(rt.compiler, f))
