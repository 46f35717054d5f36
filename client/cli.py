"""The ``tensorwire`` command: ``up``, ``dispatcher``, ``worker``, ``status``, ``keys``, ``hub``, ``selftest`` ...

Credentials are read from files or environment variables, never from command-line values (``ps`` shows those).

Each subcommand is a ``main(argv) -> int`` in the module that holds what it runs; :data:`COMMANDS` names them
(``"module:function"``, as console entry points are) and :func:`command` imports the one that runs, so
``tensorwire --help`` and the client stay thin.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable

# (these modules are all light: the package's __init__ loads nothing, and a subcommand's module loads when it runs)
from tensorwire import __version__
from tensorwire.protocol import PROTOCOL_VERSION
from tensorwire.protocol.errors import TensorwireError

USAGE = """usage: tensorwire COMMAND [options]

commands:
  up          start a local cluster (dispatcher, workers, hub) and print its address; Ctrl-C stops all
  dispatcher  run the dispatcher
  worker      run a device worker (--device cpu:0 --dispatcher tcp://HOST:5556)
  autograd    run the autograd service (--dispatcher tcp://HOST:5556)
  collectives one rank of the collectives service (mpiexec -n N tensorwire collectives --devices ...)
  status      show the cluster's devices (sessions, memory, queue, throughput), hub and services (--watch, --json;
              --local: this host's devices, or why not)
  keys        create CURVE key pairs and a service credential for a cluster across hosts
  slurm       write an sbatch script that runs a whole cluster in one Slurm job (scancel stops it)
  hub         run the model hub, or push/list models (tensorwire hub --help)
  dashboard   serve the cluster's live dashboard in a browser (loopback; --admin-token-file)
  health      exit 0 when the dispatcher or the hub answers and the named services are registered
  selftest    prove one device of this install works, in minutes (--device cuda:0; correctness and speed rows)

Run `tensorwire COMMAND --help` for a command's options; `tensorwire --version` prints the version."""


#: subcommand -> ``"module:function"``: its ``main(argv) -> int``, imported when the subcommand runs (:func:`command`)
COMMANDS: dict[str, str] = {
    "up": "tensorwire.cluster:main",
    "dispatcher": "tensorwire.dispatcher.server:main",
    "worker": "tensorwire.backends.worker:main",
    "autograd": "tensorwire.autograd.service:main",
    "collectives": "tensorwire.collectives.service:main",
    "status": "tensorwire.status:main",
    "keys": "tensorwire.keys:main",
    "slurm": "tensorwire.slurm:main",
    "hub": "tensorwire.hub.cli:main",
    "dashboard": "tensorwire.dashboard.server:main",
    "health": "tensorwire.healthcheck:main",
    "selftest": "tensorwire.selftest:main",
}


def command(name: str) -> Callable[[list[str]], int]:
    """The ``main`` of subcommand ``name`` (:data:`COMMANDS`), its module imported now; KeyError for an unknown
    one."""
    module, _, function = COMMANDS[name].partition(":")
    # lazy: the subcommand's module, named in COMMANDS: a command's start pays for its own imports only
    return getattr(importlib.import_module(module), function)


def version_line() -> str:
    """``tensorwire X.Y.Z (protocol N, Python A.B.C)``: what ``tensorwire --version`` prints."""
    # (sys.version's first word is platform.python_version(), without importing platform: the CLI's start-up time)
    return f"tensorwire {__version__} (protocol {PROTOCOL_VERSION}, Python {sys.version.split()[0]})"


THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
               "NUMEXPR_NUM_THREADS")


def _set_threads(argv: list[str]) -> None:
    """Apply ``--threads N`` (or TENSORWIRE_WORKER_THREADS) to the BLAS/OpenMP pools of this process."""
    n = os.environ.get("TENSORWIRE_WORKER_THREADS")
    for i, a in enumerate(argv):
        if a == "--threads" and i + 1 < len(argv):
            n = argv[i + 1]
        elif a.startswith("--threads="):
            n = a.split("=", 1)[1]
    if n:
        for v in THREAD_VARS:  # for child processes and libraries loaded later
            os.environ[v] = str(int(n))
        try:  # a BLAS already loaded read the variables before: limit it at run time
            # lazy: threadpoolctl, an optional dependency the worker alone uses (~30 ms to import)
            from threadpoolctl import threadpool_limits

            threadpool_limits(int(n))
        except ImportError:
            pass


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``tensorwire`` command; errors print one line and exit 1."""
    try:
        return _main(argv)
    except TensorwireError as e:
        print(f"tensorwire: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    if argv[0] in ("-V", "--version", "version"):
        print(version_line())
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd not in COMMANDS:
        print(f"tensorwire: unknown command {cmd!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    if cmd == "worker":
        _set_threads(rest)  # before numpy is imported: BLAS reads these once
    return command(cmd)(rest)


if __name__ == "__main__":
    sys.exit(main())
