"""torchvision's image datasets as they read their data, run on tensorwire: ``MNIST`` keeps its images as one uint8
tensor read with ``torch.frombuffer`` and reads ``self.data[index].numpy()`` and ``int(self.targets[index])`` in every
``__getitem__``; ``ToTensor`` and ``Normalize`` turn each image into floats (``.to(float32).div(255)``, ``sub_``,
``div_``). A view read one at a time of a larger root costs a round trip until those round trips would have fetched
the root whole, then the root is fetched once (``KnownValues.rent``). Counted, not timed; values against numpy, and
PyTorch where installed."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tensorwire as tw
from tensorwire import known_values as K
from tensorwire.protocol import dtypes as D
from tensorwire.utils.data import DataLoader

from .test_known_values import round_trips

N, SIDE = 600, 28


def _idx_bytes(arr: np.ndarray) -> bytes:
    """``arr`` (uint8) in the MNIST files' idx format: a magic number, the sizes, the bytes."""
    head = (0x0800 | arr.ndim).to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in arr.shape)
    return head + arr.tobytes()


def _read_idx(lib, data: bytes):
    """torchvision's ``read_sn3_pascalvincent_tensor`` for uint8 files, written against ``lib``."""
    nd = int.from_bytes(data[0:4], "big") % 256
    s = [int.from_bytes(data[4 * (i + 1): 4 * (i + 2)], "big") for i in range(nd)]
    parsed = lib.frombuffer(bytearray(data), dtype=lib.uint8, offset=4 * (nd + 1))
    return parsed.view(*s)


def _to_tensor(lib, pic: np.ndarray, normalize: bool):
    """torchvision's ``to_tensor`` of a one-channel image's bytes, then (``normalize``) ``Normalize((0.1307,),
    (0.3081,))``, whose ``clone`` is the device's (a clone of a value the client holds is recorded)."""
    img = lib.from_numpy(np.array(pic, np.uint8, copy=True))
    img = img.view(pic.shape[0], pic.shape[1], 1).permute((2, 0, 1)).contiguous()
    img = img.to(dtype=lib.get_default_dtype()).div(255)
    if not normalize:
        return img
    mean = lib.as_tensor((0.1307,), dtype=img.dtype).view(-1, 1, 1)
    std = lib.as_tensor((0.3081,), dtype=img.dtype).view(-1, 1, 1)
    return img.clone().sub_(mean).div_(std)


class _MNIST:
    """torchvision's ``MNIST`` reading its data (``__getitem__`` as torchvision's, the image as a numpy array)."""

    def __init__(self, lib, images: bytes, labels: bytes, normalize: bool = True):
        self.lib, self.normalize = lib, normalize
        self.data = _read_idx(lib, images)
        self.targets = _read_idx(lib, labels).long()

    def __getitem__(self, index):
        img, target = self.data[index], int(self.targets[index])
        return _to_tensor(self.lib, img.numpy(), self.normalize), target

    def __len__(self):
        return len(self.data)


@pytest.fixture(scope="module")
def files():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (N, SIDE, SIDE), dtype=np.uint8)
    labels = rng.integers(0, 10, N).astype(np.uint8)
    return images, labels, _idx_bytes(images), _idx_bytes(labels)


@pytest.mark.parametrize("dtype, count, offset", [("uint8", -1, 0), ("int16", -1, 2), ("float32", 2, 4),
                                                  ("float64", -1, 8), ("bfloat16", 3, 2)])
def test_frombuffer_reads_the_bytes_as_torch(session, dtype, count, offset):
    raw = bytearray(np.random.default_rng(1).integers(0, 256, 64, dtype=np.uint8).tobytes())
    t = tw.frombuffer(raw, dtype=getattr(tw, dtype), count=count, offset=offset)
    dt = D.get(dtype)
    want = np.frombuffer(bytes(raw), dtype=dt.np, count=count, offset=offset)
    assert t.dtype is dt and t.shape == want.shape
    np.testing.assert_array_equal(t.numpy().view(np.uint8), want.view(np.uint8))
    raw[offset] ^= 0xFF  # (tensorwire's tensor keeps the values of the call: it lives on the cluster)
    np.testing.assert_array_equal(t.numpy().view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("args, kwargs", [((bytearray(8),), {"dtype": "int16", "offset": 9}),
                                          ((bytearray(8),), {"dtype": "int16", "count": 5}),
                                          ((bytearray(7),), {"dtype": "int16"}),
                                          ((bytearray(8),), {"dtype": "int16", "offset": 1}),
                                          ((b"",), {"dtype": "uint8"}),
                                          (([1, 2],), {"dtype": "uint8"})])
def test_frombuffer_raises_what_torch_raises(session, args, kwargs):
    torch = pytest.importorskip("torch")
    with pytest.raises(Exception) as ours:
        tw.frombuffer(*args, **{**kwargs, "dtype": getattr(tw, kwargs["dtype"])})
    with warnings.catch_warnings(), pytest.raises(Exception) as theirs:
        warnings.simplefilter("ignore")
        torch.frombuffer(*args, **{**kwargs, "dtype": getattr(torch, kwargs["dtype"])})
    assert type(ours.value) is type(theirs.value)
    if isinstance(ours.value, ValueError):
        assert str(ours.value) == str(theirs.value)


def test_a_larger_root_read_a_view_at_a_time_is_fetched_once_its_round_trips_would_have(session, files):
    images, labels, image_bytes, label_bytes = files
    ds = _MNIST(tw, image_bytes, label_bytes)
    rents = -(-images.nbytes // K.RENT_BYTES)  # (the reads of the images by a round trip, then one fetch of them)
    with round_trips(session) as n:
        for i in range(rents):
            np.testing.assert_array_equal(ds.data[i].numpy(), images[i])
    assert n[0] == rents
    with round_trips(session) as n:
        for i in range(rents, N):
            np.testing.assert_array_equal(ds.data[i].numpy(), images[i])
        assert [int(ds.targets[i]) for i in range(N)] == labels.tolist()
    assert n[0] == 0  # (the labels: a small upload, held, and its cast to int64 worked out on the client)
    ds.data.add_(1)  # a new value: the views read it, not the one fetched before
    np.testing.assert_array_equal(ds.data[7].numpy(), images[7] + 1)


def test_a_root_past_the_buying_limit_is_read_a_view_at_a_time(session, files, monkeypatch):
    images, _, image_bytes, label_bytes = files
    monkeypatch.setattr(K, "BUY_BYTES", images.nbytes - 1)
    ds = _MNIST(tw, image_bytes, label_bytes)
    with round_trips(session) as n:
        for i in range(2 * images.nbytes // K.RENT_BYTES + 2):
            np.testing.assert_array_equal(ds.data[i].numpy(), images[i])
    assert n[0] == 2 * images.nbytes // K.RENT_BYTES + 2


def test_a_loaders_batches_read_the_images_without_a_round_trip(session, files):
    images, labels, image_bytes, label_bytes = files
    ds = _MNIST(tw, image_bytes, label_bytes, normalize=False)
    for i in range(N):  # (the images bought)
        ds.data[i].numpy()
    loader = DataLoader(ds, batch_size=32, shuffle=False)
    session.flush()
    with round_trips(session) as n:
        x, y = next(iter(loader))
        out = tw.nn.Linear(SIDE * SIDE, 10)(x.view(32, -1))
    assert n[0] == 0
    np.testing.assert_array_equal(x.numpy(), images[:32, None].astype(np.float32) / np.float32(255))
    assert y.tolist() == labels[:32].tolist() and out.shape == (32, 10)


def test_the_same_images_as_torch(files):
    torch = pytest.importorskip("torch")
    _, _, image_bytes, label_bytes = files
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch's frombuffer warns of a non-writable buffer only for bytes)
        theirs = _MNIST(torch, image_bytes, label_bytes)
    ours = _MNIST(tw, image_bytes, label_bytes)
    for i in (0, 5, N - 1):
        (a, la), (b, lb) = ours[i], theirs[i]
        assert la == lb and a.dtype is tw.float32
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    ours.normalize = theirs.normalize = False
    for i in (1, 6):
        np.testing.assert_array_equal(ours[i][0].numpy(), theirs[i][0].numpy())


def test_a_clone_of_a_held_value_is_held_and_a_repeat_stays_the_devices(session):
    x = tw.tensor([1.0, 2.0])
    c = x.clone()
    assert session.holds(c) and c.tolist() == [1.0, 2.0]
    assert not session.holds(x.repeat(1 << 13))  # (a copy of an expansion past HOST_ELEMENTS: bytes a device makes)
