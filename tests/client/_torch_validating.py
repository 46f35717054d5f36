"""PyTorch with its distributions' argument validation on, for the distributions' tests' ``torch`` fixtures.

torch.compile turns torch's validation off for the whole process (torch/_dynamo/eval_frame.py), and a module run
before these in the same worker may have compiled (the selftest's speed rows): on while a module runs, and back as
it was after."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


def validating_torch() -> Iterator:
    """A fixture's body: yields torch (a skip without it) with validation on, and restores it after."""
    torch = pytest.importorskip("torch", reason="PyTorch is the reference here (pip install torch==2.13.0)")
    dist = torch.distributions.Distribution
    before = dist._validate_args
    dist.set_default_validate_args(True)
    yield torch
    dist.set_default_validate_args(before)
