"""``tw.nn.utils.rnn``: torch's variable-length sequence batches. :class:`PackedSequence` and the functions that pad,
pack and unpack, with torch's layouts, results and errors.

A packed batch holds its sequences sorted by decreasing length (``sorted_indices`` says from which of the caller's
sequences each comes) and time-major: ``data`` is ``[sum(lengths), *]``, the first step of every sequence, then the
second step of those at least 2 long, and so on; ``batch_sizes`` (int64, on the CPU device as torch's) counts the
sequences at each step.

The lengths are values the client reads (a list, or a tensor read once: torch requires them on the CPU too); every
layout change is then ONE gather (``index_select``) of rows, whose index the client computes with numpy, so
packing, padding and unpacking are one or two recorded ops and nothing syncs. Their gradients are the gathers'
(zeros where a padded position was read from no data, as torch's). The recurrent layers (``tw.nn.RNN``, ``LSTM``,
``GRU``) take a :class:`PackedSequence` (``tensorwire.nn.rnn``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

from tensorwire.creation import full, tensor
from tensorwire.functions import cat, stack
from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DeviceError
from tensorwire.tensor import Tensor, cuda_device

__all__ = [
    "PackedSequence",
    "invert_permutation",
    "pack_padded_sequence",
    "pad_packed_sequence",
    "pad_sequence",
    "unpad_sequence",
    "pack_sequence",
    "unpack_sequence",
]

_UNSORTED = ("`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. You can pass "
             "`enforce_sorted=False` to pack_padded_sequence and/or pack_sequence to sidestep this requirement if you "
             "do not need ONNX exportability.")
_NONPOSITIVE = "Length of all samples has to be greater than 0, but found an element in 'lengths' that is <= 0"


class PackedSequence_(NamedTuple):
    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Tensor | None
    unsorted_indices: Tensor | None


def _bind(optional, fn):
    return None if optional is None else fn(optional)


class PackedSequence(PackedSequence_):
    """torch's ``PackedSequence``: a namedtuple ``(data, batch_sizes, sorted_indices, unsorted_indices)`` made by
    :func:`pack_padded_sequence` / :func:`pack_sequence` (or a recurrent layer given one).

    ``data`` may be on any device, of any dtype; ``sorted_indices``/``unsorted_indices`` are int64 on ``data``'s
    device (``unsorted_indices`` made from ``sorted_indices`` when not given); ``batch_sizes`` is int64 on the CPU
    device. ``PackedSequence((data, batch_sizes))`` is accepted, as torch's."""

    def __new__(cls, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        if unsorted_indices is None:
            unsorted_indices = invert_permutation(sorted_indices)
        if batch_sizes is not None:
            if isinstance(batch_sizes, Tensor) and not batch_sizes.is_cpu and _has_cpu(batch_sizes._s):
                raise ValueError(
                    "batch_sizes should always be on CPU. Instances of PackedSequence should never be created "
                    "manually. They should be instantiated by functions like pack_sequence and "
                    "pack_padded_sequences in nn.utils.rnn. "
                    "https://pytorch.org/docs/stable/nn.html#torch.nn.utils.rnn.pack_sequence"
                )
            return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)
        if not (isinstance(data, (list, tuple)) and len(data) == 2):
            raise AssertionError("Expected data to be a list or tuple of length 2")
        return super().__new__(cls, data[0], data[1], sorted_indices, unsorted_indices)

    def to(self, *args, **kwargs) -> PackedSequence:
        """``data.to(*args, **kwargs)``, the indices following it to its device; ``self`` when nothing changes."""
        data = self.data.to(*args, **kwargs)
        if data is self.data:
            return self
        move = lambda t: t.to(data._dev)  # noqa: E731
        return type(self)(data, self.batch_sizes, _bind(self.sorted_indices, move),
                          _bind(self.unsorted_indices, move))

    def cuda(self, device=None, non_blocking: bool = False, memory_format=None) -> PackedSequence:
        return self.to(cuda_device(device))

    def cpu(self, memory_format=None) -> PackedSequence:
        return self.to("cpu:0")

    def pin_memory(self) -> PackedSequence:
        return self  # (nothing is pinned: tensors live on the cluster's devices)

    def double(self) -> PackedSequence:
        return self.to(dtype=D.float64)

    def float(self) -> PackedSequence:
        return self.to(dtype=D.float32)

    def half(self) -> PackedSequence:
        return self.to(dtype=D.float16)

    def long(self) -> PackedSequence:
        return self.to(dtype=D.int64)

    def int(self) -> PackedSequence:
        return self.to(dtype=D.int32)

    def short(self) -> PackedSequence:
        return self.to(dtype=D.int16)

    def char(self) -> PackedSequence:
        return self.to(dtype=D.int8)

    def byte(self) -> PackedSequence:
        return self.to(dtype=D.uint8)

    @property
    def is_cuda(self) -> bool:
        """Whether ``data`` is on a CUDA device."""
        return self.data.is_cuda

    def is_pinned(self) -> bool:
        return self.data.is_pinned()


def _has_cpu(s) -> bool:
    try:
        s.check_device("cpu:0")
    except DeviceError:
        return False
    return True


def _cpu_ints(values, like: Tensor) -> Tensor:
    """``values`` as an int64 tensor on the CPU device, as torch keeps ``batch_sizes`` and lengths (on ``like``'s
    device on a cluster without one)."""
    return tensor(np.asarray(values, np.int64), device="cpu:0" if _has_cpu(like._s) else like._dev, session=like._s)


def _ints(values, like: Tensor) -> Tensor:
    """``values`` as an int64 tensor on ``like``'s device (an index)."""
    return tensor(np.asarray(values, np.int64), device=like._dev, session=like._s)


def invert_permutation(permutation: Tensor | None) -> Tensor | None:
    """The inverse of ``permutation`` (None for None), on its device: ``out[permutation[i]] = i``."""
    if permutation is None:
        return None
    n = permutation.numel()
    ar = tensor(np.arange(n, dtype=np.int64), device=permutation._dev, session=permutation._s)
    return permutation.new_zeros(n, dtype=D.int64).scatter(0, permutation.reshape(-1).to(D.int64), ar)


def batch_sizes_of(sequence: PackedSequence) -> np.ndarray:
    """``sequence.batch_sizes``' values (int64; read from the tensor, which the client usually knows already: one
    round trip at most), checked: 1-D, not empty, non-increasing, positive."""
    bs = sequence.batch_sizes
    v = np.asarray(bs.tolist() if isinstance(bs, Tensor) else bs, dtype=np.int64)
    if v.ndim != 1 or v.size == 0:
        raise RuntimeError(f"batch_sizes must be a non-empty 1-D tensor, got shape {list(v.shape)}")
    if v[-1] <= 0 or np.any(v[1:] > v[:-1]):
        raise RuntimeError("batch_sizes must be positive and non-increasing")
    return v


def _lengths(lengths) -> np.ndarray:
    """``lengths`` (a list, a numpy array or a tensor, read once) as a 1-D int64 array, torch's checks."""
    if isinstance(lengths, Tensor):
        v = np.asarray(lengths.tolist())
        if v.ndim != 1:
            raise RuntimeError(f"'lengths' argument should be a 1D CPU int64 tensor, but got {v.ndim}D "
                               f"{lengths.device.type} {lengths.dtype.name} tensor")
        return v.astype(np.int64)  # (torch: ``lengths.to(int64)``, a float tensor truncated)
    v = np.asarray(lengths)
    if v.ndim != 1:
        raise RuntimeError(f"'lengths' argument should be a 1D CPU int64 tensor, but got {v.ndim}D cpu tensor")
    return v.astype(np.int64)


def _sort(lens: np.ndarray, enforce_sorted: bool) -> np.ndarray | None:
    """The sequences' order by decreasing length (None: as given, checked to be sorted), with torch's checks. Ties
    keep their order (torch's CPU sort does up to 16 sequences; beyond, its order among ties is unspecified)."""
    if lens.size == 0 or lens.min() <= 0:
        raise RuntimeError(_NONPOSITIVE)
    if enforce_sorted:
        if np.any(lens[1:] > lens[:-1]):
            raise RuntimeError(_UNSORTED)
        return None
    return np.argsort(-lens, kind="stable")


def _layout(sorted_lens: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For lengths in decreasing order: ``(batch_sizes, t, j)``, the step and the sorted position of each packed
    row, in the packed order."""
    T = int(sorted_lens[0])
    live = np.arange(T)[:, None] < sorted_lens[None, :]  # [T, B]: step t of sorted sequence j exists
    t, j = np.nonzero(live)  # (row-major: step by step, sequences in order: the packed order)
    return live.sum(1).astype(np.int64), t, j


def _lens_of(bs: np.ndarray) -> np.ndarray:
    """Each sorted sequence's length from the batch sizes."""
    return (bs[None, :] > np.arange(int(bs[0]))[:, None]).sum(1).astype(np.int64)


def _rows(x: Tensor) -> Tensor:
    """``x`` ``[A, B, *]`` as its ``[A*B, *]`` rows (what the gathers read)."""
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


def _with_pad_row(x: Tensor, padding_value) -> Tensor:
    """``x`` ``[N, *]`` with one more row of ``padding_value`` (row ``N``: where padded positions read)."""
    return cat([x, full((1, *x.shape[1:]), padding_value, dtype=x.dtype, device=x._dev, session=x._s)], 0)


def pack_padded_sequence(input: Tensor, lengths, batch_first: bool = False,  # noqa: A002
                         enforce_sorted: bool = True) -> PackedSequence:
    """Pack the padded batch ``input`` (``[T, B, *]``, ``[B, T, *]`` with ``batch_first``) of sequences of
    ``lengths`` (a list or a tensor, read once): one gather of its rows. With ``enforce_sorted`` the lengths must
    decrease (torch's error otherwise); without, the sequences are sorted (``sorted_indices``). Steps past a length
    are dropped; their gradient is zero."""
    lens = _lengths(lengths)
    if input.numel() == 0:
        raise RuntimeError("Cannot pack empty tensors.")
    if input.ndim < 2:
        raise RuntimeError(f"pack_padded_sequence: input must have at least 2 dimensions, got {input.ndim}")
    T, B = (input.shape[1], input.shape[0]) if batch_first else (input.shape[0], input.shape[1])
    if lens.size != B:
        raise RuntimeError(f"Expected `len(lengths)` to be equal to batch_size, but got {lens.size} "
                           f"(batch_size={B})")
    order = _sort(lens, enforce_sorted)
    src = np.arange(B) if order is None else order
    if lens.max() > T:
        raise RuntimeError(f"pack_padded_sequence: a length ({int(lens.max())}) is larger than the padded "
                           f"sequence length ({T})")
    bs, t, j = _layout(lens[src])
    b = src[j]
    rows = b * T + t if batch_first else t * B + b
    data = _rows(input).index_select(0, _ints(rows, input))
    sorted_indices = None if order is None else _ints(order, input)
    unsorted = None if order is None else _ints(np.argsort(order), input)
    return PackedSequence(data, _cpu_ints(bs, input), sorted_indices, unsorted)


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False, padding_value: float = 0.0,
                        total_length: int | None = None) -> tuple[Tensor, Tensor]:
    """The inverse of :func:`pack_padded_sequence`: ``(padded [T, B, *] or [B, T, *], lengths)``, the sequences in
    the caller's order (``unsorted_indices``), ``T`` the longest length or ``total_length``; ``lengths`` is int64 on
    the CPU device. One gather (from the data and one row of ``padding_value``)."""
    bs = batch_sizes_of(sequence)
    T = bs.size
    if total_length is not None:
        if total_length < T:
            raise ValueError("Expected total_length to be at least the length of the longest sequence in input, "
                             f"but got total_length={total_length} and max sequence length being {T}")
        T = int(total_length)
    data = sequence.data
    B, N = int(bs[0]), int(bs.sum())
    lens = _lens_of(bs)
    offsets = np.concatenate([[0], np.cumsum(bs)[:-1]])
    unsorted = sequence.unsorted_indices
    un = np.arange(B) if unsorted is None else np.asarray(unsorted.tolist(), np.int64)
    jj = un[None, :]  # [1, B]: the sorted position of each caller's sequence
    tt = np.arange(T)[:, None]
    valid = tt < lens[jj]
    rows = np.where(valid, offsets[np.minimum(tt, bs.size - 1)] + jj, N)  # [T, B]
    if batch_first:
        rows = rows.T
    src = data if valid.all() else _with_pad_row(data, padding_value)
    out = src.index_select(0, _ints(rows.reshape(-1), data))
    out = out.reshape(*rows.shape, *data.shape[1:])
    return out, _cpu_ints(lens[un], data)


def pad_sequence(sequences, batch_first: bool = False, padding_value: float = 0.0,
                 padding_side: str = "right") -> Tensor:
    """Stack the sequences ``[L_i, *]`` into ``[T, B, *]`` (``[B, T, *]`` with ``batch_first``), padded with
    ``padding_value`` on the right (or the left), ``T`` the longest; in the first sequence's dtype and device (its
    trailing dims broadcast the others', as torch's copy does). One ``cat`` and one gather."""
    if not isinstance(sequences, Iterable):
        raise RuntimeError(f"pad_sequence: Expected iterable for input sequences, but got arg of type: "
                           f"{type(sequences)}")
    seqs = _same_kind(tuple(sequences))
    if padding_side not in ("left", "right"):
        raise RuntimeError(f"Expected padding_side to be one of left or right, but got {padding_side}.")
    lens = np.array([s.shape[0] for s in seqs], np.int64)
    T = int(lens.max())
    if (lens == T).all():
        return stack(list(seqs), 0 if batch_first else 1)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    tt = np.arange(T)[:, None]  # [T, 1]
    k = tt if padding_side == "right" else tt - (T - lens[None, :])  # [T, B]: the step of each sequence read
    rows = np.where((k >= 0) & (k < lens[None, :]), starts[None, :] + k, int(lens.sum()))
    if batch_first:
        rows = rows.T
    src = _with_pad_row(cat(list(seqs), 0), padding_value)
    out = src.index_select(0, _ints(rows.reshape(-1), src))
    return out.reshape(*rows.shape, *seqs[0].shape[1:])


def _same_kind(seqs: tuple) -> tuple:
    """The sequences in the first one's dtype, device and trailing dims (torch's ``copy_`` into the padded
    output)."""
    if not seqs:
        raise RuntimeError("received an empty list of sequences")
    first = seqs[0]
    if first.ndim == 0:
        raise RuntimeError("pad_sequence: the sequences must have at least 1 dimension, got a 0-d tensor")
    trailing = tuple(first.shape[1:])
    out = []
    for s in seqs:
        if s.ndim == 0:
            raise RuntimeError("pad_sequence: the sequences must have at least 1 dimension, got a 0-d tensor")
        if s.dtype is not first.dtype or s._dev != first._dev:
            s = s.to(device=first._dev, dtype=first.dtype)
        if tuple(s.shape[1:]) != trailing:
            s = s.expand(s.shape[0], *trailing)
        out.append(s)
    return tuple(out)


def unpad_sequence(padded_sequences: Tensor, lengths, batch_first: bool = False) -> list[Tensor]:
    """The sequences of a padded batch (``[T, B, *]``, ``[B, T, *]`` with ``batch_first``), each its first
    ``lengths[i]`` steps (a copy, one gather each). Unlike torch's, the batch is not transposed in place."""
    lens = _lengths(lengths)
    x = padded_sequences
    T, B = (x.shape[1], x.shape[0]) if batch_first else (x.shape[0], x.shape[1])
    if lens.size != B:
        raise ValueError(f"unpad_sequence: {lens.size} lengths for a batch of {B} sequences")
    flat = _rows(x)
    return [flat.index_select(0, _ints(b * T + np.arange(n) if batch_first else np.arange(n) * B + b, x))
            for b, n in enumerate(lens.tolist())]


def pack_sequence(sequences, enforce_sorted: bool = True) -> PackedSequence:
    """Pack the sequences ``[L_i, *]`` (``pack_padded_sequence(pad_sequence(sequences), lengths)``, as one ``cat``
    and one gather)."""
    seqs = list(sequences)
    lens = np.array([s.shape[0] for s in seqs], np.int64) if seqs else np.zeros(0, np.int64)
    seqs = list(_same_kind(tuple(seqs)))
    order = _sort(lens, enforce_sorted)
    src = np.arange(len(seqs)) if order is None else order
    bs, t, j = _layout(lens[src])
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    b = src[j]
    first = seqs[0]
    if len(seqs) == 1:
        data = first.clone()  # (a new tensor, as torch's)
    else:
        data = cat(seqs, 0).index_select(0, _ints(starts[b] + t, first))
    sorted_indices = None if order is None else _ints(order, first)
    unsorted = None if order is None else _ints(np.argsort(order), first)
    return PackedSequence(data, _cpu_ints(bs, first), sorted_indices, unsorted)


def unpack_sequence(packed_sequences: PackedSequence) -> list[Tensor]:
    """The packed sequences, in the caller's order (``unsorted_indices``), one gather each."""
    bs = batch_sizes_of(packed_sequences)
    lens = _lens_of(bs)
    offsets = np.concatenate([[0], np.cumsum(bs)[:-1]])
    un = packed_sequences.unsorted_indices
    un = np.arange(int(bs[0])) if un is None else np.asarray(un.tolist(), np.int64)
    data = packed_sequences.data
    return [data.index_select(0, _ints(offsets[:lens[j]] + j, data)) for j in un.tolist()]
