"""``tw.nn.Module``: parameters, buffers and submodules registered by attribute, as in PyTorch."""

from __future__ import annotations

import copy
import itertools
import warnings
import weakref
from collections import OrderedDict, namedtuple
from collections.abc import Callable, Iterator

from tensorwire import jit_state as _jit
from tensorwire.creation import zeros_like
from tensorwire.protocol import dtypes as D
from tensorwire.tensor import Tensor, cuda_device

from ._tensors import alias, no_grad, rebind, set_value
from .forward_hooks import ALWAYS_CALLED, PRE_WITH_KWARGS, WITH_KWARGS, call_with_forward_hooks
from .parameter import Buffer, Parameter

IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


class _IncompatibleKeys(IncompatibleKeys):
    """What ``load_state_dict`` returns, as torch's: ``(missing_keys, unexpected_keys)``, shown as
    ``<All keys matched successfully>`` when both are empty, else ``_IncompatibleKeys(missing_keys=[...], ...)``."""

    __slots__ = ()

    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


class RemovableHandle:
    """Returned by ``register_*_hook``; ``handle.remove()`` unregisters the hook (and its flags in
    ``extra_dict``: a dict or a list of dicts keyed by the handle's id, as torch's)."""

    _ids = itertools.count()

    def __init__(self, hooks: dict, *, extra_dict=None):
        self.hooks = hooks
        self.id = next(RemovableHandle._ids)
        if extra_dict is None:
            extra_dict = []
        self.extra_dicts = list(extra_dict) if isinstance(extra_dict, list) else [extra_dict]

    def remove(self) -> None:
        self.hooks.pop(self.id, None)
        for d in self.extra_dicts:
            d.pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


#: whether any module of the process has been given a backward hook (until then a call looks no further)
_BACKWARD_HOOKED = [False]


def _add_hook(hooks: dict, hook: Callable, prepend: bool, flags: list | None = None) -> RemovableHandle:
    """``hook`` into ``hooks`` (first with ``prepend``); its handle, which removes it from ``flags`` too."""
    h = RemovableHandle(hooks, extra_dict=flags)
    hooks[h.id] = hook
    if prepend:
        hooks.move_to_end(h.id, last=False)
    return h


def _addindent(s: str, n: int) -> str:
    lines = s.split("\n")
    if len(lines) == 1:
        return s
    return lines[0] + "\n" + "\n".join(" " * n + line for line in lines[1:])


def _register_attr(m, name: str, value, store: str, cls: type, what: str, label: str) -> bool:
    """``setattr`` for a registry of module ``m`` (``_parameters``/``_modules``): register ``value`` there if it is
    a ``cls``, or reset an entry already there (to None only); False when neither applies."""
    reg = m.__dict__.get(store)
    if isinstance(value, cls):
        if reg is None:
            raise AttributeError(f"cannot assign {what} before Module.__init__() call")
        m._remove_from(name, keep=store)
        reg[name] = value
        return True
    if reg is not None and name in reg:
        if value is not None:
            raise TypeError(f"cannot assign '{type(value).__name__}' as {label} '{name}' "
                            f"(tw.nn.{cls.__name__} or None expected)")
        reg[name] = None
        return True
    return False


#: a module's registries, in the order ``Module.__getattr__`` searches them
_STORES = ("_parameters", "_buffers", "_modules")
#: the instance attribute holding the names a module's instance dict mirrors from its registries (:class:`_Registry`)
_MIRRORS = "_registry_mirrors"
#: :func:`_plain_parameters`' lists: root module's id -> (a weak reference to it, the list); emptied by every write
#: to any module's registries (and their replacement), so an entry holds what its tree holds now
_KEPT: dict[int, tuple] = {}


class _Registry(OrderedDict):
    """A module's ``_parameters``, ``_buffers`` or ``_modules``: the one record of its entries, as torch's, read and
    written directly by code that wants to. Every write to it also sets (or drops) the entry's name in the module's
    instance dict to what ``Module.__getattr__`` would find for it, so that ``self.fc`` and ``self.weight`` are found
    there at once: through the fallback, the failed lookup formats an AttributeError first, ~15x a plain attribute's
    cost, and a model reads its submodules on every call. Copies (``copy``, ``deepcopy``, pickling) are plain
    ``OrderedDict`` s, tied to no module."""

    __slots__ = ("_owner",)

    def __init__(self, owner: Module):
        super().__init__()
        self._owner = weakref.ref(owner)

    def _sync(self, name) -> None:
        if _KEPT:  # (what module trees hold may have changed)
            _KEPT.clear()
        m = self._owner()
        if m is not None:
            _sync_mirror(m, name)

    def __setitem__(self, name, value) -> None:
        OrderedDict.__setitem__(self, name, value)
        self._sync(name)

    def __delitem__(self, name) -> None:
        OrderedDict.__delitem__(self, name)
        self._sync(name)

    def pop(self, name, *default):
        had = name in self
        v = OrderedDict.pop(self, name, *default)
        if had:
            self._sync(name)
        return v

    def popitem(self, last: bool = True):
        name, v = OrderedDict.popitem(self, last)
        self._sync(name)
        return name, v

    def clear(self) -> None:
        names = list(self)
        OrderedDict.clear(self)
        for name in names:
            self._sync(name)

    def setdefault(self, name, default=None):
        if name not in self:
            self[name] = default
        return OrderedDict.__getitem__(self, name)

    def update(self, *args, **kwargs) -> None:
        for name, v in OrderedDict(*args, **kwargs).items():
            self[name] = v

    def __ior__(self, other):
        self.update(other)
        return self

    def copy(self) -> OrderedDict:
        return OrderedDict(self)

    def __reduce__(self):
        return (OrderedDict, (list(self.items()),))


def _class_defines(cls: type, name: str) -> bool:
    return any(name in c.__dict__ for c in cls.__mro__)


def _sync_mirror(m: Module, name) -> None:
    """``m``'s instance dict entry ``name`` set to what ``Module.__getattr__`` finds in ``m``'s registries, or dropped
    when they hold nothing under it. Left alone where the mirror would change what ``m.<name>`` gives: an attribute of
    ``m``'s own under that name, or one of its class (either comes before the registries in torch's lookup), and a
    module whose registries are not all :class:`_Registry` (one replaced: its writes are not seen)."""
    d = m.__dict__
    mirrors = d.get(_MIRRORS)
    if mirrors is None or type(name) is not str or (name in d and name not in mirrors):
        return
    for store in _STORES:
        reg = d.get(store)
        if reg is not None and name in reg:
            if not _class_defines(type(m), name):
                d[name] = reg[name]
                mirrors.add(name)
            return
    if name in mirrors:
        mirrors.discard(name)
        d.pop(name, None)


def _install_registries(m: Module) -> None:
    """Make ``m``'s three registries :class:`_Registry` s holding what they hold now, and its mirrors theirs."""
    _KEPT.clear()
    d = m.__dict__
    for name in d.pop(_MIRRORS, ()):
        d.pop(name, None)
    regs = {}
    for store in _STORES:
        old = d.get(store)
        reg = regs[store] = _Registry(m)
        if old is not None:
            OrderedDict.update(reg, old)
    d.update(regs)
    d[_MIRRORS] = set()
    for store in _STORES:
        for name in regs[store]:
            _sync_mirror(m, name)


def _drop_mirrors(m: Module) -> None:
    """Stop mirroring ``m``'s registries (one is being replaced): its entries are found through ``__getattr__``."""
    _KEPT.clear()
    d = m.__dict__
    for name in d.pop(_MIRRORS, ()):
        d.pop(name, None)


class Module:
    """Base class of every layer and model. Subclasses define ``forward``; assigning a
    :class:`Parameter`, a ``Module`` or (through :meth:`register_buffer`) a tensor to an attribute
    registers it, so ``parameters()``, ``state_dict()``, ``to()`` ... see it."""

    training: bool
    _version = 1

    def __init__(self, *args, **kwargs) -> None:
        if args or kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() got unexpected arguments")
        _drop_mirrors(self)  # (a second call: the registries start again, empty, as torch's)
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", _Registry(self))
        object.__setattr__(self, "_buffers", _Registry(self))
        object.__setattr__(self, "_non_persistent_buffers_set", set())
        object.__setattr__(self, "_modules", _Registry(self))
        object.__setattr__(self, _MIRRORS, set())
        object.__setattr__(self, "_forward_hooks", OrderedDict())
        object.__setattr__(self, "_forward_pre_hooks", OrderedDict())
        for name in (WITH_KWARGS, ALWAYS_CALLED, PRE_WITH_KWARGS):  # (their flags, torch's dicts)
            object.__setattr__(self, name, OrderedDict())
        object.__setattr__(self, "_backward_hooks", OrderedDict())
        object.__setattr__(self, "_backward_pre_hooks", OrderedDict())
        object.__setattr__(self, "_state_dict_pre_hooks", OrderedDict())

    # ------------------------------------------------------------------ forward
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')

    def __call__(self, *args, **kwargs):
        if _jit.tracing:
            _jit.note_module(self)  # tw.compile replays this call only while the module's training flag is the same
        if self._forward_pre_hooks or self._forward_hooks or (_BACKWARD_HOOKED[0] and (
                self.__dict__.get("_backward_hooks") or self.__dict__.get("_backward_pre_hooks"))):
            return call_with_forward_hooks(self, args, kwargs, _BACKWARD_HOOKED[0])
        return self.forward(*args, **kwargs)

    def register_forward_hook(self, hook: Callable, *, prepend: bool = False, with_kwargs: bool = False,
                              always_call: bool = False) -> RemovableHandle:
        """``hook(module, args, output)`` runs after ``forward``; a non-None return replaces the output.
        ``prepend``: it runs before the hooks registered already; ``with_kwargs``: it is called as
        ``hook(module, args, kwargs, output)``; ``always_call``: it runs even when the call raises (with the output
        so far, None when ``forward`` raised), as torch's (``client/nn/forward_hooks.py``)."""
        kw, always = self._hook_flags(WITH_KWARGS), self._hook_flags(ALWAYS_CALLED)
        h = _add_hook(self._forward_hooks, hook, prepend, [kw, always])
        if with_kwargs:
            kw[h.id] = True
        if always_call:
            always[h.id] = True
        return h

    def register_forward_pre_hook(self, hook: Callable, *, prepend: bool = False,
                                  with_kwargs: bool = False) -> RemovableHandle:
        """``hook(module, args)`` runs before ``forward``; a non-None return replaces the arguments (a non-tuple is
        the one argument). ``prepend``: it runs before the hooks registered already; ``with_kwargs``: it is called as
        ``hook(module, args, kwargs)`` and returns None or ``(args, kwargs)``, which replace both."""
        kw = self._hook_flags(PRE_WITH_KWARGS)
        h = _add_hook(self._forward_pre_hooks, hook, prepend, [kw])
        if with_kwargs:
            kw[h.id] = True
        return h

    def _hook_flags(self, name: str) -> OrderedDict:
        """The module's dict ``name`` of forward hook flags (made here for a module made without ``__init__``)."""
        d = self.__dict__.get(name)
        if d is None:
            d = OrderedDict()
            object.__setattr__(self, name, d)
        return d

    def _backward_hook_dict(self, name: str) -> dict:
        _BACKWARD_HOOKED[0] = True
        d = self.__dict__.get(name)
        if d is None:  # (a module made without __init__: unpickled, or an old subclass's)
            object.__setattr__(self, "_backward_hooks", self.__dict__.get("_backward_hooks", OrderedDict()))
            object.__setattr__(self, "_backward_pre_hooks", self.__dict__.get("_backward_pre_hooks", OrderedDict()))
            d = self.__dict__[name]
        return d

    def register_full_backward_hook(self, hook: Callable, prepend: bool = False) -> RemovableHandle:
        """``hook(module, grad_input, grad_output)`` runs each time the gradients with respect to the module's inputs
        are computed (``grad_input``: one entry a positional argument, None where it is not a tensor or gets no
        gradient; ``grad_output``: the outputs'); a non-None return replaces ``grad_input``
        (``client/nn/backward_hooks.py``)."""
        return _add_hook(self._backward_hook_dict("_backward_hooks"), hook, prepend)

    def register_full_backward_pre_hook(self, hook: Callable, prepend: bool = False) -> RemovableHandle:
        """``hook(module, grad_output)`` runs each time the gradients with respect to the module's outputs are
        computed, before those with respect to its inputs; a non-None return replaces ``grad_output``."""
        return _add_hook(self._backward_hook_dict("_backward_pre_hooks"), hook, prepend)

    def register_backward_hook(self, hook: Callable) -> RemovableHandle:
        """torch's deprecated backward hook. torch's gives the gradients with respect to the inputs of the module's
        last autograd node (for a Linear: the bias, the input and the weight's transpose); tensorwire's is the full
        hook (:meth:`register_full_backward_hook`: the gradients with respect to the module's inputs), with a
        FutureWarning saying so."""
        warnings.warn("register_backward_hook is deprecated: tensorwire runs it as register_full_backward_hook, whose "
                      "grad_input is the gradients with respect to the module's inputs (torch's deprecated hook gives "
                      "those of the inputs of the module's last operation). Use register_full_backward_hook.",
                      FutureWarning, stacklevel=2)
        return self.register_full_backward_hook(hook)

    # ------------------------------------------------------------------ registration
    def __setattr__(self, name: str, value) -> None:
        d = self.__dict__
        if (_register_attr(self, name, value, "_parameters", Parameter, "parameters", "parameter")
                or _register_attr(self, name, value, "_modules", Module, "module", "child module")):
            return
        if isinstance(value, Buffer):
            self.register_buffer(name, value.data, value.persistent)
            return
        bufs = d.get("_buffers")
        if bufs is not None and name in bufs:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                                "(tw.Tensor or None expected)")
            bufs[name] = value
            return
        if name in _STORES or name == _MIRRORS:  # a registry replaced: its later writes would not be seen
            _drop_mirrors(self)
        object.__setattr__(self, name, value)

    def _remove_from(self, name: str, keep: str) -> None:
        self.__dict__.pop(name, None)
        self.__dict__.get(_MIRRORS, set()).discard(name)
        for dname in _STORES:
            if dname != keep:
                self.__dict__[dname].pop(name, None)
        self._non_persistent_buffers_set.discard(name)

    def __getattr__(self, name: str):
        # (found here only when the instance dict does not mirror it: see _Registry; the three dicts in turn, unrolled)
        d = self.__dict__
        sub = d.get("_parameters")
        if sub is not None and name in sub:
            return sub[name]
        sub = d.get("_buffers")
        if sub is not None and name in sub:
            return sub[name]
        sub = d.get("_modules")
        if sub is not None and name in sub:
            return sub[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        for dname in ("_parameters", "_buffers", "_modules"):
            if name in self.__dict__.get(dname, {}):
                del self.__dict__[dname][name]
                self._non_persistent_buffers_set.discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers) | set(self._modules))

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        if "." in name or not name:
            raise KeyError(f'parameter name can\'t contain "." or be empty, got {name!r}')
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{type(param).__name__}' object to parameter '{name}' "
                            "(tw.nn.Parameter or None required)")
        if hasattr(self, name) and name not in self._parameters:
            raise KeyError(f"attribute '{name}' already exists")
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        if "." in name or not name:
            raise KeyError(f'buffer name can\'t contain "." or be empty, got {name!r}')
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer '{name}' "
                            "(tw.Tensor or None required)")
        own = name in self.__dict__ and name not in self.__dict__.get(_MIRRORS, ())
        if own or name in self._parameters or name in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        if "." in name or not name:
            raise KeyError(f'module name can\'t contain "." or be empty, got {name!r}')
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        self._modules[name] = module

    register_module = add_module

    def get_submodule(self, target: str) -> Module:
        mod = self
        if not target:
            return mod
        for item in target.split("."):
            if item not in mod._modules:
                raise AttributeError(f"{type(mod).__name__} has no attribute `{item}`")
            mod = mod._modules[item]
        return mod

    def get_parameter(self, target: str) -> Parameter:
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        if name not in mod._parameters:
            raise AttributeError(f"`{name}` is not an nn.Parameter")
        return mod._parameters[name]

    def get_buffer(self, target: str) -> Tensor:
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        if name not in mod._buffers:
            raise AttributeError(f"`{name}` is not a buffer")
        return mod._buffers[name]

    # ------------------------------------------------------------------ iteration
    def named_modules(self, memo: set | None = None, prefix: str = "", remove_duplicate: bool = True):
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is None:
                continue
            yield from m.named_modules(memo, prefix + ("." if prefix else "") + name, remove_duplicate)

    def modules(self, remove_duplicate: bool = True) -> Iterator[Module]:
        """This module and every submodule, depth first (a module reached twice: once, unless not
        ``remove_duplicate``)."""
        for _, m in self.named_modules(remove_duplicate=remove_duplicate):
            yield m

    def named_children(self):
        seen = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self) -> Iterator[Module]:
        for _, m in self.named_children():
            yield m

    def _named_members(self, get, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        seen = set()
        mods = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        for mprefix, m in mods:
            for k, v in get(m):
                if v is None or (remove_duplicate and id(v) in seen):
                    continue
                if remove_duplicate:
                    seen.add(id(v))
                yield mprefix + ("." if mprefix else "") + k, v

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        yield from self._named_members(lambda m: m._parameters.items(), prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        fast = _plain_parameters(self) if recurse and type(self).named_parameters is _NAMED_PARAMETERS else None
        if fast is not None:  # (what the walk below yields, without its names: read every step by training loops)
            yield from fast
            return
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        yield from self._named_members(lambda m: m._buffers.items(), prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    # ------------------------------------------------------------------ modes
    def train(self, mode: bool = True) -> Module:
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients of every parameter (``None`` by default, zeros with ``set_to_none=False``)."""
        for p in self.parameters():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad = zeros_like(p.grad)

    def apply(self, fn: Callable[[Module], None]) -> Module:
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # ------------------------------------------------------------------ conversion
    def _apply_tensors(self, fn: Callable[[Tensor], Tensor]) -> Module:
        """Replace every parameter's and buffer's value by ``fn(value)`` (the objects stay the same)."""
        with no_grad():
            for m in self.modules():
                for p in m._parameters.values():
                    if p is None:
                        continue
                    new = fn(p)
                    if new is not p:
                        rebind(p, alias(new))
                        if p.grad is not None:
                            g = fn(p.grad)
                            p.grad = g
                for b in m._buffers.values():
                    if b is None:
                        continue
                    new = fn(b)
                    if new is not b:
                        rebind(b, alias(new))
        return self

    def to(self, *args, **kwargs) -> Module:
        """``to(device)``, ``to(dtype)`` (floating parameters and buffers only, as torch), ``to(tensor)``;
        ``memory_format=`` (``tw.channels_last`` ...) is accepted and changes nothing: a worker's tensors are always
        contiguous."""
        device = kwargs.pop("device", None)
        dtype = kwargs.pop("dtype", None)
        kwargs.pop("non_blocking", None)
        memory_format = kwargs.pop("memory_format", None)
        if memory_format is not None and str(memory_format).removeprefix("torch.") not in (
                "contiguous_format", "channels_last", "channels_last_3d", "preserve_format"):
            raise TypeError(f"to() got an invalid memory_format: {memory_format!r} (one of tw.contiguous_format, "
                            "tw.channels_last, tw.channels_last_3d, tw.preserve_format)")
        if kwargs:
            raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
        for a in args:
            if isinstance(a, Tensor):
                device, dtype = a.device, a.dtype
            elif isinstance(a, D.DType) or (isinstance(a, str) and a in D.BY_NAME):
                dtype = a
            elif a is not None:
                device = a
        dt = D.get(dtype) if dtype is not None else None
        if dt is not None and not dt.is_floating_point:
            raise TypeError(f"nn.Module.to only accepts floating point dtypes, but got desired dtype={dt}")

        def conv(t: Tensor) -> Tensor:
            out = t
            if dt is not None and t.dtype.is_floating_point and t.dtype is not dt:
                out = out.to(dt)
            if device is not None:
                out = out.to(device)
            return out

        return self._apply_tensors(conv)

    def cpu(self) -> Module:
        return self.to("cpu:0")

    def cuda(self, device=None) -> Module:
        """Move every parameter and buffer to the cluster's ``cuda:N`` (default ``cuda:0``), as torch's
        ``Module.cuda``."""
        return self.to(cuda_device(device))

    def float(self) -> Module:
        return self.to(D.float32)

    def double(self) -> Module:
        return self.to(D.float64)

    def half(self) -> Module:
        return self.to(D.float16)

    def bfloat16(self) -> Module:
        return self.to(D.bfloat16)

    def type(self, dst_type) -> Module:
        return self.to(dst_type)

    # ------------------------------------------------------------------ state
    def state_dict(self, *args, destination=None, prefix: str = "", keep_vars: bool = False) -> OrderedDict:
        """Parameters and persistent buffers by dotted name, each value ``t.detach()`` as torch's: it shares in-place
        updates with the parameter or buffer both ways (``sd[k].copy_(x)`` changes the module, an optimizer step shows
        in ``sd``: ``copy.deepcopy`` it to keep a snapshot); ``keep_vars=True`` gives the objects themselves."""
        if args:  # torch's deprecated positional (destination, prefix, keep_vars)
            destination = args[0]
            if len(args) > 1:
                prefix = args[1]
            if len(args) > 2:
                keep_vars = args[2]
        if destination is None:
            destination = OrderedDict()
        for hook in self._state_dict_pre_hooks.values():
            hook(self, prefix, keep_vars)
        for name, p in self._parameters.items():
            if p is not None:
                destination[prefix + name] = p if keep_vars else p.detach()  # (shares updates: torch's EMA habits)
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = b if keep_vars else b.detach()
        for name, m in self._modules.items():
            if m is not None:
                m.state_dict(destination=destination, prefix=prefix + name + ".", keep_vars=keep_vars)
        return destination

    def _load_hook(self, state_dict: dict, prefix: str) -> None:
        """Subclasses may rewrite their part of ``state_dict`` before loading (old names ...)."""

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Copy values from ``state_dict`` (tensors, numpy arrays) into the parameters and buffers.

        With ``strict`` (default), missing or unexpected keys raise ``RuntimeError``; shapes must match.
        Values are moved to each parameter's device and cast to its dtype (``assign=True`` keeps the
        dtype of the loaded value, as torch). Returns ``(missing_keys, unexpected_keys)``.
        """
        if not hasattr(state_dict, "items"):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict).__name__}.")
        state_dict = OrderedDict(state_dict)
        for name, m in self.named_modules():
            m._load_hook(state_dict, name + "." if name else "")
        missing, errors = [], []
        expected = set()
        with no_grad():
            for mname, m in self.named_modules():
                pre = mname + "." if mname else ""
                local = [(k, p) for k, p in m._parameters.items() if p is not None]
                local += [(k, b) for k, b in m._buffers.items()
                          if b is not None and k not in m._non_persistent_buffers_set]
                for k, t in local:
                    key = pre + k
                    expected.add(key)
                    if key not in state_dict:
                        missing.append(key)
                        continue
                    v = state_dict[key]
                    shape = tuple(v.shape) if hasattr(v, "shape") else ()
                    if shape != tuple(t.shape):
                        errors.append(f"size mismatch for {key}: copying a param with shape {list(shape)} from "
                                      f"checkpoint, the shape in current model is {list(t.shape)}.")
                        continue
                    if assign and isinstance(v, Tensor):
                        new = v.to(device=t._dev)
                        rebind(t, alias(new) if new is v else new)
                    else:
                        set_value(t, v)
        unexpected = [k for k in state_dict if k not in expected]
        if strict:
            if unexpected:
                # (torch's lines, their trailing space included)
                errors.insert(0, "Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected) + ". ")
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ". ")
        if errors:
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t" + "\n\t".join(errors))
        return _IncompatibleKeys(missing, unexpected)

    # ------------------------------------------------------------------ copy, repr
    def __deepcopy__(self, memo):
        for t in itertools.chain(self.parameters(), self.buffers()):
            if id(t) not in memo:
                memo[id(t)] = (Parameter(t, t.requires_grad) if isinstance(t, Parameter) else alias(t))
        cls = type(self)
        new = cls.__new__(cls)
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            object.__setattr__(new, k, copy.deepcopy(v, memo))
        if _MIRRORS in self.__dict__:  # (the registries came back as plain dicts: the copy's own, mirrored again)
            _install_registries(new)
        return new

    def __getstate__(self):
        raise TypeError("tensorwire modules cannot be pickled; save their state_dict with tw.save")

    def extra_repr(self) -> str:
        return ""

    def _get_name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        lines = []
        extra = self.extra_repr()
        if extra:
            lines = extra.split("\n")
        child = []
        for key, m in self._modules.items():
            child.append("(" + key + "): " + _addindent(repr(m), 2))
        main = self._get_name() + "("
        if lines:
            if len(lines) == 1 and not child:
                main += lines[0]
            else:
                main += "\n  " + "\n  ".join(lines + child) + "\n"
        elif child:
            main += "\n  " + "\n  ".join(child) + "\n"
        return main + ")"


_MISSING = object()


def own_attr(m: Module, name: str):
    """``m.<name>`` for a module whose class defines no attribute ``name`` (the caller checks its class): the
    instance's own attribute, else its registered parameter, else the general lookup. It skips what ``m.<name>`` does
    first for a parameter: a failed look in the instance's dict, whose AttributeError (formatted, then dropped for
    ``__getattr__``) costs more than the rest of the lookup; layers read their parameters so on every call."""
    d = m.__dict__
    v = d.get(name, _MISSING)
    if v is _MISSING:
        v = d["_parameters"].get(name, _MISSING)
        if v is _MISSING:
            return getattr(m, name)
    return v


_NAMED_PARAMETERS = Module.named_parameters
_NAMED_MODULES = Module.named_modules
_NAMED_MEMBERS = Module._named_members


def _plain_parameters(root: Module) -> list | None:
    """``list(root.parameters())`` by a plain walk of the module tree (the order of :meth:`Module.named_modules`:
    each module before its children, a module or parameter seen before skipped), when no module in the tree overrides
    how the tree is walked; else None (the caller walks it as named). The list is kept (:data:`_KEPT`) and given
    again (not to be changed) until a registry of any module is written, when every module of the tree has
    :class:`_Registry` s (whose writes are seen): a training loop reads it twice a step (``zero_grad``, the update),
    and the walk costs as much as ~10 attribute lookups a module."""
    kept = _KEPT.get(id(root))
    if kept is not None and kept[0]() is root:
        return kept[1]
    counted = True
    out: list = []
    seen_p: set = set()
    seen_m: set = set()
    stack = [root]
    while stack:
        m = stack.pop()
        if id(m) in seen_m:
            continue
        tm = type(m)
        if tm.named_modules is not _NAMED_MODULES or tm._named_members is not _NAMED_MEMBERS:
            return None
        seen_m.add(id(m))
        params, mods = m._parameters, m._modules
        if type(params) is not _Registry or type(mods) is not _Registry:
            counted = False
        for p in params.values():
            if p is not None and id(p) not in seen_p:
                seen_p.add(id(p))
                out.append(p)
        subs = [c for c in mods.values() if c is not None]
        subs.reverse()
        stack += subs
    if counted:
        key = id(root)
        _KEPT[key] = (weakref.ref(root, lambda _, key=key: _KEPT.pop(key, None)), out)
    return out
