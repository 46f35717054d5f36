"""The op_db harness's backward check: tensorwire's gradients against torch's, sample by sample.

For an entry whose OpInfo ``supports_autograd``, each sample is made with ``requires_grad=True`` (as torch's own
``TestGradients`` makes them). The tensors torch's gradient tests differentiate (the floating tensors of the input, a
tensor list input's items and the positional arguments that require grad) become tensorwire leaves with
``requires_grad=True``; the op runs on both sides through the entry's ``gradcheck_wrapper`` (a Hermitian input, a
log-softmaxed CTC input, a masked reduction's masked-out results zeroed) and the sample's ``output_process_fn_grad``
(eigenvectors by their absolute values...), and each side reduces its differentiable outputs (torch's: floating
tensors that require grad; an output torch does not differentiate is left out on both sides) with the same fixed
random cotangent, ``sum(out * v)``, then takes the gradient of every leaf. Gradients are compared as forward results
are (:func:`harness.compare`, at ``assert_close``'s float32 tolerances; op_db has no float32 gradient tolerances of
its own, its gradcheck runs in float64), a difference excused only where ours is no further from torch's float64
gradient than torch's float32 one is: element by element, or in the worst element (a gradient that is a cancelling
sum, a CTC loss's or a grid sampler's, rounds onto other elements than torch's does). Where op_db marks torch's own
gradient as failing its check (``as_strided_scatter``), a difference is excused only where ours gives float64 finite
differences. A gradient ``None`` on one side (an input the loss does not reach) compares as zeros, as torch's
``materialize_grads`` would give; such samples pass with a note (:data:`NONE_NOTE`), counted by the report. Random
entries are checked for shape and dtype only.

Each sample ends ``ok``, ``unsupported`` (a clear typed refusal, forward or backward), ``error`` or ``wrong`` (a
gradient that differs from torch's: a silent error).
"""

from __future__ import annotations

import types

import numpy as np
import torch

import tensorwire as tw

from . import harness as H

_ROUND = 6  # the cotangent's generator seed offset (any fixed number: the same on both sides)


#: an ``ok`` sample's note where one side's gradient is ``None`` (unreachable) and the other's is zeros
NONE_NOTE = "None on one side, zeros on the other"


def differentiable(op) -> bool:
    """Whether torch's gradient tests differentiate this entry."""
    return bool(op.supports_autograd)


# -- the wrapper and the output processing, on tensorwire ----------------------------------------------------------

def _rebind(fn):
    """``fn`` (op_db's own function or lambda) with ``torch`` meaning tensorwire, and op_db's ``gradcheck_wrapper_*``
    helpers it calls rebound the same way."""
    if not isinstance(fn, types.FunctionType) or not fn.__module__.startswith("torch.testing."):
        return fn
    g = H.tw_globals(fn)
    for name in fn.__code__.co_names:
        helper = fn.__globals__.get(name)
        if (name.startswith("gradcheck_wrapper") and isinstance(helper, types.FunctionType)
                and g.get(name) is helper):
            g[name] = _rebind(helper)
    new = types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    return new


def _masked_wrapper(op, sample):
    """op_db's masked wrappers for tensorwire: the output mask as torch computes it (from the sample's masks and
    shapes only), applied to our output."""
    name = op.gradcheck_wrapper.__name__
    kw = sample.kwargs
    if name == "gradcheck_wrapper_masked_operation":
        mask = None if kw.get("mask") is None else torch.masked._output_mask(op.op, sample.input, *sample.args, **kw)
    else:
        if kw.get("input_mask") is None or kw.get("other_mask") is None:
            mask = None
        else:
            combined = torch.logical_and(kw["input_mask"], kw["other_mask"])
            mask = torch.masked._input_mask(sample.input, *sample.args, **dict(mask=combined, **kw))

    def wrapper(fn, *args, **kwargs):
        out = fn(*args, **kwargs)
        if mask is None:
            return out
        return tw.where(H.to_tw(mask), out, tw.zeros([], dtype=out.dtype))
    return wrapper


def _tw_wrapper(op, sample):
    if op.gradcheck_wrapper.__name__.startswith("gradcheck_wrapper_masked"):
        return _masked_wrapper(op, sample)
    return _rebind(op.gradcheck_wrapper)


# -- posing a sample ----------------------------------------------------------------------------------------------

def grad_leaves(sample) -> list[torch.Tensor]:
    """The sample's tensors torch's gradient tests differentiate: the input (or a tensor list input's items) and the
    positional arguments, where they are floating and require grad; each once."""
    inputs = list(sample.input) if isinstance(sample.input, (list, tuple)) else [sample.input]
    out, seen = [], set()
    for x in [*inputs, *sample.args]:
        if isinstance(x, torch.Tensor) and x.requires_grad and H.is_inexact(x) and id(x) not in seen:
            seen.add(id(x))
            out.append(x)
    return out


def _swap(x, table: dict):
    """``x`` with every tensor whose id is in ``table`` replaced by its entry (through lists, tuples and dicts)."""
    if isinstance(x, torch.Tensor):
        return table.get(id(x), x)
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return type(x)(_swap(y, table) for y in x)
    if isinstance(x, dict):
        return {k: _swap(v, table) for k, v in x.items()}
    return x


def _flat(x) -> list:
    if isinstance(x, (list, tuple)):
        return [z for y in x for z in _flat(y)]
    return [x]


def _cotangents(outs: list[torch.Tensor], seed: int) -> list[torch.Tensor]:
    """A fixed random cotangent per output: float64, complex128 for a complex output."""
    gen = torch.Generator().manual_seed(seed + _ROUND)
    return [torch.randn(o.shape, generator=gen, dtype=torch.complex128 if o.is_complex() else torch.float64)
            for o in outs]


def _torch_term(o: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``sum(o * v)``, for a complex output the real part of ``sum(o * conj(v))`` (a real loss, as torch's gradient
    of a complex value needs)."""
    if o.is_complex():
        return (o * v.conj().to(o.dtype)).real.sum()
    return (o * v.to(o.dtype)).sum()


def _torch_grads(op, sample, leaves: list[torch.Tensor], dtype: torch.dtype, seed: int):
    """torch's output and its gradients (``None`` where torch has none) at ``dtype``; ``None`` when torch refuses
    the sample or has no differentiable output."""
    fresh = {id(t): t.detach().to(dtype).requires_grad_() for t in leaves}
    inp, args, kwargs = _swap(sample.input, fresh), _swap(sample.args, fresh), sample.kwargs
    if dtype is torch.float64:  # the leaves are float64 already: they stay the graph's leaves
        inp, args, kwargs = H._upcast(inp), H._upcast(args), H._upcast(kwargs)
    try:
        out = op.gradcheck_wrapper(op.get_op(), inp, *args, **kwargs)
        if sample.output_process_fn_grad is not None:
            out = sample.output_process_fn_grad(out)
    except Exception:  # noqa: BLE001 - torch refuses its own sample: nothing to compare with
        return None
    flat = _flat(out)
    mask = [isinstance(o, torch.Tensor) and o.requires_grad and H.is_inexact(o) for o in flat]
    diff = [o for o, m in zip(flat, mask) if m]
    if not diff:
        return None
    vs = _cotangents(diff, seed)
    loss = sum(_torch_term(o, v) for o, v in zip(diff, vs))
    ins = [fresh[id(t)] for t in leaves]
    try:
        grads = torch.autograd.grad(loss, ins, allow_unused=True)
    except Exception:  # noqa: BLE001 - torch cannot differentiate its own sample
        return None
    return mask, vs, [_at_specified(g, t) for g, t in zip(grads, leaves)]


def _at_specified(g: torch.Tensor | None, leaf: torch.Tensor) -> torch.Tensor | None:
    """torch's gradient for a sparse leaf at the leaf's specified elements, in its layout (torch's masked semantics:
    the gradient of a sparse input is defined there only; torch gives some ops' dense, others' sparse, and its own
    gradcheck skips the sparse entries of op_db); any other gradient as it is."""
    if g is None or leaf.layout is torch.strided:
        return g
    return (g.to_dense() if g.layout is not torch.strided else g).sparse_mask(leaf.detach().to(g.dtype))


def _tw_grads(op, target: H.Target, sample, leaves, mask, vs):
    """Our gradients for the sample's leaves (``None`` where ours has none), the op run through the entry's
    wrapper and output processing."""
    table = {}
    for t in leaves:
        if t.layout is not torch.strided or H.is_partial_view(t):
            # a sparse tensor by its indices and values; a partial view as the same view of its base here (as_strided
            # reads the base around it)
            table[id(t)] = H.to_tw(t).requires_grad_()
        else:
            table[id(t)] = tw.tensor(H.to_numpy(t), requires_grad=True)
    inp = H.to_tw(_swap(sample.input, table))
    args = H.to_tw(_swap(sample.args, table))
    kwargs = H.to_tw(sample.kwargs)
    wrapper = _tw_wrapper(op, sample)
    out = wrapper(target.fn, inp, *args, **kwargs)
    if sample.output_process_fn_grad is not None:
        out = _rebind(sample.output_process_fn_grad)(out)
    flat = _flat(out)
    if len(flat) != len(mask):
        raise AssertionError(f"{len(flat)} outputs where torch gives {len(mask)}")
    loss = None
    for o, v in zip([o for o, m in zip(flat, mask) if m], vs):
        if not isinstance(o, tw.Tensor):
            raise AssertionError(f"got {type(o).__name__} where torch gives a differentiable tensor")
        if not o.requires_grad:
            continue  # contributes nothing here: torch's gradient must then be zero
        if o.dtype.is_complex:
            term = (o * tw.tensor(v.conj().resolve_conj().numpy().astype(np.complex64)).to(o.dtype)).real.sum()
        else:
            term = (o * tw.tensor(v.numpy().astype(np.float32)).to(o.dtype)).sum()
        loss = term if loss is None else loss + term
    ins = [table[id(t)] for t in leaves]
    if loss is None:
        return [None] * len(ins)
    return list(tw.autograd.grad(loss, ins, allow_unused=True))


def torch_grad_known_wrong(op) -> bool:
    """Whether op_db marks torch's own gradient of the entry as failing its check (``test_fn_grad`` an expected
    failure: ``as_strided_scatter``'s misplaced gradient, a norm's subgradient at zero...)."""
    return any(getattr(d, "cls_name", None) in ("TestBwdGradients", "TestGradients")
               and d.test_name == "test_fn_grad" and d.device_type in (None, "cpu") and d.active_if
               and any(getattr(x, "__name__", "") == "expectedFailure" for x in d.decorators)
               for d in op.decorators)


def finite_differences_agree(op, sample, leaves, got, seed: int, directions: int = 3) -> bool:
    """Whether our gradients ``got`` give the float64 central-difference directional derivatives of torch's forward
    (the loss ``sum(out * v)`` with the same cotangents) along ``directions`` random directions."""
    base = {id(t): t.detach().double() for t in leaves}
    ref = _torch_grads(op, sample, leaves, torch.float64, seed)
    if ref is None:
        return False
    mask, vs, _ = ref
    gen = torch.Generator().manual_seed(seed + 1)

    def loss(table):
        inp, args = H._upcast(_swap(sample.input, table)), H._upcast(_swap(sample.args, table))
        with torch.no_grad():
            out = op.gradcheck_wrapper(op.get_op(), inp, *args, **H._upcast(sample.kwargs))
            if sample.output_process_fn_grad is not None:
                out = sample.output_process_fn_grad(out)
        diff = [o for o, m in zip(_flat(out), mask) if m]
        return sum(float(_torch_term(o.to(torch.complex128 if o.is_complex() else torch.float64), v))
                   for o, v in zip(diff, vs))

    ours = [torch.from_numpy(np.array(g.value, dtype=np.float64)) for g in got]
    eps = 1e-6
    for _ in range(directions):
        us = {k: torch.randn(b.shape, generator=gen, dtype=torch.float64) for k, b in base.items()}
        up, down = ({k: base[k] + sign * eps * us[k] for k in base} for sign in (1, -1))
        fd = (loss(up) - loss(down)) / (2 * eps)
        an = sum(float((g * us[id(t)]).sum()) for g, t in zip(ours, leaves))
        scale = sum(float((g.abs() * us[id(t)].abs()).sum()) for g, t in zip(ours, leaves))
        if not abs(fd - an) <= 1e-3 * (abs(fd) + scale) + 1e-4:
            return False
    return True


def _no_further_normwise(got: list, refs: list, exact: list) -> bool:
    """Whether each of our gradients is, in its worst element, no further from torch's float64 gradient than the
    tolerance (relative to the largest element) plus torch's float32 gradient in its worst element. A gradient is
    often a cancelling sum of many terms (a CTC loss's, a grid sampler's): float32 rounding then lands on other
    elements on either side, so the element-wise excuse of :func:`harness.rounding_explains` is too narrow."""
    for g, r, e in zip(got, refs, exact):
        if H.compare(g, r, values=False) is not None or not r.is_floating_point():
            return False
        if not e.numel():
            continue
        rtol, atol = H._TOL.get(r.dtype, (0.0, 0.0))
        ours, theirs, e = H._as_torch(g).double(), r.detach().double(), e.detach().double()
        if ours.isnan().ne(e.isnan()).any():
            return False
        ok = ~e.isnan()
        if not ok.any():
            continue
        err = (ours - e)[ok].abs().max()
        bound = atol + rtol * e[ok].abs().max() + (theirs - e)[ok].abs().nan_to_num(nan=0.0).max()
        if not err <= bound:
            return False
    return True


def _as_got(g, leaf: torch.Tensor):
    if g is None:
        return H._Got(str(leaf.dtype).removeprefix("torch."), tuple(leaf.shape), np.zeros(tuple(leaf.shape),
                                                                                       H.to_numpy(leaf).dtype))
    return H.fetch(g)


def _zeros_if_none(g, leaf: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(leaf) if g is None else g


def run_grad_sample(op, target: H.Target, sample, seed: int = 0) -> H.SampleOutcome | None:
    """Compare one sample's gradients with torch's; ``None`` when torch has nothing to compare (it refuses the sample,
    or no output of it is differentiable, or no input requires grad)."""
    desc = H.describe(sample)
    leaves = grad_leaves(sample)
    if not leaves:
        return None
    ref = _torch_grads(op, sample, leaves, leaves[0].dtype, seed)
    if ref is None:
        return None
    mask, vs, ref_grads = ref
    try:
        raw = _tw_grads(op, target, sample, leaves, mask, vs)
        got = [_as_got(g, t) for g, t in zip(raw, leaves)]
    except H.Unconvertible as e:
        return H.SampleOutcome("unsupported", desc, H._one_line(e))
    except AssertionError as e:
        return H.SampleOutcome("wrong", desc, str(e))
    except Exception as e:  # noqa: BLE001 - the op's or its gradient's failure is what is measured
        return H.SampleOutcome(H._classify_exception(e), desc, H._one_line(e))
    refs = [_zeros_if_none(g, t) for g, t in zip(ref_grads, leaves)]
    why = H.compare(got, refs, values=not H.is_random(op))
    if why is not None and torch.float64 in op.supported_dtypes("cpu"):
        exact = _torch_grads(op, sample, leaves, torch.float64, seed)
        if exact is not None:
            exact_grads = [_zeros_if_none(g, t) for g, t in zip(exact[2], leaves)]
            if H._no_further(got, refs, exact_grads) or _no_further_normwise(got, refs, exact_grads):
                why = None
    if why is not None and torch_grad_known_wrong(op) and finite_differences_agree(op, sample, leaves, got, seed):
        why = None  # torch's gradient is the wrong one (op_db says so); ours is the derivative
    if why is not None:
        return H.SampleOutcome("wrong", desc, f"gradient {why}")
    unlike = [i for i, (g, r) in enumerate(zip(raw, ref_grads)) if (g is None) != (r is None)]
    if not unlike:
        return H.SampleOutcome("ok", desc, "")
    side = "ours" if raw[unlike[0]] is None else "torch's"
    return H.SampleOutcome("ok", desc, f"{NONE_NOTE} for input {unlike} (None: {side})")


def run_grad_entry(op, dtype: torch.dtype = torch.float32, limit: int | None = 3, seed: int = 0) -> H.EntryResult:
    """Compare an entry's gradients with torch's on its first ``limit`` samples (made with ``requires_grad=True``
    from torch's generator seeded with ``seed``); ``missing`` where the entry does not resolve."""
    return H.run_entry(op, dtype, limit, seed, lambda op, target, sample: run_grad_sample(op, target, sample, seed),
                       requires_grad=True)
