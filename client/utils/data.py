"""``tw.utils.data``: ``Dataset``, ``TensorDataset``, ``DataLoader`` and samplers, as torch's.

Batches are uploaded efficiently: a :class:`TensorDataset` of numpy arrays gathers each batch on the client
and uploads it as one buffer per field (all fields in one message); a :class:`TensorDataset` of cluster
tensors never uploads data at all: the batch is an index gather on the device (one small upload of the
indices, or a slice when the batch is contiguous). Shuffling draws from the cluster's seeded generator
(``tw.manual_seed`` or ``generator=``), so runs are reproducible; no worker processes are used.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence

import numpy as np

from tensorwire.tensor import Tensor

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "Subset", "ConcatDataset", "random_split", "Sampler",
           "SequentialSampler", "RandomSampler", "SubsetRandomSampler", "BatchSampler", "DataLoader",
           "default_collate"]


class Dataset:
    """A map-style dataset: ``__getitem__(i)`` and ``__len__``."""

    def __getitem__(self, index):
        raise NotImplementedError

    def __add__(self, other):
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    def __iter__(self):
        raise NotImplementedError


class TensorDataset(Dataset):
    """Samples are rows of the given tensors (cluster tensors or numpy arrays, same first dimension)."""

    def __init__(self, *tensors):
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor")
        n = tensors[0].shape[0]
        if any(t.shape[0] != n for t in tensors):
            raise ValueError("Size mismatch between tensors")
        self.tensors = tuple(t if isinstance(t, Tensor) else np.asarray(t) for t in tensors)

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]

    def _batch(self, indices: list[int], device=None):
        """One batch: a device gather for cluster tensors, one upload per field for numpy arrays."""
        from tensorwire.creation import tensor as _tensor

        idx = np.asarray(indices, dtype=np.int64)
        contiguous = len(idx) > 0 and bool(np.all(np.diff(idx) == 1))
        out = []
        dev_idx = {}
        for t in self.tensors:
            if isinstance(t, Tensor):
                if contiguous:
                    b = t[int(idx[0]): int(idx[-1]) + 1]
                else:
                    key = (id(t._s), t._dev)
                    if key not in dev_idx:
                        dev_idx[key] = _tensor(idx, device=t._dev, session=t._s)
                    b = t.index_select(0, dev_idx[key])
                out.append(b.to(device) if device is not None else b)
            else:
                out.append(_tensor(np.ascontiguousarray(t[idx]), device=device))
        return tuple(out)


class Subset(Dataset):
    def __init__(self, dataset: Dataset, indices: Sequence[int]):
        self.dataset, self.indices = dataset, list(indices)

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __len__(self) -> int:
        return len(self.indices)

    def _batch(self, indices, device=None):
        base = getattr(self.dataset, "_batch", None)
        if base is None:
            raise AttributeError("_batch")
        return base([self.indices[i] for i in indices], device)


class ConcatDataset(Dataset):
    def __init__(self, datasets):
        self.datasets = list(datasets)
        self.cumulative_sizes = list(itertools.accumulate(len(d) for d in self.datasets))

    def __len__(self) -> int:
        return self.cumulative_sizes[-1] if self.cumulative_sizes else 0

    def __getitem__(self, idx):
        if idx < 0:
            idx += len(self)
        import bisect

        d = bisect.bisect_right(self.cumulative_sizes, idx)
        start = self.cumulative_sizes[d - 1] if d else 0
        return self.datasets[d][idx - start]


def _rng(generator) -> np.random.Generator:
    """A numpy generator seeded from (and advancing) a tensorwire generator: reproducible under tw.manual_seed."""
    from tensorwire import random as R

    gen = generator if generator is not None else R.default_generator
    seed, off = gen.take(1)
    return np.random.default_rng([seed % (1 << 63), off])


def random_split(dataset: Dataset, lengths, generator=None):
    """Split into non-overlapping random subsets (``lengths`` may be fractions summing to 1)."""
    n = len(dataset)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        sizes = [int(math.floor(n * f)) for f in lengths]
        for i in range(n - sum(sizes)):
            sizes[i % len(sizes)] += 1
        lengths = sizes
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    perm = _rng(generator).permutation(n).tolist()
    out, start = [], 0
    for ln in lengths:
        out.append(Subset(dataset, perm[start:start + ln]))
        start += ln
    return out


class Sampler:
    def __init__(self, data_source=None):
        pass

    def __iter__(self) -> Iterator[int]:
        raise NotImplementedError


class SequentialSampler(Sampler):
    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """A random permutation per epoch (``replacement=True``: ``num_samples`` draws with replacement)."""

    def __init__(self, data_source, replacement: bool = False, num_samples: int | None = None, generator=None):
        self.data_source, self.replacement, self._num_samples = data_source, replacement, num_samples
        self.generator = generator

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        n = len(self.data_source)
        rng = _rng(self.generator)
        if self.replacement:
            return iter(rng.integers(0, n, self.num_samples).tolist())
        reps = -(-self.num_samples // n) if n else 0
        perm = np.concatenate([rng.permutation(n) for _ in range(reps)]) if reps else np.zeros(0, np.int64)
        return iter(perm[: self.num_samples].tolist())

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    def __init__(self, indices, generator=None):
        self.indices, self.generator = list(indices), generator

    def __iter__(self):
        return iter([self.indices[i] for i in _rng(self.generator).permutation(len(self.indices))])

    def __len__(self) -> int:
        return len(self.indices)


class BatchSampler(Sampler):
    def __init__(self, sampler, batch_size: int, drop_last: bool):
        if not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self):
        batch = []
        for i in self.sampler:
            batch.append(i)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


def default_collate(batch, device=None):
    """Stack a list of samples: numpy arrays/numbers are stacked on the client and uploaded once per field;
    cluster tensors are stacked on the device; tuples/dicts are collated field by field."""
    from tensorwire.creation import tensor as _tensor
    from tensorwire.functions import stack

    elem = batch[0]
    if isinstance(elem, Tensor):
        out = stack(list(batch))
        return out.to(device) if device is not None else out
    if isinstance(elem, (np.ndarray, np.generic, int, float, bool)):
        return _tensor(np.stack([np.asarray(b) for b in batch]), device=device)
    if isinstance(elem, dict):
        return {k: default_collate([b[k] for b in batch], device) for k in elem}
    if isinstance(elem, (tuple, list)):
        return type(elem)(default_collate(list(x), device) for x in zip(*batch)) if isinstance(elem, tuple) else \
            [default_collate(list(x), device) for x in zip(*batch)]
    return batch


class DataLoader:
    """Iterate over a dataset in batches (``batch_size``, ``shuffle``, ``drop_last``, ``sampler``,
    ``batch_sampler``, ``collate_fn``, ``generator``); ``device=`` (an extension) names where batches go.
    ``num_workers``/``pin_memory`` are accepted and ignored: loading runs in this process."""

    def __init__(self, dataset: Dataset, batch_size: int | None = 1, shuffle: bool | None = None, sampler=None,
                 batch_sampler=None, num_workers: int = 0, collate_fn=None, pin_memory: bool = False,
                 drop_last: bool = False, timeout: float = 0, worker_init_fn=None, generator=None, *,
                 prefetch_factor=None, persistent_workers: bool = False, device=None):
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.generator = generator
        self.device = device
        self.num_workers = num_workers
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, "
                                 "and drop_last")
            self.batch_size = None
        elif sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if sampler is None:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        if batch_sampler is None and batch_size is not None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.collate_fn = collate_fn

    def __len__(self) -> int:
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        return len(self.sampler)

    def __iter__(self):
        fast = self.collate_fn is None and hasattr(self.dataset, "_batch")
        if self.batch_sampler is None:
            for i in self.sampler:
                sample = self.dataset[i]
                yield self.collate_fn(sample) if self.collate_fn else sample
            return
        for indices in self.batch_sampler:
            if fast:
                yield list(self.dataset._batch(indices, self.device))
            elif self.collate_fn is not None:
                yield self.collate_fn([self.dataset[i] for i in indices])
            else:
                yield default_collate([self.dataset[i] for i in indices], self.device)
