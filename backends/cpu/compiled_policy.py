"""When the CPU's compiled mode compiles a fragment (``compiled.CompiledMixin`` and ``backends/hot.py`` read these):
small fragments run on the numpy kernels until they are hot, long ones always, large ones after their first runs, and
the compiler runs only for a fragment that has earned it. Each knob has its ``TENSORWIRE_CPU_COMPILE_*`` variable
(docs/configuration.md); ``compiled`` gives them as ``compiled.<NAME>``."""

import os

#: fragments whose steps produce fewer elements than this in all run on the numpy kernels until they are hot
#: (:data:`HOT_RUNS`): a compile costs ~60-300 ms the first time a machine sees a fragment, which a small fragment
#: run a few times never earns back (set when a ctypes launch cost ~5 us: a digits CNN step took 1.8 ms compiled
#: against 1.1 ms on numpy; through cffi the compiled step is no slower)
MIN_WORK_ENV = "TENSORWIRE_CPU_COMPILE_MIN_ELEMENTS"
MIN_WORK = 1 << 20
#: fragments of more steps than this run on the numpy kernels too: gcc's time grows with the kernels of a fragment
#: (2,100 kernels: ~25 s), and such fragments are rarely run twice. A loop that records without reading ships
#: 8,192 ops a batch, each batch a new fragment (the README's polynomial fit: five compiles, 145 s on a fresh
#: machine); the largest fragment of a MiniLM forward has 956 steps
MAX_STEPS_ENV = "TENSORWIRE_CPU_COMPILE_MAX_STEPS"
MAX_STEPS = 2048
#: a fragment too small to compile is compiled once it has run this often (``backends/hot.py``); 0: never
HOT_RUNS_ENV = "TENSORWIRE_CPU_COMPILE_HOT_RUNS"
HOT_RUNS = 100
#: a hot fragment (:data:`HOT_RUNS`) whose kernels are not in the kernel cache waits until it has run this often
#: (``backends/hot.py``): ~0.1-0.3 s of gcc against a compiled plan saving 0-70 us of a ~250 us run (issue 37: the
#: char-RNN's cold run); kernels a run before built load in milliseconds, at HOT_RUNS runs. 0: no wait
BUILD_RUNS_ENV = "TENSORWIRE_CPU_COMPILE_BUILD_RUNS"
BUILD_RUNS = 1000
#: a fragment large enough to compile runs on the numpy kernels this many times before it compiles in the background
#: (``backends/hot.py``), so a new fragment never waits for gcc (issue 37: a char-level transformer whose batches
#: changed shape every step compiled a new ~180 KB C file every few seconds, at ~8x the time of running interpreted;
#: a cold kernel cache made every script 1.3-4x slower); 0: compiled before its first run, as before. Two, not one:
#: by its second run a plan of a loop whose batches change shape has seen its structure planned at another shape,
#: and is not compiled (a plan run once or twice never earns its ~3-6 s of gcc back)
LARGE_RUNS_ENV = "TENSORWIRE_CPU_COMPILE_LARGE_RUNS"
LARGE_RUNS = 2
#: a large fragment (:data:`LARGE_RUNS`) whose kernels are not in the kernel cache has them built only once its runs on
#: the numpy kernels have taken this many times the CPU time the build is expected to take (``backends/hot.py``; the
#: kernel cache's ``expected_seconds``: this worker's gcc rate on its source): a compile that its runs have not paid
#: for is seldom paid back (issue 37: the BiLSTM's 8-step cold run spent ~1.5 s of gcc on kernels it never used, 2.78 s
#: against 2.03 s without); kernels a run before built load at LARGE_RUNS runs. 0: built at LARGE_RUNS runs
BUILD_TIME_ENV = "TENSORWIRE_CPU_COMPILE_BUILD_TIME"
BUILD_TIME = 1.0


def build_time() -> float:
    """:data:`BUILD_TIME` as the environment sets it now (read at each use: a large fragment's compile,
    ``CompiledMixin.hot_build_time``, and the recurrent cells' library, ``rnn_cells``, ask the same setting)."""
    return float(os.environ.get(BUILD_TIME_ENV, BUILD_TIME))
