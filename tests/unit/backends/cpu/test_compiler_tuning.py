"""The CPU compiler's tuning (``backends/cpu/compiler_tuning.py``): kernels are tuned generically where the
compiler does not know this CPU (its ``-march=native`` names an older CPU plus features), natively elsewhere.

The compilers here are small scripts that answer as gcc and clang answer the two questions asked (what
``-march=native`` stands for, which instruction sets a ``-march`` predefines), so both cases run on any host; the
last test asks the host's own compiler."""

from __future__ import annotations

import os
import stat
import textwrap

import pytest

from tensorwire.backends.cpu import compiled, compiler_tuning

ZNVER3 = ["__SSE2__", "__AVX__", "__AVX2__", "__FMA__"]
ZEN5 = ZNVER3 + ["__AVX512F__", "__AVX512BW__", "__AVX512VL__"]


def _compiler(tmp_path, native_line: str, macros: dict[str, list[str]]) -> str:
    """A script answering ``-###`` with ``native_line`` on stderr, and ``-dM -E`` with ``macros[march]``."""
    path = tmp_path / "cc"
    defines = {m: "\\n".join(f"#define {d} 1" for d in ds) for m, ds in macros.items()}
    cases = "\n".join(f'    -march={m}) printf "{d}\\n" ;;' for m, d in defines.items())
    path.write_text(textwrap.dedent("""\
        #!/bin/sh
        case "$*" in *-###*) echo '{line}' >&2; exit 0 ;; esac
        case "$1" in
        {cases}
            *) exit 1 ;;
        esac
        """).format(line=native_line, cases=cases))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


GCC_LINE = ' /usr/libexec/gcc/x86_64-linux-gnu/12/cc1 -E -quiet - -march=znver3 -mavx512f -mtune=znver3'
CLANG_LINE = ' "/usr/bin/clang" "-cc1" "-triple" "x86_64-pc-linux-gnu" "-target-cpu" "znver3" "-target-feature"'


@pytest.mark.parametrize("line", [GCC_LINE, CLANG_LINE], ids=["gcc", "clang"])
def test_a_cpu_the_compiler_does_not_know_is_tuned_generically(tmp_path, line):
    cc = _compiler(tmp_path, line, {"native": ZEN5, "znver3": ZNVER3})
    assert compiler_tuning.native_cpu(cc) == "znver3"
    assert compiler_tuning.tuning(cc) == compiler_tuning.UNKNOWN_CPU_TUNE


@pytest.mark.parametrize("line", [GCC_LINE, CLANG_LINE], ids=["gcc", "clang"])
def test_a_cpu_the_compiler_knows_keeps_its_own_tuning(tmp_path, line):
    cc = _compiler(tmp_path, line, {"native": ZNVER3, "znver3": ZNVER3})
    assert compiler_tuning.tuning(cc) == ()
    cc = _compiler(tmp_path, line, {"native": ZNVER3[:-1], "znver3": ZNVER3})  # (a VM that hides a feature)
    assert compiler_tuning.tuning(cc) == ()


def test_a_compiler_that_cannot_say_keeps_the_flags(tmp_path):
    assert compiler_tuning.tuning(_compiler(tmp_path, "cc1 -E -quiet -", {"native": ZEN5})) == ()  # no name for native
    assert compiler_tuning.tuning(_compiler(tmp_path, GCC_LINE, {"native": ZEN5})) == ()  # znver3's macros refused
    assert compiler_tuning.tuning(str(tmp_path / "absent")) == ()


def test_the_hosts_compiler_is_asked():
    rt = compiled.runtime()
    if rt is None:
        pytest.skip(f"no C compiler here: {compiled.why_not()}")
    cpu = compiler_tuning.native_cpu(rt.compiler)
    native = compiler_tuning._isa_macros(rt.compiler, "native")
    if os.uname().machine == "x86_64":
        assert cpu and "__SSE2__" in native
        assert rt.flags[:len(compiled.FLAGS)] == compiled.FLAGS
        assert rt.flags[len(compiled.FLAGS):] == compiler_tuning.tuning(rt.compiler)
