"""``tw.utils.data.dataloader``: ``DataLoader``, as torch's ``torch.utils.data.dataloader``.

Loading runs in the calling process. ``num_workers`` is accepted (and checked as torch checks it) but starts no
worker processes: a batch of a :class:`~tensorwire.utils.data.TensorDataset` is one upload (numpy fields) or one
gather on the device (cluster tensors), so there is nothing for workers to overlap with, and the cluster already
runs the previous step while the next batch is recorded. ``worker_init_fn`` is therefore never called and
:func:`get_worker_info` returns ``None``, as in torch's main process. ``pin_memory`` is accepted and does nothing
(uploads go straight from the numpy buffers to the socket).
"""

from __future__ import annotations

from ._utils import collate as _collate_mod
from ._utils.collate import default_collate, default_convert
from .dataset import Dataset, IterableDataset, _batched_read
from .sampler import BatchSampler, RandomSampler, SequentialSampler

__all__ = ["DataLoader", "get_worker_info", "default_collate", "default_convert"]


def get_worker_info():
    """Information about the current loader worker process: always ``None`` (loading runs in this process)."""
    return None


class DataLoader:
    """Iterate over a dataset in batches, with torch's arguments (``batch_size``, ``shuffle``, ``sampler``,
    ``batch_sampler``, ``num_workers``, ``collate_fn``, ``pin_memory``, ``drop_last``, ``timeout``,
    ``worker_init_fn``, ``generator``, ``prefetch_factor``, ``persistent_workers``, ``pin_memory_device``,
    ``in_order``) and their checks; ``device=`` (an extension) names where batches go. See the module docstring
    for what the multiprocessing arguments do here."""

    def __init__(
        self,
        dataset: Dataset,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler=None,
        batch_sampler=None,
        num_workers: int = 0,
        collate_fn=None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn=None,
        multiprocessing_context=None,
        generator=None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        device=None,
    ):
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError(
                "prefetch_factor option could only be specified in multiprocessing.let num_workers > 0 "
                "to enable multiprocessing, otherwise set prefetch_factor to None."
            )
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        self.dataset = dataset
        self.num_workers, self.pin_memory, self.timeout = num_workers, pin_memory, timeout
        self.worker_init_fn, self.multiprocessing_context = worker_init_fn, multiprocessing_context
        self.prefetch_factor, self.persistent_workers = prefetch_factor, persistent_workers
        self.pin_memory_device, self.in_order = pin_memory_device, in_order
        self.generator, self.device = generator, device
        self._iterable = isinstance(dataset, IterableDataset)
        if self._iterable:
            if shuffle not in (False, None):
                raise ValueError(
                    f"DataLoader with IterableDataset: expected unspecified shuffle option, but got shuffle={shuffle}"
                )
            if sampler is not None:
                raise ValueError(
                    f"DataLoader with IterableDataset: expected unspecified sampler option, but got sampler={sampler}"
                )
            if batch_sampler is not None:
                raise ValueError(
                    f"DataLoader with IterableDataset: expected unspecified batch_sampler option, but "
                    f"got batch_sampler={batch_sampler}"
                )
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError(
                    "batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last"
                )
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually exclusive with drop_last")
        if sampler is None and not self._iterable:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None and not self._iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size, self.drop_last = batch_size, drop_last
        self.sampler, self.batch_sampler = sampler, batch_sampler
        self._auto_collation = batch_sampler is not None or (self._iterable and batch_size is not None)
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
        self._default_collate = collate_fn is default_collate
        self.collate_fn = collate_fn

    def __len__(self) -> int:
        if self._iterable:
            n = len(self.dataset)  # TypeError for a stream without __len__, as torch
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        return len(self.sampler)

    def _collate(self, samples):
        if self._default_collate:
            return default_collate(samples, self.device)
        return self.collate_fn(samples)

    def __iter__(self) -> _DataLoaderIter:
        """An iterator over the batches (one pass over the sampler), with ``len()`` as torch's."""
        return _DataLoaderIter(self)

    def _batches(self):
        if self._iterable:
            yield from self._iter_stream()
            return
        if self.batch_sampler is None:  # batch_size=None: samples one by one
            for i in self.sampler:
                yield self.collate_fn(self.dataset[i])
            return
        fast = _batched_read(self.dataset) if self._default_collate and _default_map_intact() else None
        getitems = None if fast is not None else getattr(self.dataset, "__getitems__", None)
        for indices in self.batch_sampler:
            if fast is not None:
                yield list(fast(indices, self.device))
            elif getitems:  # (torch's fetcher: the dataset's own batched read, its samples to collate_fn)
                yield self._collate(getitems(indices))
            else:
                yield self._collate([self.dataset[i] for i in indices])

    def _iter_stream(self):
        if self.batch_size is None:
            for sample in self.dataset:
                yield self.collate_fn(sample)
            return
        batch = []
        for sample in self.dataset:
            batch.append(sample)
            if len(batch) == self.batch_size:
                yield self._collate(batch)
                batch = []
        if batch and not self.drop_last:
            yield self._collate(batch)


def _default_map_intact() -> bool:
    """Whether ``default_collate_fn_map`` still collates tensors, arrays and numpy scalars the default way (what a
    dataset's batched read stands in for); a map changed for them sends every batch through it."""
    m, c = _collate_mod.default_collate_fn_map, _collate_mod
    return (m.get(c.Tensor) is c.collate_tensor_fn and m.get(c.np.ndarray) is c.collate_numpy_array_fn
            and m.get((c.np.bool_, c.np.number, c.np.object_)) is c.collate_numpy_scalar_fn)


class _DataLoaderIter:
    """One pass over a :class:`DataLoader`'s batches (torch's ``_SingleProcessDataLoaderIter``): an iterator whose
    ``len()`` is the loader's number of batches (a ``TypeError`` for an ``IterableDataset``, as torch's)."""

    def __init__(self, loader: DataLoader):
        self._loader = loader
        self._gen = loader._batches()

    def __iter__(self) -> _DataLoaderIter:
        return self

    def __next__(self):
        return next(self._gen)

    def __len__(self) -> int:
        if self._loader._iterable:
            raise TypeError("object of type '_InfiniteConstantSampler' has no len()")
        return len(self._loader)
