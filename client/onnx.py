"""``tw.onnx``: present so that programs importing it load; exporting is not supported."""

from __future__ import annotations


def export(model, args=(), f=None, *a, **k) -> None:
    """Not supported: tensorwire records no ONNX graph. Export from PyTorch after loading the weights there
    (``torch_model.load_state_dict(...)`` from a ``tw.save``'d state dict, which is safetensors)."""
    raise NotImplementedError("tensorwire cannot export ONNX: save the weights with tw.save(model.state_dict(), "
                              "path), load them into the same model in PyTorch, and export there")


def is_in_onnx_export() -> bool:
    return False
