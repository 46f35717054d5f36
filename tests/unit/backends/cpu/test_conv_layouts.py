"""The CPU conv kernels' layouts (``backends/cpu/conv.py``: dense, channels-last, flat) against the float64
window-by-window references of ``backends/testing/conv_pool.py``, forward and both gradients. The conformance
suite's conv cases have few channels and run the flat layout only; these shapes run each layout, which every case
asserts, so a change to the choice cannot leave a layout untested."""

from __future__ import annotations

import numpy as np
import pytest

from tensorwire.backends.cpu import conv
from tensorwire.backends.cpu.kernels import KERNELS
from tensorwire.backends.testing.conv_pool import _conv2d_grads_ref, _conv2d_ref
from tensorwire.protocol import dtypes as D

#: (name, input shape, weight shape, attributes, the layout it runs)
CASES = [
    ("dense", (3, 5, 4, 3), (6, 5, 4, 3), {}, "dense"),
    ("dense-strided", (2, 3, 4, 4), (2, 3, 4, 4), {"stride": [2, 3]}, "dense"),
    ("cl-stride-pad", (2, 8, 7, 6), (4, 8, 3, 2), {"stride": [2, 1], "padding": [1, 2]}, "channels_last"),
    ("cl-dcgan", (3, 16, 8, 8), (5, 16, 4, 4), {"stride": [2, 2], "padding": [1, 1]}, "channels_last"),
    ("cl-dilation", (1, 9, 9, 8), (3, 9, 2, 3), {"stride": [2, 2], "padding": [1, 0], "dilation": [2, 1]},
     "channels_last"),
    ("cl-stride-over-kernel", (2, 8, 9, 9), (3, 8, 2, 2), {"stride": [3, 3]}, "channels_last"),
    ("cl-uncovered-tail", (2, 8, 8, 7), (4, 8, 3, 3), {"stride": [2, 2]}, "channels_last"),
    # the input gradient's col2im in runs (kernel width a multiple of the column stride), kernel rows dilated
    ("cl-runs-row-dilation", (2, 8, 9, 10), (3, 8, 2, 4), {"stride": [2, 2], "padding": [1, 1], "dilation": [2, 1]},
     "channels_last"),
    # stride 1, 3x3, 16 channels and more: ResNet's blocks
    ("cl-stride-1", (2, 16, 6, 5), (4, 16, 3, 3), {"padding": [1, 1]}, "channels_last"),
    ("cl-stride-1-dilated-rect", (2, 16, 7, 6), (3, 16, 2, 3), {"padding": [1, 2], "dilation": [2, 1]},
     "channels_last"),
    ("flat-stride-1-1x1", (2, 16, 5, 5), (4, 16, 1, 1), {}, "flat"),
    ("flat-stride-1-few-channels", (2, 8, 6, 6), (4, 8, 3, 3), {"padding": [1, 1]}, "flat"),
    ("flat-groups", (2, 8, 6, 6), (4, 4, 3, 3), {"stride": [2, 2], "groups": 2}, "flat"),
    ("flat-few-channels", (2, 3, 7, 7), (4, 3, 3, 3), {"stride": [2, 2], "padding": [1, 1]}, "flat"),
    # strided, the kernel a multiple of the stride: the forward and weight gradient run on the space-to-depth
    ("flat-s2d-dcgan", (2, 1, 8, 8), (3, 1, 4, 4), {"stride": [2, 2], "padding": [1, 1]}, "flat"),
    ("flat-s2d-rect-wide-pad", (2, 3, 9, 7), (4, 3, 4, 3), {"stride": [2, 3], "padding": [2, 1]}, "flat"),
    ("flat-s2d-uncovered-tail", (1, 2, 10, 9), (2, 2, 2, 2), {"stride": [2, 2]}, "flat"),
    ("flat-s2d-one-column", (2, 1, 6, 5), (2, 1, 4, 1), {"stride": [2, 1], "padding": [1, 0]}, "flat"),
]


def _geometry(a: dict) -> dict:
    return {k: tuple(a.get(k, d)) for k, d in (("stride", (1, 1)), ("padding", (0, 0)), ("dilation", (1, 1)))}


def _run(sx, sw_, a, dtype, with_bias):
    rng = np.random.default_rng(0)
    x, w = (rng.uniform(-2, 2, s).astype(dtype) for s in (sx, sw_))
    b = rng.uniform(-2, 2, sw_[0]).astype(dtype)
    g, geo = a.get("groups", 1), _geometry(a)
    want_y = _conv2d_ref(x.astype(np.float64), w.astype(np.float64), groups=g, **geo)
    gy = rng.uniform(-2, 2, want_y.shape).astype(dtype)
    want_gx, want_gw = _conv2d_grads_ref(x.astype(np.float64), w.astype(np.float64), gy.astype(np.float64),
                                         groups=g, **geo)
    dt = D.from_numpy(np.dtype(dtype))
    got_y = KERNELS["conv2d"]([x, w, b] if with_bias else [x, w], a, want_y.shape, dt)
    if with_bias:
        want_y = want_y + b.astype(np.float64)[None, :, None, None]
    got_gx = KERNELS["conv2d_grad_input"]([gy, w], {**a, "input_size": list(sx[2:])}, sx, dt)
    got_gw = KERNELS["conv2d_grad_weight"]([x, gy], {**a, "kernel": list(sw_[2:])}, sw_, dt)
    return [(got_y, want_y), (got_gx, want_gx), (got_gw, want_gw)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name,sx,sw_,a,layout", CASES, ids=[c[0] for c in CASES])
def test_layout_matches_reference(name, sx, sw_, a, layout, dtype):
    assert conv._layout(sx[0], sx[1], sx[2], sx[3], sw_[2], sw_[3], a) == layout
    assert (layout == "flat" and conv._s2d_factor(a, sw_[2], sw_[3]) is not None) == name.startswith("flat-s2d")
    tol = 1e-4 if dtype == np.float32 else 1e-11
    for got, want in _run(sx, sw_, a, dtype, with_bias=name.startswith(("dense", "cl-stride-pad"))):
        assert got.dtype == dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


def test_channels_last_blocks_of_single_images(monkeypatch):
    """Columns too big for one block run a block of images at a time (here one image each): the same results."""
    monkeypatch.setattr(conv, "_CHANNELS_LAST_BLOCK", 1)
    for got, want in _run((3, 8, 7, 6), (4, 8, 3, 2), {"stride": [2, 1], "padding": [1, 2]}, np.float64, True):
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11 * np.abs(want).max())


def test_flat_column_blocks_of_single_images(monkeypatch):
    """A cap on the positions of the flat layout's column blocks (here one image each): the same results, the weight
    gradient summed over the blocks."""
    monkeypatch.setattr(conv, "_CONV_BLOCK_POSITIONS", 1)
    for got, want in _run((3, 3, 7, 7), (4, 3, 3, 3), {"stride": [2, 2], "padding": [1, 1]}, np.float64, False):
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11 * np.abs(want).max())


def test_half_precision_runs_in_float32():
    sx, sw_, a = (2, 8, 8, 8), (4, 8, 4, 4), {"stride": [2, 2], "padding": [1, 1]}
    for got, want in _run(sx, sw_, a, np.float16, False):
        assert got.dtype == np.float16
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-2, atol=2e-2 * np.abs(want).max())


#: (name, input shape, weight shape, attributes, whether outer taps read only padding) (``conv._tap_crop``: the
#: sub-kernel of the taps that read the input, over the window they read, without padding)
CROPS = [
    # ResNet's last stage on small images: a 3x3 kernel over a 1x1 input, padding 1 (the centre tap alone: a product)
    ("centre-only", (3, 6, 1, 1), (4, 6, 3, 3), {"padding": [1, 1]}, True),
    # ... its strided downsampling: 2x2 input, stride 2 (the lower-right 2x2 taps: the input itself, a product)
    ("strided-corner", (2, 5, 2, 2), (3, 5, 3, 3), {"stride": [2, 2], "padding": [1, 1]}, True),
    # wide padding on one dim only, the cropped window still reaching into the padding (zeros copied in)
    ("wide-rows", (2, 3, 1, 5), (2, 3, 5, 3), {"padding": [3, 1]}, True),
    # dilated taps over a short input
    ("dilated", (1, 2, 1, 4), (2, 2, 3, 2), {"padding": [2, 1], "dilation": [2, 1]}, True),
    # grouped, a 1x1 input
    ("grouped", (2, 4, 1, 1), (6, 2, 3, 3), {"padding": [1, 1], "groups": 2}, True),
    # a stride larger than the input: one output a dim, the taps that read it alone
    ("stride-over-input", (2, 3, 1, 2), (2, 3, 5, 5), {"stride": [4, 4], "padding": [2, 3]}, True),
    # a tap between two that read (tap 2 reads rows -1 and 2 of 2) keeps the hull whole: nothing cropped
    ("tap-skipped-inside", (2, 3, 2, 2), (2, 3, 5, 5), {"stride": [3, 3], "padding": [3, 3]}, False),
    # every tap reads some input: nothing cropped
    ("all-taps", (2, 3, 2, 2), (2, 3, 3, 3), {"padding": [1, 1]}, False),
]


def _hull_by_enumeration(k: int, d: int, p: int, s: int, size: int, out: int) -> tuple[int, int]:
    taps = [i for i in range(k) if any(0 <= i * d - p + o * s < size for o in range(out))]
    return taps[0], taps[-1] + 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name,sx,sw_,a,crops", CROPS, ids=[c[0] for c in CROPS])
def test_taps_reading_only_padding_are_dropped(name, sx, sw_, a, crops, dtype):
    """The conv of the taps that read the input, over the window they read (``_tap_crop``), equals the whole conv
    (forward, input and weight gradients; the dropped taps' weight gradient zero), and keeps exactly the taps that
    read some input (enumerated output by output)."""
    geo = _geometry(a)
    (sh, sw), (ph, pw), (dh, dw) = geo["stride"], geo["padding"], geo["dilation"]
    oh = (sx[2] + 2 * ph - dh * (sw_[2] - 1) - 1) // sh + 1
    ow = (sx[3] + 2 * pw - dw * (sw_[3] - 1) - 1) // sw + 1
    crop = conv._tap_crop(sx[2], sx[3], sw_[2], sw_[3], oh, ow, a)
    assert (crop is not None) == crops
    if crop is not None:
        assert (crop.i0, crop.i1) == _hull_by_enumeration(sw_[2], dh, ph, sh, sx[2], oh)
        assert (crop.j0, crop.j1) == _hull_by_enumeration(sw_[3], dw, pw, sw, sx[3], ow)
    tol = 1e-4 if dtype == np.float32 else 1e-11
    for got, want in _run(sx, sw_, a, dtype, with_bias=True):
        assert got.dtype == dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


#: stride-1 convs the blocked direct C kernels take (``conv._direct_fits``): widths that leave partial 16-column blocks
#: (forward) and partial 8-lane rows (weight gradient), output channel counts that leave partial blocks of 4,
#: non-square, wide and 1x1 kernels, bias, padding 0 to k - 1, 64 channels; the kernels each case runs
DIRECT = [
    ("direct-resnet", (4, 16, 13, 17), (16, 16, 3, 3), {"padding": [1, 1]}, "fig"),
    ("direct-rgb-in", (3, 3, 20, 33), (6, 3, 3, 3), {"padding": [1, 1]}, "fig"),
    ("direct-odd-out-5x5", (4, 7, 15, 14), (5, 7, 5, 5), {"padding": [2, 2]}, "fig"),
    ("direct-rect-unpadded", (3, 9, 16, 40), (3, 9, 1, 3), {}, "fig"),
    ("direct-rect-pad", (2, 32, 12, 12), (32, 32, 3, 2), {"padding": [2, 1]}, "fig"),
    ("direct-64-channels", (2, 64, 12, 16), (61, 64, 3, 3), {"padding": [1, 1]}, "fig"),
    ("direct-1x1", (3, 24, 12, 12), (10, 24, 1, 1), {}, "fig"),
    # 7 and 8 wide: blocks of two rows of 8 columns (an odd last row) for the input gradient, and at 8 the forward;
    # the weight gradient's the gemms'
    ("direct-narrow-8", (8, 16, 8, 8), (8, 16, 3, 3), {"padding": [1, 1]}, "fi"),
    ("direct-narrow-7-odd-rows", (10, 16, 7, 7), (9, 16, 3, 3), {"padding": [1, 1]}, "i"),
    # padding past k - 1: the input gradient is no conv of the kernel's shape (the gemms'), the other two are
    ("direct-pad-past-kernel", (4, 4, 16, 16), (4, 4, 3, 3), {"padding": [3, 3]}, "fg"),
]


@pytest.mark.parametrize("name,sx,sw_,a,runs", DIRECT, ids=[c[0] for c in DIRECT])
def test_direct_kernel_matches_reference(monkeypatch, name, sx, sw_, a, runs):
    """float32 stride-1 convs of few channels run the forward (f), the input gradient (i: the forward kernel with the
    weights flipped) and the weight gradient (g) on the direct kernels, to float32 rounding of the float64
    references; float64 never takes them."""
    from tensorwire.backends.cpu import compiled, host_c

    if compiled.runtime() is None:
        pytest.skip(f"the CPU cannot compile: {compiled.why_not()}")
    assert host_c.build_now(), host_c._why
    calls = []

    def counted(fn, kind):
        def run(*args):
            out = fn(*args)
            calls.append(kind if out is not None else kind + " declined")
            return out
        return run

    monkeypatch.setattr(host_c, "conv2d_direct", counted(host_c.conv2d_direct, "direct"))
    monkeypatch.setattr(host_c, "conv2d_grad_weight_direct", counted(host_c.conv2d_grad_weight_direct, "wgrad"))
    want_calls = sorted(["direct"] * (("f" in runs) + ("i" in runs)) + ["wgrad"] * ("g" in runs))
    for got, want in _run(sx, sw_, a, np.float32, with_bias=True):
        assert got.dtype == np.float32 and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert sorted(calls) == want_calls
    _run(sx, sw_, a, np.float64, with_bias=False)
    assert sorted(calls) == want_calls  # (float64 is not even offered to them)


@pytest.mark.parametrize("sx", [(8, 4, 12, 20), (1, 32, 48, 40), (3, 16, 20, 20)],
                         ids=["one-thread", "one-image-on-threads", "images-shared-by-threads"])
def test_direct_forward_pads_an_image_at_a_time(monkeypatch, sx):
    """The stride-1 forward kernel pads the input an image at a time in each thread's buffer (no padded copy of the
    whole input): a call too small for threads, one image whose output channels the threads share (each pads it),
    and three images whose (image, channel block) tasks the threads split (a thread pads an image again only where
    its run of tasks reaches a new one). All match the reference."""
    from tensorwire.backends.cpu import compiled, host_c

    if compiled.runtime() is None:
        pytest.skip(f"the CPU cannot compile: {compiled.why_not()}")
    assert host_c.build_now(), host_c._why
    whole = []
    real = host_c.placed
    monkeypatch.setattr(host_c, "placed", lambda *args, **kw: whole.append(args[0].shape) or real(*args, **kw))
    rng = np.random.default_rng(3)
    x, w = rng.uniform(-2, 2, sx).astype(np.float32), rng.uniform(-2, 2, (32, sx[1], 3, 3)).astype(np.float32)
    got = KERNELS["conv2d"]([x, w], {"padding": [1, 1]}, (sx[0], 32, *sx[2:]), D.float32)
    want = _conv2d_ref(x.astype(np.float64), w.astype(np.float64), **_geometry({"padding": [1, 1]}))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert whole == []


@pytest.mark.parametrize("hw", [(7, 7), (8, 8), (5, 3), (13, 20)], ids=lambda hw: f"{hw[0]}x{hw[1]}")
def test_the_direct_kernel_adds_into_its_output(hw):
    """``direct_on`` with ``add`` (how the phases of a strided conv are summed) adds the conv to what the output
    holds, in the blocks of rows that outputs at most 8 wide take (a last block past the rows: 7 and 5 rows) and in
    those of wider ones."""
    from tensorwire.backends.cpu import compiled, host_c

    if compiled.runtime() is None:
        pytest.skip(f"the CPU cannot compile: {compiled.why_not()}")
    assert host_c.build_now(), host_c._why
    h, wd = hw
    rng = np.random.default_rng(5)
    x, w = rng.uniform(-2, 2, (3, 16, h, wd)).astype(np.float32), rng.uniform(-2, 2, (9, 16, 3, 3)).astype(np.float32)
    want = _conv2d_ref(x.astype(np.float64), w.astype(np.float64), **_geometry({"padding": [1, 1]}))
    before = rng.uniform(-2, 2, want.shape).astype(np.float32)
    got = before.copy()
    host_c.direct_on(host_c.placed(x, 1, 1, *host_c.direct_extent(h, wd, 3, 3)), w, h, wd, got, add=True)
    np.testing.assert_allclose(got, want + before, rtol=1e-4, atol=1e-4 * np.abs(want).max())


#: strided convs the direct kernels run as stride-1 convs over the input's phases (``conv_phases.py``): ResNet's
#: downsampling 3x3, DCGAN's 4x4, a 7x7 stem, a 1x1 shortcut (phases without taps), uneven strides and paddings past
#: the kernel, input rows and columns no window reads; the kernels each case runs (f, i, g)
PHASES = [
    ("phases-resnet", (4, 16, 17, 25), (7, 16, 3, 3), {"stride": [2, 2], "padding": [1, 1]}, "fig"),
    ("phases-dcgan", (3, 8, 20, 27), (5, 8, 4, 4), {"stride": [2, 2], "padding": [1, 1]}, "fig"),
    ("phases-stem-7x7", (2, 3, 31, 29), (4, 3, 7, 7), {"stride": [2, 2], "padding": [3, 3]}, "fg"),
    ("phases-1x1", (3, 8, 25, 26), (6, 8, 1, 1), {"stride": [2, 2]}, "fig"),
    ("phases-uneven", (2, 8, 30, 40), (5, 8, 3, 2), {"stride": [3, 2], "padding": [2, 0]}, "fig"),
    ("phases-pad-past-kernel", (2, 8, 28, 40), (8, 8, 5, 3), {"stride": [2, 3], "padding": [4, 1]}, "fig"),
    ("phases-unread-tail", (2, 9, 26, 34), (3, 9, 3, 3), {"stride": [2, 2]}, "fig"),
]


@pytest.mark.parametrize("name,sx,sw_,a,runs", PHASES, ids=[c[0] for c in PHASES])
def test_strided_convs_on_the_phases_match_reference(monkeypatch, name, sx, sw_, a, runs):
    """float32 strided convs of up to 64 channels run the forward (f) and the weight gradient (g), and from 8 input
    channels the input gradient (i), on the phases, to float32 rounding of the float64 references; float64 never."""
    from tensorwire.backends.cpu import compiled, conv_phases, host_c

    if compiled.runtime() is None:
        pytest.skip(f"the CPU cannot compile: {compiled.why_not()}")
    assert host_c.build_now(), host_c._why
    monkeypatch.setattr(host_c, "MIN_ELEMENTS", 1)
    calls = []
    for kind, fn in (("f", "forward"), ("i", "grad_input"), ("g", "grad_weight")):
        def run(*args, fn=getattr(conv_phases, fn), kind=kind):
            out = fn(*args)
            calls.append(kind if out is not None else kind + " declined")
            return out
        monkeypatch.setattr(conv_phases, fn, run)
    for got, want in _run(sx, sw_, a, np.float32, with_bias=True):
        assert got.dtype == np.float32 and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert sorted(calls) == sorted(runs)
    _run(sx, sw_, a, np.float64, with_bias=False)
    assert sorted(calls) == sorted(runs)  # (float64 is not even offered to them)


def test_phases_a_chunk_of_images_at_a_time(monkeypatch):
    """Phases larger than ``PHASE_BYTES`` are split and run a chunk of images at a time (here one image each): the
    forward's chunks written to their images, the weight gradient's float64 sums added across chunks."""
    from tensorwire.backends.cpu import compiled, conv_phases, host_c

    if compiled.runtime() is None:
        pytest.skip(f"the CPU cannot compile: {compiled.why_not()}")
    assert host_c.build_now(), host_c._why
    monkeypatch.setattr(host_c, "MIN_ELEMENTS", 1)
    monkeypatch.setattr(conv_phases, "PHASE_BYTES", 1)
    chunks = []
    real = conv_phases._image_chunks

    def counted(n, per_image):
        out = real(n, per_image)
        chunks.append(len(out))
        return out

    monkeypatch.setattr(conv_phases, "_image_chunks", counted)
    for got, want in _run((3, 16, 17, 25), (7, 16, 3, 3), {"stride": [2, 2], "padding": [1, 1]}, np.float32, True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert chunks == [3, 3]  # (the forward's and the weight gradient's)


@pytest.mark.parametrize("stride", [1, 2])
def test_an_infinite_input_is_not_multiplied_by_padding(monkeypatch, stride):
    """The weight gradient's kernel reads whole 8-lane vectors past a row's end (zeros of the output gradient there):
    an infinite input value those lanes also read gives the reference's +inf, not inf * 0 = NaN."""
    from tensorwire.backends.cpu import compiled, host_c

    if compiled.runtime() is None:
        pytest.skip(f"the CPU cannot compile: {compiled.why_not()}")
    assert host_c.build_now(), host_c._why
    x = np.ones((2, 4, 25, 25), np.float32)
    x[1, 2, 7, 24] = np.inf  # (stride 1: output column 22 reads it, and lane 23 past the 23 outputs; stride 2: 11, 12)
    w_shape = (4, 4, 3, 3)
    a = {"stride": [stride, stride]}
    oh = (25 - 3) // stride + 1
    gy = np.ones((2, 4, oh, oh), np.float32)
    dt = D.from_numpy(np.dtype(np.float32))
    got = KERNELS["conv2d_grad_weight"]([x, gy], a, w_shape, dt)
    _, want = _conv2d_grads_ref(x.astype(np.float64), np.zeros(w_shape), gy.astype(np.float64),
                                **_geometry(a))
    assert not np.isnan(want).any() and np.isinf(want).any()
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    assert not np.isnan(got).any()
