"""``tw.utils.data`` against ``torch.utils.data``: the module layout, samplers (lazy draws with replacement),
``DataLoader``'s arguments and checks, and ``default_collate``'s types."""

from __future__ import annotations

import collections
import itertools
import tracemalloc

import numpy as np
import pytest

import tensorwire as tw

torch = pytest.importorskip("torch")


def test_module_layout_as_torch():
    import tensorwire.utils.data as D
    from tensorwire.utils.data import dataloader, dataset, distributed, sampler
    from tensorwire.utils.data._utils import collate

    assert dataloader.DataLoader is D.DataLoader and dataset.TensorDataset is D.TensorDataset
    assert sampler.RandomSampler is D.RandomSampler and distributed.DistributedSampler is D.DistributedSampler
    assert collate.default_collate is D.default_collate is dataloader.default_collate
    for mod, tmod in (
        (D, torch.utils.data),
        (dataset, torch.utils.data.dataset),
        (sampler, torch.utils.data.sampler),
        (dataloader, torch.utils.data.dataloader),
    ):
        names = {
            "Dataset",
            "IterableDataset",
            "TensorDataset",
            "StackDataset",
            "ConcatDataset",
            "ChainDataset",
            "Subset",
            "random_split",
            "Sampler",
            "SequentialSampler",
            "RandomSampler",
            "SubsetRandomSampler",
            "WeightedRandomSampler",
            "BatchSampler",
            "DataLoader",
            "get_worker_info",
            "default_collate",
            "default_convert",
            "DistributedSampler",
        }
        for name in names & set(getattr(tmod, "__all__", ())):
            assert hasattr(mod, name), f"{mod.__name__}.{name}"


def test_random_sampler_with_replacement_draws_lazily():
    """``num_samples=int(1e10)`` used to materialise every index (MemoryError); torch draws lazily."""
    s = tw.utils.data.RandomSampler(range(10), replacement=True, num_samples=int(1e10), generator=tw.Generator(1))
    assert len(s) == int(1e10)
    tracemalloc.start()
    try:
        first = list(itertools.islice(iter(s), 5000))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20  # a chunk at a time (measured: well under 1 MiB)
    assert len(first) == 5000 and set(first) == set(range(10))
    loader = tw.utils.data.DataLoader(list(range(10)), batch_size=4, sampler=s)
    assert len(loader) == int(1e10) // 4
    again = list(
        itertools.islice(iter(tw.utils.data.RandomSampler(range(10), True, int(1e10), generator=tw.Generator(1))), 5000)
    )
    assert again == first  # reproducible from the generator


def test_random_sampler_without_replacement_and_checks():
    s = tw.utils.data.RandomSampler(range(5), num_samples=12, generator=tw.Generator(0))
    out = list(s)
    assert len(out) == 12 and sorted(out[:5]) == list(range(5)) and sorted(out[5:10]) == list(range(5))
    assert len(set(out[10:])) == 2
    for bad in (0, -3, 2.5):
        for lib in (torch.utils.data, tw.utils.data):
            with pytest.raises(ValueError, match="num_samples should be a positive integer"):
                lib.RandomSampler(range(5), num_samples=bad)
    for lib in (torch.utils.data, tw.utils.data):
        with pytest.raises(TypeError, match="replacement should be a boolean"):
            lib.RandomSampler(range(5), replacement=1)
        with pytest.raises(ValueError, match="batch_size should be a positive integer"):
            lib.BatchSampler(range(5), 0, False)
    w = tw.utils.data.WeightedRandomSampler([0.0, 1.0, 0.0, 3.0], 1000, generator=tw.Generator(2))
    drawn = collections.Counter(w)
    assert set(drawn) == {1, 3} and 600 < drawn[3] < 900
    assert sorted(tw.utils.data.WeightedRandomSampler([1, 1, 1, 0], 3, replacement=False)) == [0, 1, 2]


@pytest.mark.filterwarnings("ignore:.*pin_memory")
@pytest.mark.parametrize(
    "kw",
    [
        dict(batch_size=4),
        dict(batch_size=4, drop_last=True),
        dict(
            batch_size=3,
            num_workers=2,
            pin_memory=True,
            persistent_workers=True,
            prefetch_factor=2,
            worker_init_fn=lambda i: None,
        ),
        dict(batch_size=None),
    ],
)
def test_dataloader_arguments_match_torch(session, kw):
    x = np.arange(30, dtype=np.float32).reshape(10, 3)
    y = np.arange(10) % 3
    ours = tw.utils.data.DataLoader(tw.utils.data.TensorDataset(x, y), **kw)
    ref = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.tensor(x), torch.tensor(y)), **kw)
    assert len(ours) == len(ref)
    got, want = list(ours), list(ref)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        for u, v in zip(a, b):
            assert tuple(u.shape) == tuple(v.shape) and u.dtype.name == str(v.dtype).removeprefix("torch.")
            np.testing.assert_array_equal(u.numpy(), v.numpy())


def test_dataloader_collate_fn_and_errors(session):
    data = [(np.full(2, i, np.float32), i) for i in range(7)]

    def collate(batch):
        xs, ys = zip(*batch)
        return np.stack(xs).sum(), list(ys)

    for lib in (tw, torch):
        out = list(lib.utils.data.DataLoader(data, batch_size=3, collate_fn=collate, drop_last=True))
        assert [o[1] for o in out] == [[0, 1, 2], [3, 4, 5]] and out[0][0] == 6.0
    for lib in (tw, torch):
        D = lib.utils.data
        with pytest.raises(ValueError, match="num_workers option should be non-negative"):
            D.DataLoader(data, num_workers=-1)
        with pytest.raises(ValueError, match="persistent_workers option needs num_workers > 0"):
            D.DataLoader(data, persistent_workers=True)
        with pytest.raises(ValueError, match="prefetch_factor option could only be specified"):
            D.DataLoader(data, prefetch_factor=2)
        with pytest.raises(ValueError, match="mutually exclusive with drop_last"):
            D.DataLoader(data, batch_size=None, drop_last=True)
        with pytest.raises(ValueError, match="mutually exclusive with shuffle"):
            D.DataLoader(data, sampler=D.SequentialSampler(data), shuffle=True)
    assert tw.utils.data.get_worker_info() is None


def test_default_collate_types_match_torch(session):
    Point = collections.namedtuple("Point", "x y")
    cases = [
        [1.5, 2.5],
        [1, 2],
        [True, False],
        [np.float32(1), np.float32(2)],
        [np.ones((2, 3), np.float32), np.zeros((2, 3), np.float32)],
        [{"a": 1.0, "b": np.arange(3)}, {"a": 2.0, "b": np.arange(3)}],
        [(1, 2.0), (3, 4.0)],
        [Point(1, 2.0), Point(3, 4.0)],
        ["s", "t"],
    ]

    def flat(v):
        if isinstance(v, dict):
            return [x for k in sorted(v) for x in flat(v[k])]
        if isinstance(v, (list, tuple)) and not isinstance(v, str) and v and not isinstance(v[0], str):
            return [x for e in v for x in flat(e)]
        return [v]

    for batch in cases:
        ours = tw.utils.data.default_collate(batch)
        ref = torch.utils.data.default_collate(batch)
        assert type(ours).__name__ == type(ref).__name__ or isinstance(ref, torch.Tensor)
        for a, b in zip(flat(ours), flat(ref)):
            if isinstance(b, torch.Tensor):
                assert a.dtype.name == str(b.dtype).removeprefix("torch.") and tuple(a.shape) == tuple(b.shape)
                np.testing.assert_array_equal(a.numpy(), b.numpy())
            else:
                assert a == b
    with pytest.raises(RuntimeError, match="equal size"):
        tw.utils.data.default_collate([[1, 2], [3]])


def test_subsets_of_any_dataset_load_as_torch(session):
    """``Subset`` and ``random_split`` of a user's own ``Dataset`` (no batched read: the loader collates item by
    item) and of a ``TensorDataset`` (batched read through the subset's indices) give torch's batches. (The split's
    permutation comes from our generator, whose stream is not torch's: torch's side takes the same indices.)"""
    first, rest = tw.utils.data.random_split(range(9), [6, 3], generator=tw.Generator().manual_seed(0))
    assert sorted(first.indices + rest.indices) == list(range(9))

    def make(lib):
        class Squares(lib.utils.data.Dataset):
            def __len__(self):
                return 9

            def __getitem__(self, i):
                return np.full(2, i * i, np.float32), i

        x = np.arange(18, dtype=np.float32).reshape(9, 2)
        tensors = lib.utils.data.TensorDataset(lib.tensor(x), lib.tensor(np.arange(9)))
        split = lib.utils.data.random_split(Squares(), [6, 3], generator=lib.Generator().manual_seed(0))[0]
        if lib is torch:
            split = torch.utils.data.Subset(Squares(), first.indices)
        return [lib.utils.data.Subset(Squares(), [4, 1, 7, 2]), lib.utils.data.Subset(tensors, [8, 0, 3]), split]

    for ours, ref in zip(make(tw), make(torch)):
        got = list(tw.utils.data.DataLoader(ours, batch_size=2))
        want = list(torch.utils.data.DataLoader(ref, batch_size=2))
        assert len(got) == len(want)
        for a, b in zip(got, want):
            for u, v in zip(a, b):
                np.testing.assert_array_equal(u.numpy(), v.numpy())


def test_iterable_dataset_batches_as_torch(session):
    class Stream:
        def __init__(self, lib):
            self.lib = lib

        def make(self):
            lib = self.lib

            class S(lib.utils.data.IterableDataset):
                def __iter__(self):
                    return iter([np.float32(i) for i in range(7)])

            return S()

    for drop_last in (False, True):
        ours = [
            b.numpy().tolist() for b in tw.utils.data.DataLoader(Stream(tw).make(), batch_size=3, drop_last=drop_last)
        ]
        ref = [
            b.numpy().tolist()
            for b in torch.utils.data.DataLoader(Stream(torch).make(), batch_size=3, drop_last=drop_last)
        ]
        assert ours == ref
    with pytest.raises(ValueError, match="expected unspecified shuffle"):
        tw.utils.data.DataLoader(Stream(tw).make(), shuffle=True)
    chained = tw.utils.data.ChainDataset([Stream(tw).make(), Stream(tw).make()])
    assert len(list(tw.utils.data.DataLoader(chained, batch_size=7))) == 2
    st = tw.utils.data.StackDataset(a=[1, 2], b=[3, 4])
    assert st[1] == {"a": 2, "b": 4} and len(st) == 2
