"""``tw.utils.data.dataset``: ``Dataset``, ``IterableDataset``, ``TensorDataset``, ``StackDataset``,
``ConcatDataset``, ``ChainDataset``, ``Subset`` and ``random_split``, as torch's.

A :class:`TensorDataset` of numpy arrays gathers each batch on the client and uploads it as one buffer per field
(all fields in one message); a :class:`TensorDataset` of cluster tensors never uploads data at all: the batch is an
index gather on the device (one small upload of the indices, or a slice when the batch is contiguous). Both go
through ``_batch``, which :class:`~tensorwire.utils.data.DataLoader` uses when no ``collate_fn`` is given.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence

import numpy as np

from tensorwire import random as R
from tensorwire.creation import tensor as _tensor
from tensorwire.tensor import Tensor

__all__ = [
    "Dataset",
    "IterableDataset",
    "TensorDataset",
    "StackDataset",
    "Subset",
    "ConcatDataset",
    "ChainDataset",
    "random_split",
]


class Dataset:
    """A map-style dataset: ``__getitem__(i)`` and ``__len__``."""

    def __getitem__(self, index):
        raise NotImplementedError

    def __add__(self, other):
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A dataset of samples produced by ``__iter__`` (a stream); the loader batches them in order."""

    def __iter__(self):
        raise NotImplementedError

    def __add__(self, other):
        return ChainDataset([self, other])


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
        """One batch: a device gather for cluster tensors, one upload per field for numpy arrays. Negative indices
        count from the end and an index out of range is an ``IndexError``, as ``t[i]`` sample by sample."""
        idx = np.asarray(indices, dtype=np.int64)
        if len(idx):
            n = len(self)
            lo, hi = int(idx.min()), int(idx.max())
            if lo < -n or hi >= n:
                bad = int(idx[(idx < -n) | (idx >= n)][0])
                raise IndexError(f"index {bad} is out of bounds for dimension 0 with size {n}")
            if lo < 0:
                idx = np.where(idx < 0, idx + n, idx)  # (so that [-1, 0] is no slice [-1:1], nor a wrapped gather)
        contiguous = len(idx) > 0 and bool(np.all(np.diff(idx) == 1))
        out = []
        dev_idx = {}
        for t in self.tensors:
            if isinstance(t, Tensor):
                if contiguous:
                    b = t[int(idx[0]) : int(idx[-1]) + 1]
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
    """The samples of ``dataset`` at ``indices``."""

    def __init__(self, dataset: Dataset, indices: Sequence[int]):
        self.dataset, self.indices = dataset, list(indices)

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices: list[int]) -> list:
        """The samples at ``indices``, through the base dataset's ``__getitems__`` when it has one (as torch's)."""
        if callable(getattr(self.dataset, "__getitems__", None)):
            return self.dataset.__getitems__([self.indices[idx] for idx in indices])
        return [self.dataset[self.indices[idx]] for idx in indices]

    def __len__(self) -> int:
        return len(self.indices)

    @property
    def _batch(self):
        """The base dataset's batched read through this subset's indices; absent (``hasattr`` is false, and the
        loader reads and collates item by item) when the base has none, as a user's own ``Dataset`` has not."""
        base = _batched_read(self.dataset)
        if base is None:
            raise AttributeError(f"{type(self.dataset).__name__} has no batched read")
        return lambda indices, device=None: base([self.indices[i] for i in indices], device)


class ConcatDataset(Dataset):
    """The samples of several map-style datasets, one after the other."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if len(self.datasets) == 0:
            raise AssertionError("datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise AssertionError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes = list(itertools.accumulate(len(d) for d in self.datasets))

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx += len(self)
        d = bisect.bisect_right(self.cumulative_sizes, idx)
        start = self.cumulative_sizes[d - 1] if d else 0
        return self.datasets[d][idx - start]


class StackDataset(Dataset):
    """Samples are tuples (``StackDataset(a, b)``) or dicts (``StackDataset(x=a, y=b)``) of the datasets' samples."""

    def __init__(self, *args, **kwargs):
        if args and kwargs:
            raise ValueError(
                "Supported either ``tuple``- (via ``args``) or``dict``- (via ``kwargs``) like "
                "input/output, but both types are given."
            )
        self.datasets = args if args else kwargs
        sizes = {len(d) for d in (args if args else kwargs.values())}
        if len(sizes) != 1:
            raise ValueError("Size mismatch between datasets")
        self._length = sizes.pop()

    def __getitem__(self, index):
        if isinstance(self.datasets, dict):
            return {k: d[index] for k, d in self.datasets.items()}
        return tuple(d[index] for d in self.datasets)

    def __getitems__(self, indices: list) -> list:
        """The samples at ``indices``, each dataset read through its ``__getitems__`` when it has one (as torch's)."""
        datasets = self.datasets.items() if isinstance(self.datasets, dict) else enumerate(self.datasets)
        samples: list[dict] = [{} for _ in indices]
        for k, dataset in datasets:
            if callable(getattr(dataset, "__getitems__", None)):
                items = dataset.__getitems__(indices)
                if len(items) != len(indices):
                    raise ValueError(f"Nested dataset's output size mismatch. Expected {len(indices)}, got "
                                     f"{len(items)}")
            else:
                items = [dataset[idx] for idx in indices]
            for sample, item in zip(samples, items):
                sample[k] = item
        if isinstance(self.datasets, dict):
            return samples
        return [tuple(sample.values()) for sample in samples]

    def __len__(self) -> int:
        return self._length


class ChainDataset(IterableDataset):
    """The samples of several iterable datasets, one after the other."""

    def __init__(self, datasets):
        self.datasets = list(datasets)

    def __iter__(self):
        for d in self.datasets:
            yield from d

    def __len__(self) -> int:
        return sum(len(d) for d in self.datasets)


def _owner(cls: type, name: str) -> type | None:
    """The class of ``cls``'s MRO that defines ``name`` (None: none does)."""
    return next((c for c in cls.__mro__ if name in c.__dict__), None)


def _batched_read(dataset):
    """``dataset._batch`` (a whole batch read at once, collated as :func:`default_collate` would) when the loader
    may use it instead of ``__getitems__``/``__getitem__`` and ``default_collate``: None when the dataset has none, or
    when a subclass overrides ``__getitem__`` or defines ``__getitems__`` (the loader then calls them, as torch's)."""
    batch = getattr(dataset, "_batch", None)
    if batch is None:
        return None
    cls = type(dataset)
    owner = _owner(cls, "_batch")
    if _owner(cls, "__getitem__") is not owner or _owner(cls, "__getitems__") not in (None, owner):
        return None
    if "__getitems__" in getattr(dataset, "__dict__", {}):
        return None
    return batch


def _rng(generator) -> np.random.Generator:
    """A numpy generator seeded from (and advancing) a tensorwire generator: reproducible under tw.manual_seed."""
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
        out.append(Subset(dataset, perm[start : start + ln]))
        start += ln
    return out
