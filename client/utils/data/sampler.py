"""``tw.utils.data.sampler``: the index samplers, as torch's ``torch.utils.data.sampler``.

Random samplers draw from a numpy generator seeded from the cluster's seeded generator (``tw.manual_seed`` or
``generator=``), once per epoch, so runs are reproducible (the indices differ from torch's, whose generator is a
different algorithm). They draw lazily, as torch does: ``RandomSampler(ds, replacement=True,
num_samples=int(1e10))`` holds one chunk of indices at a time, never all of them.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .dataset import _rng

__all__ = [
    "Sampler",
    "SequentialSampler",
    "RandomSampler",
    "SubsetRandomSampler",
    "WeightedRandomSampler",
    "BatchSampler",
]

_CHUNK = 1024  # indices drawn at a time (torch draws 32)


class Sampler:
    """Base class: ``__iter__`` yields dataset indices (``__len__`` when the count is known)."""

    def __init__(self, data_source=None):
        pass

    def __iter__(self) -> Iterator[int]:
        raise NotImplementedError


class SequentialSampler(Sampler):
    """``0, 1, ..., len(data_source) - 1``."""

    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


def _check_num_samples(num_samples) -> None:
    if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples <= 0:
        raise ValueError(f"num_samples should be a positive integer value, but got num_samples={num_samples}")


class RandomSampler(Sampler):
    """A random permutation per epoch; ``replacement=True`` draws ``num_samples`` indices with replacement, and
    ``num_samples`` larger than the dataset without replacement chains several permutations (as torch)."""

    def __init__(self, data_source, replacement: bool = False, num_samples: int | None = None, generator=None):
        if not isinstance(replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got replacement={replacement}")
        self.data_source, self.replacement, self._num_samples = data_source, replacement, num_samples
        self.generator = generator
        _check_num_samples(self.num_samples)

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        n = len(self.data_source)
        total = self.num_samples
        rng = _rng(self.generator)
        if self.replacement:
            for start in range(0, total, _CHUNK):
                yield from rng.integers(0, n, min(_CHUNK, total - start)).tolist()
            return
        for _ in range(total // n):
            yield from rng.permutation(n).tolist()
        if total % n:
            yield from rng.permutation(n)[: total % n].tolist()

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices in a random order, a new one per epoch."""

    def __init__(self, indices, generator=None):
        self.indices, self.generator = list(indices), generator

    def __iter__(self):
        return iter([self.indices[i] for i in _rng(self.generator).permutation(len(self.indices))])

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """``num_samples`` indices in ``[0, len(weights))`` drawn with probabilities proportional to ``weights``."""

    def __init__(self, weights, num_samples: int, replacement: bool = True, generator=None):
        _check_num_samples(num_samples)
        if not isinstance(replacement, bool):
            raise ValueError(f"replacement should be a boolean value, but got replacement={replacement}")
        w = np.asarray(weights.detach().numpy() if hasattr(weights, "detach") else weights, dtype=np.float64)
        if w.ndim != 1:
            raise ValueError(f"weights should be a 1d sequence but given weights have shape {tuple(w.shape)}")
        if not replacement and num_samples > int((w > 0).sum()):
            raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
        self.weights, self.num_samples, self.replacement, self.generator = w, num_samples, replacement, generator

    def __iter__(self):
        p = self.weights / self.weights.sum()
        rng = _rng(self.generator)
        if not self.replacement:
            return iter(rng.choice(len(p), self.num_samples, replace=False, p=p).tolist())
        return (
            i
            for start in range(0, self.num_samples, _CHUNK)
            for i in rng.choice(len(p), min(_CHUNK, self.num_samples - start), p=p).tolist()
        )

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler):
    """Lists of ``batch_size`` indices from ``sampler`` (the last one shorter unless ``drop_last``)."""

    def __init__(self, sampler, batch_size: int, drop_last: bool):
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last}")
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
