"""``tw.utils.data``: datasets, samplers and ``DataLoader``, laid out as torch's ``torch.utils.data``
(``.dataset``, ``.sampler``, ``.dataloader``, ``.distributed``, ``._utils.collate``)."""

from . import _utils, dataloader, dataset, distributed, sampler
from ._utils.collate import default_collate, default_convert
from .dataloader import DataLoader, get_worker_info
from .dataset import (
    ChainDataset,
    ConcatDataset,
    Dataset,
    IterableDataset,
    StackDataset,
    Subset,
    TensorDataset,
    random_split,
)
from .distributed import DistributedSampler
from .sampler import (
    BatchSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

__all__ = [
    "Dataset",
    "IterableDataset",
    "TensorDataset",
    "StackDataset",
    "Subset",
    "ConcatDataset",
    "ChainDataset",
    "random_split",
    "Sampler",
    "SequentialSampler",
    "RandomSampler",
    "SubsetRandomSampler",
    "WeightedRandomSampler",
    "BatchSampler",
    "DistributedSampler",
    "DataLoader",
    "get_worker_info",
    "default_collate",
    "default_convert",
]
