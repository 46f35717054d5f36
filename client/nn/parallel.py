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

import copy

from tensorwire import distributed
from tensorwire.protocol.errors import TensorwireError
from tensorwire.tensor import Tensor, device_name

from .module import Module


class DataParallel(Module):
    """Data parallelism over ``devices`` (default: every device of the session's cluster)."""

    def __init__(self, module: Module, devices=None, output_device=None, dim: int = 0, bucket_cap_mb: float = 25):
        super().__init__()
        from tensorwire.context import current_session

        s = current_session()
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
                self._reduce(self._buckets[b])
        return hook

    def _reduce(self, ks: list[int]) -> None:
        from tensorwire.functions import cat

        if len(self._replicas) == 1:
            return
        flats = [cat([self._params[r][k].grad.reshape(-1) for k in ks]) if len(ks) > 1
                 else self._params[r][ks[0]].grad.reshape(-1) for r in range(len(self._replicas))]
        distributed.all_reduce(flats, op="sum")
        for r, flat in enumerate(flats):
            off = 0
            for k in ks:
                p = self._params[r][k]
                n = p.numel()
                p.grad = flat[off:off + n].reshape(p.shape)
                off += n

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
        from tensorwire.functions import cat

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
            res = r.load_state_dict({k: v.to(d) if isinstance(v, Tensor) else v for k, v in sd.items()}, strict)
        return res

    def extra_repr(self) -> str:
        return f"devices={self.devices}, output_device={self.output_device!r}"
