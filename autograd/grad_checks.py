"""``gradgradcheck``: torch's check of second derivatives, on the engine's ``gradcheck`` (which compares the analytical
Jacobian of a function with central finite differences): the function checked is ``func``'s gradient with respect to
its inputs, taken with ``create_graph=True`` and random ``grad_outputs`` (uniform in [-1, 1), themselves inputs of
the check), exactly torch's construction."""

from __future__ import annotations

import tensorwire as _tw
from tensorwire._factories import TensorBase as _Tensor
from tensorwire.autograd_engine import enable_grad, grad, gradcheck

__all__ = ["gradgradcheck"]


def _as_tuple(x) -> tuple:
    if isinstance(x, tuple):
        return x
    if isinstance(x, list):
        return tuple(x)
    return (x,)


def _differentiable_outputs(x) -> tuple:
    return tuple(o for o in _as_tuple(x) if o.requires_grad)


def gradgradcheck(func, inputs, grad_outputs=None, *, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3,
                  gen_non_contig_grad_outputs: bool = False, raise_exception: bool = True, nondet_tol: float = 0.0,
                  check_undefined_grad: bool = True, check_grad_dtypes: bool = False,
                  check_batched_grad: bool = False, check_fwd_over_rev: bool = False,
                  check_rev_over_rev: bool = True, fast_mode: bool = False, masked: bool = False) -> bool:
    """Check the second derivatives of ``func`` at ``inputs`` (use float64) against finite differences of its first
    derivatives: ``gradcheck`` of ``(inputs, grad_outputs) -> grad(func(inputs), inputs, grad_outputs,
    create_graph=True)``. ``grad_outputs`` default to random tensors that require grad. The options torch uses for
    checks tensorwire does not make (batched and forward-mode gradients, undefined gradients, non-contiguous
    ``grad_outputs``) are accepted and change nothing; ``fast_mode`` is the engine's directional check."""
    tupled_inputs = _as_tuple(inputs)
    if grad_outputs is None:
        outputs = _differentiable_outputs(func(*tupled_inputs))
        tupled_grad_outputs = tuple(
            _tw.testing.make_tensor(tuple(x.shape), dtype=x.dtype if x.dtype.is_inexact else _tw.float64,
                                    device=x.device, low=-1, high=1, requires_grad=True)
            for x in outputs)
    else:
        tupled_grad_outputs = _as_tuple(grad_outputs)
    num_outputs = len(tupled_grad_outputs)
    diff_inputs = {i for i, x in enumerate(tupled_inputs) if isinstance(x, _Tensor) and x.requires_grad}
    diff_grads = {i for i, x in enumerate(tupled_grad_outputs) if x.requires_grad}

    def new_func(*args):
        with enable_grad():  # (gradcheck evaluates its finite differences under no_grad)
            input_args = tuple(x.requires_grad_() if i in diff_inputs else x
                               for i, x in enumerate(args[:-num_outputs]))
            outputs = _differentiable_outputs(func(*input_args))
            gouts = tuple(x.requires_grad_() if i in diff_grads else x for i, x in enumerate(args[-num_outputs:]))
            wrt = tuple(x for i, x in enumerate(input_args) if i in diff_inputs)
            grads = grad(outputs, wrt, gouts, create_graph=True, allow_unused=True)
        return tuple(g for g in grads if g is not None)

    return gradcheck(new_func, tupled_inputs + tupled_grad_outputs, eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception, fast_mode=fast_mode)
