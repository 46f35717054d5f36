"""``tw.nn.parallel.DataParallel``: one replica per device, the batch split along ``dim``, gradients reduced
with ``tw.distributed.all_reduce``.

Unlike torch's ``DataParallel`` (which re-replicates the module on every forward), the replicas persist:
``parameters()`` yields every replica's parameters, so an optimizer built on the wrapper applies the same
reduced gradients to each replica and they stay identical, as in ``DistributedDataParallel``. ``.module``
is the replica on the first device, and ``state_dict()`` is its state with the ``module.`` prefix, as
torch's.

Gradients: the forward splits the input, runs each chunk on its replica, and gathers the outputs on
``output_device`` (``torch.nn.DataParallel``'s contract), so a loss computed on the gathered output
already averages over the whole batch; each replica's gradient is then its chunk's share, and the
full-batch gradient is their **sum**. As backward accumulates into the replicas' ``.grad``, parameters
are reduced in buckets (about ``bucket_cap_mb`` each, in reverse registration order, as DDP): a bucket's
all-reduce is recorded as soon as its last gradient exists, in the same submission as the backward graph.
"""

from __future__ import annotations

import contextlib
import copy
import warnings

from tensorwire import distributed
from tensorwire.context import current_session
from tensorwire.functions import cat
from tensorwire.nn._tensors import alias
from tensorwire.protocol.errors import TensorwireError
from tensorwire.tensor import Tensor, device_name

from .module import Module


class DataParallel(Module):
    """Data parallelism over ``devices`` (default: every device of the session's cluster); torch's ``device_ids``
    names them too (ints are indices of the cluster's devices of the default device's type: ``[0, 1]``)."""

    def __init__(self, module: Module, device_ids=None, output_device=None, dim: int = 0, *, devices=None,
                 bucket_cap_mb: float = 25):
        super().__init__()
        s = current_session()
        if devices is None and device_ids is not None:
            kind = device_name(s.default_device).split(":")[0]
            devices = [f"{kind}:{d}" if isinstance(d, int) else d for d in device_ids]
        if isinstance(output_device, int):
            output_device = f"{device_name(s.default_device).split(':')[0]}:{output_device}"
        devs = [device_name(d) for d in (devices if devices is not None else s.devices())]
        if not devs or len(set(devs)) != len(devs):
            raise ValueError(f"DataParallel needs distinct devices, got {devs}")
        for d in devs:
            s.check_device(d)
        self.devices = devs
        self.output_device = device_name(output_device) if output_device is not None else devs[0]
        self.dim = dim
        self.module = module.to(devs[0])
        replicas = [self.module] + [copy.deepcopy(self.module).to(d) for d in devs[1:]]
        object.__setattr__(self, "_replicas", replicas)  # not submodules: the state is the first replica's
        self._params = [[p for p in r.parameters() if p.requires_grad] for r in replicas]
        self._buckets = self._make_buckets(bucket_cap_mb * (1 << 20))
        self._arrived: dict[int, set] = {}
        self._reduced: dict[int, list] = {}  # bucket -> per replica ([(grad object, its value id)], reduced value)
        self._sync = True
        self._hooks = []
        for r, params in enumerate(self._params):
            for k, p in enumerate(params):
                self._hooks.append(p.register_post_accumulate_grad_hook(self._hook(r, k)))

    # ------------------------------------------------------------------ gradient buckets
    def _make_buckets(self, cap: float) -> list[list[int]]:
        buckets, cur, size = [], [], 0
        for k in reversed(range(len(self._params[0]))):  # last layers' gradients exist first
            p = self._params[0][k]
            cur.append(k)
            size += p.numel() * p.dtype.itemsize
            if size >= cap:
                buckets.append(cur)
                cur, size = [], 0
        if cur:
            buckets.append(cur)
        self._bucket_of = {k: b for b, ks in enumerate(buckets) for k in ks}
        return buckets

    def _hook(self, replica: int, k: int):
        def hook(p: Tensor) -> None:
            b = self._bucket_of[k]
            got = self._arrived.setdefault(b, set())
            got.add((replica, k))
            if len(got) == len(self._buckets[b]) * len(self._replicas):
                del self._arrived[b]
                if self._sync:
                    self._reduce(b)
                else:
                    self._reduced.pop(b, None)  # no_sync: these gradients stay local until a synced backward
        return hook

    def _reduce(self, b: int) -> None:
        """Sum the bucket's gradients over the replicas. A gradient that a backward pass accumulated on top of the
        last reduced value (no ``zero_grad`` in between) contributes only what it accumulated since, so the
        already-reduced part (the same on every replica) is not counted once per replica."""
        if len(self._replicas) == 1:
            return
        ks = self._buckets[b]
        last = self._reduced.pop(b, None)
        flats, bases = [], []
        for r in range(len(self._replicas)):
            grads = [self._params[r][k].grad for k in ks]
            flat = cat([g.reshape(-1) for g in grads]) if len(ks) > 1 else grads[0].reshape(-1)
            base = None
            if last is not None and all(g is obj and g._id != hid for g, (obj, hid) in zip(grads, last[r][0])):
                base = last[r][1]
                flat = flat - base
            flats.append(flat)
            bases.append(base)
        if any(x is None for x in bases):
            bases = [None] * len(bases)  # some replica's gradient was reset: all contribute whole (as before)
            flats = [cat([self._params[r][k].grad.reshape(-1) for k in ks]) if len(ks) > 1
                     else self._params[r][ks[0]].grad.reshape(-1) for r in range(len(self._replicas))]
        distributed.all_reduce(flats, op="sum")
        record = []
        for r, flat in enumerate(flats):
            if bases[r] is not None:
                flat = flat + bases[r]
            off = 0
            objs = []
            for k in ks:
                p = self._params[r][k]
                n = p.numel()
                p.grad = flat[off:off + n].reshape(p.shape)
                objs.append((p.grad, p.grad._id))  # an in-place accumulation changes the id
                off += n
            record.append((objs, alias(flat)))  # a snapshot: accumulating into the views changes flat
        self._reduced[b] = record

    # ------------------------------------------------------------------ forward
    def forward(self, *inputs, **kwargs):
        if self._arrived:
            self._arrived.clear()
            raise TensorwireError("DataParallel: the last backward pass did not produce gradients for every "
                                  "parameter that requires grad, so some buckets were never reduced; make every "
                                  "parameter take part in the loss (or set requires_grad=False on unused ones)")
        n = len(self._replicas)
        if n == 1:
            return self.module(*inputs, **kwargs)
        self._sync_buffers()
        chunks = [self._scatter(x, n) for x in inputs]
        kw_chunks = {k: self._scatter(v, n) for k, v in kwargs.items()}
        outs = []
        for i, replica in enumerate(self._replicas):
            args = [c[i] for c in chunks]
            kws = {k: v[i] for k, v in kw_chunks.items()}
            if args and isinstance(args[0], Tensor) and args[0].shape[self.dim] == 0:
                continue  # fewer samples than devices
            outs.append(replica(*args, **kws))
        return self._gather(outs)

    def _scatter(self, x, n: int):
        if not isinstance(x, Tensor):
            return [x] * n
        parts = x.tensor_split(n, self.dim)
        return [p.to(d) for p, d in zip(parts, self.devices)]

    def _gather(self, outs):
        first = outs[0]
        if isinstance(first, Tensor):
            return cat([o.to(self.output_device) for o in outs], self.dim)
        if isinstance(first, (tuple, list)):
            return type(first)(self._gather([o[i] for o in outs]) for i in range(len(first)))
        if isinstance(first, dict):
            return {k: self._gather([o[k] for o in outs]) for k in first}
        return first

    def _sync_buffers(self) -> None:
        bufs = [list(r.buffers()) for r in self._replicas]
        for group in zip(*bufs):
            if group[0].numel():  # every replica gets the first one's running statistics
                distributed.broadcast(list(group), src=0)

    # ------------------------------------------------------------------ state
    def parameters(self, recurse: bool = True):
        """Every replica's parameters (an optimizer over them keeps the replicas identical)."""
        for r in self._replicas:
            yield from r.parameters(recurse)

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        for i, r in enumerate(self._replicas):
            name = "module" if i == 0 else f"replicas.{i}"
            yield from r.named_parameters(f"{prefix}{name}", recurse, remove_duplicate)

    def train(self, mode: bool = True):
        for r in self._replicas:
            r.train(mode)
        self.training = mode
        return self

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Load into every replica (keys with or without the ``module.`` prefix)."""
        sd = {k.removeprefix("module."): v for k, v in state_dict.items()}
        res = None
        for r, d in zip(self._replicas, self.devices):
            res = r.load_state_dict({k: v.to(d) if isinstance(v, Tensor) else v for k, v in sd.items()}, strict,
                                    assign=assign)
        return res


class DistributedDataParallel(DataParallel):
    """torch's ``DistributedDataParallel`` mapped onto the cluster: the process group is this one process (see
    ``tw.distributed.init_process_group``), and the data parallelism is over the cluster's devices, as
    :class:`DataParallel` (one persistent replica per device, each batch split along ``dim``, gradients summed in
    buckets of ``bucket_cap_mb`` while backward runs, the replicas' buffers broadcast from the first before each
    forward when ``forward_sync_buffers``, or torch's deprecated ``broadcast_buffers``: True by default), so a step
    gives the same result as the module on one device.

    The devices are every device of the cluster of the module's device type (``device_ids`` names the process's
    own device in torch, always index 0 here, and is accepted). :meth:`no_sync` skips the gradient reduction for
    accumulation steps as torch's; ``find_unused_parameters``, ``gradient_as_bucket_view``, ``static_graph`` and
    the other tuning arguments (``skip_all_reduce_unused_params``, ``bucket_cap_mb_list``, ``batched_grad_copy``
    ...) are accepted."""

    def __init__(self, module: Module, device_ids=None, output_device=None, dim: int = 0,
                 broadcast_buffers: bool | None = None, init_sync: bool = True, process_group=None,
                 bucket_cap_mb: float | None = None, find_unused_parameters: bool = False,
                 check_reduction: bool = False, gradient_as_bucket_view: bool = False, static_graph: bool = False,
                 delay_all_reduce_named_params=None, param_to_hook_all_reduce=None, mixed_precision=None,
                 device_mesh=None, skip_all_reduce_unused_params: bool = False, bucket_cap_mb_list=None,
                 batched_grad_copy: bool = False, forward_sync_buffers: bool | None = None):
        if broadcast_buffers is not None:  # (torch 2.13's deprecation, its warnings)
            warnings.warn("Both `broadcast_buffers` and `forward_sync_buffers` were specified. `broadcast_buffers` is "
                          "deprecated and its value is ignored when `forward_sync_buffers` is provided."
                          if forward_sync_buffers is not None else
                          "`broadcast_buffers` is deprecated. Use `forward_sync_buffers` instead. IMPORTANT: unlike "
                          "`broadcast_buffers=False`, `forward_sync_buffers=False` still syncs buffers at init. If you "
                          "rely on buffers NOT being synced at init (e.g. rank-local buffers), keep using "
                          "`broadcast_buffers=False` until `init_sync_buffers` is available.",
                          FutureWarning, stacklevel=2)
        if forward_sync_buffers is None:
            forward_sync_buffers = True if broadcast_buffers is None else broadcast_buffers
        #: whether the replicas' buffers are broadcast from the first before each forward (torch's attribute)
        self.forward_sync_buffers = forward_sync_buffers
        s = current_session()
        params = list(module.parameters()) + list(module.buffers())
        dev = params[0]._dev if params else s.devices()[0]
        kind = dev.split(":")[0]
        devices = [dev] + [d for d in s.devices() if d.split(":")[0] == kind and d != dev]
        super().__init__(module, None, output_device if output_device is not None else dev, dim, devices=devices,
                         bucket_cap_mb=25 if bucket_cap_mb is None else bucket_cap_mb)
        self.device_ids = device_ids
        self.find_unused_parameters = find_unused_parameters
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.static_graph = static_graph

    def _sync_buffers(self) -> None:
        if self.forward_sync_buffers:
            super()._sync_buffers()

    @contextlib.contextmanager
    def no_sync(self):
        """Inside: backward passes accumulate each replica's gradients without reducing them; the first backward
        after the block reduces everything accumulated (torch's gradient-accumulation idiom)."""
        old = self._sync
        self._sync = False
        try:
            yield
        finally:
            self._sync = old
