"""A module's backward hooks (torch's ``register_full_backward_hook``, ``register_full_backward_pre_hook`` and the
deprecated ``register_backward_hook``), as torch's ``torch.utils.hooks.BackwardHook`` makes them: the module's
tensor inputs and outputs pass through an identity function (:class:`_Passthrough`; no copy, no node on a device)
whose backward calls the hooks:

* when the gradients with respect to the outputs are known: each pre hook, ``hook(module, grad_output)``, whose
  non-None return replaces ``grad_output``;
* when the gradients with respect to the inputs are known: each hook, ``hook(module, grad_input, grad_output)``,
  whose non-None return replaces ``grad_input``. Where no input requires grad, the hooks fire with the outputs'
  gradients and a ``grad_input`` of Nones, with torch's warning.

``grad_input`` and ``grad_output`` have one entry a positional argument and a tensor output, None where that is not a
tensor or gets no gradient; keyword arguments are not seen, as in torch."""

from __future__ import annotations

import warnings

from tensorwire.autograd_engine import Function, is_grad_enabled
from tensorwire.tensor import Tensor

_NO_INPUT_GRAD = ("Full backward hook is firing when gradients are computed with respect to module outputs since no "
                  "inputs require gradients. See https://docs.pytorch.org/docs/main/generated/torch.nn.Module.html"
                  "#torch.nn.Module.register_full_backward_hook for more details.")


class _Call:
    """One call of a hooked module: its hooks then, how many positional arguments it had, what its outputs'
    gradients were."""

    def __init__(self, module, hooks: list, pre_hooks: list, n_args: int, tensor_args: list[int]):
        self.module, self.hooks, self.pre_hooks = module, hooks, pre_hooks
        self.n_args, self.tensor_args = n_args, tensor_args
        self.grad_output: tuple = ()
        self.inputs_need_grad = False

    def on_grad_output(self, grads: tuple) -> tuple:
        for hook in self.pre_hooks:
            r = hook(self.module, grads)
            if r is not None:
                grads = _as_tuple(r, len(grads), "backward pre hook")
        self.grad_output = grads
        if self.hooks and not self.inputs_need_grad:
            warnings.warn(_NO_INPUT_GRAD, UserWarning, stacklevel=2)
            self._run_hooks((None,) * self.n_args)
        return grads

    def on_grad_input(self, grads: tuple) -> tuple:
        full = [None] * self.n_args
        for i, g in zip(self.tensor_args, grads):
            full[i] = g
        full = self._run_hooks(tuple(full))
        return tuple(full[i] for i in self.tensor_args)

    def _run_hooks(self, grad_input: tuple) -> tuple:
        for hook in self.hooks:
            r = hook(self.module, grad_input, self.grad_output)
            if r is not None:
                grad_input = _as_tuple(r, len(grad_input), "backward hook")
        return grad_input


def _as_tuple(r, n: int, what: str) -> tuple:
    r = tuple(r) if isinstance(r, (tuple, list)) else (r,)
    if len(r) != n:
        raise RuntimeError(f"{what} returned an invalid number of grad_input, got {len(r)}, but expected {n}")
    return r


class _Passthrough(Function):
    """Its tensors as they are; backward: ``on_grads`` of their gradients (:meth:`_Call.on_grad_output` on the
    module's outputs, :meth:`_Call.on_grad_input` on its inputs), whose return goes on."""

    @staticmethod
    def forward(ctx, on_grads, *tensors):
        ctx.on_grads = on_grads
        return tensors

    @staticmethod
    def backward(ctx, *grads):
        return (None, *ctx.on_grads(grads))


def call_with_backward_hooks(module, hooks: list, pre_hooks: list, forward, args: tuple, kwargs: dict):
    """``forward(*args, **kwargs)`` of ``module`` with its backward hooks set on this call's inputs and outputs
    (outside autograd, or where nothing requires grad, the plain call)."""
    if not is_grad_enabled():
        return forward(*args, **kwargs)
    tensor_args = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
    call = _Call(module, hooks, pre_hooks, len(args), tensor_args)
    if hooks and any(args[i].requires_grad for i in tensor_args):
        call.inputs_need_grad = True
        wrapped = _Passthrough.apply(call.on_grad_input, *(args[i] for i in tensor_args))
        args = list(args)
        for i, w in zip(tensor_args, wrapped):
            args[i] = w
        args = tuple(args)
    out = forward(*args, **kwargs)
    single = isinstance(out, Tensor)
    outs = [out] if single else list(out) if isinstance(out, (tuple, list)) else None
    if outs is None:
        return out
    where = [i for i, o in enumerate(outs) if isinstance(o, Tensor) and o.requires_grad]
    if not where:
        return out
    wrapped = _Passthrough.apply(call.on_grad_output, *(outs[i] for i in where))
    for i, w in zip(where, wrapped):
        outs[i] = w
    return outs[0] if single else type(out)(outs)


__all__ = ["call_with_backward_hooks"]
