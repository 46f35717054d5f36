"""``tw.cuda``: ``torch.cuda``'s device functions, answered from the connected cluster's ``cuda`` devices (see
:mod:`tensorwire.accelerator`).

Beyond the device-type functions every accelerator module has (:data:`~tensorwire.accelerator.MODULE_FUNCTIONS`),
this module answers the ``torch.cuda`` functions that have a meaning here from what the cluster reports:

* memory, from :func:`tensorwire.memory_stats` (the ``cuda`` worker's caching allocator, ``backends/gpu_allocator``):
  :func:`memory_reserved`, :func:`max_memory_allocated`, :func:`max_memory_reserved`, :func:`memory_stats` (torch's
  keys for the figures the worker reports), :func:`memory_summary`, :func:`mem_get_info`. These allocator figures
  are the device's, over every session on it (a session is alone on its worker's device in the usual cluster); the
  peaks count from the worker's start. ``memory_allocated`` stays this session's bytes;
* the device, from the cluster's device list (:meth:`Session.device_info`): :func:`get_device_properties`
  (``name``, ``total_memory``, ``major``, ``minor``) and :func:`get_device_capability`;
* the generator: tensorwire has one counter-based generator for every device (:mod:`tensorwire.random`), so
  :func:`seed`, :func:`seed_all`, :func:`get_rng_state`, :func:`set_rng_state` (and their ``_all`` forms) read or
  set that one generator, exactly as ``manual_seed`` does: seeding "cuda" seeds the CPU's numbers too;
* :func:`init`, :func:`is_initialized`, :func:`ipc_collect`.

Where torch without CUDA raises (``AssertionError: Torch not compiled with CUDA enabled``), these raise
``AssertionError`` on a cluster without a ``cuda`` device; where it answers 0, ``{}`` or None, so do they.
Not here: ``reset_peak_memory_stats``/``reset_max_memory_allocated`` (the peak lives in the worker's allocator and no
request resets it), ``utilization`` (workers do not report it), and ``Stream``, ``Event``, ``current_stream``,
``default_stream``, ``stream``, ``nvtx`` and CUDA graphs (tensorwire exposes no streams).
"""

from __future__ import annotations

import collections
import re
import weakref

from . import amp as _amp
from . import context as _context
from . import random as _random
from .accelerator import MODULE_FUNCTIONS, device_indices, module_functions
from .context import current_session
from .functions import memory_stats as _cluster_memory_stats

_functions = module_functions("cuda")
globals().update(_functions)  # is_available, device_count, set_device ... (torch.cuda's names)
_cuda = _functions["current_device"].__self__  # the DeviceType behind them (its current device)
__all__ = [*MODULE_FUNCTIONS, "amp", "memory_reserved", "max_memory_allocated", "max_memory_reserved",
           "memory_stats", "memory_summary", "mem_get_info", "get_device_properties", "get_device_capability",
           "seed", "seed_all", "initial_seed", "get_rng_state", "get_rng_state_all", "set_rng_state",
           "set_rng_state_all", "init", "is_initialized", "ipc_collect"]

#: what :meth:`CUDABackend.describe` appends to the GPU's name: its compute capability
_CAPABILITY = re.compile(r"^(?P<name>.*) \(sm_(?P<major>\d+?)(?P<minor>\d)\)$")
#: the sessions :func:`init` found cuda devices on
_initialized: weakref.WeakSet = weakref.WeakSet()


def _no_cuda() -> AssertionError:
    return AssertionError("the connected cluster has no cuda device (torch without CUDA raises this: "
                          "'Torch not compiled with CUDA enabled')")


def _index(device=None, *, require: bool = True) -> int:
    """The cuda device index ``device`` names (None: the current device; an int, ``"cuda:1"`` or a ``tw.device``);
    AssertionError when ``require`` and the cluster has no cuda device."""
    if require and not device_indices("cuda"):
        raise _no_cuda()
    if device is None:
        return _cuda.current_device()
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        kind, _, i = device.partition(":")
        if kind != "cuda":
            raise ValueError(f"expected a cuda device, got {device!r}")
        return int(i or _cuda.current_device())
    if getattr(device, "type", "cuda") != "cuda":
        raise ValueError(f"expected a cuda device, got {device!r}")
    i = getattr(device, "index", None)
    return _cuda.current_device() if i is None else int(i)


def _device_memory(device=None) -> dict:
    """``tw.memory_stats()``'s entry for the cuda device (``{}`` on a cluster without one)."""
    if not device_indices("cuda"):
        return {}
    return _cluster_memory_stats().get("devices", {}).get(f"cuda:{_index(device)}", {})


# -- memory ----------------------------------------------------------------------------------------------------------

def memory_reserved(device=None) -> int:
    """Bytes the device's caching allocator holds (in use by tensors or cached for reuse); 0 without a cuda device."""
    return int(_device_memory(device).get("reserved_bytes", 0))


def max_memory_allocated(device=None) -> int:
    """The most bytes the device's tensors held at once (allocator blocks, every session), since the worker
    started; 0 without a cuda device."""
    return int(_device_memory(device).get("peak_allocated_bytes", 0))


def max_memory_reserved(device=None) -> int:
    """The most bytes the device's caching allocator held at once, since the worker started; 0 without a cuda
    device."""
    return int(_device_memory(device).get("peak_reserved_bytes", 0))


#: torch.cuda.memory_stats' keys for the figures the cuda worker's allocator reports (``tw.memory_stats``' names)
_TORCH_KEYS = {
    "allocated_bytes.all.current": "allocated_bytes", "allocated_bytes.all.peak": "peak_allocated_bytes",
    "active_bytes.all.current": "allocated_bytes", "active_bytes.all.peak": "peak_allocated_bytes",
    "reserved_bytes.all.current": "reserved_bytes", "reserved_bytes.all.peak": "peak_reserved_bytes",
    "requested_bytes.all.current": "requested_bytes", "inactive_split_bytes.all.current": "cached_bytes",
    "allocation.all.current": "buffers", "segment.all.current": "segments",
    "num_device_alloc": "driver_allocs", "num_device_free": "driver_frees",
}


def memory_stats(device=None) -> collections.OrderedDict:
    """``torch.cuda.memory_stats``: those of torch's keys the worker's allocator reports (``allocated_bytes.all``'s
    and ``reserved_bytes.all``'s ``current`` and ``peak``, ``requested_bytes.all.current``, ``allocation`` and
    ``segment`` counts, ``num_device_alloc``/``num_device_free``; ``inactive_split_bytes`` is the cached free
    bytes), sorted as torch sorts them; empty without a cuda device, as torch's is without CUDA."""
    mem = _device_memory(device)
    return collections.OrderedDict(sorted((k, int(mem[v])) for k, v in _TORCH_KEYS.items() if v in mem))


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """A short table of :func:`memory_stats`' figures (torch's summary has more rows: the worker reports these);
    like torch without CUDA, ``KeyError`` when there are none."""
    stats = memory_stats(device)
    rows = [("Allocated memory", "allocated_bytes.all"), ("Reserved memory", "reserved_bytes.all")]
    lines = [f"tensorwire cuda:{_index(device, require=False)} memory summary", f"{'':<20}{'current':>16}{'peak':>16}"]
    for label, key in rows:
        lines.append(f"{label:<20}{_fmt(stats[key + '.current']):>16}{_fmt(stats.get(key + '.peak', 0)):>16}")
    lines.append(f"{'Allocations':<20}{stats.get('allocation.all.current', 0):>16}")
    lines.append(f"{'Segments':<20}{stats.get('segment.all.current', 0):>16}")
    return "\n".join(lines) + "\n"


def _fmt(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)


def mem_get_info(device=None) -> tuple[int, int]:
    """``(free, total)`` bytes of the device: ``total`` is the device's memory; ``free`` is that less what the
    worker's caching allocator reserved (the driver's own free figure, which also counts contexts and other
    processes, is not reported). AssertionError without a cuda device."""
    _index(device)
    mem = _device_memory(device)
    total = int(mem.get("total_bytes") or _properties(device).total_memory)
    return max(total - int(mem.get("reserved_bytes", 0)), 0), total


# -- the device --------------------------------------------------------------------------------------------------------

class _CudaDeviceProperties:
    """``torch.cuda.get_device_properties``' answer, with the fields the worker's device description gives:
    ``name``, ``total_memory``, ``major``, ``minor`` (no ``multi_processor_count``: workers do not report it)."""

    def __init__(self, name: str, total_memory: int, major: int, minor: int):
        self.name, self.total_memory, self.major, self.minor = name, total_memory, major, minor

    def __repr__(self) -> str:
        return (f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory // (1 << 20)}MB)")


def _properties(device=None) -> _CudaDeviceProperties:
    i = _index(device)
    for info in current_session().device_info():
        if info.get("device") == f"cuda:{i}":
            m = _CAPABILITY.match(info.get("name") or "")
            name, major, minor = (m["name"], int(m["major"]), int(m["minor"])) if m else (info.get("name"), 0, 0)
            return _CudaDeviceProperties(name or f"cuda:{i}", int(info.get("memory_bytes") or 0), major, minor)
    raise ValueError(f"cuda:{i} is not one of the cluster's devices: {current_session().devices()}")


def get_device_properties(device=None) -> _CudaDeviceProperties:
    """The device's ``name``, ``total_memory`` and compute capability (``major``, ``minor``); AssertionError without
    a cuda device."""
    return _properties(device)


def get_device_capability(device=None) -> tuple[int, int]:
    """The device's compute capability ``(major, minor)``; AssertionError without a cuda device."""
    p = _properties(device)
    return p.major, p.minor


# -- the generator (one for every device) ----------------------------------------------------------------------------

def seed() -> None:
    """Seed the generator with a random number (one counter-based generator serves every device, the CPU's too)."""
    _random.seed()


seed_all = seed


def initial_seed() -> int:
    """The generator's seed (one generator serves every device); AssertionError without a cuda device."""
    _index()
    return _random.initial_seed()


def get_rng_state(device="cuda"):
    """The generator's state, a uint8 tensor (the one generator every device shares: the same as
    ``tw.get_rng_state()``); AssertionError without a cuda device."""
    _index(device)
    return _random.get_rng_state()


def get_rng_state_all() -> list:
    """:func:`get_rng_state` once per cuda device (one shared state; ``[]`` without a cuda device)."""
    return [_random.get_rng_state() for _ in device_indices("cuda")]


def set_rng_state(new_state, device="cuda") -> None:
    """Restore the generator's state from :func:`get_rng_state` (every device's numbers: one generator serves them
    all)."""
    _random.set_rng_state(new_state)


def set_rng_state_all(new_states) -> None:
    """:func:`set_rng_state` of the states of :func:`get_rng_state_all` (the last wins: they are one generator's)."""
    for state in new_states:
        _random.set_rng_state(state)


# -- initialisation ----------------------------------------------------------------------------------------------------

def init() -> None:
    """Connect and check the cluster has a cuda device (AssertionError otherwise, as torch without CUDA); there is no
    CUDA state in this process to set up."""
    _index()
    _initialized.add(current_session())


def is_initialized() -> bool:
    """Whether :func:`init` found cuda devices on the current session's cluster (asking neither connects nor asks
    the cluster, as torch's does not initialise CUDA)."""
    s = getattr(_context._local, "session", None) or _context._default
    return s is not None and not s.closed and s in _initialized


def ipc_collect() -> None:
    """Nothing to do: no CUDA memory is shared between processes through CUDA IPC handles here (tensors live on the
    workers, which free their own buffers). AssertionError without a cuda device, as torch's."""
    _index()


class amp:  # noqa: N801 - torch.cuda.amp
    """``torch.cuda.amp``: :class:`tensorwire.amp.autocast` and :class:`tensorwire.amp.GradScaler` for ``cuda``
    (PyTorch's older spelling of ``torch.amp.autocast("cuda")``)."""

    @staticmethod
    def autocast(enabled: bool = True, dtype=None, cache_enabled: bool = True):
        return _amp.autocast("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    @staticmethod
    def GradScaler(*args, **kwargs):  # noqa: N802 - torch's name
        return _amp.GradScaler("cuda", *args, **kwargs)
