"""``tw.optim.Optimizer``: parameter groups, per-parameter state, ``state_dict``/``load_state_dict``.

A step records the update ops of every parameter (the graph runs on the parameters' devices; nothing is
downloaded). Updated values are rebound to the same parameter objects, as torch updates them in place.
Hyperparameters are Python numbers (they travel as cached scalars / dynamic attributes, so a step
recorded with a new learning rate still replays the cached plan); nothing in ``step()`` syncs.

Step hooks are torch's: ``opt.register_step_pre_hook(hook)``/``register_step_post_hook`` and, for every optimizer,
:func:`register_optimizer_step_pre_hook`/:func:`register_optimizer_step_post_hook`; each ``hook(optimizer, args,
kwargs)`` runs before (after) every ``step()`` call, a subclass's own ``step`` included, and a pre-hook may return
``(new_args, new_kwargs)`` for the step. A ``step`` that calls ``super().step()`` runs the hooks once.
"""

from __future__ import annotations

import copy
import functools
from collections import OrderedDict, defaultdict
from collections.abc import Callable

from tensorwire._frames import _user_frame
from tensorwire.autograd_engine import enable_grad
from tensorwire.creation import zeros_like
from tensorwire.nn._tensors import alias, no_grad, rebind
from tensorwire.nn.module import RemovableHandle
from tensorwire.tensor import Tensor


class _RequiredParameter:
    def __repr__(self) -> str:
        return "<required parameter>"


required = _RequiredParameter()

#: what the parameters share in the step being recorded: its dynamic-hyperparameter nodes (``algorithms._d``),
#: Adam's per-group attrs and scalars (``algorithms._adam_group``, ``_adam_scalars``) and, under ``_WHERE``, the
#: user's line of the step; cleared before and after each step
_STEP: dict = {}
#: ``_STEP``'s key of the user's line (``_frames._user_frame``) the step's ops record: found once a step, not once an
#: op (each op's own search would walk up through the optimizer's frames to the same line)
_WHERE = object()

#: the step hooks of every optimizer (torch.optim.optimizer's names): pre-hooks run before an optimizer's own,
#: post-hooks after
_global_optimizer_pre_hooks: OrderedDict[int, Callable] = OrderedDict()
_global_optimizer_post_hooks: OrderedDict[int, Callable] = OrderedDict()


def register_optimizer_step_pre_hook(hook: Callable) -> RemovableHandle:
    """Run ``hook(optimizer, args, kwargs)`` before every optimizer's ``step()``; it may return ``(new_args,
    new_kwargs)`` for the step. ``handle.remove()`` unregisters it."""
    handle = RemovableHandle(_global_optimizer_pre_hooks)
    _global_optimizer_pre_hooks[handle.id] = hook
    return handle


def register_optimizer_step_post_hook(hook: Callable) -> RemovableHandle:
    """Run ``hook(optimizer, args, kwargs)`` after every optimizer's ``step()``. ``handle.remove()`` unregisters it."""
    handle = RemovableHandle(_global_optimizer_post_hooks)
    _global_optimizer_post_hooks[handle.id] = hook
    return handle


def _hooked_step(step: Callable) -> Callable:
    """``step`` running the step hooks around it (torch's ``profile_hook_step``): the global pre-hooks then the
    optimizer's, the step, the optimizer's post-hooks then the global ones; each hook gets the step's ``args``
    (the optimizer first, as torch's) and ``kwargs``. A step called from inside another (a subclass's ``step``
    calling ``super().step()``) runs none: the outer call ran them."""

    @functools.wraps(step)
    def wrapper(self, *args, **kwargs):
        own_pre = self.__dict__.get("_optimizer_step_pre_hooks")
        own_post = self.__dict__.get("_optimizer_step_post_hooks")
        hooked = _global_optimizer_pre_hooks or _global_optimizer_post_hooks or own_pre or own_post
        if not hooked or self.__dict__.get("_in_step"):
            return step(self, *args, **kwargs)
        args = (self, *args)  # (the hooks' ``args`` start with the optimizer, as torch's: the step's own arguments)
        for hook in (*_global_optimizer_pre_hooks.values(), *(own_pre or {}).values()):
            result = hook(self, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise RuntimeError(f"{step} must return None or a tuple of (new_args, new_kwargs), but got "
                                       f"{result}.")
                args, kwargs = result
        self._in_step = True
        try:
            out = step(*args, **kwargs)
        finally:
            self._in_step = False
        for hook in (*(own_post or {}).values(), *_global_optimizer_post_hooks.values()):
            hook(self, args, kwargs)
        return out

    wrapper.hooked = True
    return wrapper


class Optimizer:
    """Base class: ``Optimizer(params, defaults)``; subclasses implement ``_update(group, p, grad, state)``.

    ``_replayable``: the subclass tells ``tw.compile`` how a replay redoes its Python-side state (the step count,
    values computed from it: ``algorithms._d``'s ``replay``, ``_count_step``); a step of any other optimizer inside
    a compiled function makes it run eagerly."""

    _replayable = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        step = cls.__dict__.get("step")
        if callable(step) and not getattr(step, "hooked", False):  # (a subclass's own step runs the hooks too)
            cls.step = _hooked_step(step)

    def __init__(self, params, defaults: dict):
        self.defaults = defaults
        self._optimizer_step_pre_hooks: OrderedDict[int, Callable] = OrderedDict()
        self._optimizer_step_post_hooks: OrderedDict[int, Callable] = OrderedDict()
        self.state: defaultdict = defaultdict(dict)
        self.param_groups: list[dict] = []
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of Tensors or dicts, "
                            f"but got {type(params).__name__}")
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(params[0], dict):
            params = [{"params": params}]
        for g in params:
            self.add_param_group(g)

    def add_param_group(self, param_group: dict) -> None:
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group).__name__}")
        g = dict(param_group)
        ps = g["params"]
        if isinstance(ps, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, but the ordering of "
                            "tensors in sets will change between runs. Please use a list instead.")
        ps = [ps] if isinstance(ps, Tensor) else list(ps)
        if ps and all(isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], str) for x in ps):
            g["param_names"] = [name for name, _ in ps]  # model.named_parameters(), as torch >= 2.6
            ps = [p for _, p in ps]
        g["params"] = ps
        for p in g["params"]:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, but one of the params is {type(p).__name__}")
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
        for k, v in self.defaults.items():
            if v is required and k not in g:
                raise ValueError(f"parameter group didn't specify a value of required optimization parameter {k}")
            g.setdefault(k, v)
        seen = {id(p) for grp in self.param_groups for p in grp["params"]}
        if any(id(p) in seen for p in g["params"]):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(g)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is not None:
                    p.grad = None if set_to_none else zeros_like(p.grad)

    def register_step_pre_hook(self, hook: Callable) -> RemovableHandle:
        """Run ``hook(optimizer, args, kwargs)`` before each ``step()`` of this optimizer (after the global
        pre-hooks); it may return ``(new_args, new_kwargs)`` for the step. ``handle.remove()`` unregisters it."""
        handle = RemovableHandle(self.__dict__.setdefault("_optimizer_step_pre_hooks", OrderedDict()))
        self._optimizer_step_pre_hooks[handle.id] = hook
        return handle

    def register_step_post_hook(self, hook: Callable) -> RemovableHandle:
        """Run ``hook(optimizer, args, kwargs)`` after each ``step()`` of this optimizer (before the global
        post-hooks). ``handle.remove()`` unregisters it."""
        handle = RemovableHandle(self.__dict__.setdefault("_optimizer_step_post_hooks", OrderedDict()))
        self._optimizer_step_post_hooks[handle.id] = hook
        return handle

    @_hooked_step
    def step(self, closure=None):
        """One update of every parameter that has a gradient: recorded, not synchronised; the step's work ships
        when the next op is recorded (:meth:`Session.mark_step`)."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        if not self._replayable:
            for sess in {p._s for g in self.param_groups for p in g["params"]}:
                if sess._capture is not None:
                    sess._capture.unsupported(f"{type(self).__name__}.step() keeps Python state that a replay "
                                              "would not update (tw.compile replays SGD, Adam and AdamW steps)")
        _STEP.clear()
        _STEP[_WHERE] = _user_frame(2)
        try:
            with no_grad():
                for group in self.param_groups:
                    self._group_step(group)
        finally:
            _STEP.clear()
        for sess in {p._s for g in self.param_groups for p in g["params"]}:
            sess.mark_step()
        return loss

    def _group_step(self, group: dict) -> None:
        for p in group["params"]:
            g = p.grad
            if g is None:
                continue
            if group.get("maximize"):
                g = -g
            new = self._update(group, p, g, self.state[p])
            if new is not None:
                rebind(p, new)

    def _update(self, group, p, grad, state):  # pragma: no cover - abstract
        raise NotImplementedError

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """``{"state": {index: {name: value}}, "param_groups": [{..., "params": [indices]}]}`` as torch
        (tensors in the state are snapshots of their current values)."""
        index: dict = {}
        groups = []
        start = 0
        for g in self.param_groups:
            packed = {k: v for k, v in g.items() if k != "params"}
            ids = list(range(start, start + len(g["params"])))
            for i, p in zip(ids, g["params"]):
                index.setdefault(id(p), i)
            packed["params"] = ids
            start += len(ids)
            groups.append(packed)
        state = {}
        for p, st in self.state.items():
            if id(p) in index:
                state[index[id(p)]] = {k: _snapshot(v) for k, v in st.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a :meth:`state_dict` (keys of ``state`` may be ints or their strings, as after ``tw.load``).
        State tensors move to their parameter's device; floating ones take its dtype (``step`` excepted)."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        for g, sg in zip(self.param_groups, groups):
            if len(g["params"]) != len(sg["params"]):
                raise ValueError("loaded state dict contains a parameter group that doesn't match the size of "
                                 "optimizer's group")
        by_index = {}
        for g, sg in zip(self.param_groups, groups):
            for p, i in zip(g["params"], sg["params"]):
                by_index[int(i)] = p
        self.state = defaultdict(dict)
        with no_grad():
            for k, st in state_dict["state"].items():
                p = by_index.get(int(k))
                if p is None:
                    continue
                new = {}
                for name, v in st.items():
                    if isinstance(v, Tensor):
                        t = v.to(device=p._dev)
                        if name != "step" and t.dtype.is_floating_point and t.dtype is not p.dtype:
                            t = t.to(p.dtype)
                        new[name] = alias(t) if t is v else t
                    elif name == "step" and hasattr(v, "item"):
                        new[name] = v.item()
                    else:
                        new[name] = _snapshot(v, p._dev)
                self.state[p] = new
        for g, sg in zip(self.param_groups, groups):
            for k, v in sg.items():
                if k != "params":
                    g[k] = tuple(v) if isinstance(v, list) and isinstance(g.get(k), tuple) else v

    def __repr__(self) -> str:
        s = type(self).__name__ + " ("
        for i, g in enumerate(self.param_groups):
            s += f"\nParameter Group {i}"
            for k in sorted(g):
                if k != "params":
                    s += f"\n    {k}: {g[k]}"
        return s + "\n)"

    def __getstate__(self):
        raise TypeError("optimizers cannot be pickled; save their state_dict with tw.save")


def _snapshot(v, device: str | None = None):
    """A copy of a state value: tensors (also inside lists and tuples, as LBFGS's history) as snapshots of their
    current values (moved to ``device`` when given), everything else deep-copied."""
    if isinstance(v, Tensor):
        t = v.to(device=device) if device is not None else v
        return alias(t) if t is v else t
    if isinstance(v, (list, tuple)) and any(isinstance(x, Tensor) for x in v):
        return type(v)(_snapshot(x, device) for x in v)
    return copy.deepcopy(v)


def _set_state(state: dict, key: str, value: Tensor) -> Tensor:
    """Store ``value`` under ``key`` (rebinding the old tensor object, so snapshots taken earlier stay valid
    while references held by the user follow the update, as torch's in-place state does)."""
    old = state.get(key)
    if isinstance(old, Tensor) and old._s is value._s:
        rebind(old, value)
        return old
    state[key] = value
    return value
