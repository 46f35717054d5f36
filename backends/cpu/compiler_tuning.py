"""Which tuning the CPU's kernels are compiled with (:mod:`.compiled`'s flags add :func:`tuning`'s).

``-march=native`` makes the compiler target this CPU's instruction sets and tune for it; a compiler older than its
CPU tunes for the nearest CPU it knows instead, which can cost more than the instruction sets gain (below).
"""

from __future__ import annotations

import functools
import logging
import os
import re
import subprocess

log = logging.getLogger("tensorwire.kernels")

#: added to the flags where the compiler does not know this CPU (:func:`tuning`); in the kernel cache's key, so
#: libraries built before the rule are not reused where it applies
UNKNOWN_CPU_TUNE = ("-mtune=generic",)

#: the instruction sets a compiler's predefined macros name (``__AVX512F__``, ``__AMX_TILE__``, ``__FMA__`` ...)
_ISA_MACRO = re.compile(r"#define (__(?:AVX|AMX|FMA|SSE)\w*__) ")


def _ask(compiler: str, march: str, *args: str) -> subprocess.CompletedProcess | None:
    """``compiler -march=<march> <args> -E -x c /dev/null``, preprocessing nothing: its answer, or None where it
    could not be run."""
    try:
        return subprocess.run([compiler, f"-march={march}", *args, "-E", "-x", "c", os.devnull], capture_output=True,
                              text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None


def _isa_macros(compiler: str, march: str) -> frozenset[str]:
    """The instruction-set macros ``compiler -march=<march>`` predefines (empty where it cannot say)."""
    out = _ask(compiler, march, "-dM")
    return frozenset(_ISA_MACRO.findall(out.stdout)) if out is not None and out.returncode == 0 else frozenset()


def native_cpu(compiler: str) -> str:
    """The CPU name ``-march=native`` stands for in ``compiler`` (gcc: cc1's ``-march=``; clang: ``-target-cpu``),
    or ``""`` where it does not say."""
    out = _ask(compiler, "native", "-###")
    found = out and re.search(r'"-target-cpu" "([\w.-]+)"|-march=(?!native)([\w.-]+)', out.stderr)
    return next(filter(None, found.groups()), "") if found else ""


@functools.lru_cache(maxsize=64)
def accepts(compiler: str, flag: str) -> bool:
    """Whether ``compiler`` takes command-line flag ``flag`` (gcc's ``-fno-ipa-cp-clone`` is an error to clang);
    asked once a process."""
    out = _ask(compiler, "native", flag)
    return out is not None and out.returncode == 0


def usable(compiler: str, flags: tuple[str, ...]) -> tuple[str, ...]:
    """Those of ``flags`` that ``compiler`` takes (:func:`accepts`): a library's own flags (``host_c.PART_FLAGS``)
    are gcc's, and left out where the compiler is clang."""
    return tuple(f for f in flags if accepts(compiler, f))


def tuning(compiler: str) -> tuple[str, ...]:
    """Flags added to :data:`.compiled.FLAGS` for this CPU: :data:`UNKNOWN_CPU_TUNE` where the compiler does not know
    it, else none.

    A compiler older than its CPU reads ``-march=native`` as the nearest CPU it knows plus the features it detects,
    and tunes for that CPU: gcc 12 on a Zen 5 EPYC takes it for a Zen 3 with AVX-512 (``-march=znver3 -mavx512f
    ...``, ``-mtune=znver3``). Zen 3's tuning folds loads into the multiply-adds, so the conv weight gradient's
    register block reloaded every input vector for each of its four channels (24 loads for 12 FMAs, not 7) and ran
    at 38-47 GFLOP/s against 95-102 tuned generically (``host_c``'s ``[100, 16, 32, 32]`` weight gradient 12.2 ->
    5.0 ms, one thread); the forward convs were 2.2-2.6 ms either way. Such a CPU is seen by its macros: the name
    ``-march=native`` stands for predefines fewer instruction sets than ``native`` itself."""
    cpu = native_cpu(compiler)
    if not cpu:
        return ()
    native, named = _isa_macros(compiler, "native"), _isa_macros(compiler, cpu)
    if not native or not named or native <= named:
        return ()
    log.info("%s does not know this CPU (-march=native is %s with more): kernels built with %s",
             os.path.basename(compiler), cpu, " ".join(UNKNOWN_CPU_TUNE))
    return UNKNOWN_CPU_TUNE
