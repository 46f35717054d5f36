"""Complex tensors end to end (issue 33): creation, printing, parts and views, promotion in arithmetic, ``tw.fft``
against numpy's float64 transforms, and gradients (PyTorch's convention: dL/da + i dL/db for z = a + ib) against
central finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw

pytestmark = pytest.mark.usefixtures("session")

RNG = np.random.default_rng(33)


def _c(shape, dtype=np.complex64) -> np.ndarray:
    return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(dtype)


def test_creation_parts_and_printing():
    z = tw.tensor([1 + 2j, 3 - 1j])
    assert z.dtype is tw.complex64 and z.is_complex() and tw.is_complex(z) and not z.is_floating_point()
    assert repr(z) == "tensor([1.+2.j, 3.-1.j])"
    assert "dtype=tensorwire.complex128" in repr(z.to(tw.cdouble))
    np.testing.assert_array_equal(z.real.numpy(), [1, 3])
    np.testing.assert_array_equal(z.imag.numpy(), [2, -1])
    np.testing.assert_array_equal(z.conj().numpy(), [1 - 2j, 3 + 1j])
    np.testing.assert_allclose(z.abs().numpy(), [5 ** 0.5, 10 ** 0.5], rtol=1e-6)
    assert z.abs().dtype is tw.float32 and z.angle().dtype is tw.float32
    np.testing.assert_allclose(z.angle().numpy(), np.angle([1 + 2j, 3 - 1j]), rtol=1e-6)
    assert z[1].item() == 3 - 1j and z.tolist() == [1 + 2j, 3 - 1j]
    a = _c((3, 4), np.complex128)
    t = tw.tensor(a)
    assert t.dtype is tw.complex128
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_array_equal(tw.full((2,), 1.5 - 2j, dtype=tw.complex64).numpy(), [1.5 - 2j] * 2)
    with pytest.raises(tw.DTypeError):
        tw.tensor([1.0]).imag  # noqa: B018  (a real tensor has no imaginary part, as torch)


def test_views_polar_and_complex():
    a = _c((2, 3))
    r = tw.view_as_real(tw.tensor(a))
    assert r.shape == (2, 3, 2) and r.dtype is tw.float32
    np.testing.assert_array_equal(r.numpy(), np.stack([a.real, a.imag], -1))
    np.testing.assert_array_equal(tw.view_as_complex(r).numpy(), a)
    m, p = RNG.random(5).astype(np.float32), RNG.standard_normal(5).astype(np.float32)
    np.testing.assert_allclose(tw.polar(tw.tensor(m), tw.tensor(p)).numpy(), m * np.exp(1j * p), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_array_equal(tw.complex(tw.tensor(m), tw.tensor(p)).numpy(), m + 1j * p)
    with pytest.raises(tw.DTypeError):
        tw.complex(tw.tensor(m), tw.tensor(p.astype(np.float64)))
    with pytest.raises(tw.ShapeError):
        tw.view_as_complex(tw.tensor(np.zeros((2, 3), np.float32)))


def test_arithmetic_and_promotion():
    a, b = _c((4, 5)), _c((5,), np.complex128)
    x = RNG.standard_normal((4, 5))
    za, zb, tx = tw.tensor(a), tw.tensor(b), tw.tensor(x)  # complex64, complex128, float64
    for got, want in (((za * zb), a * b), ((za / tx), a / x), ((tx + 1j), x + 1j), ((za - 2.5), a - 2.5),
                      ((za @ zb.to(tw.complex64)), a @ b.astype(np.complex64)), (za.exp(), np.exp(a)),
                      (za.sum(1), a.sum(1)), (za.mean(), a.mean())):
        np.testing.assert_allclose(got.numpy(), want, rtol=2e-5, atol=1e-5)
    assert (za * zb).dtype is tw.complex128 and (za * tx).dtype is tw.complex128
    assert (tx * 1j).dtype is tw.complex128 and (tx.float() * 1j).dtype is tw.complex64
    assert (za == za).all().item() and za.isclose(za + 1e-9).all().item()
    assert za.float().dtype is tw.float32  # complex to real keeps the real part, as torch
    np.testing.assert_array_equal(za.float().numpy(), a.real)
    with pytest.raises(tw.DTypeError):
        za < za  # noqa: B015  (no order)
    with pytest.raises(tw.DTypeError):
        za.max()


@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
def test_fft_against_numpy_float64(norm):
    x = RNG.standard_normal((3, 6, 8))
    z = _c((3, 6, 8), np.complex128)
    tx, tz = tw.tensor(x), tw.tensor(z)
    npn = norm or "backward"
    cases = [
        (tw.fft.fft(tz, norm=norm), np.fft.fft(z, norm=npn)),
        (tw.fft.fft(tx, n=11, dim=1, norm=norm), np.fft.fft(x, n=11, axis=1, norm=npn)),
        (tw.fft.ifft(tz, n=5, norm=norm), np.fft.ifft(z, n=5, norm=npn)),
        (tw.fft.fft2(tz, s=(4, 10), norm=norm), np.fft.fft2(z, s=(4, 10), norm=npn)),
        (tw.fft.ifftn(tz, norm=norm), np.fft.ifftn(z, norm=npn)),
        (tw.fft.rfft(tx, norm=norm), np.fft.rfft(x, norm=npn)),
        (tw.fft.rfftn(tx, s=(5, 7), dim=(0, 2), norm=norm), np.fft.rfftn(x, s=(5, 7), axes=(0, 2), norm=npn)),
        (tw.fft.rfftn(tx, dim=(2, 0), norm=norm), np.fft.rfftn(x, axes=(2, 0), norm=npn)),  # (the last is halved)
        (tw.fft.irfftn(tz, dim=(2, 1), norm=norm), np.fft.irfftn(z, axes=(2, 1), norm=npn)),
        (tw.fft.irfft(tz, norm=norm), np.fft.irfft(z, norm=npn)),
        (tw.fft.irfft(tz, n=9, dim=1, norm=norm), np.fft.irfft(z, n=9, axis=1, norm=npn)),
        (tw.fft.irfft2(tz, norm=norm), np.fft.irfft2(z, norm=npn)),
        (tw.fft.hfft(tz, norm=norm), np.fft.hfft(z, norm=npn)),
        (tw.fft.ihfft(tx, norm=norm), np.fft.ihfft(x, norm=npn)),
    ]
    for got, want in cases:
        assert got.shape == want.shape
        assert got.dtype is (tw.complex128 if np.iscomplexobj(want) else tw.float64)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-10)
    f32 = tw.fft.fft(tw.tensor(x.astype(np.float32)))
    assert f32.dtype is tw.complex64
    np.testing.assert_allclose(f32.numpy(), np.fft.fft(x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tw.fft.fftfreq(5, 0.5).numpy(), np.fft.fftfreq(5, 0.5), rtol=1e-6)
    np.testing.assert_allclose(tw.fft.rfftfreq(6).numpy(), np.fft.rfftfreq(6), rtol=1e-6)
    with pytest.raises(tw.DTypeError):
        tw.fft.rfft(tz)


def _grad_against_differences(fn, inputs: list[np.ndarray], eps=1e-6):
    """Our gradient of the real loss ``fn(*tensors)`` against central differences along random directions, for
    complex inputs the perturbation ``a + ib`` read as ``dL/da + i dL/db`` (PyTorch's convention)."""
    leaves = [tw.tensor(a, requires_grad=True) for a in inputs]
    loss = fn(*leaves)
    grads = tw.autograd.grad(loss, leaves)
    for _ in range(3):
        dirs = [RNG.standard_normal(a.shape) + (1j * RNG.standard_normal(a.shape) if np.iscomplexobj(a) else 0)
                for a in inputs]

        def at(sign, dirs=dirs):
            with tw.no_grad():
                return fn(*[tw.tensor(a + sign * eps * d) for a, d in zip(inputs, dirs)]).item()

        fd = (at(1) - at(-1)) / (2 * eps)
        an = sum(float(np.real(np.vdot(g.numpy(), d))) for g, d in zip(grads, dirs))  # Re <g, d>
        assert abs(fd - an) <= 1e-6 * (1 + abs(fd)), (fd, an)


def test_complex_gradients_against_finite_differences():
    z, w = _c((3, 4), np.complex128), _c((4, 2), np.complex128)
    x = RNG.standard_normal((3, 4))
    v = RNG.standard_normal((3, 2))

    def loss(z, w, x):
        y = (z * x + z.exp() / (z + 3)) @ w
        return (y.abs() * tw.tensor(v)).sum() + (z.conj() * z).real.sum() + y.angle().sum() + y.imag.mean() + \
            z.var() + y.norm() + (z.sigmoid() * z.sqrt()).real.sum()

    _grad_against_differences(loss, [z, w, x])

    def spectral(x, z):
        f = tw.fft.rfft(x, n=6) * tw.fft.fft(z, n=5, dim=0)[1:4]
        return tw.view_as_real(tw.fft.ifft2(f)).square().sum() + tw.fft.irfft(z, n=7).sum() + \
            tw.fft.hfft(z).abs().sum()

    _grad_against_differences(spectral, [x, z])


def test_the_gradient_of_a_real_input_is_real():
    x = tw.tensor(RNG.standard_normal(5), requires_grad=True)
    (x * (1 + 2j)).abs().sum().backward()
    assert x.grad.dtype is tw.float64
    np.testing.assert_allclose(x.grad.numpy(), np.sign(x.detach().numpy()) * 5 ** 0.5, rtol=1e-12)


def test_an_op_without_a_complex_gradient_is_refused():
    z = tw.tensor(_c((4,)), requires_grad=True)
    y = tw.nn.functional.softplus(z.real) + z.sigmoid().real  # sigmoid: holomorphic, differentiated
    y.sum().backward()
    assert z.grad is not None and z.grad.dtype is tw.complex64
    z.grad = None
    with pytest.raises(tw.DTypeError, match="gradient of sign"):
        z.sgn().real.sum().backward()


def test_linalg_eig():
    a = RNG.standard_normal((4, 4))
    w, v = tw.linalg.eig(tw.tensor(a))
    assert w.dtype is tw.complex128 and v.dtype is tw.complex128
    np.testing.assert_allclose(a @ v.numpy(), v.numpy() * w.numpy(), atol=1e-10)
    np.testing.assert_allclose(np.sort_complex(tw.linalg.eigvals(tw.tensor(a)).numpy()),
                               np.sort_complex(np.linalg.eigvals(a)), atol=1e-10)


def test_conjugate_transposes_conjugate():
    """``.H``, ``.mH`` and ``adjoint()`` conjugate a complex tensor as torch's (until session 60 they only
    transposed it, and ``adjoint`` was missing); a real tensor's are its transposes."""
    z = np.array([[1 + 2j, 3 - 1j], [1j, 2 + 0j]], dtype=np.complex64)
    t = tw.tensor(z)
    for got in (t.H, t.mH, t.adjoint(), tw.adjoint(t)):
        np.testing.assert_array_equal(got.numpy(), z.conj().T)
    b = tw.tensor(np.stack([z, z * 2]))
    np.testing.assert_array_equal(b.mH.numpy(), np.stack([z, z * 2]).conj().transpose(0, 2, 1))
    assert tuple(tw.ones(2, 3).mH.shape) == (3, 2) and tw.ones(2, 3).H.dtype is tw.float32
    with pytest.raises(tw.ShapeError, match="adjoint"):
        tw.ones(3).adjoint()
