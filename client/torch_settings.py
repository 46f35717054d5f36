"""torch's process-wide settings, with what each does here: threads, deterministic algorithms, float32 matmul precision.

Threads. Kernels run in the workers, not in this process, so ``tw.set_num_threads(n)`` sets what the workers of the
next embedded cluster (the one ``tw.connect()`` without an address starts, client/context.py) run kernels on: their
``--threads`` (BLAS and OpenMP pools, ``LocalCluster(worker_threads=n)``). ``tw.set_num_interop_threads(n)`` sets
their batch pools (``TENSORWIRE_EXEC_THREADS``: the threads a worker runs sessions' larger batches on beside its
main loop, several sessions' batches at once). A cluster already running keeps its workers' threads, and a cluster
started elsewhere (``tensorwire up``, ``TENSORWIRE_ADDRESS``) has its own.

Determinism. Every kernel tensorwire generates (the CPU, CUDA, ROCm, OpenCL and Metal targets of
``backends/codegen``) is deterministic run to run (on the same hardware, software and thread counts): reductions add
in a fixed order (``backends/codegen/reduce.py``: fixed blocks and two-stage splits, no atomics; the only atomic in a
generated kernel is the error slot's compare-and-swap), scatters and ``index_put`` with accumulation add each
target's values in index order on one thread (``backends/codegen/kernels.py``), and random numbers are counter-based
(``protocol/random.py``: the same seed and offset give the same bits on every device). The CPU's numpy kernels and
OpenBLAS are deterministic for a given thread count, and cuBLAS (the CUDA backend's matmuls) is bit-reproducible
on one stream, which is how the backend runs it (one handle, one stream, ``backends/cuda/cublas.py``). Two library
calls are not:

- the ``mps`` backend's scatter-add (``scatter_add``, and ``index_put(accumulate=True)``: ``index_add``,
  ``put(accumulate=True)``, ``bincount`` with weights, ``histc``, the backward of indexing, ``gather`` and
  ``embedding``): MLX runs it on the Metal GPU with atomic adds, so floating-point results may differ in their last
  bits from run to run. With ``tw.use_deterministic_algorithms(True)`` such an op on an ``mps`` device raises
  RuntimeError as torch's nondeterministic CUDA ops do (``warn_only=True``: a UserWarning instead); integer and bool
  scatter-adds are exact, so they run;
- the ``rocm`` backend's matmuls, which call hipBLAS at its default atomics mode, in which rocBLAS may run some
  GEMMs with atomics (not bit-reproducible). torch on ROCm switches hipBLAS to ``HIPBLAS_ATOMICS_NOT_ALLOWED`` in
  deterministic mode; tensorwire's workers do not learn the mode, so it neither changes nor refuses them.

Everything else only records the setting.

Matmul precision. ``tw.set_float32_matmul_precision`` sets ``tw.backends.cuda.matmul.allow_tf32`` as torch's does
(``"high"`` and ``"medium"``: True; ``"highest"``: False), and ``tw.get_float32_matmul_precision`` reads it back:
one setting, whichever way a program writes it. tensorwire's kernels compute float32 matmuls in float32 whatever it
says (cuBLAS with ``CUBLAS_COMPUTE_32F``, ``backends/cuda/cublas.py``; torch on the CPU ignores it too).
"""

from __future__ import annotations

import operator
import warnings

from tensorwire.backends import torch_flags as _flags
from tensorwire.protocol.service import EXEC_THREADS_DEFAULT, default_worker_threads

from . import context as _context
from . import session as _session

# -- threads ----------------------------------------------------------------------------------------------------------


def _positive_int(fn: str, n) -> int:
    """``n`` as torch's ``set_num_threads`` takes it: an int (not a bool), positive; RuntimeError otherwise."""
    if isinstance(n, bool) or not hasattr(n, "__index__"):
        raise RuntimeError(f"{fn} expects an int, but got {type(n).__name__}")
    n = operator.index(n)
    if n <= 0:
        raise RuntimeError(f"{fn} expects a positive integer")
    return n


def _embedded_cluster():
    """The embedded cluster of the session module-level functions use now, if that session started one (never
    connects)."""
    s = _context._local.session or _context._default
    if s is None or s.closed:
        return None
    return s._cluster


def set_num_threads(n: int) -> None:
    """Set the BLAS/OpenMP threads each worker of the next embedded cluster runs kernels on (torch.set_num_threads).

    Kernels run in the cluster's workers, so this takes effect when ``tw.connect()`` without an address (or the
    first tensor op of a program that did not connect) starts the embedded cluster: its workers get
    ``--threads n`` (as ``tw.LocalCluster(worker_threads=n)``). It does not change the workers of a cluster already
    running (they keep theirs: call it before the first tensor, as torch asks of its own), a ``LocalCluster`` made
    by hand, or a remote cluster. ``n`` must be a positive int: RuntimeError otherwise, as torch's."""
    _context.embedded_threads = _positive_int("set_num_threads", n)


def get_num_threads() -> int:
    """The BLAS/OpenMP threads each worker runs kernels on (torch.get_num_threads): the running embedded cluster's
    when the current session started one, else what the next one will use (:func:`set_num_threads`'s value, or by
    default the host's cores)."""
    c = _embedded_cluster()
    if c is not None:
        return c.threads
    return _context.embedded_threads or default_worker_threads(1)


def set_num_interop_threads(n: int) -> None:
    """Set the threads each worker of the next embedded cluster runs batches on beside its main loop
    (torch.set_num_interop_threads; ``TENSORWIRE_EXEC_THREADS`` in the workers, default 4): how many sessions'
    larger batches a worker runs at once (one session's batches run one after another whatever the number).

    As torch's, it can be called once, and not once that work can have started: a second call, or a call while the
    current session's embedded cluster runs, is a RuntimeError. A running or remote cluster keeps its own setting.
    ``n`` must be a positive int: RuntimeError otherwise."""
    n = _positive_int("set_num_interop_threads", n)
    if _context.embedded_exec_threads is not None or _embedded_cluster() is not None:
        raise RuntimeError("Error: cannot set number of interop threads after parallel work has started or "
                           "set_num_interop_threads called")
    _context.embedded_exec_threads = n


def get_num_interop_threads() -> int:
    """The threads each worker runs batches on beside its main loop (torch.get_num_interop_threads): the running
    embedded cluster's when the current session started one, else what the next one will use."""
    c = _embedded_cluster()
    if c is not None:
        return c.exec_threads
    return _context.embedded_exec_threads or EXEC_THREADS_DEFAULT


# -- deterministic algorithms -----------------------------------------------------------------------------------------

_deterministic = False
_warn_only = False
#: ops whose kernel on the ``mps`` backend adds with atomics (MLX's scatter-add on the Metal GPU), with the
#: attribute that makes ``index_put`` accumulate
NONDETERMINISTIC_MPS = {"scatter_add": None, "index_put": "accumulate"}


def _check(op: str, attrs: dict | None, device: str, dtype) -> None:
    """``session.deterministic_check`` while the mode is on: raise (or warn) for an op without a deterministic kernel
    on ``device`` (see the module's docstring)."""
    if op not in NONDETERMINISTIC_MPS or not device.startswith("mps") or not dtype.is_inexact:
        return
    flag = NONDETERMINISTIC_MPS[op]
    if flag is not None and not (attrs or {}).get(flag):
        return
    what = f"{op}{'(accumulate=True)' if flag else ''} on {device}"
    msg = (f"{what} does not have a deterministic implementation (MLX adds the values with atomics on the Metal "
           f"GPU, in any order), but you set 'tw.use_deterministic_algorithms(True)'. You can turn off determinism "
           f"just for this operation, or you can use the 'warn_only=True' option, if that's acceptable for your "
           f"application; or run it on another device (every other backend's kernels are deterministic).")
    if _warn_only:
        warnings.warn(msg, UserWarning, stacklevel=4)
    else:
        raise RuntimeError(msg)


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """Whether ops must be deterministic (torch.use_deterministic_algorithms).

    On: an op whose kernel is not deterministic raises RuntimeError when it is recorded (``warn_only=True``: a
    UserWarning, and it runs). In tensorwire those are the ``mps`` backend's floating-point scatter-adds
    (``scatter_add``, ``index_put(accumulate=True)`` and what is built on them: ``index_add``, ``bincount`` with
    weights, the backward of indexing, ``gather`` and ``embedding``). The kernels tensorwire generates, for every
    backend, give the same bits run to run with or without this setting (fixed reduction orders, scatters in index
    order, no atomics, counter-based random numbers), and so do the CPU's BLAS and CUDA's cuBLAS; the ``rocm``
    backend's hipBLAS matmuls are the exception it does not catch (see this module's docstring). ``mode`` and
    ``warn_only`` must be bools (TypeError otherwise, as torch's)."""
    global _deterministic, _warn_only
    for name, v in (("mode", mode), ("warn_only", warn_only)):
        if not isinstance(v, bool):
            raise TypeError(f"use_deterministic_algorithms(): argument '{name}' must be bool, not {type(v).__name__}")
    _deterministic, _warn_only = mode, warn_only
    _session.deterministic_check = _check if mode else None


def are_deterministic_algorithms_enabled() -> bool:
    """Whether :func:`use_deterministic_algorithms` is on (torch.are_deterministic_algorithms_enabled)."""
    return _deterministic


def is_deterministic_algorithms_warn_only_enabled() -> bool:
    """Whether :func:`use_deterministic_algorithms` is on with ``warn_only=True``
    (torch.is_deterministic_algorithms_warn_only_enabled)."""
    return _warn_only


_DEBUG_MODES = {"default": 0, "warn": 1, "error": 2}


def set_deterministic_debug_mode(debug_mode: int | str) -> None:
    """torch.set_deterministic_debug_mode: ``"default"`` or 0 turns :func:`use_deterministic_algorithms` off,
    ``"warn"`` or 1 on with ``warn_only=True``, ``"error"`` or 2 on."""
    if isinstance(debug_mode, str):
        if debug_mode not in _DEBUG_MODES:
            raise RuntimeError(f"invalid value of debug_mode, expected one of `default`, `warn`, `error`, but got "
                               f"{debug_mode}")
        debug_mode = _DEBUG_MODES[debug_mode]
    elif not isinstance(debug_mode, int):
        raise TypeError(f"debug_mode must be str or int, but got {type(debug_mode)}")
    if debug_mode not in (0, 1, 2):
        raise RuntimeError(f"invalid value of debug_mode, expected 0, 1, or 2, but got {debug_mode}")
    use_deterministic_algorithms(debug_mode != 0, warn_only=debug_mode == 1)


def get_deterministic_debug_mode() -> int:
    """torch.get_deterministic_debug_mode: 0 (off), 1 (on, warn only) or 2 (on)."""
    return 0 if not _deterministic else 1 if _warn_only else 2


# -- float32 matmul precision -----------------------------------------------------------------------------------------

_PRECISIONS = ("highest", "high", "medium")
#: the last precision set that allows TF32 ("high" or "medium"), which the flag alone cannot tell apart
_reduced = "high"


def set_float32_matmul_precision(precision: str) -> None:
    """torch.set_float32_matmul_precision: ``"highest"`` sets ``tw.backends.cuda.matmul.allow_tf32`` False,
    ``"high"`` and ``"medium"`` True, as torch's does. tensorwire's float32 matmuls stay float32 whatever it says
    (see this module's docstring). Another string changes nothing and warns, as torch's; a non-string is a
    RuntimeError."""
    global _reduced
    if not isinstance(precision, str):
        raise RuntimeError(f"set_float32_matmul_precision expects a str, but got {type(precision).__name__}")
    if precision not in _PRECISIONS:
        warnings.warn(f"{precision} is not one of 'highest', 'high', or 'medium'; the current "
                      f"set_float32_matmul_precision call has no effect.", UserWarning, stacklevel=2)
        return
    if precision != "highest":
        _reduced = precision
    _flags.cuda_matmul.allow_tf32 = precision != "highest"


def get_float32_matmul_precision() -> str:
    """torch.get_float32_matmul_precision, read from ``tw.backends.cuda.matmul.allow_tf32``: ``"highest"`` when it
    is False; when True, ``"high"`` or ``"medium"``, whichever :func:`set_float32_matmul_precision` set last
    (``"high"`` when the flag was set directly, as torch answers)."""
    return _reduced if _flags.cuda_matmul.allow_tf32 else "highest"
