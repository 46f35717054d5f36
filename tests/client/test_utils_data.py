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


def _same(ours, ref) -> None:
    """``ours`` (tensorwire) holds what ``ref`` (torch) holds: the same containers, and tensors of the same dtype,
    shape and values."""
    if isinstance(ref, torch.Tensor):
        assert isinstance(ours, tw.Tensor), type(ours)
        assert ours.dtype.name == str(ref.dtype).removeprefix("torch.") and tuple(ours.shape) == tuple(ref.shape)
        np.testing.assert_array_equal(ours.numpy(), ref.numpy())
        return
    assert type(ours) is type(ref), (type(ours), type(ref))
    if isinstance(ref, dict):
        assert list(ours) == list(ref)
        for k in ref:
            _same(ours[k], ref[k])
    elif isinstance(ref, (list, tuple)):
        assert len(ours) == len(ref)
        for a, b in zip(ours, ref):
            _same(a, b)
    else:
        assert ours == ref


def test_default_collate_infers_number_dtypes_as_torch(session):
    """A batch of numbers gets ``torch.tensor(batch)``'s dtype (``[1, 2.5]`` used to be int64 ``[1, 2]``)."""
    cases = [
        [1, 2.5],
        [1, np.float64(2.5)],
        [1, np.float32(2.5)],
        [True, 1],
        [1, True],
        [True, 2.5],
        [2.5, 1],
        [np.float32(1), 1.5],
        [np.float16(1), 2],
        [np.int8(1), np.uint8(2)],
        [np.int32(1), np.int64(2)],
        [np.bool_(True), np.bool_(False)],
        [np.float64(1), np.float32(2)],
        [1, 2 + 1j],
        [{"a": 1, "b": 0.5}, {"a": 2.5, "b": 1}],
        [(1, True), (2.5, 3)],
    ]
    for batch in cases:
        _same(tw.utils.data.default_collate(batch), torch.utils.data.default_collate(batch))
    ds = [(i, i + 0.5 if i else 0) for i in range(4)]  # (a first sample's int, the rest floats)
    for ours, ref in zip(tw.utils.data.DataLoader(ds, batch_size=2), torch.utils.data.DataLoader(ds, batch_size=2)):
        _same(ours, ref)


def test_collate_and_its_fn_map_extend_default_collate_as_torch(session):
    """``collate(batch, collate_fn_map=...)`` and ``default_collate_fn_map``, torch's documented extension point."""
    from tensorwire.utils.data._utils import collate as C

    tc = torch.utils.data._utils.collate

    class Box:
        def __init__(self, v):
            self.v = v

    def collate_box(batch, *, collate_fn_map=None):
        return sum(b.v for b in batch)

    batch = [{"box": Box(1), "x": [1, 2]}, {"box": Box(5), "x": [3, 4]}]
    for mod in (C, tc):
        assert set(mod.default_collate_fn_map) >= {float, int, str, bytes, np.ndarray}
        with pytest.raises(TypeError, match="default_collate: batch must contain"):
            mod.default_collate(batch)
        assert mod.collate([Box(2), Box(3)], collate_fn_map={Box: collate_box}) == 5
    _same(
        C.collate(batch, collate_fn_map={Box: collate_box, **C.default_collate_fn_map}),
        tc.collate(batch, collate_fn_map={Box: collate_box, **tc.default_collate_fn_map}),
    )
    saved = dict(C.default_collate_fn_map)
    try:
        C.default_collate_fn_map[Box] = collate_box
        assert tw.utils.data.default_collate(batch)["box"] == 6
        # a map changed for tensors is used by the loader too, even for a TensorDataset's batched read
        C.default_collate_fn_map[tw.Tensor] = lambda b, *, collate_fn_map=None: len(b)
        ds = tw.utils.data.TensorDataset(tw.arange(5.0), tw.arange(5))
        assert list(tw.utils.data.DataLoader(ds, batch_size=2)) == [[2, 2], [2, 2], [1, 1]]
    finally:
        C.default_collate_fn_map.clear()
        C.default_collate_fn_map.update(saved)
    assert tw.utils.data.default_collate([tw.ones(2), tw.zeros(2)]).shape == (2, 2)


def _getitems_dataset(lib, calls: list):
    class Batched(lib.utils.data.Dataset):
        def __len__(self):
            return 7

        def __getitem__(self, i):
            calls.append(("item", i))
            return {"x": np.full(2, i, np.float32), "y": i}

        def __getitems__(self, indices):
            calls.append(("items", list(indices)))
            return [{"x": np.full(2, i, np.float32), "y": i * 10} for i in indices]

    return Batched()


def test_dataloader_reads_batches_through_getitems_as_torch(session):
    """``Dataset.__getitems__`` is called once a batch and its samples go to ``collate_fn``, as torch's fetcher does
    (directly, through a ``Subset``, through a ``StackDataset``); ``batch_size=None`` still reads item by item."""
    logs = {}
    got = {}
    for lib in (tw, torch):
        D = lib.utils.data
        calls = logs[lib] = []
        ds = _getitems_dataset(lib, calls)
        got[lib] = [
            list(D.DataLoader(ds, batch_size=3)),
            list(D.DataLoader(ds, batch_size=2, collate_fn=lambda b: [s["y"] for s in b])),
            list(D.DataLoader(D.Subset(ds, [6, 0, 3]), batch_size=2)),
            list(D.DataLoader(D.StackDataset(ds, ds), batch_size=4)),
            list(D.DataLoader(ds, batch_size=None, sampler=[2])),
        ]
    assert logs[tw] == logs[torch] and ("items", [0, 1, 2]) in logs[tw] and ("item", 2) in logs[tw]
    _same(got[tw], got[torch])

    class Rows(tw.utils.data.TensorDataset):  # (a TensorDataset with a __getitems__ of its own: it is called)
        def __getitems__(self, indices):
            return [(tw.tensor(-1.0),) for _ in indices]

    out = list(tw.utils.data.DataLoader(Rows(tw.arange(4.0)), batch_size=2))
    assert [b[0].tolist() for b in out] == [[-1.0, -1.0], [-1.0, -1.0]]


@pytest.mark.parametrize("where", ["cluster", "numpy"])
def test_tensor_dataset_batches_negative_and_bad_indices_as_torch(session, where):
    """A batch of a ``TensorDataset`` with negative indices (``[-1, 0]`` was read as the slice ``[-1:1]``: empty),
    and an index out of range raises ``IndexError`` when the batch is read, as torch's."""
    values = np.arange(8, dtype=np.float32).reshape(4, 2)
    data = tw.tensor(values) if where == "cluster" else values
    ours_ds = tw.utils.data.TensorDataset(data, np.arange(4))
    ref_ds = torch.utils.data.TensorDataset(torch.tensor(values), torch.arange(4))
    for sampler in ([-1, 0, 1, 2], [-4, -3, -2, -1], [3, -1, 0, -4], [-2, -1, 0]):
        ours = list(tw.utils.data.DataLoader(ours_ds, sampler=sampler, batch_size=2))
        ref = list(torch.utils.data.DataLoader(ref_ds, sampler=sampler, batch_size=2))
        _same(ours, ref)
    for sampler in ([3, 4], [-5, 0], [0, 9]):
        for lib, ds in ((tw, ours_ds), (torch, ref_ds)):
            with pytest.raises(IndexError, match="out of bounds for dimension 0 with size 4"):
                list(lib.utils.data.DataLoader(ds, sampler=sampler, batch_size=2))
    sub = tw.utils.data.Subset(ours_ds, [3, 2, 1, 0])
    _same(
        list(tw.utils.data.DataLoader(sub, sampler=[-1, 0], batch_size=2)),
        list(torch.utils.data.DataLoader(torch.utils.data.Subset(ref_ds, [3, 2, 1, 0]), sampler=[-1, 0], batch_size=2)),
    )


def test_generator_takes_a_device_as_torch():
    """``Generator(device='cpu')`` and ``Generator('cpu')`` (torch's signature) with ``.device``; an int is still a
    seed (tensorwire's ``Generator(seed)``)."""
    for args, kwargs in (((), {}), (("cpu",), {}), ((), {"device": "cpu"}), ((torch.device("cpu"),), {})):
        ref = torch.Generator(*args, **kwargs)
        g = tw.Generator(*args, **kwargs)
        assert isinstance(g.device, tw.device) and g.device.type == ref.device.type == "cpu"
        assert g.device == "cpu"
    assert tw.Generator(device=tw.device("cpu:1")).device == "cpu:1"
    assert tw.Generator("cuda:1").device == tw.device("cuda", 1)  # (any device of the cluster: one generator)
    assert tw.Generator(7).initial_seed() == 7 == tw.Generator("cpu", seed=7).initial_seed()
    with pytest.raises(RuntimeError, match="Invalid device string"):
        tw.Generator("cpu:x")
    with pytest.raises(TypeError):
        tw.Generator(device=1.5)
    a = list(tw.utils.data.RandomSampler(range(9), generator=tw.Generator(device="cpu").manual_seed(3)))
    assert a == list(tw.utils.data.RandomSampler(range(9), generator=tw.Generator().manual_seed(3)))


def test_collate_convert_and_datasets_details_as_torch(session):
    """torch's smaller rules: ``default_convert`` turns tuples into lists (``batch_size=None`` batches too), a
    string field of tuple samples is a tuple, mappings keep their type, ``None`` and arbitrary objects (and numpy
    arrays of strings) are a ``TypeError``, ``ConcatDataset``'s checks, and ``len()`` of the loader's iterator."""
    Point = collections.namedtuple("Point", "x y")
    samples = [
        (np.ones(2), 3, "s"),
        [np.zeros(1), (np.int32(4), "t")],
        {"a": (1, np.float32(2))},
        collections.OrderedDict(b=np.arange(2), a=1),
        Point(np.ones(1), 2),
        "text",
        np.float64(1.5),
    ]
    for s in samples:
        _same(tw.utils.data.default_convert(s), torch.utils.data.default_convert(s))
    batches = [
        [("a", 1), ("b", 2)],
        [collections.OrderedDict(z=1, a=2.0), collections.OrderedDict(z=3, a=4.0)],
        [{"k": ("u", np.ones(2))}, {"k": ("v", np.zeros(2))}],
        [b"x", b"y"],
    ]
    for b in batches:
        _same(tw.utils.data.default_collate(b), torch.utils.data.default_collate(b))
    for bad in ([None, None], [object(), object()], [np.array(["a"]), np.array(["b"])], [(1, None), (2, None)]):
        for lib in (tw, torch):
            with pytest.raises(TypeError, match="default_collate: batch must contain tensors"):
                lib.utils.data.default_collate(bad)
    data = [(1, 2), (3, 4)]
    _same(
        list(tw.utils.data.DataLoader(data, batch_size=None)),
        list(torch.utils.data.DataLoader(data, batch_size=None)),
    )
    for lib in (tw, torch):
        D = lib.utils.data
        cat = D.ConcatDataset([[1, 2], [3]])
        assert (cat[-3], cat[-1], cat[2]) == (1, 3, 3)
        with pytest.raises(ValueError, match="absolute value of index should not exceed dataset length"):
            cat[-4]
        with pytest.raises(AssertionError, match="datasets should not be an empty iterable"):
            D.ConcatDataset([])
        it = iter(D.DataLoader(list(range(5)), batch_size=2))
        assert len(it) == 3 and iter(it) is it
        next(it)
        assert len(it) == 3 and len(list(it)) == 2
