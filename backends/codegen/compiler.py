"""Running a kernel compiler (gcc, clang) as a child process bounded in time and memory, which dies with us.

A compile runs under a small POSIX shell supervisor in a session (so a process group) of its own:

* **Time**: ``TENSORWIRE_COMPILE_TIMEOUT`` seconds (default :data:`TIMEOUT_S`). A compile still running then is
  killed with its whole group (the driver, ``cc1``, ``as``, ``ld``) and raises
  :class:`~.cache.KernelCompileError`; the worker runs that fragment interpreted, which gives the same answer. A
  source that timed out is not compiled again by this process (:data:`MAX_TIMED_OUT` remembered).
* **Memory**: ``TENSORWIRE_COMPILE_MEMORY`` of address space (``ulimit -v``, RLIMIT_AS) for the compiler and every
  process it starts (default :data:`MEMORY`; ``none``: no limit). gcc -O3 on the largest C file of this machine's kernel
  cache (471 KB) peaked at ~300 MB resident and built under 1 GiB of address space; past the limit it fails with
  "virtual memory exhausted", which is a compile error like any other.
* **Our death**: the supervisor holds the read end of a pipe whose write end only this process holds. When the
  process dies, SIGKILL included, the pipe reads end-of-file and the supervisor removes the partial output and kills
  its group. ``prctl(PR_SET_PDEATHSIG)`` would reach the driver only (gcc's ``cc1`` and ``ld`` go on running, and
  ``cc1`` may run for tens of seconds), it fires when the *thread* that started the child exits, and setting it needs
  a ``preexec_fn``, which is not safe in a process with threads; a pipe closes with the process, whatever thread
  started the compile.

:func:`sweep_stale` removes the temporaries (``*.tmp``) that a process killed between two of these steps (it creates
the output's temporary before it starts the compiler, and renames it after) left in a kernel cache folder.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import threading
import time

from tensorwire.protocol.errors import ConfigurationError

from ..quota import host_memory, parse_limit
from .cache import KernelCompileError

TIMEOUT_ENV = "TENSORWIRE_COMPILE_TIMEOUT"
#: seconds a compile may take (gcc takes ~20-25 s on the largest fragments the CPU compiles, 2,048 steps)
TIMEOUT_S = 60.0
MEMORY_ENV = "TENSORWIRE_COMPILE_MEMORY"
#: address space a compile may map (RLIMIT_AS of the compiler and its children)
MEMORY = "4GiB"
#: sources that timed out, not compiled again by this process (the oldest forgotten first)
MAX_TIMED_OUT = 1024
#: how often a waiting compile looks for a cancel of its batch
WAIT_SLICE_S = 0.25
#: a temporary in a kernel cache folder older than this (and than twice the time bound) belongs to no live compile
STALE_S = 600.0

# $1: address space in KiB (or "unlimited"); $2: what to remove if we die; then the command. fd 0 is the pipe.
_SUPERVISOR = r"""
exec 3<&0 </dev/null
ulimit -v "$1" 2>/dev/null
gone=$2
shift 2
{ read -r _ <&3; rm -rf -- "$gone"; kill -KILL 0; } >/dev/null 2>&1 &
watch=$!
exec 3<&-
"$@" &
wait $!
status=$?
kill "$watch" 2>/dev/null
exit $status
"""

_timed_out: collections.OrderedDict = collections.OrderedDict()
_lock = threading.Lock()
_swept: set[str] = set()


def timeout_s() -> float:
    """The time bound of one compile (``TENSORWIRE_COMPILE_TIMEOUT``)."""
    text = os.environ.get(TIMEOUT_ENV, "")
    try:
        t = float(text) if text else TIMEOUT_S
    except ValueError:
        raise ConfigurationError(f"{TIMEOUT_ENV}={text!r} is not a number of seconds") from None
    if not t > 0:
        raise ConfigurationError(f"{TIMEOUT_ENV}={text!r} must be more than 0 seconds")
    return t


def memory_kib() -> str:
    """The address-space bound of one compile for ``ulimit -v``: KiB, or ``"unlimited"``."""
    text = os.environ.get(MEMORY_ENV) or MEMORY
    try:
        n = parse_limit(text, host_memory())
    except ValueError:
        raise ConfigurationError(f"{MEMORY_ENV}={text!r}: use a size (4GiB, 2048MB), a share of the host's memory "
                                 f"(25%) or none") from None
    return "unlimited" if n is None else str(max(1, n // 1024))


def run_compiler(cmd: list[str], what: str, remove: str = "", key: str | None = None) -> str:
    """Run compiler command ``cmd`` under the bounds above; its output (stdout and stderr) when it succeeds.

    ``what`` names the compile in errors; ``remove``: the path its partial output lives at (a file or a folder),
    removed should this process die meanwhile; ``key``: what identifies the source, so a compile that timed out is
    not tried again. Raises :class:`KernelCompileError` when the compiler fails, times out or cannot start."""
    limit, memory = timeout_s(), memory_kib()
    if key is not None:
        with _lock:
            if key in _timed_out:
                raise KernelCompileError(f"{what} took longer than {limit:g} s before ({TIMEOUT_ENV}); not compiled "
                                         f"again")
    r, w = os.pipe()  # (both ends close on exec: only the supervisor gets r, as its stdin)
    try:
        try:
            proc = subprocess.Popen(["/bin/sh", "-c", _SUPERVISOR, "tensorwire-compile", memory, remove, *cmd],
                                    stdin=r, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        finally:
            os.close(r)
        try:
            out = _wait(proc, time.monotonic() + limit)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            if key is not None:
                with _lock:
                    _timed_out[key] = None
                    if len(_timed_out) > MAX_TIMED_OUT:
                        _timed_out.popitem(last=False)
            raise KernelCompileError(f"{what} did not finish within {limit:g} s ({TIMEOUT_ENV}); the compiler was "
                                     f"killed and the fragment runs interpreted") from None
        except BaseException:  # (a cancelled batch: the Interrupt arrives here)
            _kill_group(proc)
            raise
    except OSError as e:
        raise KernelCompileError(f"{what}: the compiler could not start: {e}") from None
    finally:
        os.close(w)
    text = out.decode(errors="replace") if out else ""
    if proc.returncode != 0:
        raise KernelCompileError(f"{what} failed (exit status {proc.returncode}):\n{text[-4000:]}")
    return text


def _wait(proc: subprocess.Popen, deadline: float) -> bytes:
    """The compile's output once it ends; raises ``TimeoutExpired`` at ``deadline``. It waits in short slices, so
    that a cancel (``jobs.Interrupt``, raised in this thread between two Python steps) stops the compile at once."""
    for _ in iter(int, 1):  # until it ends or the deadline passes
        left = deadline - time.monotonic()
        try:
            return proc.communicate(timeout=max(0.0, min(WAIT_SLICE_S, left)))[0]
        except subprocess.TimeoutExpired:
            if left <= WAIT_SLICE_S:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the compile's whole process group (its session) and reap the supervisor."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # (its pid is its group's: it leads a session of its own)
    except (ProcessLookupError, PermissionError):
        pass
    proc.communicate()  # every writer of its output is gone: this returns at once


def sweep_stale(folder: str, now: float | None = None) -> list[str]:
    """Remove the temporaries (``*.tmp``) in kernel cache ``folder`` older than :data:`STALE_S` and than twice the
    time bound: no live compile writes them (a killed process left them). Once per folder and process, from the
    first compile there; the paths it removed."""
    with _lock:
        if folder in _swept:
            return []
        _swept.add(folder)
    now = time.time() if now is None else now
    age = max(STALE_S, 2 * timeout_s())
    gone = []
    try:
        names = os.listdir(folder)
    except OSError:
        return gone
    for name in names:
        if not name.endswith(".tmp"):
            continue
        path = os.path.join(folder, name)
        try:
            if now - os.stat(path).st_mtime > age:
                os.unlink(path)
                gone.append(path)
        except OSError:  # (another process removed or renamed it meanwhile)
            pass
    return gone


__all__ = ["MEMORY_ENV", "TIMEOUT_ENV", "run_compiler", "sweep_stale", "timeout_s"]
