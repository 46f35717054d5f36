"""``tw.utils.checkpoint``: torch's activation checkpointing (``checkpoint``, ``checkpoint_sequential``).

What it does here, by ``use_reentrant``:

- ``use_reentrant=True`` (torch's default, with torch's warning when the argument is not passed): the recomputation
  torch's reentrant variant does. ``function`` runs under ``no_grad``, so no graph holds its intermediate values and
  the workers free them as soon as the forward pass no longer needs them (the memory saving); only the inputs and
  outputs are kept. When the backward pass reaches the outputs, ``function`` runs again on the saved inputs with grad
  tracking (the random state restored first, so dropout draws the same masks: ``preserve_rng_state``), and the
  gradients are taken through that recomputed graph: the inputs' are returned to the pass, the parameters used inside
  accumulate theirs into ``.grad``. The results and gradients are those of ``function(*args)`` run directly (the same
  ops on the same values). Its limits are torch's: it serves ``backward()``, not ``autograd.grad`` or
  ``backward(inputs=...)`` (the parameters inside would get their gradients in ``.grad`` rather than returned), nor
  double backward; the gradients reach the parameters inside only if at least one input tensor requires grad (torch
  warns, and so do we); keyword arguments are refused. Each backward through a checkpoint costs one more forward pass
  of ``function``, as in torch.
- ``use_reentrant=False``: torch's non-reentrant variant recomputes through saved-tensor hooks, which tensorwire's
  engine does not have. Here ``function(*args, **kwargs)`` simply runs with the graph recorded: results and gradients
  are exact and every use (``autograd.grad``, double backward, keyword arguments) works, but NO memory is saved:
  the intermediate values stay on the workers until the backward pass, as without checkpointing. ``context_fn``'s
  forward context wraps the call; its recompute context is never entered (there is no recomputation).
"""

from __future__ import annotations

import contextlib
import warnings

from tensorwire import random as R
from tensorwire.autograd_engine import Function, backward, enable_grad
from tensorwire.tensor import Tensor

__all__ = ["checkpoint", "checkpoint_sequential", "noop_context_fn", "detach_variable", "CheckpointFunction"]


def noop_context_fn():
    """The default ``context_fn``: two null contexts (forward, recomputation)."""
    return contextlib.nullcontext(), contextlib.nullcontext()


def detach_variable(inputs: tuple) -> tuple:
    """Each tensor of ``inputs`` detached, keeping its ``requires_grad`` (torch's helper)."""
    if not isinstance(inputs, tuple):
        raise RuntimeError(f"Only tuple of tensors is supported. Got Unsupported input type: {type(inputs).__name__}")
    out = []
    for x in inputs:
        if isinstance(x, Tensor):
            d = x.detach()
            d.requires_grad = x.requires_grad
            out.append(d)
        else:
            out.append(x)
    return tuple(out)


class CheckpointFunction(Function):
    """torch's reentrant checkpoint: forward without a graph, recomputed with one in backward."""

    @staticmethod
    def forward(ctx, run_function, preserve_rng_state, *args):
        ctx.run_function = run_function
        ctx.preserve_rng_state = preserve_rng_state
        if preserve_rng_state:
            ctx.rng_state = R.default_generator.get_state()
        ctx.inputs = [None if isinstance(a, Tensor) else a for a in args]
        ctx.tensor_indices = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        ctx.save_for_backward(*[a for a in args if isinstance(a, Tensor)])
        return run_function(*args)

    @staticmethod
    def backward(ctx, *grads):
        inputs = list(ctx.inputs)
        for i, t in zip(ctx.tensor_indices, ctx.saved_tensors):
            inputs[i] = t
        detached = detach_variable(tuple(inputs))
        gen = R.default_generator
        after = gen.get_state()
        if ctx.preserve_rng_state:
            gen.set_state(ctx.rng_state)
        try:
            with enable_grad():
                outputs = ctx.run_function(*detached)
        finally:
            if ctx.preserve_rng_state:
                gen.set_state(after)
        if isinstance(outputs, Tensor):
            outputs = (outputs,)
        roots, seeds = [], []
        for o, g in zip(outputs, grads):
            if isinstance(o, Tensor) and o.requires_grad and g is not None:
                roots.append(o)
                seeds.append(g)
        if not roots:
            raise RuntimeError("none of output has requires_grad=True, this checkpoint() is not necessary")
        backward(roots, seeds)
        return (None, None, *(d.grad if isinstance(d, Tensor) else None for d in detached))


def checkpoint(function, *args, use_reentrant: bool | None = None, context_fn=noop_context_fn,
               determinism_check: str = "default", debug: bool = False, early_stop: bool = True, **kwargs):
    """``function(*args, **kwargs)``, its intermediate values recomputed in the backward pass rather than kept
    (``use_reentrant=True``) or kept as usual (``use_reentrant=False``): see the module's docstring for exactly what
    each does here. ``preserve_rng_state`` (keyword, default True) replays the random draws in the recomputation."""
    if use_reentrant is None:
        warnings.warn("torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly. Starting in "
                      "PyTorch 2.9, calling checkpoint without use_reentrant will raise an exception. "
                      "use_reentrant=False is recommended, but if you need to preserve the current default behavior, "
                      "you can pass use_reentrant=True. Refer to docs for more details on the differences between the "
                      "two variants.", stacklevel=2)
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs and use_reentrant:
        raise ValueError("Unexpected keyword arguments: " + ",".join(arg for arg in kwargs))
    if determinism_check not in ("default", "none"):
        raise ValueError(f"determinism_check should be one of ['default', 'none'], but got {determinism_check}")
    if use_reentrant:
        if context_fn is not noop_context_fn or debug is not False:
            raise ValueError("Passing `context_fn` or `debug` is only supported when use_reentrant=False.")
        if not any(isinstance(a, Tensor) and a.requires_grad for a in args):
            warnings.warn("None of the inputs have requires_grad=True. Gradients will be None", stacklevel=2)
        return CheckpointFunction.apply(function, preserve, *args)
    forward_ctx, _recompute_ctx = context_fn()
    with forward_ctx:
        return function(*args, **kwargs)


def checkpoint_sequential(functions, segments: int, input, use_reentrant: bool | None = None, **kwargs):  # noqa: A002
    """Run ``functions`` (a ``Sequential`` or a list of modules/functions) in turn on ``input``, checkpointing each of
    the first ``segments - 1`` segments (torch's split: ``len // segments`` functions a segment, the rest in the last,
    which runs normally)."""
    if use_reentrant is None:
        warnings.warn("torch.utils.checkpoint.checkpoint_sequential: the use_reentrant parameter should be passed "
                      "explicitly. In version 2.9 we will raise an exception if use_reentrant is not passed. "
                      "use_reentrant=False is recommended, but if you need to preserve the current default behavior, "
                      "you can pass use_reentrant=True. Refer to docs for more details on the differences between the "
                      "two variants.", stacklevel=2)
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(arg for arg in kwargs))

    def run_function(start, end, functions):
        def forward(x):
            for j in range(start, end + 1):
                x = functions[j](x)
            return x
        return forward

    if hasattr(functions, "children") and callable(functions.children):  # an nn.Sequential
        functions = list(functions.children())
    segment_size = len(functions) // segments
    end = -1
    for start in range(0, segment_size * (segments - 1), segment_size):
        end = start + segment_size - 1
        input = checkpoint(run_function(start, end, functions), input, use_reentrant=use_reentrant,
                           preserve_rng_state=preserve)
    return run_function(end + 1, len(functions) - 1, functions)(input)
