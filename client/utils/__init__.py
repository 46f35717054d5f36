"""``tw.utils``: ``tw.utils.data`` (datasets and loaders), ``tw.utils.checkpoint`` (activation checkpointing) and
``swap_tensors``."""

from __future__ import annotations

import copyreg
import weakref

from . import checkpoint, data


def swap_tensors(t1, t2) -> None:
    """Swap the contents of two tensors in place, as ``torch.utils.swap_tensors``: ``t1`` holds what ``t2`` held (its
    cluster handle, shape, dtype, device, autograd state and class, a Parameter's included) and ``t2`` what ``t1``
    held, while each object keeps its identity (every reference to ``t1`` now sees ``t2``'s old tensor).

    torch's checks: a tensor with a weak reference to it (a hook of the autograd engine holds one) or two classes of
    different slots are refused. torch also refuses a tensor whose ``TensorImpl`` is held elsewhere (a view of it, a
    graph that saved it); tensorwire cannot count those, so swapping a tensor that has views leaves the views on the
    object, which then holds the other tensor: swap tensors that no view was taken of, as torch requires."""
    if weakref.getweakrefs(t1):
        raise RuntimeError("Cannot swap t1 because it has weakref associated with it")
    if weakref.getweakrefs(t2):
        raise RuntimeError("Cannot swap t2 because it has weakref associated with it")
    t1_slots = set(copyreg._slotnames(t1.__class__))
    t2_slots = set(copyreg._slotnames(t2.__class__))
    if t1_slots != t2_slots:
        raise RuntimeError("Cannot swap t1 and t2 if they have different slots")

    def swap_attr(name: str) -> None:
        tmp = getattr(t1, name)
        setattr(t1, name, getattr(t2, name))
        setattr(t2, name, tmp)

    swap_attr("__class__")  # (a Parameter and a Tensor trade classes, as torch's do)
    if hasattr(t1, "__dict__") and hasattr(t2, "__dict__"):
        swap_attr("__dict__")
    # a tensor's state is its slots (client/tensor.py: the handle ``_id``, ``_shape``, ``dtype``, ``_dev``, the view and
    # autograd fields): swapping them all swaps what torch's ``_swap_tensor_impl`` swaps
    for slot in t1_slots:
        if hasattr(t1, slot) and hasattr(t2, slot):
            swap_attr(slot)
        elif hasattr(t1, slot):
            setattr(t2, slot, getattr(t1, slot))
            delattr(t1, slot)
        elif hasattr(t2, slot):
            setattr(t1, slot, getattr(t2, slot))
            delattr(t2, slot)


__all__ = ["checkpoint", "data", "swap_tensors"]
