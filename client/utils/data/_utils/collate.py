"""``default_collate`` and ``default_convert``, as torch's ``torch.utils.data._utils.collate``.

Samples that are numpy arrays or Python numbers are stacked on the client and uploaded once per field (one buffer
per batch, not one per sample); samples that are cluster tensors are stacked on their device. Containers (tuples,
named tuples, lists, dicts) are collated field by field; strings and other objects come back as lists.
"""

from __future__ import annotations

import collections.abc

import numpy as np

from tensorwire.creation import tensor as _tensor
from tensorwire.functions import stack
from tensorwire.tensor import Tensor

__all__ = ["default_collate", "default_convert"]


def default_collate(batch, device=None):
    """Stack a list of samples into a batch with torch's rules: tensors are stacked (a new leading dim), numpy
    arrays and numbers become tensors (Python floats as float64, ints as int64, as torch), mappings and sequences
    are collated element-wise (every sequence of the batch must have the same length); ``device`` (an extension)
    says where the batch goes."""
    elem = batch[0]
    if isinstance(elem, Tensor):
        out = stack(list(batch))
        return out.to(device) if device is not None else out
    if isinstance(elem, (np.ndarray, np.generic)) and elem.dtype.kind in "US O":
        return list(batch)  # arrays of strings/objects are not tensors (torch refuses them too)
    if isinstance(elem, (np.ndarray, np.generic)):
        return _tensor(np.stack([np.asarray(b) for b in batch]), device=device)
    if isinstance(elem, bool):
        return _tensor(np.asarray(batch, dtype=np.bool_), device=device)
    if isinstance(elem, int):
        return _tensor(np.asarray(batch, dtype=np.int64), device=device)
    if isinstance(elem, float):
        return _tensor(np.asarray(batch, dtype=np.float64), device=device)
    if isinstance(elem, (str, bytes)):
        return list(batch)
    if isinstance(elem, collections.abc.Mapping):
        return {k: default_collate([b[k] for b in batch], device) for k in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
        return type(elem)(*(default_collate(list(x), device) for x in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        n = len(elem)
        if any(len(b) != n for b in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        return [default_collate(list(x), device) for x in zip(*batch)]  # a list for tuples too, as torch
    return list(batch)


def default_convert(data):
    """What the loader does to each sample when automatic batching is off (``batch_size=None``): numpy arrays and
    numpy scalars become tensors, containers are converted element-wise, everything else is returned unchanged."""
    if isinstance(data, (np.ndarray, np.generic)) and data.dtype.kind not in "US O":
        return _tensor(np.asarray(data))
    if isinstance(data, collections.abc.Mapping):
        return {k: default_convert(v) for k, v in data.items()}
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, (list, tuple)):
        return type(data)(default_convert(d) for d in data)
    return data
