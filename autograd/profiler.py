"""``tw.autograd.profiler``: torch's older profiler namespace, ``torch.autograd.profiler``: :class:`profile` (with the
arguments of torch's ``torch.autograd.profiler.profile``) and ``record_function`` over :mod:`tensorwire.profiler`,
which records what a session does on every process it reaches (its docstring).

Loaded with ``tw.autograd`` by the package (``tensorwire/__init__.py``'s ``_EXTRA``: ``torch.autograd.profiler``
needs no import of its own, as in torch) but not by ``import tensorwire.autograd`` alone: the autograd service
imports that package, and this module loads the client's session.
"""

from __future__ import annotations

import warnings

from tensorwire.profiler import EventList, FunctionEvent, FunctionEventAvg, record_function
from tensorwire.profiler import profile as _profile


class profile(_profile):  # noqa: N801
    """``with tw.autograd.profiler.profile() as prof:``: :class:`tensorwire.profiler.profile` with torch's
    ``torch.autograd.profiler.profile`` arguments. ``enabled=False`` records nothing. ``record_shapes`` (and
    ``with_flops``, which implies it in torch) gives the client's op spans their input shapes; the others ask for
    what tensorwire records anyway (every device, the client's CPU time) or for torch's own tracers (``use_kineto``,
    ``with_stack``, ``profile_memory`` ...): they are accepted and kept as attributes, as torch's. ``use_cuda`` warns
    as torch's does (deprecated for ``use_device="cuda"``). ``session``: the session to profile (default: the current
    one)."""

    def __init__(self, enabled: bool = True, *, use_cuda: bool = False, use_device: str | None = None,
                 record_shapes: bool = False, with_flops: bool = False, profile_memory: bool = False,
                 with_stack: bool = False, with_modules: bool = False, use_kineto: bool = False,
                 use_cpu: bool = True, experimental_config=None, acc_events: bool = False,
                 custom_trace_id_callback=None, post_processing_timeout_s: float | None = None,
                 activity_filters: dict | None = None, session=None):
        super().__init__(session=session, record_shapes=record_shapes or with_flops)
        self.enabled = enabled
        if not enabled:
            return
        self.use_cuda = use_cuda
        if use_cuda:
            warnings.warn("The attribute `use_cuda` will be deprecated soon, please use ``use_device = 'cuda'`` "
                          "instead.", FutureWarning, stacklevel=2)
            use_device = "cuda"
        self.use_device = use_device
        self.with_flops, self.profile_memory, self.with_stack = with_flops, profile_memory, with_stack
        self.with_modules, self.use_kineto, self.use_cpu = with_modules, use_kineto, use_cpu
        self.acc_events = acc_events
        self.experimental_config = experimental_config
        self.custom_trace_id_callback = custom_trace_id_callback
        self.post_processing_timeout_s = post_processing_timeout_s
        self.activity_filters = activity_filters or {}

    def __enter__(self):
        return super().__enter__() if self.enabled else self

    def __exit__(self, exc_type, exc, tb):
        return super().__exit__(exc_type, exc, tb) if self.enabled else False


__all__ = ["profile", "record_function", "EventList", "FunctionEvent", "FunctionEventAvg"]
