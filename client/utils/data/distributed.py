"""``tw.utils.data.distributed``: ``DistributedSampler``, as torch's.

A tensorwire program is one process that drives every device of the cluster (``tw.distributed`` maps torch's
process group onto it: world size 1, rank 0), so by default this sampler yields the whole dataset; with explicit
``num_replicas``/``rank`` it yields that replica's share exactly as torch partitions it (padding by repetition, or
dropping the tail with ``drop_last``).
"""

from __future__ import annotations

import math

from tensorwire import distributed
from tensorwire.random import Generator

from .dataset import _rng
from .sampler import Sampler

__all__ = ["DistributedSampler"]


class DistributedSampler(Sampler):
    """The indices of replica ``rank`` of ``num_replicas``, shuffled per epoch (call :meth:`set_epoch`) from
    ``seed`` so that every replica draws the same permutation."""

    def __init__(
        self,
        dataset,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ):
        if num_replicas is None:
            num_replicas = distributed.get_world_size()
        if rank is None:
            rank = distributed.get_rank()
        if rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]")
        self.dataset, self.num_replicas, self.rank = dataset, num_replicas, rank
        self.epoch, self.drop_last, self.shuffle, self.seed = 0, drop_last, shuffle, seed
        n = len(dataset)
        if drop_last and n % num_replicas != 0:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self):
        n = len(self.dataset)
        if self.shuffle:
            indices = _rng(Generator(self.seed + self.epoch)).permutation(n).tolist()
        else:
            indices = list(range(n))
        if not self.drop_last:
            pad = self.total_size - len(indices)
            if pad <= len(indices):
                indices += indices[:pad]
            else:
                indices += (indices * math.ceil(pad / len(indices)))[:pad]
        else:
            indices = indices[: self.total_size]
        return iter(indices[self.rank : self.total_size : self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Use a new permutation for ``epoch`` (the same on every replica)."""
        self.epoch = epoch
