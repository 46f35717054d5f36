"""The CPU's host C functions (``backends/cpu/host_c.py``): ``randn``'s fill gives the numbers of
``protocol.random.normal``'s numpy spelling bit for bit (seeds and counters wrapping mod 2**64, float32 and float64,
sizes across OpenMP's threshold), the CPU kernel taking it where it applies and numpy's spelling where it does not;
``max_pool2d``'s gradient is the numpy kernel's (and torch's); the library is built only for a large call while the
kernel cache lacks it."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tensorwire.backends.cpu import compiled, host_c
from tensorwire.backends.cpu.kernels import KERNELS
from tensorwire.protocol import dtypes as D
from tensorwire.protocol import random as R

needs_cc = pytest.mark.skipif(compiled.runtime() is None, reason=f"the CPU cannot compile: {compiled.why_not()}")


@needs_cc
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("seed,offset,shape", [(0, 0, (4096,)), (7, 12, (65, 71)), (2**63 + 5, 2**64 - 7, (70001,)),
                                               (2**64 - 1, 3, (3, 128, 257))])
def test_c_fill_is_the_portable_stream(built, seed, offset, shape, dtype):
    """(``built``: the kernel cache may lack the library, which a draw this small would not build.)"""
    got = host_c.normal(seed, offset, shape, dtype)
    assert got is not None and got.shape == shape and got.dtype == np.dtype(dtype)
    assert got.tobytes() == R.normal(seed, offset, shape, dtype).tobytes()


def test_where_it_does_not_apply_numpy_draws():
    """Half dtypes and small draws are left to numpy's spelling (None), and the kernel's numbers are the stream's
    whichever draws them."""
    assert host_c.normal(1, 0, (8,), np.float32) is None
    assert host_c.normal(1, 0, (10000,), np.float16) is None
    for shape, dt in [((8,), D.float32), ((10000,), D.float16), ((300, 40), D.float64)]:
        got = KERNELS["randn"]([], {"seed": 5, "offset": 9}, shape, dt)
        assert got.tobytes() == R.normal(5, 9, shape, dt.np).tobytes()


#: run in a fresh process: this one may hold the fill already (a loaded library counts as cached)
_POLICY = """
import numpy as np
from pathlib import Path
from tensorwire.backends.cpu import host_c as F
from tensorwire.protocol import random as R
cache = Path(__import__("os").environ["TENSORWIRE_KERNEL_CACHE"])
F.BUILD_ELEMENTS = 20000
built, load = [], F._load
F._load = lambda part, source, names, build: (build and built.append(part), load(part, source, names, build))[1]
assert F.normal(3, 0, (5000,), np.float32) is None
assert F._lib is None and set(F._parts.values()) == {"absent"} and not any(cache.rglob("*.so")) and F._building is None
assert F.normal(3, 0, (20000,), np.float64) is None  # (numpy draws it: the build has started, in the background)
F._building.join(100)
assert len(list(cache.rglob("*.so"))) == 3  # (each part a library of its own; erf's and the float64 rows': theirs only)
assert built == ["random", "conv", "rows"], built  # (the part the large call wanted first, then the others)
big = F.normal(3, 0, (20000,), np.float64)
assert big is not None and big.tobytes() == R.normal(3, 0, (20000,), np.float64).tobytes()
small = F.normal(3, 0, (5000,), np.float32)
assert small is not None and small.tobytes() == R.normal(3, 0, (5000,), np.float32).tobytes()
"""

#: a middling draw has randn's fill built alone (a fresh process, as above)
_FILL_ALONE = """
import numpy as np
from tensorwire.backends.cpu import host_c as F
from tensorwire.protocol import random as R
F.BUILD_ELEMENTS, F.RANDOM_BUILD_ELEMENTS = 40000, 10000
built, load = [], F._load
F._load = lambda part, source, names, build: (build and built.append(part), load(part, source, names, build))[1]
assert F.normal(3, 0, (9000,), np.float32) is None and F._building is None  # (under both: nothing built)
assert F.normal(3, 0, (10000,), np.float32) is None  # (numpy draws it: the fill's build has started)
F._building.join(100)
assert built == ["random"] and F._parts["conv"] == F._parts["rows"] == "absent", (built, F._parts)
got = F.normal(3, 0, (10000,), np.float32)
assert got is not None and got.tobytes() == R.normal(3, 0, (10000,), np.float32).tobytes()
x = np.random.default_rng(0).standard_normal((400, 100)).astype(np.float32)
assert F.log_softmax(x) is None  # (a large call: the other parts, its own first)
F._building.join(100)
assert built == ["random", "rows", "conv"], built
"""


@needs_cc
def test_small_draws_do_not_wait_for_the_compiler(tmp_path):
    """With a kernel cache that lacks the fill, draws under ``BUILD_ELEMENTS`` stay on numpy (nothing is built: a
    program of small inits never starts gcc); the first large one starts the build in the background and is drawn by
    numpy, and once it is built large and small ones use it."""
    import os
    import subprocess
    import sys

    cache = tmp_path / "kernels"
    cache.mkdir(mode=0o700)
    env = {**os.environ, "TENSORWIRE_KERNEL_CACHE": str(cache)}
    done = subprocess.run([sys.executable, "-c", _POLICY], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


#: the build a large row call starts (a fresh process, as above)
_ROWS_FIRST = """
import numpy as np
from tensorwire.backends.cpu import host_c as F
F.BUILD_ELEMENTS = 20000
built, load = [], F._load
F._load = lambda part, source, names, build: (build and built.append(part), load(part, source, names, build))[1]
x = np.random.default_rng(0).standard_normal((200, 100)).astype(np.float32)
assert F.log_softmax(x) is None  # (numpy's spelling: the build has started)
F._building.join(100)
assert built == ["rows", "conv"], built  # (randn's fill: for draws only)
assert F.log_softmax(x) is not None
"""


#: erf's part: a small call builds nothing, one of ERF_BUILD_ELEMENTS builds erf's part alone (a GELU model's
#: interpreted steps: no conv or row kernels for it), and then every call takes the C spelling, the same bits as numpy's
_ERF_ALONE = """
import numpy as np
from tensorwire.backends.cpu import erf, host_c as F
built, load = [], F._load
F._load = lambda part, source, names, build: (build and built.append(part), load(part, source, names, build))[1]
x = np.random.default_rng(0).standard_normal(F.ERF_BUILD_ELEMENTS).astype(np.float32)
assert F.erf_f32(x[:F.ERF_BUILD_ELEMENTS - 1]) is None and F._building is None and not built
assert F.erf_f32(x) is None  # (numpy's spelling: the build has started)
F._building.join(100)
assert built == ["math"], built
assert np.array_equal(F.erf_f32(x), erf.erf_float32(x)) and F.erf_f32(x[:5]) is not None
"""


#: a large float64 row call builds the float64 row kernels alone (a float32 model never builds them), and they are the
#: numpy kernels' answers
_ROWS64_ALONE = """
import numpy as np
from tensorwire.backends.cpu import host_c as F
from tensorwire.backends.cpu.kernels import _log_softmax_along
F.BUILD_ELEMENTS = 20000
built, load = [], F._load
F._load = lambda part, source, names, build: (build and built.append(part), load(part, source, names, build))[1]
x = np.random.default_rng(0).standard_normal((200, 100))
assert F.log_softmax(x) is None  # (numpy's spelling: the build has started)
F._building.join(100)
assert built == ["rows64"] and F._parts["rows"] == F._parts["conv"] == "absent", (built, F._parts)
assert F.log_softmax(x.astype(np.float32)) is None and F.log_softmax(x) is not None
F._building.join(100)
assert built == ["rows64", "rows", "conv"], built  # (a large float32 call: the others, its own first)
assert np.allclose(F.log_softmax(x), _log_softmax_along(x, 1), rtol=1e-13, atol=1e-12)
"""


@needs_cc
def test_the_part_a_large_call_wants_is_built_first(tmp_path):
    """The first large call's part is built first, then the others in ``PARTS``' order: a model whose first large
    call is a log_softmax or a batch norm has its row kernels first (and not randn's fill, built for draws only). A
    middling draw builds the fill alone (a large model's initialisation), and a large call later the parts still
    missing; a middling erf builds erf's part alone, and a large float64 row call the float64 row kernels alone."""
    import os
    import subprocess
    import sys

    for i, script in enumerate((_ROWS_FIRST, _FILL_ALONE, _ERF_ALONE, _ROWS64_ALONE)):
        cache = tmp_path / f"kernels{i}"  # (each an empty kernel cache)
        cache.mkdir(mode=0o700)
        env = {**os.environ, "TENSORWIRE_KERNEL_CACHE": str(cache)}
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]


def test_the_parts_hold_every_function_once():
    """Each function of the library is in one part, and a part's functions are its library's (the conv kernels in the
    part built first)."""
    names = [n for _, _, part in host_c.PARTS for n in part]
    assert sorted(names) == sorted(host_c._SIGNATURES) and len(set(names)) == len(names)
    assert [name for name, _, _ in host_c.PARTS] == ["random", "conv", "rows", "rows64", "math"]
    assert host_c.PARTS[0][2] == {"tw_randn_fill"} and "tw_conv2d_direct_pad_f32" in host_c.PARTS[1][2]
    assert [host_c.PART_OF[n] for n in ("tw_randn_fill", "tw_conv2d_direct_f32", "tw_bn_apply_f32", "tw_bn_apply_f64",
                                        "tw_erf_f32")] == ["random", "conv", "rows", "rows64", "math"]
    assert {n.replace("_f32", "_f64") for n in host_c.PARTS[2][2]} == host_c.PARTS[3][2]  # (each row kernel in both)
    assert host_c.OWN_CALLS_ONLY == {"random", "rows64", "math"}
    for _, source, part in host_c.PARTS:
        for name in part:
            assert re.search(rf"\b{name}\b", source), name  # (defined there, or made by a macro there)


#: (input shape, attributes, ceil_mode) of max_pool2d: ResNet's stem, a dilated rectangle with ceil_mode, tiling
#: windows, overlapping ones past the input's edge
POOLS = [((8, 16, 14, 14), dict(kernel=[3, 3], stride=[2, 2], padding=[1, 1], dilation=[1, 1]), False),
         ((4, 16, 9, 11), dict(kernel=[2, 3], stride=[1, 2], padding=[1, 1], dilation=[2, 1]), True),
         ((4, 32, 10, 10), dict(kernel=[2, 2], stride=[2, 2], padding=[0, 0], dilation=[1, 1]), False),
         ((4, 64, 7, 7), dict(kernel=[3, 3], stride=[2, 2], padding=[1, 1], dilation=[1, 1]), True)]


@pytest.fixture
def built():
    """The library built (this process may not have it yet, and a call would only start its build)."""
    assert host_c.build_now(), host_c._why


@needs_cc
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,attrs,ceil", POOLS)
def test_max_pool2d_grad_in_c_is_the_numpy_kernels(built, monkeypatch, shape, attrs, ceil, dtype):
    """Each window's gradient at its first maximum (the first NaN where there is one; ties to the first), windows
    adding up where they overlap: the numpy kernel's values (the same positions; sums to rounding), and torch's
    bit for bit where torch is installed."""
    from tensorwire.protocol.ops.conv import _window_geometry

    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(dtype)
    x.flat[1::7] = x.flat[0::7][: len(x.flat[1::7])]  # ties
    x.flat[5::97] = np.nan
    geom = _window_geometry(shape, attrs, ceil)
    gy = rng.standard_normal((shape[0], shape[1], *geom[4])).astype(dtype)
    a = {**attrs, "ceil_mode": ceil}
    got = KERNELS["max_pool2d_grad"]([x, gy], a, shape, D.from_numpy(np.dtype(dtype)))
    assert np.array_equal(got, host_c.max_pool2d_grad(x, gy, geom))
    monkeypatch.setattr(host_c, "max_pool2d_grad", lambda *args: None)  # the numpy kernel
    want = KERNELS["max_pool2d_grad"]([x, gy], a, shape, D.from_numpy(np.dtype(dtype)))
    assert np.array_equal(got != 0, want != 0)
    np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == np.float32 else 1e-14, atol=1e-6)
    torch = pytest.importorskip("torch")
    tx = torch.tensor(x, requires_grad=True)
    y = torch.nn.functional.max_pool2d(tx, attrs["kernel"], attrs["stride"], attrs["padding"], attrs["dilation"],
                                       ceil_mode=ceil)
    (ref,) = torch.autograd.grad(y, tx, torch.tensor(gy))
    assert np.array_equal(got, ref.numpy())


@needs_cc
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(700, 97), (3, 4, 2000), (3, 1 << 13)])
def test_log_softmax_and_its_gradient_in_c_are_the_numpy_kernels(built, monkeypatch, shape, dtype):
    """Along the last axis: the numpy spellings' values to rounding (the sums run in another order), infinities and
    NaNs where they put them; the kernels take the C where it applies, numpy's spelling along another axis."""
    from tensorwire.backends.cpu.kernels import _log_softmax_along

    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    x[0, ..., :3] = [np.inf, 0.0, 1.0]
    x.reshape(-1, shape[-1])[1] = -np.inf
    x.reshape(-1, shape[-1])[2, 5] = np.nan
    g = rng.standard_normal(shape).astype(dtype)
    dt = D.from_numpy(np.dtype(dtype))
    with np.errstate(all="ignore"):
        got = KERNELS["log_softmax"]([x], {"dim": -1}, shape, dt)
    got_grad = KERNELS["log_softmax_grad"]([g, got], {"dim": len(shape) - 1}, shape, dt)
    assert np.array_equal(got, host_c.log_softmax(x), equal_nan=True)
    assert np.array_equal(got_grad, host_c.log_softmax_grad(g, got), equal_nan=True)
    monkeypatch.setattr(host_c, "log_softmax", lambda x: None)  # numpy's spellings
    monkeypatch.setattr(host_c, "log_softmax_grad", lambda g, y: None)
    with np.errstate(all="ignore"):  # (the kernels run under it)
        want = _log_softmax_along(x, len(shape) - 1)
    want_grad = KERNELS["log_softmax_grad"]([g, want], {"dim": -1}, shape, dt)
    tol = {"rtol": 2e-6, "atol": 2e-5} if dtype == np.float32 else {"rtol": 1e-13, "atol": 1e-12}
    np.testing.assert_allclose(got, want, **tol)  # (equal NaNs and infinities where the numpy spelling has them)
    fine = np.isfinite(want_grad)
    assert np.array_equal(np.isfinite(got_grad), fine)
    np.testing.assert_allclose(got_grad[fine], want_grad[fine], rtol=tol["rtol"] * 10, atol=tol["atol"] * 10)
    assert host_c.log_softmax(x.astype(np.float16)) is None and host_c.log_softmax(x[:1, ..., :8]) is None


@needs_cc
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(100, 64, 8, 8), (3, 5, 4099), (2, 3, 1, 1000)])
def test_batch_norm_in_c_is_the_numpy_kernels(built, monkeypatch, shape, dtype):
    """Batch norm's kernels take the C where it applies: the statistics and the gradient's sums are numpy's to
    rounding (float64 sums in another order), the normalisation and the input gradient numpy's bits (the same float
    operations in the same order), training and evaluation, with and without the affine parameters."""
    rng = np.random.default_rng(2)
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    c = shape[1]
    w, b = rng.standard_normal(c).astype(dtype), rng.standard_normal(c).astype(dtype)
    dt = D.from_numpy(np.dtype(dtype))

    def run():
        st = KERNELS["batch_norm_stats"]([x], {}, (2 * c,), dt)
        out = {"stats": st}
        for affine in (True, False):
            a = {"training": True, "has_stats": True, "has_weight": affine, "has_bias": affine, "eps": 1e-5}
            wb = [w, b] if affine else []
            out[f"y{affine}"] = KERNELS["batch_norm"]([x, st, *wb], a, shape, dt)
            out[f"own{affine}"] = KERNELS["batch_norm"]([x, *wb], {**a, "has_stats": False}, shape, dt)
            gs = KERNELS["batch_norm_grad_stats"]([g, x, st], a, (2 * c,), dt)
            out[f"gs{affine}"] = gs
            out[f"dx{affine}"] = KERNELS["batch_norm_grad"]([g, x, st, gs, *wb[:1]], a, shape, dt)
            ev = {**a, "training": False, "has_stats": False}
            out[f"ev{affine}"] = KERNELS["batch_norm"]([x, st[:c], st[c:], *wb], ev, shape, dt)
            out[f"evdx{affine}"] = KERNELS["batch_norm_grad"]([g, x, st, *wb[:1]], ev, shape, dt)
        return out

    got = run()
    assert host_c.bn_moments(x.reshape(shape[0], c, -1)) is not None
    with monkeypatch.context() as numpy_only:
        for name in ("bn_moments", "bn_grad_sums", "bn_apply", "bn_grad_input"):
            numpy_only.setattr(host_c, name, lambda *args: None)
        want = run()
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-12}
    for name in want:
        np.testing.assert_allclose(got[name], want[name], err_msg=name, **tol)
    # the same per-channel values in: numpy's bits out
    assert np.array_equal(host_c.bn_apply(x.reshape(shape[0], c, -1), w, b),
                          x.reshape(shape[0], c, -1) * w[:, None] + b[:, None])
    x3, g3 = x.reshape(shape[0], c, -1), g.reshape(shape[0], c, -1)
    k, m, f, s = (rng.standard_normal(c).astype(dtype) for _ in range(4))
    ref = g3 * k[:, None]
    ref += (x3 - m[:, None]) * f[:, None]
    ref -= s[:, None]
    assert np.array_equal(host_c.bn_grad_input(g3, x3, k, m, f, s), ref)
    assert host_c.bn_moments(x3.astype(np.float16)) is None and host_c.bn_apply(x3[:1, :1, :8], w, b) is None
