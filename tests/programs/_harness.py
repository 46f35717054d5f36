"""Running a PyTorch program twice: with real ``torch``, and with ``tensorwire`` in its place.

Two shapes of program:

* a plain Python file that starts with ``import torch`` (``import torch.nn as nn``, ``from torch import optim``,
  ...) and defines ``build_model()`` and ``train(model, steps) -> list[float]`` (the loss of every training step,
  then any evaluation losses), plus a ``__main__`` block so it also runs on its own. :func:`compare` runs it under
  torch, then again with ``import torch`` resolving to tensorwire (:func:`tensorwire_as_torch`), the tensorwire
  model loading torch's initial weights;
* a function ``main(torch, init)`` in a test module, which uses only the module it is given and takes its initial
  weights and any random draws from ``init`` (numpy arrays): :func:`run_both`.
"""


from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.util
import itertools
import sys
from pathlib import Path

import numpy as np
import pytest

_COUNTER = itertools.count()


class _TorchAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolve ``torch`` and ``torch.x.y`` to ``tensorwire`` and ``tensorwire.x.y`` (the same module objects)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch" and not fullname.startswith("torch."):
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return importlib.import_module("tensorwire" + spec.name[len("torch") :])

    def exec_module(self, module):
        pass  # already executed as a tensorwire module


@contextlib.contextmanager
def tensorwire_as_torch():
    """While inside, ``import torch...`` gives tensorwire's modules; torch's own entries come back afterwards."""
    saved = {k: v for k, v in sys.modules.items() if k == "torch" or k.startswith("torch.")}
    for k in saved:
        del sys.modules[k]
    finder = _TorchAlias()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for k in [k for k in sys.modules if k == "torch" or k.startswith("torch.")]:
            del sys.modules[k]
        sys.modules.update(saved)


def load(path: Path):
    """Execute the program file as a fresh module (its ``import torch`` binds whatever ``torch`` is now)."""
    spec = importlib.util.spec_from_file_location(f"_program_{path.stem}_{next(_COUNTER)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compare(path: Path, steps: int, seed: int = 0, build: dict | None = None,
            options: dict | None = None) -> tuple[list[float], list[float]]:
    """(torch's losses, tensorwire's losses) of ``train(build_model(**build), steps, **options)``, from the same
    initial weights."""
    import torch

    import tensorwire

    build, options = build or {}, options or {}
    torch.manual_seed(seed)
    ref_prog = load(path)
    ref_model = ref_prog.build_model(**build)
    initial = {k: v.detach().numpy().copy() for k, v in ref_model.state_dict().items()}
    ref_losses = ref_prog.train(ref_model, steps, **options)
    with tensorwire_as_torch():
        prog = load(path)
        assert prog.torch is tensorwire
        model = prog.build_model(**build)
        model.load_state_dict({k: tensorwire.tensor(v) for k, v in initial.items()})
        losses = prog.train(model, steps, **options)
    assert len(losses) == len(ref_losses) >= steps
    assert all(np.isfinite(losses)), losses
    return ref_losses, losses


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
