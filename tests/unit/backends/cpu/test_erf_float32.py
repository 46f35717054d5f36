"""The CPU backend's float32 erf (``backends/cpu/erf.py``, GELU's largest kernel): a polynomial in float32 on [-1, 1]
and a fit of erfc beyond (``erf.erf_tail``), within 1 ulp of the exact value, spelled in numpy (``erf_float32``) and
in C (the host library's ``tw_erf_f32``, ``host_c.erf_f32``). Checked against float64 (scipy's erf) over every third
float32 in [1/2, 1] (where the error peaks) and a sample elsewhere, both signs; every float32 in [-4, 4] was checked
once (0.98 ulp at most, 93% correctly rounded), and every one in (1, 4.5] for the fit (0.5014 ulp at most, 99.997%
correctly rounded). The two spellings give the same bits (on arrays of 256 elements and more: a shorter one takes
math.erf element by element in numpy); neither imports scipy."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tensorwire.backends.cpu import host_c
from tensorwire.backends.cpu.erf import C_BLOCK, erf_float32
from tensorwire.backends.cpu.erf import erf_tail as _erf_tail
from tensorwire.backends.cpu.kernels import KERNELS
from tensorwire.protocol import dtypes as D

scipy_special = pytest.importorskip("scipy.special")


def _ulps(x: np.ndarray) -> np.ndarray:
    """|erf_float32(x) - erf(x)| in units in the last place of the exact value rounded to float32."""
    exact = scipy_special.erf(x.astype(np.float64))
    got = erf_float32(x)
    assert got.dtype == np.float32 and got.shape == x.shape
    ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    return np.abs(got.astype(np.float64) - exact) / ulp


def _floats(lo: float, hi: float, every: int = 1) -> np.ndarray:
    a, b = (int(np.float32(v).view(np.uint32)) for v in (lo, hi))
    return np.arange(a, b + 1, every, dtype=np.uint32).view(np.float32)


@pytest.mark.parametrize("lo,hi,every", [(0.5, 1.0, 3), (0.0, 0.5, 257), (1.0, 4.5, 4099)])
def test_within_one_ulp_of_the_exact_value(lo, hi, every):
    x = _floats(lo, hi, every)
    for s in (x, -x):
        u = _ulps(s)
        assert u.max() <= 1.0, f"{u.max():.3f} ulp at {s[np.argmax(u)]!r}"
        assert np.mean(u <= 0.5 + 1e-9) > 0.9  # most results correctly rounded


def test_odd_and_special_values():
    x = _floats(0.0, 1.0, 97)
    assert np.array_equal(erf_float32(-x), -erf_float32(x))  # (signed zero included)
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1e-38, 1.0, -1.0, 3.9, 4.0, 1e30, -1e30]
                       + [0.5] * 300, np.float32)
    got = erf_float32(special)
    want = scipy_special.erf(special.astype(np.float64)).astype(np.float32)
    assert np.isnan(got[0])
    assert np.array_equal(got[1:14], want[1:14])
    assert np.signbit(got[4]) and not np.signbit(got[3])


def test_layouts_shapes_and_the_kernel():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((64, 300)) * 1.5).astype(np.float32)
    flat = erf_float32(x)
    assert np.array_equal(erf_float32(x.T), flat.T)  # a non-contiguous input, its values past 1 included
    assert np.array_equal(erf_float32(x[:, ::3]), flat[:, ::3])
    assert erf_float32(np.zeros((0, 5), np.float32)).shape == (0, 5)
    small = x[0, :10]  # (short inputs: math.erf element by element, within the same bound)
    assert np.all(_ulps(small) <= 1.0)
    k = KERNELS["erf"]
    assert np.array_equal(k([x], {}, x.shape, D.float32), flat)
    x64 = x.astype(np.float64)
    assert np.array_equal(k([x64], {}, x.shape, D.float64), scipy_special.erf(x64))  # float64: scipy's, exact
    h = x.astype(np.float16)  # float16: computed in float32, rounded back
    half = k([h], {}, x.shape, D.float16)
    assert half.dtype == np.float16 and np.array_equal(half, erf_float32(h.astype(np.float32)).astype(np.float16))


def test_the_fit_beyond_one_is_within_one_ulp_without_scipy():
    x = _floats(1.0, 4.5, 97)[1:]
    for s in (x, -x):
        exact = scipy_special.erf(s.astype(np.float64))
        got = _erf_tail(s)
        assert got.dtype == np.float32
        u = np.abs(got.astype(np.float64) - exact) / np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
        assert u.max() <= 0.51 and np.mean(u <= 0.5 + 1e-9) > 0.999, f"{u.max():.3f} ulp at {s[np.argmax(u)]!r}"
    special = np.array([np.nan, np.inf, -np.inf, 4.0, -4.0, 4.0001, 1e30, -1e30, np.nextafter(1, 2, dtype=np.float32)],
                       np.float32)
    got = _erf_tail(special)
    assert np.isnan(got[0]) and np.array_equal(got[1:8], [1, -1, 1, -1, 1, 1, -1])
    assert got[8] == scipy_special.erf(np.float64(special[8])).astype(np.float32)


def _python(code: str) -> str:
    """What ``code`` writes to stdout, run by a Python process of its own (it must exit 0)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_float32_erf_in_a_process_without_scipy():
    """scipy is not a dependency: without it, float32 erf gives the same bits as here, long inputs and short ones."""
    code = ("import sys, numpy as np\n"
            "sys.modules['scipy'] = None  # (import scipy.special raises ImportError)\n"
            "from tensorwire.backends.cpu import erf as E\n"
            "x = np.linspace(-5, 5, 1001, dtype=np.float32)\n"
            "long, short = E.erf_float32(x), E.erf_float32(x[::97])\n"
            "sys.stdout.write(long.tobytes().hex() + ' ' + short.tobytes().hex())\n")
    long, short = (np.frombuffer(bytes.fromhex(h), np.float32) for h in _python(code).split())
    x = np.linspace(-5, 5, 1001, dtype=np.float32)
    assert np.array_equal(long.view(np.uint32), erf_float32(x).view(np.uint32))
    assert np.array_equal(short.view(np.uint32), erf_float32(x[::97]).view(np.uint32))
    exact = scipy_special.erf(x.astype(np.float64))
    ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    assert np.all(np.abs(long - exact) / ulp <= 1.0)
    assert np.all(np.abs(short - exact[::97]) / ulp[::97] <= 1.0)


def test_the_erf_kernel_never_imports_scipy_for_float32():
    """A float32 model's GELU does not import scipy.special (~0.15 s of a worker's cold run), scipy installed or not;
    float64's erf still comes from scipy's loop, exactly."""
    code = ("import sys, numpy as np\n"
            "from tensorwire.backends.cpu.kernels import KERNELS\n"
            "from tensorwire.protocol import dtypes as D\n"
            "for n in (3, 300, 5000):\n"
            "    x = np.linspace(-3, 3, n, dtype=np.float32)\n"
            "    KERNELS['erf']([x], {}, x.shape, D.float32)\n"
            "    KERNELS['erf']([x.astype(np.float16)], {}, x.shape, D.float16)\n"
            "assert not any(m == 'scipy' or m.startswith('scipy.') for m in sys.modules), 'scipy imported'\n"
            "KERNELS['erf']([x.astype(np.float64)], {}, x.shape, D.float64)\n"
            "assert 'scipy.special' in sys.modules\n")
    _python(code)


@pytest.fixture(scope="module")
def c_erf():
    if not host_c.build_now():
        pytest.skip(f"the host C library cannot be built here: {host_c._why}")
    return host_c.erf_f32


def test_the_c_spelling_gives_the_numpy_spelling_s_bits(c_erf):
    """Every 61st float32 in [0, 4.6], both signs (the fit's whole range and past it), the special values, lengths
    around the C kernel's blocks, a non-contiguous input and a 0-d one: the same bits as the numpy spelling."""
    a, b = (int(np.float32(v).view(np.uint32)) for v in (0.0, 4.6))
    x = np.arange(a, b, 61, dtype=np.uint32).view(np.float32)
    for s in (x, -x):
        assert np.array_equal(c_erf(s).view(np.uint32), erf_float32(s).view(np.uint32))
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1.0, -1.0, 4.0, -4.0, 1e30, -1e30]
                       + [1.5, -0.5] * 200, np.float32)
    got = c_erf(special)
    assert np.isnan(got[0]) and np.array_equal(got[1:], erf_float32(special)[1:])
    assert np.signbit(got[4]) and not np.signbit(got[3])
    rng = np.random.default_rng(1)
    for n in (1, C_BLOCK - 1, C_BLOCK, C_BLOCK + 1, 3 * C_BLOCK + 7):
        v = (rng.standard_normal(n) * 2).astype(np.float32)
        assert np.array_equal(c_erf(v), erf_float32(v) if n >= 256 else c_erf(v[::-1])[::-1])
        assert np.all(_ulps(v) <= 1.0)
    m = (rng.standard_normal((70, 90)) * 2).astype(np.float32)
    assert np.array_equal(c_erf(m.T), erf_float32(np.ascontiguousarray(m.T)))
    big = (rng.standard_normal(1 << 21) * 2).astype(np.float32)  # (OpenMP's threads share its blocks)
    assert np.array_equal(c_erf(big), erf_float32(big))
    assert c_erf(np.float32(1.5).reshape(())).shape == () and c_erf(np.zeros((0, 4), np.float32)).shape == (0, 4)
    k = KERNELS["erf"]
    assert np.array_equal(k([m], {}, m.shape, D.float32), c_erf(m))  # (the kernel takes the C spelling once built)
    assert c_erf(m.astype(np.float64)) is None


def test_gelu_grad_in_c_follows_the_numpy_spelling(c_erf):
    """Exact GELU's input gradient in C (``host_c.gelu_grad_f32``, from the C erf): within 1e-6 of the numpy
    spelling relative to the size of its terms (``|g| (Phi(x) + |x| phi(x))``: the exponentials differ in their last
    bit, and ``Phi(x) + x phi(x)`` cancels near x = -0.75), the special values alike, lengths around the blocks; the
    kernel takes it once the part is built."""
    import math

    rng = np.random.default_rng(2)
    k = KERNELS["gelu_grad"]
    numpy_spelling = host_c.gelu_grad_f32
    for n in (1, C_BLOCK - 1, C_BLOCK + 1, 70_001):
        x = (rng.standard_normal(n) * 3).astype(np.float32)
        g = rng.standard_normal(n).astype(np.float32)
        got = host_c.gelu_grad_f32(g, x)
        assert np.array_equal(k([g, x], {}, x.shape, D.float32), got)
        host_c.gelu_grad_f32 = lambda *a: None
        try:
            want = k([g, x], {}, x.shape, D.float32)
        finally:
            host_c.gelu_grad_f32 = numpy_spelling
        x64 = x.astype(np.float64)
        phi = 0.5 * (1 + scipy_special.erf(x64 / math.sqrt(2)))
        term = np.abs(g) * (phi + np.abs(x64) * np.exp(-0.5 * x64 ** 2) / math.sqrt(2 * math.pi))
        assert np.all(np.abs(got.astype(np.float64) - want) <= 1e-6 * term + 1e-30), n
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30, 5.0, -5.0], np.float32)
    ones = np.ones_like(special)
    got = host_c.gelu_grad_f32(ones, special)
    host_c.gelu_grad_f32 = lambda *a: None
    try:
        want = k([ones, special], {}, special.shape, D.float32)
    finally:
        host_c.gelu_grad_f32 = numpy_spelling
    assert np.array_equal(got[:7], want[:7], equal_nan=True) and np.allclose(got[7:], want[7:], rtol=1e-6, atol=0)
    assert host_c.gelu_grad_f32(ones, special.astype(np.float64)) is None
