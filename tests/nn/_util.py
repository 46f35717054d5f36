"""Helpers shared by the nn tests."""

from __future__ import annotations

import numpy as np
import pytest

try:
    import torch
except ImportError:  # pragma: no cover - torch is optional
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (reference tests need it)")


def backward_works() -> bool:
    """Whether autograd (issue 3) is usable: ``(x * x).sum().backward()`` fills ``x.grad``."""
    try:
        import tensorwire as tw

        return hasattr(tw.Tensor, "backward") and hasattr(tw, "no_grad")
    except Exception:  # pragma: no cover
        return False


needs_autograd = pytest.mark.skipif(not backward_works(), reason="autograd (issue 3) is not available: "
                                    "Tensor.backward / tw.no_grad are missing")


def to_torch(t, dtype=None):
    a = np.array(t.numpy())
    return torch.tensor(a) if dtype is None else torch.tensor(a, dtype=dtype)


def copy_weights(tw_module, torch_module) -> None:
    """Give ``tw_module`` the parameters and buffers of ``torch_module`` (same names)."""
    import tensorwire as tw

    sd = {k: tw.tensor(v.detach().numpy()) for k, v in torch_module.state_dict().items()}
    tw_module.load_state_dict(sd)


def close(a, b, rtol=1e-5, atol=1e-6) -> None:
    a = a.detach().numpy() if hasattr(a, "numpy") and not (torch is not None and isinstance(a, torch.Tensor)) else a
    if torch is not None and isinstance(b, torch.Tensor):
        b = b.detach().numpy()
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=rtol, atol=atol)
