"""Running one program twice: with PyTorch, and with tensorwire imported as ``torch``.

Each program in this folder is ordinary PyTorch code written as ``main(torch, init)``: it uses only the module it is
given (``torch`` or ``tensorwire``), takes its initial weights and any random draws from ``init`` (numpy arrays, so
both runs start from the same numbers), and returns its losses step by step.
"""

from __future__ import annotations

import numpy as np
import pytest


def reference():
    """PyTorch, or a skip saying how to get it."""
    return pytest.importorskip("torch", reason="the programs compare against PyTorch (pip install torch==2.13.0)")


def run_both(main, init: dict, rtol: float = 1e-4, atol: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
    """Run ``main`` with PyTorch and with tensorwire from the same ``init``; assert the losses agree."""
    import tensorwire

    torch = reference()
    torch.manual_seed(0)
    want = np.asarray(main(torch, init), np.float64)
    got = np.asarray(main(tensorwire, init), np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return got, want
